# torch-ds-train.py — a training script written for DeepSpeed, as its
# getting-started guide shows: deepspeed.add_config_arguments() and
# --deepspeed_config, deepspeed.init_distributed(), deepspeed.initialize(), engine(x),
# engine.backward(loss), engine.step(), save_checkpoint/load_checkpoint
# with client state. tests/test-torch-deepspeed-compat.py runs this file
# twice, unchanged but for its import line (`import deepspeed`, then
# `import mixprec.torch as deepspeed`), and compares what it reports.
# A small GPT-2 from transformers, built from a config (no download), its
# position embedding frozen. Call run(mode, stage, tmpdir) -> dict; on
# several ranks each takes its share of the micro-batches (RANK and
# WORLD_SIZE of the launcher's environment) and tmpdir is shared.
# (own_optimizer=True: a torch.optim.AdamW object instead of the section.)
import argparse
import json
import os

import deepspeed
import torch
import transformers


# Built outside deepspeed.zero.Init: DeepSpeed 0.19.8's Init fails under
# torch 2.15 as it patches the tensor constructors (torch/_dynamo's
# "Signature mismatch between get_new_tensor_fn_for_dtype.<locals>.
# new_tensor and tensor_pynew"); tests/torch-zero3-worker.py builds its
# model in mixprec.torch.zero.Init.
def model_and_data(seed=0):
    config = transformers.GPT2Config(vocab_size=64, n_positions=16, n_embd=32, n_layer=2,
                                     n_head=2, bos_token_id=0, eos_token_id=0,
                                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    torch.manual_seed(seed)
    model = transformers.GPT2LMHeadModel(config)
    model.transformer.wpe.requires_grad_(False)
    g = torch.Generator().manual_seed(seed + 1)
    # A learnable sequence: each token is the previous one plus 1 or 2.
    steps = torch.randint(1, 3, (48, 4, 16), generator=g)
    batches = [torch.cumsum(s, dim=1) % 64 for s in steps]
    return model, batches


def ds_config(mode, stage):
    return {
        "train_micro_batch_size_per_gpu": 4,
        "gradient_accumulation_steps": 2,
        "gradient_clipping": 1.0,
        mode: {"enabled": True, **({"initial_scale_power": 8} if mode == "fp16" else {})},
        # Under ZeRO-3 even this small model's parameters are partitioned
        # (none is below the persistence threshold).
        "zero_optimization": {"stage": stage,
                              **({"stage3_param_persistence_threshold": 0} if stage == 3 else {})},
        "optimizer": {"type": "AdamW",
                      "params": {"lr": 3e-3, "betas": [0.9, 0.95], "eps": 1e-8,
                                 "weight_decay": 0.01, "torch_adam": True}},
        "scheduler": {"type": "WarmupLR",
                      "params": {"warmup_min_lr": 0, "warmup_max_lr": 3e-3,
                                 "warmup_num_steps": 4, "warmup_type": "linear"}},
    }


def train(engine, batches, report):
    for x in batches:
        loss = engine(x, labels=x).loss
        engine.backward(loss)
        boundary = engine.is_gradient_accumulation_boundary()
        # p.grad between the boundary's backward and its step.
        grads_none = all(p.grad is None for p in engine.module.parameters() if p.requires_grad)
        engine.step()
        report["loss"].append(loss.item())
        report["boundary"].append(boundary)
        if boundary:
            report["lr"].append(engine.get_lr()[0])
            report["steps"].append(engine.global_steps)
            report["grads_none"].append(grads_none)


def my_share(batches):
    """This rank's micro-batches: rank r of W (the launcher's RANK and
    WORLD_SIZE) takes every W-th, from the r-th."""
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    return batches[rank::world]


def client_optimizer(model):
    parameters = [p for p in model.parameters() if p.requires_grad]
    return torch.optim.AdamW(parameters, lr=3e-3, betas=(0.9, 0.95), eps=1e-8,
                             weight_decay=0.01)


def run(mode, stage, tmpdir, n_before=8, n_after=8, own_optimizer=False):
    """own_optimizer: a torch.optim.AdamW object instead of the config's
    optimizer section."""
    model, batches = model_and_data()
    batches = my_share(batches)
    wpe = model.transformer.wpe.weight.detach().clone()
    wte = model.transformer.wte.weight
    config = ds_config(mode, stage)
    if own_optimizer:
        del config["optimizer"]
    # One file per rank: the ranks share tmpdir, and a rank that reads the
    # file while another rewrites it would read it empty.
    config_file = os.path.join(tmpdir, "ds_config.%s.json" % os.environ.get("RANK", "0"))
    with open(config_file, "w") as f:
        json.dump(config, f)
    parser = deepspeed.add_config_arguments(argparse.ArgumentParser())
    args = parser.parse_args(["--deepspeed", "--deepspeed_config", config_file])
    deepspeed.init_distributed()
    parameters = filter(lambda p: p.requires_grad, model.parameters())
    engine, optimizer, _, lr_scheduler = deepspeed.initialize(
        args=args, model=model, model_parameters=parameters,
        optimizer=client_optimizer(model) if own_optimizer else None)
    report = {"loss": [], "boundary": [], "lr": [], "steps": [], "grads_none": [],
              "wpe_dtype": str(model.transformer.wpe.weight.dtype)}
    train(engine, batches[:n_before], report)
    ckpt_dir = os.path.join(tmpdir, "checkpoints")
    engine.save_checkpoint(ckpt_dir, tag="ckpt", client_state={"seen": n_before})
    train(engine, batches[n_before:n_before + n_after], report)
    # Under ZeRO-3 the weights are read whole inside GatheredParameters
    # (which changes nothing at other stages).
    with deepspeed.zero.GatheredParameters([model.transformer.wpe.weight, wte]):
        weight = model.transformer.wpe.weight
        report["wpe_unchanged"] = torch.equal(weight.detach().float(),
                                              wpe.to(weight.dtype).float())
        report["tied"] = model.lm_head.weight is wte and tuple(wte.shape) == (64, 32)
        report["wte_sum"] = wte.detach().float().sum().item()
    report["wte_numel_outside"] = wte.numel()
    report["wpe_numel_outside"] = model.transformer.wpe.weight.numel()
    if hasattr(getattr(engine, "engine", None), "get_memory_report"):
        # mixprec.torch: the bytes of whole gradient buffers it allocated.
        report["gradient_bytes"] = engine.engine.get_memory_report().gradients

    # Resume in a fresh engine from the checkpoint.
    model2, _ = model_and_data(seed=5)
    parameters = filter(lambda p: p.requires_grad, model2.parameters())
    engine2, _, _, _ = deepspeed.initialize(
        model=model2, model_parameters=parameters, config=config,
        optimizer=client_optimizer(model2) if own_optimizer else None)
    path, client_state = engine2.load_checkpoint(ckpt_dir, tag="ckpt")
    report["client_state"] = client_state.get("seen") if client_state else None
    report["steps_after_load"] = engine2.global_steps
    resumed = {"loss": [], "boundary": [], "lr": [], "steps": [], "grads_none": []}
    train(engine2, batches[n_before:n_before + n_after], resumed)
    report["resumed"] = resumed
    return report
