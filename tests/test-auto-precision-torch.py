#!/usr/bin/env python3
# test-auto-precision-torch.py — mixprec.torch reads the engine's buffers
# through their addresses, which auto-precision moves when it widens a
# parameter: with mixprec.auto_precision on, the first step is refused
# with an error naming the key, and no parameter has moved. Prints TAP.
import sys

from python_optional import require  # noqa: E402

require("torch", "PYTHON_TORCH")

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import mixprec.torch  # noqa: E402

torch.set_num_threads(1)
results = []


def check(name, cond, detail=""):
    results.append((name, bool(cond), detail))


torch.manual_seed(3)
model = nn.Sequential(nn.Embedding(27, 16), nn.Linear(16, 27))
doc = {"train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 1,
       "fp16": {"enabled": True, "initial_scale_power": 10},
       "optimizer": {"type": "AdamW", "params": {"lr": 0.01}},
       "mixprec": {"numerics": {"every": 1}, "auto_precision": {}}}
engine = mixprec.torch.initialize(model, doc)
before = {name: p.detach().clone() for name, p in model.named_parameters()}
x, y = torch.randint(27, (8, 6)), torch.randint(27, (8, 6))
message = ""
try:
    engine.backward(F.cross_entropy(engine(x).float().reshape(-1, 27), y.reshape(-1)))
    engine.step()
except Exception as e:  # noqa: BLE001 — GLib.Error through the front
    message = str(e)
check("the step is refused", message != "")
check("naming mixprec.auto_precision and mixprec.torch",
      "mixprec.auto_precision" in message and "mixprec.torch" in message, message)
check("no parameter moved",
      all(torch.equal(before[name], p.detach()) for name, p in model.named_parameters()))

print("1..%d" % len(results))
for i, (name, ok, detail) in enumerate(results, 1):
    print("%s %d - %s" % ("ok" if ok else "not ok", i, name))
    if not ok and detail != "":
        print("#   %r" % (detail,))
sys.exit(0 if all(ok for _, ok, _ in results) else 1)
