#!/usr/bin/env python3
# test-fp4-views-torch.py — a parameter's 4-bit working copy as views:
# mixprec.torch's engine.get_fp4_copy() and the GI override's param.fp4
# give uint8 tensors sharing the engine's memory (the addresses of
# mixprec_param_get_fp4_address()), holding the bytes mixprec_quantize_blocks()
# gives for the FP32 master; the torch code of docs/reference/fp4-views.md,
# run as it stands there, decodes them to the bits of the engine's own
# mixprec_param_dequantize_fp4(), and its fp4_linear() equals
# torch.nn.functional.linear on that matrix; the views follow the copy
# through a step; NVFP4 1x16, NVFP4 16x16 and MXFP4. Prints TAP.
import os
import re
import struct

from python_optional import require  # noqa: E402

require("torch", "PYTHON_TORCH")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import gi  # noqa: E402
gi.require_version("GLib", "2.0")
gi.require_version("Mixprec", "1.0")
from gi.repository import GLib, Mixprec  # noqa: E402

import mixprec.torch  # noqa: E402
from python_tap import check, report  # noqa: E402

torch.set_num_threads(1)


# The documentation's code block, run as written.
doc_path = os.path.join(os.environ.get("G_TEST_SRCDIR", os.path.dirname(os.path.abspath(__file__))),
                        "..", "docs", "reference", "fp4-views.md")
with open(doc_path, encoding="utf-8") as f:
    blocks = re.findall(r"```python\n(.*?)```", f.read(), re.S)
check("docs/reference/fp4-views.md has one python block", len(blocks) == 1, len(blocks))
example = {}
exec(compile(blocks[0], doc_path, "exec"), example)
dequantize_fp4 = example["dequantize_fp4"]
fp4_linear = example["fp4_linear"]


def model():
    torch.manual_seed(5)
    return nn.Sequential(nn.Linear(64, 96), nn.GELU(), nn.Linear(96, 32))


def config(fp4):
    return {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1,
            "optimizer": {"type": "AdamW", "params": {"lr": 0.01}},
            "bf16": {"enabled": True},
            "fp4": dict({"enabled": True, "modules": ["Linear"]}, **fp4)}


def f32_bits(t):
    return t.contiguous().view(torch.int32)


def same_bits(a, b):
    a, b = a.float(), b.float()
    nan = torch.isnan(a) & torch.isnan(b)
    return bool(((f32_bits(a) == f32_bits(b)) | nan).all())


def train(engine, steps, seed):
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        x = torch.randn(4, 64, generator=g).to(torch.bfloat16)
        loss = engine(x).float().square().mean()
        engine.backward(loss)
        engine.step()


CASES = [("nvfp4", {"recipe": "nvfp4", "weights_2d": False}, Mixprec.BlockRecipe.NVFP4),
         ("nvfp4_2d", {"recipe": "nvfp4", "weights_2d": True}, Mixprec.BlockRecipe.NVFP4_2D),
         ("mxfp4", {"recipe": "mxfp4", "scale_mode": "rceil"}, Mixprec.BlockRecipe.MXFP4)]

for label, fp4, recipe in CASES:
    m = model()
    engine = mixprec.torch.initialize(m, config(fp4))
    train(engine, 2, 1)
    x = torch.randn(3, 64, generator=torch.Generator().manual_seed(9)).to(torch.bfloat16)
    for name, p in m.named_parameters():
        if p.dim() < 2:
            continue
        mp = engine.engine.get_param(name)
        data, scales, ts, rname = engine.get_fp4_copy(p)
        rows, cols = p.shape
        bs = Mixprec.block_recipe_get_block_size(recipe)
        address, scales_address, n_scales, dev_type, dev_id = mp.get_fp4_address()
        check(f"{label} {name}: recipe '{rname}', uint8 {list(data.shape)} and {list(scales.shape)}",
              rname == label and data.dtype == torch.uint8 and scales.dtype == torch.uint8
              and tuple(data.shape) == (rows, cols // 2) and tuple(scales.shape) == (rows, cols // bs)
              and n_scales == rows * cols // bs and (dev_type, dev_id) == (1, 0),
              (rname, data.dtype, tuple(data.shape), tuple(scales.shape), n_scales))
        check(f"{label} {name}: the tensors are the engine's memory (no copy)",
              data.data_ptr() == address and scales.data_ptr() == scales_address
              and engine.get_fp4_copy(name)[0].data_ptr() == address)
        # Independent expectation: the master quantised by the library.
        master = np.array(mp.master, dtype=np.float32)
        q, sc, ts_q = Mixprec.quantize_blocks(recipe, Mixprec.MxScaleMode.RCEIL,
                                              GLib.Bytes.new(master.tobytes()), cols,
                                              Mixprec.Rounding.NEAREST_EVEN, 0)
        check(f"{label} {name}: bytes, scales and tensor scale are mixprec_quantize_blocks() "
              "of the master",
              data.numpy().tobytes() == q.get_data() and scales.numpy().tobytes() == sc.get_data()
              and struct.pack("<f", ts) == struct.pack("<f", ts_q), (ts, ts_q))
        ours = torch.from_numpy(np.frombuffer(mp.dequantize_fp4().get_data(),
                                              dtype=np.float32).copy()).reshape(p.shape)
        w = dequantize_fp4(data, scales, ts, rname, p.shape)
        check(f"{label} {name}: the example's decode is mixprec_param_dequantize_fp4() bit for bit",
              w.dtype == torch.float32 and same_bits(w, ours))
        check(f"{label} {name}: the decode is near the master (a 4-bit copy of it)",
              float((w - torch.from_numpy(master).reshape(p.shape)).abs().max())
              <= float(torch.from_numpy(master).abs().max()) / 2)
        bias = dict(m.named_parameters())[name[:-len("weight")] + "bias"]
        xin = x if name.startswith("0.") else \
            torch.randn(3, 96, generator=torch.Generator().manual_seed(10)).to(torch.bfloat16)
        y = fp4_linear(xin, engine, p, bias)
        check(f"{label} {name}: fp4_linear() is F.linear on the decoded weight",
              torch.equal(y, F.linear(xin, ours.to(torch.bfloat16), bias)))
    # The views follow the engine's memory through a step.
    first = m[0].weight
    data, scales, ts, _ = engine.get_fp4_copy(first)
    before = data.clone()
    train(engine, 1, 2)
    fresh = engine.engine.get_param("0.weight").fp4
    check(f"{label}: after a step the views hold the new copy",
          bytes(data.numpy().tobytes()) == fresh.data.tobytes()
          and bytes(scales.numpy().tobytes()) == fresh.scales.tobytes()
          and not torch.equal(before, data))
    try:
        engine.get_fp4_copy(m[0].bias)
        check(f"{label}: a bias (one dimension) has no 4-bit copy: ValueError", False)
    except ValueError as e:
        check(f"{label}: a bias (one dimension) has no 4-bit copy: ValueError", "0.bias" in str(e), str(e))
    try:
        engine.get_fp4_copy("nope.weight")
        check(f"{label}: an unknown name: ValueError", False)
    except ValueError as e:
        check(f"{label}: an unknown name: ValueError", "nope.weight" in str(e), str(e))
    try:
        engine.engine.get_param("0.bias").fp4
        check(f"{label}: param.fp4 of a parameter that is not fp4 raises GLib.Error", False)
    except GLib.Error as e:
        check(f"{label}: param.fp4 of a parameter that is not fp4 raises GLib.Error", "fp4" in e.message,
              e.message)
    engine.close()

report()
