#!/bin/sh
# test-fp8-engine-cuda.sh — test-fp8-engine with device "cuda": its device
# cases only: FP8 working copies cast on the GPU against the engine on the
# CPU, bit for bit. Each skips with the plugin's reason where no GPU is
# usable.
MIXPREC_TEST_DEVICE=cuda
export MIXPREC_TEST_DEVICE
exec "${G_TEST_BUILDDIR:-tests}/test-fp8-engine" "$@"
