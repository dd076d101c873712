#!/usr/bin/env python3
"""Checks every lock the code takes with clang's thread-safety analysis.

Compiles, with clang++ -fsyntax-only -Wthread-safety -Werror and each file's own flags from
the build's compile_commands.json, every translation unit that takes a lock itself or includes a
header that does, so that touching a FEDCASE_GUARDED_BY member without its lock, or
calling a FEDCASE_REQUIRES function without it, fails. First it makes sure that the check
bites: tests/thread_safety/unguarded.cpp, which reads a guarded member without its lock, must
be refused.

Usage: scripts/thread_safety.py BUILD_DIR   (a test of `make test`)
"""
import concurrent.futures
import json
import os
import re
import shlex
import subprocess
import sys

SOURCE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHECK = ["-fsyntax-only", "-Wthread-safety", "-Wthread-safety-beta", "-Werror=thread-safety",
         "-Werror=thread-safety-beta", "-Wno-unknown-warning-option"]
USES_LOCKS = re.compile(r"\b(MutexLock|CondVar|FEDCASE_GUARDED_BY|FEDCASE_REQUIRES)\b")
# GCC options clang does not know.
GCC_ONLY = re.compile(r"^-(fno-semantic-interposition|fconserve-stack|Wno-maybe-uninitialized)$")


INCLUDE = re.compile(r'^#include "([^"]+)"', re.M)


def takes_locks(path):
    if not os.path.exists(path):
        return False
    with open(path, encoding="utf-8", errors="replace") as f:
        return bool(USES_LOCKS.search(f.read()))


def uses_locks(path):
    """Whether `path`, or a project header it includes itself, takes a lock (the code that a
    header's own users include is checked where that header is included directly)."""
    if takes_locks(path):
        return True
    with open(path, encoding="utf-8", errors="replace") as f:
        headers = INCLUDE.findall(f.read())
    return any(takes_locks(os.path.join(SOURCE, h)) for h in headers if h != "common/mutex.h")


def clang_command(entry):
    args = entry["arguments"] if "arguments" in entry else shlex.split(entry["command"])
    out = ["clang++"]
    skip = False
    for arg in args[1:]:
        if skip:
            skip = False
            continue
        if arg == "-o":
            skip = True
            continue
        if arg == "-c" or GCC_ONLY.match(arg):
            continue
        out.append(arg)
    return out + CHECK


def run(command, cwd):
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True)
    return done.returncode, done.stderr


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    if subprocess.run(["which", "clang++"], capture_output=True).returncode != 0:
        sys.exit("thread_safety: clang++ not found (scripts/install-deps.sh installs it)")
    build = os.path.abspath(sys.argv[1])
    with open(os.path.join(build, "compile_commands.json")) as f:
        entries = json.load(f)
    units = [e for e in entries
             if e["file"].startswith(SOURCE) and "/build" not in e["file"][len(SOURCE):]
             and uses_locks(e["file"])]
    if not units:
        sys.exit("thread_safety: no translation unit takes a lock: wrong build folder?")

    probe = dict(units[0])
    bad = os.path.join(SOURCE, "tests", "thread_safety", "unguarded.cpp")
    command = [a for a in clang_command(probe) if a != probe["file"]] + [bad]
    code, _ = run(command, probe["directory"])
    if code == 0:
        sys.exit("thread_safety: clang accepted an unguarded access (" + bad + "): the check does "
                 "not bite")
    print("thread_safety: an unguarded access is refused, as it must be")

    failed = 0
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        results = pool.map(lambda e: (e["file"], *run(clang_command(e), e["directory"])), units)
        for path, code, errors in results:
            if code != 0:
                failed += 1
                print("thread_safety: FAILED " + os.path.relpath(path, SOURCE) + "\n" + errors)
    print("thread_safety: %d files checked, %d with errors" % (len(units), failed))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
