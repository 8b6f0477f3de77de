#!/bin/sh
# test-offload-ranks-cuda.sh — test-offload-ranks with device "cuda": ZeRO-
# Offload across ranks, one GPU per rank over NCCL, bit for bit against the
# all-GPU run. Skips where there are fewer GPUs than ranks.
MIXPREC_TEST_DEVICE=cuda
export MIXPREC_TEST_DEVICE
exec "${G_TEST_BUILDDIR:-tests}/test-offload-ranks"
