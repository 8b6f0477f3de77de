## examples/local.mk — programs written against the public API only.

# --- charlm: a character-level language model trained through the engine
noinst_PROGRAMS += examples/charlm
examples_charlm_SOURCES = \
	examples/charlm.c \
	examples/charlm-config.h \
	examples/charlm-config.c \
	examples/charlm-data.h \
	examples/charlm-data.c \
	examples/charlm-model.h \
	examples/charlm-model.c \
	examples/example-weights.h \
	examples/example-weights.c \
	examples/example-resume.h \
	examples/example-resume.c
examples_charlm_CPPFLAGS = $(AM_CPPFLAGS) \
	-DCHARLM_CONFIG_DIR=\"$(abs_top_srcdir)/examples/configs\"
examples_charlm_LDADD = libmixprec/libmixprec.la $(MIXPREC_DEPS_LIBS) -lm
charlm_configs = \
	examples/configs/fp32.json \
	examples/configs/bf16.json \
	examples/configs/fp16.json \
	examples/configs/fp16-fp32-layernorm.json \
	examples/configs/fp16-static1.json \
	examples/configs/bf16-fp8.json \
	examples/configs/bf16-fp8-mx.json \
	examples/configs/bf16-master-remainder.json \
	examples/configs/bf16-master-kahan.json \
	examples/configs/bf16-master-none.json \
	examples/configs/bf16-states-bf16.json \
	examples/configs/bf16-states-fp16-scaled.json \
	examples/configs/bf16-states-bf16-scaled.json \
	examples/configs/bf16-states-fp8.json \
	examples/configs/bf16-states-int8.json \
	examples/configs/bf16-states-int4.json \
	examples/configs/bf16-remainder-int8.json
EXTRA_DIST += $(charlm_configs) examples/charlm.py examples/README.md
EXTRA_DIST += examples/torch-charlm.py
