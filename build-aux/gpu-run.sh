#!/bin/bash
# run.sh — libmixprec's GPU checks from a prebuilt bundle (made by
# build-aux/gpu-bundle.sh), in one command of at most 8 minutes.
#
#   ./run.sh [--help]
#
# Runs from the bundle on a machine that provides what MANIFEST lists.
# Steps, each with a time cap (the caps add up to 480 s, so the whole run
# ends inside 8 minutes whatever hangs):
#   machine       nvidia-smi; whether a GPU is there                  10 s
#   loader        every program and plugin resolves its libraries;
#                 glibc is new enough                                 20 s
#   inspect       mixprec-inspect: the plugins load, none broken      20 s
#   device-cuda   test-device-cuda: kernels and optimizers on the
#                 GPU bitwise against the CPU's, every optimizer state
#                 and master format of revision 3 included            80 s
#   comm-nccl     test-comm-nccl: NCCL collectives, one rank          60 s
#   nccl-2proc    two NCCL ranks on one GPU: NCCL refuses a communicator
#                 with two ranks on one device, so with one GPU this
#                 is a skip that says so                               0 s
#   engine-cuda   test-engine-device on "cuda": whole training runs,
#                 offloaded optimizer included, bitwise against cpu   90 s
#   fp8-cuda      test-fp8-engine's device cases on "cuda"            60 s
#   bench-adamw   bench-adamw-cuda at 10M, 100M, 1B parameters beside
#                 a device-to-device copy (50 steps, best of 5)       80 s
#   torch-adamw   the same step by torch's fused AdamW in the Python
#                 that has torch (plain script, no GObject)           60 s
# and a comparison table. Sizes and repetitions are chosen so that each
# step takes a small part of its cap on an H100 (1B parameters: 28 GB of
# traffic a step, about 10 ms at 3 TB/s).
#
# Results go to $OUT when set, else to ./results beside this script:
# summary.md, logs.txt (every step's log, one after the other) and
# results.tar.gz (the same logs and the benchmarks' JSON lines as files).
# Every step runs even when an earlier one failed. Exit status: 0 when every step passed; 77 when none failed but
# the GPU steps were skipped (no GPU, no driver, no NCCL: "skipped, not
# failed"); 1 when any step failed. On a machine with a GPU a GPU test
# that skips is a failure. A test that reports itself incomplete (TAP
# "not ok ... # TODO": a known gap of a plugin, not a wrong result) does
# not fail the run; summary.md lists each one under "Known gaps".
#
# Environment: OUT; NCCL_LIBDIR (the folder of libnccl.so.2; default: the
# nvidia-nccl package of PYTHON_TORCH, /opt/torch/.venv/bin/python3 or
# python3); PYTHON_TORCH.
set -uo pipefail

case ${1:-} in
  -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  "") ;;
  *) echo "run.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
esac

here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-"$here/results"}
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/mixprec-gpu-XXXXXX")
trap 'rm -rf "$work"' EXIT
# Each step's log and data land here; $OUT gets three files at the end
# (a borrowed machine hands back only a few).
logs=$work/logs
mkdir -p "$logs" "$work/cwd"

rows=()
gaps=()
failed=0
skipped=0

# record STEP RESULT SECONDS DETAIL
record() {
  rows+=("| $1 | $2 | $3 | ${4//|/\\|} |")
  case $2 in
    FAIL) failed=$((failed + 1)) ;;
    SKIP) skipped=$((skipped + 1)) ;;
  esac
  printf '== %s: %s (%s s) %s\n' "$1" "$2" "$3" "$4"
}

# ------------------------------------------------------------ environment
export LD_LIBRARY_PATH="$here/lib"
export MIXPREC_TOP_BUILDDIR="$here"
export MIXPREC_PLUGIN_PATH="$here/plugins/.libs"
export MIXPREC_PLUGIN_SYSTEM_PATH=""
export G_TEST_BUILDDIR="$here/tests"
export G_TEST_SRCDIR="$here/tests"

# ------------------------------------------------------------ machine
start=$SECONDS
gpus=0
if command -v nvidia-smi >/dev/null 2>&1; then
  timeout -k 2 10 nvidia-smi > "$logs/nvidia-smi.txt" 2>&1
  timeout -k 2 10 nvidia-smi -L >> "$logs/nvidia-smi.txt" 2>&1
  gpus=$(grep -c '^GPU [0-9]' "$logs/nvidia-smi.txt")
fi
if [ "$gpus" -gt 0 ]; then
  gpu_name=$(timeout 10 nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -n 1)
  record machine PASS $((SECONDS - start)) "$gpus GPU(s): $gpu_name"
  export MIXPREC_REQUIRE_GPU=1
else
  gpu_name="none"
  record machine SKIP $((SECONDS - start)) "no GPU: nvidia-smi is missing or lists none"
fi

# ------------------------------------------------------------ NCCL
nccl_dir=${NCCL_LIBDIR:-}
python_torch=""
for py in "${PYTHON_TORCH:-}" /opt/torch/.venv/bin/python3 python3; do
  if [ -n "$py" ] && command -v "$py" >/dev/null 2>&1 &&
     env -u LD_LIBRARY_PATH "$py" -c 'import torch' >/dev/null 2>&1; then
    python_torch=$py
    break
  fi
done
if [ -z "$nccl_dir" ] && [ -n "$python_torch" ]; then
  # The nvidia-nccl wheel's library, wherever its release laid it out
  # (nvidia/nccl/lib, nvidia/cu13/lib, ...).
  nccl_dir=$(env -u LD_LIBRARY_PATH "$python_torch" -c '
import glob, os, site
for sp in site.getsitepackages():
    for p in sorted(glob.glob(os.path.join(sp, "nvidia", "**", "libnccl.so.2"), recursive=True)):
        print(os.path.dirname(p))
        raise SystemExit' 2>/dev/null)
fi
if [ -n "$nccl_dir" ] && [ -e "$nccl_dir/libnccl.so.2" ]; then
  LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$nccl_dir"
  have_nccl=yes
else
  have_nccl=no
fi

# ------------------------------------------------------------ loader
start=$SECONDS
glibc_needed=$(sed -n 's/^provided: glibc >= //p' "$here/MANIFEST")
glibc_here=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{ print $2 }')
missing=""
: > "$logs/loader.log"
while IFS= read -r -d '' f; do
  head -c 4 "$f" | grep -q ELF || continue
  echo "-- ${f#"$here"/}" >> "$logs/loader.log"
  timeout 10 ldd "$f" >> "$logs/loader.log" 2>&1
  for lib in $(timeout 10 ldd "$f" 2>/dev/null | awk '/not found/ { print $1 }'); do
    case $lib in
      libcuda.so.1) ;;
      libnccl.so.2) [ "$have_nccl" = yes ] || continue ;&
      *) missing="$missing ${f#"$here"/}:$lib" ;;
    esac
  done
done < <(find "$here/lib" "$here/plugins" "$here/tests" "$here/tools" "$here/bench" -type f -print0)
if [ -z "$glibc_here" ] || [ "$(printf '%s\n%s\n' "$glibc_needed" "$glibc_here" | sort -V | head -n 1)" != "$glibc_needed" ]; then
  record loader FAIL $((SECONDS - start)) "glibc ${glibc_here:-unknown} here, the bundle needs $glibc_needed"
elif [ -n "$missing" ]; then
  record loader FAIL $((SECONDS - start)) "unresolved:$missing (see loader.log)"
elif [ "$have_nccl" = no ]; then
  record loader PASS $((SECONDS - start)) "glibc $glibc_here; every library resolves but libnccl.so.2 (no NCCL found: set NCCL_LIBDIR)"
else
  record loader PASS $((SECONDS - start)) "glibc $glibc_here; NCCL from $nccl_dir"
fi

# ------------------------------------------------------------ inspect
start=$SECONDS
timeout -k 2 20 "$here/tools/mixprec-inspect" > "$logs/inspect.log" 2>&1
status=$?
# The plugins that failed to load; without NCCL the NCCL plugin cannot.
broken=$(sed -n '/^Failed to load/,$p' "$logs/inspect.log" | sed -n 's|^ *\(/.*\)|\1|p')
[ "$have_nccl" = yes ] || broken=$(echo "$broken" | grep -v 'mixprec-comm-nccl\.so: .*libnccl\.so\.2')
if [ $status -ne 0 ]; then
  record inspect FAIL $((SECONDS - start)) "mixprec-inspect exited with $status (see inspect.log)"
elif [ -n "$broken" ]; then
  record inspect FAIL $((SECONDS - start)) "a plugin did not load: $(echo "$broken" | head -n 1)"
else
  record inspect PASS $((SECONDS - start)) "$(grep '^Total count' "$logs/inspect.log")$([ "$have_nccl" = yes ] || echo ', comm-nccl left out: no NCCL')"
fi

# ------------------------------------------------------------ GPU tests
# gtest NAME CAP REQUIRED-SKIP-PATTERN PROGRAM [ARGS...]: runs a GTest
# program with TAP output; on a GPU machine a skip of a test whose path
# matches the pattern is a failure.
gtest() {
  local name=$1 cap=$2 gpu_paths=$3 status detail oks nots skips gpu_skips todos
  shift 3
  start=$SECONDS
  (cd "$work/cwd" && timeout -k 5 "$cap" "$@" --tap) > "$logs/$name.log" 2>&1
  status=$?
  oks=$(grep -c '^ok ' "$logs/$name.log")
  nots=$(grep '^not ok ' "$logs/$name.log" | grep -vc '# TODO')
  todos=$(grep -c '^not ok .*# TODO' "$logs/$name.log")
  while IFS= read -r line; do
    gaps+=("$name: ${line#not ok }")
  done < <(grep '^not ok .*# TODO' "$logs/$name.log")
  skips=$(grep -c '^ok .*# SKIP' "$logs/$name.log")
  gpu_skips=$(grep '^ok .*# SKIP' "$logs/$name.log" | grep -c -E "$gpu_paths")
  detail="$((oks - skips)) passed, $nots failed, $skips skipped"
  [ "$todos" -eq 0 ] || detail="$detail, $todos incomplete (known gaps)"
  if [ $status -eq 124 ] || [ $status -eq 137 ]; then
    record "$name" FAIL $((SECONDS - start)) "timed out after $cap s; $detail (see $name.log)"
  elif [ $status -ne 0 ] || [ "$nots" -gt 0 ]; then
    record "$name" FAIL $((SECONDS - start)) "exit $status; $detail; $(grep -m 1 -E '^not ok|ERROR|Bail out' "$logs/$name.log")"
  elif [ "$gpus" -gt 0 ] && [ "$gpu_skips" -gt 0 ]; then
    record "$name" FAIL $((SECONDS - start)) "$detail: GPU tests skipped on a GPU machine: $(grep -m 1 '# SKIP' "$logs/$name.log")"
  elif [ "$gpu_skips" -gt 0 ]; then
    record "$name" SKIP $((SECONDS - start)) "$detail: $(grep '# SKIP' "$logs/$name.log" | grep -m 1 -E "$gpu_paths" | sed 's/.*# SKIP //')"
  else
    record "$name" PASS $((SECONDS - start)) "$detail"
  fi
}

gtest device-cuda 80 '/gpu/' "$here/tests/test-device-cuda"
if [ "$have_nccl" = yes ]; then
  gtest comm-nccl 60 '/gpu/' "$here/tests/test-comm-nccl"
else
  record comm-nccl SKIP 0 "no libnccl.so.2: no Python with the nvidia-nccl package and no NCCL_LIBDIR"
fi
if [ "$gpus" -ge 2 ]; then
  record nccl-2proc SKIP 0 "$gpus GPUs, but the bundle has no two-rank NCCL program yet"
elif [ "$gpus" -eq 1 ]; then
  record nccl-2proc SKIP 0 "one GPU: NCCL refuses two ranks of one communicator on one device (ncclInvalidUsage, duplicate GPU)"
else
  record nccl-2proc SKIP 0 "no GPU"
fi
MIXPREC_TEST_DEVICE=cuda gtest engine-cuda 90 '.' "$here/tests/test-engine-device"
MIXPREC_TEST_DEVICE=cuda gtest fp8-cuda 60 '.' "$here/tests/test-fp8-engine"

# ------------------------------------------------------------ benchmarks
# bench_result STEP STATUS LOG PASS-DETAIL: a benchmark's exit status as
# the step's result; 77 is its "no usable GPU", a failure where one is.
bench_result() {
  local last
  last=$(tail -n 1 "$logs/$3")
  case $2 in
    0) record "$1" PASS $((SECONDS - start)) "$4" ;;
    77) if [ "$gpus" -gt 0 ]; then
          record "$1" FAIL $((SECONDS - start)) "skipped on a GPU machine: $last"
        else
          record "$1" SKIP $((SECONDS - start)) "$last"
        fi ;;
    *) record "$1" FAIL $((SECONDS - start)) "exit $2 (see $3): $last" ;;
  esac
}

start=$SECONDS
timeout -k 5 80 "$here/bench/bench-adamw-cuda" --plugin-path "$here/plugins/.libs" --sizes 10M,100M,1B \
  --json "$logs/adamw-cuda.jsonl" > "$logs/bench-adamw-cuda.txt" 2>&1
status=$?
bench_result bench-adamw $status bench-adamw-cuda.txt \
  "$(grep -c '"bench": *"adamw-cuda"' "$logs/adamw-cuda.jsonl" 2>/dev/null) rows"

start=$SECONDS
if [ -z "$python_torch" ]; then
  record torch-adamw SKIP 0 "no Python with torch (set PYTHON_TORCH)"
else
  env -u LD_LIBRARY_PATH timeout -k 5 60 "$python_torch" "$here/bench/adamw-torch-cuda.py" --sizes 10M,100M,1B \
    --json "$logs/adamw-torch-cuda.jsonl" > "$logs/adamw-torch-cuda.txt" 2>&1
  status=$?
  bench_result torch-adamw $status adamw-torch-cuda.txt \
    "$(env -u LD_LIBRARY_PATH "$python_torch" -c 'import torch; print("torch", torch.__version__)' 2>/dev/null)"
fi

# ------------------------------------------------------------ summary
comparison=""
if [ -s "$logs/adamw-cuda.jsonl" ] && [ -n "$python_torch" ]; then
  comparison=$(env -u LD_LIBRARY_PATH "$python_torch" "$here/bench/adamw-cuda-compare.py" \
                 "$logs/adamw-cuda.jsonl" "$logs/adamw-torch-cuda.jsonl")
fi

if [ "$failed" -gt 0 ]; then verdict="FAIL ($failed failed)"; code=1
elif [ "$skipped" -gt 0 ] && [ "$gpus" -eq 0 ]; then verdict="SKIPPED, not failed (no GPU)"; code=77
elif [ "$skipped" -gt 0 ]; then verdict="PASS ($skipped skipped)"; code=0
else verdict="PASS"; code=0
fi
{
  echo "# libmixprec GPU checks"
  echo
  sed -n 's/^commit: /- bundle commit: /p; s/^built: /- built: /p; s/^cuda: /- CUDA: /p' "$here/MANIFEST"
  echo "- date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
  echo "- GPU: $gpu_name"
  echo "- NCCL: ${nccl_dir:-none}"
  echo
  echo "| step | result | s | detail |"
  echo "|---|---|---:|---|"
  printf '%s\n' "${rows[@]}"
  echo
  if [ ${#gaps[@]} -gt 0 ]; then
    echo "## Known gaps (tests that report themselves incomplete)"
    echo
    printf -- '- %s\n' "${gaps[@]}"
    echo
  fi
  if [ -n "$comparison" ]; then
    echo "$comparison"
    echo
  fi
  echo "verdict: $verdict"
} > "$logs/summary.md"
cp "$logs/summary.md" "$out/summary.md"
for f in "$logs"/*; do
  printf '\n===== %s\n' "$(basename "$f")"
  cat "$f"
done > "$out/logs.txt"
tar -C "$logs" -czf "$out/results.tar.gz" .
cat "$out/summary.md"
exit $code
