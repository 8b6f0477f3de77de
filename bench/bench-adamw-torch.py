#!/usr/bin/env python3
"""bench-adamw-torch.py — PyTorch's CPU AdamW doing bench-adamw's job.

Per step: the bf16 gradient is cast into the fp32 parameter's .grad, the
optimizer steps the fp32 parameter (exp_avg and exp_avg_sq in fp32), and
the result is cast to the bf16 working copy. With its separate casts that
moves about 40 bytes per parameter (6 + 28 + 6), against the fused step's
28. Two implementations: fused=True (PyTorch >= 2.4 has a fused CPU AdamW)
and foreach=True. A size whose working set does not fit in the memory
available now is skipped and reported as such.

Prints tab-separated lines for run-bench-adamw.sh:
    torch   VERSION  THREADS
    fused|foreach   N   PARAMS_PER_S       (or "skipped: REASON")
"""
import argparse
import math
import time

import torch

# fp32 param + grad + exp_avg + exp_avg_sq, bf16 gradient and working copy,
# and the foreach path's temporaries (one or two fp32 tensors of size n).
BYTES_PER_PARAM_NEEDED = 4 * 4 + 2 * 2 + 2 * 4


def available_bytes():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return math.inf


def measure(n, impl, min_seconds):
    master = torch.nn.Parameter(torch.linspace(-0.05, 0.05, n))
    master.grad = torch.empty(n)
    grad_bf16 = ((torch.arange(n, dtype=torch.int32) % 2001) - 1000).to(torch.bfloat16)
    working = torch.empty(n, dtype=torch.bfloat16)
    opt = torch.optim.AdamW([master], lr=1e-3, betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=0.01, **{impl: True})

    def step():
        with torch.no_grad():
            master.grad.copy_(grad_bf16)
            opt.step()
            working.copy_(master)

    step()  # allocates the optimizer state
    best, total, runs = math.inf, 0.0, 0
    while runs < 3 or (total < min_seconds and runs < 1000):
        t0 = time.perf_counter()
        step()
        dt = time.perf_counter() - t0
        best = min(best, dt)
        total += dt
        runs += 1
    return n / best


def fused_supported():
    p = torch.nn.Parameter(torch.zeros(16))
    p.grad = torch.ones(16)
    try:
        torch.optim.AdamW([p], fused=True).step()
    except (RuntimeError, TypeError):
        return False
    return True


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1,4,16,64,256", help="Mi parameters")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--min-seconds", type=float, default=1.0)
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    print(f"torch\t{torch.__version__}\t{torch.get_num_threads()}", flush=True)
    impls = ["fused", "foreach"] if fused_supported() else ["foreach"]
    if impls == ["foreach"]:
        print("fused\t0\tskipped: this PyTorch has no fused CPU AdamW", flush=True)
    for size in args.sizes.split(","):
        n = int(float(size) * (1 << 20))
        for impl in impls:
            need = n * BYTES_PER_PARAM_NEEDED
            if need > 0.9 * available_bytes():
                print(f"{impl}\t{n}\tskipped: needs {need / 2**30:.1f} GiB, "
                      f"{available_bytes() / 2**30:.1f} GiB available", flush=True)
                continue
            print(f"{impl}\t{n}\t{measure(n, impl, args.min_seconds):.6g}", flush=True)


if __name__ == "__main__":
    main()
