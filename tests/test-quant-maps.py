#!/usr/bin/env python3
# test-quant-maps.py — the quantization maps of libmixprec/numeric/
# numeric-quant.h against torchao's own (torchao.optim.subclass_8bit /
# subclass_4bit get_qmap_signed / get_qmap_unsigned, as float32 tensors
# the way OptimState8bit / OptimState4bit build them), bit for bit; and
# torchao's quantize_8bit_with_qmap / quantize_4bit_with_qmap on inputs
# around every map value and midpoint against a transcription of the
# header's rule, so the C reference and torchao are seen to agree on the
# same ties. Runs under PYTHON_TORCH (the PyPI venv); skips without
# torchao. Prints TAP.
import os
import re
import struct
import sys

from python_optional import require  # noqa: E402

require("torchao", "PYTHON_TORCH")

import torch  # noqa: E402
from torchao.optim import quant_utils  # noqa: E402
from torchao.optim import subclass_4bit, subclass_8bit  # noqa: E402

torch.set_num_threads(1)

HEADER = os.path.join(os.environ.get("G_TEST_SRCDIR", os.path.dirname(__file__)),
                      "..", "libmixprec", "numeric", "numeric-quant.h")


def f32_bits(x):
    return struct.unpack("<I", struct.pack("<f", x))[0]


def header_tables():
    text = open(HEADER).read()
    tables = {}
    for m in re.finditer(r"_MIXPREC_QMAP_DEFINE \((\w+), (\d+),(.*?)\)\n", text, re.S):
        values = [v.strip() for v in m.group(3).split(",")]
        floats = [float.fromhex(v[:-1]) if v != "0.0f" else 0.0 for v in values]
        assert len(floats) == int(m.group(2)), m.group(1)
        tables[m.group(1)] = floats
    return tables


def code_ref(q, table, levels):
    """The header's _mixprec_quant_code8/4, on float32 tensors."""
    qmap = torch.tensor(table, dtype=torch.float32)
    half = len(table) // 2
    codes = torch.where(q >= qmap[half], half, 0)
    step = half // 2
    while step >= 1:
        codes += torch.where(q >= qmap[codes + step], step, 0)
        step //= 2
    up = (codes + 1).clip(max=len(table) - 1)
    down_v = qmap[codes]
    up_v = qmap[up]
    return torch.where((q - down_v) >= (up_v - down_v) * 0.5, up, codes).to(torch.uint8)


def probes(table):
    """Each map value, each float32 midpoint, their float32 neighbours,
    and values outside the map's range."""
    t = torch.tensor(table, dtype=torch.float32)
    mids = (t[:-1] + t[1:]) * 0.5
    pts = torch.cat([t, mids, torch.tensor([-2.0, -1.0, 0.0, 1.0, 2.0, -0.0])])
    up = torch.nextafter(pts, torch.tensor(float("inf")))
    down = torch.nextafter(pts, torch.tensor(float("-inf")))
    g = torch.Generator().manual_seed(26)
    rnd = torch.rand(20000, generator=g) * 2 - 1
    return torch.cat([pts, up, down, rnd, torch.tensor([float("nan")])])


checks = []
tables = header_tables()
cases = [
    ("_mixprec_qmap_int8_signed", subclass_8bit.get_qmap_signed(), 8),
    ("_mixprec_qmap_int8_unsigned", subclass_8bit.get_qmap_unsigned(), 8),
    ("_mixprec_qmap_int4_signed", subclass_4bit.get_qmap_signed(), 4),
    ("_mixprec_qmap_int4_unsigned", subclass_4bit.get_qmap_unsigned(), 4),
]
for name, theirs, bits in cases:
    theirs32 = torch.tensor(theirs, dtype=torch.float32)
    ours = tables.get(name)
    same = ours is not None and len(ours) == len(theirs) and all(
        f32_bits(a) == f32_bits(b) for a, b in zip(ours, theirs32.tolist()))
    checks.append((same, "%s equals torchao's map bit for bit" % name))
    if ours is None:
        continue
    q = probes(ours)
    quant = quant_utils.quantize_8bit_with_qmap if bits == 8 else quant_utils.quantize_4bit_with_qmap
    got = quant(q, theirs32)
    want = code_ref(q, ours, bits)
    checks.append((torch.equal(got, want),
                   "%s: torchao's codes equal the header's rule on %d probes" % (name, q.numel())))

print("1..%d" % len(checks))
failed = 0
for i, (ok, what) in enumerate(checks, 1):
    print("%sok %d - %s" % ("" if ok else "not ", i, what))
    failed += not ok
sys.exit(1 if failed else 0)
