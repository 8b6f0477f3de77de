#!/usr/bin/env python3
# bench-set-master.py — what mixprec_engine_set_master() costs per call as
# the model grows, measured in the same run: every parameter of a model of
# N parameters (65536 elements each, bf16 working copies, ZeRO-3 on one
# process of the cpu device) set in turn, as mixprec.torch's initialize()
# does for a model built under zero.Init. The reference is the smallest
# model's time per call: a call that rounds its own parameter only keeps
# the ratio near 1 whatever N; one that rounds the whole model (a load's
# refresh) grows it with N, and the whole pass quadratically.
#
# usage (from the build tree):
#   PYTHONPATH=bindings GI_TYPELIB_PATH=bindings \
#   LD_LIBRARY_PATH=libmixprec/.libs MIXPREC_PLUGIN_PATH=$PWD/plugins \
#   python3 bench/bench-set-master.py [N ...]
import sys
import time

import gi
gi.require_version("GLib", "2.0")
gi.require_version("Mixprec", "1.0")
from gi.repository import GLib, Mixprec  # noqa: E402

ELEMENTS = 65536
CONFIG = ('{"bf16": {"enabled": true}, "zero_optimization": {"stage": 3}, '
          '"optimizer": {"type": "AdamW", "params": {"lr": 0.001}}}')


def per_call(n):
    engine = Mixprec.Engine.new(Mixprec.Config.new_from_data(CONFIG))
    zeros = GLib.Bytes.new(bytes(4 * ELEMENTS))
    for i in range(n):
        engine.register_param("p%d" % i, [ELEMENTS], "Linear", Mixprec.DType.FLOAT32, zeros)
    engine.prepare()
    values = GLib.Bytes.new(bytes(range(64)) * (4 * ELEMENTS // 64))
    start = time.perf_counter()
    for i in range(n):
        engine.set_master("p%d" % i, values, 0)
    return (time.perf_counter() - start) / n


sizes = [int(a) for a in sys.argv[1:]] or [32, 128, 512]
reference = None
print("%10s %14s %18s" % ("params", "ms per call", "ratio to N=%d" % sizes[0]))
for n in sizes:
    t = per_call(n)
    reference = reference or t
    print("%10d %14.3f %18.2f" % (n, 1000 * t, t / reference))
