#!/bin/sh
# test-engine-cuda.sh — test-engine-device with device "cuda": the engine
# on the GPU against the engine on the CPU, bit for bit. Every case skips
# with the plugin's reason where no GPU is usable.
MIXPREC_TEST_DEVICE=cuda
export MIXPREC_TEST_DEVICE
exec "${G_TEST_BUILDDIR:-tests}/test-engine-device"
