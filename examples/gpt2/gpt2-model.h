/* gpt2-model.h — a GPT-2 over bytes, forward and backward, with no
 * library of ours underneath: the trainer (gpt2.c) fills the weights from
 * the engine's working copies and hands the gradients back as the
 * backward pass produces them; the gradient check (tests/test-gpt2-grad.c)
 * builds the same file in FP64 (-DGPT2_REAL_DOUBLE) and compares it with
 * finite differences.
 *
 * The architecture is Hugging Face's GPT2LMHeadModel: learned token and
 * position embeddings, pre-LayerNorm blocks (causal self-attention, then
 * an MLP of width 4C with the tanh GELU), a final LayerNorm and logits
 * through the token embedding (tied). The vocabulary is the 256 byte
 * values, so no tokenizer is needed. */
#pragma once

#include <stddef.h>
#include <glib.h>

G_BEGIN_DECLS

#ifdef GPT2_REAL_DOUBLE
typedef double gpt2_real;
#else
typedef float gpt2_real;
#endif

#define GPT2_VOCAB 256
#define GPT2_LAYERNORM_EPS 1e-5

typedef struct
{
  guint n_layer;
  guint n_head;
  guint n_embd;              /* C: a multiple of n_head */
  guint n_ctx;               /* T: the longest sequence, rows of wpe */
} Gpt2Shape;

/* The tensors, in registration (and forward) order:
 *
 *   0  transformer.wte.weight            [V, C]    Embedding (also the logits' weight)
 *   1  transformer.wpe.weight            [T, C]    Embedding
 *   then for each layer l, 12 tensors from 2 + 12 l:
 *   +0 transformer.h.l.ln_1.weight       [C]       LayerNorm
 *   +1 transformer.h.l.ln_1.bias         [C]       LayerNorm
 *   +2 transformer.h.l.attn.c_attn.weight  [3C, C] Linear   rows: q | k | v, head h at h*C/NH
 *   +3 transformer.h.l.attn.c_attn.bias    [3C]    Linear
 *   +4 transformer.h.l.attn.c_proj.weight  [C, C]  Linear
 *   +5 transformer.h.l.attn.c_proj.bias    [C]     Linear
 *   +6 transformer.h.l.ln_2.weight       [C]       LayerNorm
 *   +7 transformer.h.l.ln_2.bias         [C]       LayerNorm
 *   +8 transformer.h.l.mlp.c_fc.weight   [4C, C]   Linear
 *   +9 transformer.h.l.mlp.c_fc.bias     [4C]      Linear
 *  +10 transformer.h.l.mlp.c_proj.weight [C, 4C]   Linear
 *  +11 transformer.h.l.mlp.c_proj.bias   [C]       Linear
 *   2 + 12 L      transformer.ln_f.weight [C]      LayerNorm
 *   2 + 12 L + 1  transformer.ln_f.bias   [C]      LayerNorm
 *
 * Linear weights are [out, in] row-major, as torch.nn.Linear keeps them
 * (Hugging Face's Conv1D stores the transpose). */
#define GPT2_LAYER_TENSORS 12
#define GPT2_N_TENSORS(n_layer) (2u + GPT2_LAYER_TENSORS * (n_layer) + 2u)

typedef enum
{
  GPT2_LN_1_W, GPT2_LN_1_B, GPT2_ATTN_W, GPT2_ATTN_B, GPT2_ATTN_PROJ_W, GPT2_ATTN_PROJ_B,
  GPT2_LN_2_W, GPT2_LN_2_B, GPT2_FC_W, GPT2_FC_B, GPT2_FC_PROJ_W, GPT2_FC_PROJ_B
} Gpt2LayerTensor;

typedef struct
{
  gchar *name;
  const gchar *module_type;  /* "Embedding", "LayerNorm" or "Linear" */
  guint n_dims;
  guint64 shape[2];
  gsize numel;
} Gpt2TensorInfo;

/* Rounds @n values in place as storing them in a low-precision dtype
 * would (the trainer passes one built on mixprec_convert_array()). */
typedef void (*Gpt2RoundFunc) (gpt2_real *x,
                               gsize      n,
                               gpointer   user_data);

/* Called by gpt2_model_backward() once tensor @index's gradient of this
 * micro-batch is complete (dloss * @loss_scale, summed over the batch),
 * in the order the backward pass finishes them: the last layer first,
 * the token embedding last. @grad is valid until the callback returns. */
typedef gboolean (*Gpt2GradReadyFunc) (guint            index,
                                       const gpt2_real *grad,
                                       gpointer         user_data,
                                       GError         **error);

typedef struct _Gpt2Model Gpt2Model;

/* Buffers for micro-batches of up to @max_batch sequences of up to
 * shape->n_ctx tokens. Fails (GError, G_OPTION_ERROR_BAD_VALUE) on a
 * shape that makes no model: zero sizes, C not a multiple of n_head. */
Gpt2Model *gpt2_model_new          (const Gpt2Shape *shape,
                                    guint            max_batch,
                                    GError         **error);
void       gpt2_model_free         (Gpt2Model       *model);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (Gpt2Model, gpt2_model_free)

const Gpt2Shape      *gpt2_model_get_shape      (Gpt2Model *model);
guint                 gpt2_model_get_n_tensors  (Gpt2Model *model);
const Gpt2TensorInfo *gpt2_model_get_tensor     (Gpt2Model *model,
                                                 guint      index);
gsize                 gpt2_model_get_n_params   (Gpt2Model *model);
/* Index of tensor @which of layer @layer. */
guint                 gpt2_model_layer_tensor   (guint            layer,
                                                 Gpt2LayerTensor  which);

/* The weights forward and backward read, numel values each: the caller
 * writes them (initial values, or the engine's working copies widened). */
gpt2_real *gpt2_model_get_weights  (Gpt2Model       *model,
                                    guint            index);

/* GPT-2's initialisation, from @seed alone: N(0, 0.02) weights, the
 * output projections of each block (c_proj) N(0, 0.02 / sqrt(2 L)),
 * zero biases, LayerNorm weights 1 and biases 0. The same numbers on
 * every machine and every rank (a counter-based generator). */
void       gpt2_model_init_weights (Gpt2Model       *model,
                                    guint64          seed);

/* Low-precision compute, the way autocast runs a GPU's matmuls: when
 * @round is not NULL every input of a matrix product (activations and
 * the gradients flowing back) and every product is rounded through it,
 * the products themselves summing in full precision. LayerNorm, softmax,
 * GELU, the residual stream and the loss stay in gpt2_real. NULL (the
 * default) computes everything in gpt2_real. */
void       gpt2_model_set_rounding (Gpt2Model       *model,
                                    Gpt2RoundFunc    round,
                                    gpointer         user_data);

/* Forward over @batch sequences of @seq_len tokens (@tokens, then
 * @targets, batch * seq_len bytes each, row-major). Keeps what backward
 * needs and returns the mean cross-entropy over all batch * seq_len
 * positions, in nats. @targets may be NULL: the logits only. */
double     gpt2_model_forward      (Gpt2Model       *model,
                                    const guint8    *tokens,
                                    const guint8    *targets,
                                    guint            batch,
                                    guint            seq_len);
/* The logits of the last forward, [batch, seq_len, V]. */
const gpt2_real *gpt2_model_get_logits (Gpt2Model *model);

/* Backward of the last forward (with targets) for the loss times
 * @loss_scale: each tensor's gradient is handed to @ready as soon as it
 * is complete, then also left in gpt2_model_get_grad() (overwritten, not
 * accumulated, on each backward). Returns FALSE with the callback's error
 * when a callback fails. */
gboolean   gpt2_model_backward     (Gpt2Model        *model,
                                    double            loss_scale,
                                    Gpt2GradReadyFunc ready,
                                    gpointer          user_data,
                                    GError          **error);
const gpt2_real *gpt2_model_get_grad (Gpt2Model *model,
                                      guint      index);

G_END_DECLS
