/* gpt2-cuda.cu — the GPT-2 of gpt2-model.h on an NVIDIA GPU, in the llm.c
 * mould: every matmul is cuBLAS (inputs in the compute dtype, FP32
 * accumulation), everything else is a small kernel of this file whose
 * arithmetic is gpt2-cuda-math.cuh. The residual stream, LayerNorm
 * statistics, softmax sums, the loss and the weight gradients are FP32;
 * the activations that feed or leave a matmul are in the compute dtype,
 * as autocast keeps them and as gpt2-model.c rounds them.
 *
 * Layouts follow gpt2-model.h: row-major activations [B, T, C], Linear
 * weights [out, in] row-major, c_attn's rows q | k | v with head h at
 * h * C / NH, the logits through wte (tied). cuBLAS is column-major: a
 * row-major [R, K] matrix is its column-major [K, R] transpose, so
 * out = inp @ W^T is the column-major out^T = W^T' inp^T with W read
 * transposed (see linear_forward()).
 *
 * All work is queued on one stream in program order; nothing runs
 * concurrently, so a scratch buffer may be reused as soon as the kernel
 * that read it has been queued. */
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>
#include <cublas_v2.h>

#include "gpt2-cuda.h"
#include "gpt2-cuda-math.cuh"

#define VOCAB 256
#define LAYER_TENSORS 12
/* Threads per block of every kernel; a warp-per-row kernel has 8 rows a
 * block. Kernels assume blockDim.x == BLOCK. */
#define BLOCK 256
#define WARP 32
#define ROWS_PER_BLOCK (BLOCK / WARP)
/* The grid-stride kernels need no more blocks than this to fill an H100
 * many times over; capping keeps gridDim.x in range for any n. */
#define MAX_BLOCKS (1u << 20)

/* Offsets of a layer's tensors from 2 + 12 l (gpt2-model.h). */
enum
{
  T_LN_1_W, T_LN_1_B, T_ATTN_W, T_ATTN_B, T_ATTN_PROJ_W, T_ATTN_PROJ_B,
  T_LN_2_W, T_LN_2_B, T_FC_W, T_FC_B, T_FC_PROJ_W, T_FC_PROJ_B
};

struct Gpt2Cuda
{
  unsigned n_layer, n_head, n_embd, n_ctx, max_batch;
  Gpt2CudaDType dtype;
  unsigned n_tensors;
  cudaStream_t stream;
  cublasHandle_t blas;

  /* Per tensor, in gpt2-model.h's order. */
  size_t *numel;
  Gpt2CudaDType *want;          /* what the kernels read */
  const void **given;           /* the trainer's working copy */
  Gpt2CudaDType *given_dtype;
  void **copy;                  /* given converted to want, when they differ */
  const void **eff;             /* given or copy: what this step reads */
  float **grad;

  void *arena;                  /* every buffer below, one cudaMalloc */
  void *stage;                  /* a gradient converted for handing over */
  float *logits_f32;

  /* Activations kept for backward, slabs sized for max_batch * n_ctx. */
  float *resid;                 /* 2L + 1 slabs [BT, C]: x_0, mid_0, x_1, ..., x_L */
  float *ln_mean, *ln_rstd;     /* 2L + 1 slabs [BT]: ln_1 of l at 2l, ln_2 at 2l + 1, ln_f at 2L */
  void *ln_out;                 /* 2L + 1 slabs [BT, C], the same indexing */
  void *qkvr;                   /* L slabs [3][B, NH, T, hs]: q, k, v by head */
  void *att;                    /* L slabs [B, NH, T, T] */
  void *atty;                   /* L slabs [BT, C] */
  void *fch, *fchg;             /* L slabs [BT, 4C]: c_fc's output, its GELU */
  void *logits;                 /* [BT, V] */
  float *losses;                /* [BT] */
  unsigned char *tokens, *targets;

  /* Scratch. */
  void *qkv;                    /* [BT, 3C] */
  void *preatt;                 /* [B, NH, T, T] */
  void *y;                      /* [B, NH, T, hs] */
  void *lin_out;                /* [BT, C] */
  float *dres;                  /* [BT, C], d loss / d residual */
  void *dres_x;                 /* dres in the compute dtype, a matmul input */
  void *dlogits;                /* [BT, V] */
  void *dbig;                   /* [BT, 4C] */
  void *dln;                    /* [BT, C] */
  void *dy;                     /* [B, NH, T, hs] */
  void *dqkvr;                  /* [3][B, NH, T, hs] */
  void *dqkv;                   /* [BT, 3C] */
  void *datt, *dpre;            /* [B, NH, T, T] */
  float *host_losses;           /* [BT], host */

  unsigned batch, seq_len;      /* of the last forward */
  int have_forward, have_targets;

  /* Where the API call being served puts its message. */
  const char *fn;
  char *err;
  size_t err_len;
};

/* ------------------------------------------------------------ messages */

static void __attribute__ ((format (printf, 3, 4)))
set_err (char       *err,
         size_t      err_len,
         const char *fmt,
         ...)
{
  va_list ap;

  if (err == NULL || err_len == 0)
    return;
  va_start (ap, fmt);
  vsnprintf (err, err_len, fmt, ap);
  va_end (ap);
}

static void
begin (Gpt2Cuda   *m,
       const char *fn,
       char       *err,
       size_t      err_len)
{
  m->fn = fn;
  m->err = err;
  m->err_len = err_len;
  if (err != NULL && err_len > 0)
    err[0] = '\0';
}

static bool
ck (Gpt2Cuda    *m,
    cudaError_t  e,
    const char  *what)
{
  if (e == cudaSuccess)
    return true;
  set_err (m->err, m->err_len, "%s: %s: %s", m->fn, what, cudaGetErrorString (e));
  return false;
}

/* After a launch: a bad configuration shows at once, a fault in the kernel
 * at the next synchronisation (reported there by its own call). */
static bool
launched (Gpt2Cuda   *m,
          const char *kernel)
{
  return ck (m, cudaGetLastError (), kernel);
}

static bool
ck_blas (Gpt2Cuda       *m,
         cublasStatus_t  s,
         const char     *what)
{
  if (s == CUBLAS_STATUS_SUCCESS)
    return true;
  set_err (m->err, m->err_len, "%s: %s: %s", m->fn, what, cublasGetStatusString (s));
  return false;
}

/* ------------------------------------------------------------ tensors */

static const char *const layer_names[LAYER_TENSORS] = {
  "ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
  "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
  "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"
};

static void
tensor_name (const Gpt2Cuda *m,
             unsigned        index,
             char           *buf,
             size_t          len)
{
  if (index == 0)
    snprintf (buf, len, "transformer.wte.weight");
  else if (index == 1)
    snprintf (buf, len, "transformer.wpe.weight");
  else if (index < 2 + LAYER_TENSORS * m->n_layer)
    snprintf (buf, len, "transformer.h.%u.%s", (index - 2) / LAYER_TENSORS,
              layer_names[(index - 2) % LAYER_TENSORS]);
  else
    snprintf (buf, len, "transformer.ln_f.%s",
              index == 2 + LAYER_TENSORS * m->n_layer ? "weight" : "bias");
}

static size_t
tensor_numel (const Gpt2Cuda *m,
              unsigned        index,
              int            *is_layernorm)
{
  size_t C = m->n_embd;

  *is_layernorm = 0;
  if (index == 0)
    return (size_t) VOCAB * C;
  if (index == 1)
    return (size_t) m->n_ctx * C;
  if (index >= 2 + LAYER_TENSORS * m->n_layer)
    {
      *is_layernorm = 1;
      return C;
    }
  switch ((index - 2) % LAYER_TENSORS)
    {
    case T_LN_1_W: case T_LN_1_B: case T_LN_2_W: case T_LN_2_B:
      *is_layernorm = 1;
      return C;
    case T_ATTN_W: return 3 * C * C;
    case T_ATTN_B: return 3 * C;
    case T_ATTN_PROJ_W: return C * C;
    case T_FC_W: case T_FC_PROJ_W: return 4 * C * C;
    case T_FC_B: return 4 * C;
    default: return C;      /* the two projections' biases */
    }
}

static size_t
dtype_size (Gpt2CudaDType dt)
{
  return dt == GPT2_CUDA_FLOAT32 ? 4 : 2;
}

static cudaDataType
blas_type (const float *)
{
  return CUDA_R_32F;
}

static cudaDataType
blas_type (const __nv_bfloat16 *)
{
  return CUDA_R_16BF;
}

static cudaDataType
blas_type (const __half *)
{
  return CUDA_R_16F;
}

/* ------------------------------------------------------------ kernels
 *
 * Two launch shapes:
 *
 *   element-wise: blocks_for (n) blocks of BLOCK threads walking
 *   i = global thread id, then + all threads, while i < n (size_t, so any
 *   n works and the grid stays under MAX_BLOCKS);
 *
 *   warp per row: rows_grid (rows) blocks of BLOCK threads, warp w of
 *   block b on row b * ROWS_PER_BLOCK + w, its 32 lanes striding the row
 *   (gpt2-cuda-math.cuh). A warp past the last row leaves as a whole, so
 *   the shuffles of the warps that stay see all 32 lanes.
 */

#define GRID_STRIDE(i, n) \
  for (size_t i = blockIdx.x * (size_t) blockDim.x + threadIdx.x; i < (n); \
       i += (size_t) gridDim.x * blockDim.x)

static unsigned
blocks_for (size_t n)
{
  size_t b = (n + BLOCK - 1) / BLOCK;

  return b == 0 ? 1 : b > MAX_BLOCKS ? MAX_BLOCKS : (unsigned) b;
}

static unsigned
rows_grid (size_t rows)
{
  return (unsigned) ((rows + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK);
}

/* A warp's sums and maxima: the xor butterfly leaves the same value, with
 * the same bits, in every lane (each step adds the same two numbers in
 * either order). */
struct Gpt2WarpReduce
{
  __host__ __device__ float
  sum (float v) const
  {
#ifdef __CUDA_ARCH__
    for (int o = WARP / 2; o > 0; o >>= 1)
      v += __shfl_xor_sync (0xffffffffu, v, o);
#endif
    return v;
  }

  __host__ __device__ float
  max (float v) const
  {
#ifdef __CUDA_ARCH__
    for (int o = WARP / 2; o > 0; o >>= 1)
      v = fmaxf (v, __shfl_xor_sync (0xffffffffu, v, o));
#endif
    return v;
  }
};

template <typename S, typename D>
__global__ void
k_convert (const S *src,
           D       *dst,
           size_t   n)
{
  GRID_STRIDE (i, n)
    gpt2_store (&dst[i], gpt2_load (src[i]));
}

/* x[b, t, :] = wte[token] + wpe[t]: one thread per element of [BT, C],
 * i = row * C + c with row = b * T + t. */
template <typename X>
__global__ void
k_encoder (float               *x,
           const unsigned char *tokens,
           const X             *wte,
           const X             *wpe,
           size_t               n,
           unsigned             seq_len,
           unsigned             C)
{
  GRID_STRIDE (i, n)
    {
      size_t row = i / C;
      unsigned c = (unsigned) (i % C);
      unsigned t = (unsigned) (row % seq_len);

      x[i] = gpt2_load (wte[(size_t) tokens[row] * C + c]) + gpt2_load (wpe[(size_t) t * C + c]);
    }
}

/* Warp per row of [rows, C]. */
template <typename X>
__global__ void
k_layernorm (const float *x,
             const float *w,
             const float *b,
             X           *out,
             float       *mean,
             float       *rstd,
             int          rows,
             int          C)
{
  int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / WARP;
  int lane = threadIdx.x % WARP;
  float mu, rs;

  if (row >= rows)
    return;
  gpt2_layernorm_row (x + (size_t) row * C, w, b, out + (size_t) row * C, C, lane, WARP,
                      Gpt2WarpReduce (), &mu, &rs);
  if (lane == 0)
    {
      mean[row] = mu;
      rstd[row] = rs;
    }
}

/* Warp per row of [rows, C]; adds into dx. */
template <typename X>
__global__ void
k_layernorm_backward (const float *x,
                      const X     *dy,
                      const float *w,
                      const float *mean,
                      const float *rstd,
                      float       *dx,
                      int          rows,
                      int          C)
{
  int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / WARP;
  int lane = threadIdx.x % WARP;

  if (row >= rows)
    return;
  gpt2_layernorm_backward_row (x + (size_t) row * C, dy + (size_t) row * C, w, mean[row], rstd[row],
                               dx + (size_t) row * C, C, lane, WARP, Gpt2WarpReduce ());
}

/* dw[c] = sum_r dy[r, c] xhat[r, c], db[c] = sum_r dy[r, c]: one thread per
 * column c (ceil (C / BLOCK) blocks), walking the rows in order, so the
 * sums are the same on every run; neighbouring threads read neighbouring
 * columns of a row. */
template <typename X>
__global__ void
k_layernorm_param_grad (const float *x,
                        const X     *dy,
                        const float *mean,
                        const float *rstd,
                        float       *dw,
                        float       *db,
                        int          rows,
                        int          C)
{
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  float sw = 0.0f, sb = 0.0f;

  if (c >= C)
    return;
  for (int r = 0; r < rows; r++)
    {
      size_t i = (size_t) r * C + c;
      float d = gpt2_load (dy[i]);

      sw += d * (x[i] - mean[r]) * rstd[r];
      sb += d;
    }
  dw[c] = sw;
  db[c] = sb;
}

/* out[r, o] = bias[o] over [rows, OC], one thread per element: the bias
 * enters the matmul as its beta = 1 term, added in FP32 before the
 * product is rounded once. */
template <typename X>
__global__ void
k_fill_rows (X        *out,
             const X  *bias,
             size_t    n,
             unsigned  OC)
{
  GRID_STRIDE (i, n)
    out[i] = bias[i % OC];
}

/* db[o] = sum_r dout[r, o]: one thread per column, as
 * k_layernorm_param_grad. */
template <typename D>
__global__ void
k_bias_grad (const D *dout,
             float   *db,
             int      rows,
             int      OC)
{
  int o = blockIdx.x * blockDim.x + threadIdx.x;
  float s = 0.0f;

  if (o >= OC)
    return;
  for (int r = 0; r < rows; r++)
    s += gpt2_load (dout[(size_t) r * OC + o]);
  db[o] = s;
}

/* One thread per element of q (= of k, of v), i over [B, NH, T, hs]:
 * i = ((b * NH + h) * T + t) * hs + d, read from qkv[b, t, part * C + h * hs + d]. */
template <typename X>
__global__ void
k_permute_qkv (const X  *qkv,
               X        *q,
               X        *k,
               X        *v,
               size_t    n,
               unsigned  seq_len,
               unsigned  NH,
               unsigned  hs)
{
  GRID_STRIDE (i, n)
    {
      size_t r = i / hs;
      unsigned d = (unsigned) (i % hs);
      unsigned t = (unsigned) (r % seq_len);
      size_t bh = r / seq_len;
      unsigned h = (unsigned) (bh % NH);
      size_t b = bh / NH;
      size_t C = (size_t) NH * hs;
      size_t src = (b * seq_len + t) * 3 * C + (size_t) h * hs + d;

      q[i] = qkv[src];
      k[i] = qkv[src + C];
      v[i] = qkv[src + 2 * C];
    }
}

/* The inverse scatter, same indexing: every element of dqkv is written
 * exactly once. */
template <typename X>
__global__ void
k_permute_qkv_backward (X        *dqkv,
                        const X  *dq,
                        const X  *dk,
                        const X  *dv,
                        size_t    n,
                        unsigned  seq_len,
                        unsigned  NH,
                        unsigned  hs)
{
  GRID_STRIDE (i, n)
    {
      size_t r = i / hs;
      unsigned d = (unsigned) (i % hs);
      unsigned t = (unsigned) (r % seq_len);
      size_t bh = r / seq_len;
      unsigned h = (unsigned) (bh % NH);
      size_t b = bh / NH;
      size_t C = (size_t) NH * hs;
      size_t dst = (b * seq_len + t) * 3 * C + (size_t) h * hs + d;

      dqkv[dst] = dq[i];
      dqkv[dst + C] = dk[i];
      dqkv[dst + 2 * C] = dv[i];
    }
}

/* y [B, NH, T, hs] to out [B, T, C] with head h at columns h * hs: one
 * thread per element, i over y; backward (@forward false) the reverse copy. */
template <typename X>
__global__ void
k_unpermute (X        *y,
             X        *out,
             size_t    n,
             unsigned  seq_len,
             unsigned  NH,
             unsigned  hs,
             bool      forward)
{
  GRID_STRIDE (i, n)
    {
      size_t r = i / hs;
      unsigned d = (unsigned) (i % hs);
      unsigned t = (unsigned) (r % seq_len);
      size_t bh = r / seq_len;
      unsigned h = (unsigned) (bh % NH);
      size_t b = bh / NH;
      size_t o = (b * seq_len + t) * NH * hs + (size_t) h * hs + d;

      if (forward)
        out[o] = y[i];
      else
        y[i] = out[o];
    }
}

/* Warp per row of [B NH T, T]: row r is query t = r % T of head
 * (b, h) = r / T, which sees keys 0 .. t. */
template <typename X>
__global__ void
k_softmax_causal (const X *pre,
                  X       *att,
                  int      rows,
                  int      seq_len)
{
  int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / WARP;
  int lane = threadIdx.x % WARP;

  if (row >= rows)
    return;
  gpt2_softmax_row (pre + (size_t) row * seq_len, att + (size_t) row * seq_len, row % seq_len + 1,
                    seq_len, lane, WARP, Gpt2WarpReduce ());
}

/* Warp per row, as k_softmax_causal. */
template <typename X>
__global__ void
k_softmax_causal_backward (const X *att,
                           const X *datt,
                           X       *dpre,
                           int      rows,
                           int      seq_len,
                           float    scale)
{
  int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / WARP;
  int lane = threadIdx.x % WARP;
  size_t o = (size_t) row * seq_len;

  if (row >= rows)
    return;
  gpt2_softmax_backward_row (att + o, datt + o, dpre + o, row % seq_len + 1, seq_len, scale, lane,
                             WARP, Gpt2WarpReduce ());
}

/* out = a + b over n elements, the residual stream in FP32. */
template <typename X>
__global__ void
k_residual (float       *out,
            const float *a,
            const X     *b,
            size_t       n)
{
  GRID_STRIDE (i, n)
    out[i] = a[i] + gpt2_load (b[i]);
}

template <typename X>
__global__ void
k_gelu (X       *out,
        const X *in,
        size_t   n)
{
  GRID_STRIDE (i, n)
    gpt2_store (&out[i], gpt2_gelu (gpt2_load (in[i])));
}

/* In place: d is dout on entry, d in on return (each thread reads its
 * element before writing it). */
template <typename X>
__global__ void
k_gelu_backward (X       *d,
                 const X *in,
                 size_t   n)
{
  GRID_STRIDE (i, n)
    gpt2_store (&d[i], gpt2_gelu_backward (gpt2_load (in[i]), gpt2_load (d[i])));
}

/* Warp per row of [BT, V]; lane 0 writes the row's loss. */
template <typename X>
__global__ void
k_cross_entropy (const X             *logits,
                 const unsigned char *targets,
                 float               *losses,
                 int                  rows)
{
  int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / WARP;
  int lane = threadIdx.x % WARP;

  if (row >= rows)
    return;
  float l = gpt2_cross_entropy_row (logits + (size_t) row * VOCAB, VOCAB, targets[row], lane, WARP,
                                    Gpt2WarpReduce ());
  if (lane == 0)
    losses[row] = l;
}

/* Warp per row of [BT, V]. */
template <typename X>
__global__ void
k_cross_entropy_backward (const X             *logits,
                          const unsigned char *targets,
                          X                   *dlogits,
                          int                  rows,
                          float                scale)
{
  int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / WARP;
  int lane = threadIdx.x % WARP;

  if (row >= rows)
    return;
  gpt2_cross_entropy_backward_row (logits + (size_t) row * VOCAB, dlogits + (size_t) row * VOCAB,
                                   VOCAB, targets[row], scale, lane, WARP, Gpt2WarpReduce ());
}

/* dwpe[t, c] = sum_b dres[b, t, c]: one thread per element of [T, C],
 * i = t * C + c (wpe's own layout; rows T .. n_ctx were zeroed before). */
__global__ void
k_wpe_backward (const float *dres,
                float       *dwpe,
                unsigned     batch,
                unsigned     seq_len,
                unsigned     C)
{
  GRID_STRIDE (i, (size_t) seq_len * C)
    {
      float s = 0.0f;

      for (unsigned b = 0; b < batch; b++)
        s += dres[(size_t) b * seq_len * C + i];
      dwpe[i] = s;
    }
}

/* dwte[v, c] += sum over positions p with tokens[p] == v of dres[p, c]:
 * one thread per element of [V, C], i = v * C + c, walking all positions
 * in order. No atomics, so the sum is the same on every run; the threads
 * of a warp share v (C >= 32) or a few values of it, so the branch on the
 * token is mostly uniform and the tokens come from the cache. */
__global__ void
k_wte_backward (const float         *dres,
                const unsigned char *tokens,
                float               *dwte,
                unsigned             positions,
                unsigned             C)
{
  GRID_STRIDE (i, (size_t) VOCAB * C)
    {
      unsigned v = (unsigned) (i / C);
      unsigned c = (unsigned) (i % C);
      float s = 0.0f;

      for (unsigned p = 0; p < positions; p++)
        if (tokens[p] == v)
          s += dres[(size_t) p * C + c];
      dwte[i] += s;
    }
}

/* ------------------------------------------------------------ launchers */

template <typename S>
static bool
convert_from (Gpt2Cuda      *m,
              const S       *src,
              void          *dst,
              Gpt2CudaDType  dst_dtype,
              size_t         n)
{
  unsigned g = blocks_for (n);

  switch (dst_dtype)
    {
    case GPT2_CUDA_FLOAT32:
      k_convert<<<g, BLOCK, 0, m->stream>>> (src, (float *) dst, n);
      break;
    case GPT2_CUDA_BFLOAT16:
      k_convert<<<g, BLOCK, 0, m->stream>>> (src, (__nv_bfloat16 *) dst, n);
      break;
    default:
      k_convert<<<g, BLOCK, 0, m->stream>>> (src, (__half *) dst, n);
      break;
    }
  return launched (m, "k_convert");
}

static bool
convert (Gpt2Cuda      *m,
         const void    *src,
         Gpt2CudaDType  src_dtype,
         void          *dst,
         Gpt2CudaDType  dst_dtype,
         size_t         n)
{
  switch (src_dtype)
    {
    case GPT2_CUDA_FLOAT32: return convert_from (m, (const float *) src, dst, dst_dtype, n);
    case GPT2_CUDA_BFLOAT16: return convert_from (m, (const __nv_bfloat16 *) src, dst, dst_dtype, n);
    default: return convert_from (m, (const __half *) src, dst, dst_dtype, n);
    }
}

static bool
gemm (Gpt2Cuda          *m,
      const char        *what,
      cublasOperation_t  ta,
      cublasOperation_t  tb,
      int                M,
      int                N,
      int                K,
      float              alpha,
      const void        *A,
      cudaDataType       at,
      int                lda,
      const void        *B,
      cudaDataType       bt,
      int                ldb,
      float              beta,
      void              *C,
      cudaDataType       ct,
      int                ldc)
{
  return ck_blas (m, cublasGemmEx (m->blas, ta, tb, M, N, K, &alpha, A, at, lda, B, bt, ldb, &beta,
                                   C, ct, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT), what);
}

/* One product per (b, h), all in the compute dtype. */
template <typename X>
static bool
gemm_heads (Gpt2Cuda          *m,
            const char        *what,
            cublasOperation_t  ta,
            cublasOperation_t  tb,
            int                M,
            int                N,
            int                K,
            float              alpha,
            const X           *A,
            int                lda,
            long long          sa,
            const X           *B,
            int                ldb,
            long long          sb,
            X                 *C,
            int                ldc,
            long long          sc,
            int                count)
{
  float beta = 0.0f;
  cudaDataType t = blas_type (A);

  return ck_blas (m, cublasGemmStridedBatchedEx (m->blas, ta, tb, M, N, K, &alpha, A, t, lda, sa,
                                                 B, t, ldb, sb, &beta, C, t, ldc, sc, count,
                                                 CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT), what);
}

/* out [rows, OC] = inp [rows, IC] @ w [OC, IC]^T (+ bias). Column-major,
 * out^T [OC, rows] = op_T (w as [IC, OC], ld IC) @ (inp as [IC, rows], ld IC),
 * written with ld OC: row-major out. */
template <typename X>
static bool
linear_forward (Gpt2Cuda   *m,
                const char *what,
                X          *out,
                const X    *inp,
                const X    *w,
                const X    *bias,
                int         rows,
                int         IC,
                int         OC)
{
  float beta = 0.0f;

  if (bias != NULL)
    {
      size_t n = (size_t) rows * OC;

      k_fill_rows<<<blocks_for (n), BLOCK, 0, m->stream>>> (out, bias, n, (unsigned) OC);
      if (!launched (m, "k_fill_rows"))
        return false;
      beta = 1.0f;
    }
  return gemm (m, what, CUBLAS_OP_T, CUBLAS_OP_N, OC, rows, IC, 1.0f, w, blas_type (w), IC,
               inp, blas_type (inp), IC, beta, out, blas_type (out), OC);
}

/* The three gradients of linear_forward():
 *   dinp [rows, IC] = dout [rows, OC] @ w [OC, IC]: column-major
 *     dinp^T [IC, rows] = (w as [IC, OC]) @ (dout as [OC, rows]);
 *   dw [OC, IC] = dout^T @ inp: column-major
 *     dw^T [IC, OC] = (inp as [IC, rows]) @ op_T (dout as [OC, rows]),
 *     in FP32, added to what dw holds when dw_beta is 1 (the tied wte);
 *   db [OC] = the column sums of db_src (dout, or the FP32 gradient dout
 *     was rounded from). */
template <typename X, typename D>
static bool
linear_backward (Gpt2Cuda   *m,
                 const char *what,
                 X          *dinp,
                 float      *dw,
                 float       dw_beta,
                 float      *db,
                 const D    *db_src,
                 const X    *dout,
                 const X    *inp,
                 const X    *w,
                 int         rows,
                 int         IC,
                 int         OC)
{
  cudaDataType t = blas_type (w);

  if (!gemm (m, what, CUBLAS_OP_N, CUBLAS_OP_N, IC, rows, OC, 1.0f, w, t, IC, dout, t, OC,
             0.0f, dinp, t, IC) ||
      !gemm (m, what, CUBLAS_OP_N, CUBLAS_OP_T, IC, OC, rows, 1.0f, inp, t, IC, dout, t, OC,
             dw_beta, dw, CUDA_R_32F, IC))
    return false;
  if (db != NULL)
    {
      k_bias_grad<<<(OC + BLOCK - 1) / BLOCK, BLOCK, 0, m->stream>>> (db_src, db, rows, OC);
      if (!launched (m, "k_bias_grad"))
        return false;
    }
  return true;
}

template <typename X>
static bool
layernorm (Gpt2Cuda    *m,
           const float *x,
           unsigned     w_index,
           X           *out,
           float       *mean,
           float       *rstd,
           int          rows)
{
  k_layernorm<<<rows_grid (rows), BLOCK, 0, m->stream>>> (x, (const float *) m->eff[w_index],
                                                          (const float *) m->eff[w_index + 1],
                                                          out, mean, rstd, rows, (int) m->n_embd);
  return launched (m, "k_layernorm");
}

/* Adds the input gradient into m->dres and overwrites the parameters'. */
template <typename X>
static bool
layernorm_backward (Gpt2Cuda    *m,
                    const float *x,
                    unsigned     w_index,
                    const X     *dy,
                    const float *mean,
                    const float *rstd,
                    int          rows)
{
  int C = (int) m->n_embd;

  k_layernorm_backward<<<rows_grid (rows), BLOCK, 0, m->stream>>> (x, dy,
                                                                   (const float *) m->eff[w_index],
                                                                   mean, rstd, m->dres, rows, C);
  if (!launched (m, "k_layernorm_backward"))
    return false;
  k_layernorm_param_grad<<<(C + BLOCK - 1) / BLOCK, BLOCK, 0, m->stream>>> (x, dy, mean, rstd,
                                                                            m->grad[w_index],
                                                                            m->grad[w_index + 1],
                                                                            rows, C);
  return launched (m, "k_layernorm_param_grad");
}

/* Hands tensor @index's finished gradient to @ready in the dtype its
 * weight came in, with the GPU idle. */
static bool
hand_over (Gpt2Cuda              *m,
           unsigned               index,
           Gpt2CudaGradReadyFunc  ready,
           void                  *user)
{
  const void *p = m->grad[index];
  Gpt2CudaDType dt = m->given_dtype[index];
  char name[96];

  if (ready == NULL)
    return true;
  if (dt != GPT2_CUDA_FLOAT32)
    {
      if (!convert (m, m->grad[index], GPT2_CUDA_FLOAT32, m->stage, dt, m->numel[index]))
        return false;
      p = m->stage;
    }
  if (!ck (m, cudaStreamSynchronize (m->stream), "cudaStreamSynchronize"))
    return false;
  if (ready (index, p, dt, user))
    return true;
  tensor_name (m, index, name, sizeof name);
  set_err (m->err, m->err_len, "%s: the ready callback refused tensor %u (%s)", m->fn, index, name);
  return false;
}

/* ------------------------------------------------------------ forward */

template <typename X>
static bool
forward_t (Gpt2Cuda *m,
           unsigned  B,
           unsigned  Tn)
{
  const unsigned L = m->n_layer, NH = m->n_head, C = m->n_embd, hs = C / NH;
  const int BT = (int) (B * Tn);
  const size_t BTC = (size_t) BT * C;
  /* Slab strides: the buffers are sized for max_batch * n_ctx, each slab
   * used from its start. */
  const size_t sBTC = (size_t) m->max_batch * m->n_ctx * C;
  const size_t sBT = (size_t) m->max_batch * m->n_ctx;
  const size_t sATT = (size_t) m->max_batch * NH * m->n_ctx * m->n_ctx;
  const long long s_head = (long long) Tn * hs, s_att = (long long) Tn * Tn;
  const int n_heads = (int) (B * NH), att_rows = (int) (B * NH * Tn);
  const float scale = 1.0f / sqrtf ((float) hs);
  X *ln_out = (X *) m->ln_out;
  char what[64];

  k_encoder<<<blocks_for (BTC), BLOCK, 0, m->stream>>> (m->resid, m->tokens, (const X *) m->eff[0],
                                                        (const X *) m->eff[1], BTC, Tn, C);
  if (!launched (m, "k_encoder"))
    return false;

  for (unsigned l = 0; l < L; l++)
    {
      unsigned base = 2 + LAYER_TENSORS * l;
      const float *x = m->resid + 2 * l * sBTC;
      float *mid = m->resid + (2 * l + 1) * sBTC, *xn = m->resid + (2 * l + 2) * sBTC;
      X *ln1 = ln_out + 2 * l * sBTC, *ln2 = ln_out + (2 * l + 1) * sBTC;
      X *q = (X *) m->qkvr + l * 3 * sBTC, *k = q + BTC, *v = k + BTC;
      X *att = (X *) m->att + l * sATT;
      X *atty = (X *) m->atty + l * sBTC;
      X *fch = (X *) m->fch + l * 4 * sBTC, *fchg = (X *) m->fchg + l * 4 * sBTC;
      X *lin_out = (X *) m->lin_out;

      snprintf (what, sizeof what, "layer %u", l);
      if (!layernorm (m, x, base + T_LN_1_W, ln1, m->ln_mean + 2 * l * sBT,
                      m->ln_rstd + 2 * l * sBT, BT) ||
          !linear_forward (m, what, (X *) m->qkv, ln1, (const X *) m->eff[base + T_ATTN_W],
                           (const X *) m->eff[base + T_ATTN_B], BT, (int) C, (int) (3 * C)))
        return false;
      k_permute_qkv<<<blocks_for (BTC), BLOCK, 0, m->stream>>> ((const X *) m->qkv, q, k, v, BTC,
                                                                Tn, NH, hs);
      if (!launched (m, "k_permute_qkv"))
        return false;

      /* preatt [Tq, Tk] = scale q k^T per head: column-major
       * preatt^T [Tk, Tq] = op_T (k as [hs, Tk]) @ (q as [hs, Tq]). The
       * upper triangle is computed and then ignored by the softmax. */
      if (!gemm_heads (m, what, CUBLAS_OP_T, CUBLAS_OP_N, (int) Tn, (int) Tn, (int) hs, scale,
                       (const X *) k, (int) hs, s_head, (const X *) q, (int) hs, s_head,
                       (X *) m->preatt, (int) Tn, s_att, n_heads))
        return false;
      k_softmax_causal<<<rows_grid (att_rows), BLOCK, 0, m->stream>>> ((const X *) m->preatt, att,
                                                                       att_rows, (int) Tn);
      if (!launched (m, "k_softmax_causal"))
        return false;
      /* y [Tq, hs] = att @ v: column-major y^T [hs, Tq] = (v as [hs, Tk])
       * @ (att as [Tk, Tq]); att's zeros above the diagonal keep it causal. */
      if (!gemm_heads (m, what, CUBLAS_OP_N, CUBLAS_OP_N, (int) hs, (int) Tn, (int) Tn, 1.0f,
                       (const X *) v, (int) hs, s_head, (const X *) att, (int) Tn, s_att,
                       (X *) m->y, (int) hs, s_head, n_heads))
        return false;
      k_unpermute<<<blocks_for (BTC), BLOCK, 0, m->stream>>> ((X *) m->y, atty, BTC, Tn, NH, hs, true);
      if (!launched (m, "k_unpermute"))
        return false;

      if (!linear_forward (m, what, lin_out, (const X *) atty, (const X *) m->eff[base + T_ATTN_PROJ_W],
                           (const X *) m->eff[base + T_ATTN_PROJ_B], BT, (int) C, (int) C))
        return false;
      k_residual<<<blocks_for (BTC), BLOCK, 0, m->stream>>> (mid, x, (const X *) lin_out, BTC);
      if (!launched (m, "k_residual") ||
          !layernorm (m, mid, base + T_LN_2_W, ln2, m->ln_mean + (2 * l + 1) * sBT,
                      m->ln_rstd + (2 * l + 1) * sBT, BT) ||
          !linear_forward (m, what, fch, (const X *) ln2, (const X *) m->eff[base + T_FC_W],
                           (const X *) m->eff[base + T_FC_B], BT, (int) C, (int) (4 * C)))
        return false;
      k_gelu<<<blocks_for (4 * BTC), BLOCK, 0, m->stream>>> (fchg, (const X *) fch, 4 * BTC);
      if (!launched (m, "k_gelu") ||
          !linear_forward (m, what, lin_out, (const X *) fchg, (const X *) m->eff[base + T_FC_PROJ_W],
                           (const X *) m->eff[base + T_FC_PROJ_B], BT, (int) (4 * C), (int) C))
        return false;
      k_residual<<<blocks_for (BTC), BLOCK, 0, m->stream>>> (xn, mid, (const X *) lin_out, BTC);
      if (!launched (m, "k_residual"))
        return false;
    }

  X *lnf = ln_out + 2 * L * sBTC;
  if (!layernorm (m, m->resid + 2 * L * sBTC, 2 + LAYER_TENSORS * L, lnf,
                  m->ln_mean + 2 * L * sBT, m->ln_rstd + 2 * L * sBT, BT) ||
      !linear_forward (m, "logits", (X *) m->logits, (const X *) lnf, (const X *) m->eff[0],
                       (const X *) NULL, BT, (int) C, VOCAB))
    return false;
  if (m->have_targets)
    {
      k_cross_entropy<<<rows_grid (BT), BLOCK, 0, m->stream>>> ((const X *) m->logits, m->targets,
                                                                m->losses, BT);
      if (!launched (m, "k_cross_entropy"))
        return false;
    }
  return true;
}

/* ------------------------------------------------------------ backward */

template <typename X>
static bool
backward_t (Gpt2Cuda              *m,
            double                 loss_scale,
            Gpt2CudaGradReadyFunc  ready,
            void                  *user)
{
  const unsigned L = m->n_layer, NH = m->n_head, C = m->n_embd, hs = C / NH;
  const unsigned B = m->batch, Tn = m->seq_len;
  const int BT = (int) (B * Tn);
  const size_t BTC = (size_t) BT * C;
  const size_t sBTC = (size_t) m->max_batch * m->n_ctx * C;
  const size_t sBT = (size_t) m->max_batch * m->n_ctx;
  const size_t sATT = (size_t) m->max_batch * NH * m->n_ctx * m->n_ctx;
  const long long s_head = (long long) Tn * hs, s_att = (long long) Tn * Tn;
  const int n_heads = (int) (B * NH), att_rows = (int) (B * NH * Tn);
  const float scale = 1.0f / sqrtf ((float) hs);
  const unsigned lnf_w = 2 + LAYER_TENSORS * L;
  X *ln_out = (X *) m->ln_out;
  X *dln = (X *) m->dln, *dres_x = (X *) m->dres_x, *dbig = (X *) m->dbig;
  char what[64];

  if (!ck (m, cudaMemsetAsync (m->dres, 0, BTC * sizeof (float), m->stream), "cudaMemsetAsync"))
    return false;

  /* The mean over BT positions and the loss scale, in one factor. */
  k_cross_entropy_backward<<<rows_grid (BT), BLOCK, 0, m->stream>>> (
      (const X *) m->logits, m->targets, (X *) m->dlogits, BT, (float) (loss_scale / BT));
  if (!launched (m, "k_cross_entropy_backward"))
    return false;

  /* Logits through the tied wte: its gradient starts here (beta 0) and the
   * embedding adds to it at the end. */
  X *lnf = ln_out + 2 * L * sBTC;
  const float *xL = m->resid + 2 * L * sBTC;
  if (!linear_backward (m, "logits", dln, m->grad[0], 0.0f, (float *) NULL, (const X *) NULL,
                        (const X *) m->dlogits, (const X *) lnf, (const X *) m->eff[0], BT,
                        (int) C, VOCAB) ||
      !layernorm_backward (m, xL, lnf_w, (const X *) dln, m->ln_mean + 2 * L * sBT,
                           m->ln_rstd + 2 * L * sBT, BT) ||
      !hand_over (m, lnf_w + 1, ready, user) || !hand_over (m, lnf_w, ready, user))
    return false;

  for (unsigned l = L; l-- > 0;)
    {
      unsigned base = 2 + LAYER_TENSORS * l;
      const float *x = m->resid + 2 * l * sBTC, *mid = m->resid + (2 * l + 1) * sBTC;
      const X *ln1 = ln_out + 2 * l * sBTC, *ln2 = ln_out + (2 * l + 1) * sBTC;
      const X *q = (const X *) m->qkvr + l * 3 * sBTC, *k = q + BTC, *v = k + BTC;
      const X *att = (const X *) m->att + l * sATT;
      const X *atty = (const X *) m->atty + l * sBTC;
      const X *fch = (const X *) m->fch + l * 4 * sBTC, *fchg = (const X *) m->fchg + l * 4 * sBTC;
      X *dq = (X *) m->dqkvr, *dk = dq + BTC, *dv = dk + BTC;

      snprintf (what, sizeof what, "layer %u backward", l);

      /* MLP: m->dres is d loss / d x_{l+1}, also the gradient of c_proj's
       * output (the residual passes it through unchanged). */
      if (!convert (m, m->dres, GPT2_CUDA_FLOAT32, dres_x, m->dtype, BTC) ||
          !linear_backward (m, what, dbig, m->grad[base + T_FC_PROJ_W], 0.0f,
                            m->grad[base + T_FC_PROJ_B], (const float *) m->dres,
                            (const X *) dres_x, fchg, (const X *) m->eff[base + T_FC_PROJ_W], BT,
                            (int) (4 * C), (int) C) ||
          !hand_over (m, base + T_FC_PROJ_B, ready, user) ||
          !hand_over (m, base + T_FC_PROJ_W, ready, user))
        return false;
      k_gelu_backward<<<blocks_for (4 * BTC), BLOCK, 0, m->stream>>> (dbig, fch, 4 * BTC);
      if (!launched (m, "k_gelu_backward") ||
          !linear_backward (m, what, dln, m->grad[base + T_FC_W], 0.0f, m->grad[base + T_FC_B],
                            (const X *) dbig, (const X *) dbig, ln2,
                            (const X *) m->eff[base + T_FC_W], BT, (int) C, (int) (4 * C)) ||
          !hand_over (m, base + T_FC_B, ready, user) || !hand_over (m, base + T_FC_W, ready, user) ||
          /* m->dres becomes d loss / d mid: the residual path plus ln_2's. */
          !layernorm_backward (m, mid, base + T_LN_2_W, (const X *) dln,
                               m->ln_mean + (2 * l + 1) * sBT, m->ln_rstd + (2 * l + 1) * sBT, BT) ||
          !hand_over (m, base + T_LN_2_B, ready, user) ||
          !hand_over (m, base + T_LN_2_W, ready, user))
        return false;

      /* Attention's output projection; dln now holds d atty. */
      if (!convert (m, m->dres, GPT2_CUDA_FLOAT32, dres_x, m->dtype, BTC) ||
          !linear_backward (m, what, dln, m->grad[base + T_ATTN_PROJ_W], 0.0f,
                            m->grad[base + T_ATTN_PROJ_B], (const float *) m->dres,
                            (const X *) dres_x, atty, (const X *) m->eff[base + T_ATTN_PROJ_W],
                            BT, (int) C, (int) C) ||
          !hand_over (m, base + T_ATTN_PROJ_B, ready, user) ||
          !hand_over (m, base + T_ATTN_PROJ_W, ready, user))
        return false;
      k_unpermute<<<blocks_for (BTC), BLOCK, 0, m->stream>>> ((X *) m->dy, dln, BTC, Tn, NH, hs, false);
      if (!launched (m, "k_unpermute"))
        return false;

      /* datt [Tq, Tk] = dy @ v^T: column-major datt^T [Tk, Tq] =
       * op_T (v as [hs, Tk]) @ (dy as [hs, Tq]). */
      if (!gemm_heads (m, what, CUBLAS_OP_T, CUBLAS_OP_N, (int) Tn, (int) Tn, (int) hs, 1.0f, v,
                       (int) hs, s_head, (const X *) m->dy, (int) hs, s_head, (X *) m->datt,
                       (int) Tn, s_att, n_heads) ||
          /* dv [Tk, hs] = att^T @ dy: column-major dv^T [hs, Tk] =
           * (dy as [hs, Tq]) @ op_T (att as [Tk, Tq]). */
          !gemm_heads (m, what, CUBLAS_OP_N, CUBLAS_OP_T, (int) hs, (int) Tn, (int) Tn, 1.0f,
                       (const X *) m->dy, (int) hs, s_head, att, (int) Tn, s_att, dv, (int) hs,
                       s_head, n_heads))
        return false;
      k_softmax_causal_backward<<<rows_grid (att_rows), BLOCK, 0, m->stream>>> (
          att, (const X *) m->datt, (X *) m->dpre, att_rows, (int) Tn, scale);
      if (!launched (m, "k_softmax_causal_backward") ||
          /* dq [Tq, hs] = dpre @ k: column-major dq^T [hs, Tq] =
           * (k as [hs, Tk]) @ (dpre as [Tk, Tq]). */
          !gemm_heads (m, what, CUBLAS_OP_N, CUBLAS_OP_N, (int) hs, (int) Tn, (int) Tn, 1.0f, k,
                       (int) hs, s_head, (const X *) m->dpre, (int) Tn, s_att, dq, (int) hs,
                       s_head, n_heads) ||
          /* dk [Tk, hs] = dpre^T @ q: column-major dk^T [hs, Tk] =
           * (q as [hs, Tq]) @ op_T (dpre as [Tk, Tq]). */
          !gemm_heads (m, what, CUBLAS_OP_N, CUBLAS_OP_T, (int) hs, (int) Tn, (int) Tn, 1.0f, q,
                       (int) hs, s_head, (const X *) m->dpre, (int) Tn, s_att, dk, (int) hs,
                       s_head, n_heads))
        return false;
      k_permute_qkv_backward<<<blocks_for (BTC), BLOCK, 0, m->stream>>> (
          (X *) m->dqkv, (const X *) dq, (const X *) dk, (const X *) dv, BTC, Tn, NH, hs);
      if (!launched (m, "k_permute_qkv_backward") ||
          !linear_backward (m, what, dln, m->grad[base + T_ATTN_W], 0.0f, m->grad[base + T_ATTN_B],
                            (const X *) m->dqkv, (const X *) m->dqkv, ln1,
                            (const X *) m->eff[base + T_ATTN_W], BT, (int) C, (int) (3 * C)) ||
          !hand_over (m, base + T_ATTN_B, ready, user) ||
          !hand_over (m, base + T_ATTN_W, ready, user) ||
          /* m->dres becomes d loss / d x_l. */
          !layernorm_backward (m, x, base + T_LN_1_W, (const X *) dln, m->ln_mean + 2 * l * sBT,
                               m->ln_rstd + 2 * l * sBT, BT) ||
          !hand_over (m, base + T_LN_1_B, ready, user) ||
          !hand_over (m, base + T_LN_1_W, ready, user))
        return false;
    }

  /* The embeddings: m->dres is d loss / d x_0. */
  if (!ck (m, cudaMemsetAsync (m->grad[1], 0, m->numel[1] * sizeof (float), m->stream),
           "cudaMemsetAsync"))
    return false;
  k_wpe_backward<<<blocks_for ((size_t) Tn * C), BLOCK, 0, m->stream>>> (m->dres, m->grad[1], B, Tn, C);
  if (!launched (m, "k_wpe_backward") || !hand_over (m, 1, ready, user))
    return false;
  k_wte_backward<<<blocks_for ((size_t) VOCAB * C), BLOCK, 0, m->stream>>> (m->dres, m->tokens,
                                                                           m->grad[0],
                                                                           (unsigned) BT, C);
  return launched (m, "k_wte_backward") && hand_over (m, 0, ready, user);
}

/* ------------------------------------------------------------ buffers */

/* Carves the arena: with @base NULL only adds up the size. */
static void *
take (char   *base,
      size_t *off,
      size_t  bytes)
{
  size_t o = (*off + 255) & ~(size_t) 255;

  *off = o + bytes;
  return base != NULL ? base + o : NULL;
}

static size_t
layout (Gpt2Cuda *m,
        char     *base)
{
  size_t off = 0, es = dtype_size (m->dtype), max_numel = 0;
  size_t L = m->n_layer, C = m->n_embd;
  size_t BT = (size_t) m->max_batch * m->n_ctx, BTC = BT * C;
  size_t ATT = (size_t) m->max_batch * m->n_head * m->n_ctx * m->n_ctx;

  for (unsigned i = 0; i < m->n_tensors; i++)
    {
      m->grad[i] = (float *) take (base, &off, m->numel[i] * sizeof (float));
      if (m->numel[i] > max_numel)
        max_numel = m->numel[i];
    }
  m->stage = take (base, &off, max_numel * sizeof (float));
  m->logits_f32 = (float *) take (base, &off, BT * VOCAB * sizeof (float));

  m->resid = (float *) take (base, &off, (2 * L + 1) * BTC * sizeof (float));
  m->ln_mean = (float *) take (base, &off, (2 * L + 1) * BT * sizeof (float));
  m->ln_rstd = (float *) take (base, &off, (2 * L + 1) * BT * sizeof (float));
  m->ln_out = take (base, &off, (2 * L + 1) * BTC * es);
  m->qkvr = take (base, &off, L * 3 * BTC * es);
  m->att = take (base, &off, L * ATT * es);
  m->atty = take (base, &off, L * BTC * es);
  m->fch = take (base, &off, L * 4 * BTC * es);
  m->fchg = take (base, &off, L * 4 * BTC * es);
  m->logits = take (base, &off, BT * VOCAB * es);
  m->losses = (float *) take (base, &off, BT * sizeof (float));
  m->tokens = (unsigned char *) take (base, &off, BT);
  m->targets = (unsigned char *) take (base, &off, BT);

  m->qkv = take (base, &off, 3 * BTC * es);
  m->preatt = take (base, &off, ATT * es);
  m->y = take (base, &off, BTC * es);
  m->lin_out = take (base, &off, BTC * es);
  m->dres = (float *) take (base, &off, BTC * sizeof (float));
  m->dres_x = take (base, &off, BTC * es);
  m->dlogits = take (base, &off, BT * VOCAB * es);
  m->dbig = take (base, &off, 4 * BTC * es);
  m->dln = take (base, &off, BTC * es);
  m->dy = take (base, &off, BTC * es);
  m->dqkvr = take (base, &off, 3 * BTC * es);
  m->dqkv = take (base, &off, 3 * BTC * es);
  m->datt = take (base, &off, ATT * es);
  m->dpre = take (base, &off, ATT * es);
  return off;
}

/* ------------------------------------------------------------ API */

extern "C" int
gpt2_cuda_available (char   *err,
                     size_t  err_len)
{
  int count = 0;
  cudaError_t e = cudaGetDeviceCount (&count);

  if (e != cudaSuccess)
    {
      set_err (err, err_len, "no CUDA device: cudaGetDeviceCount: %s", cudaGetErrorString (e));
      return 0;
    }
  if (count <= 0)
    {
      set_err (err, err_len, "no CUDA device: the CUDA runtime sees none");
      return 0;
    }
  if (err != NULL && err_len > 0)
    err[0] = '\0';
  return 1;
}

extern "C" void
gpt2_cuda_free (Gpt2Cuda *m)
{
  if (m == NULL)
    return;
  if (m->stream != NULL)
    cudaStreamSynchronize (m->stream);
  for (unsigned i = 0; m->copy != NULL && i < m->n_tensors; i++)
    cudaFree (m->copy[i]);
  cudaFree (m->arena);
  if (m->blas != NULL)
    cublasDestroy (m->blas);
  if (m->stream != NULL)
    cudaStreamDestroy (m->stream);
  free (m->numel);
  free (m->want);
  free (m->given);
  free (m->given_dtype);
  free (m->copy);
  free (m->eff);
  free (m->grad);
  free (m->host_losses);
  free (m);
}

extern "C" Gpt2Cuda *
gpt2_cuda_new (unsigned       n_layer,
               unsigned       n_head,
               unsigned       n_embd,
               unsigned       n_ctx,
               unsigned       max_batch,
               Gpt2CudaDType  dtype,
               char          *err,
               size_t         err_len)
{
  Gpt2Cuda *m;
  size_t bytes;
  size_t BT = (size_t) max_batch * n_ctx;

  if (n_layer == 0 || n_head == 0 || n_embd == 0 || n_ctx == 0 || max_batch == 0)
    {
      set_err (err, err_len, "gpt2_cuda_new: layers %u, heads %u, width %u, context %u and batch "
               "%u must all be positive", n_layer, n_head, n_embd, n_ctx, max_batch);
      return NULL;
    }
  if (n_embd % n_head != 0)
    {
      set_err (err, err_len, "gpt2_cuda_new: width %u is not a multiple of the %u heads",
               n_embd, n_head);
      return NULL;
    }
  if (dtype != GPT2_CUDA_FLOAT32 && dtype != GPT2_CUDA_BFLOAT16 && dtype != GPT2_CUDA_FLOAT16)
    {
      set_err (err, err_len, "gpt2_cuda_new: compute dtype %d is none of float32, bfloat16, float16",
               (int) dtype);
      return NULL;
    }
  /* cuBLAS dimensions and the row counts of the kernels are ints. */
  if (BT * 4 * n_embd > 0x7fffffffu || BT * VOCAB > 0x7fffffffu || BT * n_head > 0x7fffffffu ||
      (size_t) n_ctx * n_ctx > 0x7fffffffu)
    {
      set_err (err, err_len, "gpt2_cuda_new: batch %u x context %u x width %u is too large for "
               "32-bit matrix dimensions", max_batch, n_ctx, n_embd);
      return NULL;
    }
  if (!gpt2_cuda_available (err, err_len))
    return NULL;

  m = (Gpt2Cuda *) calloc (1, sizeof *m);
  if (m == NULL)
    {
      set_err (err, err_len, "gpt2_cuda_new: out of host memory");
      return NULL;
    }
  m->n_layer = n_layer;
  m->n_head = n_head;
  m->n_embd = n_embd;
  m->n_ctx = n_ctx;
  m->max_batch = max_batch;
  m->dtype = dtype;
  m->n_tensors = 2 + LAYER_TENSORS * n_layer + 2;
  begin (m, "gpt2_cuda_new", err, err_len);

  m->numel = (size_t *) calloc (m->n_tensors, sizeof *m->numel);
  m->want = (Gpt2CudaDType *) calloc (m->n_tensors, sizeof *m->want);
  m->given = (const void **) calloc (m->n_tensors, sizeof *m->given);
  m->given_dtype = (Gpt2CudaDType *) calloc (m->n_tensors, sizeof *m->given_dtype);
  m->copy = (void **) calloc (m->n_tensors, sizeof *m->copy);
  m->eff = (const void **) calloc (m->n_tensors, sizeof *m->eff);
  m->grad = (float **) calloc (m->n_tensors, sizeof *m->grad);
  m->host_losses = (float *) malloc (BT * sizeof (float));
  if (m->numel == NULL || m->want == NULL || m->given == NULL || m->given_dtype == NULL ||
      m->copy == NULL || m->eff == NULL || m->grad == NULL || m->host_losses == NULL)
    {
      set_err (err, err_len, "gpt2_cuda_new: out of host memory");
      gpt2_cuda_free (m);
      return NULL;
    }
  for (unsigned i = 0; i < m->n_tensors; i++)
    {
      int is_ln;

      m->numel[i] = tensor_numel (m, i, &is_ln);
      m->want[i] = is_ln ? GPT2_CUDA_FLOAT32 : dtype;
    }

  /* A blocking stream: it waits for what the library left queued on the
   * legacy default stream (its writes of the working weights), as the
   * contract of gpt2_cuda_set_weight() needs. */
  if (!ck (m, cudaStreamCreate (&m->stream), "cudaStreamCreate") ||
      !ck_blas (m, cublasCreate (&m->blas), "cublasCreate") ||
      !ck_blas (m, cublasSetStream (m->blas, m->stream), "cublasSetStream") ||
      /* No split-K in half precision: the products' sums stay FP32 end to
       * end, as the CPU model's. */
      !ck_blas (m, cublasSetMathMode (m->blas, (cublasMath_t) (CUBLAS_DEFAULT_MATH |
                                                               CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)),
                "cublasSetMathMode"))
    {
      gpt2_cuda_free (m);
      return NULL;
    }
  bytes = layout (m, NULL);
  if (!ck (m, cudaMalloc (&m->arena, bytes), "cudaMalloc"))
    {
      size_t n = strlen (err != NULL ? err : "");
      if (err != NULL && n < err_len)
        snprintf (err + n, err_len - n, " (%.1f MiB of buffers)", bytes / 1048576.0);
      gpt2_cuda_free (m);
      return NULL;
    }
  layout (m, (char *) m->arena);
  return m;
}

extern "C" unsigned
gpt2_cuda_get_n_tensors (Gpt2Cuda *m)
{
  return m->n_tensors;
}

extern "C" size_t
gpt2_cuda_get_numel (Gpt2Cuda *m,
                     unsigned  index)
{
  return index < m->n_tensors ? m->numel[index] : 0;
}

extern "C" int
gpt2_cuda_set_weight (Gpt2Cuda      *m,
                      unsigned       index,
                      const void    *device_ptr,
                      Gpt2CudaDType  dtype,
                      char          *err,
                      size_t         err_len)
{
  char name[96];

  begin (m, "gpt2_cuda_set_weight", err, err_len);
  if (index >= m->n_tensors)
    {
      set_err (err, err_len, "gpt2_cuda_set_weight: tensor %u does not exist (the model has %u)",
               index, m->n_tensors);
      return 0;
    }
  tensor_name (m, index, name, sizeof name);
  if (device_ptr == NULL ||
      (dtype != GPT2_CUDA_FLOAT32 && dtype != GPT2_CUDA_BFLOAT16 && dtype != GPT2_CUDA_FLOAT16))
    {
      set_err (err, err_len, "gpt2_cuda_set_weight: tensor %u (%s): %s", index, name,
               device_ptr == NULL ? "NULL device pointer" : "dtype is none of float32, bfloat16, float16");
      return 0;
    }
  if (dtype != m->want[index] && m->copy[index] == NULL &&
      !ck (m, cudaMalloc (&m->copy[index], m->numel[index] * dtype_size (m->want[index])),
           "cudaMalloc"))
    return 0;
  m->given[index] = device_ptr;
  m->given_dtype[index] = dtype;
  return 1;
}

extern "C" double
gpt2_cuda_forward (Gpt2Cuda            *m,
                   const unsigned char *tokens,
                   const unsigned char *targets,
                   unsigned             batch,
                   unsigned             seq_len,
                   char                *err,
                   size_t               err_len)
{
  size_t BT = (size_t) batch * seq_len;
  bool ok = false;
  char name[96];

  begin (m, "gpt2_cuda_forward", err, err_len);
  m->have_forward = 0;
  if (batch == 0 || batch > m->max_batch || seq_len == 0 || seq_len > m->n_ctx || tokens == NULL)
    {
      set_err (err, err_len, "gpt2_cuda_forward: %u sequences of %u tokens: the model takes 1 to %u "
               "sequences of 1 to %u tokens", batch, seq_len, m->max_batch, m->n_ctx);
      return NAN;
    }
  for (unsigned i = 0; i < m->n_tensors; i++)
    {
      if (m->given[i] == NULL)
        {
          tensor_name (m, i, name, sizeof name);
          set_err (err, err_len, "gpt2_cuda_forward: tensor %u (%s) has no device pointer: call "
                   "gpt2_cuda_set_weight() first", i, name);
          return NAN;
        }
      /* The weights change at every step, so the private copies do too. */
      if (m->given_dtype[i] == m->want[i])
        m->eff[i] = m->given[i];
      else
        {
          if (!convert (m, m->given[i], m->given_dtype[i], m->copy[i], m->want[i], m->numel[i]))
            return NAN;
          m->eff[i] = m->copy[i];
        }
    }
  if (!ck (m, cudaMemcpyAsync (m->tokens, tokens, BT, cudaMemcpyHostToDevice, m->stream),
           "cudaMemcpyAsync") ||
      (targets != NULL &&
       !ck (m, cudaMemcpyAsync (m->targets, targets, BT, cudaMemcpyHostToDevice, m->stream),
            "cudaMemcpyAsync")))
    return NAN;
  m->batch = batch;
  m->seq_len = seq_len;
  m->have_targets = targets != NULL;

  switch (m->dtype)
    {
    case GPT2_CUDA_FLOAT32: ok = forward_t<float> (m, batch, seq_len); break;
    case GPT2_CUDA_BFLOAT16: ok = forward_t<__nv_bfloat16> (m, batch, seq_len); break;
    default: ok = forward_t<__half> (m, batch, seq_len); break;
    }
  if (!ok)
    return NAN;

  if (targets != NULL &&
      !ck (m, cudaMemcpyAsync (m->host_losses, m->losses, BT * sizeof (float),
                               cudaMemcpyDeviceToHost, m->stream), "cudaMemcpyAsync"))
    return NAN;
  if (!ck (m, cudaStreamSynchronize (m->stream), "cudaStreamSynchronize"))
    return NAN;
  m->have_forward = 1;
  if (targets == NULL)
    return 0.0;

  /* In a fixed order, in double: the same mean on every run. */
  double sum = 0.0;
  for (size_t i = 0; i < BT; i++)
    sum += m->host_losses[i];
  return sum / (double) BT;
}

extern "C" int
gpt2_cuda_backward (Gpt2Cuda              *m,
                    double                 loss_scale,
                    Gpt2CudaGradReadyFunc  ready,
                    void                  *user,
                    char                  *err,
                    size_t                 err_len)
{
  bool ok;

  begin (m, "gpt2_cuda_backward", err, err_len);
  if (!m->have_forward || !m->have_targets)
    {
      set_err (err, err_len, "gpt2_cuda_backward: needs a successful gpt2_cuda_forward() with "
               "targets first");
      return 0;
    }
  switch (m->dtype)
    {
    case GPT2_CUDA_FLOAT32: ok = backward_t<float> (m, loss_scale, ready, user); break;
    case GPT2_CUDA_BFLOAT16: ok = backward_t<__nv_bfloat16> (m, loss_scale, ready, user); break;
    default: ok = backward_t<__half> (m, loss_scale, ready, user); break;
    }
  /* A refused or failed hand-over may leave work queued; finish it so the
   * next call starts from an idle stream. */
  if (!ok)
    {
      cudaStreamSynchronize (m->stream);
      return 0;
    }
  return ck (m, cudaStreamSynchronize (m->stream), "cudaStreamSynchronize") ? 1 : 0;
}

extern "C" int
gpt2_cuda_get_logits (Gpt2Cuda *m,
                      float    *host,
                      char     *err,
                      size_t    err_len)
{
  size_t n = (size_t) m->batch * m->seq_len * VOCAB;

  begin (m, "gpt2_cuda_get_logits", err, err_len);
  if (!m->have_forward)
    {
      set_err (err, err_len, "gpt2_cuda_get_logits: no successful gpt2_cuda_forward() yet");
      return 0;
    }
  if (!convert (m, m->logits, m->dtype, m->logits_f32, GPT2_CUDA_FLOAT32, n) ||
      !ck (m, cudaMemcpyAsync (host, m->logits_f32, n * sizeof (float), cudaMemcpyDeviceToHost,
                               m->stream), "cudaMemcpyAsync") ||
      !ck (m, cudaStreamSynchronize (m->stream), "cudaStreamSynchronize"))
    return 0;
  return 1;
}
