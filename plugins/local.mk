## plugins/local.mk — run-time loadable plugins, installed in $(mixprec_plugindir).

# Every plugin lands here; each block below appends its own.
mixprec_plugin_LTLIBRARIES =

# --- optim: the fused cpu optimizers (adamw, sgd, lion). Each is a module
# that links neither libmixprec nor GLib: the ABI header, the inline
# conversions of mixprec-dtype-private.h and libm are all it uses. The
# AVX2/FMA and AVX-512 kernels sit in per-plugin convenience libraries
# compiled with $(MIXPREC_SIMD_CFLAGS) and $(MIXPREC_AVX512_CFLAGS); init()
# picks them only on a CPU that has them.
optim_plugin_cppflags = $(AM_CPPFLAGS) -I$(top_srcdir)/plugins
optim_plugin_cflags = $(AM_CFLAGS) $(MIXPREC_HIDDEN_CFLAGS)
optim_plugin_ldflags = -module -avoid-version -no-undefined -export-symbols-regex '^mixprec_plugin_'

noinst_LTLIBRARIES += plugins/libmixprec-optim-common.la
plugins_libmixprec_optim_common_la_SOURCES = \
	libmixprec/numeric/numeric-optim.h \
	libmixprec/numeric/numeric-quant.h \
	plugins/optim-common.h \
	plugins/optim-common-avx2.h \
	plugins/optim-common-avx512.h \
	plugins/optim-common.c \
	plugins/optim-quant.h \
	plugins/optim-quant.c
plugins_libmixprec_optim_common_la_CPPFLAGS = $(optim_plugin_cppflags)
plugins_libmixprec_optim_common_la_CFLAGS = $(optim_plugin_cflags)
plugins_libmixprec_optim_common_la_LIBADD =
# The block codecs of the low-bit states (optim-quant.h), per SIMD level.
EXTRA_DIST += plugins/optim-quant-avx2.c plugins/optim-quant-avx512.c
if HAVE_X86_SIMD
noinst_LTLIBRARIES += plugins/libmixprec-optim-quant-avx2.la
plugins_libmixprec_optim_quant_avx2_la_SOURCES = plugins/optim-quant-avx2.c
plugins_libmixprec_optim_quant_avx2_la_CPPFLAGS = $(optim_plugin_cppflags)
plugins_libmixprec_optim_quant_avx2_la_CFLAGS = $(optim_plugin_cflags) $(MIXPREC_SIMD_CFLAGS)
plugins_libmixprec_optim_common_la_LIBADD += plugins/libmixprec-optim-quant-avx2.la
endif
if HAVE_X86_AVX512
noinst_LTLIBRARIES += plugins/libmixprec-optim-quant-avx512.la
plugins_libmixprec_optim_quant_avx512_la_SOURCES = plugins/optim-quant-avx512.c
plugins_libmixprec_optim_quant_avx512_la_CPPFLAGS = $(optim_plugin_cppflags)
plugins_libmixprec_optim_quant_avx512_la_CFLAGS = $(optim_plugin_cflags) $(MIXPREC_AVX512_CFLAGS)
plugins_libmixprec_optim_common_la_LIBADD += plugins/libmixprec-optim-quant-avx512.la
endif

mixprec_plugin_LTLIBRARIES += plugins/mixprec-optim-adamw.la
plugins_mixprec_optim_adamw_la_SOURCES = \
	plugins/optim-adamw/adamw-kernels.h \
	plugins/optim-adamw/adamw-schema.c \
	plugins/optim-adamw/adamw-scalar.c \
	plugins/optim-adamw/optim-adamw.c
plugins_mixprec_optim_adamw_la_CPPFLAGS = $(optim_plugin_cppflags)
plugins_mixprec_optim_adamw_la_CFLAGS = $(optim_plugin_cflags)
plugins_mixprec_optim_adamw_la_LDFLAGS = $(optim_plugin_ldflags)
plugins_mixprec_optim_adamw_la_LIBADD = plugins/libmixprec-optim-common.la

mixprec_plugin_LTLIBRARIES += plugins/mixprec-optim-sgd.la
plugins_mixprec_optim_sgd_la_SOURCES = \
	plugins/optim-sgd/sgd-kernels.h \
	plugins/optim-sgd/sgd-schema.c \
	plugins/optim-sgd/sgd-scalar.c \
	plugins/optim-sgd/optim-sgd.c
plugins_mixprec_optim_sgd_la_CPPFLAGS = $(optim_plugin_cppflags)
plugins_mixprec_optim_sgd_la_CFLAGS = $(optim_plugin_cflags)
plugins_mixprec_optim_sgd_la_LDFLAGS = $(optim_plugin_ldflags)
plugins_mixprec_optim_sgd_la_LIBADD = plugins/libmixprec-optim-common.la

mixprec_plugin_LTLIBRARIES += plugins/mixprec-optim-lion.la
plugins_mixprec_optim_lion_la_SOURCES = \
	plugins/optim-lion/lion-kernels.h \
	plugins/optim-lion/lion-schema.c \
	plugins/optim-lion/lion-scalar.c \
	plugins/optim-lion/optim-lion.c
plugins_mixprec_optim_lion_la_CPPFLAGS = $(optim_plugin_cppflags)
plugins_mixprec_optim_lion_la_CFLAGS = $(optim_plugin_cflags)
plugins_mixprec_optim_lion_la_LDFLAGS = $(optim_plugin_ldflags)
plugins_mixprec_optim_lion_la_LIBADD = plugins/libmixprec-optim-common.la

optim_simd_sources = \
	plugins/optim-adamw/adamw-avx2.c \
	plugins/optim-sgd/sgd-avx2.c \
	plugins/optim-lion/lion-avx2.c
EXTRA_DIST += $(optim_simd_sources)
if HAVE_X86_SIMD
noinst_LTLIBRARIES += \
	plugins/libmixprec-optim-adamw-avx2.la \
	plugins/libmixprec-optim-sgd-avx2.la \
	plugins/libmixprec-optim-lion-avx2.la
plugins_libmixprec_optim_adamw_avx2_la_SOURCES = plugins/optim-adamw/adamw-avx2.c
plugins_libmixprec_optim_adamw_avx2_la_CPPFLAGS = $(optim_plugin_cppflags)
plugins_libmixprec_optim_adamw_avx2_la_CFLAGS = $(optim_plugin_cflags) $(MIXPREC_SIMD_CFLAGS)
plugins_mixprec_optim_adamw_la_LIBADD += plugins/libmixprec-optim-adamw-avx2.la
plugins_libmixprec_optim_sgd_avx2_la_SOURCES = plugins/optim-sgd/sgd-avx2.c
plugins_libmixprec_optim_sgd_avx2_la_CPPFLAGS = $(optim_plugin_cppflags)
plugins_libmixprec_optim_sgd_avx2_la_CFLAGS = $(optim_plugin_cflags) $(MIXPREC_SIMD_CFLAGS)
plugins_mixprec_optim_sgd_la_LIBADD += plugins/libmixprec-optim-sgd-avx2.la
plugins_libmixprec_optim_lion_avx2_la_SOURCES = plugins/optim-lion/lion-avx2.c
plugins_libmixprec_optim_lion_avx2_la_CPPFLAGS = $(optim_plugin_cppflags)
plugins_libmixprec_optim_lion_avx2_la_CFLAGS = $(optim_plugin_cflags) $(MIXPREC_SIMD_CFLAGS)
plugins_mixprec_optim_lion_la_LIBADD += plugins/libmixprec-optim-lion-avx2.la
endif

optim_avx512_sources = \
	plugins/optim-adamw/adamw-avx512.c \
	plugins/optim-sgd/sgd-avx512.c \
	plugins/optim-lion/lion-avx512.c
EXTRA_DIST += $(optim_avx512_sources)
if HAVE_X86_AVX512
noinst_LTLIBRARIES += \
	plugins/libmixprec-optim-adamw-avx512.la \
	plugins/libmixprec-optim-sgd-avx512.la \
	plugins/libmixprec-optim-lion-avx512.la
plugins_libmixprec_optim_adamw_avx512_la_SOURCES = plugins/optim-adamw/adamw-avx512.c
plugins_libmixprec_optim_adamw_avx512_la_CPPFLAGS = $(optim_plugin_cppflags)
plugins_libmixprec_optim_adamw_avx512_la_CFLAGS = $(optim_plugin_cflags) $(MIXPREC_AVX512_CFLAGS)
plugins_mixprec_optim_adamw_la_LIBADD += plugins/libmixprec-optim-adamw-avx512.la
plugins_libmixprec_optim_sgd_avx512_la_SOURCES = plugins/optim-sgd/sgd-avx512.c
plugins_libmixprec_optim_sgd_avx512_la_CPPFLAGS = $(optim_plugin_cppflags)
plugins_libmixprec_optim_sgd_avx512_la_CFLAGS = $(optim_plugin_cflags) $(MIXPREC_AVX512_CFLAGS)
plugins_mixprec_optim_sgd_la_LIBADD += plugins/libmixprec-optim-sgd-avx512.la
plugins_libmixprec_optim_lion_avx512_la_SOURCES = plugins/optim-lion/lion-avx512.c
plugins_libmixprec_optim_lion_avx512_la_CPPFLAGS = $(optim_plugin_cppflags)
plugins_libmixprec_optim_lion_avx512_la_CFLAGS = $(optim_plugin_cflags) $(MIXPREC_AVX512_CFLAGS)
plugins_mixprec_optim_lion_la_LIBADD += plugins/libmixprec-optim-lion-avx512.la
endif

# --- comm-ucx: collectives between processes over UCX (host memory). Like
# the optimizers it links neither libmixprec nor GLib: the ABI header and
# the inline reduction of mixprec-comm-reduce-private.h are all it takes from
# the library.
if HAVE_UCX
mixprec_plugin_LTLIBRARIES += plugins/mixprec-comm-ucx.la
plugins_mixprec_comm_ucx_la_SOURCES = \
	plugins/comm-ucx/ucx-comm.h \
	plugins/comm-ucx/ucx-hint.h \
	plugins/comm-ucx/ucx-hint.c \
	plugins/comm-ucx/ucx-peer.h \
	plugins/comm-ucx/ucx-peer.c \
	plugins/comm-ucx/comm-ucx.c \
	plugins/comm-ucx/ucx-transport.c \
	plugins/comm-ucx/ucx-ops.c \
	plugins/comm-ucx/ucx-shm.h \
	plugins/comm-ucx/ucx-shm.c
plugins_mixprec_comm_ucx_la_CPPFLAGS = $(AM_CPPFLAGS) $(UCX_CFLAGS)
plugins_mixprec_comm_ucx_la_CFLAGS = $(AM_CFLAGS) $(MIXPREC_HIDDEN_CFLAGS)
plugins_mixprec_comm_ucx_la_LDFLAGS = -module -avoid-version -no-undefined -export-symbols-regex '^mixprec_plugin_'
plugins_mixprec_comm_ucx_la_LIBADD = $(UCX_LIBS)
endif

# --- CUDA: kernels compiled by nvcc into libtool objects that a module
# lists in its LIBADD (build-aux/nvcc-lt writes the .lo). Their arithmetic
# is the C scalar reference's own source, libmixprec/numeric/ (see
# numeric-base.h). --fmad=false (device) and -ffp-contract=off (host): a
# multiply-add fuses only where the source says _mixprec_num_fma(), as in
# the CPU kernels, so both produce the same bits. No exceptions and no guarded
# statics (nvcc's launch stubs would otherwise want them): the modules
# link with the C compiler and must not need libstdc++.
EXTRA_DIST += build-aux/nvcc-lt
SUFFIXES += .cu
NVCC_FLAGS = $(NVCC_GENCODE) -O3 -std=c++17 --fmad=false -Werror all-warnings \
	-Xcompiler -fvisibility=hidden -Xcompiler -Wall -Xcompiler -Wextra \
	-Xcompiler -fno-exceptions -Xcompiler -fno-threadsafe-statics \
	-Xcompiler -ffp-contract=off
NVCC_CPPFLAGS = $(DEFS) -I$(top_builddir) -I$(top_srcdir)/libmixprec \
	-I$(top_builddir)/libmixprec -I$(top_srcdir)/plugins $(CUDA_CPPFLAGS)
.cu.lo:
	$(AM_V_GEN)$(SHELL) $(top_srcdir)/build-aux/nvcc-lt $@ $(NVCC) $(NVCC_FLAGS) $(NVCC_CPPFLAGS) $<

# --- comm-nccl: collectives between CUDA devices over NCCL. Like comm-ucx
# it links neither libmixprec nor GLib: the ABI header, libc, the CUDA
# runtime and NCCL. Its few kernels (widening, first-term folding, the MAX
# keys) are one nvcc-built object, converting with libmixprec/numeric/.
EXTRA_DIST += plugins/comm-nccl/nccl-kernels.cu
if HAVE_NCCL
mixprec_plugin_LTLIBRARIES += plugins/mixprec-comm-nccl.la
plugins_mixprec_comm_nccl_la_SOURCES = \
	plugins/comm-nccl/nccl-kernels.h \
	plugins/comm-nccl/nccl-comm.h \
	plugins/comm-nccl/comm-nccl.c \
	plugins/comm-nccl/nccl-peer.h \
	plugins/comm-nccl/nccl-peer.c \
	plugins/comm-nccl/nccl-failures.c \
	plugins/comm-nccl/nccl-ops.c
plugins_mixprec_comm_nccl_la_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CPPFLAGS) $(NCCL_CPPFLAGS)
plugins_mixprec_comm_nccl_la_CFLAGS = $(AM_CFLAGS) $(MIXPREC_HIDDEN_CFLAGS) $(PTHREAD_CFLAGS)
plugins_mixprec_comm_nccl_la_LDFLAGS = -module -avoid-version -no-undefined -export-symbols-regex '^mixprec_plugin_'
# -lstdc++: the host side nvcc generates for the kernels' launch stubs
# calls the C++ runtime (__gxx_personality_v0, __cxa_guard_*).
plugins_mixprec_comm_nccl_la_LIBADD = plugins/comm-nccl/nccl-kernels.lo $(NCCL_LIBS) $(CUDA_LIBS) \
	$(PTHREAD_LIBS) -lstdc++
plugins/comm-nccl/nccl-kernels.lo: \
	plugins/comm-nccl/nccl-kernels.h \
	libmixprec/mixprec-plugin-abi.h \
	libmixprec/numeric/numeric-base.h \
	libmixprec/numeric/numeric-dtype.h \
	build-aux/nvcc-lt
CLEANFILES += plugins/comm-nccl/nccl-kernels.lo plugins/comm-nccl/.libs/nccl-kernels.o
endif

# --- device-cuda: the "cuda" device and the cuda adamw, sgd and lion
# optimizers. Host code in C (the ABI header, optim-common's checks, the
# optimizers' shared schemas and prepare()), kernels from nvcc; links
# cudart, never libmixprec or GLib. init() touches no driver, so the
# module loads on hosts without a GPU.
device_cuda_kernels = \
	plugins/device-cuda/cuda-kernels.cu \
	plugins/device-cuda/cuda-optim.cu \
	plugins/device-cuda/cuda-fp8.cu \
	plugins/device-cuda/cuda-fp4.cu
device_cuda_kernel_headers = \
	libmixprec/numeric/numeric-base.h \
	libmixprec/numeric/numeric-dtype.h \
	plugins/device-cuda/cuda-launch.h \
	plugins/device-cuda/cuda-dtype.cuh \
	plugins/device-cuda/cuda-grid.cuh
EXTRA_DIST += $(device_cuda_kernels) $(device_cuda_kernel_headers) \
	plugins/device-cuda/cuda-optim-kernel.cuh \
	plugins/device-cuda/cuda-optim-quant.cuh \
	plugins/device-cuda/cuda-fp8.cuh \
	plugins/device-cuda/cuda-fp4.cuh
if HAVE_CUDA
mixprec_plugin_LTLIBRARIES += plugins/mixprec-device-cuda.la
plugins_mixprec_device_cuda_la_SOURCES = \
	plugins/device-cuda/cuda-plugin.h \
	plugins/device-cuda/device-cuda.c \
	plugins/device-cuda/cuda-optim-args.h \
	plugins/device-cuda/cuda-optim-args.c \
	plugins/device-cuda/cuda-optim.c \
	plugins/optim-adamw/adamw-schema.c \
	plugins/optim-sgd/sgd-schema.c \
	plugins/optim-lion/lion-schema.c
plugins_mixprec_device_cuda_la_CPPFLAGS = $(optim_plugin_cppflags) $(CUDA_CPPFLAGS)
plugins_mixprec_device_cuda_la_CFLAGS = $(optim_plugin_cflags)
plugins_mixprec_device_cuda_la_LDFLAGS = $(optim_plugin_ldflags)
plugins_mixprec_device_cuda_la_LIBADD = \
	plugins/device-cuda/cuda-kernels.lo \
	plugins/device-cuda/cuda-optim.lo \
	plugins/device-cuda/cuda-fp8.lo \
	plugins/device-cuda/cuda-fp4.lo \
	plugins/libmixprec-optim-common.la \
	$(CUDA_LIBS)
plugins/device-cuda/cuda-kernels.lo: $(device_cuda_kernel_headers)
plugins/device-cuda/cuda-optim.lo: $(device_cuda_kernel_headers) \
	plugins/device-cuda/cuda-optim-kernel.cuh \
	plugins/device-cuda/cuda-optim-quant.cuh \
	libmixprec/numeric/numeric-optim.h \
	libmixprec/numeric/numeric-quant.h \
	libmixprec/numeric/numeric-fp8.h
plugins/device-cuda/cuda-fp8.lo: $(device_cuda_kernel_headers) \
	plugins/device-cuda/cuda-fp8.cuh \
	libmixprec/numeric/numeric-fp8.h
plugins/device-cuda/cuda-fp4.lo: $(device_cuda_kernel_headers) \
	plugins/device-cuda/cuda-fp4.cuh \
	libmixprec/numeric/numeric-fp4.h \
	libmixprec/numeric/numeric-fp8.h \
	libmixprec/numeric/numeric-rht.h
endif
