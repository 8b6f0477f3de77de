#!/bin/bash
# repro-test.sh [TARBALL] — reproducible builds: the release tarball built
# twice, in two folders of different names and depths, with the same
# compiler flags, SOURCE_DATE_EPOCH, locale and time zone; libmixprec.so
# and every plugin must come out byte-identical. The flags map each build
# folder to "." in the debug information (-ffile-prefix-map, as Debian's
# dpkg-buildflags do); anything else that names the folder (a path compiled
# in, __FILE__ of an absolute name) makes the files differ. Prints TAP;
# exits non-zero on any failure. TARBALL defaults to a fresh `make dist` of
# this source tree. MIXPREC_REPRO_TEST_KEEP=yes keeps the scratch directory.
set -uo pipefail

srcdir=$(cd "$(dirname "$0")/.." && pwd)
tarball=${1:-}
work=$(mktemp -d "${TMPDIR:-/tmp}/mixprec-repro-test.XXXXXX")
n=0
failed=0

# shellcheck source=build-aux/package-test-lib.sh
. "$srcdir/build-aux/package-test-lib.sh"
cleanup () {
  local rc=$?
  if [ "${MIXPREC_REPRO_TEST_KEEP:-no}" = yes ]; then say "kept $work"; else rm -rf "$work"; fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

ensure_tarball

# build NAME DIR: unpacks the tarball into DIR and builds the library and
# the plugins there, in the tree as rpmbuild and dpkg-buildpackage do.
base=$(basename "$tarball" .tar.xz)
build () {
  local name=$1 dir=$2 src=$2/$base start
  mkdir -p "$dir"
  tar -xf "$tarball" -C "$dir" || return 1
  start=$(date +%s)
  if (cd "$src" &&
      SOURCE_DATE_EPOCH=$(stat -c %Y configure.ac) &&
      export LC_ALL=C TZ=UTC SOURCE_DATE_EPOCH &&
      ./configure CFLAGS="-O2 -g -ffile-prefix-map=$src=." --disable-introspection --disable-vapi \
        --without-cuda &&
      # Only the library and the plugins (and what they are built from).
      targets=$(make -s -f Makefile -f - print-repro-targets <<'EOF'
print-repro-targets:
	@echo $(lib_LTLIBRARIES) $(mixprec_plugin_LTLIBRARIES)
EOF
) &&
      built=$(make -s -f Makefile -f - print-repro-built <<'EOF'
print-repro-built:
	@echo $(BUILT_SOURCES)
EOF
) &&
      make -j"$(nproc)" $built && make -j"$(nproc)" $targets) >"$work/$name.log" 2>&1; then
    ok "build $name in $src ($(( $(date +%s) - start )) s)"
    return 0
  fi
  not_ok "build $name in $src" "$work/$name.log"
  return 1
}
a="$work/a/$base"
b="$work/second-folder/deeper/$base"
build one "$work/a" || exit 1
build two "$work/second-folder/deeper" || exit 1

lib=$(cd "$a/libmixprec/.libs" && ls libmixprec.so.*.*.* 2>/dev/null | head -n 1)
[ -n "$lib" ] || bail "no libmixprec.so.X.Y.Z in $a/libmixprec/.libs"
if cmp "$a/libmixprec/.libs/$lib" "$b/libmixprec/.libs/$lib" >"$work/cmp.out" 2>&1; then
  ok "$lib is byte-identical from both folders ($(sha256sum <"$a/libmixprec/.libs/$lib" | cut -c1-16))"
else
  not_ok "$lib is byte-identical from both folders" "$work/cmp.out"
fi
for f in "$a"/plugins/.libs/mixprec-*.so; do
  p=$(basename "$f")
  if cmp "$f" "$b/plugins/.libs/$p" >"$work/cmp.out" 2>&1; then
    ok "plugin $p is byte-identical from both folders"
  else
    not_ok "plugin $p is byte-identical from both folders" "$work/cmp.out"
  fi
done
if grep -l -F -e "$a" -e "$b" "$a/libmixprec/.libs/$lib" "$a"/plugins/.libs/mixprec-*.so \
     "$b/libmixprec/.libs/$lib" "$b"/plugins/.libs/mixprec-*.so >"$work/paths.out" 2>&1; then
  not_ok "no library or plugin names its build folder" "$work/paths.out"
else
  ok "no library or plugin names its build folder"
fi

echo "1..$n"
[ $failed = 0 ] && say "reproducibility test passed" || say "reproducibility test FAILED"
exit $failed
