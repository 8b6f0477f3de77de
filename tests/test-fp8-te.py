#!/usr/bin/env python3
# test-fp8-te.py — MixprecFp8Scaling's delayed scaling against a step by
# step transcription, in torch, of Transformer Engine's documented
# DelayedScaling update (transformer_engine/pytorch/fp8.py:
# _default_get_amax_and_update_history, _update_amax_history,
# _default_sf_compute, _compute_scaling_factor_inverse): float32 tensors,
# torch.max / torch.roll / torch.where as those functions use them. Scale,
# scale_inv and the whole history must be bit-identical after every step
# of a few hundred random amaxes (zeros, Inf, NaN, subnormal and huge
# values among them). Prints TAP.
import random
import struct
import sys

from python_optional import require  # noqa: E402

require("torch", "PYTHON_TORCH")

import torch  # noqa: E402

import gi  # noqa: E402
gi.require_version("Mixprec", "1.0")
from gi.repository import Mixprec  # noqa: E402

torch.set_num_threads(1)
FP32_MAX = torch.finfo(torch.float32).max
FP8_MAX = {Mixprec.DType.FLOAT8_E4M3: torch.finfo(torch.float8_e4m3fn).max,
           Mixprec.DType.FLOAT8_E5M2: torch.finfo(torch.float8_e5m2).max}


class TransformerEngineDelayed:
    """One tensor's fp8 meta under TE's DelayedScaling (num_scales = 1)."""

    def __init__(self, history_len, algo, margin, fp8_max):
        self.amax_history = torch.zeros(history_len, 1, dtype=torch.float32)
        self.scale = torch.ones(1, dtype=torch.float32)
        self.scale_inv = torch.ones(1, dtype=torch.float32)
        self.algo = algo
        self.margin = margin
        self.fp8_max = fp8_max

    def record(self, amax):
        # What a cast kernel leaves in amax_history[0]; NaN propagates as
        # in torch.maximum.
        self.amax_history[0] = torch.maximum(self.amax_history[0],
                                             torch.tensor([amax], dtype=torch.float32))

    def update(self):
        # _default_get_amax_and_update_history
        if self.algo == "max":
            amax = torch.max(self.amax_history, dim=0).values
        else:
            amax = self.amax_history[0].clone()
        # _update_amax_history
        if self.amax_history.shape[0] > 1:
            self.amax_history.copy_(torch.roll(self.amax_history, -1, 0))
        self.amax_history[0].fill_(0.0)
        # _default_sf_compute. The numerator is a tensor: eager torch
        # evaluates `python_float / tensor` as reciprocal(tensor) * float,
        # two roundings, whereas TE's update kernels divide once, correctly
        # rounded (`scaled_max / amax`, `__fdiv_rn`).
        sf = (torch.full_like(amax, self.fp8_max) / amax) / (2 ** self.margin)
        sf = torch.where(amax > 0.0, sf, self.scale)
        sf = torch.where(torch.isfinite(amax), sf, self.scale)
        sf = torch.where(torch.isinf(sf), torch.full_like(sf, FP32_MAX), sf)
        self.scale.copy_(sf)
        # _compute_scaling_factor_inverse
        self.scale_inv.copy_(1.0 / self.scale)


def f32_bits(x):
    return struct.unpack("<I", struct.pack("<f", x))[0]


def random_amax(rng):
    pick = rng.randrange(20)
    if pick == 0:
        return 0.0
    if pick == 1:
        return float("inf")
    if pick == 2:
        return float("nan")
    if pick == 3:
        return 1e-40                      # subnormal: the quotient overflows
    if pick == 4:
        return 2.0 ** -149
    if pick == 5:
        return FP32_MAX
    if pick == 6:
        return rng.uniform(0.5, 1.0) * 2.0 ** rng.randrange(-126, -100)
    # a float32 value
    return struct.unpack("<f", struct.pack("<f", rng.uniform(0.5, 1.0) * 2.0 ** rng.randrange(-20, 20)))[0]


def run(history_len, algo, margin, fmt, role, seed, steps):
    algo_enum = Mixprec.Fp8AmaxAlgo.MAX if algo == "max" else Mixprec.Fp8AmaxAlgo.MOST_RECENT
    recipe = Mixprec.Fp8Recipe.new_delayed(fmt, history_len, algo_enum, margin)
    scaling = recipe.new_scaling(role)
    te = TransformerEngineDelayed(history_len, algo, margin, FP8_MAX[scaling.get_dtype()])
    rng = random.Random(seed)
    for step in range(steps):
        amax = struct.unpack("<f", struct.pack("<f", random_amax(rng)))[0]
        te.record(amax)
        scaling.record_amax(amax)
        te.update()
        scaling.update()
        want = (f32_bits(te.scale.item()), f32_bits(te.scale_inv.item()))
        got = (f32_bits(scaling.get_scale()), f32_bits(scaling.get_scale_inv()))
        if got != want:
            return "step %d (amax %r): scale/scale_inv bits %08x/%08x, TE %08x/%08x" % (
                step, amax, got[0], got[1], want[0], want[1])
        history = scaling.get_amax_history()
        want_h = [f32_bits(v) for v in te.amax_history[:, 0].tolist()]
        got_h = [f32_bits(v) for v in history]
        if got_h != want_h:
            return "step %d: history differs from TE's" % step
    return None


def main():
    results = []
    seed = 1
    for history_len in (1, 2, 16, 1024):
        for algo in ("max", "most_recent"):
            for margin in (0, 3, -2):
                for fmt, role in ((Mixprec.Fp8Format.HYBRID, Mixprec.Fp8Role.FORWARD),
                                  (Mixprec.Fp8Format.HYBRID, Mixprec.Fp8Role.BACKWARD)):
                    name = "len=%d algo=%s margin=%d %s" % (
                        history_len, algo, margin, "e4m3" if role == Mixprec.Fp8Role.FORWARD else "e5m2")
                    problem = run(history_len, algo, margin, fmt, role, seed, 300)
                    seed += 1
                    results.append((name, problem))

    print("1..%d" % len(results))
    for i, (name, problem) in enumerate(results, 1):
        if problem is None:
            print("ok %d - %s" % (i, name))
        else:
            print("not ok %d - %s: %s" % (i, name, problem))
    return 0 if all(p is None for _, p in results) else 1


if __name__ == "__main__":
    sys.exit(main())
