#!/bin/sh
# test-docs-plugin-example.sh — the example optimizer plugin printed in
# docs/reference/plugins.md is code that works: it is extracted from the
# page, compiled against the build tree's headers, loaded by
# mixprec-inspect (which must show its feature and hyper-parameter), and,
# when a Python with gi is there, trained for one step in bf16 mode:
# w = (1, -2), gradient 0.5, lr 1 gives masters (0.5, -2.5) and bf16 bits
# 0x3F00, 0xC020. Prints TAP.
top_builddir=${MIXPREC_TOP_BUILDDIR:-.}
top_srcdir=${G_TEST_SRCDIR:-tests}/..
page=$top_srcdir/docs/reference/plugins.md
tmp=$(mktemp -d "${TMPDIR:-/tmp}/test-docs-plugin.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
cc=${CC:-cc}

echo "1..3"
awk '/^```c$/ { n++; inside = 1; next } /^```$/ { inside = 0 } inside && n == 1' "$page" \
  >"$tmp/mixprec-optim-plainsgd.c"
if grep -q '^MIXPREC_PLUGIN_DEFINE (optim_plainsgd,' "$tmp/mixprec-optim-plainsgd.c" &&
   $cc -Wall -Wextra -Werror -shared -fPIC -o "$tmp/mixprec-optim-plainsgd.so" \
     "$tmp/mixprec-optim-plainsgd.c" -I"$top_builddir/include" >"$tmp/cc.log" 2>&1; then
  echo "ok 1 - the example plugin of plugins.md compiles with $cc -Wall -Wextra -Werror"
else
  echo "not ok 1 - the example plugin of plugins.md compiles with $cc -Wall -Wextra -Werror"
  sed 's/^/#   /' "$tmp/cc.log"
  echo "ok 2 # SKIP not compiled"
  echo "ok 3 # SKIP not compiled"
  exit 0
fi

if MIXPREC_PLUGIN_PATH="$tmp" "$top_builddir/tools/mixprec-inspect" plainsgd >"$tmp/inspect.out" 2>&1 &&
   grep -q 'Status  *loaded' "$tmp/inspect.out" &&
   grep -q '^  lr  *: step size' "$tmp/inspect.out"; then
  echo "ok 2 - mixprec-inspect loads it and lists plainsgd with its lr"
else
  echo "not ok 2 - mixprec-inspect loads it and lists plainsgd with its lr"
  sed 's/^/#   /' "$tmp/inspect.out"
fi

python=${PYTHON_GI:-/usr/bin/python3}
# Only this build's typelib: an installed one would make Python load this
# build's library, which may be built with the sanitizers.
if [ ! -f "$top_builddir/bindings/Mixprec-1.0.typelib" ]; then
  echo "ok 3 # SKIP this build has no typelib (--disable-introspection)"
  exit 0
fi
if ! "$python" -c 'import gi; gi.require_version("Mixprec", "1.0"); from gi.repository import Mixprec' \
     >/dev/null 2>&1; then
  echo "ok 3 # SKIP no Python with gi and the Mixprec typelib"
  exit 0
fi
cat >"$tmp/step.py" <<'PY'
import struct, gi
gi.require_version("Mixprec", "1.0")
from gi.repository import GLib, Mixprec
e = Mixprec.Engine.new(Mixprec.Config.new_from_data(
    '{"bf16": {"enabled": true}, "optimizer": {"type": "plainsgd", "params": {"lr": 1.0}}}'))
p = e.register_param("w", [2], "Linear", Mixprec.DType.FLOAT32,
                     GLib.Bytes.new(struct.pack("<2f", 1.0, -2.0)))
p.set_grad(Mixprec.DType.FLOAT32, GLib.Bytes.new(struct.pack("<2f", 0.5, 0.5)))
e.backward_done()
assert e.step().applied
print(struct.unpack("<2f", p.get_master().get_data()),
      "%04x %04x" % struct.unpack("<2H", p.get_working(Mixprec.DType.BFLOAT16).get_data()))
PY
if MIXPREC_PLUGIN_PATH="$tmp:${MIXPREC_PLUGIN_PATH:-}" "$python" "$tmp/step.py" >"$tmp/step.out" 2>&1 &&
   grep -qx '(0.5, -2.5) 3f00 c020' "$tmp/step.out"; then
  echo "ok 3 - one bf16 step with it gives masters (0.5, -2.5), working bits 3f00 c020"
else
  echo "not ok 3 - one bf16 step with it gives masters (0.5, -2.5), working bits 3f00 c020"
  sed 's/^/#   /' "$tmp/step.out"
fi
