/* gpt2-cuda-math.cuh — the per-element and per-row arithmetic of
 * gpt2-cuda.cu's own kernels (GELU, LayerNorm, causal softmax,
 * cross-entropy, forward and backward), as __host__ __device__ functions
 * so that tests/test-gpt2-cuda-host.cu runs these very lines on the CPU.
 *
 * A row function is written for @nlanes threads sharing a row: thread
 * @lane takes elements lane, lane + nlanes, ... and the partial sums and
 * maxima meet through @r (a warp shuffle on the GPU, the identity for one
 * host thread with nlanes = 1). Every lane gets the same reduced value,
 * so each finishes its own elements without another exchange. Sums are in
 * FP32, whatever the element type. */
#pragma once

#include <math.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>

#define GPT2_HD static __host__ __device__ __forceinline__

#define GPT2_MATH_LN_EPS 1e-5f
/* sqrt (2 / pi), the tanh GELU's constant */
#define GPT2_MATH_GELU_K 0.7978845608028654f
#define GPT2_MATH_GELU_C 0.044715f

/* ------------------------------------------------------------ element types
 * Loads widen to FP32; stores round to nearest even (the conversions of
 * cuda_fp16.h and cuda_bf16.h, host and device alike). Overloads on the
 * pointer, so a kernel templated on its storage type reads as one. */

GPT2_HD float gpt2_load (float v) { return v; }
GPT2_HD float gpt2_load (__nv_bfloat16 v) { return __bfloat162float (v); }
GPT2_HD float gpt2_load (__half v) { return __half2float (v); }

GPT2_HD void gpt2_store (float *p, float v) { *p = v; }
GPT2_HD void gpt2_store (__nv_bfloat16 *p, float v) { *p = __float2bfloat16 (v); }
GPT2_HD void gpt2_store (__half *p, float v) { *p = __float2half (v); }

/* One host thread: the row functions' reductions are the identity. */
struct Gpt2SerialReduce
{
  __host__ __device__ float sum (float v) const { return v; }
  __host__ __device__ float max (float v) const { return v; }
};

/* ------------------------------------------------------------ GELU (tanh) */

GPT2_HD float
gpt2_gelu (float x)
{
  float u = GPT2_MATH_GELU_K * (x + GPT2_MATH_GELU_C * x * x * x);

  return 0.5f * x * (1.0f + tanhf (u));
}

/* dout * d gelu(x) / dx, the product rule over 0.5 x (1 + tanh u). */
GPT2_HD float
gpt2_gelu_backward (float x,
                    float dout)
{
  float u = GPT2_MATH_GELU_K * (x + GPT2_MATH_GELU_C * x * x * x);
  float th = tanhf (u);
  float du = GPT2_MATH_GELU_K * (1.0f + 3.0f * GPT2_MATH_GELU_C * x * x);
  float d = 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du;

  return d * dout;
}

/* ------------------------------------------------------------ LayerNorm */

/* out = (x - mean) * rstd * w + b over one row of @n. The mean sums
 * x - x[0] and the variance is a second pass over the deviations, rather
 * than sum x and E[x^2] - mean^2: both of those lose the digits of a row
 * that sits far from zero (the residual stream drifts), the shifted sums
 * keep them. Biased variance, as torch.nn.LayerNorm. Every lane returns
 * the row's @mean and @rstd. */
template <typename TO, typename R>
GPT2_HD void
gpt2_layernorm_row (const float *x,
                    const float *w,
                    const float *b,
                    TO          *out,
                    int          n,
                    int          lane,
                    int          nlanes,
                    const R     &r,
                    float       *mean_out,
                    float       *rstd_out)
{
  float x0 = x[0], s = 0.0f;

  for (int i = lane; i < n; i += nlanes)
    s += x[i] - x0;
  float mean = x0 + r.sum (s) / (float) n;

  float v = 0.0f;
  for (int i = lane; i < n; i += nlanes)
    {
      float d = x[i] - mean;
      v += d * d;
    }
  float rstd = 1.0f / sqrtf (r.sum (v) / (float) n + GPT2_MATH_LN_EPS);

  for (int i = lane; i < n; i += nlanes)
    gpt2_store (&out[i], (x[i] - mean) * rstd * w[i] + b[i]);
  *mean_out = mean;
  *rstd_out = rstd;
}

/* Adds d loss / d x to @dx for one row, from dy = d loss / d out and the
 * forward's statistics: with g = w dy and xhat = (x - mean) rstd,
 * dx = rstd (g - mean(g) - xhat mean(g xhat)). Accumulates, because
 * the residual stream's gradient arrives through two paths. */
template <typename TD, typename R>
GPT2_HD void
gpt2_layernorm_backward_row (const float *x,
                             const TD    *dy,
                             const float *w,
                             float        mean,
                             float        rstd,
                             float       *dx,
                             int          n,
                             int          lane,
                             int          nlanes,
                             const R     &r)
{
  float sg = 0.0f, sgx = 0.0f;

  for (int i = lane; i < n; i += nlanes)
    {
      float g = w[i] * gpt2_load (dy[i]);
      float xhat = (x[i] - mean) * rstd;
      sg += g;
      sgx += g * xhat;
    }
  float mean_g = r.sum (sg) / (float) n;
  float mean_gx = r.sum (sgx) / (float) n;

  for (int i = lane; i < n; i += nlanes)
    {
      float g = w[i] * gpt2_load (dy[i]);
      float xhat = (x[i] - mean) * rstd;
      dx[i] += rstd * (g - mean_g - xhat * mean_gx);
    }
}

/* ------------------------------------------------------------ causal softmax */

/* out = softmax (in[0 .. n_valid)) and zeros on to @n: row i of the
 * attention matrix sees keys 0 .. i only, and the zeros let the following
 * att @ v product run over whole rows. The 1/sqrt(hs) scale is already in
 * @in (the q k^T product's alpha). */
template <typename TI, typename TO, typename R>
GPT2_HD void
gpt2_softmax_row (const TI *in,
                  TO       *out,
                  int       n_valid,
                  int       n,
                  int       lane,
                  int       nlanes,
                  const R  &r)
{
  float mx = -INFINITY;

  for (int j = lane; j < n_valid; j += nlanes)
    mx = fmaxf (mx, gpt2_load (in[j]));
  mx = r.max (mx);

  float s = 0.0f;
  for (int j = lane; j < n_valid; j += nlanes)
    s += expf (gpt2_load (in[j]) - mx);
  float inv = 1.0f / r.sum (s);

  for (int j = lane; j < n; j += nlanes)
    gpt2_store (&out[j], j < n_valid ? expf (gpt2_load (in[j]) - mx) * inv : 0.0f);
}

/* dpre = scale * att * (datt - sum_k att_k datt_k) over the causal part,
 * zeros beyond: the gradient through softmax, then through the forward's
 * scale (so the dq and dk products take alpha 1). */
template <typename TA, typename TD, typename TO, typename R>
GPT2_HD void
gpt2_softmax_backward_row (const TA *att,
                           const TD *datt,
                           TO       *dpre,
                           int       n_valid,
                           int       n,
                           float     scale,
                           int       lane,
                           int       nlanes,
                           const R  &r)
{
  float s = 0.0f;

  for (int j = lane; j < n_valid; j += nlanes)
    s += gpt2_load (att[j]) * gpt2_load (datt[j]);
  s = r.sum (s);

  for (int j = lane; j < n; j += nlanes)
    gpt2_store (&dpre[j], j < n_valid
                ? scale * gpt2_load (att[j]) * (gpt2_load (datt[j]) - s)
                : 0.0f);
}

/* ------------------------------------------------------------ cross-entropy */

/* -log softmax (logits)[target] = log sum exp (l - max) + max - l[target]. */
template <typename TL, typename R>
GPT2_HD float
gpt2_cross_entropy_row (const TL *logits,
                        int       n,
                        int       target,
                        int       lane,
                        int       nlanes,
                        const R  &r)
{
  float mx = -INFINITY;

  for (int j = lane; j < n; j += nlanes)
    mx = fmaxf (mx, gpt2_load (logits[j]));
  mx = r.max (mx);

  float s = 0.0f;
  for (int j = lane; j < n; j += nlanes)
    s += expf (gpt2_load (logits[j]) - mx);
  s = r.sum (s);

  return logf (s) + mx - gpt2_load (logits[target]);
}

/* dlogits = (softmax (logits) - onehot (target)) * scale, where scale is
 * loss_scale / (batch * seq_len): the mean's share of each position.
 * Recomputes the softmax from the logits rather than keeping V
 * probabilities per position from the forward. */
template <typename TL, typename TD, typename R>
GPT2_HD void
gpt2_cross_entropy_backward_row (const TL *logits,
                                 TD       *dlogits,
                                 int       n,
                                 int       target,
                                 float     scale,
                                 int       lane,
                                 int       nlanes,
                                 const R  &r)
{
  float mx = -INFINITY;

  for (int j = lane; j < n; j += nlanes)
    mx = fmaxf (mx, gpt2_load (logits[j]));
  mx = r.max (mx);

  float s = 0.0f;
  for (int j = lane; j < n; j += nlanes)
    s += expf (gpt2_load (logits[j]) - mx);
  float inv = 1.0f / r.sum (s);

  for (int j = lane; j < n; j += nlanes)
    {
      float p = expf (gpt2_load (logits[j]) - mx) * inv;
      gpt2_store (&dlogits[j], (p - (j == target ? 1.0f : 0.0f)) * scale);
    }
}
