#!/bin/bash
# run-fuzzers.sh — runs libFuzzer targets of tests/fuzz/, each for a time,
# on a copy of its seed corpus (the seeds in the source tree stay as they
# are), one after another or N at a time, and says how long each ran and
# whether it found anything.
#
#   tests/fuzz/run-fuzzers.sh [--seconds S] [--cpu-seconds C] [--jobs N]
#                             [--seeds DIR] [--work DIR] PROGRAM...
#
# --seconds is wall-clock time per target. --cpu-seconds C runs each
# target again on its grown corpus until its runs have used C seconds of
# CPU (user + system), whatever else loads the machine, so that a
# campaign's "ten CPU-minutes" are ten.
#
# PROGRAM is a built target (tests/fuzz/fuzz-NAME); its seeds are
# DIR/NAME/ (default: the seeds/ folder beside this script). Each run's
# corpus and log stay in --work (default: a temporary folder, removed
# after a clean run). A crash, leak, timeout or sanitizer report leaves
# its reproducer (crash-*, leak-*, timeout-*) in the work folder and makes
# the exit status 1. Prints one line per target and a closing
# "N passed, N failed" line.
set -uo pipefail

seconds=5
cpu_seconds=0
jobs=1
seeds=$(cd "$(dirname "$0")" && pwd)/seeds
work=""
programs=()
while [ $# -gt 0 ]; do
  case $1 in
    --seconds) seconds=$2; shift ;;
    --cpu-seconds) cpu_seconds=$2; shift ;;
    --jobs) jobs=$2; shift ;;
    --seeds) seeds=$2; shift ;;
    --work) work=$2; shift ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "run-fuzzers: unknown option '$1' (see --help)" >&2; exit 2 ;;
    *) programs+=("$1") ;;
  esac
  shift
done
[ ${#programs[@]} -gt 0 ] || { echo "run-fuzzers: no fuzz program named (see --help)" >&2; exit 2; }
keep=yes
if [ -z "$work" ]; then
  work=$(mktemp -d "${TMPDIR:-/tmp}/mixprec-fuzz-XXXXXX")
  keep=no
fi
mkdir -p "$work"

# Sets cpu to the CPU seconds (user + system, whole) the children of this
# shell used. Called as a plain command, never in $( ): a subshell has
# no children of its own, and neither has a pipe's.
children_cpu() {
  times > "$dir/times"
  cpu=$(tail -n 1 "$dir/times" | awk '{
    t = 0
    for (i = 1; i <= 2; i++) { split($i, a, /[ms]/); t += a[1] * 60 + a[2] }
    printf "%d\n", t }')
}

# run_one PROGRAM: one target's runs; its verdict in $work/NAME.result.
run_one() {
  local program=$1 name dir status started cpu runs total_runs=0 rounds=0 left
  name=$(basename "$program"); name=${name#fuzz-}
  dir=$work/$name
  mkdir -p "$dir/corpus" "$dir/artifacts"
  [ -d "$seeds/$name" ] && cp -a "$seeds/$name/." "$dir/corpus/"
  started=$SECONDS
  : > "$dir/log"
  while :; do
    left=$seconds
    if [ "$cpu_seconds" -gt 0 ]; then
      children_cpu
      left=$((cpu_seconds - cpu))
      [ "$left" -lt 5 ] && left=5
    fi
    ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1} \
    UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
      "$program" -max_total_time="$left" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
        -print_final_stats=1 -artifact_prefix="$dir/artifacts/" "$dir/corpus" >> "$dir/log" 2>&1
    status=$?
    rounds=$((rounds + 1))
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$dir/log" | tail -n 1)
    total_runs=$((total_runs + ${runs:-0}))
    [ $status -eq 0 ] && [ -z "$(ls -A "$dir/artifacts")" ] || break
    children_cpu
    [ "$cpu_seconds" -gt 0 ] && [ "$cpu" -lt "$cpu_seconds" ] || break
  done
  if [ $status -eq 0 ] && [ -z "$(ls -A "$dir/artifacts")" ]; then
    echo "PASS $name: $((SECONDS - started)) s, $cpu CPU-s, $total_runs runs in $rounds round(s), corpus $(ls "$dir/corpus" | wc -l)" > "$work/$name.result"
  else
    echo "FAIL $name: exit $status after $((SECONDS - started)) s: $(grep -m 1 -E 'ERROR|SUMMARY|deadly|Abort' "$dir/log") (artifacts in $dir/artifacts, log $dir/log)" > "$work/$name.result"
  fi
}

running=0
for p in "${programs[@]}"; do
  [ -x "$p" ] || { echo "run-fuzzers: $p is not a built program" >&2; exit 2; }
  run_one "$p" &
  running=$((running + 1))
  if [ "$running" -ge "$jobs" ]; then wait -n; running=$((running - 1)); fi
done
wait

passed=0
failed=0
for p in "${programs[@]}"; do
  name=$(basename "$p"); name=${name#fuzz-}
  cat "$work/$name.result"
  case $(cut -d' ' -f1 "$work/$name.result") in
    PASS) passed=$((passed + 1)) ;;
    *) failed=$((failed + 1)) ;;
  esac
done
echo "$passed passed, $failed failed"
if [ "$failed" -eq 0 ] && [ "$keep" = no ]; then rm -rf "$work"; fi
[ "$failed" -eq 0 ]
