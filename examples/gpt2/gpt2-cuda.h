/* gpt2-cuda.h — the GPT-2 of gpt2-model.h on an NVIDIA GPU (gpt2-cuda.cu):
 * the same tensors, shapes and layouts, its matmuls in cuBLAS with FP32
 * accumulation, the weights read where the training library keeps its
 * working copies on the device. Plain C and no GLib, so that both the
 * trainer (C) and gpt2-cuda.cu (nvcc) include it.
 *
 * Errors come back as one sentence in the caller's buffer (@err of
 * @err_len bytes, always NUL-terminated when @err_len > 0; @err may be
 * NULL). */
#pragma once

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct Gpt2Cuda Gpt2Cuda;

typedef enum
{
  GPT2_CUDA_FLOAT32,
  GPT2_CUDA_BFLOAT16,
  GPT2_CUDA_FLOAT16
} Gpt2CudaDType;

/* Called by gpt2_cuda_backward() once tensor @index's gradient is
 * complete, in the order the backward pass finishes them (the last layer
 * first, the token embedding last). @device_grad holds the tensor's numel
 * values in @dtype, the dtype given to gpt2_cuda_set_weight(); the GPU is
 * idle when it is called, so the library may read it on its own stream,
 * until the callback returns. Returns 0 to stop the backward pass. */
typedef int (*Gpt2CudaGradReadyFunc) (unsigned       index,
                                      const void    *device_grad,
                                      Gpt2CudaDType  dtype,
                                      void          *user);

/* Whether this process sees a CUDA device: 1, or 0 with the reason in
 * @err ("no CUDA device: ..."). Touches nothing else, so tests call it
 * to skip cleanly. */
int       gpt2_cuda_available  (char          *err,
                                size_t         err_len);

/* A model on the current CUDA device with buffers for micro-batches of up
 * to @max_batch sequences of up to @n_ctx tokens. @dtype is the compute
 * dtype: matmul inputs and outputs are kept in it (LayerNorm statistics,
 * softmax, the loss and the residual stream stay in FP32). NULL with a
 * message when there is no usable GPU or the shape makes no model. */
Gpt2Cuda *gpt2_cuda_new        (unsigned       n_layer,
                                unsigned       n_head,
                                unsigned       n_embd,
                                unsigned       n_ctx,
                                unsigned       max_batch,
                                Gpt2CudaDType  dtype,
                                char          *err,
                                size_t         err_len);
void      gpt2_cuda_free       (Gpt2Cuda      *m);

/* The number of tensors (GPT2_N_TENSORS (n_layer)) and tensor @index's
 * element count, in gpt2-model.h's order. */
unsigned  gpt2_cuda_get_n_tensors (Gpt2Cuda   *m);
size_t    gpt2_cuda_get_numel  (Gpt2Cuda      *m,
                                unsigned       index);

/* Tensor @index's working copy: numel values of @dtype at @device_ptr,
 * read (not copied) by each forward and backward until it is set again.
 * Any dtype is accepted for any tensor; one that differs from what the
 * kernels read (FP32 for LayerNorm tensors, the compute dtype for the
 * rest) is converted into a private copy at each forward. The model's
 * stream is a blocking one, so work queued on the legacy default stream
 * (the library's writes of the weights) finishes before a forward reads
 * them; a library writing on a non-blocking stream of its own must
 * synchronise it first. */
int       gpt2_cuda_set_weight (Gpt2Cuda      *m,
                                unsigned       index,
                                const void    *device_ptr,
                                Gpt2CudaDType  dtype,
                                char          *err,
                                size_t         err_len);

/* Forward over @batch sequences of @seq_len tokens (host bytes, batch *
 * seq_len each, row-major). Returns the mean cross-entropy in nats; 0
 * when @targets is NULL (logits only, no backward); NaN with @err set on
 * failure. */
double    gpt2_cuda_forward    (Gpt2Cuda            *m,
                                const unsigned char *tokens,
                                const unsigned char *targets,
                                unsigned             batch,
                                unsigned             seq_len,
                                char                *err,
                                size_t               err_len);

/* Backward of the last forward (with targets) for the loss times
 * @loss_scale, each tensor's gradient (overwritten, not accumulated)
 * handed to @ready as it is complete. Returns 1, or 0 with @err set on a
 * CUDA failure or when @ready returned 0. */
int       gpt2_cuda_backward   (Gpt2Cuda              *m,
                                double                 loss_scale,
                                Gpt2CudaGradReadyFunc  ready,
                                void                  *user,
                                char                  *err,
                                size_t                 err_len);

/* Copies the last forward's logits, [batch, seq_len, 256], to @host as
 * FP32. Returns 1, or 0 with @err set. */
int       gpt2_cuda_get_logits (Gpt2Cuda      *m,
                                float         *host,
                                char          *err,
                                size_t         err_len);

#ifdef __cplusplus
}
#endif
