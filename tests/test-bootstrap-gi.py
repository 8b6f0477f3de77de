#!/usr/bin/env python3
# test-bootstrap-gi.py — MixprecBootstrap through GObject Introspection: a
# one-rank bootstrap from a literal environment, its properties, the
# GBytes all-gather, errors as GLib.Error in the bootstrap domain, and abort.
# Prints TAP.
import sys

import gi
gi.require_version("GLib", "2.0")
gi.require_version("Mixprec", "1.0")
from gi.repository import GLib, Mixprec  # noqa: E402

results = []


def check(name, cond):
    results.append((name, bool(cond)))


def raises(code, fragment, fn, *args):
    try:
        fn(*args)
    except GLib.Error as e:
        return e.matches(Mixprec.bootstrap_error_quark(), code) and fragment in e.message
    return False


b = Mixprec.Bootstrap.new_from_environ(["HOME=/nowhere"], 0)
check("no rank variables: rank 0 of 1, source single",
      (b.get_rank(), b.get_world_size(), b.get_source()) == (0, 1, "single"))
check("properties mirror the getters",
      (b.props.rank, b.props.world_size, b.props.local_rank, b.props.local_world_size) == (0, 1, 0, 1))
check("default timeout is five minutes", b.get_timeout() == 300000 == Mixprec.BOOTSTRAP_DEFAULT_TIMEOUT_MS)
check("no rendezvous with one rank", b.get_master_addr() is None and b.get_master_port() == 0)

out = b.all_gather_bytes(GLib.Bytes.new(b"\x00abc\xff"))
check("all_gather_bytes of one rank returns its input", out.get_data() == b"\x00abc\xff")
check("a zero-length all_gather works", b.all_gather_bytes(GLib.Bytes.new(b"")).get_size() == 0)
check("barrier", b.barrier())

t = Mixprec.Bootstrap.new_from_environ(["MIXPREC_TIMEOUT=1.5"], 0)
check("MIXPREC_TIMEOUT in seconds", t.get_timeout() == 1500)
e = Mixprec.Bootstrap.new(0, 1, None, 0, 250)
check("explicit bootstrap", (e.get_source(), e.get_timeout()) == ("explicit", 250))

check("a bad variable raises in the bootstrap domain, naming it",
      raises(Mixprec.BootstrapError.ENVIRONMENT, "MIXPREC_RANK=5 is not below MIXPREC_WORLD_SIZE=4",
             Mixprec.Bootstrap.new_from_environ, ["MIXPREC_RANK=5", "MIXPREC_WORLD_SIZE=4"], 0))

b.abort()
check("after abort, calls raise CLOSED",
      raises(Mixprec.BootstrapError.CLOSED, "aborted", b.all_gather_bytes, GLib.Bytes.new(b"x")))

print("1..%d" % len(results))
for i, (name, passed) in enumerate(results, 1):
    print("%s %d - %s" % ("ok" if passed else "not ok", i, name))
sys.exit(0 if all(p for _, p in results) else 1)
