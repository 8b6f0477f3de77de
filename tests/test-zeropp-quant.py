#!/usr/bin/env python3
# test-zeropp-quant.py — ZeRO++'s block quantizer (libmixprec/numeric/
# numeric-zeropp.h, run by tests/zeropp-quant-dump) against a torch
# transcription of DeepSpeed's CUDA kernels, bit for bit: codes, stored
# scales and dequantized values of 10^6 values, with all-zero blocks,
# blocks spanning fp16's whole range, single outliers, fp16 subnormals,
# exact rounding ties, NaNs and values beyond fp16's range; in 8 bits
# (qwZ's weights) and 4 bits (qgZ's gradients), from float32, bfloat16
# and float16. Then quant_reduce.cu's dequantize-reduce-requantize (the
# middle of DeepSpeed's hierarchical qgZ): several int4 and int8
# tensors dequantized, summed in fp16 and requantized, on the same values.
# Then libmixprec's own FP8 blocks (mixprec.quantized_*_format, no
# DeepSpeed counterpart) against torch's float32 arithmetic and its
# float8 casts, on the same values.
#
# The reference is written here from the kernels' source, DeepSpeed
# 0.19.8 as PyPI ships it (ops/csrc: quantization/quantize.cu and
# dequantize.cu, includes/quantization_utils.h, dequantization_utils.h,
# conversion_utils.h, reduction_utils.h, quantization.h; the same lines
# as git commit edaa7221267243c7be7fb49c5d5f5c4fb97b4641): the kernels
# are CUDA-only, so their arithmetic is transcribed, in IEEE float32 (see
# numeric-zeropp.h on --use_fast_math). The weight grouping is checked
# against DeepSpeed's own CUDAQuantizer.quantize() where deepspeed is
# importable (its CUDA module replaced by one that records the groups).
# Runs under PYTHON_TORCH; skips without torch. Prints TAP.
import os
import subprocess
import sys
import tempfile

from python_optional import require  # noqa: E402

require("torch", "PYTHON_TORCH")

import numpy as np  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(1)

BUILD = os.environ.get("G_TEST_BUILDDIR", os.path.dirname(os.path.abspath(__file__)))
DUMP = os.path.join(BUILD, "zeropp-quant-dump")

n_test = 0
failed = 0


def ok(cond, what):
    global n_test, failed
    n_test += 1
    if not cond:
        failed += 1
    print("%sok %d - %s" % ("" if cond else "not ", n_test, what))
    sys.stdout.flush()


# ------------------------------------------------------------ the reference

def ref_groups(n):
    """CUDAQuantizer's block count for a partition of n elements, or 0
    where its asserts would fire."""
    target = 8000
    g = -(-n // target)
    while g < n and n % (8 * g) != 0:
        g += 1
    while n % (16 * g) == 0 and n / g > target:
        g *= 2
    if n % (8 * g) != 0 or not n / g < 16000 or not n > g:
        return 0
    return g


def ref_quantize(h, groups, bits):
    """Codes (int8, one per element), stored scales and fp16 dequantized
    values of the fp16 tensor h, as Params<Symmetric, bits> and
    GroupStats<Symmetric> compute them."""
    x = h.view(groups, -1).float()
    mag = x.abs()
    # __hmax2 / fmaxf return the other operand of a NaN; the max starts
    # from -infinity.
    mag = torch.where(torch.isnan(mag), torch.tensor(float("-inf")), mag)
    absmax = mag.amax(dim=1)
    two = torch.tensor(float(1 << bits), dtype=torch.float32)
    scale = torch.where(absmax == 0, torch.tensor(1.0), two / (absmax * 2))
    v = x * scale[:, None]
    q = torch.round(v)                      # __float2int_rn: half to even
    q = torch.where(torch.isnan(q), torch.zeros_like(q), q)  # cvt: NaN -> 0
    q = q.clamp(-(1 << (bits - 1)), (1 << (bits - 1)) - 1).to(torch.int32)
    stored = torch.tensor(1.0) / scale
    deq = (q.float() * stored[:, None]).to(torch.float16)
    return q.view(-1), stored, deq.view(-1)


def pack4(q):
    """PackedInt4{high = element 2i + 1, low = element 2i}: the first
    bit-field (named high) is the low nibble."""
    q = (q & 0xF).to(torch.uint8).view(-1, 2)
    return ((q[:, 0] << 4) | q[:, 1]).to(torch.uint8)


def ref_quant_reduce(codes, stored, tensors, in_groups, out_groups, bits):
    """dequant_reduce: each tensor's fp16 dequantization, summed in fp16
    arithmetic from +0 in tensor order (__hadd2 rounds every addition to
    fp16; torch's CPU half addition does the same), then requantized in
    out_groups blocks."""
    q = codes.view(tensors, -1)
    s = stored.view(tensors, in_groups)
    acc = torch.zeros(q.shape[1], dtype=torch.float16)
    for j in range(tensors):
        d = (q[j].view(in_groups, -1).float() * s[j][:, None]).to(torch.float16).view(-1)
        acc = acc + d
    return acc, ref_quantize(acc, out_groups, bits)


def check_reduce(x, bits, tensors, in_groups, out_groups, tmp):
    """The library's quant_reduce against the transcription, codes and
    scales bit for bit."""
    label = "quant_reduce: %d tensors, %d bits, %d -> %d blocks" % (tensors, bits, in_groups, out_groups)
    src = os.path.join(tmp, "rin")
    dst = os.path.join(tmp, "rout")
    with open(src, "wb") as f:
        f.write(x.astype(np.float32).tobytes())
    p = subprocess.run([DUMP, "reduce", str(bits), str(tensors), str(in_groups), str(out_groups),
                        src, dst], capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        ok(False, label + ": " + p.stderr.strip())
        return
    out = open(dst, "rb").read()
    elems = x.size // tensors
    qs, ss = [], []
    for j in range(tensors):
        h = torch.from_numpy(x[j * elems:(j + 1) * elems]).to(torch.float16)
        q, stored, _ = ref_quantize(h, in_groups, bits)
        qs.append(q)
        ss.append(stored)
    acc, (q, stored, deq) = ref_quant_reduce(torch.cat(qs), torch.cat(ss), tensors, in_groups,
                                             out_groups, bits)
    ncodes = elems if bits == 8 else elems // 2
    codes = torch.from_numpy(np.frombuffer(out[:ncodes], dtype=np.uint8).copy())
    want = q.to(torch.uint8) if bits == 8 else pack4(q)
    ok(bool((codes == want).all()), "%s: codes bit for bit (%d differ)" % (label, int((codes != want).sum())))
    scales = torch.from_numpy(np.frombuffer(out[ncodes:ncodes + 4 * out_groups], dtype=np.float32).copy())
    ok(bool((scales.view(torch.int32) == stored.view(torch.int32)).all()),
       "%s: stored scales bit for bit" % label)
    return acc


# ------------------------------------------------------------ the values

def test_values(n, rng):
    """n float32 values, block-structured for blocks of 8000, 4000, 1000
    and 500: most blocks Gaussian at magnitudes from 1e-7 to 3e3, and
    blocks of each edge case."""
    x = (rng.standard_normal(n) * np.exp(rng.uniform(-16, 8, n // 500)).repeat(500)).astype(np.float32)
    # all-zero blocks (some -0.0)
    x[0:8000] = 0.0
    x[16000:16500] = -0.0
    # huge range: 6e4 beside fp16 subnormals and zeros
    b = slice(24000, 32000)
    x[b] = rng.choice([6.0e4, -6.0e4, 1e-7, -3e-8, 0.0, 1.0, 1e-4], 8000)
    # a single outlier per block
    for k in range(40000, 80000, 4000):
        x[k + rng.integers(0, 4000)] = 5e3
    # fp16 subnormals only
    x[80000:88000] = (rng.integers(-1023, 1024, 8000) * 2.0 ** -24).astype(np.float32)
    # exact ties: absmax 128 makes the scale exactly 1 (8 bits)
    x[88000:96000] = (rng.integers(-255, 256, 8000) * 0.5).astype(np.float32)
    x[88000] = 128.0
    # ties at 4 bits: absmax 8 makes the scale 1
    x[96000:104000] = (rng.integers(-15, 16, 8000) * 0.5).astype(np.float32)
    x[96000] = 8.0
    # +absmax and -absmax alone: the asymmetric clamp
    x[104000:112000] = rng.choice([3.0, -3.0], 8000)
    # NaNs in a finite block, an all-NaN block, a value beyond fp16
    x[112000:120000] = rng.standard_normal(8000)
    x[112000 + 17] = np.nan
    x[120000:128000] = np.nan
    x[128000:136000] = rng.standard_normal(8000)
    x[128000 + 5] = 1e6
    x[136000:144000] = rng.standard_normal(8000)
    x[136000 + 9] = -np.inf
    return x


def run_dump(raw, dtype, bits, groups, tmp):
    src = os.path.join(tmp, "in")
    dst = os.path.join(tmp, "out")
    with open(src, "wb") as f:
        f.write(raw)
    p = subprocess.run([DUMP, "quantize", dtype, str(bits), str(groups), src, dst],
                       capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        return None, p.stderr
    return open(dst, "rb").read(), ""


def same_bits(a, b):
    return a.shape == b.shape and bool((a.view(torch.int16) == b.view(torch.int16)).all())


def check(x, torch_dtype, name, bits, groups, tmp):
    t = torch.from_numpy(x).to(torch_dtype)
    raw = t.view(torch.int16).numpy().tobytes() if torch_dtype != torch.float32 else t.numpy().tobytes()
    out, err = run_dump(raw, name, bits, groups, tmp)
    label = "%s, %d bits, %s blocks" % (name, bits, groups if groups else "DeepSpeed's weight")
    if out is None:
        ok(False, label + ": " + err.strip())
        return
    n = x.size
    got_groups = int(np.frombuffer(out[:8], dtype=np.uint64)[0])
    want_groups = groups if groups else ref_groups(n)
    ok(got_groups == want_groups, "%s: %d blocks (want %d)" % (label, got_groups, want_groups))
    h = t.to(torch.float16)
    q, stored, deq = ref_quantize(h, want_groups, bits)
    at = 8
    ncodes = n if bits == 8 else n // 2
    codes = torch.from_numpy(np.frombuffer(out[at:at + ncodes], dtype=np.uint8).copy())
    at += ncodes
    want_codes = q.to(torch.uint8) if bits == 8 else pack4(q)
    ok(bool((codes == want_codes).all()),
       "%s: codes bit for bit (%d differ)" % (label, int((codes != want_codes).sum())))
    scales = torch.from_numpy(np.frombuffer(out[at:at + 4 * want_groups], dtype=np.float32).copy())
    at += 4 * want_groups
    ok(bool((scales.view(torch.int32) == stored.view(torch.int32)).all()),
       "%s: stored scales bit for bit" % label)
    half = torch.from_numpy(np.frombuffer(out[at:at + 2 * n], dtype=np.int16).copy()).view(torch.float16)
    at += 2 * n
    ok(same_bits(half, deq), "%s: dequantized fp16 bit for bit" % label)
    esize = 4 if torch_dtype == torch.float32 else 2
    same = out[at:at + esize * n]
    if torch_dtype == torch.float32:
        same = torch.from_numpy(np.frombuffer(same, dtype=np.float32).copy())
        want = deq.float()
        ok(bool((same.view(torch.int32) == want.view(torch.int32)).all()),
           "%s: dequantized in the caller's dtype bit for bit" % label)
    else:
        # torch's fp16 -> bf16 makes every NaN its canonical one; a NaN's
        # payload is the converter's, not the quantizer's.
        same = torch.from_numpy(np.frombuffer(same, dtype=np.int16).copy()).view(torch_dtype)
        want = deq.to(torch_dtype)
        nan = torch.isnan(want)
        ok(bool((torch.isnan(same) == nan).all()) and same_bits(same[~nan], want[~nan]),
           "%s: dequantized in the caller's dtype bit for bit (NaNs as NaNs)" % label)
    # The bound the header states, on the finite blocks: half a step,
    # a whole one at +absmax, then fp16's rounding.
    hb = h.float().view(want_groups, -1)
    fin = torch.isfinite(hb).all(dim=1)
    err = (deq.float().view(want_groups, -1) - hb).abs()[fin]
    step = stored[fin][:, None]
    slack = hb.abs()[fin] * 2.0 ** -11 + 2.0 ** -24
    ok(bool((err <= step + slack).all()), "%s: error within one step of each block" % label)


# ------------------------------------------------------------ FP8 blocks

FP8 = {"e4m3": (torch.float8_e4m3fn, 448.0), "e5m2": (torch.float8_e5m2, 57344.0)}


def ref_fp8(x32, groups, fmt):
    """numeric-zeropp.h's FP8 blocks in torch: per block the largest
    non-NaN magnitude, mult = max / absmax in float32 (1 for an all-zero
    block), torch's round-to-nearest-even cast of x * mult without
    saturation, stored = 1 / mult, decoded as float (code) * stored."""
    dt, fmax = FP8[fmt]
    xb = x32.view(groups, -1)
    a = xb.abs()
    a = torch.where(torch.isnan(a), torch.zeros_like(a), a)
    amax = a.max(dim=1).values
    mult = torch.where(amax == 0, torch.ones_like(amax), torch.tensor(fmax, dtype=torch.float32) / amax)
    y = xb * mult[:, None]
    codes = y.to(dt)
    stored = torch.tensor(1.0, dtype=torch.float32) / mult
    back = codes.float() * stored[:, None]
    return codes.view(torch.uint8).reshape(-1), stored, back.reshape(-1), torch.isnan(y).reshape(-1)


def check_fp8(x, torch_dtype, name, fmt, groups, tmp):
    t = torch.from_numpy(x).to(torch_dtype)
    raw = t.view(torch.int16).numpy().tobytes() if torch_dtype != torch.float32 else t.numpy().tobytes()
    src = os.path.join(tmp, "in")
    dst = os.path.join(tmp, "out")
    with open(src, "wb") as f:
        f.write(raw)
    label = "fp8 %s from %s, %d blocks" % (fmt, name, groups)
    p = subprocess.run([DUMP, "fp8", name, fmt, str(groups), src, dst], capture_output=True, text=True,
                       timeout=120)
    if p.returncode != 0:
        ok(False, label + ": " + p.stderr.strip())
        return
    out = open(dst, "rb").read()
    n = x.size
    codes = torch.from_numpy(np.frombuffer(out[:n], dtype=np.uint8).copy())
    stored = torch.from_numpy(np.frombuffer(out[n:n + 4 * groups], dtype=np.float32).copy())
    back = torch.from_numpy(np.frombuffer(out[n + 4 * groups:], dtype=np.float32).copy())
    want_codes, want_stored, want_back, nan = ref_fp8(t.float(), groups, fmt)
    # A NaN code's sign is the product's NaN's, which is the CPU's choice.
    fmt_nan = (codes & 0x7F) == (0x7F if fmt == "e4m3" else 0x7E) if fmt == "e4m3" else None
    if fmt == "e4m3":
        code_ok = (codes == want_codes) | (nan & ((codes & 0x7F) == 0x7F))
    else:
        code_ok = (codes == want_codes) | (nan & ((codes & 0x7C) == 0x7C) & ((codes & 0x03) != 0))
    del fmt_nan
    ok(bool(code_ok.all()), "%s: codes bit for bit (%d differ)" % (label, int((~code_ok).sum())))
    ok(bool((stored.view(torch.int32) == want_stored.view(torch.int32)).all()),
       "%s: stored scales bit for bit" % label)
    bnan = torch.isnan(want_back)
    ok(bool((torch.isnan(back) == bnan).all()) and
       bool((back[~bnan].view(torch.int32) == want_back[~bnan].view(torch.int32)).all()),
       "%s: dequantized bit for bit (NaNs as NaNs)" % label)
    # Finite blocks: half an FP8 step of the value, or of the block's
    # subnormal spacing.
    xb = t.float().view(groups, -1)
    fin = torch.isfinite(xb).all(dim=1)
    rel, sub = (2.0 ** -4, 2.0 ** -10 / 448) if fmt == "e4m3" else (2.0 ** -3, 2.0 ** -17 / 57344)
    amax = xb.abs().max(dim=1).values
    err = (back.view(groups, -1) - xb).abs()[fin]
    bound = xb.abs()[fin] * rel * (1 + 2.0 ** -7) + (amax[fin] * sub * 2)[:, None]
    ok(bool((err <= bound).all()), "%s: finite blocks within half an FP8 step" % label)


def main():
    if not os.path.exists(DUMP):
        print("1..0 # SKIP %s not built" % DUMP)
        return 0
    rng = np.random.default_rng(20261207)
    n = 10 ** 6
    x = test_values(n, rng)
    acc_big = acc_zero = None
    with tempfile.TemporaryDirectory() as tmp:
        check(x, torch.float32, "f32", 8, 0, tmp)          # qwZ: 125 blocks of 8000
        check(x, torch.bfloat16, "bf16", 8, 0, tmp)
        check(x, torch.float16, "f16", 8, 0, tmp)
        check(x, torch.float32, "f32", 8, 2000, tmp)       # blocks of 500
        check(x, torch.float32, "f32", 4, 250, tmp)        # qgZ: blocks of 4000
        check(x, torch.bfloat16, "bf16", 4, 1000, tmp)     # blocks of 1000
        # quant_reduce: the 10^6 values as 4 tensors of 250000 (a host of
        # 4 ranks), int4 in blocks of 500 -> 1000 requantized; int8 as 8
        # tensors; and 2 tensors whose fp16 sum overflows somewhere.
        # FP8 blocks: qwZ-sized (125 blocks of 8000) and qgZ's 512.
        check_fp8(x, torch.float32, "f32", "e4m3", 125, tmp)
        check_fp8(x, torch.bfloat16, "bf16", "e4m3", 125, tmp)
        check_fp8(x, torch.float16, "f16", "e5m2", 125, tmp)
        check_fp8(x[:512 * 1953], torch.float32, "f32", "e5m2", 1953, tmp)
        check_fp8(x[:512 * 1953], torch.bfloat16, "bf16", "e4m3", 1953, tmp)
        check_reduce(x, 4, 4, 500, 250, tmp)
        check_reduce(x, 8, 8, 125, 250, tmp)
        check_reduce(x, 4, 2, 1000, 100, tmp)
        big = np.full(8000, 4.0e4, dtype=np.float32)
        acc_big = check_reduce(np.concatenate([big, big]), 4, 2, 1, 1, tmp)
        zeros = np.concatenate([np.zeros(1000, dtype=np.float32), x[200000:201000]] * 3)
        acc_zero = check_reduce(zeros, 4, 3, 2, 2, tmp)

    # The edge cases came out as the header says.
    h = torch.from_numpy(x).to(torch.float16)
    q, stored, deq = ref_quantize(h, 125, 8)
    ok(float(stored[0]) == 1.0 and bool((deq[:8000] == 0).all()), "an all-zero block: scale 1, zeros back")
    ok(bool(torch.isnan(deq[128000:136000]).all()), "a value beyond fp16 makes its block NaN, as DeepSpeed's")
    ok(float(deq[112000 + 17]) == 0.0 and bool(torch.isfinite(deq[112000:120000]).all()),
       "a NaN in a finite block comes back as 0, as DeepSpeed's")
    ok(int(q[104000:112000].max()) == 127 and int(q[104000:112000].min()) == -128,
       "+absmax codes as 127, -absmax as -128")
    ok(acc_zero is not None and bool((acc_zero[:1000] == 0).all()),
       "quant_reduce: blocks that are zero in every tensor sum to zeros")
    ok(acc_big is not None and bool(torch.isinf(acc_big).all()),
       "quant_reduce: an fp16 sum beyond 65504 is infinite, as DeepSpeed's __hadd2 makes it")

    # The weight grouping, against the transcription and against
    # DeepSpeed's own CUDAQuantizer where it can be imported.
    sizes = [8, 24, 4096, 8000, 8192, 12288, 16384, 24576, 40960, 65536, 100000, 131072,
             4096 * 7, 4096 * 13, 4096 * 521, 1 << 20, 10 ** 6, 786432, 1000, 7, 12, 16000 * 8]
    p = subprocess.run([DUMP, "groups"] + [str(s) for s in sizes], capture_output=True, text=True,
                       timeout=60)
    got = [int(v) for v in p.stdout.split()]
    want = [ref_groups(s) for s in sizes]
    ok(got == want, "weight block counts match the transcription: %s" % got)
    ds_groups = None
    try:
        import logging
        logging.disable(logging.WARNING)
        from deepspeed.runtime.zero import partition_parameters as pp

        class Recorder:
            Symmetric = 0

            def quantize(self, param, groups, bits, kind):
                return groups

        q = pp.CUDAQuantizer.__new__(pp.CUDAQuantizer)
        q.quantizer_cuda_module = Recorder()
        q.group_size_cache = {}
        ds_groups = []
        for s in sizes:
            try:
                ds_groups.append(q.quantize(torch.empty(s)))
            except AssertionError:
                ds_groups.append(0)
    except Exception as e:  # deepspeed missing or unimportable
        print("# DeepSpeed's CUDAQuantizer not available: %s" % e)
    if ds_groups is None:
        print("ok %d # SKIP deepspeed is not importable" % (n_test + 1))
        globals()["n_test"] += 1
    else:
        ok(got == ds_groups, "weight block counts match DeepSpeed's CUDAQuantizer: %s" % ds_groups)

    # The swizzle of 2 hosts of 4: DeepSpeed's comment's example.
    p = subprocess.run([DUMP, "swizzle", "2", "4"], capture_output=True, text=True, timeout=60)
    dest = [int(v) for v in p.stdout.split()]
    order = [0] * 8
    for src, d in enumerate(dest):
        order[d] = src
    ok(order == [0, 4, 1, 5, 2, 6, 3, 7], "swizzle of 2 x 4 partitions: %s" % order)
    p = subprocess.run([DUMP, "swizzle", "1", "3"], capture_output=True, text=True, timeout=60)
    ok([int(v) for v in p.stdout.split()] == [0, 1, 2], "one host: the swizzle keeps the order")

    print("1..%d" % n_test)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
