#!/usr/bin/env python3
"""adamw-torch-cuda.py — PyTorch doing bench-adamw-cuda's job on the same GPU.

Per step, the way a bf16 mixed-precision loop with torch.amp.GradScaler
runs it on FP32 master parameters:

  1. the unscale pass (GradScaler.unscale_):
     torch._amp_foreach_non_finite_check_and_unscale_ over the FP32 grads,
     reading and writing them and setting found_inf;
  2. torch.optim.AdamW(fused=True).step() on the FP32 parameter
     (exp_avg and exp_avg_sq in FP32);
  3. the bf16 working copy: p_bf16.copy_(p).

The fused libmixprec step does the three in one pass. Traffic counted per
parameter: unscale 4 + 4, step 8 (param) + 4 (grad) + 8 + 8, copy 4 + 2:
42 bytes. The reference is a device-to-device copy (Tensor.copy_) of a
large buffer counting read + write, as in bench-adamw-cuda.

Timed with CUDA events around --steps steps after --warmup steps, the best
of --trials. A size whose tensors do not fit in the free memory is
reported as skipped. Without torch or without a CUDA device the script
says why and exits with 77 (skipped).

Prints a table, and JSON lines (one per size, one for the copy) to
--json FILE or after the table on standard output.
"""
import argparse
import json
import math
import sys

EXIT_SKIPPED = 77
BYTES_PER_PARAM = (4 + 4) + (8 + 4 + 8 + 8) + (4 + 2)
# param, grad, exp_avg, exp_avg_sq (fp32) and the bf16 working copy, plus
# the integer index tensor the values are made from (freed before the step).
BYTES_NEEDED_PER_PARAM = 4 * 4 + 2 + 8
HEADROOM_BYTES = 512 << 20


def skip(reason):
    print(f"adamw-torch-cuda: skipped: {reason}", flush=True)
    sys.exit(EXIT_SKIPPED)


def parse_size(text):
    units = {"": 1, "K": 10**3, "M": 10**6, "G": 10**9, "B": 10**9}
    text = text.strip()
    suffix = text[-1:].upper() if text[-1:].isalpha() else ""
    number = text[:-1] if suffix else text
    try:
        n = int(float(number) * units[suffix])
    except (KeyError, ValueError):
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(
            f"'{text}' is not a count of parameters like 100M or 1B")
    return n


def format_size(n):
    for unit, div in (("B", 10**9), ("M", 10**6), ("K", 10**3)):
        if n >= div and n % div == 0:
            return f"{n // div}{unit}"
    return str(n)


def time_ms(torch, fn, warmup, steps, trials):
    """Best milliseconds per call of fn over trials runs of steps calls."""
    start = torch.cuda.Event(enable_timing=True)
    stop = torch.cuda.Event(enable_timing=True)
    for _ in range(warmup):
        fn()
    best = math.inf
    for _ in range(trials):
        start.record()
        for _ in range(steps):
            fn()
        stop.record()
        stop.synchronize()
        best = min(best, start.elapsed_time(stop) / steps)
    return best


def measure_copy(torch, nbytes, args):
    """Best bytes per second (read + write) of a device-to-device copy."""
    while nbytes >= 1 << 20:
        try:
            src = torch.empty(nbytes, dtype=torch.uint8, device="cuda").fill_(0x3C)
            dst = torch.empty_like(src)
        except torch.cuda.OutOfMemoryError:
            nbytes //= 2
            continue
        ms = time_ms(torch, lambda: dst.copy_(src), args.warmup, args.steps, args.trials)
        del src, dst
        torch.cuda.empty_cache()
        return nbytes, 2 * nbytes / (ms * 1e-3)
    return 0, 0.0


def measure_step(torch, n, args):
    """Best milliseconds per step of unscale + fused AdamW + bf16 copy."""
    i = torch.arange(n, device="cuda", dtype=torch.int32 if n < 2**31 else torch.int64)
    # The same values as bench-adamw-cuda: masters in [-0.05, 0.05),
    # gradients of a loss scaled by 1024.
    master = torch.nn.Parameter((i % 1000).float() * 1e-4 - 0.05)
    master.grad = ((i % 2001) - 1000).float()
    del i
    working = torch.empty(n, dtype=torch.bfloat16, device="cuda")
    opt = torch.optim.AdamW([master], lr=1e-3, betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=0.01, fused=True)
    found_inf = torch.zeros(1, dtype=torch.float32, device="cuda")
    # Unscaling works in place, so the factor alternates between 1/1024 and
    # 1024 (both exact): the gradients come back to the same values every
    # other step without a refresh pass that is no part of the job.
    inv_scales = [torch.full((1,), s, dtype=torch.float32, device="cuda")
                  for s in (1.0 / 1024, 1024.0)]
    count = [0]

    def step():
        with torch.no_grad():
            torch._amp_foreach_non_finite_check_and_unscale_(
                [master.grad], found_inf, inv_scales[count[0] & 1])
            count[0] += 1
            opt.step()
            working.copy_(master)

    ms = time_ms(torch, step, args.warmup, args.steps, args.trials)
    if found_inf.item() != 0:
        raise RuntimeError("the unscale pass found a non-finite gradient")
    del opt, master, working
    torch.cuda.empty_cache()
    return ms


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10M,100M,1B",
                        help="parameters, suffix K, M, G or B (default 10M,100M,1B)")
    parser.add_argument("--device", type=int, default=0)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--copy-mib", type=int, default=1024)
    parser.add_argument("--json", metavar="FILE", help="write the JSON lines to FILE")
    args = parser.parse_args()
    try:
        sizes = [parse_size(s) for s in args.sizes.split(",")]
    except argparse.ArgumentTypeError as e:
        parser.error(f"--sizes: {e}")
    if args.steps < 1 or args.trials < 1 or args.warmup < 0 or args.copy_mib < 1:
        parser.error("--steps, --trials and --copy-mib must be positive, --warmup not negative")

    try:
        import torch
    except ImportError as e:
        skip(f"no PyTorch in {sys.executable}: {e}")
    if not torch.cuda.is_available():
        skip(f"PyTorch {torch.__version__} sees no CUDA device "
             f"(built for CUDA {torch.version.cuda})")
    if args.device >= torch.cuda.device_count():
        parser.error(f"--device {args.device}: this machine has "
                     f"{torch.cuda.device_count()} CUDA devices")
    torch.cuda.set_device(args.device)
    name = torch.cuda.get_device_name(args.device)
    free, total = torch.cuda.mem_get_info()

    copy_bytes, copy_bps = measure_copy(torch, args.copy_mib << 20, args)
    rows = []
    for n in sizes:
        row = {"bench": "adamw-cuda", "impl": "torch", "torch": torch.__version__,
               "device": name, "params": n, "grad_dtype": "fp32", "working_dtype": "bf16",
               "rounding": "nearest-even", "bytes_per_param": BYTES_PER_PARAM}
        free_now, _ = torch.cuda.mem_get_info()
        need = n * BYTES_NEEDED_PER_PARAM + HEADROOM_BYTES
        if need > free_now:
            row["skipped"] = (f"needs {need / 2**30:.1f} GiB, {free_now / 2**30:.1f} GiB "
                              f"of {total / 2**30:.1f} GiB free")
        else:
            try:
                ms = measure_step(torch, n, args)
            except torch.cuda.OutOfMemoryError as e:
                row["skipped"] = f"out of memory: {str(e).splitlines()[0]}"
                torch.cuda.empty_cache()
            else:
                bps = BYTES_PER_PARAM * n / (ms * 1e-3)
                row.update(ms_per_step=ms, gb_per_s=bps / 1e9, copy_gb_per_s=copy_bps / 1e9,
                           fraction_of_copy=bps / copy_bps if copy_bps > 0 else 0.0,
                           steps=args.steps, trials=args.trials)
        rows.append(row)
    bytes2, bps2 = measure_copy(torch, copy_bytes or (args.copy_mib << 20), args)
    if bps2 > copy_bps:
        copy_bytes, copy_bps = bytes2, bps2
        for row in rows:
            if "ms_per_step" in row:
                row["copy_gb_per_s"] = copy_bps / 1e9
                row["fraction_of_copy"] = row["gb_per_s"] * 1e9 / copy_bps

    print(f"device {args.device}: {name}, {total / 2**30:.1f} GiB, "
          f"{free / 2**30:.1f} GiB free at start; PyTorch {torch.__version__}")
    print(f"copy bandwidth: {copy_bps / 1e9:.1f} GB/s (Tensor.copy_ device to device, "
          f"{copy_bytes >> 20} MiB, read + write counted)")
    print(f"unscale + AdamW(fused=True) + bf16 copy_, fp32 grads; "
          f"best of {args.trials} x {args.steps} steps")
    print(f"{'params':>10} {'grad':>5} {'B/param':>8} {'ms/step':>10} {'GB/s':>10} {'% of copy':>10}")
    for row in rows:
        size = format_size(row["params"])
        if "skipped" in row:
            print(f"{size:>10} {'fp32':>5} {BYTES_PER_PARAM:>8} skipped: {row['skipped']}")
        else:
            print(f"{size:>10} {'fp32':>5} {BYTES_PER_PARAM:>8} {row['ms_per_step']:>10.4f} "
                  f"{row['gb_per_s']:>10.1f} {100 * row['fraction_of_copy']:>9.1f}%")

    lines = [json.dumps({"bench": "copy-cuda", "impl": "Tensor.copy_", "device": name,
                         "bytes": copy_bytes, "copy_gb_per_s": copy_bps / 1e9})]
    lines += [json.dumps(row) for row in rows]
    if args.json:
        with open(args.json, "w") as f:
            f.write("\n".join(lines) + "\n")
    else:
        print("\n".join(lines))


if __name__ == "__main__":
    main()
