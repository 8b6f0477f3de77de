#!/usr/bin/env python3
"""plot-gpt2.py OURS.csv TORCH_FP32.csv TORCH_AUTOCAST.csv OUT.png — the
table and the picture of bench/run-bench-gpt2.sh: per evaluation, the C
trainer's and torch's (fp32) training and validation losses and tokens/s;
torch autocast bf16's over the steps it ran; the throughput ratios (the
first interval of a run, which holds its warm-up, left out where the run
has more than one); and the loss curves in one PNG."""
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def rows(path):
    with open(path) as f:
        return [{k: float(v) for k, v in r.items()} for r in csv.DictReader(f)]


def speed(r):
    v = [x["tokens_per_s"] for x in r[1:]] or [r[0]["tokens_per_s"]]
    return sum(v) / len(v)


def main():
    ours, fp32, autocast, png = rows(sys.argv[1]), rows(sys.argv[2]), rows(sys.argv[3]), sys.argv[4]
    print("| step | libmixprec bf16 train | torch fp32 train | libmixprec bf16 val | torch fp32 val "
          "| libmixprec tok/s | torch fp32 tok/s |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for a, b in zip(ours, fp32):
        print("| %d | %.4f | %.4f | %.4f | %.4f | %.0f | %.0f |"
              % (a["step"], a["train_loss"], b["train_loss"], a["val_loss"], b["val_loss"],
                 a["tokens_per_s"], b["tokens_per_s"]))
    print("\ntorch autocast bf16, first %d steps:" % int(autocast[-1]["step"]))
    print("\n| step | train | val | tok/s |\n|---:|---:|---:|---:|")
    for r in autocast:
        print("| %d | %.4f | %.4f | %.0f |" % (r["step"], r["train_loss"], r["val_loss"], r["tokens_per_s"]))
    print("\ntokens/s: libmixprec (C, bf16) %.0f, torch autocast bf16 %.0f, torch fp32 %.0f"
          % (speed(ours), speed(autocast), speed(fp32)))
    print("libmixprec / torch autocast bf16 = %.2fx; libmixprec / torch fp32 = %.2fx"
          % (speed(ours) / speed(autocast), speed(ours) / speed(fp32)))
    print("final val_loss: libmixprec %.4f, torch fp32 %.4f" % (ours[-1]["val_loss"], fp32[-1]["val_loss"]))

    fig, ax = plt.subplots(figsize=(7, 4))
    for r, label, style in ((ours, "libmixprec (C, bf16)", "-"), (fp32, "torch fp32", "--"),
                            (autocast, "torch autocast bf16", ":")):
        steps = [x["step"] for x in r]
        ax.plot(steps, [x["train_loss"] for x in r], style, label=label + " train")
        ax.plot(steps, [x["val_loss"] for x in r], style, marker="o", markersize=3, label=label + " val")
    ax.set_xlabel("step")
    ax.set_ylabel("loss (nats per byte)")
    ax.set_title("GPT-2 over bytes: the same weights and batches")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=100)


main()
