/* nccl-kernels.h — the element-wise kernels of comm-nccl (nccl-kernels.cu):
 * what NCCL's own reductions do not do. Each launcher queues one kernel on
 * @stream and returns the launch's cudaError_t; n == 0 queues nothing. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "mixprec-plugin-abi.h"

#ifdef __cplusplus
extern "C" {
#endif

/* dst[i] = src[i] converted to dst_dtype (float32, float16 or bfloat16;
 * src_dtype is dst_dtype or, for a widening, narrower), except that for i
 * in [first_offset, first_offset + first_len) it is first[i - first_offset]
 * + src[i], added in FP32 and rounded to nearest even once. @first has
 * dst_dtype and may be NULL (first_len is then ignored). */
cudaError_t nccl_kernel_prepare    (void               *dst,
                                    MixprecPluginDType  dst_dtype,
                                    const void         *src,
                                    MixprecPluginDType  src_dtype,
                                    size_t              n,
                                    const void         *first,
                                    size_t              first_offset,
                                    size_t              first_len,
                                    cudaStream_t        stream);

/* dst[i] (float32) = ((first[i] + t_0[i]) + t_1[i]) + ... + t_{n_terms-1}[i],
 * added in FP32 in rank order and never rounded, where t_r is
 * terms + r * term_stride elements of term_dtype (float16 or bfloat16),
 * except t_own (own_rank) which is @own; without @first (NULL, else
 * float32, may be @dst) the fold starts from t_0. The FP32 sum of a
 * reduction whose contributions travelled in term_dtype. */
cudaError_t nccl_kernel_fold_fp32  (float              *dst,
                                    const float        *first,
                                    const void         *terms,
                                    size_t              term_stride,
                                    const void         *own,
                                    unsigned            own_rank,
                                    unsigned            n_terms,
                                    MixprecPluginDType  term_dtype,
                                    size_t              n,
                                    cudaStream_t        stream);

/* keys[i] = an int32 whose order is the MAX contract's order of src[i]
 * read as key_dtype (src widened exactly when narrower): numbers in
 * their order, -0 below +0, every NaN above +inf. For i in the first range
 * the key is the larger of that and first[i - first_offset]'s (key_dtype). */
cudaError_t nccl_kernel_max_encode (int32_t            *keys,
                                    MixprecPluginDType  key_dtype,
                                    const void         *src,
                                    MixprecPluginDType  src_dtype,
                                    size_t              n,
                                    const void         *first,
                                    size_t              first_offset,
                                    size_t              first_len,
                                    cudaStream_t        stream);

/* dst[i] = the key_dtype value of keys[i] (the inverse of the encoding). */
cudaError_t nccl_kernel_max_decode (void               *dst,
                                    MixprecPluginDType  key_dtype,
                                    const int32_t      *keys,
                                    size_t              n,
                                    cudaStream_t        stream);

#ifdef __cplusplus
}
#endif
