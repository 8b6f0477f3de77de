/* checkpoint-common.h — what the checkpoint tests share, written against
 * one engine at a time so that a multi-rank test runs the same helpers on
 * each rank: a small model, deterministic training that needs no weights
 * (the gradients depend on the step and the element only), and bitwise
 * snapshots of everything a checkpoint must restore. */
#pragma once

#include <mixprec/mixprec.h>

G_BEGIN_DECLS

typedef struct
{
  const gchar *name;         /* test path component: fp32, fp16, bf16, bf16-no-master... */
  const gchar *json;         /* a complete configuration */
  gboolean     overflows;    /* whether ckpt_train injects non-finite gradients */
} CkptMode;

/* fp32, fp16 (dynamic scaling), bf16 (LayerNorm kept in FP32), bf16
 * without master weights (stochastic rounding), bf16 with masters and
 * stochastic rounding; all AdamW with a WarmupCosineLR schedule and
 * clipping. */
extern const CkptMode ckpt_modes[6];

MixprecEngine *ckpt_engine_new     (const gchar   *json);
/* Registers the model; @variant changes the initial values (a loaded
 * engine must not match by accident); @extra_numel > 0 adds one more
 * parameter of that many elements. */
void           ckpt_build_model    (MixprecEngine *engine,
                                    guint          variant,
                                    guint64        extra_numel);
/* Runs @n optimizer steps numbered @first, @first + 1, ...: the gradient
 * of element i of parameter k at step s is a fixed function of (s, k, i)
 * times the loss scale; with @overflows, steps 2 and 7 carry an infinity. */
void           ckpt_train          (MixprecEngine *engine,
                                    guint64        first,
                                    guint          n,
                                    gboolean       overflows);
/* Per parameter: the master (when kept), the working copy, every
 * optimizer state slot; then the loss scale, learning rate and the step
 * counters. Everything a resume must reproduce. */
GPtrArray     *ckpt_snapshot       (MixprecEngine *engine);
/* Only the FP32 weights: masters, or working copies widened to FP32. */
GPtrArray     *ckpt_weights        (MixprecEngine *engine);
void           ckpt_assert_same    (GPtrArray     *a,
                                    GPtrArray     *b);
gboolean       ckpt_same           (GPtrArray     *a,
                                    GPtrArray     *b);

gchar         *ckpt_make_tmpdir    (void);
void           ckpt_remove_tree    (const gchar   *path);

G_END_DECLS
