#!/usr/bin/env python3
"""charlm.py: the charlm example trainer in Python.

The same character-level model, data, split and precision emulation as
charlm.c, with numpy doing the model math and libmixprec (through GObject
Introspection) doing the precision side: master weights, loss scaling,
clipping, AdamW and the learning-rate schedule. It trains once per mode
(fp32, bf16 and fp16 with dynamic loss scaling by default), prints each
mode's validation loss and saves their loss curves as a PNG.

    python3 examples/charlm.py --steps 1000 --png charlm-loss.png

Run it against an uninstalled build with GI_TYPELIB_PATH=<build>/bindings
and LD_LIBRARY_PATH=<build>/libmixprec/.libs; that library finds the
plugins built beside it.
"""

import argparse
import json
import os
import re
import sys
import time

# The matrices are small: BLAS threads would cost more than they give.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

import gi  # noqa: E402

gi.require_version("GLib", "2.0")
try:
    gi.require_version("Mixprec", "1.0")
except ValueError:
    sys.exit("charlm.py: the Mixprec 1.0 typelib is not installed; for a build tree set "
             "GI_TYPELIB_PATH=<build>/bindings and LD_LIBRARY_PATH=<build>/libmixprec/.libs")
from gi.repository import GLib, Mixprec  # noqa: E402

VOCAB = 27  # '.' then a..z
BLOCK_SIZE = 5
N_EMBD = 16
N_HIDDEN = 192
OUT_INIT_SCALE = 0.1
LAYERNORM_EPS = 1e-5
EVAL_SUBSET = 4096

HERE = os.path.dirname(os.path.abspath(__file__))
MODES = {
    "fp32": "fp32.json",
    "bf16": "bf16.json",
    "fp16": "fp16.json",
    "fp16-fp32-layernorm": "fp16-fp32-layernorm.json",
    "fp16-static1": "fp16-static1.json",
}

MASK64 = np.uint64(0xFFFFFFFFFFFFFFFF)
GAMMA = np.uint64(0x9E3779B97F4A7C15)
STREAM_STRIDE = 0xD1B54A32D192ED03


# ------------------------------------------------------------- randomness

class Rng:
    """splitmix64 as a counter, exactly as charlm-data.c draws it."""

    def __init__(self, seed, stream):
        self.state = (seed + stream * STREAM_STRIDE) & 0xFFFFFFFFFFFFFFFF

    def next(self, n):
        with np.errstate(over="ignore"):
            i = np.arange(1, n + 1, dtype=np.uint64)
            z = np.uint64(self.state) + i * GAMMA
            z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
            z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        self.state = (self.state + n * 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
        return z ^ (z >> np.uint64(31))

    def normal(self, n):
        u = (self.next(2 * n) >> np.uint64(11)).astype(np.float64) * 2.0 ** -53
        u1, u2 = u[0::2], u[1::2]
        return np.sqrt(-2.0 * np.log(1.0 - u1)) * np.cos(2.0 * np.pi * u2)


# ------------------------------------------------------------------- data

def is_val(word):
    """One word in ten, by the 32-bit FNV-1a hash of the word."""
    h = 2166136261
    for byte in word:
        h = ((h ^ byte) * 16777619) & 0xFFFFFFFF
    return h % 10 == 0


def load_words(path):
    with open(path, "rb") as f:
        lines = f.read().split(b"\n")
    plain = re.compile(rb"^[a-z]+$")
    return [w for w in (line.rstrip(b"\r") for line in lines) if plain.match(w)]


def make_examples(words):
    """makemore-style examples, in the order charlm-data.c makes them.

    Each word is laid out after block_size '.' tokens and followed by one,
    so the context of every prediction is the block_size tokens before it.
    """
    table = bytes.maketrans(b"abcdefghijklmnopqrstuvwxyz", bytes(range(1, 27)))
    pad = bytes(BLOCK_SIZE)
    stream = np.frombuffer(b"".join(pad + w.translate(table) + b"\0" for w in words), np.uint8)
    predictions = np.array([len(w) + 1 for w in words])       # letters and the final '.'
    first = np.cumsum(predictions + BLOCK_SIZE) - predictions  # stream index of each word
    before = np.cumsum(predictions) - predictions
    pos = np.arange(predictions.sum()) + np.repeat(first - before, predictions)
    windows = np.lib.stride_tricks.sliding_window_view(stream, BLOCK_SIZE)
    return windows[pos - BLOCK_SIZE].astype(np.int64), stream[pos].astype(np.int64)


def load_dataset(path):
    words = load_words(path)
    train = [w for w in words if not is_val(w)]
    val = [w for w in words if is_val(w)]
    if not train or not val:
        sys.exit(f"charlm.py: {path}: needs lines of lowercase a-z letters")
    return make_examples(train), make_examples(val)


# ------------------------------------------------------------- emulation

def store_as(x, dtype):
    """Rounds float32 values as storing them in dtype would."""
    if dtype == Mixprec.DType.FLOAT16:
        return x.astype(np.float16).astype(np.float32)
    if dtype == Mixprec.DType.BFLOAT16:
        u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
        with np.errstate(over="ignore"):
            u = (u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) & np.uint32(0xFFFF0000)
        return u.view(np.float32)
    return x


# ------------------------------------------------------------------ model

PARAMS = [
    # name, module type, shape
    ("wte.weight", "Embedding", (VOCAB, N_EMBD)),
    ("h1.weight", "Linear", (N_HIDDEN, BLOCK_SIZE * N_EMBD)),
    ("ln1.weight", "LayerNorm", (N_HIDDEN,)),
    ("ln1.bias", "LayerNorm", (N_HIDDEN,)),
    ("h2.weight", "Linear", (N_HIDDEN, N_HIDDEN)),
    ("ln2.weight", "LayerNorm", (N_HIDDEN,)),
    ("ln2.bias", "LayerNorm", (N_HIDDEN,)),
    ("out.weight", "Linear", (VOCAB, N_HIDDEN)),
    ("out.bias", "Linear", (VOCAB,)),
]


def init_values(name, shape, rng):
    """The same numbers, in the same order, as charlm-model.c."""
    n = int(np.prod(shape))
    std = {
        "wte.weight": 1.0,
        "h1.weight": (5.0 / 3.0) / np.sqrt(BLOCK_SIZE * N_EMBD),
        "h2.weight": (5.0 / 3.0) / np.sqrt(N_HIDDEN),
        "out.weight": OUT_INIT_SCALE / np.sqrt(N_HIDDEN),
    }.get(name)
    if std is not None:
        return (rng.normal(n) * std).astype(np.float32).reshape(shape)
    if name.startswith("ln") and name.endswith(".weight"):
        return np.ones(shape, np.float32)
    return np.zeros(shape, np.float32)


class Model:
    def __init__(self, engine, seed):
        rng = Rng(seed, 0)
        self.params = {}
        for name, module_type, shape in PARAMS:
            init = init_values(name, shape, rng)
            self.params[name] = engine.register_param(name, list(shape), module_type,
                                                      Mixprec.DType.FLOAT32,
                                                      GLib.Bytes.new(init.tobytes()))
        dt = {name: p.get_working_dtype() for name, p in self.params.items()}
        self.dt_wte, self.dt_h1, self.dt_ln1 = dt["wte.weight"], dt["h1.weight"], dt["ln1.weight"]
        self.dt_h2, self.dt_ln2, self.dt_out = dt["h2.weight"], dt["ln2.weight"], dt["out.weight"]
        self.load_weights()

    def load_weights(self):
        """The working copies (fp16/bf16/fp32) widened to float32."""
        self.w = {}
        for name, _, shape in PARAMS:
            data = self.params[name].get_working(Mixprec.DType.FLOAT32).get_data()
            self.w[name] = np.frombuffer(data, dtype=np.float32).reshape(shape)

    def _hidden(self, x, weight, ln, dt_linear, dt_ln):
        a = store_as(x @ self.w[weight].T, dt_linear)
        mean = a.mean(axis=1, keepdims=True)
        var = ((a - mean) ** 2).mean(axis=1, keepdims=True)
        rstd = 1.0 / np.sqrt(var + LAYERNORM_EPS)
        y = store_as((a - mean) * rstd * self.w[ln + ".weight"] + self.w[ln + ".bias"], dt_ln)
        t = store_as(np.tanh(y), dt_ln)
        return a, mean, rstd, t

    def forward(self, contexts, targets):
        n = len(targets)
        x0 = self.w["wte.weight"][contexts].reshape(n, BLOCK_SIZE * N_EMBD)
        x0c = store_as(x0, self.dt_h1)
        a1, mean1, rstd1, t1 = self._hidden(x0c, "h1.weight", "ln1", self.dt_h1, self.dt_ln1)
        t1c = store_as(t1, self.dt_h2)
        a2, mean2, rstd2, t2 = self._hidden(t1c, "h2.weight", "ln2", self.dt_h2, self.dt_ln2)
        t2c = store_as(t2, self.dt_out)
        logits = store_as(t2c @ self.w["out.weight"].T + self.w["out.bias"], self.dt_out)
        # softmax and cross-entropy in float32, as autocast runs them
        z = logits - logits.max(axis=1, keepdims=True)
        p = np.exp(z)
        p /= p.sum(axis=1, keepdims=True)
        loss = float(-np.log(p[np.arange(n), targets]).astype(np.float64).mean())
        self.cache = (contexts, targets, x0c, a1, mean1, rstd1, t1, t1c, a2, mean2, rstd2, t2, t2c, p)
        return loss

    def _hidden_backward(self, dt, a, mean, rstd, t, ln, dt_linear, dt_ln, grads):
        dt = store_as(dt, dt_ln)
        dy = store_as(dt * (1.0 - t * t), dt_ln)
        xhat = (a - mean) * rstd
        gamma = self.w[ln + ".weight"]
        grads[ln + ".weight"] = (dy * xhat).sum(axis=0)
        grads[ln + ".bias"] = dy.sum(axis=0)
        dnorm = dy * gamma
        da = (dnorm - dnorm.mean(axis=1, keepdims=True)
              - xhat * (dnorm * xhat).mean(axis=1, keepdims=True)) * rstd
        return store_as(da, dt_linear)

    def backward(self, loss_scale):
        """Gradients of loss_scale * (mean loss), handed to the engine."""
        (contexts, targets, x0c, a1, mean1, rstd1, t1, t1c, a2, mean2, rstd2, t2, t2c, p) = self.cache
        n = len(targets)
        grads = {}
        dlogits = p.copy()
        dlogits[np.arange(n), targets] -= 1.0
        dlogits = store_as(dlogits * np.float32(loss_scale / n), self.dt_out)

        grads["out.weight"] = dlogits.T @ t2c
        grads["out.bias"] = dlogits.sum(axis=0)
        dh = store_as(dlogits @ self.w["out.weight"], self.dt_out)
        da2 = self._hidden_backward(dh, a2, mean2, rstd2, t2, "ln2", self.dt_h2, self.dt_ln2, grads)
        grads["h2.weight"] = da2.T @ t1c
        dh = store_as(da2 @ self.w["h2.weight"], self.dt_h2)
        da1 = self._hidden_backward(dh, a1, mean1, rstd1, t1, "ln1", self.dt_h1, self.dt_ln1, grads)
        grads["h1.weight"] = da1.T @ x0c
        dx0 = store_as(store_as(da1 @ self.w["h1.weight"], self.dt_h1), self.dt_wte)
        dwte = np.zeros((VOCAB, N_EMBD), np.float32)
        np.add.at(dwte, contexts.reshape(-1), dx0.reshape(-1, N_EMBD))
        grads["wte.weight"] = dwte

        for name, param in self.params.items():
            g = np.ascontiguousarray(grads[name], dtype=np.float32)
            param.set_grad(Mixprec.DType.FLOAT32, GLib.Bytes.new(g.tobytes()))

    def evaluate(self, examples, stride=1, chunk=4096):
        contexts, targets = examples[0][::stride], examples[1][::stride]
        total = 0.0
        for i in range(0, len(targets), chunk):
            total += self.forward(contexts[i:i + chunk], targets[i:i + chunk]) * len(targets[i:i + chunk])
        return total / len(targets)


# ---------------------------------------------------------------- training

def load_config(path, steps, batch, seed):
    """The config with the command line written into it, as charlm does:
    a decaying schedule is stretched (warmup included) to the run's length."""
    Mixprec.Config.new_from_file(path)  # libmixprec's checks and messages first
    with open(path) as f:
        doc = json.load(f)
    params = doc.get("scheduler", {}).get("params", {})
    total = params.get("total_num_steps")
    if isinstance(total, int) and total > 0:
        params["total_num_steps"] = steps
        warmup = params.get("warmup_num_steps")
        if isinstance(warmup, int) and warmup > 0:
            params["warmup_num_steps"] = max((warmup * steps + total // 2) // total, 1)
    if batch:
        doc["train_micro_batch_size_per_gpu"] = batch
        doc.pop("train_batch_size", None)
    if seed is not None:
        doc.setdefault("mixprec", {})["seed"] = seed
    config = Mixprec.Config.new_from_data(json.dumps(doc))
    config.resolve_batch(1)
    return config


def train(mode, args, data):
    steps = args.steps
    config = load_config(os.path.join(args.configs, MODES[mode]), steps, args.batch, args.seed)
    micro_batch = config.get_train_micro_batch_size_per_gpu()
    accumulation = config.get_gradient_accumulation_steps()
    seed = config.get_seed()
    engine = Mixprec.Engine.new(config)
    model = Model(engine, seed)
    train_examples, val_examples = data
    batch_rng = Rng(seed, 1)
    stride = max(len(val_examples[1]) // EVAL_SUBSET, 1)
    history = []
    losses = []
    start = time.monotonic()

    for step in range(1, steps + 1):
        step_losses = []
        for m in range(accumulation):
            k = (batch_rng.next(micro_batch) % np.uint64(len(train_examples[1]))).astype(np.int64)
            step_losses.append(model.forward(train_examples[0][k], train_examples[1][k]))
            model.backward(args.loss_weight * engine.get_loss_scale())
            if m == accumulation - 1:
                # The step's loss in the monitors the config enables
                # (csv_monitor, tensorboard), beside what the engine records
                # of the step, which this last micro_step() runs.
                engine.report_scalar("Train/Steps/train_loss", float(np.mean(step_losses)))
            r = engine.micro_step()
        losses.extend(step_losses)
        model.load_weights()
        if step % args.eval_every == 0 or step == steps:
            val = model.evaluate(val_examples, stride)
            history.append((step, float(np.mean(losses)), val))
            losses = []
            if not args.quiet:
                print(f"{mode:>5} step {step:5d}/{steps} | loss {history[-1][1]:.4f} | val {val:.4f} "
                      f"| scale {r.loss_scale:g} | grad norm {r.grad_norm:.3g} "
                      f"| skipped {r.skipped_steps} | lr {r.lr:.2e}", file=sys.stderr)

    val_loss = model.evaluate(val_examples)
    if not args.quiet:
        print(f"{mode:>5} {steps} steps in {time.monotonic() - start:.1f} s", file=sys.stderr)
    return val_loss, history


def plot(results, path):
    """Loss curves of every mode; below them, when fp32 ran, how far each
    mode's validation loss is from fp32's (the curves themselves overlap)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    compare = "fp32" in results and len(results) > 1
    fig, axes = plt.subplots(2 if compare else 1, 1, figsize=(7, 7 if compare else 4.5),
                             sharex=True, squeeze=False)
    ax = axes[0][0]
    for mode, (val_loss, history) in results.items():
        steps = [h[0] for h in history]
        line, = ax.plot(steps, [h[2] for h in history], label=f"{mode} val ({val_loss:.4f})")
        ax.plot(steps, [h[1] for h in history], linestyle="--", color=line.get_color(), alpha=0.6,
                label=f"{mode} train")
    ax.set_ylabel("cross-entropy (nats)")
    ax.set_title("charlm: the same run in each precision")
    ax.grid(alpha=0.3)
    ax.legend()
    if compare:
        ax = axes[1][0]
        reference = {h[0]: h[2] for h in results["fp32"][1]}
        for mode, (_, history) in results.items():
            ax.plot([h[0] for h in history], [h[2] - reference[h[0]] for h in history], label=mode)
        ax.set_ylabel("val loss - fp32 val loss (nats)")
        ax.grid(alpha=0.3)
        ax.legend()
    axes[-1][0].set_xlabel("optimizer step")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--modes", default="fp32,bf16,fp16",
                        help="comma-separated modes among " + ", ".join(MODES) + " (default: %(default)s)")
    parser.add_argument("--configs", default=os.path.join(HERE, "configs"),
                        help="folder holding <mode>.json configs (default: the examples')")
    parser.add_argument("--steps", type=int, default=1000,
                        help="optimizer steps; the config's schedule is stretched to fit (default: %(default)s)")
    parser.add_argument("--batch", type=int, default=0, help="micro-batch size (default: the config's)")
    parser.add_argument("--seed", type=int, default=None, help="seed (default: the config's mixprec.seed)")
    parser.add_argument("--eval-every", type=int, default=50, help="steps between evaluations (default: %(default)s)")
    parser.add_argument("--loss-weight", type=float, default=1.0, help="multiply the loss by W before backward")
    parser.add_argument("--words", default="/usr/share/dict/american-english", help="word list")
    parser.add_argument("--png", default="charlm-loss.png", help="where to save the loss curves")
    parser.add_argument("--quiet", action="store_true", help="print only the val_loss lines")
    args = parser.parse_args(argv)

    modes = [m for m in args.modes.split(",") if m]
    unknown = [m for m in modes if m not in MODES]
    if unknown or not modes:
        parser.error(f"unknown mode {', '.join(unknown) or '(none)'}; choose among {', '.join(MODES)}")
    if args.steps <= 0 or args.batch < 0 or args.eval_every <= 0 or not args.loss_weight > 0:
        parser.error("--steps, --batch, --eval-every and --loss-weight must be positive")
    try:
        data = load_dataset(args.words)
    except OSError as e:
        sys.exit(f"charlm.py: cannot read the word list (install Debian's wamerican package "
                 f"or pass --words FILE): {e}")

    results = {}
    for mode in modes:
        try:
            results[mode] = train(mode, args, data)
        except GLib.Error as e:
            sys.exit(f"charlm.py: {mode}: {e.message}")
        print(f"{mode} val_loss={results[mode][0]:.6f}", flush=True)
    plot(results, args.png)
    if not args.quiet:
        print(f"charlm.py: loss curves in {args.png}", file=sys.stderr)
    return results


if __name__ == "__main__":
    main()
