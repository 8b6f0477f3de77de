#!/usr/bin/env python3
"""bench-adamw-torch.py — CPU AdamW peers doing bench-adamw's job.

The job: fp32 master, exp_avg and exp_avg_sq; a bf16 gradient in, times an
unscale factor (1/1024, of a loss scaled by 1024); a bf16 working copy out.
A peer steps fp32 tensors only, so each figure includes the casts a user
needs around it: bf16 gradient -> fp32 .grad, unscaled; the step; fp32
master -> bf16 working copy. The peers (--peers, default all three):

  fused      torch.optim.AdamW(fused=True): the unscale rides in the step
             as its grad_scale, as with torch.amp.GradScaler
  foreach    torch.optim.AdamW(foreach=True), the .grad unscaled by mul_
  deepspeed  deepspeed.ops.adam.DeepSpeedCPUAdam (adamw_mode=True,
             bias_correction=True), the .grad unscaled by mul_; its cpu_adam
             op is built with ninja on first use (DS_ACCELERATOR=cpu)

All use lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight decay 0.01. Before
timing, each peer runs three steps of the job on 64Ki parameters: the
change of its master, its exp_avg and exp_avg_sq must be close to those of
torch's AdamW computed in float64 on the same inputs; a peer that is not
is skipped and says by how much. So is one that cannot be imported or
built, and a size whose working set does not fit in the memory available
now. Run one peer per process (run-bench-adamw.sh does): each leaves its
threads and memory behind for the next.

Prints tab-separated lines for run-bench-adamw.sh:
    version  torch|deepspeed  VERSION  [THREADS]
    check    PEER  ok|FAIL  MAX_RELATIVE_ERROR
    PEER     N     PARAMS_PER_S          (or "skipped: REASON")
"""
import argparse
import contextlib
import math
import os
import sys
import time

LR, BETAS, EPS, WEIGHT_DECAY = 1e-3, (0.9, 0.999), 1e-8, 0.01
UNSCALE = 1.0 / 1024
CHECK_N, CHECK_STEPS, CHECK_RTOL = 1 << 16, 3, 1e-4

# fp32 master + grad + exp_avg + exp_avg_sq, bf16 gradient and working copy,
# and the foreach path's temporaries (one or two fp32 tensors of size n).
BYTES_PER_PARAM_NEEDED = 4 * 4 + 2 * 2 + 2 * 4

PEERS = ("fused", "foreach", "deepspeed")


def available_bytes():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return math.inf


@contextlib.contextmanager
def stdout_to_stderr():
    """Keeps builders' and loggers' chatter, Python's and child processes'
    alike, off the tab-separated output."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def job(n):
    """bench-adamw's inputs: master, the bf16 gradient of a loss scaled by
    1024 and the bf16 working copy."""
    master = torch.nn.Parameter((torch.arange(n, dtype=torch.int32) % 1000) * 1e-4 - 0.05)
    master.grad = torch.empty(n)
    grad_bf16 = ((torch.arange(n, dtype=torch.int32) % 2001) - 1000).to(torch.bfloat16)
    working = torch.empty(n, dtype=torch.bfloat16)
    return master, grad_bf16, working


def deepspeed_adam():
    """DeepSpeedCPUAdam's class, its cpu_adam op built and loaded."""
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    with stdout_to_stderr():
        from deepspeed.ops.adam import DeepSpeedCPUAdam
        from deepspeed.ops.op_builder import CPUAdamBuilder
        CPUAdamBuilder().load()
    return DeepSpeedCPUAdam


def make_step(peer, master, grad_bf16, working):
    """One step of the job with @peer: a function of no arguments."""
    params = dict(lr=LR, betas=BETAS, eps=EPS, weight_decay=WEIGHT_DECAY)
    if peer == "deepspeed":
        with stdout_to_stderr():
            opt = deepspeed_adam()([master], bias_correction=True, adamw_mode=True, **params)
    else:
        opt = torch.optim.AdamW([master], **params, **{peer: True})
    if peer == "fused":
        # What torch.amp.GradScaler hands a fused optimizer: the step divides
        # the gradient by grad_scale (a power of two: exact) unless found_inf.
        opt.grad_scale = torch.tensor(1 / UNSCALE)
        opt.found_inf = torch.tensor(0.0)

    def step():
        with torch.no_grad():
            master.grad.copy_(grad_bf16)
            if peer != "fused":
                master.grad.mul_(UNSCALE)
            opt.step()
            working.copy_(master)

    return step, opt


def check(peer):
    """Largest error of @peer's master update and state after CHECK_STEPS
    steps, relative to the largest value of each, against torch's AdamW in
    float64. The update rather than the master, whose weight decay is a
    thousandth of it: a missing decay then shows."""
    master, grad_bf16, working = job(CHECK_N)
    start = master.detach().double()
    ref = torch.nn.Parameter(start.clone())
    ref_opt = torch.optim.AdamW([ref], lr=LR, betas=BETAS, eps=EPS,
                                weight_decay=WEIGHT_DECAY, foreach=False)
    step, opt = make_step(peer, master, grad_bf16, working)
    for k in range(CHECK_STEPS):
        # A different gradient each step, exp_avg_sq then differs from exp_avg^2.
        grad_bf16.copy_(((torch.arange(CHECK_N) * (k + 1)) % 2001 - 1000).to(torch.bfloat16))
        step()
        ref.grad = grad_bf16.double() * UNSCALE
        ref_opt.step()
    state, ref_state = opt.state[master], ref_opt.state[ref]
    err = 0.0
    for mine, theirs in ((master.detach().double() - start, ref.detach() - start),
                         (state["exp_avg"], ref_state["exp_avg"]),
                         (state["exp_avg_sq"], ref_state["exp_avg_sq"])):
        scale = theirs.abs().max().item()
        err = max(err, (mine.double() - theirs).abs().max().item() / scale)
    if not torch.equal(working, master.detach().to(torch.bfloat16)):
        err = math.inf
    return err


def measure(peer, n, min_seconds):
    master, grad_bf16, working = job(n)
    step, _ = make_step(peer, master, grad_bf16, working)
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


def unavailable(peer):
    """Why @peer cannot run here, or None."""
    if peer == "fused":
        p = torch.nn.Parameter(torch.zeros(16))
        p.grad = torch.ones(16)
        try:
            torch.optim.AdamW([p], fused=True).step()
        except (RuntimeError, TypeError):
            return "this PyTorch has no fused CPU AdamW"
    elif peer == "deepspeed":
        try:
            with stdout_to_stderr():
                import deepspeed
            print(f"version\tdeepspeed\t{deepspeed.__version__}", flush=True)
            deepspeed_adam()
        except Exception as e:  # ImportError, or the op's build failing
            cause = e
            while cause.__cause__ is not None:
                cause = cause.__cause__
            reason = f"{e}" if cause is e else f"{e} ({cause})"
            return ("DeepSpeedCPUAdam unavailable (its stderr says more): "
                    + " ".join(reason.split())[:300])
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1,4,16,64,256", help="Mi parameters")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--min-seconds", type=float, default=1.0)
    parser.add_argument("--peers", default=",".join(PEERS),
                        help="comma-separated, of " + ", ".join(PEERS))
    args = parser.parse_args()
    peers = args.peers.split(",")
    if not set(peers) <= set(PEERS):
        parser.error("--peers: each must be one of " + ", ".join(PEERS))

    # Torch's intra-op threads and DeepSpeed's op share one OpenMP runtime.
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    global torch
    import torch

    torch.set_num_threads(args.threads)
    print(f"version\ttorch\t{torch.__version__}\t{torch.get_num_threads()}", flush=True)
    ready = []
    for peer in peers:
        reason = unavailable(peer)
        if reason is None:
            err = check(peer)
            ok = err <= CHECK_RTOL
            print(f"check\t{peer}\t{'ok' if ok else 'FAIL'}\t{err:.3g}", flush=True)
            if not ok:
                reason = (f"after {CHECK_STEPS} steps differs from torch's float64 AdamW "
                          f"by {err:.3g} of the largest value (at most {CHECK_RTOL:g} allowed)")
        if reason is None:
            ready.append(peer)
        else:
            print(f"{peer}\t0\tskipped: {reason}", flush=True)
    for size in args.sizes.split(","):
        n = int(float(size) * (1 << 20))
        for peer in ready:
            need = n * BYTES_PER_PARAM_NEEDED
            if need > 0.9 * available_bytes():
                print(f"{peer}\t{n}\tskipped: needs {need / 2**30:.1f} GiB, "
                      f"{available_bytes() / 2**30:.1f} GiB available", flush=True)
                continue
            print(f"{peer}\t{n}\t{measure(peer, n, args.min_seconds):.6g}", flush=True)


if __name__ == "__main__":
    main()
