#!/usr/bin/env python3
# test-fp8-mx-modes-torchao.py — MXFP8 block scales in torchao's four
# ScaleCalculationModes (mixprec_mx_quantize_with_scale_mode(), through
# GI) against torchao's own to_mx() with float8_e4m3fn and float8_e5m2
# elements, bit for bit: the E8M0 scales of every block (wide dynamic
# range, amaxes on the edges where CEIL, EVEN and RCEIL decide, zeros,
# fp32 subnormals, near-FLT_MAX, Inf) and the element bytes of every block
# whose scale is a normal power of two (torchao raises a 2^-127 scale to
# 2^-126 before dividing, which libmixprec does not; see
# mixprec_mx_quantize()). Prints TAP.
import sys

from python_optional import require  # noqa: E402

require("torchao", "PYTHON_TORCH")

import numpy as np  # noqa: E402
import torch  # noqa: E402

import gi  # noqa: E402
gi.require_version("GLib", "2.0")
gi.require_version("Mixprec", "1.0")
from gi.repository import GLib, Mixprec  # noqa: E402
from python_tap import check, report  # noqa: E402

try:
    from torchao.prototype.mx_formats.config import ScaleCalculationMode
    from torchao.prototype.mx_formats.mx_tensor import to_mx
except ImportError as e:  # the prototype API moves between releases
    print(f"1..0 # SKIP torchao's mx_formats prototype has moved: {e!r}")
    sys.exit(0)

torch.set_num_threads(2)
gen = torch.Generator().manual_seed(30)


def f32(bits):
    return torch.from_numpy(np.asarray(bits, dtype=np.uint32).view(np.float32).copy())


def values(rows, cols, max_elem):
    e = torch.randint(-60, 61, (rows, cols), generator=gen).float()
    x = (1.0 + torch.rand((rows, cols), generator=gen)) * torch.exp2(e)
    x = x * torch.where(torch.rand((rows, cols), generator=gen) < 0.5, -1.0, 1.0)
    x[: rows // 2] = torch.randn((rows // 2, cols), generator=gen) * torch.exp2(
        torch.randint(-30, 31, (rows // 2, 1), generator=gen).float())
    edge = torch.rand((cols // 32, 32), generator=gen) * 0.5
    for b in range(cols // 32):
        k = (b % 40) - 20
        kind = b % 4
        base = np.float32(max_elem * 2.0 ** k) if kind in (0, 3) else np.float32(1.9375 * 2.0 ** k)
        amax = np.nextafter(base, np.float32(0)) if kind in (1, 3) else base * np.float32(1 + (b % 3) * 2.0 ** -23)
        edge[b] *= float(amax)
        edge[b, b % 32] = float(amax)
    special = torch.zeros((4, cols))
    special[1] = f32(torch.randint(1, 0x7FFFFF, (cols,), generator=gen).numpy())
    special[2] = f32(torch.randint(0x7F000000, 0x7F7FFFFF, (cols,), generator=gen).numpy())
    special[3] = torch.randn(cols, generator=gen)
    special[3, 3::32] = float("inf")
    return torch.cat([x, edge.reshape(1, -1), special]).float()


MODES = [
    ("FLOOR", Mixprec.MxScaleMode.FLOOR, ScaleCalculationMode.FLOOR),
    ("RCEIL", Mixprec.MxScaleMode.RCEIL, ScaleCalculationMode.RCEIL),
    ("CEIL", Mixprec.MxScaleMode.CEIL, ScaleCalculationMode.CEIL),
    ("EVEN", Mixprec.MxScaleMode.EVEN, ScaleCalculationMode.EVEN),
]
FORMATS = [
    ("e4m3", Mixprec.DType.FLOAT8_E4M3, torch.float8_e4m3fn, 448.0),
    ("e5m2", Mixprec.DType.FLOAT8_E5M2, torch.float8_e5m2, 57344.0),
]
COLS = 1024

for fname, dtype, tdtype, max_elem in FORMATS:
    x = values(256, COLS, max_elem)
    finite_rows = torch.isfinite(x).all(dim=1)
    by_mode = {}
    for name, mode, ao_mode in MODES:
        sc, data = to_mx(x, tdtype, 32, scaling_mode=ao_mode)
        ao_s = sc.view(torch.uint8).reshape(x.shape[0], -1)
        ao_q = data.view(torch.uint8).reshape(x.shape[0], -1)
        q, s = Mixprec.mx_quantize_with_scale_mode(dtype, mode, GLib.Bytes.new(x.numpy().tobytes()), 32)
        q = torch.from_numpy(np.frombuffer(q.get_data(), dtype=np.uint8).copy()).reshape(x.shape[0], -1)
        s = torch.from_numpy(np.frombuffer(s.get_data(), dtype=np.uint8).copy()).reshape(x.shape[0], -1)
        diff = (s != ao_s).nonzero()
        check(f"MXFP8 {fname} {name}: {ao_s.numel()} E8M0 scales equal torchao's", torch.equal(s, ao_s),
              f"{diff.shape[0]} differ, first at {diff[0].tolist() if diff.numel() else None}: "
              f"{int(s[tuple(diff[0])]) if diff.numel() else ''} vs {int(ao_s[tuple(diff[0])]) if diff.numel() else ''}")
        normal = (ao_s > 1).repeat_interleave(32, dim=1) & finite_rows[:, None]
        same = (q == ao_q) | ~normal
        check(f"MXFP8 {fname} {name}: element bytes of {int(normal.sum())} values in blocks of normal "
              f"scale equal torchao's", bool(same.all()), f"{int((~same).sum())} differ")
        by_mode[name] = s
    names = list(by_mode)
    check(f"MXFP8 {fname}: the four modes give four different scale sets here",
          all(not torch.equal(by_mode[a], by_mode[b]) for i, a in enumerate(names) for b in names[i + 1:]))
    # FLOOR is mixprec_mx_quantize()
    q0, s0 = Mixprec.mx_quantize(dtype, GLib.Bytes.new(x.numpy().tobytes()), 32)
    check(f"MXFP8 {fname}: FLOOR is mixprec_mx_quantize()",
          np.array_equal(np.frombuffer(s0.get_data(), dtype=np.uint8), by_mode["FLOOR"].numpy().reshape(-1)))

try:
    Mixprec.mx_quantize_with_scale_mode(Mixprec.DType.FLOAT8_E4M3, 9, GLib.Bytes.new(bytes(128)), 32)
    check("an unknown scale mode is refused", False)
except (GLib.Error, ValueError, TypeError) as e:
    check("an unknown scale mode is refused", True, str(e))

report()
