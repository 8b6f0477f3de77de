#!/usr/bin/env python3
# test-comm-bytes-gi.py — the bytes-on-the-wire plan and count through
# GObject Introspection: Mixprec.CommBytes.plan_new for three parameters
# over 2 ranks worked out from the layout rules (units of at most 2^20
# elements padded to 2 x 4096 and sliced per rank; ZeRO-3 gathers each
# unit for the forward and the backward pass, reduces it once, and agrees
# on 8 bytes per 4096 elements of a slice), split over hosts, DeepSpeed's
# figures, and a one-process engine's count (nothing moves).
import sys

import gi
gi.require_version("GLib", "2.0")
gi.require_version("Mixprec", "1.0")
from gi.repository import GLib, Mixprec  # noqa: E402

results = []


def check(name, cond):
    results.append((name, bool(cond)))


config = Mixprec.Config.new_from_data(
    '{"bf16": {"enabled": true}, "zero_optimization": {"stage": 3, '
    '"stage3_param_persistence_threshold": 0}}')

# 3000 and 5000 share a unit padded to 8192, slices of 4096; 2^20 + 1 is
# a unit alone, padded to 1056768, slices of 528384. bf16: 2 bytes.
big = (1 << 20) + 1
slices = [4096, 528384]
plan = Mixprec.CommBytes.plan_new(config, [3000, 5000, big], 2, 0)
check("all-gather: two gathers of every slice to the one peer",
      plan.all_gather == sum(2 * s * 2 for s in slices))
check("reduce-scatter: one bf16 reduction per slice", plan.reduce_scatter == sum(s * 2 for s in slices))
check("scalars: the norm blocks as doubles", plan.scalars == sum((s + 4095) // 4096 * 8 for s in slices))
check("total, nothing across hosts on one host",
      plan.total == plan.all_gather + plan.reduce_scatter + plan.scalars and plan.inter_host == 0)
apart = Mixprec.CommBytes.plan_new(config, [3000, 5000, big], 2, 1)
check("one rank per host: everything across hosts",
      apart.inter_host == apart.total == plan.total
      and apart.inter_host_all_gather == plan.all_gather
      and apart.inter_host_reduce_scatter == plan.reduce_scatter)
try:
    Mixprec.CommBytes.plan_new(config, [1000], 3, 2)
    check("ranks per host must divide the world", False)
except GLib.Error as e:
    check("ranks per host must divide the world",
          e.matches(Mixprec.engine_error_quark(), Mixprec.EngineError.INVALID_ARGUMENT))

# DeepSpeed, 6 ranks on 2 hosts, Psi = 6e6: each gather and the
# reduce-scatter move 5/6 Psi x 2 bytes, 2/6 of it on the host.
ds = Mixprec.CommBytes.plan_new_deepspeed(config, 6000000, 6, 3)
check("DeepSpeed ZeRO-3", ds.all_gather == 2 * 10000000 and ds.reduce_scatter == 10000000
      and ds.inter_host == 3 * 6000000 and ds.scalars == 0)

engine = Mixprec.Engine.new(config)
counted = engine.get_comm_bytes()
check("one process sends nothing", counted.total == 0 and counted.inter_host == 0)

print("1..%d" % len(results))
for i, (name, ok) in enumerate(results, 1):
    print("%s %d - %s" % ("ok" if ok else "not ok", i, name))
sys.exit(0 if all(ok for _, ok in results) else 1)
