#!/usr/bin/env python3
# test-torch-front.py — mixprec.torch, the DeepSpeed-shaped front for
# PyTorch models, on the cpu device: a model trained through it ends bit
# for bit where the same engine driven through the plain GI calls
# (gradients as GLib.Bytes, weights read back as copies) ends; its
# parameters are the engine's working copies; fp32_modules keeps a
# LayerNorm in FP32 by class name; the loss is scaled and an overflow
# skipped; a checkpoint round trip resumes the same run; mixprec.master_weights
# "remainder" trains as FP32 masters do, and int8 moments through the same
# keys. Prints TAP.
import ctypes
import json
import math
import os
import sys
import tempfile

from python_optional import require  # noqa: E402

require("torch", "PYTHON_TORCH")

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import gi  # noqa: E402
gi.require_version("GLib", "2.0")
gi.require_version("Mixprec", "1.0")
from gi.repository import GLib, Mixprec  # noqa: E402

import mixprec.torch  # noqa: E402

torch.set_num_threads(1)
results = []


def check(name, cond, detail=""):
    results.append((name, bool(cond), detail))


TORCH_DTYPE = {Mixprec.DType.FLOAT32: torch.float32, Mixprec.DType.FLOAT16: torch.float16,
               Mixprec.DType.BFLOAT16: torch.bfloat16}


class Toy(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(27, 16)
        self.ln = nn.LayerNorm(16)
        self.fc = nn.Linear(16, 32)
        self.head = nn.Linear(32, 27)

    def forward(self, x):
        return self.head(F.gelu(self.fc(self.ln(self.emb(x)))))


def toy(seed=7):
    torch.manual_seed(seed)
    return Toy()


def data(n_micro, seed=11):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randint(27, (8, 6), generator=g), torch.randint(27, (8, 6), generator=g))
            for _ in range(n_micro)]


def config(mode, **extra):
    doc = {"train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 1,
           "gradient_clipping": 0.5,
           "optimizer": {"type": "AdamW", "params": {"lr": 0.01, "weight_decay": 0.01}}}
    if mode == "bf16":
        doc["bf16"] = {"enabled": True}
    elif mode == "fp16":
        doc["fp16"] = {"enabled": True, "initial_scale_power": 12, "hysteresis": 1}
    doc.update(extra)
    return doc


def ce(logits, y):
    return F.cross_entropy(logits.float().reshape(-1, 27), y.reshape(-1))


def raw(t):
    t = t.detach().contiguous()
    return ctypes.string_at(t.data_ptr(), t.numel() * t.element_size())


def train_front(doc, batches, gas):
    model = toy()
    engine = mixprec.torch.initialize(model, doc)
    losses = []
    for i in range(0, len(batches), gas):
        for x, y in batches[i:i + gas]:
            loss = ce(engine(x), y)
            engine.backward(loss)
            losses.append(loss.item())
            r = engine.step()
    return engine, model, losses, r


def train_plain(doc, batches, gas, fp32_ln):
    """The same training through the plain GI calls: weights read as
    copies (get_working), gradients handed over as GLib.Bytes (set_grad),
    the LayerNorm's FP32 input and output casts written out."""
    engine = Mixprec.Engine.new(Mixprec.Config.new_from_data(json.dumps(doc)))
    model = toy()
    params = []
    for mname, module in model.named_modules():
        for pname, p in module.named_parameters(recurse=False):
            w = p.detach().float().contiguous()
            params.append((p, engine.register_param(f"{mname}.{pname}", list(p.shape),
                                                    type(module).__name__, Mixprec.DType.FLOAT32,
                                                    GLib.Bytes.new(raw(w)))))
    engine.prepare()
    low = TORCH_DTYPE[params[0][1].get_working_dtype()]

    def load():
        for p, mp in params:
            dt = mp.get_working_dtype()
            b = bytearray(mp.get_working(dt).get_data())
            p.data = torch.frombuffer(b, dtype=TORCH_DTYPE[dt]).reshape(p.shape)

    def forward(x):
        h = model.emb(x)
        h = model.ln(h.float()).to(low) if fp32_ln else model.ln(h)
        return model.head(F.gelu(model.fc(h)))

    losses = []
    load()
    for i in range(0, len(batches), gas):
        for x, y in batches[i:i + gas]:
            loss = ce(forward(x), y)
            (loss.float() * engine.get_loss_scale()).backward()
            for p, mp in params:
                mp.set_grad(TORCH_DTYPE_INV[p.grad.dtype], GLib.Bytes.new(raw(p.grad)))
                p.grad = None
            engine.backward_done()
            losses.append(loss.item())
        r = engine.step()
        load()
    return engine, params, losses, r


TORCH_DTYPE_INV = {v: k for k, v in TORCH_DTYPE.items()}

# ---- (a) the front against the plain GI path, bit for bit
cases = [("bf16", 2, {"mixprec": {"fp32_modules": ["LayerNorm"]}}, True),
         ("fp16", 1, {}, False),
         ("bf16", 1, {}, False)]
for mode, gas, extra, fp32_ln in cases:
    extra = dict(extra, gradient_accumulation_steps=gas)
    doc = config(mode, **extra)
    batches = data(6 * gas)
    e1, m1, l1, r1 = train_front(doc, batches, gas)
    e2, p2, l2, r2 = train_plain(doc, batches, gas, fp32_ln)
    label = f"{mode}, gas {gas}{', LayerNorm fp32' if fp32_ln else ''}"
    check(f"{label}: the losses through mixprec.torch equal the plain GI path's bit for bit",
          l1 == l2 and all(math.isfinite(v) for v in l1), (l1, l2))
    same = all(e1.params[mp.get_name()].get_master().get_data() == mp.get_master().get_data()
               for _, mp in p2)
    check(f"{label}: the FP32 masters after 6 steps are bit-identical", same)
    same = all(raw(dict(m1.named_parameters())[mp.get_name()]) ==
               mp.get_working(mp.get_working_dtype()).get_data() for _, mp in p2)
    check(f"{label}: the model's weights are the plain path's working copies, bit for bit", same)
    check(f"{label}: the same steps applied, skipped and scale",
          (r1.applied_steps, r1.skipped_steps, r1.loss_scale) ==
          (r2.applied_steps, r2.skipped_steps, r2.loss_scale) and r1.applied_steps > 0,
          ((r1.applied_steps, r1.skipped_steps, r1.loss_scale),
           (r2.applied_steps, r2.skipped_steps, r2.loss_scale)))
    check(f"{label}: training lowered the loss", l1[-1] < l1[0], l1)

# ---- (b) the parameters are the engine's working copies
model = toy()
engine = mixprec.torch.initialize(model, config("bf16"))
named = dict(model.named_parameters())
shared = all(named[name].data_ptr() ==
             mp.get_buffer_address(Mixprec.ParamBuffer.WORKING)[0]
             and named[name].dtype == torch.bfloat16
             for name, mp in engine.params.items())
check("every parameter's data_ptr is the engine's working buffer, in bfloat16",
      shared and sorted(engine.params) == sorted(named), sorted(engine.params))
before = {n: p.detach().clone() for n, p in named.items()}
x, y = data(1)[0]
engine.backward(ce(engine(x), y))
r = engine.step()
after_ptr = all(named[n].data_ptr() == mp.get_buffer_address(Mixprec.ParamBuffer.WORKING)[0]
                for n, mp in engine.params.items())
moved = all(not torch.equal(before[n], named[n]) for n in ("fc.weight", "head.weight"))
check("a step writes the new weights into the model's own tensors",
      r.applied and after_ptr and moved)
check("the gradients were handed over and dropped (no .grad left on the model)",
      all(p.grad is None for p in model.parameters()))
check("module types are the modules' class names",
      [engine.params[n].get_module_type() for n in ("emb.weight", "ln.weight", "fc.bias")]
      == ["Embedding", "LayerNorm", "Linear"])

# ---- (c) fp32_modules by class name
model = toy()
engine = mixprec.torch.initialize(model, config("bf16", mixprec={"fp32_modules": ["LayerNorm"]}))
dtypes = {n: p.dtype for n, p in model.named_parameters()}
check("fp32_modules [\"LayerNorm\"]: the LayerNorm stays FP32, the rest is bf16",
      dtypes == {"emb.weight": torch.bfloat16, "ln.weight": torch.float32, "ln.bias": torch.float32,
                 "fc.weight": torch.bfloat16, "fc.bias": torch.bfloat16,
                 "head.weight": torch.bfloat16, "head.bias": torch.bfloat16}, dtypes)
seen = {}
model.ln.register_forward_hook(lambda m, a, o: seen.update(ln_in=a[0].dtype, ln_out=o.dtype))
out = engine(data(1)[0][0])
check("the FP32 LayerNorm computes in FP32 and hands bf16 on",
      seen == {"ln_in": torch.float32, "ln_out": torch.bfloat16} and out.dtype == torch.bfloat16,
      (seen, out.dtype))

# ---- (d) loss scaling, and an overflow skipped
model = toy()
engine = mixprec.torch.initialize(model, config("fp16"))
scale = engine.loss_scale
x, y = data(1)[0]
captured = {}
model.head.weight.register_hook(lambda g: captured.update(g=g.detach().float().clone()))
reference = torch.autograd.grad(ce(model(x), y), model.head.weight)[0].float()
engine.backward(ce(engine(x), y))
ratio = (captured["g"] / scale - reference).abs().max().item()
check(f"backward multiplies the loss by the engine's scale ({scale:g})",
      scale == 2.0 ** 12 and ratio <= 1e-3 * reference.abs().max().item(), ratio)
r = engine.step()
check("the first step applies", r.applied and engine.skipped_steps == 0)
working = {n: raw(p) for n, p in model.named_parameters()}
h = model.fc.weight.register_hook(lambda g: g * float("inf"))
engine.backward(ce(engine(x), y))
h.remove()
r = engine.step()
check("an injected inf is skipped: weights unchanged, skipped_steps 1, scale halved",
      not r.applied and engine.skipped_steps == 1 and engine.loss_scale == scale / 2 and
      not engine.was_step_applied() and
      all(raw(p) == working[n] for n, p in model.named_parameters()),
      (r.applied, engine.skipped_steps, engine.loss_scale))
engine.backward(ce(engine(x), y))
check("training goes on after the skip", engine.step().applied)

# ---- (e) checkpoint round trip
with tempfile.TemporaryDirectory() as tmp:
    doc = config("bf16")
    batches = data(6)
    model = toy()
    engine = mixprec.torch.initialize(model, doc)
    for x, y in batches[:3]:
        engine.backward(ce(engine(x), y))
        engine.step()
    engine.save_checkpoint(tmp, tag="t3")
    saved = {n: raw(p) for n, p in model.named_parameters()}
    tail = []
    for x, y in batches[3:]:
        loss = ce(engine(x), y)
        engine.backward(loss)
        engine.step()
        tail.append(loss.item())

    model2 = toy(seed=99)                  # other initial weights
    engine2 = mixprec.torch.initialize(model2, doc)
    path = engine2.load_checkpoint(tmp)
    named2 = dict(model2.named_parameters())
    check("load_checkpoint restores the saved weights into the model",
          all(raw(named2[n]) == saved[n] for n in saved) and
          all(named2[n].data_ptr() == mp.get_buffer_address(Mixprec.ParamBuffer.WORKING)[0]
              for n, mp in engine2.params.items()), path)
    tail2 = []
    for x, y in batches[3:]:
        loss = ce(engine2(x), y)
        engine2.backward(loss)
        r = engine2.step()
        tail2.append(loss.item())
    check("the resumed run repeats the uninterrupted one bit for bit",
          tail == tail2 and r.step == 6, (tail, tail2, r.step))

# ---- mixprec.master_weights and mixprec.optimizer_states through the front
# Remainder masters keep the FP32 master exactly: with FP32 moments the run
# is the FP32-master run, working copies and losses bit for bit (the
# working copy differs only where the master lies exactly halfway between
# two bf16 values, ties away from zero; none here). int8 moments take the
# same keys and still train.
batches = data(4)
fp32_engine, fp32_model, fp32_losses, _ = train_front(config("bf16"), batches, 1)
rem_engine, rem_model, rem_losses, _ = train_front(
    config("bf16", mixprec={"master_weights": "remainder"}), batches, 1)
check("master_weights remainder through the front: the FP32-master run, bit for bit",
      rem_losses == fp32_losses and
      all(raw(a) == raw(b) for a, b in zip(fp32_model.parameters(), rem_model.parameters())),
      (rem_losses, fp32_losses))
cfg = rem_engine.engine.get_config()
numel = sum(p.numel() for p in rem_model.parameters())
check("the front's engine keeps 2 bytes of remainder per parameter for the 4 of an FP32 master",
      cfg.get_master_weights() == Mixprec.MasterWeights.REMAINDER and
      rem_engine.engine.get_memory_report().masters == 2 * numel and
      fp32_engine.engine.get_memory_report().masters == 4 * numel,
      (rem_engine.engine.get_memory_report().masters, numel))
q_engine, q_model, q_losses, _ = train_front(
    config("bf16", mixprec={"master_weights": "remainder",
                            "optimizer_states": {"exp_avg": "int8", "exp_avg_sq": "int8",
                                                 "block_size": 256}}), data(8), 1)
cfg = q_engine.engine.get_config()
state = q_engine.engine.get_memory_report().optimizer_state
check("int8 moments through the front: the keys reach the engine, a byte per moment (each unit in whole blocks of 256), less than bf16 moments, and the loss falls",
      cfg.get_optimizer_state_format("exp_avg") == Mixprec.StateFormat.INT8 and
      cfg.get_optimizer_state_block_size() == 256 and 2 * numel <= state < 4 * numel and
      all(math.isfinite(v) for v in q_losses) and q_losses[-1] < q_losses[0], (q_losses, state))

# ---- errors
engine3 = mixprec.torch.initialize(toy(), config("bf16", zero_optimization={
    "stage": 3, "stage3_param_persistence_threshold": 0}))
check("ZeRO-3 is taken: the trained parameters are partitioned (empty placeholders; "
      "test-torch-zero3.py trains them)",
      all(p.numel() == 0 for p in engine3.module.parameters() if p.requires_grad))
try:
    mixprec.torch.initialize(toy(), config("bf16", zero_optimization={"stage": 4}))
    msg = ""
except ValueError as e:
    msg = str(e)
check("ZeRO stage 4 is refused with a message naming the key", "stage" in msg, msg)
try:
    mixprec.torch.initialize(toy(), 42)
    msg = ""
except TypeError as e:
    msg = str(e)
check("a config of the wrong type is refused with a message", "config must be" in msg, msg)

# ---- devices: a cpu engine's model stays on the cpu; other devices are refused
front = mixprec.torch.initialize(toy(), config("bf16"))
check("a cpu engine's front is on the cpu device, its views in host memory (DLPack kDLCPU)",
      front.device == torch.device("cpu") and
      all(p.working.__dlpack_device__() == (1, 0) for p in front.params.values()),
      front.device)
try:
    mixprec.torch.initialize(toy().to("meta"), config("bf16"))
    msg = ""
except ValueError as e:
    msg = str(e)
check("a model on a device other than cpu and cuda is refused with a message", "meta" in msg, msg)
try:
    mixprec.torch.initialize(toy(), config("bf16", mixprec={"device": "nvme"}))
    msg = ""
except (ValueError, GLib.Error) as e:
    msg = str(e)
check("a device other than cpu and cuda is refused with a message", "nvme" in msg, msg)

# ---- 1.0's keyword spelling, initialize(model=..., config=...): still the
# engine (attributes and calls), and DeepSpeed's tuple when unpacked.
model = toy()
got = mixprec.torch.initialize(model=model, config=config("bf16"))
x, y = data(1)[0]
got.backward(ce(got(x), y))
r = got.step()
eng, opt, loader, sched = got
check("initialize(model=, config=) still acts as the engine, and unpacks as DeepSpeed's tuple",
      r.applied and eng is got[0] and got.global_steps == 1 and loader is None,
      (r.applied, got.global_steps, loader))

print(f"1..{len(results)}")
for i, (name, ok, detail) in enumerate(results, 1):
    print(f"{'ok' if ok else 'not ok'} {i} - {name}")
    if not ok and detail != "":
        print(f"#   {detail!r}"[:2000])
sys.exit(0 if all(ok for _, ok, _ in results) else 1)
