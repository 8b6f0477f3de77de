## tests/local.mk — `make check`. GTest programs speak TAP (GLib >= 2.62 prints
## it by default); Python and gjs
## tests print TAP themselves. All run against the uninstalled build.

LOG_DRIVER = env AM_TAP_AWK='$(AWK)' $(SHELL) $(top_srcdir)/build-aux/tap-driver.sh
LOG_DRIVER_FLAGS = --comments
TEST_EXTENSIONS = .py .js .sh
PY_LOG_DRIVER = $(LOG_DRIVER)
PY_LOG_COMPILER = $(PYTHON_GI)
JS_LOG_DRIVER = $(LOG_DRIVER)
JS_LOG_COMPILER = $(GJS)
SH_LOG_DRIVER = $(LOG_DRIVER)
# Under the sanitizers a test that LeakSanitizer's own tracer broke runs
# again (see the script); leaks and every other failure count at once.
if ENABLE_SANITIZERS
LOG_COMPILER = $(SHELL) $(top_srcdir)/build-aux/lsan-tracer-retry.sh
SH_LOG_COMPILER = $(SHELL) $(top_srcdir)/build-aux/lsan-tracer-retry.sh $(SHELL)
else
SH_LOG_COMPILER = $(SHELL)
endif
EXTRA_DIST += build-aux/lsan-tracer-retry.sh

AM_TESTS_ENVIRONMENT = \
	export G_TEST_SRCDIR="$(abs_top_srcdir)/tests"; \
	export G_TEST_BUILDDIR="$(abs_top_builddir)/tests"; \
	export MIXPREC_TOP_BUILDDIR="$(abs_top_builddir)"; \
	export LD_LIBRARY_PATH="$(abs_top_builddir)/libmixprec/.libs$${LD_LIBRARY_PATH:+:$$LD_LIBRARY_PATH}"; \
	export GI_TYPELIB_PATH="$(abs_top_builddir)/bindings$${GI_TYPELIB_PATH:+:$$GI_TYPELIB_PATH}"; \
	export PYTHONPATH="$(abs_top_srcdir)/bindings$${PYTHONPATH:+:$$PYTHONPATH}"; \
	export MIXPREC_PLUGIN_PATH="$(abs_top_builddir)/plugins"; \
	export MIXPREC_PLUGIN_SYSTEM_PATH=""; \
	export MALLOC_PERTURB_=165; \
	export UCX_NET_DEVICES=lo;
# The tests that train for hundreds of steps to compare losses train fewer
# under the sanitizers, where they look for memory errors (the README's
# check, unsanitized, compares the losses).
if ENABLE_SANITIZERS
AM_TESTS_ENVIRONMENT += export MIXPREC_TEST_SANITIZERS=yes;
endif

# Tests of public behaviour link the shared library; tests that compare
# internal kernels (scalar against SIMD) link the convenience library.
tests_public_ldadd = libmixprec/libmixprec.la $(MIXPREC_DEPS_LIBS)
tests_internal_ldadd = libmixprec/libmixprec-internal.la $(MIXPREC_DEPS_LIBS) $(PTHREAD_LIBS)
tests_internal_cppflags = $(AM_CPPFLAGS) -DMIXPREC_COMPILATION

EXTRA_DIST += build-aux/tap-driver.sh

# --- runtime
check_PROGRAMS += tests/test-runtime
tests_test_runtime_LDADD = $(tests_public_ldadd)
TESTS += tests/test-runtime

# --- bindings: the same library from Python, gjs and Vala
EXTRA_DIST += tests/test-dtype-gi.py tests/test-dtype-gi.js tests/test-dtype-vala.vala
if HAVE_PYTHON_GI
TESTS += tests/test-dtype-gi.py
endif
if HAVE_GJS
TESTS += tests/test-dtype-gi.js
endif
if HAVE_VALAC
# valac compiles against the generated mixprec.vapi and the uninstalled library.
tests/test-dtype-vala$(EXEEXT): $(srcdir)/tests/test-dtype-vala.vala bindings/mixprec.vapi libmixprec/libmixprec.la include/mixprec/.stamp
	$(AM_V_GEN)$(MKDIR_P) tests/vala-c && $(VALAC) --quiet \
	  --vapidir=$(top_builddir)/bindings --pkg mixprec --pkg gio-2.0 --pkg json-glib-1.0 \
	  --directory=tests/vala-c --basedir=$(srcdir)/tests \
	  -X -I$(top_builddir)/include -X -w $(foreach f,$(MIXPREC_DEPS_CFLAGS),-X $(f)) \
	  -X -L$(top_builddir)/libmixprec/.libs -X -lmixprec \
	  -o $(abs_top_builddir)/tests/test-dtype-vala$(EXEEXT) $(srcdir)/tests/test-dtype-vala.vala
check_SCRIPTS += tests/test-dtype-vala$(EXEEXT)
TESTS += tests/test-dtype-vala$(EXEEXT)
CLEANFILES += tests/test-dtype-vala$(EXEEXT)
endif

# --- zero-copy views: the Python overrides (bindings/gi/overrides, found
# through PYTHONPATH above) against the uninstalled library; dlpack-layout
# prints dlpack.h's layout for the test to compare with its ctypes one.
EXTRA_DIST += tests/test-views-gi.py tests/dlpack-layout.c tests/python_optional.py tests/python_tap.py
if HAVE_PYTHON_GI
TESTS += tests/test-views-gi.py
if HAVE_DLPACK
check_PROGRAMS += tests/dlpack-layout
tests_dlpack_layout_SOURCES = tests/dlpack-layout.c
endif
endif

# --- the version macros (availability, deprecation) seen by a program
# compiled against the build tree's headers
AM_TESTS_ENVIRONMENT += export CC="$(CC)" MIXPREC_DEPS_CFLAGS="$(MIXPREC_DEPS_CFLAGS)";
TESTS += tests/test-version-macros.sh
EXTRA_DIST += tests/test-version-macros.sh

# --- gi-docgen check on the built .gir: every symbol documented (skips
# without gi-docgen or introspection)
if HAVE_INTROSPECTION
AM_TESTS_ENVIRONMENT += export MIXPREC_GIR="$(abs_top_builddir)/bindings/Mixprec-1.0.gir";
endif
AM_TESTS_ENVIRONMENT += export GI_DOCGEN="$(GI_DOCGEN)";
TESTS += tests/test-gi-docgen-check.sh
EXTRA_DIST += tests/test-gi-docgen-check.sh

# --- byte arguments: every GBytes argument takes Python buffers, NumPy
# arrays and CPU torch tensors; Config.new_from_data takes str and bytes.
EXTRA_DIST += tests/test-bytes-gi.py
if HAVE_PYTHON_GI
TESTS += tests/test-bytes-gi.py
endif

# --- loss scalers
check_PROGRAMS += tests/test-loss-scaler
tests_test_loss_scaler_LDADD = $(tests_public_ldadd)
TESTS += tests/test-loss-scaler
if HAVE_PYTHON_GI
TESTS += tests/test-loss-scaler-gi.py
endif
EXTRA_DIST += tests/test-loss-scaler-gi.py

# --- FP8 recipes and scalings; the delayed-scaling sequence against a
# torch transcription of Transformer Engine's algorithm (PYTHON_TORCH)
check_PROGRAMS += tests/test-fp8-recipe
tests_test_fp8_recipe_LDADD = $(tests_public_ldadd) -lm
TESTS += tests/test-fp8-recipe
EXTRA_DIST += tests/test-fp8-te.py tests/test-fp8-recipe-gi.py
if HAVE_PYTHON_GI
TESTS += tests/test-fp8-te.py tests/test-fp8-recipe-gi.py
endif

# --- the quantization maps of libmixprec/numeric/numeric-quant.h against
# torchao's, bit for bit (PYTHON_TORCH with torchao; skips without)
EXTRA_DIST += tests/test-quant-maps.py
if HAVE_PYTHON_GI
TESTS += tests/test-quant-maps.py
endif

# --- ZeRO++'s block quantizer (libmixprec/numeric/numeric-zeropp.h)
# against a torch transcription of DeepSpeed's CUDA kernels, bit for bit
# on 10^6 values (PYTHON_TORCH; skips without torch); zeropp-quant-dump
# runs the library's quantizer on the test's files
check_PROGRAMS += tests/zeropp-quant-dump
tests_zeropp_quant_dump_CPPFLAGS = $(tests_internal_cppflags)
tests_zeropp_quant_dump_LDADD = $(tests_internal_ldadd)
EXTRA_DIST += tests/test-zeropp-quant.py
if HAVE_PYTHON_GI
TESTS += tests/test-zeropp-quant.py
endif

# --- the quantizer over whole buffers (blocks, SIMD code kernels, decoding
# tables) against numeric-zeropp.h's element-wise rules, bit for bit
check_PROGRAMS += tests/test-zeropp-blocks
tests_test_zeropp_blocks_CPPFLAGS = $(tests_internal_cppflags)
tests_test_zeropp_blocks_LDADD = $(tests_internal_ldadd) -lm
TESTS += tests/test-zeropp-blocks

# --- registry: plugin loading, with deliberately broken test plugins built
# as uninstalled modules in tests/plugins/ (not on the default search path)
test_registry_plugins = \
	tests/plugins/mixprec-test-good.la \
	tests/plugins/mixprec-test-rank.la \
	tests/plugins/mixprec-test-abi-major.la \
	tests/plugins/mixprec-test-abi-minor.la \
	tests/plugins/mixprec-test-no-entry.la \
	tests/plugins/mixprec-test-init-fails.la \
	tests/plugins/mixprec-test-name-mismatch.la \
	tests/plugins/mixprec-test-bad-feature.la \
	tests/plugins/mixprec-test-null-desc.la \
	tests/plugins/mixprec-test-no-init.la \
	tests/plugins/mixprec-test-unrelated.la
check_LTLIBRARIES += $(test_registry_plugins)
# -rpath makes libtool build a shared module although it is never installed.
test_plugin_ldflags = -module -avoid-version -shared -rpath /nowhere
tests_plugins_mixprec_test_good_la_SOURCES = tests/plugins/test-good.c
tests_plugins_mixprec_test_good_la_LDFLAGS = $(test_plugin_ldflags)
tests_plugins_mixprec_test_rank_la_SOURCES = tests/plugins/test-rank.c
tests_plugins_mixprec_test_rank_la_LDFLAGS = $(test_plugin_ldflags)
tests_plugins_mixprec_test_abi_major_la_SOURCES = tests/plugins/test-abi-major.c
tests_plugins_mixprec_test_abi_major_la_LDFLAGS = $(test_plugin_ldflags)
tests_plugins_mixprec_test_abi_minor_la_SOURCES = tests/plugins/test-abi-minor.c
tests_plugins_mixprec_test_abi_minor_la_LDFLAGS = $(test_plugin_ldflags)
tests_plugins_mixprec_test_no_entry_la_SOURCES = tests/plugins/test-no-entry.c
tests_plugins_mixprec_test_no_entry_la_LDFLAGS = $(test_plugin_ldflags)
tests_plugins_mixprec_test_init_fails_la_SOURCES = tests/plugins/test-init-fails.c
tests_plugins_mixprec_test_init_fails_la_LDFLAGS = $(test_plugin_ldflags)
tests_plugins_mixprec_test_name_mismatch_la_SOURCES = tests/plugins/test-name-mismatch.c
tests_plugins_mixprec_test_name_mismatch_la_LDFLAGS = $(test_plugin_ldflags)
tests_plugins_mixprec_test_bad_feature_la_SOURCES = tests/plugins/test-bad-feature.c
tests_plugins_mixprec_test_bad_feature_la_LDFLAGS = $(test_plugin_ldflags)
tests_plugins_mixprec_test_null_desc_la_SOURCES = tests/plugins/test-null-desc.c
tests_plugins_mixprec_test_null_desc_la_LDFLAGS = $(test_plugin_ldflags)
tests_plugins_mixprec_test_no_init_la_SOURCES = tests/plugins/test-no-init.c
tests_plugins_mixprec_test_no_init_la_LDFLAGS = $(test_plugin_ldflags)
tests_plugins_mixprec_test_unrelated_la_SOURCES = tests/plugins/test-unrelated.c
tests_plugins_mixprec_test_unrelated_la_LDFLAGS = $(test_plugin_ldflags)

check_PROGRAMS += tests/test-registry
tests_test_registry_CPPFLAGS = $(tests_internal_cppflags)
tests_test_registry_LDADD = $(tests_internal_ldadd)
EXTRA_tests_test_registry_DEPENDENCIES = $(test_registry_plugins) \
	tests/abi-plugins/mixprec-test-optim-v1.la tests/abi-plugins/mixprec-test-optim-v2.la \
	tests/abi-plugins/mixprec-test-comm-v1.la plugins/mixprec-optim-sgd.la
TESTS += tests/test-registry
if HAVE_PYTHON_GI
TESTS += tests/test-registry-gi.py
endif
TESTS += tests/test-inspect-plugins.sh
EXTRA_DIST += tests/test-registry-gi.py tests/test-inspect-plugins.sh

# --- security of plugin loading: each attack on the search path and the
# loader replayed against the registry and tools/mixprec-inspect. The
# plugins of tests/desc-plugins/ return descriptions that must not be
# read in place (a stray, heap or stack pointer, a structure cut short by
# the end of the module, bad texts, a stray init).
test_desc_plugins = \
	tests/desc-plugins/mixprec-test-bad-ptr.la \
	tests/desc-plugins/mixprec-test-heap-desc.la \
	tests/desc-plugins/mixprec-test-stack-desc.la \
	tests/desc-plugins/mixprec-test-short-desc.la \
	tests/desc-plugins/mixprec-test-bad-name.la \
	tests/desc-plugins/mixprec-test-bad-string.la \
	tests/desc-plugins/mixprec-test-bad-init.la
check_LTLIBRARIES += $(test_desc_plugins)
tests_desc_plugins_mixprec_test_bad_ptr_la_SOURCES = tests/desc-plugins/test-bad-ptr.c
tests_desc_plugins_mixprec_test_bad_ptr_la_LDFLAGS = $(test_plugin_ldflags)
tests_desc_plugins_mixprec_test_heap_desc_la_SOURCES = tests/desc-plugins/test-heap-desc.c
tests_desc_plugins_mixprec_test_heap_desc_la_LDFLAGS = $(test_plugin_ldflags)
tests_desc_plugins_mixprec_test_stack_desc_la_SOURCES = tests/desc-plugins/test-stack-desc.c
tests_desc_plugins_mixprec_test_stack_desc_la_LDFLAGS = $(test_plugin_ldflags)
tests_desc_plugins_mixprec_test_short_desc_la_SOURCES = tests/desc-plugins/test-short-desc.c
tests_desc_plugins_mixprec_test_short_desc_la_LDFLAGS = $(test_plugin_ldflags)
tests_desc_plugins_mixprec_test_bad_name_la_SOURCES = tests/desc-plugins/test-bad-name.c
tests_desc_plugins_mixprec_test_bad_name_la_LDFLAGS = $(test_plugin_ldflags)
tests_desc_plugins_mixprec_test_bad_string_la_SOURCES = tests/desc-plugins/test-bad-string.c
tests_desc_plugins_mixprec_test_bad_string_la_LDFLAGS = $(test_plugin_ldflags)
tests_desc_plugins_mixprec_test_bad_init_la_SOURCES = tests/desc-plugins/test-bad-init.c
tests_desc_plugins_mixprec_test_bad_init_la_LDFLAGS = $(test_plugin_ldflags)

check_PROGRAMS += tests/test-security-plugins
tests_test_security_plugins_LDADD = $(tests_public_ldadd)
EXTRA_tests_test_security_plugins_DEPENDENCIES = $(test_desc_plugins) \
	tests/plugins/mixprec-test-good.la tests/plugins/mixprec-test-unrelated.la \
	tools/mixprec-inspect$(EXEEXT)
TESTS += tests/test-security-plugins

# --- dtype
check_PROGRAMS += tests/test-dtype
tests_test_dtype_SOURCES = tests/test-dtype.c tests/dtype-reference.h
tests_test_dtype_CPPFLAGS = $(tests_internal_cppflags)
tests_test_dtype_LDADD = $(tests_internal_ldadd) -lm
TESTS += tests/test-dtype

# --- engine kernels: the sum of squares at every SIMD level
check_PROGRAMS += tests/test-engine-kernels
tests_test_engine_kernels_CPPFLAGS = $(tests_internal_cppflags)
tests_test_engine_kernels_LDADD = $(tests_internal_ldadd) -lm
TESTS += tests/test-engine-kernels

# --- optim: the cpu optimizer plugins, loaded from plugins/.libs
check_PROGRAMS += tests/test-optim
tests_test_optim_LDADD = $(tests_public_ldadd) $(LIBS)
EXTRA_tests_test_optim_DEPENDENCIES = \
	plugins/mixprec-optim-adamw.la \
	plugins/mixprec-optim-sgd.la \
	plugins/mixprec-optim-lion.la
TESTS += tests/test-optim

# --- optim formats: revision 3 of the cpu optimizers (block-scaled and
# quantized state, remainder and Kahan masters) against a reference of the
# documented rules, at every kernel level; the codecs of plugins/optim-quant
# linked in directly
check_PROGRAMS += tests/test-optim-formats
tests_test_optim_formats_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/plugins -I$(top_srcdir)/libmixprec
tests_test_optim_formats_LDADD = plugins/libmixprec-optim-common.la $(tests_public_ldadd) \
	$(PTHREAD_LIBS) -lm
EXTRA_tests_test_optim_formats_DEPENDENCIES = \
	plugins/mixprec-optim-adamw.la \
	plugins/mixprec-optim-sgd.la \
	plugins/mixprec-optim-lion.la
TESTS += tests/test-optim-formats

# --- learning-rate schedules
check_PROGRAMS += tests/test-lr-schedule
tests_test_lr_schedule_LDADD = $(tests_public_ldadd) -lm
TESTS += tests/test-lr-schedule
EXTRA_DIST += tests/test-lr-schedule-gi.py
if HAVE_PYTHON_GI
TESTS += tests/test-lr-schedule-gi.py
endif

# --- partitioner (deprecated in 1.1: the 1.0 API keeps working, warning-free
# even once MIXPREC_VERSION_MIN_REQUIRED reaches 1.1)
check_PROGRAMS += tests/test-partitioner
tests_test_partitioner_CPPFLAGS = $(AM_CPPFLAGS) -DMIXPREC_DISABLE_DEPRECATION_WARNINGS
tests_test_partitioner_LDADD = $(tests_public_ldadd)
TESTS += tests/test-partitioner
EXTRA_DIST += tests/test-partitioner-gi.py
if HAVE_PYTHON_GI
TESTS += tests/test-partitioner-gi.py
endif

# --- layout: the plan against the engine that runs it, on one process and
# as ranks
check_PROGRAMS += tests/test-layout
tests_test_layout_SOURCES = tests/test-layout.c tests/multiproc.c tests/multiproc.h
tests_test_layout_LDADD = $(tests_public_ldadd)
TESTS += tests/test-layout
EXTRA_DIST += tests/test-layout-gi.py
if HAVE_PYTHON_GI
TESTS += tests/test-layout-gi.py
endif

# --- config and precision policy (corpus of real-world DeepSpeed files in tests/configs)
check_PROGRAMS += tests/test-config tests/test-policy
tests_test_config_LDADD = $(tests_public_ldadd)
tests_test_policy_LDADD = $(tests_public_ldadd)
TESTS += tests/test-config tests/test-policy tests/test-inspect-config.sh
if HAVE_PYTHON_GI
TESTS += tests/test-config-gi.py
endif
EXTRA_DIST += \
	tests/test-config-gi.py \
	tests/test-inspect-config.sh \
	tests/configs/autocast-bf16.json \
	tests/configs/bf16-no-master.json \
	tests/configs/fp16-torch-scaler.json \
	tests/configs/hf-trainer-auto.json \
	tests/configs/hf-trainer-resolved.json \
	tests/configs/monitors-profiler.json \
	tests/configs/zero2-fp16-warmup.json \
	tests/configs/zero3-bf16-offload.json \
	tests/configs/real/README \
	tests/configs/real/EXPECTED \
	tests/configs/real/accelerate-ds_config_zero3_model_only.json \
	tests/configs/real/accelerate-sp-alst.json \
	tests/configs/real/accelerate-zero_stage1_config.json \
	tests/configs/real/accelerate-zero_stage2_config.json \
	tests/configs/real/accelerate-zero_stage2_offload_config.json \
	tests/configs/real/accelerate-zero_stage3_config.json \
	tests/configs/real/accelerate-zero_stage3_offload_config.json \
	tests/configs/real/alpaca-default_offload_opt_param.json \
	tests/configs/real/chatglm-ptuning_deepspeed.json \
	tests/configs/real/deepspeed-accelerator_ds_config.json \
	tests/configs/real/deepspeed-ds_batch_config.json \
	tests/configs/real/deepspeed-gpt2_func_bs8_zero0_gas3.json \
	tests/configs/real/deepspeed-gpt2_func_bs8_zero2_offload.json \
	tests/configs/real/deepspeed-gpt2_func_scheduler.json \
	tests/configs/real/deepspeed-gpt2_perf_bs16.json \
	tests/configs/real/deepspeed-hybrid_engine_config.json \
	tests/configs/real/deepspeed-squad_bsz24_fp16_eigenvalue_quantize.json \
	tests/configs/real/deepspeed-squad_bsz24_fp32.json \
	tests/configs/real/deepspeed-template_zero2.json \
	tests/configs/real/deepspeed-template_zero3.json \
	tests/configs/real/deepspeed-torch_compile_z3.json \
	tests/configs/real/dsexamples-autotuning_fp16_z2.json \
	tests/configs/real/dsexamples-autotuning_tune.json \
	tests/configs/real/dsexamples-bert_01adam_seq128_nccl.json \
	tests/configs/real/dsexamples-bert_lamb_bsz64k_seq128.json \
	tests/configs/real/dsexamples-bert_onebitadam_seq128_nccl.json \
	tests/configs/real/dsexamples-bert_onebitlamb_seq128_nccl.json \
	tests/configs/real/dsexamples-bert_progressive_layer_drop.json \
	tests/configs/real/dsexamples-cifar_channel_prune.json \
	tests/configs/real/dsexamples-cifar_ds_config.json \
	tests/configs/real/dsexamples-gan_deepspeed_config.json \
	tests/configs/real/dsexamples-gpt2_W8A8_Qgroup64_fp16.json \
	tests/configs/real/dsexamples-gpt2_W8A8_Qgroup64_fp32.json \
	tests/configs/real/dsexamples-imagenet_ds_fp16_z1_config.json \
	tests/configs/real/dsexamples-megatron_ds_zero2_config.json \
	tests/configs/real/dsexamples-megatron_zero-offload_10B.json \
	tests/configs/real/dsexamples-megatron_zero3_ds_config.json \
	tests/configs/real/dsexamples-megatron_zero3_infinity.json \
	tests/configs/real/dsexamples-moq_test.json \
	tests/configs/real/dsexamples-pipeline_parallelism.json \
	tests/configs/real/dsexamples-qanet_bsz512_1cycle.json \
	tests/configs/real/dsexamples-squad_bsz24_config.json \
	tests/configs/real/dsexamples-vit_cifar_random_ltd.json \
	tests/configs/real/fastchat-deepspeed_config_s2.json \
	tests/configs/real/fastchat-deepspeed_config_s3.json \
	tests/configs/real/internvl-chat_zero_stage1_config.json \
	tests/configs/real/internvl-chat_zero_stage3_100b_1e7_offload.json \
	tests/configs/real/internvl-g_zero_stage2_config.json \
	tests/configs/real/internvl-seg_adam_zero1_amp.json \
	tests/configs/real/internvl-seg_adam_zero1_bf16.json \
	tests/configs/real/internvl-seg_adam_zero3_fp16.json \
	tests/configs/real/llamafactory-ds_z0_config.json \
	tests/configs/real/llamafactory-ds_z2_config.json \
	tests/configs/real/llamafactory-ds_z2_offload_config.json \
	tests/configs/real/llamafactory-ds_z3_config.json \
	tests/configs/real/llamafactory-ds_z3_fp8_config.json \
	tests/configs/real/llamafactory-ds_z3_offload_config.json \
	tests/configs/real/llava-zero2.json \
	tests/configs/real/llava-zero3.json \
	tests/configs/real/llava-zero3_offload.json \
	tests/configs/real/megatrondeepspeed-ds_config.json \
	tests/configs/real/megatrondeepspeed-ds_config_bf16.json \
	tests/configs/real/megatrondeepspeed-ds_config_cl.json \
	tests/configs/real/qwen-ds_config_zero2.json \
	tests/configs/real/qwen-ds_config_zero3.json \
	tests/configs/real/transformers-ds_config_zero2.json \
	tests/configs/real/transformers-ds_config_zero3.json \
	tests/configs/real/transformers-ds_config_zero3_bf16.json \
	tests/configs/real/trlx-gptj_summarize.json \
	tests/configs/real/trlx-sft_gptj.json

# --- engine
# --- the sign of a state slot is the optimizer plugin's (state_signed_mask):
# adamw with its slots renamed, in a folder of its own.
check_LTLIBRARIES += tests/optim-plugins/mixprec-test-optim-renamed.la
tests_optim_plugins_mixprec_test_optim_renamed_la_SOURCES = \
	tests/optim-plugins/test-optim-renamed.c \
	plugins/optim-adamw/adamw-schema.c \
	plugins/optim-adamw/adamw-scalar.c
tests_optim_plugins_mixprec_test_optim_renamed_la_CPPFLAGS = $(optim_plugin_cppflags)
tests_optim_plugins_mixprec_test_optim_renamed_la_CFLAGS = $(optim_plugin_cflags)
tests_optim_plugins_mixprec_test_optim_renamed_la_LDFLAGS = $(test_plugin_ldflags)
tests_optim_plugins_mixprec_test_optim_renamed_la_LIBADD = plugins/libmixprec-optim-common.la
check_PROGRAMS += tests/test-state-signed
tests_test_state_signed_LDADD = $(tests_public_ldadd) -lm
EXTRA_tests_test_state_signed_DEPENDENCIES = tests/optim-plugins/mixprec-test-optim-renamed.la
TESTS += tests/test-state-signed

check_PROGRAMS += tests/test-engine
tests_test_engine_LDADD = $(tests_public_ldadd) -lm
TESTS += tests/test-engine
EXTRA_DIST += tests/test-engine-gi.py
if HAVE_PYTHON_GI
TESTS += tests/test-engine-gi.py
endif

# --- the short trainer API (new_from_file, micro_step) against the calls
# it stands for
check_PROGRAMS += tests/test-engine-trainer
tests_test_engine_trainer_LDADD = $(tests_public_ldadd) -lm
TESTS += tests/test-engine-trainer

# --- engine in fp16 without masters, and AdamW with bf16 state: steps
# bitwise against AdamW applied by hand, overflow skips, training runs
check_PROGRAMS += tests/test-engine-fp16nm
tests_test_engine_fp16nm_LDADD = $(tests_public_ldadd) -lm
TESTS += tests/test-engine-fp16nm

# --- engine step: the lean one-process passes, bitwise against the scalar
# kernels and the optimizer applied by hand
check_PROGRAMS += tests/test-engine-step
tests_test_engine_step_CPPFLAGS = $(tests_internal_cppflags)
tests_test_engine_step_LDADD = $(tests_internal_ldadd) -lm
TESTS += tests/test-engine-step

# --- what steps tell: log messages, steps_per_print, csv_monitor and
# tensorboard; the event file read back by the tensorboard package (PyPI),
# run by PYTHON_GI, re-executed with PYTHON_TENSORBOARD when needed
check_PROGRAMS += tests/test-monitor
tests_test_monitor_CPPFLAGS = $(tests_internal_cppflags)
tests_test_monitor_LDADD = $(tests_internal_ldadd) -lm
TESTS += tests/test-monitor
EXTRA_DIST += tests/test-monitor-tensorboard-gi.py tests/test-charlm-monitors.sh
AM_TESTS_ENVIRONMENT += export PYTHON_TENSORBOARD="$(PYTHON_TENSORBOARD)";
if HAVE_PYTHON_TENSORBOARD
TESTS += tests/test-monitor-tensorboard-gi.py
endif
TESTS += tests/test-charlm-monitors.sh

# --- example trainer: examples/charlm in short runs, and its Python twin
# sourced by the charlm shell tests
EXTRA_DIST += tests/charlm-common.sh
EXTRA_DIST += tests/test-charlm.sh tests/test-charlm-py.py
TESTS += tests/test-charlm.sh
# each master and optimizer-state representation beside FP32 masters and moments
EXTRA_DIST += tests/test-charlm-representations.sh
TESTS += tests/test-charlm-representations.sh
if HAVE_PYTHON_GI
TESTS += tests/test-charlm-py.py
endif

# --- examples/charlm with FP8 working copies of its Linear layers (--fp8,
# examples/configs/bf16-fp8*.json): within 3% of the bf16 validation loss
EXTRA_DIST += tests/test-charlm-fp8.sh
TESTS += tests/test-charlm-fp8.sh
# --- and with 4-bit working copies (examples/configs/bf16-nvfp4.json, 16x16
# tiles and the Hadamard transform; bf16-mxfp4.json): a short smoke run
EXTRA_DIST += tests/test-charlm-fp4.sh
TESTS += tests/test-charlm-fp4.sh
# on 2 ranks at ZeRO-2/3, the same as one process (needs the UCX plugin),
# FP8 and 4-bit copies
EXTRA_DIST += tests/test-charlm-fp8-dist.sh
if HAVE_UCX
TESTS += tests/test-charlm-fp8-dist.sh
endif
# and examples/torch-charlm.py --fp8, run by PYTHON_TORCH (skips without)
EXTRA_DIST += tests/test-torch-charlm-fp8.sh
if HAVE_PYTHON_GI
TESTS += tests/test-torch-charlm-fp8.sh
endif

# --- mixprec.torch, the PyTorch front (bindings/python), and its example:
# run by PYTHON_TORCH (configure: a Python with gi, numpy and torch); they
# skip with the reason when there is none.
EXTRA_DIST += tests/test-torch-front.py tests/test-torch-charlm.sh tests/test-torch-cuda.py
# mixprec.torch as a drop-in for DeepSpeed: one DeepSpeed training script
# run under both (PYTHON_TORCH with deepspeed and transformers; skips
# without) on one rank and on two (and with a comm plugin), and one test
# per surprise a DeepSpeed user would meet. ZeRO-3 through mixprec.torch:
# on one process against ZeRO-0, and on 2 and 3 ranks against one
# process, bit for bit (with a comm plugin).
EXTRA_DIST += tests/test-torch-deepspeed-compat.py tests/torch-ds-train.py \
	tests/test-torch-surprises.py tests/torch_ds_common.py \
	tests/test-torch-deepspeed-dist.py tests/torch-ds-ranks.py \
	tests/test-torch-zero3-dist.py tests/torch-zero3-worker.py tests/test-torch-zero3.py
AM_TESTS_ENVIRONMENT += export PYTHON_TORCH="$(PYTHON_TORCH)"; \
	export PYTHONPATH="$(abs_top_srcdir)/bindings/python:$$PYTHONPATH";
if HAVE_UCX
AM_TESTS_ENVIRONMENT += export MIXPREC_TEST_HAVE_UCX=yes;
endif
if HAVE_PYTHON_GI
TESTS += tests/test-torch-front.py tests/test-torch-charlm.sh
TESTS += tests/test-torch-deepspeed-compat.py tests/test-torch-surprises.py
TESTS += tests/test-torch-deepspeed-dist.py tests/test-torch-zero3-dist.py \
	tests/test-torch-zero3.py
# On the cuda device; skips with the reason where no GPU is usable.
TESTS += tests/test-torch-cuda.py
endif

# --- abi: layouts of the public structs and vtables (x86-64 table), and the
# plugin ABI checked in both directions. The host-check plugin sits in its
# own folder so the registry tests' plugin counts stay as they are.
check_LTLIBRARIES += tests/abi-plugins/mixprec-test-host-check.la
tests_abi_plugins_mixprec_test_host_check_la_SOURCES = tests/abi-plugins/test-host-check.c
tests_abi_plugins_mixprec_test_host_check_la_LDFLAGS = $(test_plugin_ldflags)
# A plugin of plugin ABI 1.0, built against a frozen copy of that header:
# the V1 optimizer shim keeps it loading and stepping.
check_LTLIBRARIES += tests/abi-plugins/mixprec-test-optim-v1.la
tests_abi_plugins_mixprec_test_optim_v1_la_SOURCES = \
	tests/abi-plugins/test-optim-v1.c \
	tests/abi-plugins/mixprec-plugin-abi-1.0.h
tests_abi_plugins_mixprec_test_optim_v1_la_LDFLAGS = $(test_plugin_ldflags)
tests_abi_plugins_mixprec_test_optim_v1_la_LIBADD = -lm
# A communicator of plugin ABI 1.0 (MixprecCommV1): loads and runs without
# the all-to-all of revision 2.
check_LTLIBRARIES += tests/abi-plugins/mixprec-test-comm-v1.la
tests_abi_plugins_mixprec_test_comm_v1_la_SOURCES = \
	tests/abi-plugins/test-comm-v1.c \
	tests/abi-plugins/mixprec-plugin-abi-1.0.h
tests_abi_plugins_mixprec_test_comm_v1_la_LDFLAGS = $(test_plugin_ldflags)
# A plugin of plugin ABI 1.1 (MixprecOptimizerV2): the revision 2 shim of
# revision 3 calls.
check_LTLIBRARIES += tests/abi-plugins/mixprec-test-optim-v2.la
tests_abi_plugins_mixprec_test_optim_v2_la_SOURCES = tests/abi-plugins/test-optim-v2.c
tests_abi_plugins_mixprec_test_optim_v2_la_LDFLAGS = $(test_plugin_ldflags)
tests_abi_plugins_mixprec_test_optim_v2_la_LIBADD = -lm
check_PROGRAMS += tests/test-abi
tests_test_abi_LDADD = $(tests_public_ldadd)
EXTRA_tests_test_abi_DEPENDENCIES = \
	tests/abi-plugins/mixprec-test-host-check.la \
	tests/abi-plugins/mixprec-test-optim-v1.la \
	tests/abi-plugins/mixprec-test-optim-v2.la \
	tests/abi-plugins/mixprec-test-comm-v1.la \
	plugins/mixprec-optim-adamw.la \
	plugins/mixprec-optim-sgd.la \
	plugins/mixprec-optim-lion.la
TESTS += tests/test-abi

# --- bootstrap: environment parsing, and real multi-process rendezvous
# (the test re-executes itself as the other ranks, on 127.0.0.1)
check_PROGRAMS += tests/test-bootstrap
tests_test_bootstrap_CPPFLAGS = $(tests_internal_cppflags)
tests_test_bootstrap_LDADD = $(tests_internal_ldadd)
TESTS += tests/test-bootstrap
EXTRA_DIST += tests/test-bootstrap-gi.py
if HAVE_PYTHON_GI
TESTS += tests/test-bootstrap-gi.py
endif

# --- security: the attacks on the rendezvous, replayed on 127.0.0.1
check_PROGRAMS += tests/test-security-rendezvous
tests_test_security_rendezvous_CPPFLAGS = $(tests_internal_cppflags)
tests_test_security_rendezvous_LDADD = $(tests_internal_ldadd)
TESTS += tests/test-security-rendezvous
# and against the real tools: mixprec-run with the example trainer while a
# stranger connects first (needs the UCX plugin for 2 ranks)
EXTRA_DIST += tests/test-security-run.sh
if HAVE_UCX
TESTS += tests/test-security-run.sh
endif

# --- mixprec-run: the local launcher (its last case runs test-bootstrap's ranks)
TESTS += tests/test-mixprec-run.sh
EXTRA_DIST += tests/test-mixprec-run.sh

# --- comm: the built-in local communicator, argument checks, plugin
# failures (tests/plugins/test-comm.c), and multi-process runs of the
# comm-ucx plugin at 2, 3 and 4 ranks (skipped when UCX is not configured)
test_registry_plugins += \
	tests/plugins/mixprec-test-comm.la \
	tests/plugins/mixprec-test-bad-comm.la
tests_plugins_mixprec_test_comm_la_SOURCES = tests/plugins/test-comm.c
tests_plugins_mixprec_test_comm_la_LDFLAGS = $(test_plugin_ldflags)
tests_plugins_mixprec_test_bad_comm_la_SOURCES = tests/plugins/test-bad-comm.c
tests_plugins_mixprec_test_bad_comm_la_LDFLAGS = $(test_plugin_ldflags)
check_PROGRAMS += tests/test-comm
tests_test_comm_SOURCES = \
	tests/test-comm.c \
	tests/comm-ranks.c \
	tests/comm-ranks.h \
	tests/comm-reference.h \
	tests/dtype-reference.h
# Internal: the all-to-all of communicator revision 2 is private API.
tests_test_comm_LDADD = $(tests_internal_ldadd) -lm
tests_test_comm_CPPFLAGS = $(tests_internal_cppflags)
EXTRA_tests_test_comm_DEPENDENCIES = $(test_registry_plugins)
if HAVE_UCX
tests_test_comm_CPPFLAGS += -DMIXPREC_TEST_HAVE_UCX=1
EXTRA_tests_test_comm_DEPENDENCIES += plugins/mixprec-comm-ucx.la
endif
TESTS += tests/test-comm
EXTRA_DIST += tests/test-comm-gi.py
if HAVE_PYTHON_GI
TESTS += tests/test-comm-gi.py
endif

# --- ZeRO across processes (needs the UCX comm plugin)
if HAVE_UCX
check_PROGRAMS += tests/test-zero
tests_test_zero_SOURCES = tests/test-zero.c tests/multiproc.c tests/multiproc.h \
	tests/engine-ranks-common.c tests/engine-ranks-common.h
# Reads the engine's state buffers to compare representations bit for bit.
tests_test_zero_CPPFLAGS = $(tests_internal_cppflags)
tests_test_zero_LDADD = $(tests_internal_ldadd) -lm
TESTS += tests/test-zero
endif

# --- mixprec_engine_set_master(): on one process against a fresh engine;
# on 2 ranks (with a comm plugin) against one process
check_PROGRAMS += tests/test-engine-set-master
tests_test_engine_set_master_SOURCES = tests/test-engine-set-master.c tests/multiproc.c tests/multiproc.h
tests_test_engine_set_master_LDADD = $(tests_public_ldadd) -lm
TESTS += tests/test-engine-set-master

# --- ZeRO-Offload across processes on the hostdev test device (whose
# plugin registers comm-ucx for it): bitwise against the all-device run,
# checkpoints both ways, the corpus's offload templates (needs UCX)
if HAVE_UCX
check_PROGRAMS += tests/test-offload-ranks
tests_test_offload_ranks_SOURCES = tests/test-offload-ranks.c tests/multiproc.c tests/multiproc.h
tests_test_offload_ranks_CPPFLAGS = $(tests_internal_cppflags)
tests_test_offload_ranks_LDADD = $(tests_internal_ldadd) -lm
EXTRA_tests_test_offload_ranks_DEPENDENCIES = tests/device-plugins/mixprec-test-hostdev.la \
	plugins/mixprec-comm-ucx.la
TESTS += tests/test-offload-ranks
if HAVE_CUDA
TESTS += tests/test-offload-ranks-cuda.sh
endif
endif
EXTRA_DIST += tests/test-offload-ranks-cuda.sh

# --- per-tensor numerics (mixprec.numerics): crafted gradients at 1 and
# 3 ranks, the same bits at both (needs the UCX comm plugin)
if HAVE_UCX
check_PROGRAMS += tests/test-numerics
tests_test_numerics_SOURCES = tests/test-numerics.c tests/multiproc.c tests/multiproc.h
# Compares the AVX2 kernels with the scalar references.
tests_test_numerics_CPPFLAGS = $(tests_internal_cppflags)
tests_test_numerics_LDADD = $(tests_internal_ldadd) -lm
EXTRA_tests_test_numerics_DEPENDENCIES = plugins/mixprec-comm-ucx.la
TESTS += tests/test-numerics
endif

# --- closed-loop precision (mixprec.auto_precision): crafted underflow
# widens and narrows a parameter at the expected steps; limits, resume
# from a checkpoint, 1 and 3 ranks (needs the UCX comm plugin)
if HAVE_UCX
check_PROGRAMS += tests/test-auto-precision
tests_test_auto_precision_SOURCES = tests/test-auto-precision.c tests/multiproc.c tests/multiproc.h
tests_test_auto_precision_LDADD = $(tests_public_ldadd) -lm
EXTRA_tests_test_auto_precision_DEPENDENCIES = plugins/mixprec-comm-ucx.la tools/mixprec-inspect
TESTS += tests/test-auto-precision
endif
# mixprec.torch holds buffer addresses: refused by name.
EXTRA_DIST += tests/test-auto-precision-torch.py
if HAVE_PYTHON_GI
TESTS += tests/test-auto-precision-torch.py
endif

# Each statistic against numpy, through introspection; mixprec.torch's
# accessor against torch's own gradients.
EXTRA_DIST += tests/test-numerics-gi.py tests/test-numerics-torch.py
if HAVE_PYTHON_GI
TESTS += tests/test-numerics-gi.py tests/test-numerics-torch.py
endif

# --- low-precision transport, FP32 sums: bf16 contributions summed over
# 2, 3, 4 and 8 ranks against an FP64 reference (needs the UCX comm plugin)
if HAVE_UCX
check_PROGRAMS += tests/test-reduce-fp32
tests_test_reduce_fp32_SOURCES = \
	tests/test-reduce-fp32.c \
	tests/multiproc.c \
	tests/multiproc.h \
	tests/dtype-reference.h
tests_test_reduce_fp32_LDADD = $(tests_public_ldadd) -lm
EXTRA_tests_test_reduce_fp32_DEPENDENCIES = plugins/mixprec-comm-ucx.la
TESTS += tests/test-reduce-fp32
# the same reductions on 2, 3, 4 and 8 ranks over 3 network-namespace
# hosts, against the ranks on 127.0.0.1 (root only)
TESTS += tests/test-reduce-fp32-netns.sh
endif
EXTRA_DIST += tests/test-reduce-fp32-netns.sh

# --- ZeRO++ quantized weight gathers (qwZ) at ZeRO-3 on 2 and 3 ranks:
# the same bits on every rank, within the quantizer's bound (needs the UCX
# comm plugin)
if HAVE_UCX
check_PROGRAMS += tests/test-zeropp-engine
tests_test_zeropp_engine_SOURCES = \
	tests/test-zeropp-engine.c \
	tests/multiproc.c \
	tests/multiproc.h \
	tests/dtype-reference.h
tests_test_zeropp_engine_LDADD = $(tests_public_ldadd) -lm
EXTRA_tests_test_zeropp_engine_DEPENDENCIES = plugins/mixprec-comm-ucx.la
TESTS += tests/test-zeropp-engine
endif

# --- ZeRO++ hpZ (zero_hpz_partition_size) at ZeRO-3 on 4 ranks in groups
# of 2: the bits of the run without it, the backward gathers inside the
# group (needs the UCX comm plugin)
if HAVE_UCX
check_PROGRAMS += tests/test-hpz-engine
tests_test_hpz_engine_SOURCES = \
	tests/test-hpz-engine.c \
	tests/multiproc.c \
	tests/multiproc.h
tests_test_hpz_engine_LDADD = $(tests_public_ldadd) -lm
EXTRA_tests_test_hpz_engine_DEPENDENCIES = plugins/mixprec-comm-ucx.la
TESTS += tests/test-hpz-engine
endif

# --- the bytes on the wire the engine counts (mixprec_engine_get_comm_bytes)
# on 2 and 3 ranks at ZeRO-1/2/3, with and without qwZ/qgZ, against the
# layout's formula and mixprec_comm_bytes_plan_new() (needs the UCX comm
# plugin)
if HAVE_UCX
check_PROGRAMS += tests/test-comm-bytes
tests_test_comm_bytes_SOURCES = \
	tests/test-comm-bytes.c \
	tests/multiproc.c \
	tests/multiproc.h
tests_test_comm_bytes_LDADD = $(tests_public_ldadd)
EXTRA_tests_test_comm_bytes_DEPENDENCIES = plugins/mixprec-comm-ucx.la tools/mixprec-inspect
TESTS += tests/test-comm-bytes
# the same counts split by host, on 3 network-namespace hosts (root only)
TESTS += tests/test-comm-bytes-netns.sh
endif
EXTRA_DIST += tests/test-comm-bytes-netns.sh
# the plan and the count through GObject Introspection
EXTRA_DIST += tests/test-comm-bytes-gi.py
if HAVE_PYTHON_GI
TESTS += tests/test-comm-bytes-gi.py
endif

# --- ZeRO++ quantized gradients (qgZ) and LoCo at ZeRO-3 on 2 and 3 ranks:
# the reduced slices bit for bit against an independent dequantize-sum,
# within the quantizer's bound (needs the UCX comm plugin)
if HAVE_UCX
check_PROGRAMS += tests/test-zeropp-grad
tests_test_zeropp_grad_SOURCES = \
	tests/test-zeropp-grad.c \
	tests/multiproc.c \
	tests/multiproc.h \
	tests/dtype-reference.h
# Reads the reduced slices and the LoCo error buffers (engine internals).
tests_test_zeropp_grad_CPPFLAGS = $(tests_internal_cppflags)
tests_test_zeropp_grad_LDADD = $(tests_internal_ldadd) -lm
EXTRA_tests_test_zeropp_grad_DEPENDENCIES = plugins/mixprec-comm-ucx.la $(test_registry_plugins)
TESTS += tests/test-zeropp-grad
endif

# --- checkpoints: resume, cross-precision, crash safety (fork + SIGKILL),
# corruption battery; links the convenience library to reach the
# safetensors reader and the list of crash-hook points
check_PROGRAMS += tests/test-checkpoint
tests_test_checkpoint_SOURCES = \
	tests/test-checkpoint.c \
	tests/checkpoint-common.c \
	tests/checkpoint-common.h
tests_test_checkpoint_CPPFLAGS = $(tests_internal_cppflags)
tests_test_checkpoint_LDADD = $(tests_internal_ldadd) -lm
EXTRA_tests_test_checkpoint_DEPENDENCIES = \
	plugins/mixprec-optim-adamw.la \
	plugins/mixprec-optim-sgd.la \
	tools/mixprec-inspect$(EXEEXT)
TESTS += tests/test-checkpoint

# Checkpoints in the representations of optimizer revision 3, written by
# the test's own encoder and loaded, checked and exported by the library.
check_PROGRAMS += tests/test-checkpoint-repr
tests_test_checkpoint_repr_SOURCES = \
	tests/test-checkpoint-repr.c \
	tests/checkpoint-common.c \
	tests/checkpoint-common.h
tests_test_checkpoint_repr_CPPFLAGS = $(tests_internal_cppflags)
tests_test_checkpoint_repr_LDADD = $(tests_internal_ldadd) -lm
EXTRA_tests_test_checkpoint_repr_DEPENDENCIES = \
	plugins/mixprec-optim-adamw.la \
	tools/mixprec-inspect$(EXEEXT)
TESTS += tests/test-checkpoint-repr
# The same files read by the reference `safetensors` package (PyPI): run by
# PYTHON_GI like every .py test, the script re-executes itself with
# PYTHON_SAFETENSORS when its own Python lacks the package.
EXTRA_DIST += tests/test-checkpoint-safetensors-gi.py
AM_TESTS_ENVIRONMENT += export PYTHON_SAFETENSORS="$(PYTHON_SAFETENSORS)";
if HAVE_PYTHON_SAFETENSORS
TESTS += tests/test-checkpoint-safetensors-gi.py
endif
# mixprec.auto_precision on the example trainer: one module's gradients
# underflow fp16, auto-precision widens it, val_loss recovers, and a resume
# after the decision ends byte for byte as the uninterrupted run.
TESTS += tests/test-charlm-autoprec.sh
EXTRA_DIST += tests/test-charlm-autoprec.sh
# The example trainer's --save-every / --resume: a resumed run ends with the
# uninterrupted run's checkpoint, byte for byte.
TESTS += tests/test-charlm-resume.sh
EXTRA_DIST += tests/test-charlm-resume.sh
# --resume over a damaged newest checkpoint: falls back to the newest whole
# one, never starts over, never touches the older ones.
TESTS += tests/test-charlm-damaged.sh
EXTRA_DIST += tests/test-charlm-damaged.sh

# --- the checkpoint attacks of issue 25: links next to a save, FIFO and
# device shards (mixprec-inspect run with a deadline), a world size that
# disagrees with the file list, no .partial after a failed write
check_PROGRAMS += tests/test-security-checkpoint
tests_test_security_checkpoint_SOURCES = \
	tests/test-security-checkpoint.c \
	tests/checkpoint-common.c \
	tests/checkpoint-common.h
tests_test_security_checkpoint_LDADD = $(tests_public_ldadd) -lm
EXTRA_tests_test_security_checkpoint_DEPENDENCIES = \
	plugins/mixprec-optim-adamw.la \
	plugins/mixprec-optim-sgd.la \
	tools/mixprec-inspect$(EXEEXT)
TESTS += tests/test-security-checkpoint

# --- checkpoints across ranks (needs the UCX comm plugin)
if HAVE_UCX
check_PROGRAMS += tests/test-checkpoint-dist
tests_test_checkpoint_dist_SOURCES = \
	tests/test-checkpoint-dist.c \
	tests/checkpoint-common.c \
	tests/checkpoint-common.h \
	tests/multiproc.c \
	tests/multiproc.h
tests_test_checkpoint_dist_LDADD = $(tests_public_ldadd) -lm
TESTS += tests/test-checkpoint-dist
endif

# --- memory plan
TESTS += tests/test-inspect-plan.sh
EXTRA_DIST += tests/test-inspect-plan.sh

# --- the tools of the build tree find its plugins with no environment
TESTS += tests/test-inspect-uninstalled.sh
EXTRA_DIST += tests/test-inspect-uninstalled.sh

# --- every code block of README.md and examples/README.md runs as written
TESTS += tests/test-doc-snippets.sh
EXTRA_DIST += tests/test-doc-snippets.sh tests/doc-snippets.py tests/snippets/layers.c
AM_TESTS_ENVIRONMENT += \
	export SNIPPET_CC="$(CC)" SNIPPET_CFLAGS="$(CFLAGS)" SNIPPET_LDFLAGS="$(LDFLAGS)"; \
	export PYTHON_GI="$(PYTHON_GI)" VALAC="$(VALAC)";

# --- the example trainer across ranks
if HAVE_UCX
TESTS += tests/test-charlm-dist.sh
endif
EXTRA_DIST += tests/test-charlm-dist.sh

# --- the example trainer at ZeRO-3 with each ZeRO++ mode on 3 ranks, on
# one host and on 3 network-namespace hosts (that part skipped where
# making them is refused)
if HAVE_UCX
TESTS += tests/test-charlm-zeropp.sh
endif
EXTRA_DIST += tests/test-charlm-zeropp.sh

# --- comm-ucx across hosts: 3 network namespaces made by the test (skipped
# where that is refused), and the diagnosis of a device choice that cannot
# connect hosts (plugins/comm-ucx/ucx-hint.c, built here on its own)
if HAVE_UCX
TESTS += tests/test-multihost-netns.sh
endif
EXTRA_DIST += tests/test-multihost-netns.sh tests/netns-hosts.sh
check_PROGRAMS += tests/test-ucx-hint
tests_test_ucx_hint_SOURCES = \
	tests/test-ucx-hint.c \
	plugins/comm-ucx/ucx-hint.c \
	plugins/comm-ucx/ucx-hint.h
tests_test_ucx_hint_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/plugins/comm-ucx
tests_test_ucx_hint_LDADD = $(MIXPREC_DEPS_LIBS)
TESTS += tests/test-ucx-hint

# --- comm-ucx against malicious and dying peers on 127.0.0.1: corrupted
# peer bytes through a wrapped bootstrap, a peer dying in the middle of
# the shared-memory agreement, foreign segments, and a single-host job
# whose UCX listeners must all be on loopback; plus the pure checks of
# plugins/comm-ucx/ucx-peer.c, built here on their own
if HAVE_UCX
check_PROGRAMS += tests/test-security-comm
tests_test_security_comm_SOURCES = \
	tests/test-security-comm.c \
	tests/comm-vtable.c \
	tests/comm-vtable.h \
	tests/multiproc.c \
	tests/multiproc.h \
	plugins/comm-ucx/ucx-peer.c \
	plugins/comm-ucx/ucx-peer.h
tests_test_security_comm_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/plugins/comm-ucx
tests_test_security_comm_LDADD = $(tests_public_ldadd)
EXTRA_tests_test_security_comm_DEPENDENCIES = plugins/mixprec-comm-ucx.la
TESTS += tests/test-security-comm
endif

# --- comm-nccl: registration and failures without a GPU everywhere; the
# collectives on a device where cudaGetDeviceCount finds one (skipped
# otherwise). The test calls the CUDA runtime itself for device buffers.
if HAVE_NCCL
check_PROGRAMS += tests/test-comm-nccl
tests_test_comm_nccl_SOURCES = \
	tests/test-comm-nccl.c \
	tests/comm-vtable.c \
	tests/comm-vtable.h \
	tests/comm-reference.h \
	tests/dtype-reference.h \
	plugins/comm-nccl/nccl-peer.c \
	plugins/comm-nccl/nccl-peer.h
tests_test_comm_nccl_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CPPFLAGS) -I$(top_srcdir)/plugins/comm-nccl
tests_test_comm_nccl_LDADD = $(tests_public_ldadd) $(CUDA_LIBS) -lm
EXTRA_tests_test_comm_nccl_DEPENDENCIES = plugins/mixprec-comm-nccl.la
TESTS += tests/test-comm-nccl
endif

# --- engine on a device: a host-memory device plugin ("hostdev", its own
# kernels, the cpu optimizers behind the stream check) drives the engine's
# device path against the cpu engine, bit for bit, on any machine.
check_LTLIBRARIES += tests/device-plugins/mixprec-test-hostdev.la
tests_device_plugins_mixprec_test_hostdev_la_SOURCES = tests/device-plugins/test-hostdev.c
tests_device_plugins_mixprec_test_hostdev_la_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/libmixprec
tests_device_plugins_mixprec_test_hostdev_la_LDFLAGS = $(test_plugin_ldflags)

check_PROGRAMS += tests/test-engine-device
tests_test_engine_device_SOURCES = tests/test-engine-device.c tests/recomputable-values.h
tests_test_engine_device_CPPFLAGS = $(tests_internal_cppflags)
tests_test_engine_device_LDADD = $(tests_internal_ldadd) -lm
EXTRA_tests_test_engine_device_DEPENDENCIES = tests/device-plugins/mixprec-test-hostdev.la
TESTS += tests/test-engine-device

# Buffers of a device engine by address, and gradients from device memory.
check_PROGRAMS += tests/test-param-device-address
tests_test_param_device_address_SOURCES = tests/test-param-device-address.c tests/recomputable-values.h
tests_test_param_device_address_CPPFLAGS = $(tests_internal_cppflags)
tests_test_param_device_address_LDADD = $(tests_internal_ldadd) -lm
EXTRA_tests_test_param_device_address_DEPENDENCIES = tests/device-plugins/mixprec-test-hostdev.la
TESTS += tests/test-param-device-address

# --- device-cuda: the cuda plugin's features and failures without a GPU;
# its kernels and optimizers bitwise against the CPU ones where a GPU is,
# and everywhere their element code compiled by nvcc and run on the host
# (cuda-host-kernels.cu), with the plugin's own launch arguments
# (cuda-optim-args.c and the optimizers' prepare()).
EXTRA_DIST += tests/cuda-host-kernels.cu
if HAVE_CUDA
check_PROGRAMS += tests/test-device-cuda
tests_test_device_cuda_SOURCES = \
	tests/test-device-cuda.c \
	tests/cuda-host-kernels.h \
	plugins/device-cuda/cuda-optim-args.c \
	plugins/optim-adamw/adamw-schema.c \
	plugins/optim-sgd/sgd-schema.c \
	plugins/optim-lion/lion-schema.c
tests_test_device_cuda_CPPFLAGS = $(tests_internal_cppflags) -I$(top_srcdir)/plugins $(CUDA_CPPFLAGS)
tests_test_device_cuda_LDADD = tests/cuda-host-kernels.lo plugins/device-cuda/cuda-fp4.lo \
	plugins/libmixprec-optim-common.la \
	$(tests_internal_ldadd) $(CUDA_LIBS) -lm
tests/cuda-host-kernels.lo: $(device_cuda_kernel_headers) tests/cuda-host-kernels.h \
	plugins/device-cuda/cuda-optim-kernel.cuh libmixprec/numeric/numeric-optim.h \
	plugins/device-cuda/cuda-optim-quant.cuh libmixprec/numeric/numeric-quant.h \
	plugins/device-cuda/cuda-fp8.cuh libmixprec/numeric/numeric-fp8.h \
	plugins/device-cuda/cuda-fp4.cuh libmixprec/numeric/numeric-fp4.h \
	libmixprec/numeric/numeric-rht.h
CLEANFILES += tests/cuda-host-kernels.lo tests/.libs/cuda-host-kernels.o
EXTRA_tests_test_device_cuda_DEPENDENCIES = \
	plugins/mixprec-device-cuda.la \
	plugins/mixprec-optim-adamw.la \
	plugins/mixprec-optim-sgd.la \
	plugins/mixprec-optim-lion.la
TESTS += tests/test-device-cuda
endif
if HAVE_CUDA
TESTS += tests/test-engine-cuda.sh
endif
EXTRA_DIST += tests/test-engine-cuda.sh

# --- fp8: scaled float8 casts and MX blocks against a double-precision
# model at every SIMD level; bit-identity with PyTorch's own casts
check_PROGRAMS += tests/test-fp8
tests_test_fp8_SOURCES = tests/test-fp8.c tests/dtype-reference.h
tests_test_fp8_CPPFLAGS = $(tests_internal_cppflags)
tests_test_fp8_LDADD = $(tests_internal_ldadd) -lm
TESTS += tests/test-fp8
EXTRA_DIST += tests/test-fp8-torch.py tests/test-fp8-gi.py
if HAVE_PYTHON_GI
TESTS += tests/test-fp8-torch.py tests/test-fp8-gi.py
endif

# --- fp4: E2M1 against a double-precision model, every SIMD level against
# the scalar kernel, the 2D layout and the API's checks
check_PROGRAMS += tests/test-fp4
tests_test_fp4_CPPFLAGS = $(tests_internal_cppflags)
tests_test_fp4_LDADD = $(tests_internal_ldadd) -lm
TESTS += tests/test-fp4

# --- fp4: NVFP4 and MXFP4 block quantisation against torchao's CPU
# emulation, bit for bit (PYTHON_TORCH with torchao; skipped without)
EXTRA_DIST += tests/test-fp4-torchao.py tests/test-fp4-gi.py
if HAVE_PYTHON_GI
TESTS += tests/test-fp4-torchao.py tests/test-fp4-gi.py
endif

# --- MXFP8 in torchao's four scale modes against torchao's to_mx(), bit
# for bit (PYTHON_TORCH with torchao; skipped without)
EXTRA_DIST += tests/test-fp8-mx-modes-torchao.py
if HAVE_PYTHON_GI
TESTS += tests/test-fp8-mx-modes-torchao.py
endif

# --- fp4: a parameter's 4-bit copy as uint8 views (param.fp4,
# mixprec.torch's get_fp4_copy()) and the torch decode and matmul of
# docs/reference/fp4-views.md against the engine's (PYTHON_TORCH)
EXTRA_DIST += tests/test-fp4-views-torch.py
if HAVE_PYTHON_GI
TESTS += tests/test-fp4-views-torch.py
endif

# --- fp4: the random Hadamard transform against numpy (bits of the
# documented order, the matrix product, the inverse, the seed's signs)
EXTRA_DIST += tests/test-fp4-rht.py
if HAVE_PYTHON_GI
TESTS += tests/test-fp4-rht.py
endif

# --- mixprec-inspect --formats: the dtypes and the 4-bit block formats
TESTS += tests/test-inspect-formats.sh
EXTRA_DIST += tests/test-inspect-formats.sh

# --- mixprec-inspect --numerics: the ranked table of a crafted run, its
# heat map's colours read back by matplotlib, and every bad input
TESTS += tests/test-inspect-numerics.sh
EXTRA_DIST += tests/test-inspect-numerics.sh

# --- FP8 working copies in the engine (fp8-engine): one process, and
# ZeRO-3 bit identity across world sizes (needs the UCX comm plugin)
check_PROGRAMS += tests/test-fp8-engine
tests_test_fp8_engine_CPPFLAGS = $(tests_internal_cppflags)
tests_test_fp8_engine_LDADD = $(tests_internal_ldadd) -lm
EXTRA_tests_test_fp8_engine_DEPENDENCIES = tests/device-plugins/mixprec-test-hostdev.la
TESTS += tests/test-fp8-engine
# its device cases on the GPU (skipped where none is usable)
if HAVE_CUDA
TESTS += tests/test-fp8-engine-cuda.sh
endif
EXTRA_DIST += tests/test-fp8-engine-cuda.sh
if HAVE_UCX
check_PROGRAMS += tests/test-fp8-zero
tests_test_fp8_zero_SOURCES = tests/test-fp8-zero.c tests/multiproc.c tests/multiproc.h \
	tests/engine-ranks-common.c tests/engine-ranks-common.h
tests_test_fp8_zero_LDADD = $(tests_public_ldadd) -lm
TESTS += tests/test-fp8-zero
endif

# --- 4-bit working copies (fp4 section): bitwise mixprec_quantize_blocks()
# of the masters after every step, and ZeRO 0-3 at 1, 2 and 3 ranks equal
# to one process, with the 4-bit gather counted (needs the UCX plugin)
if HAVE_UCX
check_PROGRAMS += tests/test-fp4-engine
tests_test_fp4_engine_SOURCES = tests/test-fp4-engine.c tests/multiproc.c tests/multiproc.h \
	tests/engine-ranks-common.c tests/engine-ranks-common.h
tests_test_fp4_engine_LDADD = $(tests_public_ldadd) -lm
TESTS += tests/test-fp4-engine
endif

# --- optimizer-state and master representations against their PyPI peers
# (issue 26): remainder masters against FP32 masters, int8 / int4 / fp8
# states against torchao's AdamW8bit / AdamW4bit / AdamWFp8, Kahan masters
# against optimi's AdamW(kahan_sum=True); run by PYTHON_TORCH (skips
# without torch, and each part without its peer)
EXTRA_DIST += tests/test-optim-peers.py
if HAVE_PYTHON_GI
TESTS += tests/test-optim-peers.py
endif

# --- examples/gpt2, the C GPT-2: its backward against finite differences
# in FP64 (the model's own file built with double), short trainings
# (the loss falls, fp16/bf16/FP8 configs, resume bit for bit, two ranks at
# ZeRO-2 bit for bit against one process with GAS 2), and its logits and
# gradients against Hugging Face's GPT2LMHeadModel under PYTHON_TORCH
EXTRA_DIST += tests/test-gpt2.sh tests/test-gpt2-torch.py
if HAVE_OPENBLAS
check_PROGRAMS += tests/test-gpt2-grad
tests_test_gpt2_grad_SOURCES = tests/test-gpt2-grad.c examples/gpt2/gpt2-model.c
tests_test_gpt2_grad_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/examples/gpt2 -DGPT2_REAL_DOUBLE
tests_test_gpt2_grad_CFLAGS = $(AM_CFLAGS) $(OPENBLAS_CFLAGS) $(OPENMP_CFLAGS)
tests_test_gpt2_grad_LDADD = $(MIXPREC_DEPS_LIBS) $(OPENBLAS_LIBS) -lm
tests_test_gpt2_grad_LDFLAGS = $(OPENMP_CFLAGS)
TESTS += tests/test-gpt2-grad tests/test-gpt2.sh
if HAVE_PYTHON_GI
TESTS += tests/test-gpt2-torch.py
endif
else
EXTRA_DIST += tests/test-gpt2-grad.c
endif
