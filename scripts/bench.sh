#!/usr/bin/env bash
# Runs every benchmark in bench/ with its default (short) settings. Each prints a human summary
# and, as its last line, one JSON object; those lines are collected in var/bench/results.jsonl.
#   scripts/bench.sh [build-dir]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
mkdir -p var/bench
: > var/bench/results.jsonl
for bench in $(find "$build/bench" -maxdepth 1 -type f -perm -u+x -name '*_bench' | sort); do
  name=$(basename "$bench")
  echo "== $name"
  "$bench" | tee "var/bench/$name.log"
  tail -n 1 "var/bench/$name.log" >> var/bench/results.jsonl
done
echo "results: var/bench/results.jsonl"
