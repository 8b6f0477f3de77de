## libmixprec/local.mk — the library. A convenience library holds all the code
## so tests can reach internal kernels; libmixprec.la wraps it with the export
## map. Each object appends its files in its own block below.

mixprec_public_headers = libmixprec/mixprec.h
mixprec_built_public_headers = \
	libmixprec/mixprec-version.h \
	libmixprec/mixprec-enum-types.h
# Public headers that declare enums (input to glib-mkenums).
mixprec_enum_headers =
# Library sources (.c and private headers).
mixprec_sources =
# Sources compiled with AVX2/F16C/FMA enabled (x86-64 only; selected at run time).
mixprec_simd_sources =

# --- plugin ABI: installed plain-C header, not part of the GObject API
# (so not scanned for introspection); mixprec-plugin.h is its 1.0 name
mixprec_abi_headers = \
	libmixprec/mixprec-plugin-abi.h \
	libmixprec/mixprec-plugin.h

# --- runtime (version queries, library-wide helpers)
mixprec_public_headers += libmixprec/mixprec-runtime.h
mixprec_sources += \
	libmixprec/mixprec-runtime.c \
	libmixprec/mixprec-parallel-private.h \
	libmixprec/mixprec-parallel.c \
	libmixprec/mixprec-cpu-private.h \
	libmixprec/mixprec-x86-features-private.h \
	libmixprec/mixprec-cpu.c

# --- dtype (number formats and conversions)
mixprec_public_headers += libmixprec/mixprec-dtype.h
mixprec_enum_headers += libmixprec/mixprec-dtype.h
mixprec_sources += \
	libmixprec/mixprec-dtype-private.h \
	libmixprec/mixprec-dtype.c \
	libmixprec/mixprec-convert.c
# The per-element arithmetic that C and nvcc both compile (see
# numeric/numeric-base.h); never installed, and not for g-ir-scanner.
EXTRA_DIST += \
	libmixprec/numeric/numeric-base.h \
	libmixprec/numeric/numeric-dtype.h
mixprec_simd_sources += \
	libmixprec/mixprec-avx2-private.h \
	libmixprec/mixprec-convert-avx2.c
mixprec_avx512_sources = \
	libmixprec/mixprec-avx512-private.h \
	libmixprec/mixprec-convert-avx512.c \
	libmixprec/mixprec-engine-kernels-avx512.c

# --- loss scalers
mixprec_public_headers += \
	libmixprec/mixprec-loss-scaler.h \
	libmixprec/mixprec-static-scaler.h \
	libmixprec/mixprec-dynamic-scaler.h
mixprec_enum_headers += libmixprec/mixprec-loss-scaler.h
mixprec_sources += \
	libmixprec/mixprec-loss-scaler-private.h \
	libmixprec/mixprec-loss-scaler.c \
	libmixprec/mixprec-static-scaler.c \
	libmixprec/mixprec-dynamic-scaler.c \
	libmixprec/mixprec-loss-scaler-config.c

# --- registry (plugin discovery, loading, ABI checks)
mixprec_public_headers += \
	libmixprec/mixprec-plugin-object.h \
	libmixprec/mixprec-feature.h \
	libmixprec/mixprec-registry.h
mixprec_enum_headers += \
	libmixprec/mixprec-plugin-object.h \
	libmixprec/mixprec-feature.h
mixprec_sources += \
	libmixprec/mixprec-registry-private.h \
	libmixprec/mixprec-plugin-compat-private.h \
	libmixprec/mixprec-plugin-object.c \
	libmixprec/mixprec-plugin-loader.c \
	libmixprec/mixprec-plugin-compat.c \
	libmixprec/mixprec-plugin-log.c \
	libmixprec/mixprec-feature.c \
	libmixprec/mixprec-registry.c

# --- config (DeepSpeed-style JSON) and precision policy
mixprec_public_headers += \
	libmixprec/mixprec-config.h \
	libmixprec/mixprec-config-loader.h \
	libmixprec/mixprec-policy.h
mixprec_enum_headers += \
	libmixprec/mixprec-config.h \
	libmixprec/mixprec-policy.h
mixprec_sources += \
	libmixprec/mixprec-config-private.h \
	libmixprec/mixprec-config.c \
	libmixprec/mixprec-config-from-json.c \
	libmixprec/mixprec-config-auto.c \
	libmixprec/mixprec-config-loader.c \
	libmixprec/mixprec-config-report.c \
	libmixprec/mixprec-json-read-private.h \
	libmixprec/mixprec-json-read.c \
	libmixprec/mixprec-json-scan.c \
	libmixprec/mixprec-json-write.c \
	libmixprec/mixprec-policy.c

# --- learning-rate schedules (DeepSpeed's WarmupLR, WarmupDecayLR, WarmupCosineLR)
mixprec_public_headers += libmixprec/mixprec-lr-schedule.h
mixprec_enum_headers += libmixprec/mixprec-lr-schedule.h
mixprec_sources += libmixprec/mixprec-lr-schedule.c

# --- the configured optimizer, checked against its plugin's schema
mixprec_sources += \
	libmixprec/mixprec-optimizer-params-private.h \
	libmixprec/mixprec-optimizer-params.c

# --- partitioner (DeepSpeed's flat layout; deprecated in 1.1 for MixprecLayout)
mixprec_public_headers += libmixprec/mixprec-partitioner.h
mixprec_enum_headers += libmixprec/mixprec-partitioner.h
mixprec_sources += libmixprec/mixprec-partitioner.c

# --- engine (parameters, the step pipeline and its CPU kernels)
mixprec_public_headers += \
	libmixprec/mixprec-param.h \
	libmixprec/mixprec-engine.h
mixprec_enum_headers += libmixprec/mixprec-param.h libmixprec/mixprec-engine.h
# The layout an engine runs, as a read-only description (MixprecLayout).
mixprec_public_headers += libmixprec/mixprec-layout.h
mixprec_sources += \
	libmixprec/mixprec-layout-private.h \
	libmixprec/mixprec-layout.c \
	libmixprec/mixprec-engine-layout-view.c
mixprec_sources += \
	libmixprec/mixprec-param-private.h \
	libmixprec/mixprec-param.c \
	libmixprec/mixprec-param-fp4.c \
	libmixprec/mixprec-engine-kernels-private.h \
	libmixprec/mixprec-engine-kernels.c \
	libmixprec/mixprec-device-private.h \
	libmixprec/mixprec-device.c \
	libmixprec/mixprec-engine-private.h \
	libmixprec/mixprec-engine-impl-private.h \
	libmixprec/mixprec-engine.c \
	libmixprec/mixprec-engine-layout.c \
	libmixprec/mixprec-engine-reduce.c \
	libmixprec/mixprec-engine-represent.c \
	libmixprec/mixprec-engine-memory.c \
	libmixprec/mixprec-engine-comm-bytes.c \
	libmixprec/mixprec-engine-step.c \
	libmixprec/mixprec-engine-zero3.c \
	libmixprec/mixprec-engine-zeropp.c \
	libmixprec/mixprec-engine-hpz.c \
	libmixprec/mixprec-engine-hosts.c \
	libmixprec/mixprec-engine-loco.c \
	libmixprec/mixprec-engine-access.c \
	libmixprec/mixprec-engine-monitor.c

# --- engine phases split out of the step (engine-core)
mixprec_sources += \
	libmixprec/mixprec-engine-norm.c \
	libmixprec/mixprec-engine-agree.c \
	libmixprec/mixprec-engine-offload.c \
	libmixprec/mixprec-engine-checkpoint.c \
	libmixprec/mixprec-engine-group.c \
	libmixprec/mixprec-engine-whole.c

# --- per-tensor numerics (mixprec.numerics): the engine's phase and the
# per-step report
mixprec_public_headers += libmixprec/mixprec-numerics.h
mixprec_sources += \
	libmixprec/mixprec-numerics-private.h \
	libmixprec/mixprec-numerics.c \
	libmixprec/mixprec-numerics-kernels-private.h \
	libmixprec/mixprec-numerics-kernels.c \
	libmixprec/mixprec-engine-numerics-private.h \
	libmixprec/mixprec-engine-numerics.c \
	libmixprec/mixprec-engine-numerics-shadow.c \
	libmixprec/mixprec-engine-autoprec-private.h \
	libmixprec/mixprec-engine-autoprec.c
mixprec_simd_sources += libmixprec/mixprec-numerics-kernels-avx2.c
mixprec_avx512_sources += libmixprec/mixprec-numerics-kernels-avx512.c

# --- FP8 working copies (fp8-engine)
mixprec_sources += libmixprec/mixprec-engine-fp8.c

# --- 4-bit working copies (NVFP4, MXFP4), through the fp8 group machinery
mixprec_sources += libmixprec/mixprec-engine-fp4.c

# --- monitors (csv_monitor, tensorboard): the files steps are recorded in
mixprec_sources += \
	libmixprec/mixprec-monitor-private.h \
	libmixprec/mixprec-monitor-csv.c \
	libmixprec/mixprec-monitor-tensorboard.c
mixprec_simd_sources += libmixprec/mixprec-engine-kernels-avx2.c

# --- bootstrap (rank discovery, rendezvous, control-message exchange)
mixprec_public_headers += libmixprec/mixprec-bootstrap.h
mixprec_enum_headers += libmixprec/mixprec-bootstrap.h
mixprec_sources += \
	libmixprec/mixprec-bootstrap-private.h \
	libmixprec/mixprec-bootstrap-wire-private.h \
	libmixprec/mixprec-bootstrap-auth-private.h \
	libmixprec/mixprec-bootstrap.c \
	libmixprec/mixprec-bootstrap-auth.c \
	libmixprec/mixprec-bootstrap-root.c \
	libmixprec/mixprec-bootstrap-peer.c \
	libmixprec/mixprec-bootstrap-env.c \
	libmixprec/mixprec-bootstrap-wire.c

# --- comm: MixprecComm, its requests, and the built-in plugin with the
# single-process "local" communicator
mixprec_public_headers += libmixprec/mixprec-comm.h
mixprec_enum_headers += libmixprec/mixprec-comm.h
mixprec_sources += \
	libmixprec/mixprec-comm-private.h \
	libmixprec/mixprec-comm-reduce-private.h \
	libmixprec/mixprec-plugin-fail-private.h \
	libmixprec/mixprec-comm.c \
	libmixprec/mixprec-comm-request.c \
	libmixprec/mixprec-comm-bytes.c \
	libmixprec/mixprec-comm-local.c \
	libmixprec/mixprec-builtin.c

# --- checkpoints (crash-safe sharded save/load, safetensors, FP32 export)
mixprec_public_headers += libmixprec/mixprec-checkpoint.h
mixprec_enum_headers += libmixprec/mixprec-checkpoint.h
mixprec_sources += \
	libmixprec/mixprec-safetensors-private.h \
	libmixprec/mixprec-safetensors.c \
	libmixprec/mixprec-safetensors-writer.c \
	libmixprec/mixprec-checkpoint-private.h \
	libmixprec/mixprec-checkpoint.c \
	libmixprec/mixprec-checkpoint-manifest.c \
	libmixprec/mixprec-checkpoint-repr.c \
	libmixprec/mixprec-checkpoint-fs.c \
	libmixprec/mixprec-checkpoint-save.c \
	libmixprec/mixprec-checkpoint-load.c \
	libmixprec/mixprec-checkpoint-export.c

# --- fp8: scaled float8 casts and MX block quantisation (scalar reference
# here, AVX2 / AVX-512 kernels in the SIMD libraries below)
mixprec_public_headers += libmixprec/mixprec-fp8.h
mixprec_enum_headers += libmixprec/mixprec-fp8.h
mixprec_sources += \
	libmixprec/mixprec-fp8-private.h \
	libmixprec/mixprec-fp8.c
EXTRA_DIST += libmixprec/numeric/numeric-fp8.h
mixprec_simd_sources += libmixprec/mixprec-fp8-avx2.c
mixprec_avx512_sources += libmixprec/mixprec-fp8-avx512.c

# --- fp4: FP4 E2M1 and the 4-bit block recipes (NVFP4, MXFP4)
mixprec_public_headers += libmixprec/mixprec-fp4.h
mixprec_enum_headers += libmixprec/mixprec-fp4.h
mixprec_sources += \
	libmixprec/mixprec-fp4-private.h \
	libmixprec/mixprec-fp4.c \
	libmixprec/mixprec-rht.c
mixprec_simd_sources += libmixprec/mixprec-fp4-avx2.c
mixprec_avx512_sources += libmixprec/mixprec-fp4-avx512.c
EXTRA_DIST += libmixprec/numeric/numeric-fp4.h libmixprec/numeric/numeric-rht.h

# --- ZeRO++: DeepSpeed's block quantizer (quantized weight gathers and
# quantized gradient reductions)
mixprec_sources += \
	libmixprec/mixprec-zeropp-private.h \
	libmixprec/mixprec-zeropp.c
EXTRA_DIST += libmixprec/numeric/numeric-zeropp.h
mixprec_simd_sources += libmixprec/mixprec-zeropp-avx2.c
mixprec_avx512_sources += libmixprec/mixprec-zeropp-avx512.c

# --- FP8 scaling recipes (delayed, current, MX) and per-tensor scaling state
mixprec_public_headers += libmixprec/mixprec-fp8-recipe.h
mixprec_enum_headers += libmixprec/mixprec-fp8-recipe.h
mixprec_sources += \
	libmixprec/mixprec-fp8-recipe-private.h \
	libmixprec/mixprec-fp8-recipe.c

# ---------------------------------------------------------------- rules
mixprec_include_HEADERS = $(mixprec_public_headers) $(mixprec_abi_headers)
nodist_mixprec_include_HEADERS = $(mixprec_built_public_headers)

noinst_LTLIBRARIES += libmixprec/libmixprec-internal.la
libmixprec_libmixprec_internal_la_SOURCES = $(mixprec_sources) $(mixprec_public_headers) $(mixprec_abi_headers)
nodist_libmixprec_libmixprec_internal_la_SOURCES = \
	libmixprec/mixprec-enum-types.c \
	libmixprec/mixprec-enum-types.h
# No build folder is compiled in (reproducible builds): a library loaded
# from a build tree finds that tree's plugins from its own location (see
# mixprec-registry.c), so uninstalled tools, examples and scripts need no
# MIXPREC_PLUGIN_PATH.
libmixprec_libmixprec_internal_la_CPPFLAGS = $(AM_CPPFLAGS) -DMIXPREC_COMPILATION
libmixprec_libmixprec_internal_la_CFLAGS = $(AM_CFLAGS) $(MIXPREC_HIDDEN_CFLAGS)
libmixprec_libmixprec_internal_la_LIBADD = $(MIXPREC_DEPS_LIBS) $(PTHREAD_LIBS) $(LIBS)
# SIMD kernels: compiled with AVX2/F16C/FMA enabled, called only after
# _mixprec_cpu_simd_level() says the CPU has them.
if HAVE_X86_SIMD
noinst_LTLIBRARIES += libmixprec/libmixprec-simd.la
libmixprec_libmixprec_simd_la_SOURCES = $(mixprec_simd_sources)
libmixprec_libmixprec_simd_la_CPPFLAGS = $(libmixprec_libmixprec_internal_la_CPPFLAGS)
libmixprec_libmixprec_simd_la_CFLAGS = $(libmixprec_libmixprec_internal_la_CFLAGS) $(MIXPREC_SIMD_CFLAGS)
libmixprec_libmixprec_internal_la_LIBADD += libmixprec/libmixprec-simd.la
endif
EXTRA_DIST += $(mixprec_simd_sources)
# AVX-512 kernels: compiled with AVX-512 F/BW/VL enabled, called only
# after _mixprec_cpu_simd_level() says the CPU has them.
if HAVE_X86_AVX512
noinst_LTLIBRARIES += libmixprec/libmixprec-avx512.la
libmixprec_libmixprec_avx512_la_SOURCES = $(mixprec_avx512_sources)
libmixprec_libmixprec_avx512_la_CPPFLAGS = $(libmixprec_libmixprec_internal_la_CPPFLAGS)
libmixprec_libmixprec_avx512_la_CFLAGS = $(libmixprec_libmixprec_internal_la_CFLAGS) $(MIXPREC_AVX512_CFLAGS)
libmixprec_libmixprec_internal_la_LIBADD += libmixprec/libmixprec-avx512.la
endif
EXTRA_DIST += $(mixprec_avx512_sources)

lib_LTLIBRARIES += libmixprec/libmixprec.la
libmixprec_libmixprec_la_SOURCES =
libmixprec_libmixprec_la_LIBADD = libmixprec/libmixprec-internal.la
libmixprec_libmixprec_la_LDFLAGS = \
	-version-info $(MIXPREC_LT_VERSION_INFO) \
	$(MIXPREC_VSCRIPT_LDFLAGS) $(MIXPREC_LINK_LDFLAGS) \
	$(PTHREAD_CFLAGS)
EXTRA_libmixprec_libmixprec_la_DEPENDENCIES = libmixprec/libmixprec.map

# Enum GTypes.
libmixprec/mixprec-enum-types.h: $(mixprec_enum_headers) libmixprec/mixprec-enum-types.h.template
	$(AM_V_GEN)$(MKDIR_P) libmixprec && $(GLIB_MKENUMS) \
	  --template $(srcdir)/libmixprec/mixprec-enum-types.h.template \
	  $(addprefix $(srcdir)/,$(mixprec_enum_headers)) > $@.tmp && mv $@.tmp $@
libmixprec/mixprec-enum-types.c: $(mixprec_enum_headers) libmixprec/mixprec-enum-types.c.template libmixprec/mixprec-enum-types.h
	$(AM_V_GEN)$(MKDIR_P) libmixprec && $(GLIB_MKENUMS) \
	  --template $(srcdir)/libmixprec/mixprec-enum-types.c.template \
	  $(addprefix $(srcdir)/,$(mixprec_enum_headers)) > $@.tmp && mv $@.tmp $@
BUILT_SOURCES += libmixprec/mixprec-enum-types.h libmixprec/mixprec-enum-types.c
CLEANFILES += libmixprec/mixprec-enum-types.h libmixprec/mixprec-enum-types.c
EXTRA_DIST += \
	libmixprec/libmixprec.map \
	libmixprec/mixprec-version.h.in \
	libmixprec/mixprec-enum-types.h.template \
	libmixprec/mixprec-enum-types.c.template
