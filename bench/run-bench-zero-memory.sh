#!/bin/sh
# run-bench-zero-memory.sh — peak resident memory per rank of a ~150M-parameter
# GPT-like model at ZeRO stages 0 to 3 (3 ranks on this host over UCX),
# beside the engine's memory plan and DeepSpeed's formula, and the step
# time of per-parameter gradient intake against whole gradients at
# stages 2 and 3; one table.
#
#   bench/run-bench-zero-memory.sh [BUILDDIR]
#
# BUILDDIR (default .) holds bench/bench-zero-memory (`make bench`) and the
# plugins. Environment: RANKS (default 3); BLOCKS (default 20, about 149M
# parameters); WARMUP (default 2) and STEPS (default 9) steps per run;
# STAGES (default 0,1,2,3) and WHOLE_STAGES (default 2,3); REDUCE_BUCKET_SIZE
# and PREFETCH_BUCKET_SIZE in elements (default hidden^2 and 0.9 hidden^2,
# Hugging Face's "auto" values). Every stage and path is a fresh set of
# processes, so each peak is that run's own. Needs about 2.7 GB per rank at
# stage 0.
set -eu

builddir=$(cd "${1:-.}" && pwd)

MIXPREC_PLUGIN_PATH="$builddir/plugins${MIXPREC_PLUGIN_PATH:+:$MIXPREC_PLUGIN_PATH}"
LD_LIBRARY_PATH="$builddir/libmixprec/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
UCX_NET_DEVICES=${UCX_NET_DEVICES:-lo}
export MIXPREC_PLUGIN_PATH LD_LIBRARY_PATH UCX_NET_DEVICES

exec "$builddir/bench/bench-zero-memory" --ranks "${RANKS:-3}" --blocks "${BLOCKS:-20}" \
  --warmup "${WARMUP:-2}" --steps "${STEPS:-9}" --stages "${STAGES:-0,1,2,3}" \
  --whole-stages "${WHOLE_STAGES:-2,3}" --reduce-bucket-size "${REDUCE_BUCKET_SIZE:-0}" \
  --prefetch-bucket-size "${PREFETCH_BUCKET_SIZE:-0}"
