#!/usr/bin/env python3
# test-monitor-tensorboard-gi.py — the TensorBoard event file libmixprec
# writes (the "tensorboard" config section), read back by the tensorboard
# package's own readers (PyPI): the file's records in order, then the
# scalars through EventAccumulator. An engine driven through GObject
# Introspection runs a scripted fp16 job with overflows and reports a loss
# of its own each step; every tag, step and value must be what the engine
# returned in its step results and what the script reported, as float32
# (TensorBoard's simple_value).
import math
import os
import shutil
import struct
import sys
import tempfile

from python_optional import require  # noqa: E402

require("tensorboard", "PYTHON_TENSORBOARD")
from tensorboard.backend.event_processing import event_accumulator  # noqa: F401,E402

import gi
gi.require_version("GLib", "2.0")
gi.require_version("Mixprec", "1.0")
from gi.repository import GLib, Mixprec  # noqa: E402

from tensorboard.backend.event_processing import event_file_loader  # noqa: E402

results = []


def check(name, cond):
    results.append((name, bool(cond)))


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def same(got, want):
    want = f32(want)
    if math.isnan(want):
        return math.isnan(got)
    return got == want


OVERFLOWS = [False, False, False, False, True, True, True, False, False, False, True, False]

root = tempfile.mkdtemp(prefix="mixprec-tb-py-")
try:
    config = Mixprec.Config.new_from_data(
        '{"fp16": {"enabled": true, "initial_scale_power": 8, "loss_scale_window": 3,'
        ' "hysteresis": 2},'
        ' "optimizer": {"type": "SGD", "params": {"lr": 0.01}},'
        ' "scheduler": {"type": "WarmupLR", "params": {"warmup_max_lr": 0.01,'
        ' "warmup_num_steps": 6, "warmup_type": "linear"}},'
        ' "steps_per_print": null,'
        ' "tensorboard": {"enabled": true, "output_path": "%s", "job_name": "tb-job"}}'
        % root.replace("\\", "\\\\"))
    engine = Mixprec.Engine.new(config)
    p = engine.register_param("fc.weight", [2], "Linear", Mixprec.DType.FLOAT32,
                              GLib.Bytes.new(struct.pack("<2f", 0.5, -0.25)))

    want = {}   # tag -> [(step, value)]
    for i, overflow in enumerate(OVERFLOWS):
        loss = 1.0 / (i + 3)
        engine.report_scalar("Train/Steps/train_loss", loss)
        want.setdefault("Train/Steps/train_loss", []).append((i + 1, loss))
        scale = engine.get_loss_scale()
        g = (math.inf if overflow else 3 * scale, 4 * scale)
        p.set_grad(Mixprec.DType.FLOAT32, GLib.Bytes.new(struct.pack("<2f", *g)))
        engine.backward_done()
        r = engine.step()
        check("step %d: the step result's step" % (i + 1), r.step == i + 1)
        for tag, value in (("loss_scale", r.loss_scale), ("lr", r.lr),
                           ("grad_norm", r.grad_norm), ("skipped_steps", r.skipped_steps)):
            want.setdefault("Train/Steps/" + tag, []).append((r.step, value))
    # An empty tag is an error, with the engine's domain.
    try:
        engine.report_scalar("", 1.0)
        check("an empty tag is refused", False)
    except GLib.Error as err:
        check("an empty tag is refused",
              err.matches(Mixprec.engine_error_quark(), Mixprec.EngineError.INVALID_ARGUMENT))
    del engine

    folder = os.path.join(root, "tb-job")
    names = os.listdir(folder)
    check("one event file, named as TensorBoard names them",
          len(names) == 1 and names[0].startswith("events.out.tfevents."))
    path = os.path.join(folder, names[0])

    # The records in order, as written (the legacy loader leaves
    # simple_value as it is, where EventFileLoader migrates it to a
    # tensor), through tensorboard's TFRecord reader, which checks both
    # CRCs of every frame.
    events = list(event_file_loader.LegacyEventFileLoader(path).Load())
    check("the first record is the file version",
          len(events) > 0 and events[0].file_version == "brain.Event:2")
    n_scalars = sum(len(v) for v in want.values())
    check("one record per scalar after it (%d)" % n_scalars, len(events) == 1 + n_scalars)
    check("wall times do not go back",
          all(a.wall_time <= b.wall_time for a, b in zip(events, events[1:])))
    check("every scalar record has one simple_value",
          all(len(e.summary.value) == 1 and e.summary.value[0].WhichOneof("value") == "simple_value"
              for e in events[1:]))

    # The scalars by tag, through EventAccumulator.
    acc = event_accumulator.EventAccumulator(path, size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    tags = sorted(acc.Tags()[event_accumulator.SCALARS])
    check("the tags are %s" % sorted(want), tags == sorted(want))
    for tag in sorted(want):
        got = [(s.step, s.value) for s in acc.Scalars(tag)] if tag in tags else []
        check("%s: the steps" % tag, [s for s, _ in got] == [s for s, _ in want[tag]])
        check("%s: the values" % tag,
              len(got) == len(want[tag]) and
              all(same(g, w) for (_, g), (_, w) in zip(got, want[tag])))
    # What the script knows independently: the skips and the scale moves.
    skipped = [v for _, v in want["Train/Steps/skipped_steps"]]
    check("skipped_steps counts the overflows",
          skipped == [sum(OVERFLOWS[:i + 1]) for i in range(len(OVERFLOWS))])
    norms = [v for _, v in want["Train/Steps/grad_norm"]]
    check("grad_norm is 5 on clean steps, inf on overflows",
          all((math.isinf(n) if o else n == 5.0) for n, o in zip(norms, OVERFLOWS)))
finally:
    shutil.rmtree(root, ignore_errors=True)

print("1..%d" % len(results))
for i, (name, ok) in enumerate(results, 1):
    print("%s %d - %s" % ("ok" if ok else "not ok", i, name))
sys.exit(0 if all(ok for _, ok in results) else 1)
