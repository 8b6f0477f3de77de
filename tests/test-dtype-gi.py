#!/usr/bin/env python3
# test-dtype-gi.py — the library through GObject Introspection from Python:
# version constants and conversions whose bits are known from the IEEE
# formats themselves (values worked out by hand, see each comment).
import struct
import sys

import gi
gi.require_version("GLib", "2.0")
gi.require_version("Mixprec", "1.0")
from gi.repository import GLib, Mixprec  # noqa: E402

results = []


def check(name, cond):
    results.append((name, bool(cond)))


def f32_bytes(*values):
    return GLib.Bytes.new(struct.pack("<%df" % len(values), *values))


def u16(b):
    data = b.get_data()
    return list(struct.unpack("<%dH" % (len(data) // 2), data))


# Version: the constants the typelib carries and the run-time queries agree.
check("version constants match run-time version",
      (Mixprec.MAJOR_VERSION, Mixprec.MINOR_VERSION, Mixprec.MICRO_VERSION) ==
      (Mixprec.get_major_version(), Mixprec.get_minor_version(), Mixprec.get_micro_version()))
check("check_version accepts this version",
      Mixprec.check_version(Mixprec.MAJOR_VERSION, 0, 0) is None)

# fp32 -> bf16, round to nearest even: 1.0 = 0x3F800000 -> 0x3F80;
# 1 + 2^-8 is exactly halfway between bf16 1.0 and 1.0078125: ties to even
# -> 0x3F80; 1 + 3*2^-8 is halfway between 0x3F81 and 0x3F82 -> even 0x3F82.
out = Mixprec.convert(Mixprec.DType.FLOAT32, f32_bytes(1.0, 1.0 + 2**-8, 1.0 + 3 * 2**-8, -2.0),
                      Mixprec.DType.BFLOAT16, Mixprec.Rounding.NEAREST_EVEN, 0)
check("fp32 -> bf16 nearest-even bits", u16(out) == [0x3F80, 0x3F80, 0x3F82, 0xC000])

# fp32 -> fp16: 65504 is the largest finite (0x7BFF); 65520 rounds up to
# infinity (0x7C00); 2^-24 is the smallest subnormal (0x0001).
out = Mixprec.convert(Mixprec.DType.FLOAT32, f32_bytes(65504.0, 65520.0, 2.0**-24, 0.5),
                      Mixprec.DType.FLOAT16, Mixprec.Rounding.NEAREST_EVEN, 0)
check("fp32 -> fp16 max, overflow, subnormal", u16(out) == [0x7BFF, 0x7C00, 0x0001, 0x3800])

# bf16 -> fp32 is exact: 0x4049 is 3.140625.
back = Mixprec.convert(Mixprec.DType.BFLOAT16, GLib.Bytes.new(struct.pack("<H", 0x4049)),
                       Mixprec.DType.FLOAT32, Mixprec.Rounding.NEAREST_EVEN, 0)
check("bf16 -> fp32 exact", struct.unpack("<f", back.get_data())[0] == 3.140625)

# Stochastic rounding is reproducible for a seed.
src = f32_bytes(*[1.0 + i * 1e-4 for i in range(64)])
a = Mixprec.convert(Mixprec.DType.FLOAT32, src, Mixprec.DType.BFLOAT16, Mixprec.Rounding.STOCHASTIC, 7)
b = Mixprec.convert(Mixprec.DType.FLOAT32, src, Mixprec.DType.BFLOAT16, Mixprec.Rounding.STOCHASTIC, 7)
check("stochastic rounding reproducible", a.get_data() == b.get_data())

# Bad input raises GLib.Error, never crashes.
try:
    Mixprec.convert(Mixprec.DType.FLOAT32, GLib.Bytes.new(b"\x00\x01\x02"),
                    Mixprec.DType.BFLOAT16, Mixprec.Rounding.NEAREST_EVEN, 0)
    check("length not a multiple of 4 raises", False)
except GLib.Error as e:
    check("length not a multiple of 4 raises",
          e.matches(Mixprec.dtype_error_quark(), Mixprec.DTypeError.INVALID_LENGTH))
try:
    Mixprec.convert(99, f32_bytes(1.0), Mixprec.DType.BFLOAT16, Mixprec.Rounding.NEAREST_EVEN, 0)
    check("bad dtype raises", False)
except (GLib.Error, ValueError, TypeError) as e:
    check("bad dtype raises", isinstance(e, GLib.Error) or "99" in str(e))

check("dtype names", [Mixprec.dtype_get_name(d) for d in
                      (Mixprec.DType.FLOAT32, Mixprec.DType.FLOAT16, Mixprec.DType.BFLOAT16)] ==
      ["float32", "float16", "bfloat16"])

print("1..%d" % len(results))
for i, (name, ok) in enumerate(results, 1):
    print("%s %d - %s" % ("ok" if ok else "not ok", i, name))
sys.exit(0 if all(ok for _, ok in results) else 1)
