#!/usr/bin/env python3
# test-engine.py — the engine through GObject Introspection: register,
# write scaled gradients, step, read back; expectations from exact binary
# arithmetic and the published DeepSpeed scaler sequence.
import math
import struct
import sys

import gi
gi.require_version("GLib", "2.0")
gi.require_version("Mixprec", "1.0")
from gi.repository import GLib, Mixprec  # noqa: E402

results = []


def check(name, cond):
    results.append((name, bool(cond)))


def f32(*values):
    return GLib.Bytes.new(struct.pack("<%df" % len(values), *values))


def floats(b):
    data = b.get_data()
    return list(struct.unpack("<%df" % (len(data) // 4), data))


def engine(json):
    return Mixprec.Engine.new(Mixprec.Config.new_from_data(json))


# fp16 with a static scale of 1024: gradients of the scaled loss, SGD lr 1:
# the master moves by the unscaled gradient (0.25 and 2^-10 are exact).
e = engine('{"fp16": {"enabled": true, "loss_scale": 1024},'
           ' "optimizer": {"type": "SGD", "params": {"lr": 1.0}}}')
p = e.register_param("w", [1, 2], "Linear", Mixprec.DType.FLOAT32, f32(1.0, 1.0))
check("working dtype is fp16", p.get_working_dtype() == Mixprec.DType.FLOAT16)
check("loss scale", e.get_loss_scale() == 1024.0)
p.set_grad(Mixprec.DType.FLOAT32, f32(0.25 * 1024, 2.0**-10 * 1024))
e.backward_done()
r = e.step()
check("step applied", r.applied)
check("unscaled update", floats(p.get_master()) == [0.75, 1.0 - 2.0**-10])
check("grad norm", math.isclose(r.grad_norm, math.hypot(0.25, 2.0**-10), rel_tol=1e-12))

# The published DeepSpeed sequence through the engine.
e = engine('{"fp16": {"enabled": true, "initial_scale_power": 8,'
           ' "loss_scale_window": 2, "hysteresis": 2},'
           ' "optimizer": {"type": "SGD", "params": {"lr": 0.0}}}')
p = e.register_param("w", [2], "Linear", Mixprec.DType.FLOAT32, f32(1.0, 2.0))
scales = []
for _ in range(10):
    p.set_grad(Mixprec.DType.FLOAT32, f32(0.5, 0.25))
    e.backward_done()
    scales.append(e.step().next_loss_scale)
check("deepspeed scaler sequence", scales == [256, 256, 512, 512, 1024, 1024, 2048, 2048, 4096, 4096])

# An overflow is skipped and the weights stay put.
e = engine('{"fp16": {"enabled": true, "initial_scale_power": 4, "hysteresis": 1},'
           ' "optimizer": {"type": "AdamW", "params": {"lr": 0.1}}}')
p = e.register_param("w", [2, 2], "Linear", Mixprec.DType.FLOAT32, f32(1, 2, 3, 4))
before = p.get_master().get_data()
p.set_grad(Mixprec.DType.FLOAT32, f32(1, float("inf"), 1, 1))
e.backward_done()
r = e.step()
check("overflow skipped", not r.applied and r.skipped_steps == 1)
check("overflow leaves weights", p.get_master().get_data() == before)
check("scale halved", r.next_loss_scale == 8.0)

# Errors arrive as GLib.Error.
try:
    e.step()
    check("step before backward raises", False)
except GLib.Error as err:
    check("step before backward raises",
          err.matches(Mixprec.engine_error_quark(), Mixprec.EngineError.WRONG_STATE))

# micro_step(): None until the accumulation boundary, then the step's
# result; the same weights as backward_done() + step() (SGD lr 1, exact).
import os  # noqa: E402
import tempfile  # noqa: E402
with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
    f.write('{"gradient_accumulation_steps": 2,'
            ' "optimizer": {"type": "SGD", "params": {"lr": 1.0}}}')
try:
    e = Mixprec.Engine.new_from_file(f.name)
    check("new_from_file reads the file", e.get_gradient_accumulation_steps() == 2)
    p = e.register_param("w", [2], "Linear", Mixprec.DType.FLOAT32, f32(1.0, 2.0))
    p.set_grad(Mixprec.DType.FLOAT32, f32(0.5, 0.25))
    first = e.micro_step()
    p.set_grad(Mixprec.DType.FLOAT32, f32(0.25, 0.25))
    second = e.micro_step()
    check("micro_step returns None inside the window", first is None)
    check("micro_step returns the step at the boundary",
          isinstance(second, Mixprec.StepResult) and second.applied and second.step == 1)
    check("micro_step steps on the mean gradient", floats(p.get_master()) == [0.625, 1.75])
finally:
    os.unlink(f.name)
try:
    Mixprec.Engine.new_from_file(f.name)
    check("new_from_file of a missing file raises", False)
except GLib.Error as err:
    check("new_from_file of a missing file raises",
          err.matches(Mixprec.config_error_quark(), Mixprec.ConfigError.IO) and
          os.path.basename(f.name) in err.message)

# The buffer lists are arrays that own their boxed buffers: Python reads
# each one's fields (it copies them) without freeing them twice. AdamW
# over 4096 FP32-initialized bf16 elements: 2 B working copies and
# gradients, 4 B masters, 8 B of state per element.
e = engine('{"bf16": {"enabled": true}, "optimizer": {"type": "AdamW"}}')
e.register_param("w", [4096], "Linear", Mixprec.DType.FLOAT32, f32(*([1.0] * 4096)))
listed = {b.name: b.bytes for b in e.list_buffers()}
check("list_buffers names and bytes",
      listed.get("working copies") == 8192 and listed.get("gradients") == 8192 and
      listed.get("FP32 master weights") == 16384 and listed.get("optimizer state") == 32768)

print("1..%d" % len(results))
for i, (name, ok) in enumerate(results, 1):
    print("%s %d - %s" % ("ok" if ok else "not ok", i, name))
sys.exit(0 if all(ok for _, ok in results) else 1)
