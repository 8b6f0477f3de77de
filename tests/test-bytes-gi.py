#!/usr/bin/env python3
# test-bytes-gi.py — every GBytes argument of the API from Python takes
# GLib.Bytes, bytes, bytearray, memoryview, NumPy arrays and CPU torch
# tensors (the overrides in bindings/gi/overrides), and Config.new_from_data
# takes a str and bytes as in 1.0. Expectation: the same values handed over
# as GLib.Bytes of struct-packed bits, compared bit for bit with what the
# engine holds; wrong arguments fail with an error that names them.
import ctypes
import os
import struct
import sys

import gi
import gi.overrides
# The overrides of this tree, never an installed copy.
tree_overrides = os.path.join(os.environ.get("G_TEST_SRCDIR", "tests"), "..", "bindings", "gi",
                              "overrides")
gi.overrides.__path__.insert(0, os.path.abspath(tree_overrides))
gi.require_version("GLib", "2.0")
gi.require_version("Mixprec", "1.0")
from gi.repository import GLib, Mixprec  # noqa: E402

from python_optional import require  # noqa: E402

# numpy and torch are optional: their checks skip, the others run.
if require("torch", "PYTHON_TORCH", optional=True):
    import torch
    no_torch = None
else:
    torch = None
    no_torch = "torch is not importable (no Python with gi and torch: see PYTHON_TORCH)"
try:
    import numpy as np
    no_numpy = None
except ImportError:
    np = None
    no_numpy = "numpy is not importable (Debian package python3-numpy)"

results = []


def check(name, cond, skip=None):
    results.append((name, bool(cond) if skip is None else True, skip))


def raises(fn, kind):
    """The message of the @kind exception fn() raises, or None."""
    try:
        fn()
    except kind as err:
        return str(err)
    return None


D = Mixprec.DType
VALUES = [0.5, -1.25, 2.0, 0.75, -0.125, 3.0, 1.0e-3, 65504.0]
F32 = struct.pack("<8f", *VALUES)
F16 = struct.pack("<8e", *VALUES)
# bfloat16 bits: the high halves of the float32 ones (truncated, which
# does not matter: the engine keeps initial values of its working dtype
# bit for bit).
BF16 = b"".join(struct.pack("<f", v)[2:] for v in VALUES)


def engine(mode):
    doc = {"fp32": '{}',
           "fp16": '{"fp16": {"enabled": true}}',
           "bf16": '{"bf16": {"enabled": true}}'}[mode]
    return Mixprec.Engine.new(Mixprec.Config.new_from_data(doc))


_engines = []


def reg(mode, name, shape, dtype, init):
    """A parameter registered alone on a new engine: reading its buffers
    lays the engine out, after which nothing more can be registered."""
    e = engine(mode)
    _engines.append(e)
    return e.register_param(name, shape, "Linear", dtype, init)


def working(param):
    return bytes(param.get_working(param.get_working_dtype()).get_data())


# ------------------------------------------------------------ register_param
# fp32 engine: the working copy is the initial float32 values themselves.
reference = reg("fp32", "ref", [8], D.FLOAT32, GLib.Bytes.new(F32))
check("register_param takes GLib.Bytes (the reference)", working(reference) == F32)
sources = [("bytes", F32), ("bytearray", bytearray(F32)), ("memoryview", memoryview(F32)),
           ("memoryview of float32", memoryview(bytearray(F32)).cast("f"))]
for what, init in sources:
    p = reg("fp32", "w-" + what.replace(" ", "-"), [8], D.FLOAT32, init)
    check("register_param takes %s, bit for bit" % what, working(p) == F32)
p = reg("fp32", "w-2d", [2, 4], D.FLOAT32, memoryview(F32).cast("f", [2, 4]))
check("register_param takes a 2-d memoryview", working(p) == F32)

if np is not None:
    a = np.array(VALUES, dtype=np.float32)
    p = reg("fp32", "w-numpy", [8], D.FLOAT32, a)
    check("register_param takes a float32 NumPy array, bit for bit", working(p) == F32)
    p = reg("fp32", "w-numpy-2d", [2, 4], D.FLOAT32, a.reshape(2, 4))
    check("register_param takes a 2-d NumPy array", working(p) == F32)
    p = reg("fp32", "w-numpy-u8", [8], D.FLOAT32, np.frombuffer(F32, np.uint8))
    check("register_param takes a uint8 NumPy array as raw bytes", working(p) == F32)
else:
    for what in ("a float32 NumPy array", "a 2-d NumPy array", "a uint8 NumPy array"):
        check("register_param takes %s" % what, True, no_numpy)

if torch is not None:
    t = torch.tensor(VALUES, dtype=torch.float32)
    p = reg("fp32", "w-torch", [8], D.FLOAT32, t)
    check("register_param takes a float32 torch tensor, bit for bit", working(p) == F32)
    p = reg("fp32", "w-torch-view", [4], D.FLOAT32, t[4:])
    check("register_param takes a torch tensor at an offset into its storage",
          working(p) == F32[16:])
else:
    check("register_param takes a float32 torch tensor", True, no_torch)
    check("register_param takes a torch tensor at an offset", True, no_torch)

# fp16 and bf16 engines: initial values in the working dtype are kept as
# they are, bit for bit; the FP32 master holds them widened.
p = reg("fp16", "h-bytes", [8], D.FLOAT16, F16)
check("fp16: register_param takes float16 bytes, bit for bit", working(p) == F16)
if np is not None:
    p = reg("fp16", "h-numpy", [8], D.FLOAT16, np.array(VALUES, np.float16))
    check("fp16: register_param takes a float16 NumPy array, bit for bit", working(p) == F16)
    check("fp16: the master holds the values widened",
          bytes(p.get_master().get_data())
          == struct.pack("<8f", *struct.unpack("<8e", F16)))
    p = reg("fp16", "h-numpy-u16", [8], D.FLOAT16, np.frombuffer(F16, np.uint16))
    check("fp16: register_param takes uint16 bits of float16", working(p) == F16)
else:
    for what in ("a float16 NumPy array", "the master widened", "uint16 bits"):
        check("fp16: register_param takes %s" % what, True, no_numpy)
if torch is not None:
    p = reg("fp16", "h-torch", [8], D.FLOAT16,
                           torch.tensor(VALUES, dtype=torch.float16))
    check("fp16: register_param takes a float16 torch tensor, bit for bit", working(p) == F16)
else:
    check("fp16: register_param takes a float16 torch tensor", True, no_torch)

p = reg("bf16", "b-bytes", [8], D.BFLOAT16, bytearray(BF16))
check("bf16: register_param takes bfloat16 bits in a bytearray", working(p) == BF16)
if torch is not None:
    t = torch.tensor(VALUES, dtype=torch.float32).to(torch.bfloat16)
    p = reg("bf16", "b-torch", [8], D.BFLOAT16, t)
    check("bf16: register_param takes a bfloat16 torch tensor, bit for bit",
          working(p) == t.view(torch.int16).numpy().tobytes())
else:
    check("bf16: register_param takes a bfloat16 torch tensor", True, no_torch)

e = engine("fp32")
e16 = engine("fp16")
# ------------------------------------------------------------ wrong arguments
msg = raises(lambda: e.register_param("x", [8], "Linear", D.FLOAT32, "text"), TypeError)
check("a str is refused with a TypeError naming init", msg and "init" in msg)
msg = raises(lambda: e.register_param("x", [8], "Linear", D.FLOAT32, 3), TypeError)
check("an int is refused with a TypeError naming init", msg and "init" in msg)
msg = raises(lambda: e.register_param("x", [4], "Linear", D.FLOAT32,
                                      memoryview(bytearray(F32)).cast("f")[::2]), ValueError)
check("a non-contiguous memoryview is refused naming init", msg and "init" in msg
      and "contiguous" in msg)
if np is not None:
    a = np.array(VALUES, dtype=np.float32)
    msg = raises(lambda: e.register_param("x", [4], "Linear", D.FLOAT32, a[::2]), ValueError)
    check("a non-contiguous NumPy array is refused naming init",
          msg and "'x': init" in msg and "contiguous" in msg)
    msg = raises(lambda: e.register_param("x", [8], "Linear", D.FLOAT32, a.astype(np.float64)),
                 TypeError)
    check("float64 elements for float32 are refused, the sizes named",
          msg and "init" in msg and "8-byte" in msg and "4 bytes" in msg)
    msg = raises(lambda: e16.register_param("x", [8], "Linear", D.FLOAT16, a[:4].view(np.int32)),
                 TypeError)
    check("int32 elements for float16 are refused", msg and "init" in msg)
    msg = raises(lambda: e.register_param("x", [8], "Linear", D.FLOAT32, a.view(np.int32)),
                 TypeError)
    check("int32 elements for float32 (same size, not floats) are refused",
          msg and "init" in msg)
else:
    for what in ("a non-contiguous NumPy array", "float64 for float32", "int32 for float16",
                 "int32 for float32"):
        check("%s is refused" % what, True, no_numpy)
if torch is not None:
    t = torch.tensor(VALUES, dtype=torch.float32)
    msg = raises(lambda: e.register_param("x", [4], "Linear", D.FLOAT32, t[::2]), ValueError)
    check("a non-contiguous torch tensor is refused naming init",
          msg and "init" in msg and "contiguous" in msg)
    msg = raises(lambda: e.register_param("x", [8], "Linear", D.FLOAT32, t.double()), TypeError)
    check("a float64 torch tensor is refused naming init", msg and "init" in msg)

    class OnCuda(object):
        """A CPU tensor that says it lies on CUDA device 0, as a CUDA tensor
        does (this test runs without a GPU)."""

        def __init__(self, tensor):
            self.tensor = tensor

        def __dlpack_device__(self):
            return (2, 0)

        def __dlpack__(self, stream=None):
            capsule = self.tensor.__dlpack__()
            get = ctypes.pythonapi.PyCapsule_GetPointer
            get.restype = ctypes.c_void_p
            get.argtypes = [ctypes.py_object, ctypes.c_char_p]
            # DLTensor: data (a pointer), then device_type (int).
            ctypes.c_int.from_address(get(capsule, b"dltensor")
                                      + ctypes.sizeof(ctypes.c_void_p)).value = 2
            return capsule

    msg = raises(lambda: e.register_param("x", [8], "Linear", D.FLOAT32, OnCuda(t)), ValueError)
    check("a CUDA tensor is refused naming init and its device",
          msg and "init" in msg and "(2, 0)" in msg)
else:
    for what in ("a non-contiguous torch tensor", "a float64 torch tensor", "a CUDA tensor"):
        check("%s is refused" % what, True, no_torch)

# ------------------------------------------------------------ the other GBytes arguments
fp16 = D.FLOAT16
rne = Mixprec.Rounding.NEAREST_EVEN
expected = bytes(Mixprec.convert(D.FLOAT32, GLib.Bytes.new(F32), fp16, rne, 0).get_data())
check("convert takes bytes", bytes(Mixprec.convert(D.FLOAT32, F32, fp16, rne, 0).get_data())
      == expected == F16)
check("convert takes a memoryview",
      bytes(Mixprec.convert(D.FLOAT32, memoryview(F32), fp16, rne, 0).get_data()) == F16)
if np is not None:
    check("convert takes a NumPy array",
          bytes(Mixprec.convert(D.FLOAT32, np.array(VALUES, np.float32), fp16, rne, 0)
                .get_data()) == F16)
    msg = raises(lambda: Mixprec.convert(D.FLOAT16, np.array(VALUES, np.float32), D.FLOAT32,
                                         rne, 0), TypeError)
    check("convert refuses float32 elements said to be float16, naming src",
          msg and "src" in msg)
else:
    check("convert takes a NumPy array", True, no_numpy)
    check("convert refuses mismatched elements", True, no_numpy)

f8 = D.FLOAT8_E4M3
q_ref, amax_ref = Mixprec.fp8_quantize(f8, GLib.Bytes.new(F32[:24]), 1.0,
                                       Mixprec.Fp8Overflow.SATURATING)
q, amax = Mixprec.fp8_quantize(f8, bytearray(F32[:24]), 1.0, Mixprec.Fp8Overflow.SATURATING)
check("fp8_quantize takes a bytearray", q.get_data() == q_ref.get_data() and amax == amax_ref)
d_ref = Mixprec.fp8_dequantize(f8, q_ref, 1.0).get_data()
check("fp8_dequantize takes bytes", Mixprec.fp8_dequantize(f8, bytes(q_ref.get_data()),
                                                           1.0).get_data() == d_ref)

block = Mixprec.MX_BLOCK_SIZE
mx_src = struct.pack("<%df" % block, *[(i - 16) / 8.0 for i in range(block)])
elems, scales = Mixprec.mx_quantize(f8, GLib.Bytes.new(mx_src), block)
check("mx_quantize takes bytes",
      Mixprec.mx_quantize(f8, mx_src, block)[0].get_data() == elems.get_data())
deq = Mixprec.mx_dequantize(f8, elems, scales, block).get_data()
check("mx_dequantize takes bytes and a memoryview of the scales",
      Mixprec.mx_dequantize(f8, bytes(elems.get_data()), memoryview(scales.get_data()),
                            block).get_data() == deq)

# A parameter's gradient: set_grad, add_grad and reduce_grad(dtype, data).
e = engine("fp32")
p = e.register_param("g", [8], "Linear", D.FLOAT32, F32)
p.set_grad(D.FLOAT32, GLib.Bytes.new(F32))
via_gbytes = p.grad.tobytes()
p.set_grad(D.FLOAT32, bytearray(F32))
check("set_grad takes a bytearray", p.grad.tobytes() == via_gbytes == F32)
p.add_grad(D.FLOAT32, memoryview(F32))
twice = struct.pack("<8f", *[2 * v for v in VALUES])
check("add_grad takes a memoryview", p.grad.tobytes() == twice)
if np is not None:
    p.set_grad(D.FLOAT32, np.array(VALUES, np.float32))
    check("set_grad takes a NumPy array", p.grad.tobytes() == F32)
    msg = raises(lambda: p.set_grad(D.FLOAT32, np.array(VALUES, np.float64)), TypeError)
    check("set_grad refuses float64, naming the parameter and grad",
          msg and "'g'" in msg and "grad" in msg)
else:
    check("set_grad takes a NumPy array", True, no_numpy)
    check("set_grad refuses float64", True, no_numpy)

# The collectives of a one-rank communicator return their input.
comm = Mixprec.Comm.new(None, "auto", None, 0)
SUM = Mixprec.ReduceOp.SUM
check("Comm.all_reduce takes bytes",
      bytes(comm.all_reduce(F32, D.FLOAT32, SUM).get_data()) == F32)
check("Comm.all_gather, reduce_scatter and broadcast take a bytearray and a memoryview",
      bytes(comm.all_gather(bytearray(F32), D.FLOAT32).get_data()) == F32 and
      bytes(comm.reduce_scatter(memoryview(F32), D.FLOAT32, SUM).get_data()) == F32 and
      bytes(comm.broadcast(bytearray(F32), D.FLOAT32, 0).get_data()) == F32)
if np is not None:
    check("Comm.all_reduce takes a NumPy array",
          bytes(comm.all_reduce(np.array(VALUES, np.float32), D.FLOAT32, SUM).get_data()) == F32)
    msg = raises(lambda: comm.all_reduce(np.array(VALUES, np.float64), D.FLOAT32, SUM), TypeError)
    check("Comm.all_reduce refuses float64 for float32, naming send", msg and "send" in msg)
else:
    check("Comm.all_reduce takes a NumPy array", True, no_numpy)
    check("Comm.all_reduce refuses float64 for float32", True, no_numpy)
if torch is not None:
    check("Comm.all_reduce takes a torch tensor",
          bytes(comm.all_reduce(torch.tensor(VALUES), D.FLOAT32, SUM).get_data()) == F32)
else:
    check("Comm.all_reduce takes a torch tensor", True, no_torch)

# ------------------------------------------------------------ Config.new_from_data
DOC = '{"fp16": {"enabled": true}, "zero_optimization": {"stage": 2}}'
text = Mixprec.Config.new_from_data(DOC).to_data()[0]
check("Config.new_from_data takes a str", "fp16" in text)
check("Config.new_from_data takes bytes, as 1.0 did",
      Mixprec.Config.new_from_data(DOC.encode()).to_data()[0] == text)
check("Config.new_from_data takes a bytearray and a memoryview",
      Mixprec.Config.new_from_data(bytearray(DOC.encode())).to_data()[0] == text and
      Mixprec.Config.new_from_data(memoryview(DOC.encode())).to_data()[0] == text)
check("Config.new_from_data takes bytes and a length, as 1.0 did",
      Mixprec.Config.new_from_data(DOC.encode() + b"garbage", len(DOC)).to_data()[0] == text)
check("Config.new_from_data takes UTF-8 with a byte-order mark",
      Mixprec.Config.new_from_data(b"\xef\xbb\xbf" + DOC.encode()).to_data()[0] == text)
uni = '{"mixprec": {"strict": false}, "comment \u00e9": 1}'
check("non-ASCII UTF-8 bytes read as the same str",
      Mixprec.Config.new_from_data(uni.encode()).to_data()[0]
      == Mixprec.Config.new_from_data(uni).to_data()[0])


def config_error(data):
    try:
        Mixprec.Config.new_from_data(data)
    except GLib.Error as err:
        return err
    return None


err = config_error(b'{\n  "fp16": "\xff"}')
check("bytes that are not UTF-8 fail as the C function says it (line, column, byte)",
      err is not None and err.matches(Mixprec.config_error_quark(), Mixprec.ConfigError.PARSE)
      and "line 2, column 12" in err.message and "0xFF" in err.message)
err = config_error(b'{"fp16": \x00}')
check("a NUL byte fails with a configuration error",
      err is not None and "NUL" in err.message)
err = config_error(b'{"fp16": {"loss_scale_window": -3}}')
check("an invalid value in bytes is reported by the library",
      err is not None and "fp16.loss_scale_window" in err.message)
msg = raises(lambda: Mixprec.Config.new_from_data(42), TypeError)
check("Config.new_from_data refuses an int, naming data", msg and "data" in msg)

print("1..%d" % len(results))
for i, (name, ok, why) in enumerate(results, 1):
    print("%s %d - %s%s" % ("ok" if ok else "not ok", i, name, " # SKIP " + why if why else ""))
sys.exit(0 if all(ok for _, ok, _ in results) else 1)
