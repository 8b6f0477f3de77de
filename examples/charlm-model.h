/* charlm-model.h — a Bengio-style MLP over characters: embedding, two
 * hidden layers (Linear -> LayerNorm -> tanh), a Linear to the logits,
 * softmax cross-entropy. */
#pragma once

#include <mixprec/mixprec.h>

#include "charlm-data.h"

G_BEGIN_DECLS

typedef struct
{
  guint block_size;          /* characters of context */
  guint n_embd;              /* embedding width per character */
  guint n_hidden;            /* width of both hidden layers */
  gdouble out_init_scale;    /* the last layer starts this much smaller */
} CharlmShape;

/* The parameters, in the order they are registered and initialised. A
 * hidden block's LayerNorm weight and bias follow its Linear weight
 * (id + 1, id + 2). */
typedef enum
{
  CHARLM_WTE,                /* Embedding  [vocab, n_embd] */
  CHARLM_H1_W,               /* Linear     [hidden, block * n_embd], no bias: LN follows */
  CHARLM_LN1_W,              /* LayerNorm  [hidden] */
  CHARLM_LN1_B,
  CHARLM_H2_W,               /* Linear     [hidden, hidden] */
  CHARLM_LN2_W,
  CHARLM_LN2_B,
  CHARLM_OUT_W,              /* Linear     [vocab, hidden] */
  CHARLM_OUT_B,
  CHARLM_N_PARAMS
} CharlmParamId;

typedef struct _CharlmModel CharlmModel;

CharlmModel *charlm_model_new             (MixprecEngine   *engine,
                                           const CharlmShape *shape,
                                           guint            max_batch,
                                           guint64          seed,
                                           GError         **error);
void         charlm_model_free            (CharlmModel     *model);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (CharlmModel, charlm_model_free)

guint64      charlm_model_get_n_params    (CharlmModel     *model);
MixprecParam *charlm_model_get_param      (CharlmModel     *model,
                                           CharlmParamId    id);

void         charlm_model_load_weights    (CharlmModel     *model);
gdouble      charlm_model_forward         (CharlmModel     *model,
                                           const guint8    *contexts,
                                           const guint8    *targets,
                                           guint            batch);
void         charlm_model_backward        (CharlmModel     *model,
                                           gdouble          loss_scale);
gdouble      charlm_model_take_underflow  (CharlmModel     *model);
gboolean     charlm_model_set_grad_multiplier (CharlmModel *model,
                                           const gchar     *param_name,
                                           gdouble          factor,
                                           GError         **error);
gdouble      charlm_model_evaluate        (CharlmModel     *model,
                                           const CharlmExamples *examples,
                                           gsize            stride);
gchar       *charlm_model_describe_linear_weights (CharlmModel *model);

G_END_DECLS
