#!/usr/bin/env bash
# `make fuzz`: installs clang with libFuzzer, builds the harnesses of fuzz/ with ASan and UBSan
# in build-fuzz/, and runs each for FUZZ_SECONDS (default 60), one after the other, at nice 15.
# Each run starts from build-fuzz/corpus/<name>/, a scratch corpus seeded from the committed
# fuzz/corpus/<name>/ (which is never written), and keeps what it finds there for the next
# run; a crashing input is saved as build-fuzz/artifacts/<name>/crash-<sha1>. Prints per harness
# the executions, executions per second, new corpus units and whether it crashed; then runs the
# Python package's local tests over an ASan build of libfedcase_client (the tests run in place
# of executions); exits 1 when any harness crashed or those tests failed.
#
# Environment: FUZZ_SECONDS, FUZZ_HARNESSES (names, default all), JOBS (build parallelism),
# FUZZ_BUILD_DIR (default build-fuzz).
set -euo pipefail

cd "$(dirname "$0")/.."
seconds="${FUZZ_SECONDS:-60}"
build="${FUZZ_BUILD_DIR:-build-fuzz}"
jobs="${JOBS:-$(nproc)}"
harnesses="${FUZZ_HARNESSES:-blob torchscript protocol multipart job_config client_body http_request}"
export CCACHE_DIR="${CCACHE_DIR:-$PWD/.cache/ccache}"

bash scripts/install-deps.sh --fuzz
if [ ! -f "$build/build.ninja" ]; then
  nice -n 15 cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_COMPILER=clang++ -DFEDCASE_FUZZ=ON
fi
nice -n 15 cmake --build "$build" -j "$jobs" --target fuzzers

# The coordinator harnesses keep their SQLite files in $TMPDIR: in memory, fsyncs are free.
[ -d /dev/shm ] && export TMPDIR=/dev/shm
export FEDCASE_LOG=error
crashed=0
printf '%-14s %12s %10s %8s  %s\n' harness executions exec/s new result
for name in $harnesses; do
  corpus="$build/corpus/$name"
  artifacts="$build/artifacts/$name"
  log="$build/fuzz-$name.log"
  mkdir -p "$corpus" "$artifacts"
  cp -n fuzz/corpus/"$name"/* "$corpus"/
  dict=()
  [ -f "fuzz/$name.dict" ] && dict=(-dict="fuzz/$name.dict")
  status=0
  nice -n 15 "$build/fuzz/${name}_fuzz" -max_total_time="$seconds" -timeout=10 \
    -print_final_stats=1 -artifact_prefix="$artifacts/" "${dict[@]}" "$corpus" >"$log" 2>&1 ||
    status=$?
  stat() { sed -n "s/^stat::$1: *//p" "$log" | tail -1; }
  executions="$(stat number_of_executed_units)"
  # Without final stats (a crash), the last progress line "#N ..." counts the executions.
  [ -n "$executions" ] || executions="$(sed -n 's/^#\([0-9]*\).*/\1/p' "$log" | tail -1)"
  result="ok"
  if [ "$status" -ne 0 ]; then
    result="CRASHED (exit $status): see $log and $artifacts/"
    crashed=1
  fi
  printf '%-14s %12s %10s %8s  %s\n' "$name" "${executions:--}" \
    "$(stat average_exec_per_sec)" "$(stat new_units_added)" "$result"
done

# The Python package's local rounds (python/tests/test_local.py) over the ASan build of
# libfedcase_client: every array the package returns must own or reference its memory. The
# ASan runtime is preloaded into the interpreter; leaks are not checked (CPython does not free
# everything at exit).
nice -n 15 cmake --build "$build" -j "$jobs" --target fedcase_client_c read_plan_dump
log="$build/python-asan.log"
# read_plan_dump carries ASan linked in: it runs without the preloaded runtime.
dump="$build/read_plan_dump_unpreloaded"
printf '#!/bin/sh\nexec env -u LD_PRELOAD "%s" "$@"\n' "$PWD/$build/tests/client_sdk/read_plan_dump" \
  > "$dump"
chmod +x "$dump"
status=0
PYTHONPATH=python FEDCASE_CLIENT_LIBRARY="$build/client_sdk/libfedcase_client.so" \
  FEDCASE_READ_PLAN_DUMP="$dump" OMP_NUM_THREADS=1 \
  ASAN_OPTIONS=detect_leaks=0 LD_PRELOAD="$(clang++ -print-file-name=libclang_rt.asan-x86_64.so)" \
  nice -n 15 /usr/bin/python3 -m unittest python/tests/test_local.py >"$log" 2>&1 || status=$?
result="ok"
if [ "$status" -ne 0 ]; then
  result="FAILED (exit $status): see $log"
  crashed=1
fi
printf '%-14s %12s %10s %8s  %s\n' python-asan "$(sed -n 's/^Ran \([0-9]*\) tests.*/\1/p' "$log")" - - \
  "$result"
exit "$crashed"
