#!/usr/bin/env python3
# test-torch-zero3.py — mixprec.torch's ZeRO-3 on one process, against
# the same model at ZeRO-0 (whose arithmetic it must repeat bit for bit:
# on one process the engine's copies are whole, only the torch side is
# partitioned): a tied head, a frozen embedding, an FP32 LayerNorm, a
# parameter used by another module (register_external_parameter); the
# placeholders and ds_* attributes, GatheredParameters (modifier_rank
# included) and what it refuses, p.grad, a view kept past the forward,
# step() inside a gather, evaluation, save_16bit_model and close().
# Prints TAP.
import os
import sys
import tempfile
import warnings

from python_optional import require

require("torch", "PYTHON_TORCH")

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import mixprec.torch  # noqa: E402
from gi.repository import GLib  # noqa: E402

torch.set_num_threads(1)
warnings.simplefilter("ignore")
zero = mixprec.torch.zero
results = []


def check(name, cond, detail=""):
    results.append((name, bool(cond), detail))


class Head(nn.Module):
    """Reads another module's weight in its forward (as some models
    do): under ZeRO-3 it must be registered as an external parameter."""

    def __init__(self, embedding):
        super().__init__()
        self.embedding = [embedding]    # not a submodule

    def forward(self, h):
        return F.linear(h, self.embedding[0].weight)


class Model(nn.Module):
    def __init__(self, external=False):
        super().__init__()
        self.wte = nn.Embedding(16, 8)
        self.wpe = nn.Embedding(6, 8)
        self.ln = nn.LayerNorm(8)
        self.fc = nn.Linear(8, 8)
        self.out = nn.Embedding(16, 8)
        if external:
            self.head = Head(self.out)
        else:
            self.head = nn.Linear(8, 16, bias=False)
            self.head.weight = self.wte.weight

    def forward(self, x):
        h = self.wte(x) + self.wpe(torch.arange(x.shape[1]))
        return self.head(F.gelu(self.fc(self.ln(h))))


def model(seed=3, external=False):
    torch.manual_seed(seed)
    m = Model(external)
    m.wpe.requires_grad_(False)
    if not external:
        m.out.requires_grad_(False)
    return m


def data(n):
    g = torch.Generator().manual_seed(1)
    return [(torch.randint(16, (4, 6), generator=g), torch.randint(16, (4, 6), generator=g))
            for _ in range(n)]


def config(stage, **extra):
    doc = {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2,
           "bf16": {"enabled": True}, "gradient_clipping": 1.0,
           "zero_optimization": {"stage": stage, "stage3_param_persistence_threshold": 0},
           "mixprec": {"fp32_modules": ["LayerNorm"]},
           "optimizer": {"type": "AdamW", "params": {"lr": 0.01}}}
    doc.update(extra)
    return doc


def ce(logits, y):
    return F.cross_entropy(logits.float().reshape(-1, 16), y.reshape(-1))


def train(engine, batches):
    losses = []
    for x, y in batches:
        loss = ce(engine(x), y)
        engine.backward(loss)
        engine.step()
        losses.append(loss.item())
    return losses


def masters(engine):
    return {name: bytes(engine.engine.gather_master(name).get_data())
            for name in engine.params}


def error_of(fn):
    try:
        fn()
    except Exception as e:
        return e
    return None


batches = data(8)
ref_model = model()
ref = mixprec.torch.initialize(ref_model, config(0))
ref_losses = train(ref, batches)
m3 = model()
z3 = mixprec.torch.initialize(m3, config(3))
z3_losses = train(z3, batches)
check("ZeRO-3 on one process repeats ZeRO-0 bit for bit: every loss and every FP32 master "
      "(tied head, frozen embedding, FP32 LayerNorm)",
      z3_losses == ref_losses and masters(z3) == masters(ref), (z3_losses, ref_losses))
ref_masters = masters(ref)       # ZeRO-0's after the 8 steps, before the blocks below

w = m3.fc.weight
check("outside a gather a partitioned parameter is an empty bf16 placeholder with DeepSpeed's "
      "ds_shape, ds_numel and ds_status",
      w.numel() == 0 and w.dtype == torch.bfloat16 and w.ds_shape == torch.Size([8, 8]) and
      w.ds_numel == 64 and w.ds_status == zero.ZeroParamStatus.NOT_AVAILABLE,
      (w.shape, w.dtype, getattr(w, "ds_shape", None)))
check("the frozen embedding is partitioned too, as DeepSpeed partitions frozen parameters: "
      "an empty bf16 placeholder (cast to the model's dtype, as at ZeRO-0) with ds_shape and "
      "ds_status, and no gradient",
      m3.wpe.weight.numel() == 0 and m3.wpe.weight.dtype == torch.bfloat16 and
      m3.wpe.weight.ds_shape == torch.Size([6, 8]) and
      m3.wpe.weight.ds_status == zero.ZeroParamStatus.NOT_AVAILABLE and
      not m3.wpe.weight.requires_grad and m3.wpe.weight.grad is None and
      ref_model.wpe.weight.dtype == torch.bfloat16 and "wpe.weight" not in z3.params,
      (m3.wpe.weight.shape, m3.wpe.weight.dtype))
check("the LayerNorm kept in FP32 is partitioned too, its placeholder FP32",
      m3.ln.weight.numel() == 0 and m3.ln.weight.dtype == torch.float32)
with zero.GatheredParameters([m3.fc.weight, m3.head.weight, m3.wpe.weight]):
    inside = (m3.fc.weight.detach().clone(), m3.head.weight.detach().clone(),
              m3.fc.weight.ds_status, m3.wpe.weight.detach().clone())
check("GatheredParameters makes them whole: the working copies ZeRO-0 trains, the tied head "
      "is wte, the frozen embedding ZeRO-0's bf16 values",
      torch.equal(inside[0], ref_model.fc.weight.detach()) and
      torch.equal(inside[1], ref_model.wte.weight.detach()) and
      torch.equal(inside[3], ref_model.wpe.weight.detach()) and
      inside[2] == zero.ZeroParamStatus.AVAILABLE and m3.fc.weight.numel() == 0 and
      m3.wpe.weight.numel() == 0)
check("p.grad of a partitioned parameter stays None at the boundary, as DeepSpeed's",
      all(p.grad is None for p in m3.parameters()))

before = ref_model.fc.weight.detach().clone()
with zero.GatheredParameters([ref_model.fc.weight], modifier_rank=0):
    pass
check("GatheredParameters(modifier_rank=0) of a parameter that is not partitioned (ZeRO-0) "
      "leaves it alone, as DeepSpeed's", torch.equal(before, ref_model.fc.weight.detach()))


e = error_of(lambda: zero.GatheredParameters([m3.fc.weight], modifier_rank=1))
check("GatheredParameters(modifier_rank=1) on one process is refused, naming modifier_rank",
      isinstance(e, ValueError) and "modifier_rank" in str(e), e)


def slots(engine, name):
    return [bytes(engine.engine.get_optimizer_state(name, s).get_data())
            for s in engine.engine.get_optimizer_state_names()]


state_before = slots(z3, "fc.weight")
with zero.GatheredParameters([m3.fc.weight], modifier_rank=0):
    with torch.no_grad():
        m3.fc.weight.mul_(0.5).add_(0.125)          # in bfloat16
    written = m3.fc.weight.detach().float().clone()
master = torch.frombuffer(bytearray(z3.engine.gather_master("fc.weight").get_data()),
                          dtype=torch.float32).reshape(8, 8)
with zero.GatheredParameters([m3.fc.weight]):
    working = m3.fc.weight.detach().float().clone()
check("GatheredParameters(modifier_rank=0): what the block wrote, widened, is the FP32 master "
      "and the working copy afterwards; the optimizer state is left as it was",
      torch.equal(master, written) and torch.equal(working, written) and
      not torch.equal(written, ref_model.fc.weight.detach().float()) and
      slots(z3, "fc.weight") == state_before and m3.fc.weight.numel() == 0,
      (master, written))
# ZeRO-0 given the same FP32 values through the engine.
ref.engine.set_master("fc.weight", GLib.Bytes.new(written.numpy().tobytes()), 0)
after3, after0 = train(z3, batches[:4]), train(ref, batches[:4])
check("... and it trains on as ZeRO-0 given the same values (mixprec_engine_set_master): every "
      "loss and every FP32 master", after3 == after0 and masters(z3) == masters(ref),
      (after3, after0))


def step_inside():
    with zero.GatheredParameters([m3.fc.weight]):
        z3.backward(ce(z3(batches[0][0]), batches[0][1]))
        z3.step()
        z3.backward(ce(z3(batches[0][0]), batches[0][1]))
        z3.step()


e = error_of(step_inside)
check("step() inside GatheredParameters is refused naming the gathered parameter",
      isinstance(e, RuntimeError) and "fc.weight" in str(e), e)

with torch.no_grad():
    out3 = z3(batches[0][0])
    out0 = ref(batches[0][0])
check("evaluation under no_grad gathers and releases: the output of ZeRO-0's weights",
      torch.equal(out3, out0) and m3.fc.weight.numel() == 0)

with tempfile.TemporaryDirectory() as tmp:
    z3.save_16bit_model(tmp, "z3.bin")
    ref.save_16bit_model(tmp, "z0.bin")
    a = torch.load(os.path.join(tmp, "z3.bin"))
    b = torch.load(os.path.join(tmp, "z0.bin"))
check("save_16bit_model gathers: the state_dict ZeRO-0 saves, tied head included",
      sorted(a) == sorted(b) and all(torch.equal(a[k], b[k]) for k in a), sorted(a))


class Keeper(nn.Linear):
    def forward(self, x):
        self.kept = self.weight[0]              # a view kept past the forward
        return super().forward(x)


keeper = Keeper(4, 4)
k3 = mixprec.torch.initialize(keeper, config(3))
k3(torch.randn(2, 4, dtype=torch.bfloat16))
kept = keeper.kept.clone()
with zero.GatheredParameters([keeper.weight]):
    row = keeper.weight[0].clone()
check("a view of a gathered weight kept past its module's forward stays readable, the "
      "weight's values, while the parameter is released",
      torch.equal(kept, row) and keeper.weight.numel() == 0, (kept, row))


def modify_mid_step():
    # gradient_accumulation_steps 2: one backward pass, the step to come.
    k3.backward(k3(torch.randn(2, 4, dtype=torch.bfloat16)).float().sum())
    k3.step()
    with zero.GatheredParameters([keeper.weight], modifier_rank=0):
        keeper.weight.detach().zero_()


e = error_of(modify_mid_step)
check("GatheredParameters(modifier_rank=0) left between a backward pass and its step is "
      "refused (the engine's error, naming the parameter and step())",
      isinstance(e, mixprec.torch.Error) and "weight" in str(e) and "step()" in str(e), e)


# Activation checkpointing: the layers recomputed in the backward gather
# again (torch.utils.checkpoint, both of its modes, on the modules' calls
# as Hugging Face's gradient checkpointing does).
def checkpointed(m, reentrant):
    def forward(x):
        h = m.wte(x) + m.wpe(torch.arange(x.shape[1]))
        for layer in (m.ln, m.fc):
            h = torch.utils.checkpoint.checkpoint(layer.__call__, h, use_reentrant=reentrant)
        return m.head(F.gelu(h))
    m.forward = forward
    return m


for reentrant in (False, True):
    a = train(mixprec.torch.initialize(checkpointed(model(), reentrant), config(0)), batches[:4])
    b = train(mixprec.torch.initialize(checkpointed(model(), reentrant), config(3)), batches[:4])
    check("activation checkpointing (use_reentrant=%s) at ZeRO-3 repeats ZeRO-0 bit for bit"
          % reentrant, a == b and a[-1] < a[0], (a, b))

# A parameter another module's forward reads.
ext_ref = mixprec.torch.initialize(model(external=True), config(0))
ext_losses = train(ext_ref, batches[:4])
m_ext = model(external=True)
e3 = mixprec.torch.initialize(m_ext, config(3))
e = error_of(lambda: e3(batches[0][0]))
zero.register_external_parameter(m_ext.head, m_ext.out.weight)
e3b = mixprec.torch.initialize(model(external=True), config(3))
zero.register_external_parameter(e3b.module.head, e3b.module.out.weight)
ext3 = train(e3b, batches[:4])
check("a weight read by another module fails without register_external_parameter and trains "
      "as at ZeRO-0 with it",
      e is not None and ext3 == ext_losses, (e, ext3, ext_losses))

# close(): the model stands alone again.
z3.close()
with torch.no_grad():
    alone = m3(batches[1][0])
    expected = ref(batches[1][0])
check("close() gives every partitioned parameter its whole working copy back",
      m3.fc.weight.shape == (8, 8) and torch.equal(alone, expected) and
      not hasattr(m3.fc.weight, "ds_id"))

m_persist = model()
persist = mixprec.torch.initialize(m_persist, config(3, zero_optimization={"stage": 3}))
check("with DeepSpeed's default stage3_param_persistence_threshold (100000) this small model "
      "is not partitioned, as in DeepSpeed",
      all(p.numel() > 0 for p in m_persist.parameters()) and persist._zero3 is None)

# initialize() drops each torch copy once the engine holds its values;
# a failure before the engine is prepared gives them back.
torch.manual_seed(5)
broken = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))
broken[1].register_parameter("odd", nn.Parameter(torch.zeros(2, dtype=torch.complex64)))
before = [p.detach().clone() for p in broken.parameters()]
e = error_of(lambda: mixprec.torch.initialize(broken, config(3)))
check("a parameter refused at ZeRO-3 initialize() leaves every parameter's values as they were",
      isinstance(e, TypeError) and "odd" in str(e) and
      all(torch.equal(a, b.detach()) for a, b in zip(before, broken.parameters())), e)

# stage3_max_reuse_distance is mixprec.torch's to read (the library
# ignores it): a value DeepSpeed would refuse is an error naming it.
for bad in (-1, 2.5, "far", True):
    e = error_of(lambda: mixprec.torch.initialize(model(), config(
        3, zero_optimization={"stage": 3, "stage3_max_reuse_distance": bad})))
    check(f"stage3_max_reuse_distance {bad!r} is refused naming the key and the value",
          isinstance(e, ValueError) and "stage3_max_reuse_distance" in str(e) and
          repr(bad) in str(e), e)

# zero.Init on one process partitions too (one chunk each, the whole
# values), as DeepSpeed's over one rank: empty placeholders from
# construction on, which initialize() makes whole again and registers
# (ZeRO-3 partitions them again on the torch side).
for stage in (3, 0):
    torch.manual_seed(3)
    with zero.Init():
        m_init = Model(False)
    built_empty = all(p.numel() == 0 for p in m_init.parameters())
    m_init.wpe.requires_grad_(False)
    m_init.out.requires_grad_(False)
    init_engine = mixprec.torch.initialize(m_init, config(stage))
    init_losses = train(init_engine, batches)
    check(f"zero.Init on one process leaves every parameter an empty placeholder beside its "
          f"chunk, and ZeRO-{stage} trains the model as ZeRO-0 built without it: every loss and "
          f"FP32 master bit for bit",
          built_empty and init_losses == ref_losses and masters(init_engine) == ref_masters,
          (built_empty, init_losses[:2], ref_losses[:2]))

# On several ranks of the cuda device the engine joins the ranks itself:
# Init cannot partition before it, and says so.
os.environ["MIXPREC_WORLD_SIZE"] = "2"
try:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with zero.Init(config={"mixprec": {"device": "cuda"}}):
            whole = nn.Linear(4, 4)
finally:
    del os.environ["MIXPREC_WORLD_SIZE"]
said = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
check("zero.Init on 2 ranks of the cuda device partitions nothing and says why in a "
      "RuntimeWarning naming the device",
      whole.weight.numel() == 16 and len(said) == 1 and "'cuda'" in said[0] and
      "zero.Init" in said[0], said)

# offload_param on the cpu device: the parameters are in host memory
# already, so it is accepted as a documented no-op (with or without
# offload_optimizer), a ConfigWarning naming it, and trains as without.
for extra in ({"offload_param": {"device": "cpu"}},
              {"offload_param": {"device": "cpu"}, "offload_optimizer": {"device": "cpu"}}):
    zo = dict({"stage": 3, "stage3_param_persistence_threshold": 0}, **extra)
    m_off = model()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        off = mixprec.torch.initialize(m_off, config(3, zero_optimization=zo))
    said = [str(w.message) for w in caught if issubclass(w.category, mixprec.torch.ConfigWarning)
            and "offload_param" in str(w.message)]
    off_losses = train(off, batches)
    check("offload_param on the cpu device (%s): accepted with a ConfigWarning naming it and "
          "saying that nothing moves, and ZeRO-0's losses and masters bit for bit"
          % ", ".join(sorted(extra)),
          len(said) == 1 and "nothing to offload" in said[0] and off_losses == ref_losses and
          masters(off) == ref_masters, (said, off_losses[:2], ref_losses[:2]))

print(f"1..{len(results)}")
for i, (name, ok, detail) in enumerate(results, 1):
    print(f"{'ok' if ok else 'not ok'} {i} - {name}")
    if not ok and detail != "":
        print(f"#   {detail!r}"[:2000])
sys.exit(0 if all(ok for _, ok, _ in results) else 1)
