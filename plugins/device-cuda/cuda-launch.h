/* cuda-launch.h — the boundary between the cuda plugin's host code (C,
 * device-cuda.c and cuda-optim.c) and its kernels (cuda-kernels.cu,
 * cuda-optim.cu). Each launcher queues one kernel on @stream and returns
 * the CUDA error of the launch, with the failing runtime call's name in
 * *call; arguments were checked by the caller. Plain C types only. */
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One range of sumsq_blocks as the kernel sees it: the caller's range plus
 * the index of its first output, so that a thread finds its range by
 * binary search over a table sorted by first_block. */
typedef struct {
  const void *data;
  int dtype;                   /* a MixprecPluginDType */
  size_t n;
  size_t first_block;
} MixprecCudaRange;

/* What the fused optimizer kernel runs. */
typedef enum {
  MIXPREC_CUDA_OPTIM_ADAMW,
  MIXPREC_CUDA_OPTIM_SGD_PLAIN,
  MIXPREC_CUDA_OPTIM_SGD_FIRST,
  MIXPREC_CUDA_OPTIM_SGD_MOMENTUM,
  MIXPREC_CUDA_OPTIM_LION,
} MixprecCudaOptimKind;

#define MIXPREC_CUDA_OPTIM_MAX_CONSTS 16
#define MIXPREC_CUDA_OPTIM_MAX_STATES 2

/* One step() over one range, passed by value as the kernel's parameter.
 * The fields from state_formats on are optimizer revision 3's (plain C
 * ints for MixprecPluginStateFormat and MixprecPluginMasterFormat): all
 * FLOAT32 and master_format FLOAT32 is the revision 1 step, which the
 * vectorized kernel runs; anything else goes to the blocked kernel of
 * cuda-optim-quant.cuh. */
typedef struct {
  MixprecCudaOptimKind kind;
  float consts[MIXPREC_CUDA_OPTIM_MAX_CONSTS];   /* from the shared prepare() */
  float grad_factor;
  int grad_dtype;              /* float32, float16 or bfloat16 */
  int working_dtype;           /* the same three, or -1 without a working copy */
  int stochastic;
  uint64_t seed;
  uint64_t first_index;
  float *master;               /* NULL: the parameter is working[] */
  const void *grad;
  void *states[MIXPREC_CUDA_OPTIM_MAX_STATES];    /* each in its state_formats[k] */
  void *working;
  size_t n;
  int state_formats[MIXPREC_CUDA_OPTIM_MAX_STATES];
  unsigned state_signed;       /* bit k: slot k takes the signed map */
  float *state_scales[MIXPREC_CUDA_OPTIM_MAX_STATES];   /* the call's first block's scale, or NULL */
  int state_stochastic;        /* bfloat16 slots: stochastic rounding */
  uint64_t state_seed;         /* slot k draws from stream state_seed + k */
  unsigned block_size;         /* elements per scale block; 0 when no slot is scaled */
  int master_format;
  void *master_extra;          /* remainder (int16) or Kahan compensation (bfloat16) */
} MixprecCudaOptimLaunch;

cudaError_t _mixprec_cuda_convert      (const void   *src,
                                        int           src_dtype,
                                        void         *dst,
                                        int           dst_dtype,
                                        size_t        n,
                                        int           stochastic,
                                        uint64_t      seed,
                                        uint64_t      first_index,
                                        cudaStream_t  stream,
                                        const char  **call);
cudaError_t _mixprec_cuda_accumulate   (void         *dst,
                                        int           dst_dtype,
                                        const void   *src,
                                        int           src_dtype,
                                        size_t        n,
                                        int           first,
                                        cudaStream_t  stream,
                                        const char  **call);
cudaError_t _mixprec_cuda_scale        (void         *buf,
                                        int           dtype,
                                        size_t        n,
                                        float         factor,
                                        cudaStream_t  stream,
                                        const char  **call);
/* @table: n_ranges entries in device memory. */
cudaError_t _mixprec_cuda_sumsq_blocks (const MixprecCudaRange *table,
                                        unsigned      n_ranges,
                                        size_t        n_blocks,
                                        size_t        block_size,
                                        double       *block_sums,
                                        cudaStream_t  stream,
                                        const char  **call);
cudaError_t _mixprec_cuda_sum_ordered  (const double *values,
                                        size_t        n,
                                        double       *out,
                                        cudaStream_t  stream,
                                        const char  **call);
cudaError_t _mixprec_cuda_optim_step   (const MixprecCudaOptimLaunch *launch,
                                        cudaStream_t  stream,
                                        const char  **call);

/* Float8 casts (cuda-fp8.cu; semantics of libmixprec's mixprec-fp8.h).
 * @format: 0 for float8_e4m3, 1 for float8_e5m2. @amax_bits: NULL, or a
 * device word taking the running maximum of |src[i]| as fp32 bits, NaN
 * skipped (read it as a float once the stream is done). @dst NULL: no
 * cast, the amax only. */
cudaError_t _mixprec_cuda_fp8_quantize   (const float  *src,
                                          uint8_t      *dst,
                                          size_t        n,
                                          int           format,
                                          int           saturate,
                                          float         scale,
                                          uint32_t     *amax_bits,
                                          cudaStream_t  stream,
                                          const char  **call);
cudaError_t _mixprec_cuda_fp8_dequantize (const uint8_t *src,
                                          float        *dst,
                                          size_t        n,
                                          int           format,
                                          float         scale_inv,
                                          cudaStream_t  stream,
                                          const char  **call);
/* @scales: ceil (n / block_size) E8M0 bytes; @block_size > 0. */
cudaError_t _mixprec_cuda_mx_quantize    (const float  *src,
                                          size_t        n,
                                          int           format,
                                          unsigned      block_size,
                                          uint8_t      *dst,
                                          uint8_t      *scales,
                                          cudaStream_t  stream,
                                          const char  **call);
cudaError_t _mixprec_cuda_mx_dequantize  (const uint8_t *src,
                                          const uint8_t *scales,
                                          float        *dst,
                                          size_t        n,
                                          int           format,
                                          unsigned      block_size,
                                          cudaStream_t  stream,
                                          const char  **call);

/* 4-bit block casts (cuda-fp4.cu; semantics of libmixprec's
 * mixprec_quantize_blocks() and mixprec_dequantize_blocks()). @recipe:
 * the MixprecBlockRecipe values below; @scale_mode: MixprecMxScaleMode
 * (MXFP4 only). @cols is a positive multiple of the block size (16 for
 * NVFP4, 32 for MXFP4), checked by the caller. @dst: rows * cols / 2
 * bytes; @scales: rows * cols / block size bytes, row-major (a 16x16
 * tile's scale repeated for each of its rows). NVFP4 only: @amax_bits is
 * a device word of scratch (the tensor's amax as fp32 bits), and
 * @tensor_scale, when not NULL, a device float receiving the per-tensor
 * scale. @stochastic: round with word i of @seed's stream for element i,
 * as the library does. */
#define MIXPREC_CUDA_FP4_NVFP4 0
#define MIXPREC_CUDA_FP4_NVFP4_2D 1
#define MIXPREC_CUDA_FP4_MXFP4 2
cudaError_t _mixprec_cuda_fp4_quantize   (int           recipe,
                                          int           scale_mode,
                                          const float  *src,
                                          size_t        rows,
                                          size_t        cols,
                                          int           stochastic,
                                          uint64_t      seed,
                                          uint8_t      *dst,
                                          uint8_t      *scales,
                                          uint32_t     *amax_bits,
                                          float        *tensor_scale,
                                          cudaStream_t  stream,
                                          const char  **call);
/* @n values (even); @tensor_scale: a device float, NVFP4 only. */
cudaError_t _mixprec_cuda_fp4_dequantize (int            recipe,
                                          const uint8_t *src,
                                          const uint8_t *scales,
                                          const float   *tensor_scale,
                                          size_t         n,
                                          float         *dst,
                                          cudaStream_t   stream,
                                          const char   **call);
/* The random Hadamard transform (mixprec_rht_apply()) of @n values, a
 * multiple of 16; @dst may be @src. */
cudaError_t _mixprec_cuda_rht            (const float   *src,
                                          size_t         n,
                                          uint16_t       sign_mask,
                                          int            inverse,
                                          float         *dst,
                                          cudaStream_t   stream,
                                          const char   **call);

#ifdef __cplusplus
}
#endif
