#!/usr/bin/env python3
# test-layout-gi.py — MixprecLayout through GObject Introspection: a plan
# for three parameters over two ranks worked out by hand from the rules
# (units of at most 2^20 elements padded to 2 x 4096, sliced per rank), the
# arrays the annotations return, and a running engine's layout beside it.
import sys

import gi
gi.require_version("GLib", "2.0")
gi.require_version("Mixprec", "1.0")
from gi.repository import GLib, Mixprec  # noqa: E402

results = []


def check(name, cond):
    results.append((name, bool(cond)))


config = Mixprec.Config.new_from_data(
    '{"bf16": {"enabled": true}, "zero_optimization": {"stage": 2}}')

# 3000 and 5000 share a unit of 8000 elements, padded to 8192 (2 x 4096):
# slices of 4096. The 2^20 + 1 parameter is a unit alone: padded to
# 1056768 (the next multiple of 8192), slices of 528384.
big = (1 << 20) + 1
layout = Mixprec.Layout.new(config, [3000, 5000, big], 2)
check("world and stage", layout.get_world_size() == 2 and layout.props.zero_stage == 2)
check("two units", layout.get_n_units(0) == 2)
check("unit 0", tuple(layout.get_unit(0, 0)) == (0, 8000, 8192))
check("unit 1", tuple(layout.get_unit(0, 1)) == (8192, big, 1056768))
check("unit params", list(layout.get_unit_params(0, 0)) == [0, 1]
      and list(layout.get_unit_params(0, 1)) == [2])
check("param offsets", [layout.get_param_offset(i) for i in range(3)] == [0, 3000, 8192])
# Rank 0's slice of unit 0 is [0, 4096): all of p0 and p1's first 1096.
check("rank ranges", tuple(layout.get_rank_range(1, 0)) == (0, 1096)
      and tuple(layout.get_rank_range(1, 1)) == (1096, 5000)
      and tuple(layout.get_rank_range(0, 1)) == (0, 0))
check("owner", layout.get_owner(2, 528384) == 1 and layout.get_owner(2, 528383) == 0)
pieces = [(p.param_index, p.param_offset, p.flat_offset, p.length)
          for p in layout.get_rank_pieces(0, 1)]
check("rank pieces", pieces == [(1, 1096, 4096, 3904), (2, 528384, 8192 + 528384, 520193)])
check("padding", layout.get_rank_padding(0, 0) == 0
      and layout.get_rank_padding(0, 1) == (8192 - 8000) + (1056768 - big))

try:
    Mixprec.Layout.new(config, [10], 0)
    check("world size 0 raises", False)
except GLib.Error as e:
    check("world size 0 raises",
          e.matches(Mixprec.engine_error_quark(), Mixprec.EngineError.INVALID_ARGUMENT))

# A running engine on one process: stage 0, units unpadded.
engine = Mixprec.Engine.new(config)
for i, n in enumerate([3000, 5000]):
    engine.register_param("p%d" % i, [n, 1], "Linear", Mixprec.DType.FLOAT32,
                          GLib.Bytes.new(bytes(4 * n)))
running = engine.get_layout()
check("engine layout", running.get_zero_stage() == 0 and running.get_n_params() == 2
      and tuple(running.get_unit(0, 0)) == (0, 8000, 8000))

print("1..%d" % len(results))
for i, (name, ok) in enumerate(results, 1):
    print("%s %d - %s" % ("ok" if ok else "not ok", i, name))
sys.exit(0 if all(ok for _, ok in results) else 1)
