# torch-zero3-worker.py — one rank (or the one process) of
# tests/test-torch-zero3-dist.py: a small language model (tied embedding
# and head, a frozen position embedding, LayerNorms, an MLP per block;
# plain torch, so that each process starts fast) trained through
# mixprec.torch for a few steps, each step's global batch being the same
# `world * gas` micro-batches whatever the split: rank r of W takes
# micro-batch s*W + r of step s, and one process with gas = W takes them
# all in rank order. Prints its losses, writes the consolidated FP32
# weights (export_fp32) and, when asked, saves or resumes a checkpoint;
# prints its peak RSS. The model is built under zero.Init, and its final
# LayerNorm's weight is written by rank 0 under
# GatheredParameters(modifier_rank=0) before initialize(). With
# --modify K, before step K rank 0 halves the first block's up-projection
# (plus 1/8) and the frozen position embedding under
# GatheredParameters(modifier_rank=0) while the other ranks zero theirs,
# which the broadcast drops. A resumed run zeroes the frozen position
# embedding first, which the checkpoint's frozen values must restore.
# Under ZeRO-3 the frozen position embedding is partitioned too, as
# DeepSpeed partitions frozen parameters (RESULT's frozen_partitioned).
#
# usage: torch-zero3-worker.py STAGE GAS STEPS OUT [--save-at K DIR] [--resume DIR]
#                              [--checkpointing] [--modify K] [--reuse N]
import argparse
import json
import os
import resource
import warnings

warnings.simplefilter("ignore")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import mixprec.torch  # noqa: E402

torch.set_num_threads(1)


class Block(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.ln = nn.LayerNorm(width)
        self.up = nn.Linear(width, 4 * width)
        self.down = nn.Linear(4 * width, width)

    def forward(self, h):
        return h + self.down(F.gelu(self.up(self.ln(h))))


class Model(nn.Module):
    def __init__(self, vocab=64, context=16, width=32, layers=2):
        super().__init__()
        self.wte = nn.Embedding(vocab, width)
        self.wpe = nn.Embedding(context, width)
        self.blocks = nn.ModuleList(Block(width) for _ in range(layers))
        self.ln_f = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)
        self.head.weight = self.wte.weight
        self.checkpointing = False

    def forward(self, x, labels):
        h = self.wte(x) + self.wpe(torch.arange(x.shape[1]))
        for block in self.blocks:
            if self.checkpointing:
                # Recomputed in the backward (as gradient_checkpointing does).
                h = torch.utils.checkpoint.checkpoint(block.__call__, h, use_reentrant=False)
            else:
                h = block(h)
        logits = self.head(self.ln_f(h)).float()
        return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]),
                               labels[:, 1:].reshape(-1))


def model_and_data(seed=0):
    torch.manual_seed(seed)
    with mixprec.torch.zero.Init():
        model = Model()
    # Init left each parameter empty beside its chunk (one process: its whole values).
    model.built_partitioned = sum(1 for p in model.parameters() if p.numel() == 0)
    # A weight written after construction, as Hugging Face's post_init
    # does under DeepSpeed's Init: rank 0's values are kept (the one
    # process writes the whole parameter directly).
    w = model.ln_f.weight
    with mixprec.torch.zero.GatheredParameters([w], modifier_rank=0), torch.no_grad():
        if int(os.environ.get("MIXPREC_RANK", "0")) == 0:
            w.copy_(torch.linspace(0.5, 1.5, w.numel()))
        else:
            w.zero_()
    model.wpe.requires_grad_(False)
    g = torch.Generator().manual_seed(seed + 1)
    steps = torch.randint(1, 3, (36, 2, 16), generator=g)
    return model, [torch.cumsum(s, dim=1) % 64 for s in steps]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("stage", type=int)
    ap.add_argument("gas", type=int)
    ap.add_argument("steps", type=int)
    ap.add_argument("out")
    ap.add_argument("--save-at", nargs=2)
    ap.add_argument("--resume")
    ap.add_argument("--checkpointing", action="store_true")
    ap.add_argument("--modify", type=int)
    ap.add_argument("--reuse", type=int, help="stage3_max_reuse_distance")
    a = ap.parse_args()
    config = {
        "train_micro_batch_size_per_gpu": 2,
        "gradient_accumulation_steps": a.gas,
        "gradient_clipping": 1.0,
        "bf16": {"enabled": True},
        "data_types": {"grad_accum_dtype": "fp32"},
        "zero_optimization": {"stage": a.stage, "stage3_param_persistence_threshold": 0,
                              "stage3_prefetch_bucket_size": 65536},
        "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "betas": [0.9, 0.95],
                                                  "weight_decay": 0.01}},
        "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 0,
                                                     "warmup_max_lr": 3e-3,
                                                     "warmup_num_steps": 2}},
    }
    if a.reuse is not None:
        config["zero_optimization"]["stage3_max_reuse_distance"] = a.reuse
    model, batches = model_and_data()
    model.checkpointing = a.checkpointing
    engine, _, _, _ = mixprec.torch.initialize(model=model, model_parameters=[
        p for p in model.parameters() if p.requires_grad], config=config)
    world, rank = engine.world_size, engine.global_rank
    first = 0
    if a.resume:
        # The checkpoint's frozen values, not these, must be trained with.
        with mixprec.torch.zero.GatheredParameters([model.wpe.weight], modifier_rank=0), \
                torch.no_grad():
            model.wpe.weight.zero_()
        engine.load_checkpoint(a.resume)
        first = engine.global_steps
    per_step = world * a.gas
    losses = []
    for step in range(first, a.steps):
        if a.save_at and step == int(a.save_at[0]):
            engine.save_checkpoint(a.save_at[1], client_state={"step": step})
        if a.modify is not None and step == a.modify:
            w, frozen = model.blocks[0].up.weight, model.wpe.weight
            with mixprec.torch.zero.GatheredParameters([w, frozen], modifier_rank=0), \
                    torch.no_grad():
                if rank == 0:
                    w.mul_(0.5).add_(0.125)
                    frozen.mul_(0.5)
                else:
                    w.zero_()
                    frozen.zero_()
        for k in range(a.gas):
            x = batches[step * per_step + k * world + rank]
            loss = engine(x, labels=x)
            engine.backward(loss)
            engine.step()
            losses.append(loss.item())
    engine.export_fp32(a.out)
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print("RESULT " + json.dumps({"rank": rank, "world": world, "losses": losses,
                                  "params": sum(e.param.get_numel() for e in engine._entries),
                                  "built_partitioned": model.built_partitioned,
                                  "n_params": sum(1 for _ in model.parameters()),
                                  "partitioned": sum(1 for p in model.parameters()
                                                     if p.numel() == 0),
                                  "frozen_partitioned": model.wpe.weight.numel() == 0 and
                                  getattr(model.wpe.weight, "ds_status", None) ==
                                  mixprec.torch.zero.ZeroParamStatus.NOT_AVAILABLE,
                                  "gathered_bytes": engine.engine.get_gathered_bytes(),
                                  "prefetches": engine._zero3.prefetches if engine._zero3 else 0,
                                  "engine_peak": engine.engine.get_memory_report().total,
                                  "peak_rss_kib": peak_kib}), flush=True)


main()
