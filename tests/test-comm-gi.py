#!/usr/bin/env python3
# test-comm-gi.py — MixprecComm through GObject Introspection: a world of
# one process (the built-in "local" backend), its collectives on GLib.Bytes
# compared with struct-packed expectations, errors as GLib.Error, and a
# started collective's request from C reaching Python as an object.
import struct
import sys

import gi
gi.require_version("GLib", "2.0")
gi.require_version("Mixprec", "1.0")
from gi.repository import GLib, Mixprec  # noqa: E402

results = []


def check(name, cond):
    results.append((name, bool(cond)))


def floats(values):
    return GLib.Bytes.new(struct.pack("<%df" % len(values), *values))


def unpack(data):
    raw = data.get_data()
    return list(struct.unpack("<%df" % (len(raw) // 4), raw))


comm = Mixprec.Comm.new(None, "auto", None, 0)
check("auto picks the local backend for one process",
      (comm.get_backend(), comm.get_rank(), comm.get_world_size(), comm.props.device) ==
      ("local", 0, 1, "cpu"))
check("dtype support", comm.supports_dtype(Mixprec.DType.BFLOAT16) and
      not comm.supports_dtype(Mixprec.DType.FLOAT8_E5M2))

values = [1.5, -2.0, 3.25, 1e-3]
check("all_reduce of one rank returns its data",
      unpack(comm.all_reduce(floats(values), Mixprec.DType.FLOAT32, Mixprec.ReduceOp.SUM)) ==
      unpack(floats(values)))
check("reduce_scatter of one rank returns its data",
      unpack(comm.reduce_scatter(floats(values), Mixprec.DType.FLOAT32, Mixprec.ReduceOp.MAX)) ==
      unpack(floats(values)))
check("all_gather of one rank returns its data",
      unpack(comm.all_gather(floats(values), Mixprec.DType.FLOAT32)) == unpack(floats(values)))
check("broadcast from rank 0",
      unpack(comm.broadcast(floats(values), Mixprec.DType.FLOAT32, 0)) == unpack(floats(values)))
half = GLib.Bytes.new(struct.pack("<3H", 0x3C00, 0xC000, 0x7E01))
check("float16 bits pass unchanged, NaN payload included",
      comm.all_reduce(half, Mixprec.DType.FLOAT16, Mixprec.ReduceOp.SUM).get_data() ==
      half.get_data())
check("a barrier", comm.barrier())

try:
    comm.all_reduce(GLib.Bytes.new(b"\0" * 6), Mixprec.DType.FLOAT32, Mixprec.ReduceOp.SUM)
    check("a partial element raises", False)
except GLib.Error as e:
    check("a partial element raises",
          e.matches(Mixprec.comm_error_quark(), Mixprec.CommError.INVALID_ARGUMENT) and
          "6 bytes is not a whole number of float32 elements" in e.message)

try:
    comm.broadcast(floats(values), Mixprec.DType.FLOAT32, 3)
    check("a root outside the world raises", False)
except GLib.Error as e:
    check("a root outside the world raises",
          e.matches(Mixprec.comm_error_quark(), Mixprec.CommError.INVALID_ARGUMENT) and
          "root 3 is not a rank" in e.message)

try:
    Mixprec.Comm.new(None, "nosuch", "cpu", 0)
    check("an unknown backend raises", False)
except GLib.Error as e:
    check("an unknown backend raises",
          e.matches(Mixprec.comm_error_quark(), Mixprec.CommError.NOT_FOUND))

request = comm.barrier_start()
check("a started barrier completes", request.test() and request.is_done() and request.wait())

check("flags", int(Mixprec.CommFlags.ACCUMULATE) == 1 and int(Mixprec.CommFlags.RECV_FP32) == 2)

comm.abort()
try:
    comm.barrier()
    check("after abort() collectives raise ABORTED", False)
except GLib.Error as e:
    check("after abort() collectives raise ABORTED",
          e.matches(Mixprec.comm_error_quark(), Mixprec.CommError.ABORTED))

print("1..%d" % len(results))
for i, (name, ok) in enumerate(results, 1):
    print("%s %d - %s" % ("ok" if ok else "not ok", i, name))
sys.exit(0 if all(ok for _, ok in results) else 1)
