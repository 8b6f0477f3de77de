/* cuda-optim.cu — the fused optimizer step of the cuda "adamw", "sgd" and
 * "lion" features: one kernel reads the parameter and the gradient,
 * updates the states and writes the master and the working copy, one pass
 * over memory.
 *
 * Bit-identical to the cpu plugins: the same per-call constants (the
 * shared prepare() computes them on the host), the same update functions
 * (libmixprec/numeric/numeric-optim.h, compiled here by nvcc and there by
 * the C compiler; a multiply-add fuses only where they say so:
 * --fmad=false), and optim-common.h's per-element plumbing:
 *
 *   p = master ? master[i] : decode (working[i])
 *   g = decode (grad[i]) * grad_factor
 *   p = update (p, g, states)
 *   master[i] = p; working[i] = round (p)    (RNE, or stochastic with the
 *                                             bits of first_index + i)
 *
 * The step is memory-bound (adamw moves 16 bytes of fp32 state and master
 * plus the gradient and the working copy per element), so each thread
 * handles four consecutive elements with 128-bit loads and stores of the
 * fp32 arrays (64-bit for 16-bit ones) in a grid-stride loop, from the
 * first element where every array is so aligned (vector_head()); the few
 * elements around them, and ranges whose arrays disagree on alignment, go
 * one element at a time. */
#include "cuda-optim-kernel.cuh"

/* ------------------------------------------------------------ launch */

template <class Op, int G, int W>
struct Launch {
  static cudaError_t
  run (const MixprecCudaOptimLaunch *L, cudaStream_t stream, const char **call)
  {
    int head = optim_head<Op, G, W> (L);
    unsigned blocks;
    cudaError_t e;

    if ((e = mixprec_cuda_grid (head >= 0 ? L->n / VEC + VEC : L->n, &blocks, call)) != cudaSuccess)
      return e;
    optim_kernel<Op, G, W><<<blocks, MIXPREC_CUDA_THREADS, 0, stream>>> (*L, head);
    return mixprec_cuda_launched ("optimizer kernel launch", call);
  }
};

extern "C" cudaError_t
_mixprec_cuda_optim_step (const MixprecCudaOptimLaunch *L, cudaStream_t stream, const char **call)
{
  if (L->n == 0)
    return cudaSuccess;
  return optim_dispatch<Launch> (L, stream, call);
}
