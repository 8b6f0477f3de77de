#!/usr/bin/env python3
# test-torch-cuda.py — mixprec.torch on the cuda device: a model moved to
# the GPU (model.cuda()) trains through an engine whose buffers are in GPU
# memory; its parameters are CUDA views of the engine's working copies
# (DLPack kDLCUDA, the same addresses), and its gradients go to the engine
# by device address. The gradients the model produced are recorded and
# replayed into an engine on the cpu device through the plain GI calls
# (GLib.Bytes): masters, working copies, norms and scales must match bit
# for bit after every step. Skips, with the reason, where no GPU is usable
# (no CUDA in torch, cudaGetDeviceCount failing, no device-cuda plugin).
# Prints TAP.
import ctypes
import json
import os
import sys

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


def skip_all(reason):
    if os.environ.get("MIXPREC_REQUIRE_GPU"):
        print("1..1\nnot ok 1 - a GPU is required (MIXPREC_REQUIRE_GPU): %s" % reason)
        sys.exit(1)
    print("1..0 # SKIP %s" % reason)
    sys.exit(0)


if not torch.cuda.is_available():
    skip_all("no usable GPU: torch.cuda.is_available() is False (cudaGetDeviceCount fails "
             "or this torch has no CUDA)")

torch.set_num_threads(1)
results = []


def check(name, cond, detail=""):
    results.append((name, bool(cond), detail))


MIXPREC_DTYPE = {torch.float32: Mixprec.DType.FLOAT32, torch.float16: Mixprec.DType.FLOAT16,
                 torch.bfloat16: Mixprec.DType.BFLOAT16}


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


def raw(t):
    t = t.detach().to("cpu").contiguous()
    return ctypes.string_at(t.data_ptr(), t.numel() * t.element_size())


def config(mode, device):
    doc = {"train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 2,
           "gradient_clipping": 0.5,
           "optimizer": {"type": "AdamW", "params": {"lr": 0.01, "weight_decay": 0.01}},
           "mixprec": {"device": device, "fp32_modules": ["LayerNorm"]}}
    if mode == "bf16":
        doc["bf16"] = {"enabled": True}
    else:
        doc["fp16"] = {"enabled": True, "initial_scale_power": 12, "hysteresis": 1}
    return doc


def same_state(a, b):
    """Names of the parameters whose master or working copy differ."""
    bad = []
    for name, pa in a.items():
        pb = b[name]
        dt = pa.get_working_dtype()
        if (pa.get_master().get_data() != pb.get_master().get_data() or
                pa.get_working(dt).get_data() != pb.get_working(dt).get_data()):
            bad.append(name)
    return bad


def run(mode, steps=3):
    model = toy().cuda()
    try:
        front = mixprec.torch.initialize(model, config(mode, "cuda"))
    except GLib.Error as e:
        skip_all("no usable cuda device for the engine: %s" % e.message)
    ordinal = front.device.index
    check("%s: the front is on the engine's GPU" % mode,
          front.device.type == "cuda" and all(p.device == front.device for p in model.parameters()),
          front.device)
    shares = True
    for name, mp in front.params.items():
        address, _, dl_type, dl_id = mp.get_device_address(Mixprec.ParamBuffer.WORKING)
        tensor = dict(model.named_parameters())[name]
        shares &= (dl_type, dl_id) == (2, ordinal) and tensor.data_ptr() == address
        shares &= mp.working.__dlpack_device__() == (2, ordinal)
    check("%s: parameters are CUDA views of the engine's working copies (kDLCUDA)" % mode, shares)

    # The gradients autograd hands the front, recorded on the way.
    recorded = []
    for name, p in model.named_parameters():
        p.register_hook(lambda g, name=name: recorded.append((name, g.detach().to("cpu").clone())))

    cpu = Mixprec.Engine.new(Mixprec.Config.new_from_data(json.dumps(config(mode, "cpu"))))
    init = dict(toy().named_parameters())
    plain = {}
    for name, mp in front.params.items():
        plain[name] = cpu.register_param(name, list(mp.get_shape()), mp.get_module_type(),
                                         Mixprec.DType.FLOAT32,
                                         GLib.Bytes.new(raw(init[name].float())))
    cpu.prepare()
    check("%s: the engines start from the same state" % mode, not same_state(front.params, plain))

    g = torch.Generator().manual_seed(11)
    for step in range(1, steps + 1):
        for _ in range(2):
            x = torch.randint(27, (8, 6), generator=g)
            y = torch.randint(27, (8, 6), generator=g)
            del recorded[:]
            loss = F.cross_entropy(front(x.cuda()).float().reshape(-1, 27), y.cuda().reshape(-1))
            front.backward(loss)
            for name, grad in recorded:
                plain[name].reduce_grad(MIXPREC_DTYPE[grad.dtype], GLib.Bytes.new(raw(grad)))
            cpu.backward_done()
        a = front.step()
        b = cpu.step()
        check("%s step %d: the same step result (norm %g, scale %g)" % (mode, step, a.grad_norm,
                                                                        a.loss_scale),
              (a.applied, a.grad_norm, a.loss_scale, a.clip_coef, a.next_loss_scale) ==
              (b.applied, b.grad_norm, b.loss_scale, b.clip_coef, b.next_loss_scale),
              ((a.grad_norm, a.loss_scale), (b.grad_norm, b.loss_scale)))
        bad = same_state(front.params, plain)
        check("%s step %d: masters and working copies bit for bit" % (mode, step), not bad, bad)
        model_bits = all(raw(p) == plain[n].get_working(plain[n].get_working_dtype()).get_data()
                         for n, p in model.named_parameters())
        check("%s step %d: the model's CUDA weights are the new working copies" % (mode, step),
              model_bits)
    front.close()


run("bf16")
run("fp16")

print("1..%d" % len(results))
for i, (name, ok, detail) in enumerate(results, 1):
    print("%s %d - %s" % ("ok" if ok else "not ok", i, name))
    if not ok and detail != "":
        print(("#   %r" % (detail,))[:2000])
sys.exit(0 if all(ok for _, ok, _ in results) else 1)
