#!/usr/bin/env python3
# test-fp4-torchao.py — libmixprec's 4-bit block quantisation (through GI)
# against torchao's CPU emulation, bit for bit: NVFP4 (NVFP4Tensor.to_nvfp4
# with the per-tensor scale torchao derives from the amax) and MXFP4
# (MXTensor.to_mx with float4_e2m1fn_x2 elements) in its four scale modes,
# on 2^20 values of wide dynamic range plus all-zero, single-outlier,
# subnormal, overflow and scale-edge blocks. NVFP4's 16x16 tiles, which
# torchao has no function for, are checked against torchao's own element
# cast and packing under tile amaxes, and for transpose symmetry.
# Stochastic rounding is checked for its distribution: every code is one
# of the two E2M1 neighbours of the scaled value, and the count of upward
# roundings agrees with the sum of their probabilities. Prints TAP.
import math
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
    from torchao.prototype.mx_formats.constants import F4_E2M1_MAX, F8E4M3_MAX
    from torchao.prototype.mx_formats.kernels import f32_to_f4_unpacked, f4_unpacked_to_f32, pack_uint4
    from torchao.prototype.mx_formats.mx_tensor import to_mx
    from torchao.prototype.mx_formats.nvfp4_tensor import (
        E4M3_EPS, NVFP4Tensor, per_tensor_amax_to_scale)
except ImportError as e:  # the prototype API moves between releases
    print(f"1..0 # SKIP torchao's mx_formats prototype has moved: {e!r}")
    sys.exit(0)

torch.set_num_threads(2)


ROWS, COLS = 2048, 512          # 2^20 values
gen = torch.Generator().manual_seed(20261202)


def f32(bits):
    return torch.tensor(np.array(bits, dtype=np.uint32).view(np.float32))


def to_gbytes(t):
    return GLib.Bytes.new(t.contiguous().numpy().tobytes())


def u8(b):
    return torch.from_numpy(np.frombuffer(b.get_data(), dtype=np.uint8).copy())


def wide_values(rows, cols):
    # magnitudes 2^-60 .. 2^60 within a row, each row scaled by 2^-40 .. 2^40
    e = torch.randint(-60, 61, (rows, cols), generator=gen).float()
    m = 1.0 + torch.rand((rows, cols), generator=gen)
    s = torch.where(torch.rand((rows, cols), generator=gen) < 0.5, -1.0, 1.0)
    r = torch.randint(-40, 41, (rows, 1), generator=gen).float()
    x = s * m * torch.exp2(e + r)
    # half of the rows narrow (all within 2^-4 .. 2^4 of each other), so
    # that most blocks use the whole E2M1 grid rather than a few codes
    narrow = torch.randn((rows // 2, cols), generator=gen) * torch.exp2(r[: rows // 2])
    x[: rows // 2] = narrow
    return x.float()


def special_rows(cols, with_inf, with_big=True):
    """Rows of edge blocks; every block is 32 wide (two NVFP4 blocks)."""
    rows = []
    z = torch.zeros(cols)
    rows.append(z.clone())                                     # all zero
    o = torch.randn(cols, generator=gen) * 1e-3
    o[::32] = 7.0e3                                             # single outlier per block
    rows.append(o)
    sub = f32(torch.randint(1, 0x7FFFFF, (cols,), generator=gen).numpy().astype(np.uint32))
    rows.append(sub * torch.where(torch.rand(cols, generator=gen) < 0.5, -1.0, 1.0))  # fp32 subnormals
    mixed = sub.clone()
    mixed[5::32] = 1.0e-30                                      # subnormals beside a tiny normal
    rows.append(mixed)
    big = f32(torch.randint(0x7F000000, 0x7F7FFFFF, (cols,), generator=gen).numpy().astype(np.uint32))
    if with_big:
        rows.append(big)                                        # near FLT_MAX
    edge = torch.empty(cols)
    # amaxes 6 * 2^k * (1 + j 2^-23) and 1.75 * 2^k +- 1 ulp: where RCEIL's
    # log2 and EVEN's rounding decide
    for b in range(cols // 32):
        blk = torch.rand(32, generator=gen) * 0.5
        k = (b % 40) - 20
        kind = b % 4
        if kind == 0:
            amax = np.float32(6.0 * 2.0 ** k) * np.float32(1 + (b // 4 % 4) * 2.0 ** -23)
        elif kind == 1:
            amax = np.nextafter(np.float32(1.75 * 2.0 ** k), np.float32(0))
        elif kind == 2:
            amax = np.float32(1.75 * 2.0 ** k)
        else:
            amax = np.nextafter(np.float32(6.0 * 2.0 ** k), np.float32(0))
        blk = blk * float(amax)
        blk[b % 32] = float(amax)
        edge[b * 32:(b + 1) * 32] = blk
    rows.append(edge)
    sat = torch.full((cols,), 5.0) * torch.exp2(torch.arange(cols) % 7 - 3.0)
    sat[::16] = 7.99                                            # FLOOR saturates these
    rows.append(sat)
    if with_inf:
        inf = torch.randn(cols, generator=gen)
        inf[3::32] = float("inf")
        inf[20::64] = float("-inf")
        rows.append(inf)
    return torch.stack(rows)


def first_diff(got, want):
    d = (got != want).nonzero()
    if d.numel() == 0:
        return ""
    i = d[0].tolist()
    return f"{int((got != want).sum())} differ; first at {i}: ours {int(got[tuple(i)])}, torchao {int(want[tuple(i)])}"


def ours(recipe, mode, x, rounding=Mixprec.Rounding.NEAREST_EVEN, seed=0):
    q, scales, ts = Mixprec.quantize_blocks(recipe, mode, to_gbytes(x), x.shape[1], rounding, seed)
    return u8(q).view(x.shape[0], -1), u8(scales).view(x.shape[0], -1), ts


def unpack(q):
    return torch.stack([q & 0xF, q >> 4], dim=-1).reshape(q.shape[0], -1)


E2M1 = torch.tensor([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6])
GRID = torch.tensor([0, 0.5, 1, 1.5, 2, 3, 4, 6])


def check_sr(name, codes, y):
    """codes: E2M1 codes from stochastic rounding of the scaled values y."""
    a = y.abs().clamp(max=6.0).double()
    idx = torch.searchsorted(GRID.double(), a, right=True) - 1
    lo = GRID.double()[idx]
    hi = GRID.double()[(idx + 1).clamp(max=7)]
    hi = torch.where(a == lo, lo, hi)
    got = E2M1[codes.long()].double().abs()
    sign_ok = (((codes & 8) != 0) == (y < 0)) | (got == 0)
    neighbour = (got == lo) | (got == hi)
    check(f"{name}: every stochastic code is a neighbour of the scaled value",
          bool((neighbour & sign_ok).all()), f"{int((~(neighbour & sign_ok)).sum())} are not")
    frac = hi > lo
    p = torch.where(frac, (a - lo) / (hi - lo).clamp(min=1e-300), torch.zeros_like(a))
    up = (got == hi) & frac
    n_up, expect = float(up.sum()), float(p[frac].sum())
    var = float((p[frac] * (1 - p[frac])).sum())
    z = (n_up - expect) / math.sqrt(max(var, 1.0))
    check(f"{name}: upward roundings agree with their probabilities (z = {z:.2f})", abs(z) < 5.0,
          f"{n_up} up, {expect:.1f} expected")
    # and within each decile of probability (a biased rounding shows here)
    worst = 0.0
    for d in range(10):
        sel = frac & (p >= d / 10) & (p < (d + 1) / 10)
        if int(sel.sum()) < 1000:
            continue
        zd = (float(up[sel].sum()) - float(p[sel].sum())) / math.sqrt(max(float((p[sel] * (1 - p[sel])).sum()), 1.0))
        worst = max(worst, abs(zd))
    check(f"{name}: per-decile rounding frequencies agree (worst z = {worst:.2f})", worst < 5.0)


# ------------------------------------------------------------ unscaled E2M1
# every fp32 exponent, with mantissas at and around E2M1's rounding points,
# subnormals, ±Inf and the default NaN, then 2^18 random bit patterns
edge = []
for e in range(0, 255):
    for m in (0, 1, 0x1FFFFF, 0x200000, 0x200001, 0x3FFFFF, 0x400000, 0x400001,
              0x5FFFFF, 0x600000, 0x600001, 0x7FFFFF):
        edge.append((e << 23) | m)
edge += [0x7F800000, 0x7FC00000]
bits = np.concatenate([np.array(edge, dtype=np.uint32),
                       torch.randint(0, 2 ** 31 - 1, (2 ** 18,), generator=gen).numpy().astype(np.uint32)])
bits = np.concatenate([bits, bits | np.uint32(0x80000000)])
vals = f32(bits[: bits.size // 2 * 2])
want = pack_uint4(f32_to_f4_unpacked(vals))
got = u8(Mixprec.fp4_pack(to_gbytes(vals), Mixprec.Rounding.NEAREST_EVEN, 0))
check(f"fp4_pack: {vals.numel()} edge and random fp32 values equal torchao's E2M1 cast and packing",
      torch.equal(got, want), first_diff(got.view(1, -1), want.view(1, -1)))
back = torch.tensor([Mixprec.fp4_e2m1_to_float(c) for c in range(16)])
want_back = f4_unpacked_to_f32(torch.arange(16, dtype=torch.uint8))
check("fp4_e2m1_to_float: the 16 codes decode as torchao's f4_unpacked_to_f32()",
      torch.equal(back.view(torch.int32), want_back.view(torch.int32)))

# ------------------------------------------------------------ MXFP4
MODES = [
    ("FLOOR", Mixprec.MxScaleMode.FLOOR, ScaleCalculationMode.FLOOR),
    ("RCEIL", Mixprec.MxScaleMode.RCEIL, ScaleCalculationMode.RCEIL),
    ("CEIL", Mixprec.MxScaleMode.CEIL, ScaleCalculationMode.CEIL),
    ("EVEN", Mixprec.MxScaleMode.EVEN, ScaleCalculationMode.EVEN),
]
x_mx = torch.cat([wide_values(ROWS, COLS), special_rows(COLS, with_inf=True)])
n_values = x_mx.numel()
by_mode = {}
for name, mode, ao_mode in MODES:
    sc, data = to_mx(x_mx, torch.float4_e2m1fn_x2, 32, scaling_mode=ao_mode)
    ao_s = sc.view(torch.uint8).reshape(x_mx.shape[0], -1)
    ao_q = data.view(torch.uint8).reshape(x_mx.shape[0], -1)
    q, s, ts = ours(Mixprec.BlockRecipe.MXFP4, mode, x_mx)
    check(f"MXFP4 {name}: {n_values} values, E8M0 scales equal torchao's", torch.equal(s, ao_s),
          first_diff(s, ao_s))
    check(f"MXFP4 {name}: packed E2M1 bytes equal torchao's", torch.equal(q, ao_q), first_diff(q, ao_q))
    check(f"MXFP4 {name}: tensor scale is 1", ts == 1.0)
    by_mode[name] = (s, q)
# the comparison tells the modes apart: each pair differs on this data
names = list(by_mode)
check("MXFP4: the four scale modes give four different results here",
      all(not torch.equal(by_mode[a][0], by_mode[b][0]) for i, a in enumerate(names) for b in names[i + 1:]))

# dequantisation: torchao's MXTensor / to_dtype() arithmetic
from torchao.prototype.mx_formats.mx_tensor import to_dtype  # noqa: E402
for name, mode, ao_mode in (MODES[0], MODES[1]):
    sc, data = to_mx(x_mx, torch.float4_e2m1fn_x2, 32, scaling_mode=ao_mode)
    want = to_dtype(data, sc, torch.float4_e2m1fn_x2, 32, torch.float32)
    q, s, _ = ours(Mixprec.BlockRecipe.MXFP4, mode, x_mx)
    back = torch.from_numpy(np.frombuffer(Mixprec.dequantize_blocks(
        Mixprec.BlockRecipe.MXFP4, to_gbytes(q), to_gbytes(s), 1.0, COLS).get_data(),
        dtype=np.float32).copy()).view(want.shape)
    same = (back.view(torch.int32) == want.view(torch.int32)) | (torch.isnan(back) & torch.isnan(want))
    check(f"MXFP4 {name}: dequantized values equal torchao's to_dtype()", bool(same.all()),
          f"{int((~same).sum())} differ")

# a NaN block: scale 0xFF, elements as torchao's cast gives them
x_nan = torch.randn(4, 64, generator=gen)
x_nan[1, 7] = float("nan")
for name, mode, ao_mode in MODES:
    sc, data = to_mx(x_nan, torch.float4_e2m1fn_x2, 32, scaling_mode=ao_mode)
    q, s, _ = ours(Mixprec.BlockRecipe.MXFP4, mode, x_nan)
    check(f"MXFP4 {name}: a block holding NaN matches torchao (scale 0xFF)",
          torch.equal(s, sc.view(torch.uint8).reshape(4, -1)) and int(s[1, 0]) == 255
          and torch.equal(q, data.view(torch.uint8).reshape(4, -1)))

# stochastic rounding in every mode: same scales, right distribution
for name, mode, ao_mode in MODES:
    x = wide_values(ROWS // 8, COLS)
    sc, _ = to_mx(x, torch.float4_e2m1fn_x2, 32, scaling_mode=ao_mode)
    ao_s = sc.view(torch.uint8).reshape(x.shape[0], -1)
    q, s, _ = ours(Mixprec.BlockRecipe.MXFP4, mode, x, Mixprec.Rounding.STOCHASTIC, 77)
    check(f"MXFP4 {name} stochastic: scales equal torchao's", torch.equal(s, ao_s), first_diff(s, ao_s))
    e = ao_s.repeat_interleave(32, dim=1).to(torch.int32)
    if name == "RCEIL":
        factor = torch.where(e == 0, 1.0, torch.exp2(127.0 - e.float()))
        y = (x * factor).clamp(-6, 6)
    else:
        y = x / (e << 23).view(torch.float32).clamp(min=2.0 ** -126)
    check_sr(f"MXFP4 {name}", unpack(q), y)
    q2, _, _ = ours(Mixprec.BlockRecipe.MXFP4, mode, x, Mixprec.Rounding.STOCHASTIC, 77)
    q3, _, _ = ours(Mixprec.BlockRecipe.MXFP4, mode, x, Mixprec.Rounding.STOCHASTIC, 78)
    check(f"MXFP4 {name} stochastic: reproducible for a seed, different for another",
          torch.equal(q, q2) and not torch.equal(q, q3))

# ------------------------------------------------------------ NVFP4 (1x16)
x_nv = torch.cat([wide_values(ROWS, COLS), special_rows(COLS, with_inf=False, with_big=False)])
pts = per_tensor_amax_to_scale(torch.max(torch.abs(x_nv)))
t = NVFP4Tensor.to_nvfp4(x_nv, per_tensor_scale=pts)
ao_s = t.scale.view(torch.uint8).reshape(x_nv.shape[0], -1)
ao_q = t.qdata.view(torch.uint8).reshape(x_nv.shape[0], -1)
q, s, ts = ours(Mixprec.BlockRecipe.NVFP4, Mixprec.MxScaleMode.FLOOR, x_nv)
check(f"NVFP4: {x_nv.numel()} values, the per-tensor scale equals torchao's",
      np.float32(ts).view(np.uint32) == pts.numpy().view(np.uint32), f"{ts!r} vs {float(pts)!r}")
check("NVFP4: E4M3 block scales equal torchao's", torch.equal(s, ao_s), first_diff(s, ao_s))
check("NVFP4: packed E2M1 bytes equal torchao's", torch.equal(q, ao_q), first_diff(q, ao_q))
want = t.dequantize(torch.float32)
back = torch.from_numpy(np.frombuffer(Mixprec.dequantize_blocks(
    Mixprec.BlockRecipe.NVFP4, to_gbytes(q), to_gbytes(s), ts, COLS).get_data(),
    dtype=np.float32).copy()).view(want.shape)
check("NVFP4: dequantized values equal NVFP4Tensor.dequantize()",
      torch.equal(back.view(torch.int32), want.view(torch.int32)),
      f"{int((back.view(torch.int32) != want.view(torch.int32)).sum())} differ")

# values near FLT_MAX: the largest per-tensor scale
x_big = torch.cat([special_rows(COLS, with_inf=False), wide_values(8, COLS)])
pts3 = per_tensor_amax_to_scale(torch.max(torch.abs(x_big)))
t3 = NVFP4Tensor.to_nvfp4(x_big, per_tensor_scale=pts3)
q, s, ts = ours(Mixprec.BlockRecipe.NVFP4, Mixprec.MxScaleMode.FLOOR, x_big)
check("NVFP4, values near FLT_MAX: tensor scale, scales and bytes equal torchao's",
      np.float32(ts).view(np.uint32) == pts3.numpy().view(np.uint32)
      and torch.equal(s, t3.scale.view(torch.uint8).reshape(x_big.shape[0], -1))
      and torch.equal(q, t3.qdata.view(torch.uint8).reshape(x_big.shape[0], -1)))

# an all-zero tensor: tensor scale 0, NaN block scales, and the codes
# torchao's arithmetic gives its elements from there
x_zero = torch.zeros(4, 64)
t0 = NVFP4Tensor.to_nvfp4(x_zero, per_tensor_scale=per_tensor_amax_to_scale(torch.max(torch.abs(x_zero))))
q, s, ts = ours(Mixprec.BlockRecipe.NVFP4, Mixprec.MxScaleMode.FLOOR, x_zero)
check("NVFP4, an all-zero tensor: scales and bytes equal torchao's",
      ts == 0.0 and torch.equal(s, t0.scale.view(torch.uint8).reshape(4, -1))
      and torch.equal(q, t0.qdata.view(torch.uint8).reshape(4, -1)),
      f"{s.flatten().tolist()[:4]} {q.flatten().tolist()[:4]} vs {t0.qdata.view(torch.uint8).flatten().tolist()[:4]}")

# a tensor of narrow range, so that most block scales sit well inside E4M3
x_n2 = torch.randn(1024, 256, generator=gen) * torch.exp2(torch.randint(-8, 9, (1024, 1), generator=gen).float())
pts2 = per_tensor_amax_to_scale(torch.max(torch.abs(x_n2)))
t2 = NVFP4Tensor.to_nvfp4(x_n2, per_tensor_scale=pts2)
q, s, ts = ours(Mixprec.BlockRecipe.NVFP4, Mixprec.MxScaleMode.FLOOR, x_n2)
check("NVFP4, narrow range: scales and bytes equal torchao's",
      torch.equal(s, t2.scale.view(torch.uint8).reshape(1024, -1))
      and torch.equal(q, t2.qdata.view(torch.uint8).reshape(1024, -1)))

# stochastic rounding
q, s, ts = ours(Mixprec.BlockRecipe.NVFP4, Mixprec.MxScaleMode.FLOOR, x_n2, Mixprec.Rounding.STOCHASTIC, 5)
check("NVFP4 stochastic: scales equal torchao's", torch.equal(s, t2.scale.view(torch.uint8).reshape(1024, -1)))
s32 = t2.scale.view(torch.float8_e4m3fn).to(torch.float32).reshape(1024, -1).repeat_interleave(16, dim=1)
y = (x_n2 * ((1.0 / pts2) / s32)).clamp(-6, 6)
check_sr("NVFP4", unpack(q), y)


# ------------------------------------------------------------ NVFP4 16x16
def nvfp4_2d_reference(x, pts):
    """nvfp4_quantize()'s steps with the amax of each 16x16 tile, through
    torchao's own constants, element cast and packing."""
    r, c = x.shape
    tiles = x.reshape(r // 16, 16, c // 16, 16)
    amax = torch.amax(torch.abs(tiles), dim=(1, 3), keepdim=True)
    sbs = torch.clamp((amax / F4_E2M1_MAX) / pts, min=E4M3_EPS, max=F8E4M3_MAX).to(torch.float8_e4m3fn)
    data = (tiles * ((1.0 / pts) / sbs.to(torch.float32))).clamp(-F4_E2M1_MAX, F4_E2M1_MAX)
    q = pack_uint4(f32_to_f4_unpacked(data.reshape(r, c)))
    s = sbs.view(torch.uint8).expand(r // 16, 16, c // 16, 1).reshape(r, c // 16)
    return q, s


x2 = torch.cat([x_nv[:2048], x_nv[2048:], torch.zeros(16 - (x_nv.shape[0] - 2048), COLS)])
pts_2d = per_tensor_amax_to_scale(torch.max(torch.abs(x2)))
want_q, want_s = nvfp4_2d_reference(x2, pts_2d)
q, s, ts = ours(Mixprec.BlockRecipe.NVFP4_2D, Mixprec.MxScaleMode.FLOOR, x2)
check(f"NVFP4 16x16: {x2.numel()} values, scales equal torchao's steps on tile amaxes",
      torch.equal(s, want_s), first_diff(s, want_s))
check("NVFP4 16x16: packed bytes equal torchao's cast and packing", torch.equal(q, want_q),
      first_diff(q, want_q))
qt, st, tst = ours(Mixprec.BlockRecipe.NVFP4_2D, Mixprec.MxScaleMode.FLOOR, x2.t().contiguous())
check("NVFP4 16x16: a matrix and its transpose get the same codes",
      torch.equal(unpack(qt), unpack(q).t()) and tst == ts)

q, s, ts = ours(Mixprec.BlockRecipe.NVFP4_2D, Mixprec.MxScaleMode.FLOOR, x2, Mixprec.Rounding.STOCHASTIC, 9)
check("NVFP4 16x16 stochastic: scales equal the RNE ones", torch.equal(s, want_s))
s32 = want_s.view(torch.float8_e4m3fn).to(torch.float32).repeat_interleave(16, dim=1)
check_sr("NVFP4 16x16", unpack(q), (x2 * ((1.0 / pts_2d) / s32)).clamp(-6, 6))

report(cut=2000)
