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
 * one element at a time.
 *
 * Revision 3's other state and master formats go to the blocked kernel
 * (cuda-optim-quant.cuh), which decodes, updates and encodes a scale
 * block in one pass. */
#include "cuda-optim-quant.cuh"

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

/* The blocked kernel of cuda-optim-quant.cuh: one group of threads per
 * chunk (a scale block), Q_THREADS threads per CUDA block. */
template <class Op>
struct QLaunch {
  static cudaError_t
  run (const MixprecCudaOptimLaunch *L, cudaStream_t stream, const char **call)
  {
    QGeom q = q_geom (*L);
    size_t n_chunks = (L->n + q.chunk - 1) / q.chunk;
    size_t blocks = (n_chunks + q.groups - 1) / q.groups;
    size_t shared = q_stash_floats (q) * sizeof (float);

    if (blocks > 0x7FFFFFFF)
      {
        *call = "blocked optimizer kernel launch (too many blocks)";
        return cudaErrorInvalidConfiguration;
      }
    q_kernel<Op><<<(unsigned) blocks, Q_THREADS, shared, stream>>> (*L, q, n_chunks);
    return mixprec_cuda_launched ("blocked optimizer kernel launch", call);
  }
};

extern "C" cudaError_t
_mixprec_cuda_optim_step (const MixprecCudaOptimLaunch *L, cudaStream_t stream, const char **call)
{
  if (L->n == 0)
    return cudaSuccess;
  if (q_needed (*L))
    return q_dispatch<QLaunch> (L, stream, call);
  return optim_dispatch<Launch> (L, stream, call);
}
