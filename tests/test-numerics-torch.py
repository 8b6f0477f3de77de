#!/usr/bin/env python3
# test-numerics-torch.py — mixprec.torch's get_numerics(): a toy model
# trained through the front with mixprec.numerics on; the statistics come
# back as plain dicts keyed by the model's parameter names and module
# classes, and each gradient's amax is the largest magnitude of the
# gradient torch's autograd produced, over the loss scale. Prints TAP.
import math
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


class Toy(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(27, 16)
        self.ln = nn.LayerNorm(16)
        self.fc = nn.Linear(16, 32)
        self.head = nn.Linear(32, 27)

    def forward(self, x):
        return self.head(F.gelu(self.fc(self.ln(self.emb(x)))))


torch.manual_seed(3)
model = Toy()
doc = {"train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 1,
       "fp16": {"enabled": True, "initial_scale_power": 10},
       "optimizer": {"type": "AdamW", "params": {"lr": 0.01}},
       "mixprec": {"numerics": {"every": 1}}}
engine = mixprec.torch.initialize(model, doc)
check("nothing before the first step", engine.get_numerics() is None)

g = torch.Generator().manual_seed(5)
x, y = torch.randint(27, (8, 6), generator=g), torch.randint(27, (8, 6), generator=g)
captured = {}
for name, p in model.named_parameters():
    p.register_hook(lambda grad, name=name: captured.update({name: grad.detach().float().clone()}))
scale = engine.loss_scale
engine.backward(F.cross_entropy(engine(x).float().reshape(-1, 27), y.reshape(-1)))
r = engine.step()
n = engine.get_numerics()
names = [name for name, _ in model.named_parameters()]
check("the step's numerics", n is not None and n["step"] == r.step == 1 and n["applied"])
check("every parameter by name", sorted(n["params"]) == sorted(names), sorted(n["params"]))
check("every module class", sorted(n["module_types"]) == ["Embedding", "LayerNorm", "Linear"],
      sorted(n["module_types"]))
for name in names:
    want = captured[name].abs().max().item() / scale
    got = n["params"][name]["grad_amax"]
    check("%s: grad_amax is torch's gradient amax over the loss scale" % name, got == want, (got, want))
    check("%s: fractions in [0, 1]" % name,
          all(0.0 <= n["params"][name][s] <= 1.0
              for s in ("grad_nonfinite", "grad_underflow", "grad_overflow", "stale")))
linear = [nm for nm in names if nm.startswith(("fc.", "head."))]
norm = math.sqrt(sum(n["params"][nm]["grad_norm"] ** 2 for nm in linear))
check("the Linear row's norm is the norm of its parameters'",
      math.isclose(n["module_types"]["Linear"]["grad_norm"], norm, rel_tol=1e-12))

print("1..%d" % len(results))
for i, (name, ok, detail) in enumerate(results, 1):
    print("%s %d - %s" % ("ok" if ok else "not ok", i, name))
    if not ok and detail != "":
        print("#   %r" % (detail,))
sys.exit(0 if all(ok for _, ok, _ in results) else 1)
