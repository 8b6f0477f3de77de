# Mixprec.py — PyGObject overrides for libmixprec: views that share memory
# with the engine's buffers, and a framework's tensors handed to the engine
# without a copy.
"""Zero-copy views for ``from gi.repository import Mixprec``.

``param.working``, ``param.grad``, ``param.master`` and ``param.accum``
(read-only) return a :class:`Mixprec.View` of the engine's buffer
(``param.fp4``, of an fp4 parameter, a :class:`Mixprec.Fp4Copy` whose
``data`` and ``scales`` are ``uint8`` views of its packed E2M1 bytes and
block scales, shared the same ways). A view
shares the engine's memory through

* NumPy: ``numpy.asarray(param.working)`` (``__array__``), float32 and
  float16 as themselves, bfloat16 and the float8 formats as
  ``ml_dtypes`` types when that package is importable, else as their raw
  bits (``uint16``/``uint8``) with ``view.dtype_name`` naming the format;
* the buffer protocol: ``view.memoryview()`` everywhere, and
  ``memoryview(view)`` on Python 3.12 and later (PEP 688);
* DLPack: ``__dlpack__``/``__dlpack_device__``, so that
  ``torch.from_dlpack(param.working)`` and ``numpy.from_dlpack(...)``
  share the memory (bfloat16 travels as DLPack's ``kDLBfloat``).

On an engine whose buffers are in a device's memory (``mixprec.device``
"cuda"), a view is a view of device memory: ``__dlpack_device__`` gives
the device (``(2, ordinal)``, DLPack's ``kDLCUDA``, on the cuda device;
``(12, ordinal)``, ``kDLExtDev``, on a device plugin no framework knows),
``torch.from_dlpack(param.working)`` is a CUDA tensor sharing the
engine's memory, and the host-memory forms (NumPy, the buffer protocol,
``tobytes()``) raise BufferError. ``param.reduce_grad(tensor)`` takes a
gradient on the engine's device where it lies (the engine reads it with
the device's kernels); the caller makes sure it is complete first
(``torch.cuda.synchronize()``, or its stream's).

The other way, ``engine.register_external(name, array, module_type)`` keeps
the caller's memory as the parameter's working copy and
``param.reduce_grad(array)`` reads the caller's gradient where it lies. Both
take a NumPy array (anything with ``__array_interface__``), a DLPack
producer (a torch tensor) or any object with the buffer protocol.

Every argument the C API takes as a ``GBytes`` (``register_param``'s
``init``, ``Param.set_grad``/``add_grad``/``reduce_grad(dtype, data)``,
the ``Comm`` and ``Bootstrap`` collectives, ``convert`` and the FP8/MX
casts) takes ``GLib.Bytes``, ``bytes``, ``bytearray``, ``memoryview``, a
NumPy array or a CPU torch tensor; ``Config.new_from_data`` takes a
``str`` or UTF-8 ``bytes``, as in 1.0. The memory must be contiguous and
in host memory; a typed array's elements must be the size (and, for float
arrays, the kind) of the dtype the call names, else TypeError/ValueError
naming the argument. Copies: a ``GLib.Bytes`` is handed over as it is;
``bytes`` is copied once (into the new ``GLib.Bytes``); any other buffer
is copied twice (to ``bytes``, then into the ``GLib.Bytes``), as
PyGObject copies whatever a ``GLib.Bytes`` is made from and reads
anything but ``bytes`` one element at a time. The calls that read memory
in place take an array without a copy: ``Param.reduce_grad(array)`` and
``Engine.register_external``.

How: the library gives the address of each buffer as an integer
(mixprec_param_get_buffer_address()), and ctypes turns an address into an
object that exports the buffer protocol; a pure-Python module rather than
a compiled extension, so that the override installs as one file next to
PyGObject's own and needs no Python headers to build. DLPack's structures
are declared with ctypes after DLPack 0.6's ``dlpack.h`` (the test suite
compares this layout with the header's, compiled). A view holds a
reference to the engine, so the memory stays valid while any view or any
array made from one is alive; the engine holds the objects whose memory
register_external() registered, for as long as it lives.
"""

import ctypes
import sys

from ..module import get_introspection_module
from ..overrides import override

Mixprec = get_introspection_module("Mixprec")

__all__ = []

_DT = Mixprec.DType

# dtype -> (memoryview format of its bits, name, DLPack (code, bits) or None)
_FORMATS = {
    _DT.FLOAT32: ("f", "float32", (2, 32)),
    _DT.FLOAT16: ("e", "float16", (2, 16)),
    _DT.BFLOAT16: ("H", "bfloat16", (4, 16)),
    _DT.FLOAT8_E4M3: ("B", "float8_e4m3fn", None),
    _DT.FLOAT8_E5M2: ("B", "float8_e5m2", None),
}
_RAW_FORMAT = {1: "B", 2: "H", 4: "f"}

_KDL_CPU = 1
_KDL_CUDA = 2
_KDL_CUDA_HOST = 3


def _numpy_dtype(dtype):
    """The NumPy dtype for a Mixprec.DType: ml_dtypes' for the formats NumPy
    lacks when that package is importable, else their raw bits."""
    import numpy
    fmt, name, _ = _FORMATS[dtype]
    if dtype in (_DT.FLOAT32, _DT.FLOAT16):
        return numpy.dtype(name)
    try:
        import ml_dtypes
        return numpy.dtype(getattr(ml_dtypes, name))
    except (ImportError, AttributeError):
        return numpy.dtype(numpy.uint16 if fmt == "H" else numpy.uint8)


# ------------------------------------------------------------------ DLPack
# The structures of dlpack.h (DLPack 0.6, the version Debian 12's
# libdlpack-dev ships; later versions keep this legacy, unversioned
# "dltensor" capsule).

class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int),
                ("device_id", ctypes.c_int)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8),
                ("bits", ctypes.c_uint8),
                ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p),
                ("device", DLDevice),
                ("ndim", ctypes.c_int),
                ("dtype", DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):
    pass


_DL_DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
DLManagedTensor._fields_ = [("dl_tensor", DLTensor),
                            ("manager_ctx", ctypes.c_void_p),
                            ("deleter", _DL_DELETER)]

_CAPSULE_DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, _CAPSULE_DESTRUCTOR]
_capsule_is_valid = ctypes.pythonapi.PyCapsule_IsValid
_capsule_is_valid.restype = ctypes.c_int
_capsule_is_valid.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
_capsule_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_get_pointer.restype = ctypes.c_void_p
_capsule_get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
# The same, for a capsule being destroyed (no reference may be taken).
_capsule_get_pointer_raw = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi))

# The capsule keeps a pointer to its name: a buffer that lives with the module.
_DLTENSOR = ctypes.create_string_buffer(b"dltensor")

# Exported tensors not yet released by their consumer, by address of their
# DLManagedTensor: the structure, its shape array and the view (which holds
# the engine).
_exported = {}


def _release(address):
    try:
        _exported.pop(address, None)
    except Exception:  # interpreter shutdown
        pass


@_DL_DELETER
def _dl_deleter(managed):
    _release(managed)


@_CAPSULE_DESTRUCTOR
def _capsule_destructor(capsule):
    # A capsule nobody consumed (a consumer renames it "used_dltensor" and
    # calls the deleter itself).
    try:
        if _capsule_is_valid(capsule, ctypes.cast(_DLTENSOR, ctypes.c_char_p)):
            _release(_capsule_get_pointer_raw(capsule, ctypes.cast(_DLTENSOR, ctypes.c_char_p)))
    except Exception:
        pass


def _dlpack_export(view, code_bits, copy):
    """A "dltensor" capsule of view's memory (its address, device and
    shape), elements of DLPack's (code, bits); view is kept alive until the
    consumer releases the tensor."""
    if copy:
        raise BufferError("a Mixprec view exports its memory, never a copy")
    managed = DLManagedTensor()
    shape = (ctypes.c_int64 * max(len(view.shape), 1))(*view.shape)
    t = managed.dl_tensor
    t.data = view.address
    t.device = DLDevice(*view.device)
    t.ndim = len(view.shape)
    t.dtype = DLDataType(code_bits[0], code_bits[1], 1)
    t.shape = shape
    t.strides = None        # compact, row-major
    t.byte_offset = 0
    managed.manager_ctx = None
    managed.deleter = _dl_deleter
    address = ctypes.addressof(managed)
    _exported[address] = (managed, shape, view)
    # DLPack has no read-only flag: consumers that honour it rely on the
    # producer; a read-only view's readonly is a promise only.
    return _capsule_new(address, ctypes.cast(_DLTENSOR, ctypes.c_char_p), _capsule_destructor)


# ------------------------------------------------------------------ views

_holder_types = {}


def _holder_type(nbytes):
    # A subclass, so that instances take the attribute that holds the engine.
    nbytes = max(nbytes, 1)
    if nbytes not in _holder_types:
        _holder_types[nbytes] = type("_MixprecBytes", (ctypes.c_ubyte * nbytes,), {})
    return _holder_types[nbytes]


class _EngineMemory(object):
    # What View and ByteView share: self.nbytes bytes of the engine at
    # self.address on DLPack device self.device.

    def _hold(self, engine):
        # A ctypes array over the engine's bytes: the buffer-protocol
        # exporter every other form is made from. It holds the engine for
        # as long as anything made from it lives.
        # Device memory has no host-side form.
        if self.device[0] == _KDL_CPU:
            self._holder = _holder_type(self.nbytes).from_address(self.address)
            self._holder.engine = engine
        else:
            self._holder = None

    def __buffer__(self, flags):
        # PEP 688 (Python 3.12+).
        return self.memoryview()

    def tobytes(self):
        return bytes(memoryview(self._host_memory()).cast("B")[:self.nbytes])

    def __dlpack_device__(self):
        return self.device

    def _dlpack(self, code_bits, dl_device, copy):
        if dl_device is not None and tuple(dl_device) != self.device:
            raise BufferError("the view is on DLPack device %r, not on device %r"
                              % (self.device, tuple(dl_device)))
        return _dlpack_export(self, code_bits, copy)


class View(_EngineMemory):
    """A view of one buffer of a :class:`Mixprec.Param`, sharing the
    engine's memory (see the module's documentation).

    Attributes: ``param``, ``buffer`` (a Mixprec.ParamBuffer), ``dtype``
    (a Mixprec.DType), ``dtype_name`` ("float32", "float16", "bfloat16",
    "float8_e4m3fn", "float8_e5m2"), ``shape``, ``numel``, ``itemsize``,
    ``nbytes``, ``address`` (an int), ``readonly``, ``device`` (DLPack's
    ``(device_type, device_id)``: ``(1, 0)`` for host memory).
    """

    def __init__(self, param, buffer, readonly=False):
        engine = param.get_engine()
        if engine is None:
            raise ValueError("parameter '%s': its engine is gone" % param.get_name())
        address, dtype, device_type, device_id = \
            Mixprec.Param.get_device_address(param, buffer)
        self.device = (device_type, device_id)
        self._engine = engine
        self.param = param
        self.buffer = buffer
        self.dtype = dtype
        self.dtype_name = _FORMATS[dtype][1]
        self.shape = tuple(param.get_shape())
        self.numel = param.get_numel()
        self.itemsize = Mixprec.dtype_get_size(dtype)
        self.nbytes = self.numel * self.itemsize
        self.address = address
        self.readonly = readonly
        self._hold(engine)

    def __repr__(self):
        return "<Mixprec.View %s of '%s': %s %s at 0x%x%s%s>" % (
            self.buffer.value_nick, self.param.get_name(), self.dtype_name,
            list(self.shape), self.address,
            "" if self._holder is not None else " on DLPack device %r" % (self.device,),
            ", read-only" if self.readonly else "")

    def _host_memory(self):
        if self._holder is None:
            raise BufferError("the %s buffer of '%s' is in the memory of DLPack device %r, not "
                              "in host memory: use DLPack (torch.from_dlpack) or "
                              "param.get_working() for a copy"
                              % (self.buffer.value_nick, self.param.get_name(), self.device))
        return self._holder

    def __len__(self):
        return self.shape[0] if self.shape else 1

    def memoryview(self):
        """A memoryview of the elements (shape and format of the dtype;
        bfloat16, float8, and float16 where memoryview lacks "e", as raw
        bits)."""
        mv = memoryview(self._host_memory()).cast("B")[:self.nbytes]
        fmt = _FORMATS[self.dtype][0]
        shape = list(self.shape) if self.numel > 0 else [0]
        try:
            mv = mv.cast(fmt, shape)
        except (ValueError, TypeError):
            mv = mv.cast(_RAW_FORMAT[self.itemsize], shape)
        return mv.toreadonly() if self.readonly else mv

    def __array__(self, dtype=None, copy=None):
        import numpy
        array = numpy.frombuffer(self._host_memory(), dtype=_numpy_dtype(self.dtype),
                                 count=self.numel).reshape(self.shape)
        if self.readonly:
            array.flags.writeable = False
        if dtype is not None and numpy.dtype(dtype) != array.dtype:
            if copy is False:
                raise ValueError("a %s view cannot be %s without a copy"
                                 % (self.dtype_name, numpy.dtype(dtype)))
            return array.astype(dtype)
        return array.copy() if copy else array

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        code_bits = _FORMATS[self.dtype][2]
        if code_bits is None:
            raise BufferError("%s has no DLPack type" % self.dtype_name)
        # On a device, the values are complete: the engine waited for its
        # stream when the view was made (mixprec_param_get_device_address()),
        # and any stream of the consumer may read them.
        return self._dlpack(code_bits, dl_device, copy)


__all__.append("View")


# ------------------------------------------------------------------ 4-bit copies

_KDL_UINT8 = (1, 8)     # DLPack's kDLUInt, 8 bits


class ByteView(_EngineMemory):
    """A read-only view of bytes of the engine that no Mixprec.DType
    describes: the packed E2M1 copy of an fp4 parameter, or its block
    scales (E4M3 or E8M0 codes). Shares the engine's memory as ``uint8``
    through DLPack (``torch.from_dlpack``), NumPy (``numpy.asarray``) and
    ``memoryview()``.

    Attributes: ``shape``, ``nbytes``, ``address``, ``device`` (DLPack's
    ``(device_type, device_id)``), ``readonly`` (True), ``what``.
    """

    def __init__(self, engine, address, shape, device, what):
        self._engine = engine
        self.address = address
        self.shape = tuple(int(d) for d in shape)
        self.nbytes = 1
        for d in self.shape:
            self.nbytes *= d
        self.device = tuple(device)
        self.readonly = True
        self.what = what
        self._hold(engine)

    def __repr__(self):
        return "<Mixprec.ByteView of %s: uint8 %s at 0x%x>" % (self.what, list(self.shape),
                                                                self.address)

    def _host_memory(self):
        if self._holder is None:
            raise BufferError("%s is in the memory of DLPack device %r, not in host memory: "
                              "use DLPack (torch.from_dlpack)" % (self.what, self.device))
        return self._holder

    def memoryview(self):
        """A read-only memoryview of the bytes, in the view's shape."""
        shape = list(self.shape) if self.nbytes > 0 else [0]
        return memoryview(self._host_memory()).cast("B")[:self.nbytes].cast("B", shape).toreadonly()

    def __array__(self, dtype=None, copy=None):
        import numpy
        array = numpy.frombuffer(self._host_memory(), dtype=numpy.uint8,
                                 count=self.nbytes).reshape(self.shape)
        array.flags.writeable = False
        if dtype is not None and numpy.dtype(dtype) != array.dtype:
            if copy is False:
                raise ValueError("a uint8 view cannot be %s without a copy" % numpy.dtype(dtype))
            return array.astype(dtype)
        return array.copy() if copy else array

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        return self._dlpack(_KDL_UINT8, dl_device, copy)


class Fp4Copy(object):
    """``param.fp4``: the 4-bit working copy of an fp4 parameter
    (``param.is_fp4()``) as it is now, without a copy.

    * ``data``: a :class:`ByteView` of the packed E2M1 bytes, shape
      ``(rows, cols // 2)``, element ``2i`` of a row in the low nibble of
      byte ``i``;
    * ``scales``: a :class:`ByteView` of the block scales, shape
      ``(rows, cols // block_size)``: E4M3 codes (NVFP4; under 16x16 tiles
      a tile's scale is repeated for each of its rows) or E8M0 codes
      (MXFP4);
    * ``tensor_scale``: NVFP4's float32 per-tensor scale (1.0 for MXFP4),
      read when the object was made;
    * ``recipe`` (a Mixprec.BlockRecipe), ``recipe_name`` ("nvfp4",
      "nvfp4_2d" or "mxfp4"), ``block_size`` (16 or 32), ``rows``,
      ``cols``, ``shape`` (the parameter's).

    An element's value is its E2M1 value times ``tensor_scale *
    e4m3(scale)`` (NVFP4) or ``2 ** (scale - 127)`` (MXFP4), one float32
    product (docs/reference/fp4-views.md has a torch matmul that decodes
    them). The views follow the engine's memory, which each step rewrites
    in place; ``tensor_scale`` does not: read ``param.fp4`` again after a
    step.
    """

    def __init__(self, param):
        engine = param.get_engine()
        if engine is None:
            raise ValueError("parameter '%s': its engine is gone" % param.get_name())
        address, scales, n_scales, device_type, device_id = \
            Mixprec.Param.get_fp4_address(param)
        name = param.get_name()
        self.param = param
        self.recipe = param.get_fp4_recipe()
        self.recipe_name = {Mixprec.BlockRecipe.NVFP4: "nvfp4",
                            Mixprec.BlockRecipe.NVFP4_2D: "nvfp4_2d",
                            Mixprec.BlockRecipe.MXFP4: "mxfp4"}[self.recipe]
        self.block_size = Mixprec.block_recipe_get_block_size(self.recipe)
        self.cols = param.get_fp4_cols()
        self.rows = param.get_numel() // self.cols
        self.shape = tuple(param.get_shape())
        self.tensor_scale = param.get_fp4_tensor_scale()
        if n_scales != self.rows * (self.cols // self.block_size):
            raise RuntimeError("parameter '%s': %d block scales, expected %d"
                               % (name, n_scales, self.rows * (self.cols // self.block_size)))
        device = (device_type, device_id)
        self.data = ByteView(engine, address, (self.rows, self.cols // 2), device,
                             "the 4-bit copy of '%s'" % name)
        self.scales = ByteView(engine, scales, (self.rows, self.cols // self.block_size), device,
                               "the block scales of '%s'" % name)

    def __repr__(self):
        return "<Mixprec.Fp4Copy of '%s': %s, %d x %d, tensor scale %r>" % (
            self.param.get_name(), self.recipe_name, self.rows, self.cols, self.tensor_scale)


__all__ += ["ByteView", "Fp4Copy"]

# ------------------------------------------------------------------ intake

class _Host(object):
    """A caller's contiguous host memory: address, dtype, shape, and what
    keeps it valid."""

    def __init__(self, address, dtype, shape, keep, readonly, device=(_KDL_CPU, 0)):
        self.address = address
        self.device = device
        self.dtype = dtype
        self.shape = tuple(int(d) for d in shape)
        self.numel = 1
        for d in self.shape:
            self.numel *= d
        self.keep = keep
        self.readonly = readonly


def _raw_dtype(what, bits, expected, dtype):
    """uint16/uint8 data is the raw bits of a format: the one asked for
    with dtype=, else the one expected when it has that size."""
    want = dtype if dtype is not None else expected
    if want is not None and Mixprec.dtype_get_size(want) * 8 == bits and want != _DT.FLOAT32:
        return want
    raise TypeError("%s holds uint%d: pass dtype=Mixprec.DType.%s to say which format "
                    "its bits are" % (what, bits, "BFLOAT16" if bits == 16 else "FLOAT8_E4M3"))


_BY_NAME = {"float32": _DT.FLOAT32, "float16": _DT.FLOAT16, "bfloat16": _DT.BFLOAT16,
            "float8_e4m3fn": _DT.FLOAT8_E4M3, "float8_e5m2": _DT.FLOAT8_E5M2}


def _contiguous(shape, strides, itemsize):
    expect = itemsize
    for d, s in zip(reversed(shape), reversed(strides)):
        if d != 1 and s != expect:
            return False
        expect *= d
    return True


def _host(obj, what, expected=None, dtype=None, device=None):
    """The memory of obj; with device=(type, id), memory on that DLPack
    device is taken too (its _Host.device says which)."""
    if isinstance(obj, View):
        if obj.device[0] != _KDL_CPU and obj.device != device:
            raise ValueError("%s is a view on DLPack device %r, not in host memory"
                             % (what, obj.device))
        return _Host(obj.address, obj.dtype, obj.shape, obj, obj.readonly, obj.device)

    ai = getattr(obj, "__array_interface__", None)
    if ai is not None:
        # NumPy and the array libraries that speak its protocol.
        typestr = ai["typestr"]
        name = getattr(getattr(obj, "dtype", None), "name", None)
        if name in _BY_NAME:
            found = _BY_NAME[name]
        elif typestr[1:] == "f4":
            found = _DT.FLOAT32
        elif typestr[1:] == "f2":
            found = _DT.FLOAT16
        elif typestr[1:] in ("u2", "i2", "u1", "i1"):
            found = _raw_dtype(what, int(typestr[2:]) * 8, expected, dtype)
        else:
            raise TypeError("%s has dtype %s; libmixprec takes float32, float16, bfloat16 "
                            "and float8" % (what, name or typestr))
        if typestr[0] == ">":
            raise TypeError("%s is big-endian" % what)
        shape = ai["shape"]
        strides = ai.get("strides")
        if strides is not None and not _contiguous(shape, strides, Mixprec.dtype_get_size(found)):
            raise ValueError("%s is not contiguous (strides %r): pass a C-contiguous array "
                             "(numpy.ascontiguousarray)" % (what, strides))
        address, readonly = ai["data"]
        return _Host(address or 0, found, shape, obj, readonly)

    if hasattr(obj, "__dlpack__"):
        # torch tensors and other DLPack producers.
        capsule = obj.__dlpack__()
        managed = DLManagedTensor.from_address(_capsule_get_pointer(capsule, b"dltensor"))
        t = managed.dl_tensor
        where = (_KDL_CPU, 0)
        if (t.device.device_type, t.device.device_id) == device:
            where = device
        elif t.device.device_type not in (_KDL_CPU, _KDL_CUDA_HOST):
            raise ValueError("%s is on DLPack device %r, not in host memory%s"
                             % (what, (t.device.device_type, t.device.device_id),
                                "" if device is None else
                                " nor on the engine's device %r" % (device,)))
        code, bits, lanes = t.dtype.code, t.dtype.bits, t.dtype.lanes
        if lanes != 1:
            raise TypeError("%s has vector elements (%d lanes)" % (what, lanes))
        if (code, bits) == (2, 32):
            found = _DT.FLOAT32
        elif (code, bits) == (2, 16):
            found = _DT.FLOAT16
        elif (code, bits) == (4, 16):
            found = _DT.BFLOAT16
        elif code in (0, 1) and bits in (8, 16):
            found = _raw_dtype(what, bits, expected, dtype)
        else:
            raise TypeError("%s has DLPack type code %d, %d bits; libmixprec takes float32, "
                            "float16, bfloat16 and float8" % (what, code, bits))
        shape = [t.shape[i] for i in range(t.ndim)]
        if t.strides and not _contiguous(shape, [t.strides[i] * (bits // 8) for i in range(t.ndim)],
                                         bits // 8):
            raise ValueError("%s is not contiguous: pass a contiguous tensor (.contiguous())"
                             % what)
        # Unconsumed, the capsule releases the producer's tensor when it
        # goes: keeping it keeps the memory.
        return _Host((t.data or 0) + t.byte_offset, found, shape, (obj, capsule), False, where)

    try:
        mv = memoryview(obj)
    except TypeError:
        raise TypeError("%s is neither an array (__array_interface__), a DLPack tensor "
                        "(__dlpack__) nor a buffer" % what) from None
    if not mv.c_contiguous:
        raise ValueError("%s is not a contiguous buffer" % what)
    fmt = mv.format.lstrip("@=<")
    if fmt == "f":
        found = _DT.FLOAT32
    elif fmt == "e":
        found = _DT.FLOAT16
    elif fmt in ("H", "h", "B", "b", "c"):
        found = _raw_dtype(what, mv.itemsize * 8, expected, dtype)
    else:
        raise TypeError("%s has buffer format '%s'" % (what, mv.format))
    if mv.nbytes == 0:
        return _Host(0, found, mv.shape, obj, mv.readonly)
    if not mv.readonly:
        raw = ctypes.c_char.from_buffer(mv)
        return _Host(ctypes.addressof(raw), found, mv.shape, (obj, raw), False)
    if isinstance(obj, bytes):
        return _Host(ctypes.cast(ctypes.c_char_p(obj), ctypes.c_void_p).value, found,
                     mv.shape, obj, True)
    raise TypeError("%s is a read-only buffer; pass bytes, a writable buffer or an array"
                    % what)


# ------------------------------------------------------------------ byte arguments

from gi.repository import GLib  # noqa: E402

# The buffer formats (struct module letters) whose elements may be read as
# each dtype: its own type, or its raw bits as unsigned/signed integers.
# Byte buffers ("B", "b", "c") are raw bytes and go to any dtype.
_ELEMENT_FORMATS = {
    _DT.FLOAT32: ("f",),
    _DT.FLOAT16: ("e", "H", "h"),
    _DT.BFLOAT16: ("H", "h"),
    _DT.FLOAT8_E4M3: (),
    _DT.FLOAT8_E5M2: (),
}
_BYTE_FORMATS = ("B", "b", "c")


def _dtype_name(dtype):
    return _FORMATS[dtype][1] if dtype in _FORMATS else str(dtype)


def _byte_view(obj, what, dtype=None):
    """A C-contiguous memoryview of obj's bytes (format "B") and the object
    that keeps the memory valid. With dtype, a typed array's elements must
    be of that dtype (or, for raw bits, of its size)."""
    try:
        mv = memoryview(obj)
    except TypeError:
        mv = None
    if mv is not None:
        if not mv.c_contiguous:
            raise ValueError("%s is not contiguous: pass a C-contiguous buffer "
                             "(numpy.ascontiguousarray, or bytes(...))" % what)
        fmt = mv.format
        if fmt[:1] in ("<", "@", "="):
            fmt = fmt[1:]
        elif fmt[:1] in (">", "!"):
            raise TypeError("%s is big-endian (buffer format '%s')" % (what, mv.format))
        if dtype is not None and fmt not in _BYTE_FORMATS and fmt not in _ELEMENT_FORMATS[dtype]:
            size = Mixprec.dtype_get_size(dtype)
            if mv.itemsize != size:
                raise TypeError("%s has %d-byte elements (buffer format '%s'), but %s elements "
                                "are %d bytes" % (what, mv.itemsize, mv.format,
                                                  _dtype_name(dtype), size))
            raise TypeError("%s has elements of buffer format '%s', not %s"
                            % (what, mv.format, _dtype_name(dtype)))
        return mv.cast("B") if mv.ndim != 1 or mv.format != "B" else mv, obj
    if getattr(obj, "__array_interface__", None) is None and not hasattr(obj, "__dlpack__"):
        raise TypeError("%s must be GLib.Bytes, bytes, bytearray, memoryview, a NumPy array "
                        "or a CPU torch tensor, not %s" % (what, type(obj).__name__))
    # Arrays without the buffer protocol: torch tensors (DLPack), and NumPy
    # arrays of ml_dtypes' bfloat16/float8. _host() rejects device memory,
    # non-contiguous layouts and element types libmixprec has no dtype for.
    # Byte tensors are raw bytes, as byte buffers are; other integer
    # tensors are the raw bits of dtype when their elements have its size.
    raw_bytes = str(getattr(obj, "dtype", "")).rsplit(".", 1)[-1] in ("uint8", "int8")
    if raw_bytes or dtype is None:
        host = _host(obj, what, _DT.FLOAT8_E4M3 if raw_bytes else None)
    else:
        host = _host(obj, what, dtype, dtype)
    if dtype is not None and not raw_bytes and host.dtype != dtype:
        raise TypeError("%s holds %s elements, not %s"
                        % (what, _dtype_name(host.dtype), _dtype_name(dtype)))
    nbytes = host.numel * Mixprec.dtype_get_size(host.dtype)
    if nbytes == 0:
        return memoryview(b""), obj
    raw = (ctypes.c_char * nbytes).from_address(host.address)
    return memoryview(raw).cast("B"), (host.keep, raw)


def _gbytes(obj, what, dtype=None):
    """obj as a GLib.Bytes (see the module's documentation for which
    objects are copied)."""
    if isinstance(obj, GLib.Bytes):
        return obj
    if type(obj) is bytes:
        return GLib.Bytes.new(obj)
    if isinstance(obj, str):
        raise TypeError("%s must be bytes-like, not str (encode it first)" % what)
    mv, keep = _byte_view(obj, what, dtype)
    # PyGObject copies bytes with one memcpy but walks any other buffer
    # element by element: through bytes is the fast way.
    data = mv.tobytes()
    del mv, keep
    return GLib.Bytes.new(data)


def _config_from_bytes(data):
    """Config.new_from_data() of 1.0 for bytes-like data: the UTF-8 text,
    reported as the C function reports text that is not UTF-8."""
    raw = _byte_view(data, "Config.new_from_data: data")[0].tobytes()
    body = raw[3:] if raw[:3] == b"\xef\xbb\xbf" else raw
    bad = body.find(b"\0")
    try:
        body.decode("utf-8")
    except UnicodeDecodeError as e:
        bad = e.start if bad < 0 else min(bad, e.start)
    if bad < 0:
        return Mixprec.Config.new_from_data(raw.decode("utf-8"))
    before = body[:bad]
    line = before.count(b"\n") + 1
    column = 1 + sum(1 for b in before[before.rfind(b"\n") + 1:] if b & 0xC0 != 0x80)
    what = ("a NUL byte; a configuration is UTF-8 text" if body[bad] == 0
            else "not UTF-8 text, got byte 0x%02X" % body[bad])
    raise GLib.Error("(top level): invalid JSON at line %d, column %d: %s" % (line, column, what),
                     GLib.quark_to_string(Mixprec.config_error_quark()),
                     int(Mixprec.ConfigError.PARSE))


class Config(Mixprec.Config):

    @classmethod
    def new_from_data(cls, data, length=-1):
        """new_from_data(data) reads a configuration from a JSON document:
        a str, or bytes/bytearray/memoryview of UTF-8 text (the form 1.0
        took; length, when given, takes that many bytes of it)."""
        if isinstance(data, str):
            if length not in (-1, None):
                data = data.encode("utf-8")[:length]
                return _config_from_bytes(data)
            return super(Config, cls).new_from_data(data)
        if length not in (-1, None):
            data = _byte_view(data, "Config.new_from_data: data")[0][:length]
        return _config_from_bytes(data)


Config = override(Config)
__all__.append("Config")


class Bootstrap(Mixprec.Bootstrap):

    def all_gather_bytes(self, data):
        """all_gather_bytes(data): data is GLib.Bytes or any contiguous
        buffer (see the module's documentation)."""
        return super(Bootstrap, self).all_gather_bytes(
            _gbytes(data, "Bootstrap.all_gather_bytes: data"))


Bootstrap = override(Bootstrap)
__all__.append("Bootstrap")


class Comm(Mixprec.Comm):
    # The collectives' Python names are the GLib.Bytes forms (the C
    # functions *_bytes); send/data take any contiguous buffer of dtype.

    def all_reduce(self, send, dtype, op):
        return super(Comm, self).all_reduce(_gbytes(send, "Comm.all_reduce: send", dtype),
                                            dtype, op)

    def all_gather(self, send, dtype):
        return super(Comm, self).all_gather(_gbytes(send, "Comm.all_gather: send", dtype),
                                            dtype)

    def reduce_scatter(self, send, dtype, op):
        return super(Comm, self).reduce_scatter(
            _gbytes(send, "Comm.reduce_scatter: send", dtype), dtype, op)

    def broadcast(self, data, dtype, root):
        return super(Comm, self).broadcast(_gbytes(data, "Comm.broadcast: data", dtype),
                                           dtype, root)


Comm = override(Comm)
__all__.append("Comm")


def convert(src_dtype, src, dst_dtype, rounding, seed):
    """convert(src_dtype, src, dst_dtype, rounding, seed): src is GLib.Bytes
    or any contiguous buffer of src_dtype."""
    return Mixprec.convert(src_dtype, _gbytes(src, "convert: src", src_dtype),
                           dst_dtype, rounding, seed)


def fp8_quantize(fp8_dtype, src_f32, scale, overflow):
    return Mixprec.fp8_quantize(fp8_dtype, _gbytes(src_f32, "fp8_quantize: src_f32",
                                                   _DT.FLOAT32), scale, overflow)


def fp8_dequantize(fp8_dtype, src, scale_inv):
    return Mixprec.fp8_dequantize(fp8_dtype, _gbytes(src, "fp8_dequantize: src", fp8_dtype),
                                  scale_inv)


def mx_quantize(elem_dtype, src_f32, block_size):
    return Mixprec.mx_quantize(elem_dtype, _gbytes(src_f32, "mx_quantize: src_f32",
                                                   _DT.FLOAT32), block_size)


def mx_dequantize(elem_dtype, src, scales, block_size):
    return Mixprec.mx_dequantize(elem_dtype, _gbytes(src, "mx_dequantize: src", elem_dtype),
                                 _gbytes(scales, "mx_dequantize: scales"), block_size)


for _f in (convert, fp8_quantize, fp8_dequantize, mx_quantize, mx_dequantize):
    _f.__doc__ = _f.__doc__ or ("%s: the GLib.Bytes arguments take any contiguous buffer "
                                "(see the module's documentation)." % _f.__name__)
    __all__.append(_f.__name__)
del _f


class Param(Mixprec.Param):

    @property
    def working(self):
        """The working copy (in get_working_dtype()): a writable View."""
        return View(self, Mixprec.ParamBuffer.WORKING)

    @property
    def grad(self):
        """The gradient buffer (in get_grad_dtype()): a writable View."""
        return View(self, Mixprec.ParamBuffer.GRAD)

    @property
    def master(self):
        """The FP32 values the optimizer updates: a read-only View."""
        return View(self, Mixprec.ParamBuffer.MASTER, readonly=True)

    @property
    def accum(self):
        """The gradient accumulation buffer (in get_accum_dtype()), where
        the engine keeps one: a read-only View."""
        return View(self, Mixprec.ParamBuffer.ACCUM, readonly=True)

    @property
    def fp8(self):
        """The FP8 working copy of an fp8 parameter (is_fp8()), in
        get_fp8_dtype(): a read-only View; its scale is get_fp8_scale_inv(),
        or its MX block scales get_fp8_block_scales()."""
        return View(self, Mixprec.ParamBuffer.FP8, readonly=True)

    @property
    def fp4(self):
        """The 4-bit working copy of an fp4 parameter (is_fp4()): a
        Fp4Copy whose data and scales are uint8 views of the engine's
        memory (DLPack, NumPy), with its tensor scale and recipe. Raises
        GLib.Error when the parameter is not fp4, or under ZeRO-3 outside
        gather()."""
        return Fp4Copy(self)

    def reduce_grad(self, grad, data=None, dtype=None):
        """reduce_grad(array, dtype=None) hands over this micro-batch's
        gradient without copying it first: the engine reads the array where
        it lies. reduce_grad(dtype, bytes) is the GLib.Bytes form."""
        if data is not None:
            return super(Param, self).reduce_grad(
                grad, _gbytes(data, "parameter '%s': the gradient" % self.get_name(), grad))
        if isinstance(grad, Mixprec.DType) and dtype is None:
            raise TypeError("reduce_grad(dtype, bytes) needs the bytes")
        # Device memory is taken when it is the engine's (asked only then:
        # host memory needs no buffer of this rank laid out).
        device = None
        where = getattr(grad, "__dlpack_device__", None)
        if where is not None and tuple(where())[0] not in (_KDL_CPU, _KDL_CUDA_HOST):
            device = self.__dict__.get("_mixprec_device")
            if device is None:
                device = tuple(Mixprec.Param.get_device_address(
                    self, Mixprec.ParamBuffer.WORKING)[2:])
                self.__dict__["_mixprec_device"] = device
        host = _host(grad, "parameter '%s': the gradient" % self.get_name(),
                     self.get_grad_dtype(), dtype, device)
        if host.numel != self.get_numel():
            raise ValueError("parameter '%s': the gradient has %d elements, expected %d"
                             % (self.get_name(), host.numel, self.get_numel()))
        if host.device[0] != _KDL_CPU:
            return Mixprec.Param.reduce_grad_device_address(self, host.dtype, host.address)
        return Mixprec.Param.reduce_grad_address(self, host.dtype, host.address)


    def set_grad(self, dtype, grad):
        """set_grad(dtype, grad): grad is GLib.Bytes or any contiguous
        buffer of dtype (see the module's documentation)."""
        return super(Param, self).set_grad(
            dtype, _gbytes(grad, "parameter '%s': grad" % self.get_name(), dtype))

    def add_grad(self, dtype, grad):
        """add_grad(dtype, grad): grad is GLib.Bytes or any contiguous
        buffer of dtype (see the module's documentation)."""
        return super(Param, self).add_grad(
            dtype, _gbytes(grad, "parameter '%s': grad" % self.get_name(), dtype))


Param = override(Param)
__all__.append("Param")


class Engine(Mixprec.Engine):

    def register_param(self, name, shape, module_type, init_dtype, init):
        """register_param(name, shape, module_type, init_dtype, init): init
        holds the initial values, numel elements of init_dtype, as GLib.Bytes,
        bytes, bytearray, memoryview, a NumPy array or a CPU torch tensor
        (see the module's documentation for which are copied)."""
        return super(Engine, self).register_param(
            name, shape, module_type, init_dtype,
            _gbytes(init, "register_param '%s': init" % name, init_dtype))

    def register_external(self, name, working, module_type=None, grad=None, dtype=None):
        """register_external(name, working, module_type=None, grad=None)
        registers a parameter whose working copy is the caller's array or
        tensor (its shape and dtype, which must be the working dtype the
        precision policy gives module_type): the engine writes the new
        values into it after each applied step, without copies. The
        gradient buffer is grad (same shape and dtype) or, when None, one
        the engine's Python side allocates (param.grad). The engine keeps
        both objects for as long as it lives."""
        w = _host(working, "parameter '%s': the working copy" % name, None, dtype)
        if w.readonly:
            raise ValueError("parameter '%s': the working copy is read-only; the engine "
                             "writes the new values into it" % name)
        if grad is None:
            g_keep = (ctypes.c_ubyte * max(w.numel * Mixprec.dtype_get_size(w.dtype), 1))()
            g_address = ctypes.addressof(g_keep)
        else:
            g = _host(grad, "parameter '%s': the gradient buffer" % name, w.dtype, dtype)
            if g.dtype != w.dtype or g.numel != w.numel or g.readonly:
                raise ValueError("parameter '%s': the gradient buffer must be writable and "
                                 "hold %d elements of %s like the working copy"
                                 % (name, w.numel, _FORMATS[w.dtype][1]))
            g_keep, g_address = g.keep, g.address
        param = super(Engine, self).register_external(name, list(w.shape), module_type,
                                                      w.dtype, w.address, g_address)
        keep = self.__dict__.setdefault("_mixprec_external", [])
        keep.append((w.keep, g_keep))
        return param


Engine = override(Engine)
__all__.append("Engine")
