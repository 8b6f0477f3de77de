#!/usr/bin/env python3
"""torch-gpt2.py — the PyTorch twin of examples/gpt2: the same GPT-2
(Hugging Face's GPT2LMHeadModel over the 256 byte values), started from
the weights the C trainer exported (gpt2 --export-init FILE), trained on
the same byte windows in the same order (the C trainer's counter-based
splitmix64 draws), with torch's AdamW, the same hyper-parameters and
DeepSpeed's WarmupCosineLR, under torch autocast (bf16 matmuls, FP32
weights) or in plain fp32. Writes the CSV the C trainer writes
(step,train_loss,val_loss,...,tokens_per_s) and prints val_loss=<x>.

    examples/gpt2/gpt2 --export-init init.safetensors --csv ours.csv
    examples/gpt2/torch-gpt2.py --init init.safetensors --csv torch.csv

bench/run-bench-gpt2.sh runs both and prints them side by side."""
import argparse
import math
import sys
import time

import numpy as np
import torch
import transformers
from safetensors.torch import load_file

MASK64 = (1 << 64) - 1
GAMMA = 0x9E3779B97F4A7C15
STREAM = 0xD1B54A32D192ED03


class Rng:
    """charlm-data.c's splitmix64: stream 1 of the seed orders the batches."""

    def __init__(self, seed, stream):
        self.state = (seed + stream * STREAM) & MASK64

    def next(self):
        self.state = (self.state + GAMMA) & MASK64
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        return z ^ (z >> 31)


def conv1d(name):
    return any(name.endswith(s) for s in (".attn.c_attn.weight", ".attn.c_proj.weight",
                                           ".mlp.c_fc.weight", ".mlp.c_proj.weight"))


def warmup_cosine(warmup, total, cos_min):
    """DeepSpeed's WarmupCosineLR with a linear warmup from 0, as the
    ratio of the base learning rate for LambdaLR's step s (0-based). A
    DeepSpeed engine (and libmixprec) runs optimizer step s + 1 at the
    schedule's last_batch_iteration s - 1: its constructor writes the
    rate for -1, and the first two steps both run at the warmup's start."""
    def ratio(iteration):
        if iteration < warmup:
            return iteration / warmup
        progress = (iteration - warmup + 1) / max(total - warmup, 1)
        return max(0.0, cos_min + (1 - cos_min) * (1 + math.cos(math.pi * progress)) / 2)
    return lambda s: 0.0 if s == 0 else ratio(s - 1)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--init", required=True, help="safetensors from gpt2 --export-init")
    p.add_argument("--text", default="/usr/share/dict/american-english")
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--heads", type=int, default=6)
    p.add_argument("--embd", type=int, default=384)
    p.add_argument("--ctx", type=int, default=128)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--steps", type=int, default=500)
    p.add_argument("--warmup", type=int, default=None, help="default: steps / 10")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--cos-min", type=float, default=0.1)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--clip", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--eval-every", type=int, default=50)
    p.add_argument("--val-windows", type=int, default=32)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--mode", choices=["autocast-bf16", "fp32"], default="autocast-bf16")
    p.add_argument("--stop-after", type=int, default=None,
                   help="stop after this many steps of the --steps schedule (default: all)")
    p.add_argument("--csv", default="torch-gpt2.csv")
    p.add_argument("--quiet", action="store_true")
    a = p.parse_args(argv)
    warmup = a.warmup if a.warmup is not None else max(a.steps // 10, 1)
    torch.set_num_threads(a.threads)

    data = np.fromfile(a.text, dtype=np.uint8)
    n_val = len(data) // 10
    train, val = data[:len(data) - n_val], data[len(data) - n_val:]
    T = a.ctx

    config = transformers.GPT2Config(
        vocab_size=256, n_positions=T, n_embd=a.embd, n_layer=a.layers, n_head=a.heads,
        activation_function="gelu_new", resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
        layer_norm_epsilon=1e-5, tie_word_embeddings=True, bos_token_id=0, eos_token_id=0)
    model = transformers.GPT2LMHeadModel(config)
    state = {k: (v.t() if conv1d(k) else v).contiguous() for k, v in load_file(a.init).items()}
    state["lm_head.weight"] = state["transformer.wte.weight"]
    model.load_state_dict(state, strict=False)
    model.train()

    # libmixprec's default weight-decay rule: nothing of fewer than two
    # dimensions (biases, LayerNorm) decays.
    decay = [q for q in model.parameters() if q.dim() >= 2]
    rest = [q for q in model.parameters() if q.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay},
                             {"params": rest, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    schedule = torch.optim.lr_scheduler.LambdaLR(opt, warmup_cosine(warmup, a.steps, a.cos_min))
    rng = Rng(a.seed, 1)
    starts = len(train) - T

    def batch():
        rows = [rng.next() % starts for _ in range(a.batch)]
        x = np.stack([train[s:s + T] for s in rows]).astype(np.int64)
        y = np.stack([train[s + 1:s + T + 1] for s in rows]).astype(np.int64)
        return torch.from_numpy(x), torch.from_numpy(y)

    def loss_of(x, y):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.mode == "autocast-bf16"):
            logits = model(input_ids=x).logits
        return torch.nn.functional.cross_entropy(logits.float().reshape(-1, 256), y.reshape(-1))

    def evaluate():
        n = min((len(val) - 1) // T, a.val_windows)
        total = 0.0
        model.eval()
        with torch.no_grad():
            for w in range(0, n, a.batch):
                rows = range(w, min(w + a.batch, n))
                x = torch.from_numpy(np.stack([val[r * T:r * T + T] for r in rows]).astype(np.int64))
                y = torch.from_numpy(np.stack([val[r * T + 1:r * T + T + 1] for r in rows]).astype(np.int64))
                total += loss_of(x, y).item() * len(rows)
        model.train()
        return total / n

    out = open(a.csv, "w")
    out.write("step,train_loss,val_loss,loss_scale,grad_norm,skipped_steps,lr,tokens_per_s\n")
    loss_sum, count, tokens, seconds = 0.0, 0, 0, 0.0
    val_loss = float("nan")
    last = min(a.steps, a.stop_after) if a.stop_after else a.steps
    for step in range(1, last + 1):
        x, y = batch()
        t0 = time.perf_counter()
        loss = loss_of(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip)
        lr = opt.param_groups[0]["lr"]
        opt.step()
        schedule.step()
        seconds += time.perf_counter() - t0
        loss_sum += loss.item()
        count += 1
        tokens += a.batch * T
        if step % a.eval_every == 0 or step == last:
            val_loss = evaluate()
            out.write("%d,%.6f,%.6f,1,%.6g,0,%.6g,%.1f\n"
                      % (step, loss_sum / count, val_loss, float(norm), lr, tokens / seconds))
            out.flush()
            if not a.quiet:
                print("torch-gpt2: step %5d/%d | loss %.4f | val %.4f | grad norm %.3g | lr %.2e | "
                      "%.0f tok/s" % (step, a.steps, loss_sum / count, val_loss, float(norm), lr,
                                      tokens / seconds), file=sys.stderr)
            loss_sum, count, tokens, seconds = 0.0, 0, 0, 0.0
    out.close()
    print("val_loss=%.6f" % val_loss)


if __name__ == "__main__":
    main()
