#!/usr/bin/env python3
# test-partitioner-gi.py — the ZeRO layout through GObject Introspection:
# DeepSpeed's flat partition worked by hand (world 4, 10 elements), and the pieces array (a GPtrArray of boxed
# structs), read many times so that a wrong ownership annotation would
# show up as a double free.
import gc
import sys

import gi
gi.require_version("GLib", "2.0")
gi.require_version("Mixprec", "1.0")
from gi.repository import GLib, Mixprec  # noqa: E402

results = []


def check(name, cond):
    results.append((name, bool(cond)))


def pieces(p, rank):
    return [(x.param_index, x.param_offset, x.flat_offset, x.length) for x in p.get_rank_pieces(rank)]


# World 4, 10 elements -> 16; partitions of 4; padding per rank 0 0 2 4.
p = Mixprec.Partitioner.new([3, 7], 4, 0, Mixprec.PARTITIONER_DEFAULT_BUCKET_SIZE)
check("padded total", p.get_padded_total() == 16 and p.props.partition_size == 4)
check("padding per rank", [p.get_rank_padding(r) for r in range(4)] == [0, 0, 2, 4])
check("rank range", tuple(p.get_rank_range(2)) == (8, 12))

# (param, offset in param, flat offset, length), worked out from the layout
# [p0 p0 p0 p1 | p1 p1 p1 p1 | p1 p1 pad pad | pad x4].
expected = [[(0, 0, 0, 3), (1, 0, 3, 1)], [(1, 1, 4, 4)], [(1, 5, 8, 2)], []]
for _ in range(500):
    got = [pieces(p, r) for r in range(4)]
    gc.collect()
check("rank pieces", got == expected)
check("pieces of a range", [(x.param_index, x.length) for x in p.get_pieces(2, 5)] == [(0, 1), (1, 2)])

# Buckets: bucket size 8 over 4 ranks is one alignment unit (2) per rank.
b = Mixprec.Partitioner.new([3, 7], 4, 0, 8)
check("bucket columns", b.get_n_buckets() == 2 and tuple(b.get_bucket(1)) == (2, 4)
      and tuple(b.get_bucket_range(1, 3)) == (14, 16))

try:
    Mixprec.Partitioner.new([10], 0, 0, 100)
    check("world size 0 raises", False)
except GLib.Error as e:
    check("world size 0 raises",
          e.matches(Mixprec.partitioner_error_quark(), Mixprec.PartitionerError.INVALID_ARGUMENT))

print("1..%d" % len(results))
for i, (name, ok) in enumerate(results, 1):
    print("%s %d - %s" % ("ok" if ok else "not ok", i, name))
sys.exit(0 if all(ok for _, ok in results) else 1)
