#!/bin/bash
# install-test.sh [TARBALL] — libmixprec as users get it: builds the Debian
# packages from the release tarball, publishes them in a local apt
# repository on disk, installs `libmixprec libmixprec-dev python3-mixprec
# libmixprec-doc`
# from it with apt, then, in an empty directory with an empty environment
# (no build tree on any path, no LD_LIBRARY_PATH, GI_TYPELIB_PATH or
# MIXPREC_PLUGIN_PATH), builds and runs a C program with pkg-config, uses
# the typelib from Python (with the overrides' zero-copy views) and gjs,
# compiles a Vala program with --pkg mixprec and lists the plugins with
# mixprec-inspect. Finally purges every package it installed, also when
# a step fails. Prints TAP; exits non-zero on any failure.
#
# Run as root on Debian 12 (CI does: .ci/run). TARBALL defaults to a fresh
# `make dist` of this source tree, made in a scratch build directory so that
# the tree itself stays as it is. Environment:
#   MIXPREC_INSTALL_TEST_CHECK=yes  also run `make check` in the package
#                                   build (default: DEB_BUILD_OPTIONS=nocheck)
#   MIXPREC_INSTALL_TEST_KEEP=yes   keep the scratch directory (debs, logs)
#   MIXPREC_INSTALL_TEST_DEBS=DIR   copy the built .deb files into DIR (CI:
#                                   build-aux/rpm-test.sh compares them)
set -uo pipefail

srcdir=$(cd "$(dirname "$0")/.." && pwd)
tarball=${1:-}
list=/etc/apt/sources.list.d/mixprec-install-test.list
work=$(mktemp -d "${TMPDIR:-/tmp}/mixprec-install-test.XXXXXX")
# apt reads the repository as its unprivileged _apt user.
chmod 755 "$work"
n=0
failed=0
installed=no

# shellcheck source=build-aux/package-test-lib.sh
. "$srcdir/build-aux/package-test-lib.sh"

packages () {
  # Every binary package that debian/control declares, installed or not.
  sed -n 's/^Package: //p' "$work/src/debian/control"
}

cleanup () {
  local rc=$?
  if [ "$installed" = yes ]; then
    say "purging the packages"
    # shellcheck disable=SC2046
    DEBIAN_FRONTEND=noninteractive apt-get purge -y -q $(packages | while read -r p; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q installed && echo "$p"; done) \
      >"$work/purge.log" 2>&1 || { sed 's/^/#   /' "$work/purge.log"; rc=1; }
  fi
  rm -f "$list"
  rm -f /var/lib/apt/lists/*mixprec-install-test*
  if [ "${MIXPREC_INSTALL_TEST_KEEP:-no}" = yes ]; then
    say "kept $work"
  else
    rm -rf "$work"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

[ "$(id -u)" = 0 ] || bail "run as root: the test installs packages with apt"
command -v dpkg-buildpackage >/dev/null && command -v apt-get >/dev/null ||
  bail "a Debian system with dpkg-dev and apt is needed"

export DEBIAN_FRONTEND=noninteractive
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
host_arch=$(dpkg-architecture -qDEB_HOST_ARCH)

# ------------------------------------------------------------ tools
# The packaging tools and what the downstream programs need; the build
# dependencies themselves come from debian/control below.
apt-get install -y -q --no-install-recommends \
  dpkg-dev debhelper apt-utils fakeroot gcc libc6-dev pkg-config \
  python3 python3-gi python3-numpy gjs valac man-db >"$work/tools.log" 2>&1 ||
  { sed 's/^/#   /' "$work/tools.log"; bail "cannot install the packaging tools"; }

# ------------------------------------------------------------ source
ensure_tarball
mkdir -p "$work/src"
tar -xf "$tarball" -C "$work/src" --strip-components=1 || bail "cannot unpack $tarball"
[ -f "$work/src/debian/control" ] || bail "$tarball has no debian/ folder"

# ------------------------------------------------------------ build the debs
profiles=nocheck
options="nocheck"
if [ "${MIXPREC_INSTALL_TEST_CHECK:-no}" = yes ]; then profiles=; options=; fi
options="$options parallel=$(nproc)"
missing=$(cd "$work/src" && dpkg-checkbuilddeps ${profiles:+-P$profiles} 2>&1 |
          sed -n 's/.*Unmet build dependencies: //p' | sed 's/([^)]*)//g; s/|[^ ]*//g')
if [ -n "$missing" ]; then
  say "installing build dependencies: $missing"
  # shellcheck disable=SC2086
  apt-get install -y -q --no-install-recommends $missing >"$work/builddeps.log" 2>&1 ||
    { sed 's/^/#   /' "$work/builddeps.log"; bail "cannot install the build dependencies"; }
fi
start=$(date +%s)
if (cd "$work/src" && DEB_BUILD_OPTIONS="$options" DEB_BUILD_PROFILES="$profiles" \
      dpkg-buildpackage -us -uc -b) >"$work/build.log" 2>&1; then
  ok "dpkg-buildpackage -us -uc -b ($(( $(date +%s) - start )) s, DEB_BUILD_OPTIONS='$options')"
else
  not_ok "dpkg-buildpackage -us -uc -b" "$work/build.log"
  exit 1
fi
mkdir -p "$work/repo"
chmod 755 "$work/repo"
mv "$work"/*.deb "$work/repo/"
chmod 644 "$work"/repo/*.deb
if [ -n "${MIXPREC_INSTALL_TEST_DEBS:-}" ]; then
  mkdir -p "$MIXPREC_INSTALL_TEST_DEBS" && cp "$work"/repo/*.deb "$MIXPREC_INSTALL_TEST_DEBS/" ||
    not_ok "copy the .deb files into $MIXPREC_INSTALL_TEST_DEBS"
fi
for p in $(packages); do
  if ls "$work/repo/${p}_"*".deb" >/dev/null 2>&1; then
    say "built $(basename "$work/repo/${p}_"*.deb)"
  elif [ "$p" = mixprec-plugins-comm-ucx ] &&
       ! grep -A1 "^Package: $p" "$work/src/debian/control" | grep -qw "$host_arch"; then
    say "$p is not built on $host_arch"
  else
    not_ok "package $p was built"
  fi
done

# ------------------------------------------------------------ local repository
(cd "$work/repo" && apt-ftparchive packages . >Packages && apt-ftparchive release . >Release) \
  >"$work/repo.log" 2>&1 || { not_ok "apt-ftparchive" "$work/repo.log"; exit 1; }
echo "deb [trusted=yes] file:$work/repo ./" >"$list"
step "apt-get update of the local repository only" "$work/update.log" \
  apt-get update -q -o Dir::Etc::sourcelist="$list" -o Dir::Etc::sourceparts=- \
    -o APT::Get::List-Cleanup=0 || exit 1

# A copy left by an interrupted run would make apt keep it: start clean.
leftover=$(packages | while read -r p; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q installed && echo "$p"; done)
if [ -n "$leftover" ]; then
  say "purging packages left installed before the test: $(echo $leftover)"
  # shellcheck disable=SC2086
  apt-get purge -y -q $leftover >"$work/prepurge.log" 2>&1 || bail "cannot purge $leftover"
fi
installed=yes
step "apt-get install libmixprec libmixprec-dev python3-mixprec libmixprec-doc" "$work/install.log" \
  apt-get install -y -q --no-install-recommends libmixprec libmixprec-dev python3-mixprec \
    libmixprec-doc || exit 1
version=$(dpkg-parsechangelog -l "$work/src/debian/changelog" -S Version)
for p in libmixprec0 libmixprec-dev gir1.2-mixprec-1.0 python3-mixprec mixprec-tools mixprec-plugins-optim \
         libmixprec-doc; do
  v=$(dpkg-query -W -f='${Version}' "$p" 2>/dev/null)
  [ "$v" = "$version" ] || not_ok "$p $version is installed (found '${v:-nothing}')"
done
ucx=no
dpkg-query -W -f='${Status}' mixprec-plugins-comm-ucx 2>/dev/null | grep -q installed && ucx=yes
say "installed $version; UCX plugin: $ucx"

# ------------------------------------------------------------ downstream use
# Everything below runs in an empty directory outside the source tree with an
# empty environment: only what the packages installed can be found.
down="$work/downstream"
mkdir -p "$down/home"
clean_env () {
  (cd "$down" && env -i PATH=/usr/bin:/bin HOME="$down/home" LANG=C.UTF-8 "$@")
}

cat >"$down/app.c" <<'EOF'
/* A downstream program: version, a conversion with known bits, the plugins
 * the registry finds in the system plugin directory. */
#include <mixprec/mixprec.h>
#include <mixprec/mixprec-plugin.h>
#include <stdio.h>

int
main (void)
{
  /* 1.0f -> bf16 0x3F80; 65504 -> fp16 0x7BFF (its largest finite value);
   * 1/3 -> fp16 0x3555 (0.333251953125, the nearest) */
  const float src[2] = { 1.0f, -2.0f };
  const float half_src[2] = { 65504.0f, 1.0f / 3.0f };
  guint16 bf16[2], fp16[2];
  g_autoptr(GError) error = NULL;
  MixprecRegistry *registry;
  GList *features;

  if (mixprec_check_version (MIXPREC_MAJOR_VERSION, MIXPREC_MINOR_VERSION, 0) != NULL)
    return 1;
  printf ("version %u.%u.%u\n", mixprec_get_major_version (),
          mixprec_get_minor_version (), mixprec_get_micro_version ());
  if (!mixprec_convert_array (MIXPREC_DTYPE_FLOAT32, src, MIXPREC_DTYPE_BFLOAT16, bf16, 2,
                              MIXPREC_ROUNDING_NEAREST_EVEN, 0, 0, &error) ||
      !mixprec_convert_array (MIXPREC_DTYPE_FLOAT32, half_src, MIXPREC_DTYPE_FLOAT16, fp16, 2,
                              MIXPREC_ROUNDING_NEAREST_EVEN, 0, 0, &error))
    {
      fprintf (stderr, "%s\n", error->message);
      return 1;
    }
  printf ("bf16 %04x %04x fp16 %04x %04x\n", bf16[0], bf16[1], fp16[0], fp16[1]);
  printf ("plugin abi %d.%d\n", MIXPREC_PLUGIN_ABI_VERSION_MAJOR, MIXPREC_PLUGIN_ABI_VERSION_MINOR);

  registry = mixprec_registry_get_default ();
  features = mixprec_registry_get_features (registry);
  for (GList *l = features; l != NULL; l = l->next)
    printf ("feature %s %s\n", mixprec_feature_get_plugin_name (l->data),
            mixprec_feature_get_name (l->data));
  g_list_free_full (features, g_object_unref);
  features = mixprec_registry_get_failures (registry);
  for (GList *l = features; l != NULL; l = l->next)
    printf ("failure %s\n", mixprec_plugin_get_name (l->data));
  g_list_free_full (features, g_object_unref);
  return 0;
}
EOF
if step "cc app.c \$(pkg-config --cflags --libs mixprec)" "$down/app-build.log" \
     clean_env sh -c 'cc -Wall -Werror -o app app.c $(pkg-config --cflags --libs mixprec)'; then
  clean_env ./app >"$down/app.out" 2>&1
  status=$?
  expect_version="version $(echo "$version" | sed 's/[-+~].*//')"
  if [ $status = 0 ] && grep -qx "$expect_version" "$down/app.out" &&
     grep -qx "bf16 3f80 c000 fp16 7bff 3555" "$down/app.out" &&
     grep -qx "feature optim-adamw adamw" "$down/app.out" &&
     grep -qx "feature optim-sgd sgd" "$down/app.out" &&
     grep -qx "feature optim-lion lion" "$down/app.out" &&
     ! grep -q "^failure" "$down/app.out" &&
     { [ $ucx = no ] || grep -q "^feature comm-ucx " "$down/app.out"; }; then
    ok "the C program runs: version, conversion bits, installed plugins"
  else
    not_ok "the C program runs: version, conversion bits, installed plugins (exit $status)" "$down/app.out"
  fi
  # /lib may be a link to /usr/lib (merged /usr): compare the real files.
  resolved=$(clean_env ldd ./app | sed -n 's/^[[:space:]]*libmixprec\.so\.0 => \([^ ]*\) .*/\1/p')
  if [ -n "$resolved" ] &&
     [ "$(readlink -f "$resolved")" = "$(readlink -f "/usr/lib/$multiarch/libmixprec.so.0")" ] &&
     ! readelf -d "$down/app" | grep -q -E 'RPATH|RUNPATH'; then
    ok "the C program uses /usr/lib/$multiarch/libmixprec.so.0"
  else
    ldd "$down/app" >"$down/ldd.out" 2>&1
    not_ok "the C program uses /usr/lib/$multiarch/libmixprec.so.0" "$down/ldd.out"
  fi
fi

cat >"$down/app.py" <<'EOF'
import struct
import gi
gi.require_version("GLib", "2.0")
gi.require_version("Mixprec", "1.0")
from gi.repository import GLib, Mixprec
# 1.0 -> bf16 0x3F80, -2.0 -> 0xC000; 65504 -> fp16 0x7BFF
data = GLib.Bytes.new(struct.pack("<2f", 1.0, -2.0))
out = Mixprec.convert(Mixprec.DType.FLOAT32, data, Mixprec.DType.BFLOAT16, Mixprec.Rounding.NEAREST_EVEN, 0)
assert struct.unpack("<2H", out.get_data()) == (0x3F80, 0xC000), out.get_data()
out = Mixprec.convert(Mixprec.DType.FLOAT32, GLib.Bytes.new(struct.pack("<f", 65504.0)),
                      Mixprec.DType.FLOAT16, Mixprec.Rounding.NEAREST_EVEN, 0)
assert struct.unpack("<H", out.get_data()) == (0x7BFF,)
names = sorted(f.get_name() for f in Mixprec.Registry.get_default().get_features())
print(Mixprec.get_major_version(), Mixprec.get_minor_version(), " ".join(names))
EOF
if clean_env /usr/bin/python3 app.py >"$down/py.out" 2>&1 &&
   grep -q -E '^[0-9]+ [0-9]+ .*\badamw\b.*\blion\b.*\bsgd\b' "$down/py.out"; then
  ok "Python: from gi.repository import Mixprec (convert bits, registry)"
else
  not_ok "Python: from gi.repository import Mixprec (convert bits, registry)" "$down/py.out"
fi

# The PyGObject overrides of python3-mixprec: a view that shares the
# engine's memory, written through and stepped (bf16 bits are exact: SGD
# with lr 1 moves 1.0 and -2.0 by the gradient 0.5).
cat >"$down/views.py" <<'EOF'
import struct
import gi
gi.require_version("GLib", "2.0")
gi.require_version("Mixprec", "1.0")
from gi.repository import GLib, Mixprec
import gi.overrides.Mixprec
import numpy
e = Mixprec.Engine.new(Mixprec.Config.new_from_data(
    '{"bf16": {"enabled": true}, "optimizer": {"type": "SGD", "params": {"lr": 1.0}}}'))
p = e.register_param("w", [2], "Linear", Mixprec.DType.FLOAT32,
                     GLib.Bytes.new(struct.pack("<2f", 1.0, -2.0)))
w = numpy.asarray(p.working)
assert p.working.dtype_name == "bfloat16"
assert w.__array_interface__["data"][0] == p.get_buffer_address(Mixprec.ParamBuffer.WORKING)[0]
assert w.view(numpy.uint16).tolist() == [0x3F80, 0xC000], w
numpy.asarray(p.grad).view(numpy.uint16)[:] = 0x3F00
e.backward_done()
assert e.step().applied
assert w.view(numpy.uint16).tolist() == [0x3F00, 0xC020], w
print("overrides", gi.overrides.Mixprec.__file__)
EOF
if clean_env /usr/bin/python3 views.py >"$down/views.out" 2>&1 &&
   grep -qx "overrides /usr/lib/python3/dist-packages/gi/overrides/Mixprec.py" "$down/views.out"; then
  ok "Python: numpy.asarray(param.working) shares the engine's memory (python3-mixprec)"
else
  not_ok "Python: numpy.asarray(param.working) shares the engine's memory (python3-mixprec)" "$down/views.out"
fi

# mixprec.torch of python3-mixprec: with a Python that has torch and sees
# the system's site-packages (the venv of build-aux/install-deps.sh), a
# model trains through it with its weights in the engine's memory; without
# torch the import fails naming torch.
cat >"$down/front.py" <<'EOF'
import torch
import mixprec.torch
from gi.repository import Mixprec
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.LayerNorm(3))
engine = mixprec.torch.initialize(model, {"bf16": {"enabled": True},
                                          "mixprec": {"fp32_modules": ["LayerNorm"]}})
w = model[0].weight
assert w.dtype == torch.bfloat16 and model[1].weight.dtype == torch.float32
assert w.data_ptr() == engine.params["0.weight"].get_buffer_address(Mixprec.ParamBuffer.WORKING)[0]
before = w.detach().clone()
engine.backward(model(torch.randn(8, 4, dtype=torch.bfloat16)).float().square().mean())
assert engine.step().applied and not torch.equal(before, w)
print("front", mixprec.torch.__file__)
EOF
torch_py="${XDG_CACHE_HOME:-$HOME/.cache}/libmixprec/venv/bin/python3"
if [ -x "$torch_py" ] && "$torch_py" -c 'import torch' >/dev/null 2>&1; then
  if clean_env "$torch_py" front.py >"$down/front.out" 2>&1 &&
     grep -qx "front /usr/lib/python3/dist-packages/mixprec/torch.py" "$down/front.out"; then
    ok "Python with torch: a model trains through mixprec.torch (python3-mixprec)"
  else
    not_ok "Python with torch: a model trains through mixprec.torch (python3-mixprec)" "$down/front.out"
  fi
else
  ok "Python with torch: a model trains through mixprec.torch # SKIP no venv with torch at $torch_py"
fi
if clean_env /usr/bin/python3 -c 'import torch' >/dev/null 2>&1; then
  ok "without torch, import mixprec.torch fails naming torch # SKIP the system Python has torch"
elif clean_env /usr/bin/python3 -c 'import mixprec.torch' >"$down/notorch.out" 2>&1; then
  not_ok "without torch, import mixprec.torch fails naming torch" "$down/notorch.out"
elif grep -q "ImportError: mixprec.torch needs PyTorch: the 'torch' package" "$down/notorch.out"; then
  ok "without torch, import mixprec.torch fails naming torch"
else
  not_ok "without torch, import mixprec.torch fails naming torch" "$down/notorch.out"
fi

cat >"$down/app.js" <<'EOF'
imports.gi.versions.Mixprec = '1.0';
const GLib = imports.gi.GLib;
const Mixprec = imports.gi.Mixprec;
// 1.0 -> bf16 0x3F80, -2.0 -> 0xC000
const buf = new ArrayBuffer(8);
const view = new DataView(buf);
view.setFloat32(0, 1.0, true);
view.setFloat32(4, -2.0, true);
const out = Mixprec.convert(Mixprec.DType.FLOAT32, new GLib.Bytes(new Uint8Array(buf)),
    Mixprec.DType.BFLOAT16, Mixprec.Rounding.NEAREST_EVEN, 0).toArray();
const bits = [out[0] | (out[1] << 8), out[2] | (out[3] << 8)];
if (bits[0] !== 0x3F80 || bits[1] !== 0xC000)
    throw new Error(`unexpected bits ${bits}`);
print(`bits ${bits[0].toString(16)} ${bits[1].toString(16)}`);
EOF
if clean_env gjs app.js >"$down/gjs.out" 2>&1 && grep -qx "bits 3f80 c000" "$down/gjs.out"; then
  ok "gjs: imports.gi.Mixprec (convert bits)"
else
  not_ok "gjs: imports.gi.Mixprec (convert bits)" "$down/gjs.out"
fi

cat >"$down/app.vala" <<'EOF'
int main () {
    /* 1.0f -> bf16 0x3F80; -2.0f -> 0xC000 */
    float[] src = { 1.0f, -2.0f };
    uint8[] raw = new uint8[8];
    Memory.copy (raw, src, 8);
    try {
        var out = Mixprec.convert (Mixprec.DType.FLOAT32, new Bytes (raw),
                                   Mixprec.DType.BFLOAT16, Mixprec.Rounding.NEAREST_EVEN, 0);
        unowned uint8[] d = out.get_data ();
        if (d.length != 4 || (d[0] | (d[1] << 8)) != 0x3F80 || (d[2] | (d[3] << 8)) != 0xC000)
            return 1;
    } catch (Error e) {
        stderr.printf ("%s\n", e.message);
        return 1;
    }
    print ("vala %u.%u ok\n", Mixprec.get_major_version (), Mixprec.get_minor_version ());
    return 0;
}
EOF
if step "valac --pkg mixprec app.vala" "$down/vala-build.log" \
     clean_env valac --quiet --pkg mixprec -X -w -o app-vala app.vala; then
  if clean_env ./app-vala >"$down/vala.out" 2>&1 && grep -q -E '^vala [0-9]+\.[0-9]+ ok$' "$down/vala.out"; then
    ok "the Vala program runs (convert bits)"
  else
    not_ok "the Vala program runs (convert bits)" "$down/vala.out"
  fi
fi

if clean_env mixprec-inspect >"$down/inspect.out" 2>&1 &&
   grep -q '^optim-adamw:  adamw (optimizer, cpu, ' "$down/inspect.out" &&
   grep -q '^optim-sgd:  sgd (optimizer, cpu, ' "$down/inspect.out" &&
   grep -q '^optim-lion:  lion (optimizer, cpu, ' "$down/inspect.out" &&
   { [ $ucx = no ] || grep -q '^comm-ucx:  ' "$down/inspect.out"; }; then
  ok "mixprec-inspect lists the installed plugins (adamw, sgd, lion$([ $ucx = yes ] && echo ", ucx"))"
else
  not_ok "mixprec-inspect lists the installed plugins" "$down/inspect.out"
fi
if clean_env mixprec-inspect optim-adamw >"$down/inspect-adamw.out" 2>&1 &&
   grep -q "/usr/lib/$multiarch/mixprec-1.0/mixprec-optim-adamw.so" "$down/inspect-adamw.out"; then
  ok "mixprec-inspect optim-adamw names /usr/lib/$multiarch/mixprec-1.0/mixprec-optim-adamw.so"
else
  not_ok "mixprec-inspect optim-adamw names the installed file" "$down/inspect-adamw.out"
fi
if dpkg -L mixprec-tools | grep -qx '/usr/share/man/man1/mixprec-inspect.1.gz'; then
  ok "mixprec-tools ships the manual page mixprec-inspect(1)"
else
  dpkg -L mixprec-tools >"$down/man.out" 2>&1
  not_ok "mixprec-tools ships the manual page mixprec-inspect(1)" "$down/man.out"
fi

# libmixprec(7) through man's own search path, and the HTML reference.
if clean_env sh -c 'MANWIDTH=80 man -P cat libmixprec' >"$down/man7.out" 2>&1 &&
   grep -q 'THE STEP PIPELINE' "$down/man7.out" &&
   [ "$(clean_env man -w libmixprec)" = /usr/share/man/man7/libmixprec.7.gz ]; then
  ok "man libmixprec shows libmixprec(7)"
else
  not_ok "man libmixprec shows libmixprec(7)" "$down/man7.out"
fi
ref=/usr/share/doc/libmixprec/reference
if [ -f "$ref/index.html" ] && [ -f "$ref/step-pipeline.html" ] && [ -f "$ref/class.Engine.html" ] &&
   grep -q 'href="step-pipeline.html"' "$ref/index.html" && [ ! -e "$ref/index.json.gz" ]; then
  ok "libmixprec-doc installs the HTML reference in $ref"
else
  dpkg -L libmixprec-doc >"$down/doc.out" 2>&1
  not_ok "libmixprec-doc installs the HTML reference in $ref" "$down/doc.out"
fi

# ------------------------------------------------------------ purge
installed=no
# shellcheck disable=SC2046
step "apt-get purge of every libmixprec package" "$work/purge.log" \
  apt-get purge -y -q $(packages | while read -r p; do
      dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q installed && echo "$p"; done)
left=$(ls -d /usr/lib/"$multiarch"/libmixprec* /usr/lib/"$multiarch"/mixprec-1.0 /usr/include/mixprec-1.0 \
          /usr/bin/mixprec-inspect /usr/lib/"$multiarch"/girepository-1.0/Mixprec-1.0.typelib \
          /usr/share/doc/libmixprec/reference /usr/share/man/man7/libmixprec.7.gz 2>/dev/null)
if [ -z "$left" ]; then
  ok "nothing of libmixprec is left on the system"
else
  echo "$left" >"$work/left.out"
  not_ok "nothing of libmixprec is left on the system" "$work/left.out"
fi

echo "1..$n"
[ $failed = 0 ] && say "install test passed" || say "install test FAILED"
exit $failed
