#!/bin/sh
# setup-bench-venv.sh — a Python virtual environment with the optimizer
# benchmarks' peers: PyTorch, DeepSpeed (for DeepSpeedCPUAdam), ninja,
# torchao (AdamW8bit / AdamW4bit / AdamWFp8, for bench/run-bench-optim-states.sh)
# and torch-optimi, all from PyPI.
#
#   bench/setup-bench-venv.sh [VENV]
#
# VENV defaults to $BENCH_VENV, else $XDG_CACHE_HOME/libmixprec/bench-venv
# ($HOME/.cache when XDG_CACHE_HOME is unset). An existing one is reused
# and brought up to date. The last line printed is the venv's Python, for
#
#   PYTHON=$(bench/setup-bench-venv.sh | tail -n 1) bench/run-bench-adamw.sh
#
# Needs python3 with its venv module (Debian: apt-get install python3-venv)
# and, for DeepSpeedCPUAdam's build on first use, a C++ compiler. PyPI has
# no CPU-only torch for x86-64 Linux: the plain wheel brings its CUDA
# libraries along (a few GB), which import without a GPU. DeepSpeed builds
# against the torch already installed (--no-build-isolation) and compiles
# none of its ops at install time; the CPU Adam op is built with ninja the
# first time the benchmark asks for it.
set -eu

venv=${1:-${BENCH_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/libmixprec/bench-venv}}

if [ ! -x "$venv/bin/python" ]; then
  mkdir -p "$(dirname "$venv")"
  python3 -m venv "$venv" || {
    echo "setup-bench-venv.sh: python3 -m venv failed; on Debian, apt-get install python3-venv" >&2
    exit 1
  }
fi

pip="$venv/bin/python -m pip --disable-pip-version-check"
$pip install --upgrade pip setuptools wheel >&2
$pip install torch ninja numpy >&2
DS_BUILD_OPS=0 $pip install --no-build-isolation deepspeed >&2
# torchao's low-bit optimizers are optional peers: a failed install only
# leaves their column out of bench/run-bench-optim-states.sh.
$pip install torchao torch-optimi >&2 ||
  echo "setup-bench-venv.sh: warning: torchao / torch-optimi did not install; their peers are skipped" >&2

"$venv/bin/python" -c 'import torch, deepspeed, ninja; print("torch", torch.__version__, "deepspeed", deepspeed.__version__)' >&2
echo "$venv/bin/python"
