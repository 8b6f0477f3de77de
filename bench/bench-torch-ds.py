# bench-torch-ds.py — one rank of bench/run-bench-torch-ds.sh: a small
# Hugging Face GPT-2 (built from a config, no download) trained in bf16 by
# a DeepSpeed-style loop (engine(x), engine.backward(loss), engine.step())
# under DeepSpeed itself (its launcher's environment, gloo on 127.0.0.1)
# or under mixprec.torch (mixprec-run), the loop unchanged but for the
# module it came from. Times each optimizer step after the warm-up and
# prints, on rank 0, one RESULT line of JSON: the median and every step's
# seconds, the median of a step's CPU seconds (the rank's process, every
# thread: "cpu") and of the times it slept in a step (voluntary context
# switches: "waits", for a peer, a worker thread or I/O), and where
# mixprec.torch spent the seconds (its engine's timings). On a busy host
# the wall-clock seconds are far above the CPU seconds; the two together
# tell work from waiting.
#
# usage: bench-torch-ds.py deepspeed|mixprec STAGE TMPDIR
# Environment: STEPS (timed steps, default 10), WARMUP (default 3),
# LAYERS / EMBD / HEADS / CTX / BATCH / VOCAB (default 6 / 384 / 6 / 128 /
# 8 / 256: the shape of bench/run-bench-gpt2.sh), GAS (micro-batches per
# step, default 1).
import json
import os
import resource
import statistics
import sys
import time
import warnings

warnings.simplefilter("ignore")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("DS_ACCELERATOR", "cpu")

import torch  # noqa: E402
import transformers  # noqa: E402

impl, stage, tmpdir = sys.argv[1], int(sys.argv[2]), sys.argv[3]
if impl == "deepspeed":
    import logging

    import deepspeed
    from torch_ds_common import open_cpu_deepspeed
    logging.getLogger("DeepSpeed").setLevel(logging.ERROR)
    open_cpu_deepspeed()
else:
    import mixprec.torch as deepspeed

torch.set_num_threads(1)


def env_int(name, default):
    return int(os.environ.get(name, default))


steps, warmup = env_int("STEPS", 10), env_int("WARMUP", 3)
layers, embd, heads = env_int("LAYERS", 6), env_int("EMBD", 384), env_int("HEADS", 6)
ctx, batch, vocab = env_int("CTX", 128), env_int("BATCH", 8), env_int("VOCAB", 256)
gas = env_int("GAS", 1)

config = transformers.GPT2Config(vocab_size=vocab, n_positions=ctx, n_embd=embd, n_layer=layers,
                                 n_head=heads, bos_token_id=0, eos_token_id=0,
                                 resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
torch.manual_seed(0)
model = transformers.GPT2LMHeadModel(config)
n_params = sum(p.numel() for p in model.parameters())
rank = int(os.environ.get("RANK", "0"))
g = torch.Generator().manual_seed(1 + rank)
batches = [[torch.randint(0, vocab, (batch, ctx), generator=g) for _ in range(gas)]
           for _ in range(warmup + steps)]

ds_config = {
    "train_micro_batch_size_per_gpu": batch,
    "gradient_accumulation_steps": gas,
    "gradient_clipping": 1.0,
    "bf16": {"enabled": True},
    "zero_optimization": {"stage": stage},
    "optimizer": {"type": "AdamW",
                  "params": {"lr": 1e-3, "betas": [0.9, 0.95], "eps": 1e-8,
                             "weight_decay": 0.01, "torch_adam": True}},
}
deepspeed.init_distributed()
engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                       config=ds_config)
times = []
cpu = []
waits = []
losses = []
for i, micro in enumerate(batches):
    start = time.perf_counter()
    start_cpu = time.process_time()
    start_sw = resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw
    for x in micro:
        loss = engine(x, labels=x).loss
        engine.backward(loss)
        engine.step()
    losses.append(loss.item())
    if i == warmup - 1 and hasattr(engine, "timings"):
        engine.timings = dict.fromkeys(engine.timings, 0.0)
    if i >= warmup:
        times.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
        waits.append(resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw - start_sw)
if rank == 0:
    report = {"impl": impl, "stage": stage, "gas": gas, "median": statistics.median(times),
              "times": times, "cpu": statistics.median(cpu),
              "waits": statistics.median(waits), "loss": losses[-1],
              "params": n_params}
    if hasattr(engine, "timings"):
        report["timings"] = {k: v / steps for k, v in engine.timings.items()}
    print("RESULT " + json.dumps(report), flush=True)
if impl == "deepspeed":
    # gloo's teardown at interpreter exit sometimes aborts a rank
    # ("terminate called without an active exception") after the work is
    # done: end the group, then leave without the interpreter's teardown.
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()
    sys.stdout.flush()
    os._exit(0)
