#!/usr/bin/env python3
"""torch-charlm.py: a character-level transformer in PyTorch, trained by libmixprec and by torch.

The model reads a word of the word list charlm trains on (Debian's
wamerican, the same one-in-ten validation split) one character at a time
and predicts the next. It is trained twice from the same initial weights
on the same batches:

* "mixprec": libmixprec does the precision side through mixprec.torch
  (engine = mixprec.torch.initialize(model, config); engine.backward(loss);
  engine.step()): the model's bf16/fp16 weights are views of the engine's
  working copies, gradients go to the engine from autograd's hooks;
* "torch": torch alone, the way DeepSpeed does mixed precision: FP32
  master weights updated by torch.optim.AdamW (fused where torch has it),
  copied into the bf16/fp16 model after each step, gradients accumulated
  in FP32, clipped by their global norm and, for fp16, DeepSpeed's dynamic
  loss scaling (transcribed below from deepspeed/runtime/fp16/loss_scaler.py).

With --fp8 RECIPE (delayed, current or mx) the engine also keeps FP8
working copies of the nn.Linear weights (the config's fp8 section) and the
mixprec run's Linear layers multiply with them: each step's FP8 copy is
decoded by torch (float8_e4m3fn) and scaled in FP32, the way an FP8 GEMM
reads it; the torch run stays in bf16, the reference.

Both use AdamW with the same hyper-parameters and DeepSpeed's
WarmupCosineLR schedule. It prints both loss curves, the validation losses
and their ratio, the time per step spent outside forward and backward
(libmixprec: handing gradients over, backward_done and step; torch: the
FP32 accumulation, unscaling, overflow check, clipping, AdamW and the
copy into the model) and saves a PNG of the curves.

    python3 examples/torch-charlm.py --steps 2000 --dtype bf16 --plot torch-charlm.png
    mixprec-run -n 2 python3 examples/torch-charlm.py --zero-stage 2

Against an uninstalled build: GI_TYPELIB_PATH=<build>/bindings,
LD_LIBRARY_PATH=<build>/libmixprec/.libs, MIXPREC_PLUGIN_PATH=<build>/plugins
and PYTHONPATH=<src>/bindings:<src>/bindings/python.
"""

import argparse
import math
import os
import re
import sys
import time

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError as e:
    sys.exit(f"torch-charlm.py: needs PyTorch ({e})")

try:
    import mixprec.torch
except ImportError as e:
    sys.exit(f"torch-charlm.py: cannot import mixprec.torch ({e}); for a build tree set "
             "PYTHONPATH=<src>/bindings:<src>/bindings/python, GI_TYPELIB_PATH=<build>/bindings "
             "and LD_LIBRARY_PATH=<build>/libmixprec/.libs")
from gi.repository import GLib, Mixprec  # noqa: E402

VOCAB = 27  # '.' then a..z
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


# ------------------------------------------------------------------- data

def is_val(word):
    """One word in ten, by the 32-bit FNV-1a hash of the word (charlm's split)."""
    h = 2166136261
    for byte in word:
        h = ((h ^ byte) * 16777619) & 0xFFFFFFFF
    return h % 10 == 0


def encode(words, length):
    """'.' + word + '.' as token ids: inputs and targets of length
    `length`, targets past the end of the word -1 (ignored)."""
    x = torch.zeros(len(words), length, dtype=torch.long)
    y = torch.full((len(words), length), -1, dtype=torch.long)
    for i, w in enumerate(words):
        ids = [c - 96 for c in w]
        x[i, 1:len(ids) + 1] = torch.tensor(ids)
        y[i, :len(ids) + 1] = torch.tensor(ids + [0])
    return x, y


def load_data(path):
    with open(path, "rb") as f:
        lines = f.read().split(b"\n")
    plain = re.compile(rb"^[a-z]+$")
    words = [w for w in (line.rstrip(b"\r") for line in lines) if plain.match(w)]
    if not words:
        sys.exit(f"torch-charlm.py: {path}: needs lines of lowercase a-z letters")
    length = max(len(w) for w in words) + 1
    train = encode([w for w in words if not is_val(w)], length)
    val = encode([w for w in words if is_val(w)], length)
    return train, val, length


# ------------------------------------------------------------------ model

class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.out = nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class CharTransformer(nn.Module):
    def __init__(self, length, d, heads, layers):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, d)
        self.pos = nn.Embedding(length, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, VOCAB)

    def forward(self, x):
        h = self.tok(x) + self.pos(torch.arange(x.shape[1]))
        for block in self.blocks:
            h = block(h)
        return self.head(self.ln(h))


def make_model(args, length):
    torch.manual_seed(args.seed)
    model = CharTransformer(length, args.d_model, args.heads, args.layers)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".weight") and p.dim() == 2:
                p.normal_(0.0, 0.02)
    return model


def loss_of(model, x, y):
    logits = model(x)
    return F.cross_entropy(logits.float().reshape(-1, VOCAB), y.reshape(-1), ignore_index=-1)


@torch.no_grad()
def evaluate(model, data, limit=None, chunk=1024):
    x, y = data
    if limit:
        x, y = x[:limit], y[:limit]
    total, count = 0.0, 0
    for i in range(0, len(x), chunk):
        logits = model(x[i:i + chunk]).float()
        t = y[i:i + chunk]
        total += F.cross_entropy(logits.reshape(-1, VOCAB), t.reshape(-1), ignore_index=-1,
                                 reduction="sum").item()
        count += int((t >= 0).sum())
    return total / count


def batches(args, n_train, world):
    """Every rank draws the whole global batch of each step (world x
    accumulation micro-batches) and takes every world-th: one process
    with world times the accumulation sees the same micro-batches."""
    g = torch.Generator().manual_seed(args.seed + 1)
    for _ in range(args.steps):
        yield [torch.randint(n_train, (args.batch,), generator=g)
               for _ in range(args.accumulation * world)]


# -------------------------------------------------------------------- fp8

FP8_DTYPES = {Mixprec.DType.FLOAT8_E4M3: torch.float8_e4m3fn,
              Mixprec.DType.FLOAT8_E5M2: torch.float8_e5m2}


def dequantize_fp8(param, shape, block_size):
    """The FP32 values of the engine's FP8 working copy of param: each byte
    decoded by torch, times the tensor's scale_inv (delayed and current
    scaling) or its block's E8M0 scale 2^(e - 127) (MX; 0xFF is NaN)."""
    raw = torch.frombuffer(bytearray(param.get_fp8_data().get_data()), dtype=torch.uint8)
    w = raw.view(FP8_DTYPES[param.get_fp8_dtype()]).float()
    if block_size:
        e = torch.frombuffer(bytearray(param.get_fp8_block_scales().get_data()),
                             dtype=torch.uint8).float()
        scales = torch.where(e == 255, torch.nan, torch.exp2(e - 127))
        w = w * scales.repeat_interleave(block_size)[:w.numel()]
    else:
        w = w * param.get_fp8_scale_inv()
    return w.reshape(shape)


class Fp8Linear(torch.autograd.Function):
    """y = x w8^T + b, w8 the dequantised FP8 weight: forward and the input
    gradient multiply with it in FP32 (as an FP8 GEMM accumulates); the
    weight and bias gradients go to the module's bf16 parameters."""

    @staticmethod
    def forward(ctx, x, weight, bias, w8):
        ctx.save_for_backward(x, w8)
        ctx.weight_dtype = weight.dtype
        ctx.has_bias = bias is not None
        y = F.linear(x.float(), w8)
        if bias is not None:
            y = y + bias.float()
        return y.to(x.dtype)

    @staticmethod
    def backward(ctx, dy):
        x, w8 = ctx.saved_tensors
        dx = (dy.float() @ w8).to(x.dtype)
        dy2, x2 = dy.reshape(-1, dy.shape[-1]).float(), x.reshape(-1, x.shape[-1]).float()
        dw = (dy2.t() @ x2).to(ctx.weight_dtype)
        db = dy2.sum(0).to(ctx.weight_dtype) if ctx.has_bias else None
        return dx, dw, db, None


class Fp8Weights:
    """Makes the model's nn.Linear layers whose weights the engine keeps
    in FP8 multiply with that copy; refresh() after each step."""

    def __init__(self, engine, model, block_size):
        self.layers = []
        self.block_size = block_size
        for name, module in model.named_modules():
            param = engine.params.get(name + ".weight") if isinstance(module, nn.Linear) else None
            if param is not None and param.is_fp8():
                module.forward = (lambda x, m=module: Fp8Linear.apply(x, m.weight, m.bias, m.w8))
                self.layers.append((name, module, param))
        self.refresh()

    def refresh(self):
        for _, module, param in self.layers:
            module.w8 = dequantize_fp8(param, module.weight.shape, self.block_size)

    def describe(self):
        """name: distinct values the matmuls multiplied with, per layer."""
        return ", ".join(f"{name}.weight {torch.unique(m.w8).numel()}"
                         for name, m, _ in self.layers)


# -------------------------------------------------------------- schedules

def warmup_cosine(args):
    """DeepSpeed's WarmupCosineLR (deepspeed/runtime/lr_schedules.py), as
    the ratio of the base learning rate at a given step."""
    warmup, total = args.warmup, args.steps

    def ratio(step):
        if step < warmup:
            return step / warmup
        progress = (step - warmup + 1) / max(total - warmup, 1)
        return max(0.0, 0.05 + 0.95 * (1 + math.cos(math.pi * progress)) / 2)
    return ratio


def ds_config(args):
    config = {
        "train_micro_batch_size_per_gpu": args.batch,
        "gradient_accumulation_steps": args.accumulation,
        "gradient_clipping": args.clip,
        "optimizer": {"type": "AdamW", "params": {"lr": args.lr, "betas": [0.9, 0.99], "eps": 1e-8,
                                                  "weight_decay": args.weight_decay}},
        "scheduler": {"type": "WarmupCosineLR",
                      "params": {"total_num_steps": args.steps, "warmup_num_steps": args.warmup,
                                 "warmup_type": "linear", "warmup_min_ratio": 0.0,
                                 "cos_min_ratio": 0.05}},
        "zero_optimization": {"stage": args.zero_stage},
        "mixprec": {"seed": args.seed},
    }
    if args.fp8:
        config["fp8"] = {"enabled": True, "recipe": args.fp8, "modules": ["Linear"]}
    if args.dtype == "bf16":
        config["bf16"] = {"enabled": True}
    else:
        config["fp16"] = {"enabled": True, "loss_scale": 0, "initial_scale_power": 16,
                          "loss_scale_window": 500, "hysteresis": 2, "min_loss_scale": 1}
    return config


class DynamicLossScaler:
    """DeepSpeed's DynamicLossScaler.update_scale
    (deepspeed/runtime/fp16/loss_scaler.py), with fp16's defaults above."""

    def __init__(self, init_scale=2.0 ** 16, scale_window=500, hysteresis=2, min_scale=1.0):
        self.cur_scale = init_scale
        self.cur_iter = 0
        self.last_overflow_iter = -1
        self.scale_window = scale_window
        self.delayed_shift = hysteresis
        self.cur_hysteresis = hysteresis
        self.min_scale = min_scale

    def update_scale(self, overflow):
        if overflow:
            if self.delayed_shift == 1 or self.cur_hysteresis == 1:
                self.cur_scale = max(self.cur_scale / 2.0, self.min_scale)
            else:
                self.cur_hysteresis -= 1
            self.last_overflow_iter = self.cur_iter
        elif (self.cur_iter - self.last_overflow_iter) % self.scale_window == 0:
            self.cur_hysteresis = self.delayed_shift
            self.cur_scale *= 2.0
        self.cur_iter += 1


# -------------------------------------------------------------- training

class Run:
    def __init__(self, name):
        self.name = name
        self.history = []       # (step, mean train loss since the last row, val loss)
        self.val_loss = math.nan
        self.step_seconds = 0.0
        self.skipped = 0


def record(run, args, step, losses, model, val, rank, extra=""):
    if step % args.eval_every == 0 or step == args.steps:
        v = evaluate(model, val, args.eval_words)
        run.history.append((step, sum(losses) / len(losses), v))
        losses.clear()
        if rank == 0 and not args.quiet:
            print(f"{run.name:>7} step {step:5d}/{args.steps} | loss {run.history[-1][1]:.4f} "
                  f"| val {v:.4f}{extra}", file=sys.stderr)


def train_mixprec(args, train, val, length):
    run = Run("mixprec")
    model = make_model(args, length)
    engine = mixprec.torch.initialize(model, ds_config(args))
    rank, world = engine.rank, engine.world_size
    fp8 = None
    if args.fp8:
        recipe = engine.engine.get_config().get_fp8_recipe()
        fp8 = Fp8Weights(engine, model, recipe.get_block_size()
                         if recipe.get_kind() == Mixprec.Fp8RecipeKind.MX else 0)
        if not fp8.layers:
            sys.exit("torch-charlm.py: --fp8: the engine keeps no Linear weight in FP8")
    losses = []
    for step, micro in enumerate(batches(args, len(train[0]), world), 1):
        for m, idx in enumerate(micro):
            if m % world != rank:
                continue
            loss = loss_of(engine, train[0][idx], train[1][idx])
            engine.backward(loss)
            losses.append(loss.item())
        r = engine.step()
        if fp8:
            fp8.refresh()
        record(run, args, step, losses, model, val, rank,
               f" | scale {r.loss_scale:g} | grad norm {r.grad_norm:.3g} | skipped "
               f"{r.skipped_steps} | lr {r.lr:.2e}")
    run.val_loss = evaluate(model, val)
    t = engine.timings
    run.step_seconds = (t["intake"] + t["backward_done"] + t["step"]) / args.steps
    run.engine_step_seconds = t["step"] / args.steps
    run.skipped = engine.skipped_steps
    run.rank, run.world = rank, world
    run.fp8 = fp8.describe() if fp8 else None
    return run


def train_torch(args, train, val, length, world):
    run = Run("torch")
    dtype = DTYPES[args.dtype]
    model = make_model(args, length)
    params = list(model.parameters())
    masters = [p.detach().clone().float() for p in params]
    for m in masters:
        m.grad = torch.zeros_like(m)
    model.to(dtype)
    try:
        opt = torch.optim.AdamW(masters, lr=args.lr, betas=(0.9, 0.99), eps=1e-8,
                                weight_decay=args.weight_decay, fused=True)
    except (RuntimeError, TypeError):
        opt = torch.optim.AdamW(masters, lr=args.lr, betas=(0.9, 0.99), eps=1e-8,
                                weight_decay=args.weight_decay, foreach=True)
    schedule = torch.optim.lr_scheduler.LambdaLR(opt, warmup_cosine(args))
    scaler = DynamicLossScaler() if args.dtype == "fp16" else None
    losses = []
    seconds = 0.0
    for step, micro in enumerate(batches(args, len(train[0]), world), 1):
        scale = scaler.cur_scale if scaler else 1.0
        for idx in micro:
            loss = loss_of(model, train[0][idx], train[1][idx])
            (loss.float() * scale).backward()
            losses.append(loss.item())
            start = time.perf_counter()
            for p, m in zip(params, masters):        # accumulate in FP32
                m.grad.add_(p.grad)
                p.grad = None
            seconds += time.perf_counter() - start
        start = time.perf_counter()
        grads = [m.grad for m in masters]
        torch._foreach_mul_(grads, 1.0 / (scale * len(micro)))   # unscale, average
        norm = torch.nn.utils.clip_grad_norm_(masters, args.clip)  # also the overflow check
        overflow = not math.isfinite(float(norm))
        if scaler:
            scaler.update_scale(overflow)
        if not overflow:
            opt.step()
            schedule.step()
            with torch.no_grad():
                torch._foreach_copy_(params, masters)  # the new working copies
        else:
            run.skipped += 1
        for g in grads:
            g.zero_()
        seconds += time.perf_counter() - start
        record(run, args, step, losses, model, val, 0,
               f" | scale {scale:g} | grad norm {float(norm):.3g} | skipped {run.skipped}")
    run.val_loss = evaluate(model, val)
    run.step_seconds = seconds / args.steps
    return run


def plot(runs, args, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for run in runs:
        steps = [h[0] for h in run.history]
        line, = ax.plot(steps, [h[2] for h in run.history], label=f"{run.name} val ({run.val_loss:.4f})")
        ax.plot(steps, [h[1] for h in run.history], linestyle="--", color=line.get_color(), alpha=0.6,
                label=f"{run.name} train")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("cross-entropy (nats)")
    ax.set_title(f"torch-charlm, {args.dtype}: libmixprec (mixprec.torch) and torch's AdamW")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=1000, help="optimizer steps (default: %(default)s)")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="bf16",
                        help="working precision (default: %(default)s)")
    parser.add_argument("--fp8", choices=("delayed", "current", "mx"),
                        help="the mixprec run multiplies with FP8 working copies of the Linear "
                             "weights, scaled by this recipe")
    parser.add_argument("--zero-stage", type=int, choices=(0, 1, 2), default=0,
                        help="ZeRO stage under mixprec-run (default: %(default)s)")
    parser.add_argument("--accumulation", type=int, default=1,
                        help="micro-batches per step on each rank (default: %(default)s)")
    parser.add_argument("--batch", type=int, default=64, help="words per micro-batch (default: %(default)s)")
    parser.add_argument("--lr", type=float, default=3e-3, help="peak learning rate (default: %(default)s)")
    parser.add_argument("--warmup", type=int, default=None, help="warmup steps (default: 5%% of --steps)")
    parser.add_argument("--weight-decay", type=float, default=0.01)
    parser.add_argument("--clip", type=float, default=1.0, help="gradient clipping (default: %(default)s)")
    parser.add_argument("--d-model", type=int, default=64)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default: %(default)s)")
    parser.add_argument("--eval-every", type=int, default=100, help="steps between evaluations")
    parser.add_argument("--eval-words", type=int, default=2048,
                        help="validation words of the evaluations along the way (the final one uses all)")
    parser.add_argument("--words", default="/usr/share/dict/american-english", help="word list")
    parser.add_argument("--plot", metavar="PNG", help="save the loss curves there")
    parser.add_argument("--no-torch", action="store_true", help="train with libmixprec only")
    parser.add_argument("--quiet", action="store_true", help="print only the results")
    args = parser.parse_args(argv)
    if min(args.steps, args.batch, args.accumulation, args.eval_every, args.threads) <= 0:
        parser.error("--steps, --batch, --accumulation, --eval-every and --threads must be positive")
    if args.warmup is None:
        args.warmup = max(args.steps // 20, 1)
    torch.set_num_threads(args.threads)
    try:
        train, val, length = load_data(args.words)
    except OSError as e:
        sys.exit(f"torch-charlm.py: cannot read the word list (install Debian's wamerican "
                 f"package or pass --words FILE): {e}")

    try:
        ours = train_mixprec(args, train, val, length)
    except GLib.Error as e:
        sys.exit(f"torch-charlm.py: {e.message}")
    # Every rank evaluates the same weights: the same numbers on each.
    print(f"mixprec val_loss={ours.val_loss!r} curve={','.join(repr(h[2]) for h in ours.history)} "
          f"(rank {ours.rank} of {ours.world})", flush=True)
    if ours.fp8 and ours.rank == 0:
        print(f"mixprec fp8 {args.fp8}: distinct values the Linear layers multiplied with: {ours.fp8}")
    runs = [ours]
    if not args.no_torch:
        theirs = train_torch(args, train, val, length, ours.world)
        runs.append(theirs)
        if ours.rank == 0:
            print(f"torch val_loss={theirs.val_loss!r}")
            print(f"val loss ratio mixprec/torch = {ours.val_loss / theirs.val_loss:.4f}")
            print(f"per-step time outside forward/backward: libmixprec {ours.step_seconds * 1e3:.3f} ms "
                  f"(of which engine.step {ours.engine_step_seconds * 1e3:.3f} ms), "
                  f"torch AdamW + casts {theirs.step_seconds * 1e3:.3f} ms")
            print(f"skipped steps: libmixprec {ours.skipped}, torch {theirs.skipped}")
    if args.plot and ours.rank == 0:
        plot(runs, args, args.plot)
        if not args.quiet:
            print(f"torch-charlm.py: loss curves in {args.plot}", file=sys.stderr)
    return runs


if __name__ == "__main__":
    main()
