#!/bin/sh
# run-bench-engine-step.sh — the engine's whole step (backward_done + step)
# beside the bare optim-adamw kernel on the same element count: params/s
# of each, their ratio, and bytes moved per parameter, at GAS 1 and 4, with
# the gradients written into the engine's buffers ("whole") and handed over
# one parameter at a time ("intake", the hand-overs also timed apart).
#
#   bench/run-bench-engine-step.sh [BUILDDIR]
#
# BUILDDIR (default .) holds bench/bench-engine-step (`make bench`) and the
# plugins. Environment: THREADS (default 2); STEPS timed steps (default 5);
# GAS (default 1,4); PARAMS in millions (default 100); TENSORS (default
# 1000); NUMERICS_ROUNDS (default 100): rounds of the second table, the
# step with mixprec.numerics off, every step and every 100 steps side by
# side (0 leaves it out). Needs about 4 GB of memory at the defaults, 6 GB
# for the second table.
set -eu

builddir=$(cd "${1:-.}" && pwd)

MIXPREC_PLUGIN_PATH="$builddir/plugins${MIXPREC_PLUGIN_PATH:+:$MIXPREC_PLUGIN_PATH}"
MIXPREC_PLUGIN_SYSTEM_PATH=
export MIXPREC_PLUGIN_PATH MIXPREC_PLUGIN_SYSTEM_PATH

exec "$builddir/bench/bench-engine-step" --threads "${THREADS:-2}" --steps "${STEPS:-5}" \
  --gas "${GAS:-1,4}" --params "${PARAMS:-100}" --tensors "${TENSORS:-1000}" \
  --numerics-rounds "${NUMERICS_ROUNDS:-100}"
