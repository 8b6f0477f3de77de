/* cuda-host-kernels.h — the cuda plugin's kernel code run on the CPU
 * (cuda-host-kernels.cu, compiled by nvcc like the plugin's kernels), so
 * that test-device-cuda can compare it with the library bit for bit on a
 * machine without a GPU. Each function mirrors the plugin's launcher of
 * the same name in cuda-launch.h, with host pointers and no stream. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "device-cuda/cuda-launch.h"

#ifdef __cplusplus
extern "C" {
#endif

void test_cuda_host_convert    (const void   *src,
                                int           src_dtype,
                                void         *dst,
                                int           dst_dtype,
                                size_t        n,
                                int           stochastic,
                                uint64_t      seed,
                                uint64_t      first_index);
void test_cuda_host_accumulate (void         *dst,
                                int           dst_dtype,
                                const void   *src,
                                int           src_dtype,
                                size_t        n,
                                int           first);
void test_cuda_host_scale      (void         *buf,
                                int           dtype,
                                size_t        n,
                                float         factor);
/* Every thread of a grid of @n_threads (at least n / 4 + 4), one after
 * the other. Returns the kernel's head: the elements done one at a time
 * before the aligned groups, or -1 when all were. A launch with another
 * state or master format than float32 runs the blocked kernel's groups
 * instead, phase by phase (@n_threads unused), and returns -1. */
int  test_cuda_host_optim_step (const MixprecCudaOptimLaunch *launch,
                                size_t        n_threads);
/* The float8 cast kernels of cuda-fp8.cu (cuda-fp8.cuh's bodies): the
 * amax as the kernel's per-thread maxima and atomicMax leave it. */
void test_cuda_host_fp8_quantize   (const float   *src,
                                    uint8_t       *dst,
                                    size_t         n,
                                    int            format,
                                    int            saturate,
                                    float          scale,
                                    uint32_t      *amax_bits);
void test_cuda_host_fp8_dequantize (const uint8_t *src,
                                    float         *dst,
                                    size_t         n,
                                    int            format,
                                    float          scale_inv);
void test_cuda_host_mx_quantize    (const float   *src,
                                    size_t         n,
                                    int            format,
                                    unsigned       block_size,
                                    uint8_t       *dst,
                                    uint8_t       *scales);
void test_cuda_host_mx_dequantize  (const uint8_t *src,
                                    const uint8_t *scales,
                                    float         *dst,
                                    size_t         n,
                                    int            format,
                                    unsigned       block_size);

/* The 4-bit block kernels of cuda-fp4.cu (cuda-fp4.cuh's bodies), with
 * NVFP4's tensor amax folded as the amax kernel does. */
void test_cuda_host_fp4_quantize   (int            recipe,
                                    int            scale_mode,
                                    const float   *src,
                                    size_t         rows,
                                    size_t         cols,
                                    int            stochastic,
                                    uint64_t       seed,
                                    uint8_t       *dst,
                                    uint8_t       *scales,
                                    float         *tensor_scale);
void test_cuda_host_fp4_dequantize (int            recipe,
                                    const uint8_t *src,
                                    const uint8_t *scales,
                                    float          tensor_scale,
                                    size_t         n,
                                    float         *dst);

void test_cuda_host_rht            (const float   *src,
                                    size_t         n,
                                    uint16_t       sign_mask,
                                    int            inverse,
                                    float         *dst);

#ifdef __cplusplus
}
#endif
