#!/usr/bin/env python3
# bench-optim-states-torchao.py — torchao's low-bit AdamW on the CPU, the
# peer of bench/bench-optim-states: params/s of optimizer.step() over one
# flat parameter of --size Mi elements, for AdamW8bit (blocks of 256),
# AdamW4bit (blocks of 128) and AdamWFp8, with torch's own
# AdamW(fused=True) on FP32 state beside them. torchao's job is its own:
# an FP32 parameter and gradient, no separate master or working copy. The
# first step compiles (tens of seconds) and is not timed. Prints
# tab-separated lines: NAME, n, params/s (or "skipped: why"), state B/param.
import argparse
import sys
import time

import torch

ap = argparse.ArgumentParser()
ap.add_argument("--size", type=float, default=16)
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--min-seconds", type=float, default=1.0)
ap.add_argument("--peers", default="adamw8bit,adamw4bit,adamwfp8,torch-fused")
args = ap.parse_args()
torch.set_num_threads(args.threads)
n = int(args.size * (1 << 20))


def make(peer, params):
    hp = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
    if peer == "torch-fused":
        return torch.optim.AdamW(params, fused=True, **hp), 8.0
    import torchao.optim as ao
    if peer == "adamw8bit":
        return ao.AdamW8bit(params, block_size=256, **hp), 2 + 8 / 256
    if peer == "adamw4bit":
        return ao.AdamW4bit(params, block_size=128, **hp), 1 + 8 / 128
    if peer == "adamwfp8":
        return ao.AdamWFp8(params, block_size=256, **hp), 2 + 8 / 256
    raise ValueError(peer)


print(f"version\ttorch\t{torch.__version__}\t{args.threads}")
try:
    import torchao
    print(f"version\ttorchao\t{torchao.__version__}")
except ImportError:
    pass
for peer in args.peers.split(","):
    try:
        g = torch.Generator().manual_seed(1)
        p = torch.nn.Parameter((torch.rand(n, generator=g) - 0.5) * 0.1)
        p.grad = (torch.rand(n, generator=g) - 0.5) * 1e-2
        opt, state_bytes = make(peer, [p])
        opt.step()                      # compiles, allocates the state
        best, total, runs = float("inf"), 0.0, 0
        while runs < 3 or (total < args.min_seconds and runs < 1000):
            t0 = time.perf_counter()
            opt.step()
            dt = time.perf_counter() - t0
            best, total, runs = min(best, dt), total + dt, runs + 1
        print(f"{peer}\t{n}\t{n / best:.6g}\t{state_bytes:.3f}")
    except Exception as e:  # noqa: BLE001 — an unavailable peer is reported, not fatal
        msg = repr(e).replace("\t", " ").replace("\n", " ")[:200]
        print(f"{peer}\t{n}\tskipped: {msg}\t0")
    sys.stdout.flush()
