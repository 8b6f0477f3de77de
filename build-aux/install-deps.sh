#!/bin/sh
# Installs, from Debian 12's archive, everything needed to build libmixprec,
# run its whole test suite and its example, and to build and lint its RPM
# packages (rpm provides rpmbuild; CI: build-aux/rpm-test.sh). Run as root
# (or it uses sudo).
set -e
SUDO=
[ "$(id -u)" = 0 ] || SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends \
  build-essential clang autoconf automake libtool autoconf-archive pkg-config \
  xz-utils git ca-certificates \
  libglib2.0-dev libjson-glib-dev \
  gobject-introspection libgirepository1.0-dev gir1.2-glib-2.0 \
  valac gjs python3 python3-gi python3-venv \
  libucx-dev libdlpack-dev libopenblas-dev libomp-dev libcairo2-dev libfontconfig-dev \
  libprotobuf-c-dev protobuf-c-compiler \
  wamerican python3-numpy python3-matplotlib \
  abigail-tools debhelper apt-utils \
  openmpi-bin libopenmpi-dev iproute2 \
  gi-docgen man-db \
  rpm rpmlint file

# The checkpoint test reads libmixprec's files with the reference safetensors
# package, which Debian does not ship: a venv from PyPI that also sees
# Debian's gi and numpy. configure finds it there.
VENV="${XDG_CACHE_HOME:-$HOME/.cache}/libmixprec/venv"
if ! "$VENV/bin/python3" -c 'import gi, numpy, safetensors.numpy' >/dev/null 2>&1; then
  if /usr/bin/python3 -m venv --system-site-packages "$VENV" &&
     "$VENV/bin/pip" install -q 'safetensors>=0.4'; then
    echo "install-deps: safetensors installed in $VENV"
  else
    echo "install-deps: warning: could not install safetensors into $VENV;" \
         "the checkpoint interoperability test will be skipped" >&2
  fi
fi

# The monitor test reads the TensorBoard event files libmixprec writes with
# the tensorboard package's own reader: into the same venv.
if ! "$VENV/bin/python3" -c 'import gi, tensorboard' >/dev/null 2>&1; then
  if [ -x "$VENV/bin/pip" ] && "$VENV/bin/pip" install -q 'tensorboard>=2.10'; then
    echo "install-deps: tensorboard installed in $VENV"
  else
    echo "install-deps: warning: could not install tensorboard into $VENV;" \
         "the TensorBoard event-file test will be skipped" >&2
  fi
fi

# The tests of mixprec.torch (the PyTorch front) and its example need torch:
# PyPI's, in the same venv (a few GB with its CUDA libraries).
if [ -x "$VENV/bin/python3" ] && ! "$VENV/bin/python3" -c 'import torch' >/dev/null 2>&1; then
  if "$VENV/bin/pip" install -q torch; then
    echo "install-deps: torch installed in $VENV"
  else
    echo "install-deps: warning: could not install torch into $VENV;" \
         "the mixprec.torch tests will be skipped" >&2
  fi
fi

# The GPT-2 example's PyTorch comparison (tests/test-gpt2-torch.py) and
# benchmark (bench/run-bench-gpt2.sh) load its weights into Hugging Face's
# GPT2LMHeadModel: transformers, in the same venv.
if [ -x "$VENV/bin/python3" ] && "$VENV/bin/python3" -c 'import torch' >/dev/null 2>&1 &&
   ! "$VENV/bin/python3" -c 'import transformers' >/dev/null 2>&1; then
  if "$VENV/bin/pip" install -q transformers; then
    echo "install-deps: transformers installed in $VENV"
  else
    echo "install-deps: warning: could not install transformers into $VENV;" \
         "the GPT-2 PyTorch comparison will be skipped" >&2
  fi
fi

# DeepSpeed itself, for tests/test-torch-deepspeed-compat.py and
# test-torch-deepspeed-dist.py (2 ranks): one training script run under
# `import deepspeed` and `import mixprec.torch as deepspeed`. PyPI has
# only its source (setup.py builds no op without DS_BUILD_OPS), so this is
# a plain install beside torch.
if [ -x "$VENV/bin/python3" ] && "$VENV/bin/python3" -c 'import torch' >/dev/null 2>&1 &&
   ! "$VENV/bin/python3" -c 'import deepspeed' >/dev/null 2>&1; then
  if "$VENV/bin/pip" install -q deepspeed; then
    echo "install-deps: deepspeed installed in $VENV"
  else
    echo "install-deps: warning: could not install deepspeed into $VENV;" \
         "the DeepSpeed drop-in comparison will be skipped" >&2
  fi
fi

# The optimizer-state peers: torchao's AdamW8bit / AdamW4bit / AdamWFp8
# (block-scaled moments) and optimi's Kahan-summed AdamW, beside torch in
# the same venv, for tests/test-optim-peers.py and bench/run-bench-optim-states.sh.
if [ -x "$VENV/bin/python3" ] && "$VENV/bin/python3" -c 'import torch' >/dev/null 2>&1 &&
   ! "$VENV/bin/python3" -c 'import torchao.optim, optimi' >/dev/null 2>&1; then
  if "$VENV/bin/pip" install -q torchao torch-optimi; then
    echo "install-deps: torchao and torch-optimi installed in $VENV"
  else
    echo "install-deps: warning: could not install torchao and torch-optimi into $VENV;" \
         "the optimizer-state peer test will be skipped" >&2
  fi
fi
