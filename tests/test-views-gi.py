#!/usr/bin/env python3
# test-views-gi.py — the Python overrides' zero-copy views (buffer protocol,
# NumPy, DLPack) and zero-copy intake (register_external, reduce_grad), for
# fp32, fp16 and bf16 engines on the CPU. Expectations: the C library's own
# addresses, the GLib.Bytes copies, and the same training through the
# GLib.Bytes path, bit for bit.
import ctypes
import gc
import os
import struct
import subprocess
import sys
import weakref

import gi
import gi.overrides
# The overrides of this tree, never an installed copy (gi searches its own
# overrides directory first).
tree_overrides = os.path.join(os.environ.get("G_TEST_SRCDIR", "tests"), "..", "bindings", "gi",
                              "overrides")
gi.overrides.__path__.insert(0, os.path.abspath(tree_overrides))
gi.require_version("GLib", "2.0")
gi.require_version("Mixprec", "1.0")
from gi.repository import GLib, Mixprec  # noqa: E402

try:
    import numpy as np
except ImportError:
    print("1..0 # SKIP numpy is not importable (Debian package python3-numpy)")
    sys.exit(0)

# The torch checks run where configure found a Python with torch (the
# venv, which also sees gi and numpy); the others run without it.
from python_optional import require  # noqa: E402

if require("torch", "PYTHON_TORCH", optional=True):
    import torch
    no_torch = None
else:
    torch = None
    no_torch = "torch is not importable (no Python with gi and torch: see PYTHON_TORCH)"

results = []


def check(name, cond, skip=None):
    results.append((name, bool(cond) if skip is None else True, skip))


def skip(name, reason):
    results.append((name, True, reason))


B = Mixprec.ParamBuffer
D = Mixprec.DType
MODES = {
    "fp32": '{"optimizer": {"type": "AdamW", "params": {"lr": 0.01}}}',
    "fp16": '{"fp16": {"enabled": true, "initial_scale_power": 4},'
            ' "optimizer": {"type": "AdamW", "params": {"lr": 0.01}}}',
    "bf16": '{"bf16": {"enabled": true},'
            ' "optimizer": {"type": "AdamW", "params": {"lr": 0.01}}}',
}
PACK = {D.FLOAT32: "f", D.FLOAT16: "e"}
INIT = [0.5, -1.25, 2.0, 0.75, -0.125, 3.0]


def engine(mode, extra=""):
    json = MODES[mode]
    if extra:
        json = json[:-1] + ", " + extra + "}"
    return Mixprec.Engine.new(Mixprec.Config.new_from_data(json))


def f32(values):
    return GLib.Bytes.new(struct.pack("<%df" % len(values), *values))


def encode(dtype, values):
    """The bits of @values in @dtype (all exact in every format used here)."""
    if dtype == D.BFLOAT16:
        return b"".join(struct.pack("<f", v)[2:] for v in values)
    return struct.pack("<%d%s" % (len(values), PACK[dtype]), *values)


def address_of(array):
    return array.__array_interface__["data"][0]


def ownership_ok(view):
    a = np.asarray(view)
    return a.base is not None


# ------------------------------------------------------------ the DLPack layout
layout = os.path.join(os.environ.get("G_TEST_BUILDDIR", "tests"), "dlpack-layout")
ov = sys.modules["gi.overrides.Mixprec"]
check("the overrides are this tree's",
      os.path.samefile(os.path.dirname(ov.__file__), tree_overrides))
if os.access(layout, os.X_OK):
    lines = {}
    for line in subprocess.run([layout], capture_output=True, text=True,
                               check=True).stdout.splitlines():
        key, *values = line.split()
        lines[key] = " ".join(values)
    ok = True
    for struct_name in ("DLDevice", "DLDataType", "DLTensor", "DLManagedTensor"):
        cls = getattr(ov, struct_name)
        ok &= int(lines[struct_name]) == ctypes.sizeof(cls)
        for field, _ in cls._fields_:
            key = "%s.%s" % (struct_name, field)
            ok &= int(lines[key].split()[0]) == getattr(cls, field).offset
            ok &= int(lines[key].split()[1]) == getattr(cls, field).size
    check("ctypes DLPack structures match dlpack.h (version %s)" % lines["DLPACK_VERSION"], ok)
    check("DLPack codes match dlpack.h",
          (int(lines["kDLCPU"]), int(lines["kDLBfloat"]), int(lines["kDLFloat"]))
          == (ov._KDL_CPU, ov._FORMATS[D.BFLOAT16][2][0], ov._FORMATS[D.FLOAT32][2][0]))
else:
    skip("ctypes DLPack structures match dlpack.h",
         "tests/dlpack-layout not built (no dlpack/dlpack.h: Debian package libdlpack-dev)")


# ------------------------------------------------------------ views share memory
for mode in MODES:
    e = engine(mode)
    p = e.register_param("w", [2, 3], "Linear", D.FLOAT32, f32(INIT))
    wd = p.get_working_dtype()
    view = p.working
    address, dtype = p.get_buffer_address(B.WORKING)
    check("%s: working view dtype %s" % (mode, view.dtype_name),
          view.dtype == wd == dtype and
          view.dtype_name == {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}[mode])
    a = np.asarray(view)
    check("%s: numpy.asarray(param.working) is the engine's memory" % mode,
          address_of(a) == address == view.address and a.shape == (2, 3) and a.flags.writeable)
    check("%s: the array holds the engine's values" % mode,
          a.tobytes() == p.get_working(wd).get_data() == encode(wd, INIT))
    m = view.memoryview()
    check("%s: memoryview(view) is the engine's memory" % mode,
          address_of(np.asarray(m)) == address and m.nbytes == 6 * Mixprec.dtype_get_size(wd)
          and m.shape == (2, 3))
    if hasattr(memoryview, "__buffer__") or sys.version_info >= (3, 12):
        check("%s: memoryview(param.working) (PEP 688)" % mode,
              address_of(np.asarray(memoryview(view))) == address)
    else:
        skip("%s: memoryview(param.working) (PEP 688)" % mode,
             "Python %d.%d has no __buffer__; view.memoryview() serves" % sys.version_info[:2])

    # A write through NumPy is what the GLib.Bytes copy reads.
    new = [1.5, -2.0, 0.25, 4.0, -0.5, 8.0]
    a.view(np.uint8).reshape(-1)[:] = np.frombuffer(encode(wd, new), dtype=np.uint8)
    check("%s: a write through numpy is seen by param.get_working()" % mode,
          p.get_working(wd).get_data() == encode(wd, new))
    check("%s: ... and by the memoryview" % mode, m.tobytes() == encode(wd, new))

    # Gradients: GLib.Bytes in, the view sees them; written through the view,
    # DLPack sees them.
    gd = p.get_grad_dtype()
    g = np.asarray(p.grad)
    check("%s: numpy.asarray(param.grad) is the engine's memory" % mode,
          address_of(g) == p.get_buffer_address(B.GRAD)[0])
    p.set_grad(gd, GLib.Bytes.new(encode(gd, [0.25, 0.5, -1.0, 2.0, 0.0, -0.75])))
    check("%s: param.set_grad() is seen through the view" % mode,
          g.tobytes() == encode(gd, [0.25, 0.5, -1.0, 2.0, 0.0, -0.75]))

    if mode != "bf16":
        d = np.from_dlpack(p.grad)
        check("%s: numpy.from_dlpack(param.grad) is the engine's memory" % mode,
              address_of(d) == address_of(g) and d.dtype == np.dtype(view.dtype_name))
        # (NumPy marks what it takes through DLPack read-only.)
        g[0, 0] = 3.0
        check("%s: a write through the buffer view is seen through DLPack" % mode,
              d.tobytes()[:Mixprec.dtype_get_size(gd)] == encode(gd, [3.0]))
        del d
    # The capsule itself, for every dtype (numpy cannot take bf16).
    cap = p.working.__dlpack__()
    ptr = ctypes.pythonapi.PyCapsule_GetPointer
    ptr.restype, ptr.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    t = ov.DLManagedTensor.from_address(ptr(cap, b"dltensor")).dl_tensor
    check("%s: DLPack capsule: data, device, dtype, shape" % mode,
          t.data == address and t.device.device_type == 1 and t.ndim == 2 and
          (t.dtype.code, t.dtype.bits, t.dtype.lanes) == {"fp32": (2, 32, 1), "fp16": (2, 16, 1),
                                                          "bf16": (4, 16, 1)}[mode] and
          [t.shape[0], t.shape[1]] == [2, 3] and not t.strides and
          p.working.__dlpack_device__() == (1, 0))
    before = len(ov._exported)
    del cap, t
    check("%s: an unconsumed capsule releases its tensor" % mode, len(ov._exported) == before - 1)

    if torch is not None:
        tt = torch.from_dlpack(p.working)
        check("%s: torch.from_dlpack(param.working) is the engine's memory" % mode,
              tt.data_ptr() == address and tt.dtype == {"fp32": torch.float32,
                                                        "fp16": torch.float16,
                                                        "bf16": torch.bfloat16}[mode])
        tt[1, 2] = 16.0
        check("%s: a write through torch is seen by param.get_working()" % mode,
              p.get_working(wd).get_data()[-Mixprec.dtype_get_size(wd):] == encode(wd, [16.0]))
        del tt
    else:
        skip("%s: torch.from_dlpack(param.working) shares memory" % mode, no_torch)

    # Masters: read-only, and the optimizer's FP32 values.
    mv = np.asarray(p.master)
    check("%s: param.master is read-only FP32" % mode,
          not mv.flags.writeable and mv.dtype == np.float32 and
          mv.tobytes() == p.get_master().get_data())

    # The views hold the engine: it outlives everything made from them.
    keep = np.asarray(p.working)
    expected = p.get_working(wd).get_data()
    alive = weakref.ref(e)
    del e, p, view, a, g, m, mv
    check("%s: an array keeps the engine alive, and its memory" % mode,
          alive() is not None and keep.tobytes() == expected)
    del keep
    gc.collect()
    check("%s: ... until the array goes" % mode, alive() is None)


# ------------------------------------------------------------ bit-identical training
GRADS = [[0.25, -0.5, 1.0, 0.125, -2.0, 0.75],
         [-1.0, 0.5, 0.25, 4.0, 0.0, -0.25],
         [0.5, 0.5, -0.125, -1.0, 2.0, 1.0]]


def train(mode, how):
    e = engine(mode)
    p = e.register_param("w", [2, 3], "Linear", D.FLOAT32, f32(INIT))
    q = e.register_param("b", [3], "LayerNorm", D.FLOAT32, f32(INIT[:3]))
    out = []
    for grad in GRADS:
        for param, values in ((p, grad), (q, grad[:3])):
            gd = param.get_grad_dtype()
            bits = encode(gd, values)
            if how == "bytes":
                param.set_grad(gd, GLib.Bytes.new(bits))
            elif how == "view":
                np.asarray(param.grad).view(np.uint8).reshape(-1)[:] = np.frombuffer(bits, np.uint8)
            elif how == "reduce-bytes":
                param.reduce_grad(gd, GLib.Bytes.new(bits))
            else:
                raw = np.frombuffer(bits, dtype=np.uint16 if gd == D.BFLOAT16 else
                                    {D.FLOAT32: np.float32, D.FLOAT16: np.float16}[gd])
                param.reduce_grad(raw)
        e.backward_done()
        r = e.step()
        out.append((r.applied, r.grad_norm, r.loss_scale))
    for param in (p, q):
        out.append(param.get_master().get_data())
        out.append(param.get_working(param.get_working_dtype()).get_data())
    return out


for mode in MODES:
    reference = train(mode, "bytes")
    check("%s: training through the grad view is bit-identical to set_grad(GLib.Bytes)" % mode,
          train(mode, "view") == reference)
    check("%s: reduce_grad(array) is bit-identical to reduce_grad(dtype, GLib.Bytes)" % mode,
          train(mode, "reduce") == train(mode, "reduce-bytes"))
    check("%s: ... and to set_grad (one process, stage 0)" % mode,
          train(mode, "reduce") == reference)


# ------------------------------------------------------------ register_external
for mode in MODES:
    ref_e = engine(mode)
    ref = ref_e.register_param("w", [2, 3], "Linear", D.FLOAT32, f32(INIT))
    wd = ref.get_working_dtype()
    init = np.frombuffer(encode(wd, INIT), dtype=np.uint8).copy()
    if wd == D.BFLOAT16:
        w = init.view(np.uint16).reshape(2, 3)
        kw = {"dtype": D.BFLOAT16}
    else:
        w = init.view({D.FLOAT32: np.float32, D.FLOAT16: np.float16}[wd]).reshape(2, 3)
        kw = {}
    e = engine(mode)
    p = e.register_external("w", w, "Linear", **kw)
    check("%s: register_external keeps the caller's array" % mode,
          p.get_buffer_address(B.WORKING)[0] == address_of(w) and
          p.get_shape() == [2, 3] and p.get_working_dtype() == wd)
    check("%s: param.working of an external parameter is the array" % mode,
          p.working.address == address_of(w))
    for grad in GRADS:
        bits = encode(ref.get_grad_dtype(), grad)
        ref.set_grad(ref.get_grad_dtype(), GLib.Bytes.new(bits))
        np.asarray(p.grad).view(np.uint8).reshape(-1)[:] = np.frombuffer(bits, np.uint8)
        ref_e.backward_done()
        e.backward_done()
        ref_e.step()
        e.step()
    check("%s: the engine writes new values into the array, bit-identical to its own buffers"
          % mode, w.tobytes() == ref.get_working(wd).get_data() and
          p.get_master().get_data() == ref.get_master().get_data() and
          w.tobytes() != encode(wd, INIT))

    if torch is not None:
        e2 = engine(mode)
        tt = torch.zeros(2, 3, dtype={"fp32": torch.float32, "fp16": torch.float16,
                                      "bf16": torch.bfloat16}[mode])
        p2 = e2.register_external("w", tt, "Linear")
        check("%s: register_external keeps a torch tensor" % mode,
              p2.get_buffer_address(B.WORKING)[0] == tt.data_ptr())
    else:
        skip("%s: register_external keeps a torch tensor" % mode, no_torch)

# Refusals name the problem.
e = engine("fp16")
try:
    e.register_external("x", np.zeros(4, np.float32), "Linear")
    check("a working copy of the wrong dtype is refused", False)
except GLib.Error as err:
    check("a working copy of the wrong dtype is refused",
          err.matches(Mixprec.engine_error_quark(), Mixprec.EngineError.INVALID_PARAM) and
          "float16" in err.message and "float32" in err.message)
try:
    e.register_external("y", np.zeros((4, 4), np.float16)[:, ::2], "Linear")
    check("a strided array is refused", False)
except ValueError as err:
    check("a strided array is refused", "contiguous" in str(err))
ro = np.zeros(4, np.float16)
ro.flags.writeable = False
try:
    e.register_external("z", ro, "Linear")
    check("a read-only array is refused", False)
except ValueError as err:
    check("a read-only array is refused", "read-only" in str(err))
try:
    e.register_external("u", np.zeros(4, np.uint16), "Linear")
    check("uint16 without dtype= is refused", False)
except TypeError as err:
    check("uint16 without dtype= is refused", "dtype=" in str(err))
try:
    e.register_param("v", [4], "Linear", D.FLOAT32, f32([0.0] * 4)).reduce_grad(
        np.zeros(3, np.float16))
    check("a gradient of the wrong size is refused", False)
except ValueError as err:
    check("a gradient of the wrong size is refused", "3 elements, expected 4" in str(err))


# ------------------------------------------------------------ the accumulation buffer
e = engine("bf16", '"gradient_accumulation_steps": 2')
p = e.register_param("w", [2, 3], "Linear", D.FLOAT32, f32(INIT))
acc = p.accum
check("param.accum is read-only, in the accumulation dtype",
      acc.readonly and acc.dtype == p.get_accum_dtype() and
      not np.asarray(acc).flags.writeable)
p.set_grad(p.get_grad_dtype(), GLib.Bytes.new(encode(p.get_grad_dtype(), GRADS[0])))
e.backward_done()
check("param.accum holds the folded gradient (%s)" % Mixprec.dtype_get_name(p.get_accum_dtype()),
      np.asarray(p.accum).tobytes() == encode(p.get_accum_dtype(), GRADS[0]))
e = engine("fp32")
p = e.register_param("w", [2], "Linear", D.FLOAT32, f32([1.0, 2.0]))
try:
    p.accum
    check("no accumulation buffer in place: an error", False)
except GLib.Error as err:
    check("no accumulation buffer in place: an error",
          err.matches(Mixprec.engine_error_quark(), Mixprec.EngineError.WRONG_STATE))


# ------------------------------------------------------------ devices
# On the cpu engine every buffer is host memory: DLPack's (kDLCPU, 0).
e = engine("bf16")
p = e.register_param("w", [2, 3], "Linear", D.FLOAT32, f32(INIT))
q = e.register_param("g", [2, 3], "Linear", D.FLOAT32, f32(INIT))
check("a cpu engine's views are on DLPack device (1, 0)",
      p.working.device == (1, 0) and p.working.__dlpack_device__() == (1, 0) and
      p.master.__dlpack_device__() == (1, 0))
check("get_device_address on the cpu engine is the host address, device (1, 0)",
      tuple(p.get_device_address(Mixprec.ParamBuffer.WORKING)) ==
      (p.get_buffer_address(Mixprec.ParamBuffer.WORKING)[0], p.get_working_dtype(), 1, 0))


class OnCuda(object):
    """A DLPack producer whose tensor says it is on CUDA device 0 (a
    view's own capsule with its device rewritten)."""

    def __init__(self, view):
        self.view = view

    def __dlpack__(self, stream=None):
        capsule = self.view.__dlpack__()
        get = ctypes.pythonapi.PyCapsule_GetPointer
        get.restype = ctypes.c_void_p
        get.argtypes = [ctypes.py_object, ctypes.c_char_p]
        # DLTensor: data (a pointer), then device_type (int), device_id (int).
        ctypes.c_int.from_address(get(capsule, b"dltensor") + ctypes.sizeof(ctypes.c_void_p)).value = 2
        return capsule


try:
    p.reduce_grad(OnCuda(q.working))
    check("a gradient on a CUDA device is refused by a cpu engine", False)
except ValueError as err:
    check("a gradient on a CUDA device is refused by a cpu engine", "(2, 0)" in str(err))
try:
    e.register_external("x", OnCuda(q.working), "Linear")
    check("register_external refuses device memory", False)
except ValueError as err:
    check("register_external refuses device memory", "not in host memory" in str(err))

print("1..%d" % len(results))
for i, (name, ok, why) in enumerate(results, 1):
    print("%s %d - %s%s" % ("ok" if ok else "not ok", i, name, " # SKIP " + why if why else ""))
sys.exit(0 if all(ok for _, ok, _ in results) else 1)
