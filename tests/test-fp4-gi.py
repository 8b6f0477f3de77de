#!/usr/bin/env python3
# test-fp4-gi.py — the 4-bit block functions through GObject Introspection
# from Python, without torch: bytes worked out by hand from the E2M1 grid
# (±0, 0.5, 1, 1.5, 2, 3, 4, 6; ties to the even code) and each scale
# mode's rule (see each comment), the tensor-scale out-argument, and
# GErrors raised as GLib.Error; param.fp4's uint8 views of an engine's
# 4-bit copy. Prints TAP.
import struct

import gi
gi.require_version("GLib", "2.0")
gi.require_version("Mixprec", "1.0")
from gi.repository import GLib, Mixprec  # noqa: E402

from python_tap import check, report  # noqa: E402


def f32_bytes(values):
    return GLib.Bytes.new(struct.pack("<%df" % len(values), *values))


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


# Block 0: amax 7 = 1.75 * 2^2. Block 1: amax 5 = 1.25 * 2^2.
x = [6.0, 3.0, 1.5, 0.75, 0.25, -4.0, 5.0, 7.0] + [0.0] * 24 + [5.0] + [0.0] * 31
# FLOOR: 2^(2 - 2) = 1 for both (byte 127): 6->7, 3->5, 1.5->3, 0.75->2
# (tie 0.5|1), 0.25->0 (tie 0|0.5), -4->0xE, 5->6 (tie 4|6), 7->7 (saturates).
floor_q = bytes([0x57, 0x23, 0xE0, 0x76] + [0] * 12 + [0x06] + [0] * 15)
# CEIL: 2^(2 + 1 - 2) = 2 for both (byte 128): halves 3, 1.5, 0.75, 0.375,
# 0.125, -2, 2.5, 3.5 -> 5, 3, 2, 1, 0, 0xC, 4 (tie 2|3), 6 (tie 3|4); 2.5 -> 4.
ceil_q = bytes([0x35, 0x12, 0xC0, 0x64] + [0] * 12 + [0x04] + [0] * 15)
# EVEN: 7 rounds to 8 (1.75 rounds up), 5 stays (1.25): bytes 128, 127.
# RCEIL: ceil(log2(7 / 6)) = 1, ceil(log2(5 / 6)) = 0: bytes 128, 127.
want = {
    "FLOOR": (Mixprec.MxScaleMode.FLOOR, floor_q, [127, 127]),
    "CEIL": (Mixprec.MxScaleMode.CEIL, ceil_q, [128, 128]),
    "EVEN": (Mixprec.MxScaleMode.EVEN, ceil_q[:16] + floor_q[16:], [128, 127]),
    "RCEIL": (Mixprec.MxScaleMode.RCEIL, ceil_q[:16] + floor_q[16:], [128, 127]),
}
for name, (mode, wq, ws) in want.items():
    q, scales, ts = Mixprec.quantize_blocks(Mixprec.BlockRecipe.MXFP4, mode, f32_bytes(x), 64,
                                            Mixprec.Rounding.NEAREST_EVEN, 0)
    check(f"MXFP4 {name}: E8M0 scales {ws}", list(scales.get_data()) == ws, list(scales.get_data()))
    check(f"MXFP4 {name}: packed E2M1 bytes", q.get_data() == wq, q.get_data().hex())
    check(f"MXFP4 {name}: tensor scale 1", ts == 1.0)

# NVFP4: amax 6 gives the tensor scale 6 / 2688 and the block scale 448
# (0x7E); the elements are then about themselves: 6 -> 7, -3 -> 0xD, 0.5 -> 1.
y = [6.0, -3.0, 0.5] + [0.0] * 13
q, scales, ts = Mixprec.quantize_blocks(Mixprec.BlockRecipe.NVFP4, Mixprec.MxScaleMode.FLOOR, f32_bytes(y), 16,
                                        Mixprec.Rounding.NEAREST_EVEN, 0)
check("NVFP4: tensor scale is amax / (448 * 6)", ts == f32(f32(6.0) / 2688.0), repr(ts))
check("NVFP4: block scale 448 (E4M3 0x7E)", list(scales.get_data()) == [0x7E], list(scales.get_data()))
check("NVFP4: packed bytes", q.get_data() == bytes([0xD7, 0x01, 0, 0, 0, 0, 0, 0]), q.get_data().hex())
back = struct.unpack("<16f", Mixprec.dequantize_blocks(Mixprec.BlockRecipe.NVFP4, q, scales, ts, 16).get_data())
check("NVFP4: dequantized within a rounding of 6, -3, 0.5",
      all(abs(b - w) <= 1e-6 * abs(w) for b, w in zip(back, y)), back[:3])

# unscaled packing and decoding
p = Mixprec.fp4_pack(f32_bytes([1.0, -0.5, 6.5, float("-inf")]), Mixprec.Rounding.NEAREST_EVEN, 0)
check("fp4_pack: 1, -0.5, 6.5, -Inf -> 0x92, 0xF7", p.get_data() == bytes([0x92, 0xF7]), p.get_data().hex())
check("fp4_e2m1_to_float: code 0xF is -6", Mixprec.fp4_e2m1_to_float(0xF) == -6.0)
check("block sizes: NVFP4 16, MXFP4 32",
      Mixprec.block_recipe_get_block_size(Mixprec.BlockRecipe.NVFP4) == 16
      and Mixprec.block_recipe_get_block_size(Mixprec.BlockRecipe.MXFP4) == 32)

try:
    Mixprec.quantize_blocks(Mixprec.BlockRecipe.MXFP4, Mixprec.MxScaleMode.FLOOR, f32_bytes([0.0] * 16), 16,
                            Mixprec.Rounding.NEAREST_EVEN, 0)
    check("a row of 16 is refused for MXFP4", False)
except GLib.Error as e:
    check("a row of 16 is refused for MXFP4 (BlockError.SHAPE)",
          e.domain == "mixprec-block-error-quark" and e.code == Mixprec.BlockError.SHAPE, e.message)
try:
    Mixprec.fp4_pack(f32_bytes([0.0] * 3), Mixprec.Rounding.NEAREST_EVEN, 0)
    check("an odd count is refused", False)
except GLib.Error as e:
    check("an odd count is refused (BlockError.LENGTH)", e.code == Mixprec.BlockError.LENGTH, e.message)

# param.fp4: the engine's 4-bit copy as uint8 views (no numpy needed).
for recipe_json, recipe in (('"nvfp4", "weights_2d": true', Mixprec.BlockRecipe.NVFP4_2D),
                            ('"mxfp4"', Mixprec.BlockRecipe.MXFP4)):
    cfg = Mixprec.Config.new_from_data('{"bf16": {"enabled": true}, "fp4": {"enabled": true, '
                                       '"recipe": %s}}' % recipe_json, -1)
    eng = Mixprec.Engine.new(cfg)
    w_init = [((i * 37) % 101 - 50) / 8.0 for i in range(20 * 64)]
    w = eng.register_param("w", [20, 64], "Linear", Mixprec.DType.FLOAT32, f32_bytes(w_init))
    b = eng.register_param("b", [64], "LayerNorm", Mixprec.DType.FLOAT32, f32_bytes(w_init[:64]))
    c = w.fp4
    bs = Mixprec.block_recipe_get_block_size(recipe)
    q, sc, ts = Mixprec.quantize_blocks(recipe, Mixprec.MxScaleMode.FLOOR, w.get_master(), 64,
                                        Mixprec.Rounding.NEAREST_EVEN, 0)
    label = c.recipe_name
    check(f"param.fp4 {label}: shapes (20, 32) and (20, {64 // bs}), block size {bs}",
          c.data.shape == (20, 32) and c.scales.shape == (20, 64 // bs) and c.block_size == bs
          and c.rows == 20 and c.cols == 64 and c.recipe == recipe, (c.data.shape, c.scales.shape))
    check(f"param.fp4 {label}: the bytes and scales of mixprec_quantize_blocks() of the master",
          c.data.tobytes() == q.get_data() and c.scales.tobytes() == sc.get_data()
          and c.tensor_scale == ts, (c.tensor_scale, ts))
    mv = c.data.memoryview()
    check(f"param.fp4 {label}: a read-only memoryview of the engine's bytes",
          mv.readonly and mv.shape == (20, 32) and mv.tobytes() == q.get_data()
          and c.data.address == Mixprec.Param.get_fp4_address(w)[0])
    check(f"param.fp4 {label}: on DLPack's kDLCPU", c.data.__dlpack_device__() == (1, 0))
    try:
        b.fp4
        check(f"param.fp4 {label}: a parameter that is not fp4 raises GLib.Error", False)
    except GLib.Error as e:
        check(f"param.fp4 {label}: a parameter that is not fp4 raises GLib.Error naming it",
              "'b'" in e.message, e.message)

report()
