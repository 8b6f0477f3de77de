/* gpt2-model.c — GPT-2 forward and backward on the CPU, in the manner of
 * llm.c: every matrix product goes to CBLAS, the loops between them
 * (LayerNorm, softmax, GELU, cross-entropy) are OpenMP loops over rows,
 * and all activations live in buffers allocated once for the largest
 * micro-batch. Every sum, BLAS's included, runs in an order fixed by the
 * shape (and the machine), so the numbers do not depend on how many
 * threads compute them. */
#include <math.h>
#include <string.h>

#include <cblas.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "gpt2-model.h"

#ifdef GPT2_REAL_DOUBLE
#define GEMM cblas_dgemm
#define R_LOG log
#define R_SQRT sqrt
#else
#define GEMM cblas_sgemm
#define R_LOG logf
#define R_SQRT sqrtf
#endif

/* Without OpenMP the loops run on one thread, and BLAS threads itself.
 * The simd loops are vectorised in float only: in FP64 (the gradient
 * check) exp_r() is libm's, which does not vectorise, and the plain
 * loops are the reference. A vectorised sum adds in an order fixed by
 * the compiled code, as reproducible as the plain one. */
#ifdef _OPENMP
#define OMP_FOR _Pragma ("omp parallel for schedule(static)")
#else
#define OMP_FOR
#endif
#if defined (_OPENMP) && !defined (GPT2_REAL_DOUBLE)
#define OMP_PRAGMA(x) _Pragma (#x)
#define OMP_SIMD OMP_PRAGMA (omp simd)
#define OMP_SIMD_SUM(...) OMP_PRAGMA (omp simd reduction(+:__VA_ARGS__))
#else
#define OMP_SIMD
#define OMP_SIMD_SUM(...)
#endif

/* The vectorised kernels are also built for AVX2, chosen when the
 * program loads (an ifunc). Without FMA, so the elementwise ones give
 * the same bits either way; the sums, 8 lanes wide instead of 4, differ
 * in the last bits between machines with and without AVX2. */
#if defined (__x86_64__) && defined (__GLIBC__) && defined (__has_attribute) \
    && !defined (GPT2_REAL_DOUBLE)
#if __has_attribute (target_clones)
#define VECTOR_CLONES __attribute__ ((target_clones ("avx2", "default")))
#endif
#endif
#ifndef VECTOR_CLONES
#define VECTOR_CLONES
#endif

/* Rows of the causal attention products computed at a time: a block of
 * queries only needs the keys up to its last row, which skips most of
 * the masked upper triangle while keeping the products large enough
 * for BLAS. */
#define ATT_BLOCK 64

/* The large products go in parts (see matmul()) of at least this many
 * rows or columns. */
#define MATMUL_MIN_PART 64

/* Column sums over the batch * seq_len rows (bias and LayerNorm weight
 * gradients) add per block of rows, then the blocks in order: the
 * blocks depend on the row count alone, not on the thread count. */
#define SUM_BLOCKS 32

struct _Gpt2Model
{
  Gpt2Shape shape;
  guint max_batch;
  guint n_tensors;
  Gpt2TensorInfo *tensors;
  gsize *offsets;
  gsize n_params;
  gpt2_real *params;
  gpt2_real *grads;

  Gpt2RoundFunc round;
  gpointer round_data;

  gsize matmul_parts;

  /* The last forward. */
  guint batch;
  guint seq_len;
  gboolean have_targets;
  gboolean rounded;                    /* att_lp holds its probabilities */
  guint8 *tokens;
  guint8 *targets;

  /* Kept for backward. Per-layer buffers hold n_layer slices sized for
   * max_batch * n_ctx rows; a forward packs its [batch, seq_len] rows at
   * the start of each slice. */
  gsize rows_max;                      /* max_batch * n_ctx */
  gsize att_max;                       /* max_batch * n_head * n_ctx^2 */
  gpt2_real *resid;                    /* (L + 1) x [rows, C]: each block's input, then ln_f's */
  gpt2_real *resid2;                   /* L x [rows, C]: after attention */
  gpt2_real *ln1, *ln1_mean, *ln1_rstd;
  gpt2_real *qkv;                      /* L x [rows, 3C] */
  gpt2_real *att;                      /* L x [B, NH, T, T]: probabilities, 0 above the diagonal */
  gpt2_real *att_lp;                   /* the same rounded, only with a rounding function */
  gpt2_real *atty;                     /* L x [rows, C] */
  gpt2_real *ln2, *ln2_mean, *ln2_rstd;
  gpt2_real *fch;                      /* L x [rows, 4C]: before GELU */
  gpt2_real *fch_gelu;
  gpt2_real *lnf, *lnf_mean, *lnf_rstd;
  gpt2_real *logits;                   /* [rows, V] */
  gpt2_real *probs;                    /* [rows, V] */
  double *row_loss;

  /* Scratch of one layer. */
  gpt2_real *dlogits;                  /* [rows, V] */
  gpt2_real *dresid;                   /* [rows, C]: the residual stream's gradient */
  gpt2_real *dresid_lp;                /* its rounded copy, the c_proj products' input */
  gpt2_real *drow;                     /* [rows, C]: LayerNorm outputs' gradients, c_proj outputs */
  gpt2_real *dqkv;                     /* [rows, 3C] */
  gpt2_real *dfch;                     /* [rows, 4C] */
  gpt2_real *datt;                     /* [B, NH, T, T] */
  gpt2_real *partial;                  /* [SUM_BLOCKS, 4C] */
};

static const gchar *const layer_names[GPT2_LAYER_TENSORS] = {
  "ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
  "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
  "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias",
};

/* ---- Threads -------------------------------------------------------- */

/* With OpenMP, our threads are the only ones: OpenBLAS's own would spin
 * for the cores between our parallel loops and ours for theirs between
 * products. A forward or backward pass keeps OpenBLAS to the calling
 * thread and shares out the large products itself (matmul()). */
#if defined (_OPENMP) && defined (OPENBLAS_VERSION)
static int
blas_single_begin (void)
{
  int n = openblas_get_num_threads ();

  openblas_set_num_threads (1);
  return n;
}

static void
blas_single_end (int n)
{
  openblas_set_num_threads (n);
}
#else
static int
blas_single_begin (void)
{
  return 0;
}

static void
blas_single_end (int n)
{
  (void) n;
}
#endif

/* C = alpha op(A) op(B) + beta C, row-major, in parts shared out among
 * the threads: @n_parts blocks of rows of C (or of columns, when C has
 * more of them), each a whole product over K. OpenBLAS's results depend
 * on the shape it is given (its edge tiles differ), so the parts depend
 * on the shape and the machine, never on the thread count: one thread
 * computes the same parts as many. */
static void
matmul (gsize                 n_parts,
        enum CBLAS_TRANSPOSE  ta,
        enum CBLAS_TRANSPOSE  tb,
        gsize                 M,
        gsize                 N,
        gsize                 K,
        gpt2_real             alpha,
        const gpt2_real      *A,
        gsize                 lda,
        const gpt2_real      *B,
        gsize                 ldb,
        gpt2_real             beta,
        gpt2_real            *Cm,
        gsize                 ldc)
{
  gboolean by_rows = M >= N;
  gsize dim = by_rows ? M : N;
  gsize part = ((dim + n_parts - 1) / n_parts + 15) & ~(gsize) 15;

  part = MAX (part, MATMUL_MIN_PART);
OMP_FOR
  for (gsize s0 = 0; s0 < dim; s0 += part)
    {
      gsize n = MIN (part, dim - s0);

      if (by_rows)
        GEMM (CblasRowMajor, ta, tb, n, N, K, alpha,
              A + (ta == CblasNoTrans ? s0 * lda : s0), lda, B, ldb,
              beta, Cm + s0 * ldc, ldc);
      else
        GEMM (CblasRowMajor, ta, tb, M, n, K, alpha, A, lda,
              B + (tb == CblasNoTrans ? s0 : s0 * ldb), ldb,
              beta, Cm + s0, ldc);
    }
}

/* ---- Elementwise functions ------------------------------------------ */

#ifdef GPT2_REAL_DOUBLE
static inline double
exp_r (double x)
{
  return exp (x);
}

static inline double
tanh_r (double x)
{
  return tanh (x);
}
#else
/* expf, written so that the compiler can vectorise the loops calling it
 * (libm's is a call per value): Cephes' polynomial on the reduced
 * argument and 2^n from exponent bits, within 1 ulp down to the
 * subnormals. Only integer operations clamp and select, since GCC will
 * not if-convert float comparisons under -ftrapping-math: |x| > 100
 * (infinities included, NaN not) is brought to 100, which gives 0 or
 * inf all the same, and 2^n is built in two halves so that it spans
 * [2^-145, 2^145]. */
static inline float
exp_r (float x)
{
  union { float f; guint32 u; } v = { x };
  union { float f; gint32 i; } n, s1, s2;
  guint32 a = v.u & 0x7FFFFFFFu;
  gint32 k;
  float t, r, p;

  a = a > 0x42C80000u && a <= 0x7F800000u ? 0x42C80000u : a;
  v.u = (v.u & 0x80000000u) | a;
  x = v.f;
  /* Adding 1.5 * 2^23 rounds to an integer, left in the low bits. */
  n.f = x * 1.44269504088896341f + 12582912.0f;
  t = n.f - 12582912.0f;
  r = x - t * 0.693359375f;
  r = r - t * -2.12194440e-4f;
  p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1;
  k = n.i - 0x4B400000;
  s1.i = ((k >> 1) + 127) << 23;
  s2.i = (k - (k >> 1) + 127) << 23;
  return p * s1.f * s2.f;
}

/* 1 - 2 / (e^2x + 1): an absolute error near 1e-7, which is what GELU
 * needs (its value is 0.5 x (1 + tanh)). */
static inline float
tanh_r (float x)
{
  return 1 - 2 / (exp_r (2 * x) + 1);
}
#endif

/* ---- Rounding ------------------------------------------------------- */

/* The rounding callback runs on the calling thread only: the trainer's
 * may keep scratch space of its own. */
static void
round_lp (Gpt2Model *model,
          gpt2_real *x,
          gsize      n)
{
  if (model->round != NULL && n > 0)
    model->round (x, n, model->round_data);
}

/* Returns @src itself without rounding, else a rounded copy in @dst. */
static const gpt2_real *
round_copy (Gpt2Model       *model,
            gpt2_real       *dst,
            const gpt2_real *src,
            gsize            n)
{
  if (model->round == NULL)
    return src;
  memcpy (dst, src, n * sizeof (gpt2_real));
  model->round (dst, n, model->round_data);
  return dst;
}

/* ---- Kernels -------------------------------------------------------- */

/* Row block @blk's column sums, into @p. */
VECTOR_CLONES static void
colsum_block (gpt2_real       *p,
              const gpt2_real *x,
              gsize            i0,
              gsize            i1,
              gsize            n)
{
  memset (p, 0, n * sizeof (gpt2_real));
  for (gsize i = i0; i < i1; i++)
    {
      const gpt2_real *row = x + i * n;

      OMP_SIMD
      for (gsize j = 0; j < n; j++)
        p[j] += row[j];
    }
}

/* Column sums of a [rows, n] matrix, by blocks of rows (see SUM_BLOCKS). */
static void
colsum (gpt2_real       *out,
        gpt2_real       *partial,
        const gpt2_real *x,
        gsize            rows,
        gsize            n)
{
  gsize per_block = (rows + SUM_BLOCKS - 1) / SUM_BLOCKS;

OMP_FOR
  for (guint blk = 0; blk < SUM_BLOCKS; blk++)
    colsum_block (partial + blk * n, x, MIN (rows, blk * per_block),
                  MIN (rows, (blk + 1) * per_block), n);

  memcpy (out, partial, n * sizeof (gpt2_real));
  for (guint blk = 1; blk < SUM_BLOCKS; blk++)
    for (gsize j = 0; j < n; j++)
      out[j] += partial[blk * n + j];
}

/* Rows per piece of LayerNorm's forward work. */
#define LN_ROWS 16

VECTOR_CLONES static void
layernorm_forward_rows (gpt2_real       *out,
                        gpt2_real       *mean,
                        gpt2_real       *rstd,
                        const gpt2_real *inp,
                        const gpt2_real *w,
                        const gpt2_real *b,
                        gsize            i0,
                        gsize            i1,
                        gsize            C)
{
  for (gsize i = i0; i < i1; i++)
    {
      const gpt2_real *x = inp + i * C;
      gpt2_real *y = out + i * C;
      gpt2_real m = 0, v = 0, r;

      OMP_SIMD_SUM (m)
      for (gsize j = 0; j < C; j++)
        m += x[j];
      m /= (gpt2_real) C;
      OMP_SIMD_SUM (v)
      for (gsize j = 0; j < C; j++)
        v += (x[j] - m) * (x[j] - m);
      v /= (gpt2_real) C;
      r = 1 / R_SQRT (v + (gpt2_real) GPT2_LAYERNORM_EPS);
      OMP_SIMD
      for (gsize j = 0; j < C; j++)
        y[j] = (x[j] - m) * r * w[j] + b[j];
      mean[i] = m;
      rstd[i] = r;
    }
}

static void
layernorm_forward (gpt2_real       *out,
                   gpt2_real       *mean,
                   gpt2_real       *rstd,
                   const gpt2_real *inp,
                   const gpt2_real *w,
                   const gpt2_real *b,
                   gsize            rows,
                   gsize            C)
{
OMP_FOR
  for (gsize i = 0; i < rows; i += LN_ROWS)
    layernorm_forward_rows (out, mean, rstd, inp, w, b, i, MIN (rows, i + LN_ROWS), C);
}

/* Rows i0..i1 of LayerNorm's backward, their weight gradients summed
 * into pw, pb. */
VECTOR_CLONES static void
layernorm_backward_block (gpt2_real       *dinp,
                          gboolean         accumulate,
                          gpt2_real       *pw,
                          gpt2_real       *pb,
                          const gpt2_real *dout,
                          const gpt2_real *inp,
                          const gpt2_real *w,
                          const gpt2_real *mean,
                          const gpt2_real *rstd,
                          gsize            i0,
                          gsize            i1,
                          gsize            C)
{
  memset (pw, 0, C * sizeof (gpt2_real));
  memset (pb, 0, C * sizeof (gpt2_real));
  for (gsize i = i0; i < i1; i++)
    {
      const gpt2_real *x = inp + i * C;
      const gpt2_real *dy = dout + i * C;
      gpt2_real *dx = dinp + i * C;
      gpt2_real m = mean[i], r = rstd[i];
      gpt2_real dnorm_mean = 0, dnorm_xhat_mean = 0;

      OMP_SIMD_SUM (dnorm_mean, dnorm_xhat_mean)
      for (gsize j = 0; j < C; j++)
        {
          gpt2_real dnorm = dy[j] * w[j];

          dnorm_mean += dnorm;
          dnorm_xhat_mean += dnorm * ((x[j] - m) * r);
        }
      dnorm_mean /= (gpt2_real) C;
      dnorm_xhat_mean /= (gpt2_real) C;

      OMP_SIMD
      for (gsize j = 0; j < C; j++)
        {
          gpt2_real xhat = (x[j] - m) * r;
          gpt2_real d = (dy[j] * w[j] - dnorm_mean - xhat * dnorm_xhat_mean) * r;

          dx[j] = accumulate ? dx[j] + d : d;
          pw[j] += dy[j] * xhat;
          pb[j] += dy[j];
        }
    }
}

/* dinp = (or +=, into the residual stream) the input's gradient; dw, db
 * are overwritten. The normalised input is recomputed from mean and
 * rstd, so the LayerNorm output itself may have been rounded in place. */
static void
layernorm_backward (gpt2_real       *dinp,
                    gboolean         accumulate,
                    gpt2_real       *dw,
                    gpt2_real       *db,
                    gpt2_real       *partial,
                    const gpt2_real *dout,
                    const gpt2_real *inp,
                    const gpt2_real *w,
                    const gpt2_real *mean,
                    const gpt2_real *rstd,
                    gsize            rows,
                    gsize            C)
{
  gsize per_block = (rows + SUM_BLOCKS - 1) / SUM_BLOCKS;

OMP_FOR
  for (guint blk = 0; blk < SUM_BLOCKS; blk++)
    layernorm_backward_block (dinp, accumulate, partial + blk * 2 * C,
                              partial + blk * 2 * C + C, dout, inp, w, mean, rstd,
                              MIN (rows, blk * per_block),
                              MIN (rows, (blk + 1) * per_block), C);

  for (gsize j = 0; j < C; j++)
    {
      gpt2_real sw = 0, sb = 0;

      for (guint blk = 0; blk < SUM_BLOCKS; blk++)
        {
          sw += partial[blk * 2 * C + j];
          sb += partial[blk * 2 * C + C + j];
        }
      dw[j] = sw;
      db[j] = sb;
    }
}

/* out = inp · w^T + b, w [n_out, n_in] as torch.nn.Linear keeps it; the
 * rounding comes after the bias, as in a low-precision addmm. */
static void
linear_forward (Gpt2Model       *model,
                gpt2_real       *out,
                const gpt2_real *inp,
                const gpt2_real *w,
                const gpt2_real *b,
                gsize            rows,
                gsize            n_in,
                gsize            n_out)
{
  /* The bias first, so that the product adds onto it (beta = 1). */
OMP_FOR
  for (gsize i = 0; i < rows; i++)
    memcpy (out + i * n_out, b, n_out * sizeof (gpt2_real));
  matmul (model->matmul_parts, CblasNoTrans, CblasTrans, rows, n_out, n_in,
          1, inp, n_in, w, n_in, 1, out, n_out);
  round_lp (model, out, rows * n_out);
}

/* @dout is already what the products read (rounded when rounding).
 * Both products are rounded like any other; so is the bias gradient,
 * which a low-precision addmm's backward also returns in its dtype. */
static void
linear_backward (Gpt2Model       *model,
                 gpt2_real       *dinp,
                 gpt2_real       *dw,
                 gpt2_real       *db,
                 const gpt2_real *dout,
                 const gpt2_real *inp,
                 const gpt2_real *w,
                 gsize            rows,
                 gsize            n_in,
                 gsize            n_out)
{
  matmul (model->matmul_parts, CblasNoTrans, CblasNoTrans, rows, n_in, n_out,
          1, dout, n_out, w, n_in, 0, dinp, n_in);
  round_lp (model, dinp, rows * n_in);
  matmul (model->matmul_parts, CblasTrans, CblasNoTrans, n_out, n_in, rows,
          1, dout, n_out, inp, n_in, 0, dw, n_in);
  round_lp (model, dw, n_out * n_in);
  colsum (db, model->partial, dout, rows, n_out);
  round_lp (model, db, n_out);
}

#define GELU_SCALE 0.7978845608028654   /* sqrt (2 / pi) */
#define GELU_CUBIC 0.044715

/* The GELU kernels run over chunks of this many values, a chunk per
 * thread at a time. */
#define GELU_CHUNK 8192

VECTOR_CLONES static void
gelu_forward_chunk (gpt2_real       *out,
                    const gpt2_real *inp,
                    gsize            n)
{
  OMP_SIMD
  for (gsize i = 0; i < n; i++)
    {
      gpt2_real x = inp[i];
      gpt2_real u = (gpt2_real) GELU_SCALE * (x + (gpt2_real) GELU_CUBIC * x * x * x);

      out[i] = (gpt2_real) 0.5 * x * (1 + tanh_r (u));
    }
}

/* d = dout * gelu'(inp), in place over @d. */
VECTOR_CLONES static void
gelu_backward_chunk (gpt2_real       *d,
                     const gpt2_real *inp,
                     gsize            n)
{
  OMP_SIMD
  for (gsize i = 0; i < n; i++)
    {
      gpt2_real x = inp[i];
      gpt2_real u = (gpt2_real) GELU_SCALE * (x + (gpt2_real) GELU_CUBIC * x * x * x);
      gpt2_real t = tanh_r (u);
      gpt2_real du = (gpt2_real) GELU_SCALE * (1 + 3 * (gpt2_real) GELU_CUBIC * x * x);

      d[i] *= (gpt2_real) 0.5 * (1 + t) + (gpt2_real) 0.5 * x * (1 - t * t) * du;
    }
}

static void
gelu_forward (gpt2_real       *out,
              const gpt2_real *inp,
              gsize            n)
{
OMP_FOR
  for (gsize i = 0; i < n; i += GELU_CHUNK)
    gelu_forward_chunk (out + i, inp + i, MIN (GELU_CHUNK, n - i));
}

static void
gelu_backward (gpt2_real       *d,
               const gpt2_real *inp,
               gsize            n)
{
OMP_FOR
  for (gsize i = 0; i < n; i += GELU_CHUNK)
    gelu_backward_chunk (d + i, inp + i, MIN (GELU_CHUNK, n - i));
}

/* ---- Attention ------------------------------------------------------ */

/* Each (batch, head) pair is one piece of work: its q, k, v are columns
 * h * hs of the [T, 3C] rows of qkv, its probabilities a [T, T] matrix.
 * The causal products go by blocks of ATT_BLOCK queries, each against
 * the keys up to its last row only. Without rounding, a thread takes a
 * pair from scores to output while its [T, T] matrix is in cache; with
 * rounding, each product's result is rounded (on the calling thread)
 * before the next step, so the steps run one after the other. */

/* s = scale q · k^T, the rows below the diagonal block by block */
static void
att_scores (gpt2_real       *s,
            const gpt2_real *q,
            const gpt2_real *k,
            gsize            T,
            gsize            hs,
            gsize            ld,
            gpt2_real        scale)
{
  for (gsize r0 = 0; r0 < T; r0 += ATT_BLOCK)
    {
      gsize r1 = MIN (T, r0 + ATT_BLOCK);

      GEMM (CblasRowMajor, CblasNoTrans, CblasTrans, r1 - r0, r1, hs,
            scale, q + r0 * ld, ld, k, ld, 0, s + r0 * T, T);
    }
}

/* Causal softmax of the rows of one pair, in place; the masked part of
 * each row is set to 0 so that the products may read it. */
VECTOR_CLONES static void
att_softmax (gpt2_real *att,
             gsize      T)
{
  for (gsize t = 0; t < T; t++)
    {
      gpt2_real *s = att + t * T;
      gpt2_real maxv = s[0], sum = 0, inv;

      for (gsize j = 1; j <= t; j++)
        maxv = MAX (maxv, s[j]);
      OMP_SIMD_SUM (sum)
      for (gsize j = 0; j <= t; j++)
        {
          s[j] = exp_r (s[j] - maxv);
          sum += s[j];
        }
      inv = 1 / sum;
      for (gsize j = 0; j <= t; j++)
        s[j] *= inv;
      for (gsize j = t + 1; j < T; j++)
        s[j] = 0;
    }
}

/* y = p · v */
static void
att_apply (gpt2_real       *y,
           gsize            ldy,
           const gpt2_real *p,
           const gpt2_real *v,
           gsize            T,
           gsize            hs,
           gsize            ld)
{
  for (gsize r0 = 0; r0 < T; r0 += ATT_BLOCK)
    {
      gsize r1 = MIN (T, r0 + ATT_BLOCK);

      GEMM (CblasRowMajor, CblasNoTrans, CblasNoTrans, r1 - r0, hs, r1,
            1, p + r0 * T, T, v, ld, 0, y + r0 * ldy, ldy);
    }
}

/* dp = dy · v^T (the keys up to each block's last query) and dv = p^T ·
 * dy (for each block of keys, the queries from its first row on). */
static void
att_back_apply (gpt2_real       *dp,
                gpt2_real       *dv,
                const gpt2_real *dy,
                gsize            ldy,
                const gpt2_real *p,
                const gpt2_real *v,
                gsize            T,
                gsize            hs,
                gsize            ld)
{
  for (gsize r0 = 0; r0 < T; r0 += ATT_BLOCK)
    {
      gsize r1 = MIN (T, r0 + ATT_BLOCK);

      GEMM (CblasRowMajor, CblasNoTrans, CblasTrans, r1 - r0, r1, hs,
            1, dy + r0 * ldy, ldy, v, ld, 0, dp + r0 * T, T);
      GEMM (CblasRowMajor, CblasTrans, CblasNoTrans, r1 - r0, hs, T - r0,
            1, p + r0 * T + r0, T, dy + r0 * ldy, ldy, 0, dv + r0 * ld, ld);
    }
}

/* ds = p * (dp - sum (p * dp)), in place over @d. */
VECTOR_CLONES static void
att_back_softmax (gpt2_real       *d,
                  const gpt2_real *att,
                  gsize            T)
{
  for (gsize t = 0; t < T; t++)
    {
      const gpt2_real *p = att + t * T;
      gpt2_real *dt = d + t * T;
      gpt2_real dot = 0;

      OMP_SIMD_SUM (dot)
      for (gsize j = 0; j <= t; j++)
        dot += p[j] * dt[j];
      OMP_SIMD
      for (gsize j = 0; j <= t; j++)
        dt[j] = p[j] * (dt[j] - dot);
      for (gsize j = t + 1; j < T; j++)
        dt[j] = 0;
    }
}

/* dq = scale ds · k, dk = scale ds^T · q */
static void
att_back_scores (gpt2_real       *dq,
                 gpt2_real       *dk,
                 const gpt2_real *ds,
                 const gpt2_real *q,
                 const gpt2_real *k,
                 gsize            T,
                 gsize            hs,
                 gsize            ld,
                 gpt2_real        scale)
{
  for (gsize r0 = 0; r0 < T; r0 += ATT_BLOCK)
    {
      gsize r1 = MIN (T, r0 + ATT_BLOCK);

      GEMM (CblasRowMajor, CblasNoTrans, CblasNoTrans, r1 - r0, hs, r1,
            scale, ds + r0 * T, T, k, ld, 0, dq + r0 * ld, ld);
      GEMM (CblasRowMajor, CblasTrans, CblasNoTrans, r1 - r0, hs, T - r0,
            scale, ds + r0 * T + r0, T, q + r0 * ld, ld, 0, dk + r0 * ld, ld);
    }
}

/* qkv [B, T, 3C] to atty [B, T, C], keeping the probabilities in @att. */
static void
attention_forward (Gpt2Model       *model,
                   gpt2_real       *att,
                   gpt2_real       *att_lp,
                   gpt2_real       *atty,
                   const gpt2_real *qkv,
                   gsize            B,
                   gsize            T)
{
  gsize C = model->shape.n_embd, NH = model->shape.n_head, hs = C / NH;
  gsize n_bh = B * NH, ld = 3 * C;
  gpt2_real scale = 1 / R_SQRT ((gpt2_real) hs);
  const gpt2_real *p;

#define PAIR_QKV(bh) (qkv + ((bh) / NH) * T * ld + ((bh) % NH) * hs)
#define PAIR_ROWS(base, bh) ((base) + ((bh) / NH) * T * C + ((bh) % NH) * hs)
  if (model->round == NULL)
    {
OMP_FOR
      for (gsize bh = 0; bh < n_bh; bh++)
        {
          const gpt2_real *q = PAIR_QKV (bh);

          att_scores (att + bh * T * T, q, q + C, T, hs, ld, scale);
          att_softmax (att + bh * T * T, T);
          att_apply (PAIR_ROWS (atty, bh), C, att + bh * T * T, q + 2 * C, T, hs, ld);
        }
      return;
    }

OMP_FOR
  for (gsize bh = 0; bh < n_bh; bh++)
    att_scores (att + bh * T * T, PAIR_QKV (bh), PAIR_QKV (bh) + C, T, hs, ld, scale);
  round_lp (model, att, n_bh * T * T);
OMP_FOR
  for (gsize bh = 0; bh < n_bh; bh++)
    att_softmax (att + bh * T * T, T);
  p = round_copy (model, att_lp, att, n_bh * T * T);
OMP_FOR
  for (gsize bh = 0; bh < n_bh; bh++)
    att_apply (PAIR_ROWS (atty, bh), C, p + bh * T * T, PAIR_QKV (bh) + 2 * C, T, hs, ld);
  round_lp (model, atty, B * T * C);
}

/* datty [B, T, C] to dqkv [B, T, 3C]; @datt is scratch for the pairs'
 * [T, T] gradients. */
static void
attention_backward (Gpt2Model       *model,
                    gpt2_real       *dqkv,
                    gpt2_real       *datt,
                    const gpt2_real *datty,
                    const gpt2_real *qkv,
                    const gpt2_real *att,
                    const gpt2_real *att_lp,
                    gsize            B,
                    gsize            T)
{
  gsize C = model->shape.n_embd, NH = model->shape.n_head, hs = C / NH;
  gsize n_bh = B * NH, ld = 3 * C;
  gpt2_real scale = 1 / R_SQRT ((gpt2_real) hs);

  if (model->round == NULL)
    {
OMP_FOR
      for (gsize bh = 0; bh < n_bh; bh++)
        {
          const gpt2_real *q = PAIR_QKV (bh);
          gpt2_real *dq = dqkv + (q - qkv);

          att_back_apply (datt + bh * T * T, dq + 2 * C, PAIR_ROWS (datty, bh), C,
                          att + bh * T * T, q + 2 * C, T, hs, ld);
          att_back_softmax (datt + bh * T * T, att + bh * T * T, T);
          att_back_scores (dq, dq + C, datt + bh * T * T, q, q + C, T, hs, ld, scale);
        }
      return;
    }

OMP_FOR
  for (gsize bh = 0; bh < n_bh; bh++)
    att_back_apply (datt + bh * T * T, dqkv + (PAIR_QKV (bh) - qkv) + 2 * C,
                    PAIR_ROWS (datty, bh), C, att_lp + bh * T * T,
                    PAIR_QKV (bh) + 2 * C, T, hs, ld);
  round_lp (model, datt, n_bh * T * T);
OMP_FOR
  for (gsize bh = 0; bh < n_bh; bh++)
    att_back_softmax (datt + bh * T * T, att + bh * T * T, T);
  round_lp (model, datt, n_bh * T * T);
OMP_FOR
  for (gsize bh = 0; bh < n_bh; bh++)
    {
      gpt2_real *dq = dqkv + (PAIR_QKV (bh) - qkv);

      att_back_scores (dq, dq + C, datt + bh * T * T, PAIR_QKV (bh), PAIR_QKV (bh) + C,
                       T, hs, ld, scale);
    }
  round_lp (model, dqkv, B * T * 3 * C);
#undef PAIR_QKV
#undef PAIR_ROWS
}

/* ---- Model ---------------------------------------------------------- */

static gboolean
check_size (const gchar  *what,
            guint         value,
            GError      **error)
{
  if (value > 0)
    return TRUE;
  g_set_error (error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE,
               "%s: must be a positive integer, got 0", what);
  return FALSE;
}

static void
set_tensor (Gpt2TensorInfo *t,
            gchar          *name,
            const gchar    *module_type,
            guint64         d0,
            guint64         d1)
{
  t->name = name;
  t->module_type = module_type;
  t->n_dims = d1 == 0 ? 1 : 2;
  t->shape[0] = d0;
  t->shape[1] = d1;
  t->numel = d1 == 0 ? d0 : d0 * d1;
}

Gpt2Model *
gpt2_model_new (const Gpt2Shape *shape,
                guint            max_batch,
                GError         **error)
{
  Gpt2Model *model;
  gsize C, L, NH, T, rows, n;

  g_return_val_if_fail (shape != NULL, NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  if (!check_size ("n_layer", shape->n_layer, error)
      || !check_size ("n_head", shape->n_head, error)
      || !check_size ("n_embd", shape->n_embd, error)
      || !check_size ("n_ctx", shape->n_ctx, error)
      || !check_size ("max_batch", max_batch, error))
    return NULL;
  if (shape->n_embd % shape->n_head != 0)
    {
      g_set_error (error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE,
                   "n_embd: must be a multiple of n_head (%u), got %u",
                   shape->n_head, shape->n_embd);
      return NULL;
    }
  /* BLAS takes int sizes (rows, and 4C columns); the buffers are
   * counted in gsize, of which the largest, all layers' attention
   * probabilities, must not overflow. */
  if (!g_size_checked_mul (&rows, max_batch, shape->n_ctx) || rows > G_MAXINT
      || shape->n_embd > G_MAXINT / 4
      || !g_size_checked_mul (&n, rows, (gsize) shape->n_head * shape->n_ctx)
      || !g_size_checked_mul (&n, n, (gsize) shape->n_layer + 1)
      || !g_size_checked_mul (&n, n, sizeof (gpt2_real)))
    {
      g_set_error (error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE,
                   "max_batch × n_ctx: %u × %u sequences of %u heads make buffers too large",
                   max_batch, shape->n_ctx, shape->n_head);
      return NULL;
    }

  model = g_new0 (Gpt2Model, 1);
  model->shape = *shape;
  model->max_batch = max_batch;
  C = shape->n_embd;
  L = shape->n_layer;
  NH = shape->n_head;
  T = shape->n_ctx;

  model->n_tensors = GPT2_N_TENSORS (shape->n_layer);
  model->tensors = g_new0 (Gpt2TensorInfo, model->n_tensors);
  model->offsets = g_new0 (gsize, model->n_tensors);
  set_tensor (&model->tensors[0], g_strdup ("transformer.wte.weight"), "Embedding", GPT2_VOCAB, C);
  set_tensor (&model->tensors[1], g_strdup ("transformer.wpe.weight"), "Embedding", T, C);
  for (guint l = 0; l < L; l++)
    {
      static const guint rows_of[GPT2_LAYER_TENSORS] = { 1, 1, 3, 3, 1, 1, 1, 1, 4, 4, 1, 1 };
      static const guint cols_of[GPT2_LAYER_TENSORS] = { 0, 0, 1, 0, 1, 0, 0, 0, 1, 0, 4, 0 };

      for (guint i = 0; i < GPT2_LAYER_TENSORS; i++)
        set_tensor (&model->tensors[gpt2_model_layer_tensor (l, i)],
                    g_strdup_printf ("transformer.h.%u.%s", l, layer_names[i]),
                    g_str_has_prefix (layer_names[i], "ln_") ? "LayerNorm" : "Linear",
                    rows_of[i] * C, cols_of[i] * C);
    }
  set_tensor (&model->tensors[2 + 12 * L], g_strdup ("transformer.ln_f.weight"),
              "LayerNorm", C, 0);
  set_tensor (&model->tensors[2 + 12 * L + 1], g_strdup ("transformer.ln_f.bias"),
              "LayerNorm", C, 0);

  /* One block for all weights (and one for all gradients), each tensor
   * starting on a 64-byte boundary. */
  n = 0;
  for (guint i = 0; i < model->n_tensors; i++)
    {
      model->offsets[i] = n;
      n += (model->tensors[i].numel + 15) & ~(gsize) 15;
    }
  model->n_params = 0;
  for (guint i = 0; i < model->n_tensors; i++)
    model->n_params += model->tensors[i].numel;
  model->params = g_new0 (gpt2_real, n);
  model->grads = g_new0 (gpt2_real, n);

  /* A part per processor at least (four at least, so that a change of
   * machine between two and four cores changes nothing), a power of two
   * so that the parts stay even. */
  model->matmul_parts = 4;
  while (model->matmul_parts < (gsize) g_get_num_processors () && model->matmul_parts < 64)
    model->matmul_parts *= 2;

  model->rows_max = rows;
  model->att_max = (gsize) max_batch * NH * T * T;
  model->tokens = g_new0 (guint8, rows);
  model->targets = g_new0 (guint8, rows);

  model->resid = g_new (gpt2_real, (L + 1) * rows * C);
  model->resid2 = g_new (gpt2_real, L * rows * C);
  model->ln1 = g_new (gpt2_real, L * rows * C);
  model->ln1_mean = g_new (gpt2_real, L * rows);
  model->ln1_rstd = g_new (gpt2_real, L * rows);
  model->qkv = g_new (gpt2_real, L * rows * 3 * C);
  /* Zeroed: the rounding reads the whole of each [T, T] matrix, the part
   * above the diagonal included. */
  model->att = g_new0 (gpt2_real, L * model->att_max);
  model->atty = g_new (gpt2_real, L * rows * C);
  model->ln2 = g_new (gpt2_real, L * rows * C);
  model->ln2_mean = g_new (gpt2_real, L * rows);
  model->ln2_rstd = g_new (gpt2_real, L * rows);
  model->fch = g_new (gpt2_real, L * rows * 4 * C);
  model->fch_gelu = g_new (gpt2_real, L * rows * 4 * C);
  model->lnf = g_new (gpt2_real, rows * C);
  model->lnf_mean = g_new (gpt2_real, rows);
  model->lnf_rstd = g_new (gpt2_real, rows);
  model->logits = g_new0 (gpt2_real, rows * GPT2_VOCAB);
  model->probs = g_new (gpt2_real, rows * GPT2_VOCAB);
  model->row_loss = g_new (double, rows);

  model->dlogits = g_new (gpt2_real, rows * GPT2_VOCAB);
  model->dresid = g_new (gpt2_real, rows * C);
  model->dresid_lp = g_new (gpt2_real, rows * C);
  model->drow = g_new (gpt2_real, rows * C);
  model->dqkv = g_new (gpt2_real, rows * 3 * C);
  model->dfch = g_new (gpt2_real, rows * 4 * C);
  model->datt = g_new0 (gpt2_real, model->att_max);
  model->partial = g_new (gpt2_real, SUM_BLOCKS * 4 * C);

  return model;
}

void
gpt2_model_free (Gpt2Model *model)
{
  if (model == NULL)
    return;
  for (guint i = 0; i < model->n_tensors; i++)
    g_free (model->tensors[i].name);
  g_free (model->tensors);
  g_free (model->offsets);
  g_free (model->params);
  g_free (model->grads);
  g_free (model->tokens);
  g_free (model->targets);
  g_free (model->resid);
  g_free (model->resid2);
  g_free (model->ln1);
  g_free (model->ln1_mean);
  g_free (model->ln1_rstd);
  g_free (model->qkv);
  g_free (model->att);
  g_free (model->att_lp);
  g_free (model->atty);
  g_free (model->ln2);
  g_free (model->ln2_mean);
  g_free (model->ln2_rstd);
  g_free (model->fch);
  g_free (model->fch_gelu);
  g_free (model->lnf);
  g_free (model->lnf_mean);
  g_free (model->lnf_rstd);
  g_free (model->logits);
  g_free (model->probs);
  g_free (model->row_loss);
  g_free (model->dlogits);
  g_free (model->dresid);
  g_free (model->dresid_lp);
  g_free (model->drow);
  g_free (model->dqkv);
  g_free (model->dfch);
  g_free (model->datt);
  g_free (model->partial);
  g_free (model);
}

const Gpt2Shape *
gpt2_model_get_shape (Gpt2Model *model)
{
  g_return_val_if_fail (model != NULL, NULL);
  return &model->shape;
}

guint
gpt2_model_get_n_tensors (Gpt2Model *model)
{
  g_return_val_if_fail (model != NULL, 0);
  return model->n_tensors;
}

const Gpt2TensorInfo *
gpt2_model_get_tensor (Gpt2Model *model,
                       guint      index)
{
  g_return_val_if_fail (model != NULL, NULL);
  g_return_val_if_fail (index < model->n_tensors, NULL);
  return &model->tensors[index];
}

gsize
gpt2_model_get_n_params (Gpt2Model *model)
{
  g_return_val_if_fail (model != NULL, 0);
  return model->n_params;
}

guint
gpt2_model_layer_tensor (guint           layer,
                         Gpt2LayerTensor which)
{
  return 2 + GPT2_LAYER_TENSORS * layer + (guint) which;
}

gpt2_real *
gpt2_model_get_weights (Gpt2Model *model,
                        guint      index)
{
  g_return_val_if_fail (model != NULL, NULL);
  g_return_val_if_fail (index < model->n_tensors, NULL);
  return model->params + model->offsets[index];
}

const gpt2_real *
gpt2_model_get_grad (Gpt2Model *model,
                     guint      index)
{
  g_return_val_if_fail (model != NULL, NULL);
  g_return_val_if_fail (index < model->n_tensors, NULL);
  return model->grads + model->offsets[index];
}

const gpt2_real *
gpt2_model_get_logits (Gpt2Model *model)
{
  g_return_val_if_fail (model != NULL, NULL);
  return model->logits;
}

/* splitmix64 (Steele, Lea and Flood): element i of a stream is the mix
 * of key + i * gamma, so any element is computed from its index alone. */
#define SPLITMIX_GAMMA G_GUINT64_CONSTANT (0x9E3779B97F4A7C15)

static inline guint64
splitmix64_mix (guint64 z)
{
  z = (z ^ (z >> 30)) * G_GUINT64_CONSTANT (0xBF58476D1CE4E5B9);
  z = (z ^ (z >> 27)) * G_GUINT64_CONSTANT (0x94D049BB133111EB);
  return z ^ (z >> 31);
}

/* Element @i of the N(0, 1) stream @key: Box-Muller on the pair of
 * uniforms 2 (i / 2), 2 (i / 2) + 1, the cosine for even i and the sine
 * for odd i. */
static double
stream_normal (guint64 key,
               guint64 i)
{
  guint64 j = i & ~G_GUINT64_CONSTANT (1);
  guint64 a = splitmix64_mix (key + (j + 1) * SPLITMIX_GAMMA);
  guint64 b = splitmix64_mix (key + (j + 2) * SPLITMIX_GAMMA);
  double u1 = ((a >> 11) + 1) * 0x1p-53;      /* (0, 1]: log stays finite */
  double u2 = (b >> 11) * 0x1p-53;
  double r = sqrt (-2 * log (u1));

  return (i & 1) ? r * sin (2 * G_PI * u2) : r * cos (2 * G_PI * u2);
}

void
gpt2_model_init_weights (Gpt2Model *model,
                         guint64    seed)
{
  guint L;
  double proj_std;

  g_return_if_fail (model != NULL);

  L = model->shape.n_layer;
  proj_std = 0.02 / sqrt (2.0 * L);
  for (guint index = 0; index < model->n_tensors; index++)
    {
      const Gpt2TensorInfo *t = &model->tensors[index];
      gpt2_real *w = model->params + model->offsets[index];
      guint64 key = splitmix64_mix (seed + (index + 1) * SPLITMIX_GAMMA);
      double std = 0.02;

      if (t->n_dims == 1)
        {
          /* Biases 0, LayerNorm weights 1. */
          gpt2_real v = g_str_has_suffix (t->name, "ln_1.weight")
                        || g_str_has_suffix (t->name, "ln_2.weight")
                        || g_str_has_suffix (t->name, "ln_f.weight") ? 1 : 0;

          for (gsize i = 0; i < t->numel; i++)
            w[i] = v;
          continue;
        }
      if (g_str_has_suffix (t->name, "c_proj.weight"))
        std = proj_std;
OMP_FOR
      for (gsize i = 0; i < t->numel; i++)
        w[i] = (gpt2_real) (std * stream_normal (key, i));
    }
}

void
gpt2_model_set_rounding (Gpt2Model     *model,
                         Gpt2RoundFunc  round,
                         gpointer       user_data)
{
  g_return_if_fail (model != NULL);

  model->round = round;
  model->round_data = user_data;
  /* The rounded probabilities are a second copy of the largest
   * activation: only models that round pay for it. */
  if (round != NULL && model->att_lp == NULL)
    model->att_lp = g_new0 (gpt2_real, (gsize) model->shape.n_layer * model->att_max);
}

/* ---- Forward -------------------------------------------------------- */

static double
forward_pass (Gpt2Model    *model,
              const guint8 *tokens,
              const guint8 *targets,
              guint         batch,
              guint         seq_len)
{
  gsize C, L, T, B, rows, V = GPT2_VOCAB;
  const gpt2_real *wte, *wpe;
  double loss = 0;

  C = model->shape.n_embd;
  L = model->shape.n_layer;
  T = seq_len;
  B = batch;
  rows = B * T;
  model->batch = batch;
  model->seq_len = seq_len;
  model->have_targets = targets != NULL;
  model->rounded = model->round != NULL;
  memcpy (model->tokens, tokens, rows);
  if (targets != NULL)
    memcpy (model->targets, targets, rows);

  wte = gpt2_model_get_weights (model, 0);
  wpe = gpt2_model_get_weights (model, 1);
OMP_FOR
  for (gsize i = 0; i < rows; i++)
    {
      const gpt2_real *e = wte + (gsize) tokens[i] * C;
      const gpt2_real *p = wpe + (i % T) * C;
      gpt2_real *x = model->resid + i * C;

      for (gsize j = 0; j < C; j++)
        x[j] = e[j] + p[j];
    }

  for (gsize l = 0; l < L; l++)
    {
      const gpt2_real *w[GPT2_LAYER_TENSORS];
      gpt2_real *x = model->resid + l * model->rows_max * C;
      gpt2_real *x_out = x + model->rows_max * C;
      gpt2_real *resid2 = model->resid2 + l * model->rows_max * C;
      gpt2_real *ln1 = model->ln1 + l * model->rows_max * C;
      gpt2_real *ln2 = model->ln2 + l * model->rows_max * C;
      gpt2_real *qkv = model->qkv + l * model->rows_max * 3 * C;
      gpt2_real *atty = model->atty + l * model->rows_max * C;
      gpt2_real *fch = model->fch + l * model->rows_max * 4 * C;
      gpt2_real *fch_gelu = model->fch_gelu + l * model->rows_max * 4 * C;
      gpt2_real *att = model->att + l * model->att_max;
      gpt2_real *att_lp = model->att_lp != NULL ? model->att_lp + l * model->att_max : NULL;
      gpt2_real *proj = model->drow;

      for (guint i = 0; i < GPT2_LAYER_TENSORS; i++)
        w[i] = gpt2_model_get_weights (model, gpt2_model_layer_tensor (l, i));

      layernorm_forward (ln1, model->ln1_mean + l * model->rows_max,
                         model->ln1_rstd + l * model->rows_max,
                         x, w[GPT2_LN_1_W], w[GPT2_LN_1_B], rows, C);
      round_lp (model, ln1, rows * C);
      linear_forward (model, qkv, ln1, w[GPT2_ATTN_W], w[GPT2_ATTN_B], rows, C, 3 * C);
      attention_forward (model, att, att_lp, atty, qkv, B, T);
      linear_forward (model, proj, atty, w[GPT2_ATTN_PROJ_W], w[GPT2_ATTN_PROJ_B], rows, C, C);
OMP_FOR
      for (gsize i = 0; i < rows * C; i++)
        resid2[i] = x[i] + proj[i];

      layernorm_forward (ln2, model->ln2_mean + l * model->rows_max,
                         model->ln2_rstd + l * model->rows_max,
                         resid2, w[GPT2_LN_2_W], w[GPT2_LN_2_B], rows, C);
      round_lp (model, ln2, rows * C);
      linear_forward (model, fch, ln2, w[GPT2_FC_W], w[GPT2_FC_B], rows, C, 4 * C);
      gelu_forward (fch_gelu, fch, rows * 4 * C);
      round_lp (model, fch_gelu, rows * 4 * C);
      linear_forward (model, proj, fch_gelu, w[GPT2_FC_PROJ_W], w[GPT2_FC_PROJ_B], rows, 4 * C, C);
OMP_FOR
      for (gsize i = 0; i < rows * C; i++)
        x_out[i] = resid2[i] + proj[i];
    }

  layernorm_forward (model->lnf, model->lnf_mean, model->lnf_rstd,
                     model->resid + L * model->rows_max * C,
                     gpt2_model_get_weights (model, 2 + 12 * L),
                     gpt2_model_get_weights (model, 2 + 12 * L + 1), rows, C);
  round_lp (model, model->lnf, rows * C);
  matmul (model->matmul_parts, CblasNoTrans, CblasTrans, rows, V, C,
          1, model->lnf, C, wte, C, 0, model->logits, V);
  round_lp (model, model->logits, rows * V);

  if (targets == NULL)
    return NAN;

OMP_FOR
  for (gsize i = 0; i < rows; i++)
    {
      const gpt2_real *z = model->logits + i * V;
      gpt2_real *p = model->probs + i * V;
      gpt2_real maxv = z[0], sum = 0, inv;

      for (gsize v = 1; v < V; v++)
        maxv = MAX (maxv, z[v]);
      OMP_SIMD_SUM (sum)
      for (gsize v = 0; v < V; v++)
        {
          p[v] = exp_r (z[v] - maxv);
          sum += p[v];
        }
      inv = 1 / sum;
      for (gsize v = 0; v < V; v++)
        p[v] *= inv;
      model->row_loss[i] = (double) R_LOG (sum) + (double) maxv - (double) z[targets[i]];
    }
  for (gsize i = 0; i < rows; i++)
    loss += model->row_loss[i];
  return loss / (double) rows;
}

/* Returns NAN without @targets. */
double
gpt2_model_forward (Gpt2Model    *model,
                    const guint8 *tokens,
                    const guint8 *targets,
                    guint         batch,
                    guint         seq_len)
{
  int blas_threads;
  double loss;

  g_return_val_if_fail (model != NULL, NAN);
  g_return_val_if_fail (tokens != NULL, NAN);
  g_return_val_if_fail (batch >= 1 && batch <= model->max_batch, NAN);
  g_return_val_if_fail (seq_len >= 1 && seq_len <= model->shape.n_ctx, NAN);

  blas_threads = blas_single_begin ();
  loss = forward_pass (model, tokens, targets, batch, seq_len);
  blas_single_end (blas_threads);
  return loss;
}

/* ---- Backward ------------------------------------------------------- */

static gboolean
grad_ready (Gpt2Model         *model,
            guint              index,
            Gpt2GradReadyFunc  ready,
            gpointer           user_data,
            GError           **error)
{
  if (ready == NULL)
    return TRUE;
  return ready (index, model->grads + model->offsets[index], user_data, error);
}

static gboolean
backward_pass (Gpt2Model         *model,
               double             loss_scale,
               Gpt2GradReadyFunc  ready,
               gpointer           user_data,
               GError           **error)
{
  gsize C, L, T, B, rows, V = GPT2_VOCAB;
  guint lnf_w;
  gpt2_real dscale;
  gpt2_real *dwte, *dwpe;

  C = model->shape.n_embd;
  L = model->shape.n_layer;
  T = model->seq_len;
  B = model->batch;
  rows = B * T;
  lnf_w = 2 + 12 * L;

  /* d(mean loss * scale) / dlogits = (p - onehot) * scale / rows */
  dscale = (gpt2_real) (loss_scale / (double) rows);
OMP_FOR
  for (gsize i = 0; i < rows; i++)
    {
      const gpt2_real *p = model->probs + i * V;
      gpt2_real *d = model->dlogits + i * V;

      for (gsize v = 0; v < V; v++)
        d[v] = p[v] * dscale;
      d[model->targets[i]] = (p[model->targets[i]] - 1) * dscale;
    }
  round_lp (model, model->dlogits, rows * V);

  dwte = model->grads + model->offsets[0];
  matmul (model->matmul_parts, CblasNoTrans, CblasNoTrans, rows, C, V,
          1, model->dlogits, V, gpt2_model_get_weights (model, 0), C, 0, model->drow, C);
  round_lp (model, model->drow, rows * C);
  matmul (model->matmul_parts, CblasTrans, CblasNoTrans, V, C, rows,
          1, model->dlogits, V, model->lnf, C, 0, dwte, C);
  round_lp (model, dwte, V * C);

  layernorm_backward (model->dresid, FALSE,
                      model->grads + model->offsets[lnf_w],
                      model->grads + model->offsets[lnf_w + 1], model->partial,
                      model->drow, model->resid + L * model->rows_max * C,
                      gpt2_model_get_weights (model, lnf_w),
                      model->lnf_mean, model->lnf_rstd, rows, C);
  if (!grad_ready (model, lnf_w + 1, ready, user_data, error)
      || !grad_ready (model, lnf_w, ready, user_data, error))
    return FALSE;

  for (gsize l = L; l-- > 0;)
    {
      const gpt2_real *w[GPT2_LAYER_TENSORS];
      gpt2_real *g[GPT2_LAYER_TENSORS];
      guint first = gpt2_model_layer_tensor (l, 0);
      const gpt2_real *x = model->resid + l * model->rows_max * C;
      const gpt2_real *resid2 = model->resid2 + l * model->rows_max * C;
      const gpt2_real *ln1 = model->ln1 + l * model->rows_max * C;
      const gpt2_real *ln2 = model->ln2 + l * model->rows_max * C;
      const gpt2_real *qkv = model->qkv + l * model->rows_max * 3 * C;
      const gpt2_real *atty = model->atty + l * model->rows_max * C;
      const gpt2_real *fch = model->fch + l * model->rows_max * 4 * C;
      const gpt2_real *fch_gelu = model->fch_gelu + l * model->rows_max * 4 * C;
      const gpt2_real *att = model->att + l * model->att_max;
      /* The probabilities the forward multiplied by v (a rounding
       * function set since then has none of its own). */
      const gpt2_real *att_lp = model->rounded ? model->att_lp + l * model->att_max : att;
      const gpt2_real *dout;

      for (guint i = 0; i < GPT2_LAYER_TENSORS; i++)
        {
          w[i] = model->params + model->offsets[first + i];
          g[i] = model->grads + model->offsets[first + i];
        }

      /* MLP: the residual stream's gradient is the output's. */
      dout = round_copy (model, model->dresid_lp, model->dresid, rows * C);
      linear_backward (model, model->dfch, g[GPT2_FC_PROJ_W], g[GPT2_FC_PROJ_B],
                       dout, fch_gelu, w[GPT2_FC_PROJ_W], rows, 4 * C, C);
      if (!grad_ready (model, first + GPT2_FC_PROJ_B, ready, user_data, error)
          || !grad_ready (model, first + GPT2_FC_PROJ_W, ready, user_data, error))
        return FALSE;
      gelu_backward (model->dfch, fch, rows * 4 * C);
      round_lp (model, model->dfch, rows * 4 * C);
      linear_backward (model, model->drow, g[GPT2_FC_W], g[GPT2_FC_B],
                       model->dfch, ln2, w[GPT2_FC_W], rows, C, 4 * C);
      if (!grad_ready (model, first + GPT2_FC_B, ready, user_data, error)
          || !grad_ready (model, first + GPT2_FC_W, ready, user_data, error))
        return FALSE;
      layernorm_backward (model->dresid, TRUE, g[GPT2_LN_2_W], g[GPT2_LN_2_B],
                          model->partial, model->drow, resid2, w[GPT2_LN_2_W],
                          model->ln2_mean + l * model->rows_max,
                          model->ln2_rstd + l * model->rows_max, rows, C);
      if (!grad_ready (model, first + GPT2_LN_2_B, ready, user_data, error)
          || !grad_ready (model, first + GPT2_LN_2_W, ready, user_data, error))
        return FALSE;

      /* Attention. */
      dout = round_copy (model, model->dresid_lp, model->dresid, rows * C);
      linear_backward (model, model->drow, g[GPT2_ATTN_PROJ_W], g[GPT2_ATTN_PROJ_B],
                       dout, atty, w[GPT2_ATTN_PROJ_W], rows, C, C);
      if (!grad_ready (model, first + GPT2_ATTN_PROJ_B, ready, user_data, error)
          || !grad_ready (model, first + GPT2_ATTN_PROJ_W, ready, user_data, error))
        return FALSE;
      attention_backward (model, model->dqkv, model->datt, model->drow,
                          qkv, att, att_lp, B, T);
      linear_backward (model, model->drow, g[GPT2_ATTN_W], g[GPT2_ATTN_B],
                       model->dqkv, ln1, w[GPT2_ATTN_W], rows, C, 3 * C);
      if (!grad_ready (model, first + GPT2_ATTN_B, ready, user_data, error)
          || !grad_ready (model, first + GPT2_ATTN_W, ready, user_data, error))
        return FALSE;
      layernorm_backward (model->dresid, TRUE, g[GPT2_LN_1_W], g[GPT2_LN_1_B],
                          model->partial, model->drow, x, w[GPT2_LN_1_W],
                          model->ln1_mean + l * model->rows_max,
                          model->ln1_rstd + l * model->rows_max, rows, C);
      if (!grad_ready (model, first + GPT2_LN_1_B, ready, user_data, error)
          || !grad_ready (model, first + GPT2_LN_1_W, ready, user_data, error))
        return FALSE;
    }

  /* Embeddings: wpe row t sums over the batch; wte adds each token's
   * rows onto the logits' part. A thread owns a range of columns and
   * walks the rows in order, so the sums keep their order. */
  dwpe = model->grads + model->offsets[1];
  memset (dwpe + T * C, 0, (model->shape.n_ctx - T) * C * sizeof (gpt2_real));
OMP_FOR
  for (gsize t = 0; t < T; t++)
    {
      gpt2_real *d = dwpe + t * C;

      memcpy (d, model->dresid + t * C, C * sizeof (gpt2_real));
      for (gsize b = 1; b < B; b++)
        for (gsize j = 0; j < C; j++)
          d[j] += model->dresid[(b * T + t) * C + j];
    }
  if (!grad_ready (model, 1, ready, user_data, error))
    return FALSE;

OMP_FOR
  for (gsize j0 = 0; j0 < C; j0 += 16)
    {
      gsize j1 = MIN (C, j0 + 16);

      for (gsize i = 0; i < rows; i++)
        {
          gpt2_real *d = dwte + (gsize) model->tokens[i] * C;
          const gpt2_real *s = model->dresid + i * C;

          for (gsize j = j0; j < j1; j++)
            d[j] += s[j];
        }
    }
  return grad_ready (model, 0, ready, user_data, error);
}

gboolean
gpt2_model_backward (Gpt2Model         *model,
                     double             loss_scale,
                     Gpt2GradReadyFunc  ready,
                     gpointer           user_data,
                     GError           **error)
{
  int blas_threads;
  gboolean ok;

  g_return_val_if_fail (model != NULL, FALSE);
  g_return_val_if_fail (model->have_targets, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  blas_threads = blas_single_begin ();
  ok = backward_pass (model, loss_scale, ready, user_data, error);
  blas_single_end (blas_threads);
  return ok;
}
