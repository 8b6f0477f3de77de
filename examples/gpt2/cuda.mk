## examples/gpt2/cuda.mk — the CUDA build of the gpt2 example: gpt2-cuda.cu
## compiled by nvcc into a libtool object the trainer links with cuBLAS and
## the CUDA runtime, and tests/test-gpt2-cuda-host, the kernels' arithmetic
## (gpt2-cuda-math.cuh) built by nvcc and run on the host, no GPU needed.
##
## Uses what plugins/local.mk defines (the .cu.lo rule through
## build-aux/nvcc-lt, NVCC_FLAGS, NVCC_CPPFLAGS), so it comes after it.
## Include it once from examples/local.mk, outside any conditional (its
## EXTRA_DIST must hold whether or not configure found nvcc; the rest is
## inside its own "if HAVE_CUDA"), after examples_gpt2_gpt2_* are defined,
## and wire the trainer in:
##
##   include $(srcdir)/examples/gpt2/cuda.mk
##   if HAVE_CUDA
##   examples_gpt2_gpt2_SOURCES += $(gpt2_cuda_sources)
##   examples_gpt2_gpt2_CPPFLAGS += $(gpt2_cuda_cppflags)
##   examples_gpt2_gpt2_LDADD += $(gpt2_cuda_libs)
##   endif
##
## (gpt2.c's "#ifdef HAVE_GPT2_CUDA" sees the GPU model; the object in
## gpt2_cuda_libs also makes the trainer depend on it, as automake adds
## LDADD's files to its dependencies.) tests/local.mk needs nothing: the
## host test and tests/test-gpt2-cuda.sh are added to check_PROGRAMS and
## TESTS here.

gpt2_cuda_kernel_headers = \
	examples/gpt2/gpt2-cuda.h \
	examples/gpt2/gpt2-cuda-math.cuh
EXTRA_DIST += \
	examples/gpt2/cuda.mk \
	examples/gpt2/gpt2-cuda.cu \
	$(gpt2_cuda_kernel_headers) \
	tests/test-gpt2-cuda-host.cu \
	tests/test-gpt2-cuda.sh

if HAVE_CUDA
# The trainer's side: the plain C header, the definition its #ifdef
# looks for, and the object with its libraries. CUDA_LIBS carries -L and
# the rpath of the toolkit's lib directory, so -lcublas finds the same
# one. -lstdc++ is not needed: the object has no exceptions and no
# guarded statics (NVCC_FLAGS), and libcublas brings its own.
gpt2_cuda_sources = examples/gpt2/gpt2-cuda.h
gpt2_cuda_cppflags = -DHAVE_GPT2_CUDA
gpt2_cuda_libs = examples/gpt2/gpt2-cuda.lo $(CUDA_LIBS) -lcublas -lm

examples/gpt2/gpt2-cuda.lo: $(gpt2_cuda_kernel_headers) build-aux/nvcc-lt
CLEANFILES += examples/gpt2/gpt2-cuda.lo examples/gpt2/.libs/gpt2-cuda.o

# The host check: one nvcc-built object and no C source, linked by the C
# compiler. It runs no kernel, but nvcc registers the (empty) fat binary
# at start-up, hence the CUDA runtime; that touches no driver, so the
# test runs on machines without a GPU.
check_PROGRAMS += tests/test-gpt2-cuda-host
tests_test_gpt2_cuda_host_SOURCES =
tests_test_gpt2_cuda_host_LDADD = tests/test-gpt2-cuda-host.lo $(CUDA_LIBS) -lm
tests/test-gpt2-cuda-host.lo: examples/gpt2/gpt2-cuda-math.cuh build-aux/nvcc-lt
CLEANFILES += tests/test-gpt2-cuda-host.lo tests/.libs/test-gpt2-cuda-host.o
TESTS += tests/test-gpt2-cuda-host

# The GPU run against the CPU run; skips where no GPU is usable.
TESTS += tests/test-gpt2-cuda.sh
endif
