#!/usr/bin/env python3
"""adamw-cuda-compare.py — the markdown table of bench-adamw-cuda's JSON
lines beside adamw-torch-cuda.py's: per size and gradient dtype, our GB/s
and share of the device-to-device copy, our ms per step, torch's, and
torch's time over ours. Plain Python (no torch, no GObject), so both
build-aux/run-gpu-checks.sh and the GPU bundle's run.sh use it.

  adamw-cuda-compare.py OURS.jsonl [TORCH.jsonl]
"""
import json
import os
import sys


def load(path):
    if not path or not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def size(n):
    for unit, div in (("B", 10**9), ("M", 10**6), ("K", 10**3)):
        if n >= div and n % div == 0:
            return f"{n // div}{unit}"
    return str(n)


def main(argv):
    if len(argv) not in (2, 3):
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    ours = load(argv[1])
    theirs = {r["params"]: r for r in load(argv[2] if len(argv) > 2 else None)
              if r.get("bench") == "adamw-cuda"}
    copy = next((r for r in ours if r.get("bench") == "copy-cuda"), None)
    steps = [r for r in ours if r.get("bench") == "adamw-cuda"]
    device = steps[0].get("device", "?") if steps else "?"
    torch_version = next(iter(theirs.values())).get("torch") if theirs else None
    print(f"## Fused AdamW step on {device}")
    print()
    if copy:
        print(f"Copy bandwidth (device to device, read + write): {copy['copy_gb_per_s']:.0f} GB/s. "
              "Ours: one pass, fp32 master/m/v, bf16 working out (RNE), 28 B/param with bf16 "
              "gradients, 30 with fp32. ", end="")
    if torch_version:
        print(f"PyTorch {torch_version}: GradScaler-style unscale pass + AdamW(fused=True) + "
              "bf16 copy_, fp32 gradients, 42 B/param.")
    else:
        print("PyTorch: not run.")
    print()
    print("| params | grad | ours GB/s | ours % of copy | ours ms | torch ms | torch / ours |")
    print("|---:|:---:|---:|---:|---:|---:|---:|")
    for r in steps:
        if "skipped" in r:
            print(f"| {size(r['params'])} | {r['grad_dtype']} | skipped: {r['skipped']} | | | | |")
            continue
        t = theirs.get(r["params"])
        if t is None:
            torch_ms, ratio = "not run", "-"
        elif "skipped" in t:
            torch_ms, ratio = "skipped", "-"
        else:
            torch_ms = f"{t['ms_per_step']:.3f}"
            ratio = f"{t['ms_per_step'] / r['ms_per_step']:.2f}x"
        print(f"| {size(r['params'])} | {r['grad_dtype']} | {r['gb_per_s']:.0f} | "
              f"{100 * r['fraction_of_copy']:.1f}% | {r['ms_per_step']:.3f} | {torch_ms} | {ratio} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
