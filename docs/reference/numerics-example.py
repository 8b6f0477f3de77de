#!/usr/bin/env python3
# numerics-example.py — writes the synthetic run that numerics.md draws:
# csv_monitor's folder for 1000 FP16 steps of a GPT-2-shaped model of 8
# blocks (51 parameters), in which the loss scaler skips three steps near
# step 600 and h.5.mlp.c_proj.weight's gradients start to underflow there.
# The values are made up (seeded, so the picture is reproducible); the
# files are laid out as csv_monitor lays them out.
#
#   python3 numerics-example.py DIR
#   mixprec-inspect --numerics DIR/gpt2-fp16 --stat grad_underflow \
#       --heatmap numerics-heatmap.png
import math
import os
import random
import sys

STEPS = 1000
BAD = "h.5.mlp.c_proj.weight"
BAD_FROM = 601
SKIPPED = (598, 601, 605)


def parameters():
    names = ["wte.weight", "wpe.weight"]
    for block in range(8):
        for p in ("ln_1.weight", "attn.c_attn.weight", "attn.c_proj.weight",
                  "ln_2.weight", "mlp.c_fc.weight", "mlp.c_proj.weight"):
            names.append("h.%d.%s" % (block, p))
    names.append("ln_f.weight")
    return names


def write(folder, tag, rows):
    name = tag.replace("/", "_").replace(" ", "_") + ".csv"
    with open(os.path.join(folder, name), "w") as f:
        f.write("step,%s\n" % tag.rsplit("/", 1)[-1])
        for step, value in rows:
            f.write("%d,%s\n" % (step, "inf" if math.isinf(value) else repr(value)))


def main():
    folder = os.path.join(sys.argv[1], "gpt2-fp16")
    os.makedirs(folder, exist_ok=True)
    rng = random.Random(28)
    names = parameters()

    scale, skipped, scales, skips = 65536.0, 0, [], []
    for step in range(1, STEPS + 1):
        if step in SKIPPED:
            scale /= 2
            skipped += 1
        scales.append((step, scale))
        skips.append((step, float(skipped)))
    write(folder, "Train/Steps/loss_scale", scales)
    write(folder, "Train/Steps/skipped_steps", skips)

    for i, name in enumerate(names):
        depth = i / len(names)
        norm_layer = "ln" in name
        base = 0.002 if norm_layer else 0.01 + 0.05 * depth
        underflow, amax = [], []
        for step in range(1, STEPS + 1):
            # Early steps have larger gradients; they shrink as loss falls.
            shrink = 1 + 2 * step / STEPS
            u = base * shrink * (1 + 0.25 * rng.gauss(0, 1))
            a = (0.5 if norm_layer else 4.0) / shrink * math.exp(0.2 * rng.gauss(0, 1))
            if name == BAD and step >= BAD_FROM:
                u = 0.45 + 0.2 * (step - BAD_FROM) / (STEPS - BAD_FROM) + 0.03 * rng.gauss(0, 1)
                a = a / 400
            if name == BAD and step in SKIPPED:
                a = math.inf
            underflow.append((step, min(max(u, 0.0), 1.0)))
            amax.append((step, a))
        write(folder, "Numerics/%s/grad_underflow" % name, underflow)
        write(folder, "Numerics/%s/grad_amax" % name, amax)


if __name__ == "__main__":
    main()
