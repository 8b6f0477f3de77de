#!/usr/bin/env python3
# test-fp4-rht.py — the random Hadamard transform (mixprec_rht_apply(),
# through GI) against numpy: the exact bits of a float32 transcription of
# the documented operation order, the float64 product with
# diag(s) @ scipy-style Sylvester H16 / 4 (Transformer Engine's rht_matrix)
# to float32 rounding, the inverse giving the input back, the seed's sign
# mask against an independent SplitMix64, and the refusal of a partial
# group. Prints TAP.
import struct

from python_optional import require  # noqa: E402

require("numpy", "PYTHON_TORCH")

import numpy as np  # noqa: E402

import gi  # noqa: E402
gi.require_version("GLib", "2.0")
gi.require_version("Mixprec", "1.0")
from gi.repository import GLib, Mixprec  # noqa: E402

from python_tap import check, report  # noqa: E402


def sylvester(n):
    h = np.array([[1.0]])
    while h.shape[0] < n:
        h = np.block([[h, h], [h, -h]])
    return h


def signs_of(mask):
    return np.array([-1.0 if (mask >> i) & 1 else 1.0 for i in range(16)])


def transcription(x, mask, inverse):
    """The documented float32 order: signs, butterflies, * 0.25, signs."""
    v = x.reshape(-1, 16).astype(np.float32).copy()
    s = signs_of(mask).astype(np.float32)
    if not inverse:
        v = v * s
    h = 1
    while h < 16:
        for i in range(0, 16, 2 * h):
            for j in range(i, i + h):
                a, b = v[:, j].copy(), v[:, j + h].copy()
                v[:, j] = a + b
                v[:, j + h] = a - b
        h *= 2
    v = v * np.float32(0.25)
    if inverse:
        v = v * s
    return v.reshape(-1)


def splitmix64_low16(seed):
    m = (1 << 64) - 1
    z = (seed + 0x9E3779B97F4A7C15) & m
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & m
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & m
    z ^= z >> 31
    return z & 0xFFFF


def rht(x, mask, inverse=False):
    out = Mixprec.rht_apply(GLib.Bytes.new(x.astype("<f4").tobytes()), mask, inverse)
    return np.frombuffer(out.get_data(), dtype="<f4")


rng = np.random.default_rng(30)
x = (rng.standard_normal(16 * 4096) * np.exp(rng.uniform(-8, 8, 16 * 4096))).astype(np.float32)
x[:16] = 0.0
x[16:32] = 0.0
x[20] = 1000.0           # one outlier in a group of zeros
TE_MASK = 0xD7E8         # Transformer Engine's fixed weight-gradient signs

for mask in (0, TE_MASK, Mixprec.rht_sign_mask(1234)):
    y = rht(x, mask)
    want = transcription(x, mask, False)
    check(f"mask {mask:#06x}: bits equal the float32 transcription",
          np.array_equal(y.view(np.uint32), want.view(np.uint32)),
          int(np.count_nonzero(y.view(np.uint32) != want.view(np.uint32))))
    m = np.diag(signs_of(mask)) @ sylvester(16) / 4.0
    exact = (x.astype(np.float64).reshape(-1, 16) @ m).reshape(-1)
    scale = np.repeat(np.abs(x.astype(np.float64).reshape(-1, 16)).max(axis=1), 16)
    err = np.abs(y.astype(np.float64) - exact)
    check(f"mask {mask:#06x}: within 4 float32 ulps of the group's amax of x @ diag(s) H16 / 4",
          np.all(err <= 4 * np.finfo(np.float32).eps * scale), float((err / np.maximum(scale, 1e-300)).max()))
    back = rht(y, mask, inverse=True)
    err = np.abs(back.astype(np.float64) - x)
    check(f"mask {mask:#06x}: the inverse gives the input back to float32 rounding",
          np.all(err <= 8 * np.finfo(np.float32).eps * scale), float((err / np.maximum(scale, 1e-300)).max()))
    check(f"mask {mask:#06x}: the inverse's bits equal the transcription",
          np.array_equal(back.view(np.uint32), transcription(y, mask, True).view(np.uint32)))
    norms_in = np.linalg.norm(x.astype(np.float64).reshape(-1, 16), axis=1)
    norms_out = np.linalg.norm(y.astype(np.float64).reshape(-1, 16), axis=1)
    check(f"mask {mask:#06x}: each group's norm is kept",
          np.allclose(norms_out, norms_in, rtol=1e-5, atol=0))

y = rht(x, TE_MASK)
check("an outlier alone in its group is spread evenly (|1000| / 4 everywhere)",
      np.all(np.abs(y[16:32]) == np.float32(250.0)), y[16:32])
check("Transformer Engine's sign vector is mask 0xD7E8",
      list(signs_of(TE_MASK)) == [1, 1, 1, -1, 1, -1, -1, -1, -1, -1, -1, 1, -1, 1, -1, -1])

for seed in (0, 1, 1234, 2**63 + 5, 2**64 - 1):
    check(f"sign mask of seed {seed} is SplitMix64's low 16 bits",
          Mixprec.rht_sign_mask(seed) == splitmix64_low16(seed))

try:
    Mixprec.rht_apply(GLib.Bytes.new(struct.pack("<8f", *([1.0] * 8))), 0, False)
    check("8 values are refused", False)
except GLib.Error as e:
    check("8 values are refused (BlockError.SHAPE)",
          e.domain == "mixprec-block-error-quark" and e.code == Mixprec.BlockError.SHAPE
          and "16" in e.message, e.message)

report()
