/* cuda-optim.cu — the fused optimizer step of the cuda "adamw", "sgd" and
 * "lion" features: one kernel reads the parameter and the gradient,
 * updates the states and writes the master and the working copy, one pass
 * over memory.
 *
 * Bit-identical to the cpu plugins: the same per-call constants (the
 * shared prepare() computes them on the host), the update formulas of
 * adamw-scalar.c, sgd-scalar.c and lion-scalar.c operation for operation
 * (fmaf() where they call fmaf(), nothing else fused: --fmad=false), IEEE
 * division and square root, and optim-common.h's per-element plumbing:
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

/* ------------------------------------------------------------ dispatch */

template <class Op, int G, int W>
static cudaError_t
launch (const MixprecCudaOptimLaunch *L, cudaStream_t stream, const char **call)
{
  const void *arrays[3 + MIXPREC_CUDA_OPTIM_MAX_STATES] = { L->master, L->grad, W >= 0 ? L->working : NULL };
  size_t sizes[3 + MIXPREC_CUDA_OPTIM_MAX_STATES] = { 4, G == 0 ? 4u : 2u, W == 0 ? 4u : 2u };
  int head;
  unsigned blocks;
  cudaError_t e;

  for (int k = 0; k < Op::n_states; k++)
    {
      arrays[3 + k] = L->states[k];
      sizes[3 + k] = 4;
    }
  head = vector_head (arrays, sizes, 3 + Op::n_states, L->n);
  if ((e = mixprec_cuda_grid (head >= 0 ? L->n / VEC + VEC : L->n, &blocks, call)) != cudaSuccess)
    return e;
  optim_kernel<Op, G, W><<<blocks, MIXPREC_CUDA_THREADS, 0, stream>>> (*L, head);
  return mixprec_cuda_launched ("optimizer kernel launch", call);
}

template <class Op, int G>
static cudaError_t
launch_w (const MixprecCudaOptimLaunch *L, cudaStream_t stream, const char **call)
{
  switch (L->working_dtype)
    {
    case 0: return launch<Op, G, 0> (L, stream, call);
    case 1: return launch<Op, G, 1> (L, stream, call);
    case 2: return launch<Op, G, 2> (L, stream, call);
    default: return launch<Op, G, -1> (L, stream, call);
    }
}

template <class Op>
static cudaError_t
launch_g (const MixprecCudaOptimLaunch *L, cudaStream_t stream, const char **call)
{
  switch (L->grad_dtype)
    {
    case 1: return launch_w<Op, 1> (L, stream, call);
    case 2: return launch_w<Op, 2> (L, stream, call);
    default: return launch_w<Op, 0> (L, stream, call);
    }
}

extern "C" cudaError_t
_mixprec_cuda_optim_step (const MixprecCudaOptimLaunch *L, cudaStream_t stream, const char **call)
{
  if (L->n == 0)
    return cudaSuccess;
  switch (L->kind)
    {
    case MIXPREC_CUDA_OPTIM_ADAMW: return launch_g<AdamW> (L, stream, call);
    case MIXPREC_CUDA_OPTIM_SGD_PLAIN: return launch_g<Sgd<SGD_PLAIN>> (L, stream, call);
    case MIXPREC_CUDA_OPTIM_SGD_FIRST: return launch_g<Sgd<SGD_FIRST>> (L, stream, call);
    case MIXPREC_CUDA_OPTIM_SGD_MOMENTUM: return launch_g<Sgd<SGD_MOMENTUM>> (L, stream, call);
    default: return launch_g<Lion> (L, stream, call);
    }
}
