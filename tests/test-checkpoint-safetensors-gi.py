#!/usr/bin/env python3
# test-checkpoint-safetensors-gi.py — the files libmixprec writes, read
# back by the reference implementation: the `safetensors` package from
# PyPI. An engine built through GObject Introspection trains a few steps,
# saves a checkpoint and exports FP32 weights; safetensors.numpy loads the
# export and the rank shard, and every tensor is compared bit for bit with
# what the engine reports.
import os
import shutil
import sys
import tempfile

from python_optional import require  # noqa: E402

require("safetensors", "PYTHON_SAFETENSORS")
import safetensors  # noqa: F401,E402

import gi
gi.require_version("GLib", "2.0")
gi.require_version("Mixprec", "1.0")
from gi.repository import GLib, Mixprec  # noqa: E402

import numpy as np  # noqa: E402
from safetensors import safe_open  # noqa: E402
from safetensors.numpy import load_file  # noqa: E402

results = []


def check(name, cond):
    results.append((name, bool(cond)))


def same_bits(a, b):
    a = np.ascontiguousarray(a, dtype="<f4")
    b = np.ascontiguousarray(b, dtype="<f4")
    return a.shape == b.shape and np.array_equal(a.view("<u4"), b.view("<u4"))


def floats(gbytes):
    return np.frombuffer(gbytes.get_data(), dtype=np.float32).copy()


MODEL = [
    ("embed.weight", [7, 5], "Embedding"),
    ("blocks.0.ln.weight", [5], "LayerNorm"),
    ("head.weight", [3, 5], "Linear"),
]

COMMON = ('"optimizer": {"type": "AdamW", "params": {"lr": 0.01}},'
          ' "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 3}}')


def trained_engine(precision, steps):
    config = Mixprec.Config.new_from_data("{%s, %s}" % (precision, COMMON))
    engine = Mixprec.Engine.new(config)
    rng = np.random.default_rng(5)
    params = []
    for name, shape, module in MODEL:
        init = rng.standard_normal(int(np.prod(shape))).astype(np.float32)
        params.append(engine.register_param(name, shape, module, Mixprec.DType.FLOAT32,
                                            GLib.Bytes.new(init.tobytes())))
    for step in range(steps):
        scale = engine.get_loss_scale()
        for p in params:
            g = (rng.standard_normal(p.get_numel()) * scale).astype(np.float32)
            p.set_grad(Mixprec.DType.FLOAT32, GLib.Bytes.new(g.tobytes()))
        engine.backward_done()
        engine.step()
    return engine, params


def weights(p):
    if p.has_master():
        return floats(p.get_master())
    return floats(p.get_working(Mixprec.DType.FLOAT32))


root = tempfile.mkdtemp(prefix="mixprec-ckpt-py-")
try:
    for label, precision in (("bf16", '"bf16": {"enabled": true}'),
                             ("fp16", '"fp16": {"enabled": true, "initial_scale_power": 8}'),
                             ("bf16 without master",
                              '"bf16": {"enabled": true, "bf16_master_weights_and_grads": true}')):
        engine, params = trained_engine(precision, 4)
        save_root = os.path.join(root, label.replace(" ", "-"))
        export = os.path.join(save_root, "model.safetensors")
        engine.save_checkpoint(save_root)
        engine.export_fp32(export)

        # The export: every parameter, named and shaped as registered, FP32.
        exported = load_file(export)
        check("%s: export holds exactly the parameters" % label,
              sorted(exported) == sorted(name for name, _, _ in MODEL))
        for p in params:
            t = exported[p.get_name()]
            check("%s: export %s is float32 of shape %s" % (label, p.get_name(), list(p.get_shape())),
                  t.dtype == np.float32 and list(t.shape) == list(p.get_shape()))
            check("%s: export %s equals the engine's weights" % (label, p.get_name()),
                  same_bits(t.reshape(-1), weights(p)))
        with safe_open(export, framework="np") as f:
            meta = f.metadata()
        check("%s: export metadata" % label,
              meta.get("format") == "pt" and meta.get("step") == "4" and
              meta.get("producer", "").startswith("libmixprec "))

        # The rank shard: masters and every optimizer state slot, 1-D pieces.
        ckpt = Mixprec.Checkpoint.open(save_root)
        shard_path = os.path.join(ckpt.get_path(), "rank-00000.safetensors")
        shard = load_file(shard_path)
        slots = list(engine.get_optimizer_state_names())
        expected = sorted("%s/%s" % (n, s) for n, _, _ in MODEL for s in ["master"] + slots)
        check("%s: shard holds master and %s per parameter" % (label, slots), sorted(shard) == expected)
        for p in params:
            name = p.get_name()
            check("%s: shard %s/master" % (label, name),
                  same_bits(shard[name + "/master"], weights(p)))
            for s in slots:
                check("%s: shard %s/%s" % (label, name, s),
                      same_bits(shard[name + "/" + s], floats(engine.get_optimizer_state(name, s))))
            ok, rank, begin, end, fname = ckpt.get_param_piece(name, 0)
            check("%s: %s is one piece of rank 0" % (label, name),
                  ok and rank == 0 and begin == 0 and end == p.get_numel() and
                  fname == "rank-00000.safetensors")
            check("%s: Checkpoint.read_master(%s)" % (label, name),
                  same_bits(floats(ckpt.read_master(name)), weights(p)))
        with safe_open(shard_path, framework="np") as f:
            meta = f.metadata()
        check("%s: shard metadata" % label,
              meta.get("format") == "libmixprec-shard" and meta.get("rank") == "0" and
              meta.get("blocks.0.ln.weight/range") == "0:5" and
              meta.get("embed.weight/shape") == "7,5")
        check("%s: checkpoint verifies" % label, ckpt.verify())

        # Loaded into a fresh engine, the weights come back.
        other, other_params = trained_engine(precision, 0)
        other.load_checkpoint(save_root)
        check("%s: load restores every weight" % label,
              all(same_bits(weights(a), weights(b)) for a, b in zip(params, other_params)))

    # A damaged shard is refused with an error naming it.
    victim = os.path.join(root, "bf16", "step-4", "rank-00000.safetensors")
    with open(victim, "r+b") as f:
        f.seek(100)
        byte = f.read(1)
        f.seek(100)
        f.write(bytes([byte[0] ^ 0x40]))
    engine, _ = trained_engine('"bf16": {"enabled": true}', 0)
    try:
        engine.load_checkpoint(os.path.join(root, "bf16"))
        check("damaged shard refused", False)
    except GLib.Error as err:
        check("damaged shard refused",
              err.matches(Mixprec.checkpoint_error_quark(), Mixprec.CheckpointError.CHECKSUM) and
              "rank-00000.safetensors" in err.message)
finally:
    shutil.rmtree(root, ignore_errors=True)

print("1..%d" % len(results))
for i, (name, ok) in enumerate(results, 1):
    print("%s %d - %s" % ("ok" if ok else "not ok", i, name))
sys.exit(0 if all(ok for _, ok in results) else 1)
