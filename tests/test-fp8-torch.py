#!/usr/bin/env python3
# test-fp8-torch.py — libmixprec's scaled float8 casts (through GI) against
# PyTorch's own, bit for bit: (x * scale).to(torch.float8_e4m3fn /
# float8_e5m2) and its clamped (saturating) form on every fp32 edge value
# and 10^6 random ones, for a few scales; dequantisation against
# q.to(torch.float32) * scale_inv; the amax against torch's; MX blocks
# against a torch transcription of the OCP MX v1.0 definition (FLOOR), and
# against torchao's to_mx() where torchao is installed. Prints TAP.
import importlib.util
import sys

from python_optional import require  # noqa: E402

require("torch", "PYTHON_TORCH")

import numpy as np  # noqa: E402
import torch  # noqa: E402

import gi  # noqa: E402
gi.require_version("GLib", "2.0")
gi.require_version("Mixprec", "1.0")
from gi.repository import GLib, Mixprec  # noqa: E402
from python_tap import check, report  # noqa: E402

if not hasattr(torch, "float8_e4m3fn"):
    print(f"1..0 # SKIP torch {torch.__version__} has no float8 dtypes")
    sys.exit(0)

torch.set_num_threads(1)


FORMATS = [
    # (name, libmixprec dtype, torch dtype, max, emax_elem)
    ("e4m3", Mixprec.DType.FLOAT8_E4M3, torch.float8_e4m3fn, 448.0, 8),
    ("e5m2", Mixprec.DType.FLOAT8_E5M2, torch.float8_e5m2, 57344.0, 15),
]
SCALES = [1.0, 0.5, 2.0 ** -20, 3.0, 0.448, 1.0 / 3.0, 7.5e-29]
N_RANDOM = 10 ** 6


def f32(bits):
    return torch.tensor(np.array(bits, dtype=np.uint32).view(np.float32))


def to_gbytes(t):
    return GLib.Bytes.new(t.contiguous().numpy().tobytes())


def from_gbytes(b, dtype):
    return torch.from_numpy(np.frombuffer(b.get_data(), dtype=dtype).copy())


def ours(x, dt, scale, overflow):
    q, amax = Mixprec.fp8_quantize(dt, to_gbytes(x), scale, overflow)
    return from_gbytes(q, np.uint8), amax


def first_diff(x, got, want):
    bad = (got != want).nonzero()
    if len(bad) == 0:
        return ""
    i = bad[0].item()
    return (f"{len(bad)} differ; first x = {x[i].item()!r} (0x{x.view(torch.int32)[i].item() & 0xFFFFFFFF:08x}): "
            f"libmixprec 0x{got[i].item():02x}, torch 0x{want[i].item():02x}")


def edge_values(tdt, fmax):
    """Every float8 value, its fp32 neighbours, every tie between
    neighbours and its neighbours, the tie above max, and fp32's specials
    (±0, subnormals, min normal, max, Inf, NaN with payloads); both signs."""
    codes = torch.arange(0, 256, dtype=torch.uint8).view(tdt).to(torch.float32)
    vals = codes[torch.isfinite(codes) & (codes >= 0)].unique().sort().values
    step = vals[-1] - vals[-2]
    nxt = torch.cat([vals[1:], (vals[-1] + step).reshape(1)])
    mid = (vals.double() + nxt.double()).div(2).float()
    inf = torch.tensor(float("inf"))
    zero = torch.tensor(0.0)
    parts = [vals, nxt, mid,
             torch.nextafter(vals, inf), torch.nextafter(vals, zero),
             torch.nextafter(mid, inf), torch.nextafter(mid, zero),
             torch.nextafter(nxt, inf),
             torch.tensor([2 * fmax, 480.0, 65536.0, 1e30]),
             f32([0x00000001, 0x00000002, 0x003FFFFF, 0x00400000, 0x007FFFFF, 0x00800000,
                  0x00800001, 0x7F7FFFFF, 0x7F800000, 0x7F800001, 0x7FA5A5A5, 0x7FC00000,
                  0x7FC00001, 0x7FFFFFFF])]
    e = torch.cat(parts)
    return torch.cat([e, -e])


def random_values(gen, fmax, scale, n):
    """A half uniform over all fp32 bit patterns (every exponent, NaN and
    Inf included), a quarter uniform over twice the format's range / scale,
    a quarter with exponents spread over the format's range / scale."""
    h, q = n // 2, n // 4
    bits = torch.randint(0, 2 ** 32, (h,), generator=gen, dtype=torch.int64)
    a = torch.from_numpy(bits.numpy().astype(np.uint32).view(np.float32).copy())
    b = ((torch.rand(q, generator=gen, dtype=torch.float64) * 4 - 2) * fmax / scale).float()
    m = torch.rand(n - h - q, generator=gen, dtype=torch.float64) + 1
    ex = torch.randint(-22, 18, (n - h - q,), generator=gen).double()
    sign = torch.randint(0, 2, (n - h - q,), generator=gen).double() * 2 - 1
    c = (sign * m * torch.pow(2.0, ex) / scale).float()
    return torch.cat([a, b, c])


gen = torch.Generator().manual_seed(20260517)

# torch's plain cast to float8_e4m3fn overflows to NaN in older releases
# and saturates to ±448 since pytorch/pytorch#178817; libmixprec's
# non-saturating mode keeps the NaN of the OCP specification.
probe = torch.tensor([480.0, -float("inf")]).to(torch.float8_e4m3fn).view(torch.uint8).tolist()
torch_e4m3_saturates = probe == [0x7E, 0xFE]
print(f"# torch {torch.__version__}: float8_e4m3fn cast of 480 and -Inf gives {probe} "
      f"({'saturating' if torch_e4m3_saturates else 'NaN'})")

for name, dt, tdt, fmax, _ in FORMATS:
    edges = edge_values(tdt, fmax)
    for scale in SCALES:
        s = torch.tensor(scale, dtype=torch.float32)
        sv = s.item()
        # The edge values as products, and as inputs.
        x = torch.cat([(edges.double() / sv).float(), edges, random_values(gen, fmax, sv, N_RANDOM)])
        y = x * s
        what = f"{name}, scale {sv!r}, {x.numel()} values ({edges.numel() * 2} edge)"

        want_sat = y.clamp(-fmax, fmax).to(tdt).view(torch.uint8)
        got_sat, amax = ours(x, dt, sv, Mixprec.Fp8Overflow.SATURATING)
        check(f"saturating {what}: bit-identical to (x * scale).clamp(-max, max).to()",
              torch.equal(got_sat, want_sat), first_diff(x, got_sat, want_sat))

        want = y.to(tdt).view(torch.uint8)
        got, amax2 = ours(x, dt, sv, Mixprec.Fp8Overflow.NON_SATURATING)
        if name == "e4m3" and torch_e4m3_saturates:
            over = torch.isinf(y) | (y.abs() > 464.0)
            sign = (torch.signbit(y).to(torch.uint8) * 0x80)
            check(f"non-saturating {what}: bit-identical to (x * scale).to() where nothing overflows "
                  f"({int((~over).sum())} values)",
                  torch.equal(got[~over], want[~over]), first_diff(x[~over], got[~over], want[~over]))
            check(f"non-saturating {what}: the {int(over.sum())} overflows are NaN (sign | 0x7F) where "
                  f"this torch saturates to sign | 0x7E",
                  torch.equal(got[over], sign[over] | 0x7F) and torch.equal(want[over], sign[over] | 0x7E))
            check(f"saturating {what}: bit-identical to this torch's own (x * scale).to(), which saturates",
                  torch.equal(got_sat, want), first_diff(x, got_sat, want))
        else:
            check(f"non-saturating {what}: bit-identical to (x * scale).to()",
                  torch.equal(got, want), first_diff(x, got, want))

        finite = x[~torch.isnan(x)]
        want_amax = finite.abs().max().item() if finite.numel() else 0.0
        check(f"amax {what}: max |x| over the non-NaN inputs, as torch computes it",
              amax == want_amax and amax2 == want_amax, f"{amax!r} {amax2!r} {want_amax!r}")

        scale_inv = (1.0 / s).item()
        back = from_gbytes(Mixprec.fp8_dequantize(dt, to_gbytes(got_sat), scale_inv), np.float32)
        want_back = got_sat.view(tdt).to(torch.float32) * torch.tensor(scale_inv, dtype=torch.float32)
        same = (back.view(torch.int32) == want_back.view(torch.int32)) | (torch.isnan(back) & torch.isnan(want_back))
        check(f"dequantize {what}: bit-identical to q.to(torch.float32) * scale_inv", bool(same.all()),
              f"{int((~same).sum())} differ")

# A non-power-of-two scale whose products land on the overflow thresholds.
for name, dt, tdt, fmax, _ in FORMATS:
    x = torch.tensor([fmax, fmax * 1.03, fmax * 1.07, fmax * 1.1, -fmax * 1.2, float("inf")])
    got, _ = ours(x, dt, 1.0, Mixprec.Fp8Overflow.SATURATING)
    check(f"{name}: saturating cast of values beyond max gives ±max",
          torch.equal(got, x.clamp(-fmax, fmax).to(tdt).view(torch.uint8)))


# ------------------------------------------------------------ MX
def mx_reference(x, tdt, fmax, emax, block):
    """OCP MX v1.0, 6.3, FLOOR: shared_exp = floor(log2(max |V_i|)) -
    emax_elem, clamped to [-127, 127] (amax 0 gives -127; an infinite amax
    128 - emax_elem, torchao's reading of the exponent field); a block with
    NaN gets the NaN scale 255 and elements V_i / Inf; elements are V_i /
    2^shared_exp clamped to ±max and cast."""
    n = x.numel()
    nb = -(-n // block)
    xb = torch.cat([x, torch.zeros(nb * block - n)]).view(nb, block)
    nan = torch.isnan(xb)
    has_nan = nan.any(1)
    amax = torch.where(nan, torch.zeros_like(xb), xb.abs()).amax(1)
    _, e = torch.frexp(amax)              # amax in [2^(e-1), 2^e)
    e = (e.to(torch.int64) - 1) - emax
    e = torch.where(amax == 0, torch.full_like(e, -127), e)
    e = torch.where(torch.isinf(amax), torch.full_like(e, 128 - emax), e)
    e = e.clamp(-127, 127)
    scales = torch.where(has_nan, torch.full_like(e, 255), e + 127).to(torch.uint8)
    p = (xb.double() * torch.pow(2.0, -e.double()).unsqueeze(1)).float()   # exact where it matters
    elem = p.clamp(-fmax, fmax)
    special = torch.where(torch.isnan(xb) | torch.isinf(xb), torch.copysign(torch.tensor(float("nan")), xb),
                          torch.copysign(torch.zeros_like(xb), xb))
    elem = torch.where(has_nan.unsqueeze(1), special, elem)
    return elem.to(tdt).view(torch.uint8).reshape(-1)[:n], scales


for name, dt, tdt, fmax, emax in FORMATS:
    x = random_values(gen, fmax, 1.0, N_RANDOM)
    # Every 3rd block of 32 spans one binade's worth of small values far
    # from 1, so every shared exponent from -127 up occurs.
    blk = torch.arange(N_RANDOM) // 32
    spread = (torch.rand(N_RANDOM, generator=gen, dtype=torch.float64) * 2 - 1) * torch.pow(2.0, (blk % 280 - 150).double())
    x = torch.where(blk % 3 == 0, spread.float(), x)
    x = torch.cat([x, edge_values(tdt, fmax)])
    for block in (32, 7):
        q, scales = Mixprec.mx_quantize(dt, to_gbytes(x), block)
        got_q = from_gbytes(q, np.uint8)
        got_s = from_gbytes(scales, np.uint8)
        want_q, want_s = mx_reference(x, tdt, fmax, emax, block)
        check(f"MX {name}, blocks of {block}, {x.numel()} values: E8M0 scales match the OCP definition",
              torch.equal(got_s, want_s), f"{int((got_s != want_s).sum())} differ")
        check(f"MX {name}, blocks of {block}: elements match the OCP definition",
              torch.equal(got_q, want_q), first_diff(x, got_q, want_q))
        back = from_gbytes(Mixprec.mx_dequantize(dt, q, scales, block), np.float32)
        s32 = torch.where(got_s == 255, torch.tensor(float("nan")),
                          torch.pow(2.0, got_s.double() - 127).float())
        want_back = (got_q.view(tdt).to(torch.float32).double()
                     * s32.double().repeat_interleave(block)[:x.numel()]).float()
        same = (back.view(torch.int32) == want_back.view(torch.int32)) | (torch.isnan(back) & torch.isnan(want_back))
        check(f"MX {name}, blocks of {block}: dequantize gives element * 2^(scale - 127)", bool(same.all()),
              f"{int((~same).sum())} differ")

if importlib.util.find_spec("torchao") is not None:
    try:
        from torchao.prototype.mx_formats.mx_tensor import to_mx
        for name, dt, tdt, fmax, emax in FORMATS:
            x = random_values(gen, fmax, 1.0, 32 * 4096)
            x = torch.where(torch.isfinite(x), x, torch.zeros_like(x))
            sc, data = to_mx(x.view(-1, 32), tdt, 32)
            q, scales = Mixprec.mx_quantize(dt, to_gbytes(x), 32)
            got_s = from_gbytes(scales, np.uint8)
            got_q = from_gbytes(q, np.uint8)
            ao_s = sc.view(torch.uint8).reshape(-1)
            ao_q = data.view(torch.uint8).reshape(-1)
            # torchao divides by 2^-126 where the scale is 2^-127.
            keep = (got_s != 0).repeat_interleave(32)
            check(f"MX {name}: scales equal torchao's to_mx()", torch.equal(got_s, ao_s))
            check(f"MX {name}: elements equal torchao's to_mx() (blocks of scale 2^-127 aside)",
                  torch.equal(got_q[keep], ao_q[keep]))
    except Exception as e:  # torchao's prototype API moves between releases
        print(f"# torchao's to_mx() could not be compared: {e!r}")
else:
    print("# torchao is not installed: MX compared with the transcription of the OCP definition only")

report(cut=2000)
