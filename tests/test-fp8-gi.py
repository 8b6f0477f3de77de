#!/usr/bin/env python3
# test-fp8-gi.py — the float8 casts through GObject Introspection from
# Python, without torch: bytes worked out by hand from the OCP 8-bit and
# MX formats (see each comment), the amax out-argument, the overflow enum,
# and GErrors raised as GLib.Error (g-ir-scanner drops the members'
# common INVALID_ prefix: Fp8Error.SCALE is MIXPREC_FP8_ERROR_INVALID_SCALE).
# Prints TAP.
import math
import struct

import gi
gi.require_version("GLib", "2.0")
gi.require_version("Mixprec", "1.0")
from gi.repository import GLib, Mixprec  # noqa: E402

from python_tap import check, report  # noqa: E402


def f32_bytes(*values):
    return GLib.Bytes.new(struct.pack("<%df" % len(values), *values))


def floats(b):
    data = b.get_data()
    return list(struct.unpack("<%df" % (len(data) // 4), data))


E4M3, E5M2 = Mixprec.DType.FLOAT8_E4M3, Mixprec.DType.FLOAT8_E5M2
SAT, NONSAT = Mixprec.Fp8Overflow.SATURATING, Mixprec.Fp8Overflow.NON_SATURATING
x = f32_bytes(1.0, 464.0, 465.0, -math.inf, math.nan, 2.0 ** -10)

# e4m3: 1.0 = 0x38; 464 is the tie between 448 (0x7E, even) and the NaN
# slot: 0x7E; 465 overflows: NaN 0x7F, or 448 saturating; -Inf: 0xFF (NaN
# with the sign) or -448 = 0xFE; NaN: 0x7F; 2^-10 is half the smallest
# subnormal 2^-9, a tie to even: 0.
q, amax = Mixprec.fp8_quantize(E4M3, x, 1.0, NONSAT)
check("e4m3 non-saturating bytes", list(q.get_data()) == [0x38, 0x7E, 0x7F, 0xFF, 0x7F, 0x00], list(q.get_data()))
check("the amax skips NaN and counts Inf", amax == math.inf, amax)
q, _ = Mixprec.fp8_quantize(E4M3, x, 1.0, SAT)
check("e4m3 saturating bytes", list(q.get_data()) == [0x38, 0x7E, 0x7E, 0xFE, 0x7F, 0x00], list(q.get_data()))

# e5m2 with scale 2: 2.0 = 0x40; 928 and 930 lie between 896 (0x63) and
# 1024 (0x64), below their midpoint 960: 0x63; -Inf: 0xFC, or -57344 =
# 0xFB saturating.
q, amax = Mixprec.fp8_quantize(E5M2, x, 2.0, NONSAT)
check("e5m2 non-saturating bytes", list(q.get_data())[:4] == [0x40, 0x63, 0x63, 0xFC], list(q.get_data()))
q, _ = Mixprec.fp8_quantize(E5M2, x, 2.0, SAT)
check("e5m2 saturating: -Inf gives -57344", list(q.get_data())[3] == 0xFB, list(q.get_data()))

# Decoding multiplies by scale_inv: 0x38 (1.0) and 0x7E (448) times 0.5.
back = floats(Mixprec.fp8_dequantize(E4M3, GLib.Bytes.new(bytes([0x38, 0x7E, 0x7F])), 0.5))
check("dequantize multiplies by scale_inv", back[:2] == [0.5, 224.0] and math.isnan(back[2]), back)

# MX e4m3, blocks of 2: (1000, 3): floor(log2 1000) = 9, exponent 9 - 8
# = 1, byte 128; 1000 / 2 = 500 saturates to 448 (0x7E), 3 / 2 = 1.5 =
# 0x3C. (0, 0): byte 0. (nan): byte 0xFF.
q, scales = Mixprec.mx_quantize(E4M3, f32_bytes(1000.0, 3.0, 0.0, 0.0, math.nan), 2)
check("MX scales", list(scales.get_data()) == [128, 0, 0xFF], list(scales.get_data()))
check("MX elements", list(q.get_data())[:4] == [0x7E, 0x3C, 0x00, 0x00], list(q.get_data()))
back = floats(Mixprec.mx_dequantize(E4M3, q, scales, 2))
check("MX decode: element * 2^(scale - 127)", back[:4] == [896.0, 3.0, 0.0, 0.0] and math.isnan(back[4]), back)
check("E8M0 127 is 1.0, 0xFF NaN", Mixprec.e8m0_to_float(127) == 1.0 and math.isnan(Mixprec.e8m0_to_float(255)))

# Errors: GLib.Error in the fp8 domain, naming the argument.
for name, call, code in [
        ("a non-float8 dtype", lambda: Mixprec.fp8_quantize(Mixprec.DType.FLOAT16, x, 1.0, SAT),
         Mixprec.Fp8Error.DTYPE),
        ("a zero scale", lambda: Mixprec.fp8_quantize(E4M3, x, 0.0, SAT), Mixprec.Fp8Error.SCALE),
        ("a NaN scale_inv", lambda: Mixprec.fp8_dequantize(E5M2, GLib.Bytes.new(b"\x01"), math.nan),
         Mixprec.Fp8Error.SCALE),
        ("a length that is no whole float32", lambda: Mixprec.fp8_quantize(E4M3, GLib.Bytes.new(b"abc"), 1.0, SAT),
         Mixprec.Fp8Error.LENGTH),
        ("a zero block size", lambda: Mixprec.mx_quantize(E4M3, x, 0), Mixprec.Fp8Error.BLOCK_SIZE),
        ("too few MX scales", lambda: Mixprec.mx_dequantize(E4M3, GLib.Bytes.new(b"\x01\x02\x03"),
                                                            GLib.Bytes.new(b"\x7f"), 2),
         Mixprec.Fp8Error.LENGTH)]:
    try:
        call()
        check(f"{name} raises GLib.Error", False, "no error")
    except GLib.Error as e:
        check(f"{name} raises GLib.Error (fp8 domain, code {int(code)})",
              e.domain == "mixprec-fp8-error-quark" and e.code == int(code), f"{e.domain} {e.code} {e.message}")

report()
