#!/bin/bash
# run-gpu-checks.sh — everything libmixprec has to check on a CUDA machine,
# in one command: build, GPU tests, the fused AdamW benchmark and its
# PyTorch peer.
#
#   build-aux/run-gpu-checks.sh [--install-deps] [--no-build] [--no-torch]
#
# Run from anywhere on a Debian 12 machine with CUDA in /usr/local/cuda (or
# $CUDA_PREFIX) that can install this project's build dependencies. For a
# borrowed GPU machine that cannot (no apt, no GLib), build a bundle here
# and run only that there:
#
#   build-aux/gpu-bundle.sh            (here: builds and packs _gpu/)
#   OUT=DIR _gpu/run.sh                (there: one command, at most 8 min)
#
# then read DIR/summary.md (README.md, "Checking on a GPU"). Steps of
# this script:
#   1. with --install-deps (or when the build tools are missing and this
#      user is root or has password-less sudo): build-aux/install-deps.sh;
#   2. ./autogen.sh when configure is missing or older than configure.ac,
#      configure --enable-werror in _build/gpu when it has no Makefile
#      yet, make -j (skipped with --no-build: the tree is already built);
#   3. make check with TESTS= the GPU tests that exist (test-device-cuda,
#      test-comm-nccl, test-engine-cuda.sh, test-fp8-engine-cuda.sh,
#      test-gpt2-cuda.sh: examples/gpt2 on the GPU against the CPU) and
#      MIXPREC_REQUIRE_GPU=1: here a skipped test is a failure;
#   4. bench/bench-adamw-cuda at 10M, 100M and 1B parameters;
#   5. bench/adamw-torch-cuda.py with a Python whose torch sees the GPU:
#      $PYTHON_TORCH, else _build/venv-gpu (created with pip install torch
#      when missing and the network allows), else python3 — left out, with
#      a note, when none works or with --no-torch;
#   6. a markdown table comparing the two.
#
# Results (logs, JSON lines, summary.md) go to $OUT when set, else to
# _build/gpu-results. Every step runs even after an earlier one failed
# (when it can), so one run on a borrowed GPU gathers all there is to see;
# the exit status is 0 only when the build, every GPU test and the
# benchmark passed.
#
# Environment: BUILDDIR (default _build/gpu), CUDA_PREFIX (default
# /usr/local/cuda), CONFIGURE_FLAGS (added to configure's), JOBS (default:
# the number of CPUs), SIZES (default 10M,100M,1B), BENCH_FLAGS (added to
# both benchmarks'), PYTHON_TORCH, TORCH_PIP_SPEC (default torch).
set -euo pipefail

srcdir=$(cd "$(dirname "$0")/.." && pwd)
builddir=${BUILDDIR:-"$srcdir/_build/gpu"}
results=${OUT:-"$srcdir/_build/gpu-results"}
cuda_prefix=${CUDA_PREFIX:-/usr/local/cuda}
jobs=${JOBS:-$(nproc 2>/dev/null || echo 4)}
sizes=${SIZES:-10M,100M,1B}
bench_flags=${BENCH_FLAGS:-}
gpu_tests="tests/test-device-cuda tests/test-comm-nccl tests/test-engine-cuda.sh tests/test-fp8-engine-cuda.sh tests/test-gpt2-cuda.sh"

install_deps=auto
build=yes
torch=yes
for arg in "$@"; do
  case $arg in
    --install-deps) install_deps=yes ;;
    --no-build) build=no ;;
    --no-torch) torch=no ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "run-gpu-checks: unknown argument '$arg' (see --help)" >&2; exit 2 ;;
  esac
done

mkdir -p "$results"
results=$(cd "$results" && pwd)
failures=()
notes=()

say() { printf '\n== %s\n' "$*"; }
fail() { echo "run-gpu-checks: FAILED: $*" >&2; failures+=("$*"); }
note() { echo "run-gpu-checks: note: $*"; notes+=("$*"); }

# Runs "$@" with its output in $results/$log (and on the terminal); the
# status is the command's.
logged() {
  local log=$1; shift
  set +e
  "$@" 2>&1 | tee "$results/$log"
  local status=${PIPESTATUS[0]}
  set -e
  return "$status"
}

# Prints the summary and exits with the verdict.
finish() {
  {
    echo "# libmixprec GPU checks"
    echo
    echo "- date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
    if commit=$(git -C "$srcdir" rev-parse --short HEAD 2>/dev/null); then
      git -C "$srcdir" diff --quiet HEAD 2>/dev/null || commit="$commit (with local changes)"
      echo "- commit: $commit"
    fi
    echo "- GPU: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -n 1 || echo unknown)"
    echo
    if [ -s "$results/comparison.md" ]; then
      cat "$results/comparison.md"
      echo
    fi
    for n in "${notes[@]+"${notes[@]}"}"; do echo "- note: $n"; done
    for f in "${failures[@]+"${failures[@]}"}"; do echo "- FAILED: $f"; done
    if [ ${#failures[@]} -eq 0 ]; then echo "- verdict: PASS"; else echo "- verdict: FAIL"; fi
  } > "$results/summary.md"
  say "summary ($results/summary.md)"
  cat "$results/summary.md"
  if [ ${#failures[@]} -eq 0 ]; then exit 0; else exit 1; fi
}

# ------------------------------------------------------------ the machine
say "machine"
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi 2>&1 | tee "$results/nvidia-smi.txt" || fail "nvidia-smi failed: no usable driver or GPU"
else
  fail "no nvidia-smi: this machine has no NVIDIA driver, so every GPU check would skip"
fi
if [ ! -x "$cuda_prefix/bin/nvcc" ]; then
  fail "no nvcc in $cuda_prefix/bin: install the CUDA toolkit there or set CUDA_PREFIX"
  finish
fi
"$cuda_prefix/bin/nvcc" --version | tail -n 2

# ------------------------------------------------------------ dependencies
can_be_root() { [ "$(id -u)" = 0 ] || sudo -n true 2>/dev/null; }
tools_missing() {
  ! command -v autoreconf >/dev/null 2>&1 || ! command -v pkg-config >/dev/null 2>&1 ||
    ! pkg-config --exists glib-2.0 gobject-2.0 gmodule-2.0 json-glib-1.0
}
if [ "$build" = yes ]; then
  if [ "$install_deps" = yes ] || { [ "$install_deps" = auto ] && tools_missing && can_be_root; }; then
    say "installing dependencies (build-aux/install-deps.sh)"
    logged install-deps.log sh "$srcdir/build-aux/install-deps.sh" ||
      fail "build-aux/install-deps.sh failed (see install-deps.log); going on with what is installed"
  fi
  if tools_missing; then
    fail "autoreconf, pkg-config, GLib or json-glib is missing: run build-aux/install-deps.sh as root (or with sudo)"
    finish
  fi
fi

# ------------------------------------------------------------ build
if [ "$build" = yes ]; then
  say "build in $builddir"
  if [ ! -x "$srcdir/configure" ] || [ "$srcdir/configure.ac" -nt "$srcdir/configure" ]; then
    logged autogen.log "$srcdir/autogen.sh" || { fail "./autogen.sh failed (see autogen.log)"; finish; }
  fi
  mkdir -p "$builddir"
  if [ ! -f "$builddir/Makefile" ]; then
    # shellcheck disable=SC2086 # CONFIGURE_FLAGS is a list of words
    (cd "$builddir" && logged configure.log "$srcdir/configure" --enable-werror \
       --with-cuda="$cuda_prefix" ${CONFIGURE_FLAGS:-}) ||
      { fail "configure failed (see configure.log)"; finish; }
  fi
  (cd "$builddir" && logged make.log make -j"$jobs") || { fail "make failed (see make.log)"; finish; }
elif [ ! -f "$builddir/Makefile" ]; then
  fail "--no-build: $builddir has no Makefile; run once without --no-build"
  finish
fi
if ! grep -q '^NVCC = /' "$builddir/Makefile"; then
  fail "configure in $builddir did not find CUDA (NVCC is not set): the CUDA plugins were not built; remove $builddir or reconfigure with --with-cuda=DIR"
fi

# ------------------------------------------------------------ GPU tests
say "GPU tests"
tests=""
for t in $gpu_tests; do
  if grep -q "$t\\b" "$srcdir/tests/local.mk"; then
    tests="$tests $t"
  else
    note "$t does not exist in tests/local.mk: not run"
  fi
done
tests=${tests# }
if [ -z "$tests" ]; then
  fail "none of the GPU tests ($gpu_tests) exists"
else
  export MIXPREC_REQUIRE_GPU=1
  (cd "$builddir" && logged check.log make -j"$jobs" check TESTS="$tests") ||
    fail "make check TESTS=\"$tests\" failed (see check.log and tests/*.log)"
  for t in $tests; do
    for f in "$builddir/$t.log" "$builddir/$t.trs"; do
      [ -f "$f" ] && cp "$f" "$results/$(basename "$t").${f##*.}"
    done
    if [ ! -f "$builddir/$t.trs" ]; then
      fail "$t did not run (no $t.trs)"
    elif grep -q '^:test-result: SKIP' "$builddir/$t.trs" ||
         grep -Eq '^ok .*# (SKIP|skip)' "$builddir/$t.log" 2>/dev/null; then
      fail "$t skipped tests on a GPU machine (see $(basename "$t").log): a skip here means the GPU was not used"
    fi
  done
fi

# ------------------------------------------------------------ benchmark
say "bench-adamw-cuda"
ours_json="$results/adamw-cuda.jsonl"
rm -f "$ours_json"
if (cd "$builddir" && logged make-bench.log make -j"$jobs" bench/bench-adamw-cuda); then
  status=0
  # shellcheck disable=SC2086 # BENCH_FLAGS is a list of words
  MIXPREC_PLUGIN_PATH="$builddir/plugins" MIXPREC_PLUGIN_SYSTEM_PATH="" \
    logged bench-adamw-cuda.txt "$builddir/bench/bench-adamw-cuda" --sizes "$sizes" \
    --json "$ours_json" $bench_flags || status=$?
  case $status in
    0) ;;
    77) fail "bench-adamw-cuda skipped on a GPU machine (see bench-adamw-cuda.txt)" ;;
    *) fail "bench-adamw-cuda exited with status $status (see bench-adamw-cuda.txt)" ;;
  esac
else
  fail "make bench/bench-adamw-cuda failed (see make-bench.log)"
fi

# ------------------------------------------------------------ PyTorch peer
torch_ok() { "$1" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' >/dev/null 2>&1; }
python_torch=""
if [ "$torch" = yes ]; then
  say "PyTorch peer (bench/adamw-torch-cuda.py)"
  venv="$srcdir/_build/venv-gpu"
  for candidate in "${PYTHON_TORCH:-}" "$venv/bin/python3" python3; do
    if [ -n "$candidate" ] && torch_ok "$candidate"; then python_torch=$candidate; break; fi
  done
  if [ -z "$python_torch" ] && [ -z "${PYTHON_TORCH:-}" ]; then
    echo "no Python with a CUDA torch: creating $venv (pip install ${TORCH_PIP_SPEC:-torch})"
    if { [ -x "$venv/bin/pip" ] || python3 -m venv "$venv"; } &&
       logged pip-torch.log "$venv/bin/pip" install -q --retries 1 --timeout 30 "${TORCH_PIP_SPEC:-torch}" &&
       torch_ok "$venv/bin/python3"; then
      python_torch="$venv/bin/python3"
    fi
  fi
  if [ -z "$python_torch" ]; then
    note "PyTorch peer not run: no Python whose torch sees the GPU (set PYTHON_TORCH, or let pip reach PyPI; see pip-torch.log)"
  else
    status=0
    # shellcheck disable=SC2086 # BENCH_FLAGS is a list of words
    logged adamw-torch-cuda.txt "$python_torch" "$srcdir/bench/adamw-torch-cuda.py" \
      --sizes "$sizes" --json "$results/adamw-torch-cuda.jsonl" $bench_flags || status=$?
    [ "$status" = 0 ] || fail "bench/adamw-torch-cuda.py exited with status $status (see adamw-torch-cuda.txt)"
  fi
fi

# ------------------------------------------------------------ comparison
if [ -s "$ours_json" ]; then
  python3 "$srcdir/bench/adamw-cuda-compare.py" "$ours_json" "$results/adamw-torch-cuda.jsonl" \
    > "$results/comparison.md"
  say "comparison"
  cat "$results/comparison.md"
fi

finish
