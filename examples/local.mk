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
	examples/configs/fp16-numerics-underflow.json \
	examples/configs/fp16-static1-autoprec.json \
	examples/configs/fp16-autoprec.json \
	examples/configs/bf16-fp8.json \
	examples/configs/bf16-fp8-mx.json \
	examples/configs/bf16-nvfp4.json \
	examples/configs/bf16-mxfp4.json \
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

# --- gpt2: a GPT-2 over bytes written in C, llm.c style: the model's own
# forward and backward (OpenBLAS for the matrix products, OpenMP for the
# rest), libmixprec for everything between the gradients and the weights.
gpt2_configs = \
	examples/configs/gpt2-bf16.json \
	examples/configs/gpt2-fp16.json \
	examples/configs/gpt2-fp32.json \
	examples/configs/gpt2-bf16-fp8.json
EXTRA_DIST += $(gpt2_configs) examples/gpt2/README.md examples/gpt2/gpt2-loss.png \
	examples/gpt2/torch-gpt2.py

if HAVE_OPENBLAS
noinst_PROGRAMS += examples/gpt2/gpt2
examples_gpt2_gpt2_SOURCES = \
	examples/gpt2/gpt2.c \
	examples/gpt2/gpt2-data.h \
	examples/gpt2/gpt2-data.c \
	examples/gpt2/gpt2-model.h \
	examples/gpt2/gpt2-model.c \
	examples/charlm-config.h \
	examples/charlm-config.c \
	examples/charlm-data.h \
	examples/charlm-data.c \
	examples/example-weights.h \
	examples/example-weights.c \
	examples/example-resume.h \
	examples/example-resume.c
examples_gpt2_gpt2_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/examples -I$(top_srcdir)/examples/gpt2 \
	-DGPT2_CONFIG_DIR=\"$(abs_top_srcdir)/examples/configs\"
examples_gpt2_gpt2_CFLAGS = $(AM_CFLAGS) $(OPENBLAS_CFLAGS) $(OPENMP_CFLAGS)
examples_gpt2_gpt2_LDADD = libmixprec/libmixprec.la $(MIXPREC_DEPS_LIBS) $(OPENBLAS_LIBS) -lm
examples_gpt2_gpt2_LDFLAGS = $(OPENMP_CFLAGS)
else
EXTRA_DIST += examples/gpt2/gpt2.c examples/gpt2/gpt2-data.h examples/gpt2/gpt2-data.c \
	examples/gpt2/gpt2-model.h examples/gpt2/gpt2-model.c
endif

# The CUDA build of the same model (--device cuda), when configure found nvcc.
include $(srcdir)/examples/gpt2/cuda.mk
if HAVE_OPENBLAS
if HAVE_CUDA
examples_gpt2_gpt2_SOURCES += $(gpt2_cuda_sources)
examples_gpt2_gpt2_CPPFLAGS += $(gpt2_cuda_cppflags)
examples_gpt2_gpt2_LDADD += $(gpt2_cuda_libs)
endif
endif
