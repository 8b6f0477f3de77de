#!/usr/bin/env python3
# test-numerics-gi.py — mixprec.numerics through GObject Introspection:
# random fp16 gradients of wide range (zeros, subnormals, values whose
# FP32 sums exceed fp16, normal ones) summed over two micro-batches into
# FP32, and every statistic of the engine's MixprecNumerics computed again
# with numpy from the gradients and the masters read around the step:
# fp16 rounding by numpy's own float32 -> float16 cast, ulps by
# numpy.spacing. Prints TAP.
import math
import struct
import sys
import warnings

import gi
gi.require_version("GLib", "2.0")
gi.require_version("Mixprec", "1.0")
from gi.repository import GLib, Mixprec  # noqa: E402

from python_optional import require  # noqa: E402

# numpy comes with torch in the venv of build-aux/install-deps.sh.
require("numpy", "PYTHON_TORCH")
import numpy as np  # noqa: E402

results = []


def check(name, cond):
    results.append((name, bool(cond)))


def close(a, b, rel=1e-12):
    return a == b or abs(a - b) <= rel * max(abs(a), abs(b))


MODEL = [("h.0.attn.weight", "Linear", 6000),
         ("h.0.ln.weight", "LayerNorm", 100),
         ("h.0.attn.bias", "Linear", 777)]
GAS = 2
SCALE = 16.0

rng = np.random.default_rng(28)


def fp16_gradient(n):
    """fp16 values (as float32) of every kind the statistics tell apart."""
    r = rng.random(n)
    g = (rng.standard_normal(n) * np.exp2(rng.integers(-14, 8, n))).astype(np.float16)
    g[r < 0.10] = 0
    sub = (r >= 0.10) & (r < 0.20)
    g[sub] = (rng.integers(1, 1024, sub.sum()) * 2.0**-24).astype(np.float16)
    big = (r >= 0.20) & (r < 0.26)
    g[big] = (np.sign(rng.standard_normal(big.sum())) *
              rng.uniform(30000, 65504, big.sum())).astype(np.float16)
    return g.astype(np.float32)


def as_bytes(a):
    return GLib.Bytes.new(np.ascontiguousarray(a, dtype=np.float32).tobytes())


def floats(b):
    return np.frombuffer(b.get_data(), dtype=np.float32).copy()


config = Mixprec.Config.new_from_data(
    '{"fp16": {"enabled": true, "initial_scale_power": 4},'
    ' "data_types": {"grad_accum_dtype": "fp32"},'
    ' "gradient_accumulation_steps": %d,'
    ' "optimizer": {"type": "AdamW", "params": {"lr": 0.001, "weight_decay": 0.0}},'
    ' "mixprec": {"numerics": {"every": 1}}}' % GAS)
engine = Mixprec.Engine.new(config)
params = {}
for name, mtype, n in MODEL:
    init = (rng.standard_normal(n) * np.exp2(rng.integers(-4, 12, n))).astype(np.float32)
    params[name] = engine.register_param(name, [n], mtype, Mixprec.DType.FLOAT32, as_bytes(init))

check("no numerics before a step", engine.get_numerics() is None)
check("stat names", list(Mixprec.Numerics.get_stat_names()) ==
      ["grad_amax", "grad_norm", "grad_nonfinite", "grad_underflow", "grad_overflow",
       "stale", "update_ratio", "fp8_saturation", "fp8_underflow", "fp8_scale",
       "shadow_rel_l2", "shadow_max_ulp"])

# Step 1: applied.
sums = {}
before = {name: floats(params[name].get_master()) for name, _, _ in MODEL}
for m in range(GAS):
    for name, _, n in MODEL:
        g = fp16_gradient(n)
        # The engine's FP32 accumulation: the first micro-batch, then
        # FP32 sums rounded once.
        sums[name] = g if m == 0 else (sums[name] + g).astype(np.float32)
        params[name].set_grad(Mixprec.DType.FLOAT32, as_bytes(g))
    engine.backward_done()
result = engine.step()
check("step 1 applied", result.applied)
numerics = engine.get_numerics()
check("numerics of step 1", numerics is not None and numerics.get_step() == 1 and numerics.get_applied())
check("parameters in registration order", list(numerics.list_params()) == [m[0] for m in MODEL])
check("module types in order of first parameter", list(numerics.list_module_types()) == ["Linear", "LayerNorm"])

divisor = SCALE * GAS


def expected(names):
    """Every statistic of the parameters @names taken together, from
    numpy alone."""
    g = np.concatenate([sums[n] for n in names])
    old = np.concatenate([before[n] for n in names]).astype(np.float64)
    new = np.concatenate([floats(params[n].get_master()) for n in names]).astype(np.float64)
    work = np.concatenate([floats(params[n].get_working(Mixprec.DType.FLOAT32)) for n in names])
    finite = np.isfinite(g)
    nz = finite & (g != 0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        h = g[nz].astype(np.float16)          # round to nearest even, inf beyond 65520
    d = new - old
    half_ulp = np.spacing(np.abs(work.astype(np.float16))).astype(np.float64) / 2
    return {
        "grad_amax": float(np.max(np.abs(g[finite]))) / divisor,
        "grad_norm": math.sqrt(float(np.sum(g.astype(np.float64) ** 2))) / divisor,
        "grad_nonfinite": float(np.sum(~finite)) / g.size,
        "grad_underflow": float(np.sum(np.abs(h) < 2.0**-14)) / nz.sum(),
        "grad_overflow": float(np.sum(np.isinf(h))) / nz.sum(),
        "stale": float(np.sum(np.abs(d) < half_ulp)) / g.size,
        "update_ratio": math.sqrt(float(np.sum(d * d))) / math.sqrt(float(np.sum(old * old))),
    }


def compare(label, want, got_fn, stats_fn):
    check("%s: the statistics that apply" % label, list(stats_fn()) == list(want))
    for stat, value in want.items():
        ok, got = got_fn(stat)
        # Norms are sums in another order; the update's squares are
        # summed in FP32 within each block.
        rel = {"grad_norm": 1e-12, "update_ratio": 1e-5}.get(stat)
        check("%s %s = %r (got %r)" % (label, stat, value, got),
              ok and (got == value if rel is None else close(got, value, rel)))


for name, _, _ in MODEL:
    compare(name, expected([name]), lambda s, name=name: numerics.get_stat(name, s),
            lambda name=name: numerics.list_stats(name))
compare("Linear", expected(["h.0.attn.weight", "h.0.attn.bias"]),
        lambda s: numerics.get_module_stat("Linear", s), lambda: numerics.list_module_stats("Linear"))
compare("LayerNorm", expected(["h.0.ln.weight"]),
        lambda s: numerics.get_module_stat("LayerNorm", s), lambda: numerics.list_module_stats("LayerNorm"))

# The crafted kinds were all present.
want = expected(["h.0.attn.weight"])
check("some underflow and some overflow", 0 < want["grad_underflow"] < 1 and 0 < want["grad_overflow"] < 1)
check("some stale elements and some not", 0 < want["stale"] < 1)
check("unknown parameter or statistic", not numerics.get_stat("nope", "grad_amax")[0] and
      not numerics.get_stat("h.0.attn.weight", "fp8_scale")[0] and list(numerics.list_stats("nope")) == [])

# Step 2: an infinite gradient skips the step: gradient statistics only.
for m in range(GAS):
    for name, _, n in MODEL:
        g = fp16_gradient(n)
        if m == 0 and name == "h.0.attn.bias":
            g[5] = np.inf
        params[name].set_grad(Mixprec.DType.FLOAT32, as_bytes(g))
    engine.backward_done()
result = engine.step()
numerics = engine.get_numerics()
check("step 2 skipped", not result.applied and not numerics.get_applied() and numerics.get_step() == 2)
check("skipped: gradient statistics only",
      list(numerics.list_stats("h.0.attn.bias")) ==
      ["grad_amax", "grad_norm", "grad_nonfinite", "grad_underflow", "grad_overflow"])
check("skipped: the non-finite fraction",
      numerics.get_stat("h.0.attn.bias", "grad_nonfinite") == (True, 1 / 777) and
      numerics.get_module_stat("Linear", "grad_nonfinite") == (True, 1 / 6777))

# FP8 copies (E4M3 forward): values beyond 448 once scaled saturate, tiny
# ones become zero codes. Under delayed scaling a step of lr 5000 moves
# every value past the amax the scale was made from: most saturate;
# current scaling scales the new values, and none does, while values 2^-16
# of the largest become zero codes.
for recipe in ("delayed", "current", "mx"):
    config = Mixprec.Config.new_from_data(
        '{"bf16": {"enabled": true},'
        ' "optimizer": {"type": "AdamW", "params": {"lr": %g, "weight_decay": 0.0}},'
        ' "fp8": {"enabled": true, "recipe": "%s", "modules": ["Linear"]},'
        ' "mixprec": {"numerics": {"every": 1}}}' % (5000 if recipe == "delayed" else 1e-6, recipe))
    engine = Mixprec.Engine.new(config)
    n = 3000
    init = (rng.standard_normal(n) * np.exp2(rng.integers(-16, 11, n))).astype(np.float32)
    init[::97] = 0
    p = engine.register_param("fc.weight", [30, 100], "Linear", Mixprec.DType.FLOAT32, as_bytes(init))
    p.set_grad(Mixprec.DType.FLOAT32, as_bytes(rng.standard_normal(n).astype(np.float32)))
    engine.backward_done()
    engine.step()
    numerics = engine.get_numerics()
    master = floats(p.get_master())
    codes = np.frombuffer(p.get_fp8_data().get_data(), dtype=np.uint8)
    nz = master != 0
    underflow = float(np.sum(nz & ((codes & 0x7f) == 0))) / nz.sum()
    check("fp8 %s: fp8_underflow = %r" % (recipe, underflow),
          numerics.get_stat("fc.weight", "fp8_underflow") == (True, underflow) and
          (underflow > 0 or recipe == "delayed"))
    if recipe == "mx":
        # Each block of 32 scaled by its E8M0 byte: 2^(127 - e). The FLOOR
        # rule leaves a block's largest values between 448 and 896, and
        # beyond 464 the cast clamps them.
        e = np.frombuffer(p.get_fp8_block_scales().get_data(), dtype=np.uint8).astype(np.int64)
        inv = np.exp2(127 - e).astype(np.float32).repeat(32)[:n]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            saturation = float(np.sum(np.abs(master * inv) > 464.0)) / n
        check("fp8 mx: no per-tensor scale", not numerics.get_stat("fc.weight", "fp8_scale")[0])
        check("fp8 mx: fp8_saturation = %r, the blocks' own" % saturation,
              numerics.get_stat("fc.weight", "fp8_saturation") == (True, saturation) and saturation > 0)
        continue
    scale = p.get_fp8_scaling().get_scale()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # Saturated: rounded to nearest even the scaled value would leave
        # E4M3. Up to 464, half-way to the 480 the format lacks, it rounds
        # back to 448 (the tie to 448's even significand).
        saturation = float(np.sum(np.abs(master * np.float32(scale)) > 464.0)) / n
    check("fp8 %s: fp8_scale = %r" % (recipe, scale), numerics.get_stat("fc.weight", "fp8_scale") == (True, scale))
    check("fp8 %s: fp8_saturation = %r" % (recipe, saturation),
          numerics.get_stat("fc.weight", "fp8_saturation") == (True, saturation) and
          (saturation > 0.5 if recipe == "delayed" else saturation == 0))
    check("fp8 %s: by module type" % recipe,
          numerics.get_module_stat("Linear", "fp8_underflow") == (True, underflow) and
          not numerics.get_module_stat("Linear", "fp8_scale")[0])

# Current scaling makes the amax times 448 / amax, and that FP32 product
# can land an ulp above 448: E4M3 rounds it to 448, so nothing saturates.
# A learning rate of 0 keeps the masters, so the amax is the one chosen.
edge = None
for a in np.float32(1) + np.arange(1, 400, dtype=np.float32) * np.float32(2 ** -13):
    if np.float32(a) * (np.float32(448) / np.float32(a)) <= np.float32(448):
        continue
    config = Mixprec.Config.new_from_data(
        '{"bf16": {"enabled": true},'
        ' "optimizer": {"type": "AdamW", "params": {"lr": 0.0, "weight_decay": 0.0}},'
        ' "fp8": {"enabled": true, "recipe": "current", "modules": ["Linear"]},'
        ' "mixprec": {"numerics": {"every": 1}}}')
    engine = Mixprec.Engine.new(config)
    init = (rng.uniform(-0.5, 0.5, 3000) * a).astype(np.float32)
    init[7] = a
    p = engine.register_param("fc.weight", [30, 100], "Linear", Mixprec.DType.FLOAT32, as_bytes(init))
    p.set_grad(Mixprec.DType.FLOAT32, as_bytes(rng.standard_normal(3000).astype(np.float32)))
    engine.backward_done()
    engine.step()
    master = floats(p.get_master())
    scaled = master * np.float32(p.get_fp8_scaling().get_scale())
    if np.max(np.abs(scaled)) > 448.0:
        edge = (a, engine, p, scaled)
        break
check("fp8 current: an amax whose scaled value rounds above 448 (%r)" % (edge and edge[0]), edge is not None)
if edge is not None:
    a, engine, p, scaled = edge
    codes = np.frombuffer(p.get_fp8_data().get_data(), dtype=np.uint8)
    check("fp8 current: that value is cast to 448 (0x7e), not saturated",
          codes[7] == 0x7E and float(np.max(np.abs(scaled))) < 464.0)
    check("fp8 current: fp8_saturation 0 at the rounding edge",
          engine.get_numerics().get_stat("fc.weight", "fp8_saturation") == (True, 0.0))

# The FP32 shadow. (a) With FP32 masters and FP32 state it steps exactly
# as the masters do: the working copy is the masters rounded to nearest
# even, 0 ulps from the shadow rounded, at the masters' relative
# distance.
config = Mixprec.Config.new_from_data(
    '{"fp16": {"enabled": true, "initial_scale_power": 4},'
    ' "optimizer": {"type": "AdamW", "params": {"lr": 0.01, "weight_decay": 0.01}},'
    ' "mixprec": {"numerics": {"every": 2, "shadow": ["*.weight"]}}}')
engine = Mixprec.Engine.new(config)
shadowed = {}
for name in ("a.weight", "a.bias"):
    init = rng.standard_normal(1000).astype(np.float32)
    shadowed[name] = engine.register_param(name, [1000], "Linear", Mixprec.DType.FLOAT32, as_bytes(init))
for step in range(4):
    for name, p in shadowed.items():
        p.set_grad(Mixprec.DType.FLOAT32, as_bytes((rng.standard_normal(1000) * 16).astype(np.float32)))
    engine.backward_done()
    engine.step()
numerics = engine.get_numerics()
m = floats(shadowed["a.weight"].get_master()).astype(np.float64)
w = floats(shadowed["a.weight"].get_working(Mixprec.DType.FLOAT32)).astype(np.float64)
rel = math.sqrt(float(np.sum((w - m) ** 2))) / math.sqrt(float(np.sum(m * m)))
ok, got = numerics.get_stat("a.weight", "shadow_rel_l2")
check("shadow of FP32 masters: measured at step 4", numerics.get_step() == 4)
check("shadow of FP32 masters: rel L2 = %r (got %r)" % (rel, got), ok and close(got, rel) and rel > 0)
check("shadow of FP32 masters: 0 ulps", numerics.get_stat("a.weight", "shadow_max_ulp") == (True, 0.0))
check("only the parameters shadow names", not numerics.get_stat("a.bias", "shadow_rel_l2")[0])


# (b) bf16 weights without masters, SGD: each step rounds the weights to
# bfloat16, and the shadow, SGD in FP32 (numpy here), drifts away.
def bf16_round(a):
    bits = a.astype(np.float32).view(np.uint32).astype(np.uint64)
    bits = ((bits + 0x7fff + ((bits >> 16) & 1)) >> 16) & 0xffff
    return bits.astype(np.uint16)


def ordinal16(bits):
    b = bits.astype(np.int64)
    return np.where(b & 0x8000, -(b & 0x7fff), b & 0x7fff)


config = Mixprec.Config.new_from_data(
    '{"bf16": {"enabled": true}, "optimizer": {"type": "SGD", "params": {"lr": 0.001}},'
    ' "mixprec": {"master_weights": "none", "numerics": {"every": 5, "shadow_fraction": 1.0}}}')
engine = Mixprec.Engine.new(config)
init = bf16_round(rng.standard_normal(2000).astype(np.float32))
init32 = (init.astype(np.uint32) << 16).view(np.float32)
p = engine.register_param("w", [2000], "Linear", Mixprec.DType.FLOAT32, as_bytes(init32))
shadow = init32.copy()
for step in range(5):
    g = rng.standard_normal(2000).astype(np.float32)
    p.set_grad(Mixprec.DType.FLOAT32, as_bytes(g))
    engine.backward_done()
    engine.step()
    # The engine reads the gradient as bfloat16 holds it.
    g16 = (bf16_round(g).astype(np.uint32) << 16).view(np.float32)
    shadow = (shadow - np.float32(0.001) * g16).astype(np.float32)
numerics = engine.get_numerics()
w = floats(p.get_working(Mixprec.DType.FLOAT32)).astype(np.float64)
rel = math.sqrt(float(np.sum((w - shadow) ** 2))) / math.sqrt(float(np.sum(shadow.astype(np.float64) ** 2)))
ulps = int(np.max(np.abs(ordinal16(bf16_round(w.astype(np.float32))) - ordinal16(bf16_round(shadow)))))
ok, got = numerics.get_stat("w", "shadow_rel_l2")
check("shadow without masters: rel L2 = %r (got %r)" % (rel, got), ok and close(got, rel, 1e-4) and rel > 1e-4)
ok, got_ulps = numerics.get_stat("w", "shadow_max_ulp")
check("shadow without masters: max ulps = %d (got %r)" % (ulps, got_ulps), ok and abs(got_ulps - ulps) <= 1 and ulps >= 1)
check("shadow by module type", numerics.get_module_stat("Linear", "shadow_rel_l2") == (True, got))

# An amax history too short for its tensor: SGD with lr 1 doubles every
# weight at odd steps and halves it at even ones, so the amax goes 2, 1,
# 2, 1. Delayed scaling takes the scale from the history before the
# cast: with amax_history_len 1 every doubling step casts values twice
# the amax its scale was made for, and the saturation series shows it at
# every other step; a history of 2 holds the larger amax, and after the
# first step (no history yet) nothing saturates.
for hist in (1, 2):
    config = Mixprec.Config.new_from_data(
        '{"bf16": {"enabled": true},'
        ' "optimizer": {"type": "SGD", "params": {"lr": 1.0, "momentum": 0.0, "weight_decay": 0.0}},'
        ' "fp8": {"enabled": true, "recipe": "delayed", "amax_history_len": %d, "modules": ["Linear"]},'
        ' "mixprec": {"numerics": {"every": 1}}}' % hist)
    engine = Mixprec.Engine.new(config)
    p = engine.register_param("fc.weight", [10, 100], "Linear", Mixprec.DType.FLOAT32,
                              as_bytes(np.linspace(-1, 1, 1000).astype(np.float32)))
    series, want = [], []
    for step in range(1, 9):
        w = floats(p.get_master())
        p.set_grad(Mixprec.DType.FLOAT32, as_bytes((-w if step % 2 == 1 else w / 2).astype(np.float32)))
        engine.backward_done()
        engine.step()
        scaled = floats(p.get_master()) * np.float32(p.get_fp8_scaling().get_scale())
        series.append(engine.get_numerics().get_stat("fc.weight", "fp8_saturation")[1])
        want.append(float(np.sum(np.abs(scaled) > 464.0)) / 1000)
    check("amax_history_len %d: fp8_saturation per step %r equals numpy's %r" % (hist, series, want),
          series == want)
    if hist == 1:
        check("history 1: every doubling step saturates, no halving step does",
              all(series[k] > 0.4 for k in range(0, 8, 2)) and all(series[k] == 0 for k in range(1, 8, 2)))
    else:
        check("history 2: only the first step saturates", series[0] > 0.4 and not any(series[1:]))

print("1..%d" % len(results))
for i, (name, ok) in enumerate(results, 1):
    print("%s %d - %s" % ("ok" if ok else "not ok", i, name))
sys.exit(0 if all(ok for _, ok in results) else 1)
