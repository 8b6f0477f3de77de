## bench/local.mk — benchmarks: built by `make bench`, never run by `make check`.
bench_programs =
EXTRA_PROGRAMS = $(bench_programs)
CLEANFILES += $(bench_programs)
bench: $(bench_programs)
.PHONY: bench

# --- dtype: full 2^32 conversion sweep, conversion throughput vs memcpy
bench_programs += bench/dtype-sweep bench/bench-convert
bench_dtype_sweep_SOURCES = bench/dtype-sweep.c tests/dtype-reference.h
bench_dtype_sweep_CPPFLAGS = $(tests_internal_cppflags)
bench_dtype_sweep_LDADD = $(tests_internal_ldadd) -lm
bench_bench_convert_SOURCES = bench/bench-convert.c
bench_bench_convert_CPPFLAGS = $(tests_internal_cppflags)
bench_bench_convert_LDADD = $(tests_internal_ldadd)

# --- adamw: the fused optimizer step against memory bandwidth (and, through
# bench/run-bench-adamw.sh, against PyTorch's CPU AdamW and DeepSpeedCPUAdam,
# from the venv bench/setup-bench-venv.sh makes)
bench_programs += bench/bench-adamw
bench_bench_adamw_SOURCES = bench/bench-adamw.c bench/bench-pool.h
bench_bench_adamw_LDADD = $(MIXPREC_DEPS_LIBS) $(PTHREAD_LIBS) $(LIBS)
EXTRA_bench_bench_adamw_DEPENDENCIES = plugins/mixprec-optim-adamw.la
EXTRA_DIST += bench/bench-adamw-torch.py bench/run-bench-adamw.sh bench/setup-bench-venv.sh

# --- comm: bus bandwidth of all_reduce, reduce_scatter and all_gather over
# the comm-ucx plugin; bench/run-bench-comm.sh runs it beside Open MPI's
# MPI_Allreduce (bench/bench-mpi-allreduce.c, built with mpicc there) and
# PyTorch's gloo backend (bench/bench-comm-gloo.py)
bench_programs += bench/bench-comm
bench_bench_comm_LDADD = libmixprec/libmixprec.la $(MIXPREC_DEPS_LIBS)
EXTRA_DIST += \
	bench/bench-mpi-allreduce.c \
	bench/bench-comm-gloo.py \
	bench/run-bench-comm.sh

# --- adamw-cuda: the device-cuda plugin's fused AdamW step against the
# GPU's device-to-device copy bandwidth; bench/adamw-torch-cuda.py is the
# PyTorch peer and build-aux/run-gpu-checks.sh runs both on a GPU machine
EXTRA_DIST += bench/adamw-torch-cuda.py bench/adamw-cuda-compare.py build-aux/run-gpu-checks.sh \
	build-aux/gpu-bundle.sh build-aux/gpu-run.sh build-aux/test-gpu-bundle.sh
if HAVE_CUDA
bench_programs += bench/bench-adamw-cuda
bench_bench_adamw_cuda_SOURCES = bench/bench-adamw-cuda.c
bench_bench_adamw_cuda_CPPFLAGS = $(tests_internal_cppflags) $(CUDA_CPPFLAGS)
bench_bench_adamw_cuda_LDADD = $(tests_internal_ldadd) $(CUDA_LIBS) -lm
endif

# --- zero-memory: peak resident memory of a ~150M-parameter model at ZeRO
# stages 0 to 3 on 3 ranks, beside the engine's accounting, its memory plan
# and DeepSpeed's formula; per-parameter gradient intake against whole
# gradients at stages 2 and 3 (bench/run-bench-zero-memory.sh)
bench_programs += bench/bench-zero-memory
bench_bench_zero_memory_SOURCES = bench/bench-zero-memory.c tests/multiproc.c tests/multiproc.h
bench_bench_zero_memory_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/tests
bench_bench_zero_memory_LDADD = libmixprec/libmixprec.la $(MIXPREC_DEPS_LIBS)
EXTRA_DIST += bench/run-bench-zero-memory.sh

# --- set-master: mixprec_engine_set_master() per call as the model grows,
# against the smallest model's in the same run (bench/bench-set-master.py)
EXTRA_DIST += bench/bench-set-master.py

# --- engine-step: a whole engine step (backward_done + step) against the
# bare optim-adamw kernel on as many elements, in the same run, at GAS 1
# and 4 (bench/run-bench-engine-step.sh)
bench_programs += bench/bench-engine-step
bench_bench_engine_step_SOURCES = bench/bench-engine-step.c
bench_bench_engine_step_CPPFLAGS = $(tests_internal_cppflags)
bench_bench_engine_step_LDADD = $(tests_internal_ldadd) -lm
EXTRA_bench_bench_engine_step_DEPENDENCIES = plugins/mixprec-optim-adamw.la
EXTRA_DIST += bench/run-bench-engine-step.sh

# --- fp8-gather: bytes ZeRO-3 gathers receive per step with FP8 working
# copies (delayed, MX) beside bf16 ones, on 2 ranks of this host
# (bench/run-bench-fp8-gather.sh)
bench_programs += bench/bench-fp8-gather
bench_bench_fp8_gather_SOURCES = bench/bench-fp8-gather.c tests/multiproc.c tests/multiproc.h
bench_bench_fp8_gather_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/tests
bench_bench_fp8_gather_LDADD = libmixprec/libmixprec.la $(MIXPREC_DEPS_LIBS)
EXTRA_DIST += bench/run-bench-fp8-gather.sh

# --- zeropp-bytes: bytes on the wire per step per rank and step time of
# ZeRO-3 for fp32, bf16 + FP32 sums, qwZ+qgZ and qwZ+qgZ+hpZ, beside
# DeepSpeed's ratios (bench/run-bench-zeropp-bytes.sh)
bench_programs += bench/bench-zeropp-bytes
bench_bench_zeropp_bytes_SOURCES = bench/bench-zeropp-bytes.c tests/multiproc.c tests/multiproc.h
bench_bench_zeropp_bytes_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/tests
bench_bench_zeropp_bytes_LDADD = libmixprec/libmixprec.la $(MIXPREC_DEPS_LIBS)
EXTRA_DIST += bench/run-bench-zeropp-bytes.sh

# --- optim-states: the AdamW step for each optimizer-state representation
# (fp32, bf16, scaled fp16 / bf16 / fp8, int8, int4) and each master
# representation (fp32, remainder, kahan, none) beside the revision-2
# FP32-state kernel; bench/run-bench-optim-states.sh adds torchao's
# AdamW8bit / AdamW4bit / AdamWFp8 on the CPU (bench/bench-optim-states-torchao.py)
bench_programs += bench/bench-optim-states
bench_bench_optim_states_SOURCES = bench/bench-optim-states.c bench/bench-pool.h
bench_bench_optim_states_LDADD = $(MIXPREC_DEPS_LIBS) $(PTHREAD_LIBS) $(LIBS)
EXTRA_bench_bench_optim_states_DEPENDENCIES = plugins/mixprec-optim-adamw.la
EXTRA_DIST += bench/run-bench-optim-states.sh bench/bench-optim-states-torchao.py

# --- gpt2: examples/gpt2 (the C GPT-2 on libmixprec, bf16 working copies)
# beside Hugging Face's GPT2LMHeadModel under torch autocast bf16, the same
# weights, batches and threads (examples/gpt2/torch-gpt2.py): tokens/s and
# both loss curves in one run (bench/run-bench-gpt2.sh, bench/plot-gpt2.py)
EXTRA_DIST += bench/run-bench-gpt2.sh bench/plot-gpt2.py

# --- torch-ds: seconds per step of one DeepSpeed training loop (a small
# Hugging Face GPT-2, bf16) on 2 ranks under DeepSpeed (gloo) and under
# mixprec.torch (mixprec-run), at ZeRO-1, 2 and 3, the two interleaved in
# one run (bench/run-bench-torch-ds.sh)
EXTRA_DIST += bench/run-bench-torch-ds.sh bench/bench-torch-ds.py
