#!/bin/sh
# run-bench-fp8-gather.sh — bytes one rank receives per step from ZeRO-3
# parameter gathers with FP8 working copies (delayed and MX recipes) and
# 4-bit ones (MXFP4, NVFP4 with 16x16 tiles) beside bf16 ones, and the
# median step time; then each cast's throughput against memcpy.
#
#   bench/run-bench-fp8-gather.sh [BUILDDIR]
#
# BUILDDIR (default .) holds bench/bench-fp8-gather (`make bench`) and the
# plugins. Environment: RANKS (default 2), LAYERS (default 8), HIDDEN
# (default 1024), STEPS (default 5).
set -eu

builddir=$(cd "${1:-.}" && pwd)

MIXPREC_PLUGIN_PATH="$builddir/plugins${MIXPREC_PLUGIN_PATH:+:$MIXPREC_PLUGIN_PATH}"
LD_LIBRARY_PATH="$builddir/libmixprec/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
UCX_NET_DEVICES=${UCX_NET_DEVICES:-lo}
export MIXPREC_PLUGIN_PATH LD_LIBRARY_PATH UCX_NET_DEVICES

exec "$builddir/bench/bench-fp8-gather" --ranks "${RANKS:-2}" --layers "${LAYERS:-8}" \
  --hidden "${HIDDEN:-1024}" --steps "${STEPS:-5}"
