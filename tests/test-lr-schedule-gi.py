#!/usr/bin/env python3
# test-lr-schedule-gi.py — the learning-rate schedules through GObject
# Introspection, against DeepSpeed's formulas evaluated by Python itself
# (the same float operations DeepSpeed's lr_schedules.py performs), and a
# few values worked out by hand.
import math
import sys

import gi
gi.require_version("GLib", "2.0")
gi.require_version("Json", "1.0")
gi.require_version("Mixprec", "1.0")
from gi.repository import GLib, Json, Mixprec  # noqa: E402

results = []


def check(name, cond):
    results.append((name, bool(cond)))


def params(text):
    return Json.from_string(text).get_object()


def deepspeed_cosine_lr(org_lr, total, warmup, last_batch_iteration,
                        warmup_min_ratio=0.0, cos_min_ratio=0.0001, linear=False):
    """WarmupCosineLR.get_lr()[0] of DeepSpeed 0.19."""
    warmup = max(2, warmup)
    if last_batch_iteration < 0:
        return 0.0
    if last_batch_iteration < warmup:
        if linear:
            ratio = last_batch_iteration / warmup
        else:
            ratio = (1.0 / math.log(warmup)) * math.log(last_batch_iteration + 1)
        return org_lr * (warmup_min_ratio + ratio * (1. - warmup_min_ratio))
    real_last_step = last_batch_iteration - warmup + 1
    real_total_steps = max(1, total - warmup)
    progress = min(1.0, real_last_step / real_total_steps)
    ratio = (1 + math.cos(math.pi * progress)) / 2
    return org_lr * max(0.0, cos_min_ratio + (1. - cos_min_ratio) * ratio)


def deepspeed_warmup_decay_lr(min_lr, max_lr, warmup, total, last_batch_iteration, linear=False):
    """WarmupDecayLR.get_lr()[0] of DeepSpeed 0.19."""
    warmup = max(2, warmup)
    if last_batch_iteration < 0:
        return min_lr
    if last_batch_iteration < warmup:
        if linear:
            gamma = last_batch_iteration / warmup
        else:
            gamma = (1.0 / math.log(warmup)) * math.log(last_batch_iteration + 1)
    else:
        gamma = max(0.0, float(total - last_batch_iteration) / float(max(1.0, total - warmup)))
    return min_lr + ((max_lr - min_lr) * gamma)


# Hand-computed: linear warmup from 0 to 0.01 over 10 steps. The first two
# applied steps run at the minimum (DeepSpeed's last_batch_iteration -1, 0).
s = Mixprec.LrSchedule.new("WarmupLR", params(
    '{"warmup_min_lr": 0, "warmup_max_lr": 0.01, "warmup_num_steps": 10, "warmup_type": "linear"}'), 0.1)
check("WarmupLR linear literal values",
      [s.get_lr_at(p) for p in (0, 1, 6, 11, 500)] == [0.0, 0.0, 0.005, 0.01, 0.01])
check("type name", s.get_type_name() == "WarmupLR" and s.props.type_name == "WarmupLR")

# Advancing: the position counts applied steps only.
for _ in range(6):
    s.advance()
check("position after six applied steps", s.get_position() == 6 and s.get_lr() == 0.005)
s.set_position(0)
check("set_position", s.props.position == 0 and s.get_lr() == 0.0)

# WarmupCosineLR against Python's own evaluation, bit for bit, over the
# warmup, the cosine and the floor.
cos = Mixprec.LrSchedule.new("WarmupCosineLR", params(
    '{"total_num_steps": 300, "warmup_num_steps": 37, "warmup_min_ratio": 0.05}'), 3e-4)
check("WarmupCosineLR equals DeepSpeed's formula bitwise",
      all(cos.get_lr_at(p) == deepspeed_cosine_lr(3e-4, 300, 37, p - 1, warmup_min_ratio=0.05)
          for p in range(0, 400)))

dec = Mixprec.LrSchedule.new("WarmupDecayLR", params(
    '{"total_num_steps": 250, "warmup_num_steps": 20, "warmup_min_lr": 1e-5,'
    ' "warmup_max_lr": 6e-4, "warmup_type": "linear"}'), 1.0)
check("WarmupDecayLR equals DeepSpeed's formula bitwise",
      all(dec.get_lr_at(p) == deepspeed_warmup_decay_lr(1e-5, 6e-4, 20, 250, p - 1, linear=True)
          for p in range(0, 300)))

# The resolved parameters carry DeepSpeed's defaults.
d = cos.dup_params()
check("dup_params defaults",
      d.get_double_member("cos_min_ratio") == 0.0001 and d.get_string_member("warmup_type") == "log")

# From a configuration: the optimizer's lr is the base of WarmupCosineLR.
config = Mixprec.Config.new_from_data(
    '{"optimizer": {"type": "AdamW", "params": {"lr": 0.5}},'
    ' "scheduler": {"type": "WarmupCosineLR", "params": {"total_num_steps": 20,'
    ' "warmup_num_steps": 10, "warmup_type": "linear", "cos_min_ratio": 0}}}')
c = Mixprec.LrSchedule.new_from_config(config)
check("from config", c.get_lr_at(6) == 0.25 and c.get_lr_at(20) == 0.0 and c.props.base_lr == 0.5)

# Bad parameters raise GLib.Error naming the key.
try:
    Mixprec.LrSchedule.new("WarmupDecayLR", params('{"warmup_num_steps": 10}'), 1e-3)
    check("missing total_num_steps raises", False)
except GLib.Error as e:
    check("missing total_num_steps raises",
          e.matches(Mixprec.lr_schedule_error_quark(), Mixprec.LrScheduleError.MISSING_PARAM)
          and "scheduler.params.total_num_steps" in e.message)
try:
    Mixprec.LrSchedule.new("WarmupLR", params('{"warmup_typ": "linear"}'), 1e-3)
    check("unknown parameter raises with a suggestion", False)
except GLib.Error as e:
    check("unknown parameter raises with a suggestion", 'did you mean "warmup_type"' in e.message)

print("1..%d" % len(results))
for i, (name, ok) in enumerate(results, 1):
    print("%s %d - %s" % ("ok" if ok else "not ok", i, name))
sys.exit(0 if all(ok for _, ok in results) else 1)
