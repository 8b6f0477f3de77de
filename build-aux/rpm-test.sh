#!/bin/bash
# rpm-test.sh [TARBALL [DEBDIR]] — the RPM packages as users get them, on a
# Debian machine: builds the binary RPMs from the release tarball with the
# spec it carries (`rpmbuild -tb --nodeps`: Debian's rpm database is empty,
# so nothing could satisfy the BuildRequires), runs rpmlint on the spec and
# the packages (an error fails, warnings are listed), installs every package
# into a scratch root with its own rpm database and checks that the
# library, headers, mixprec.pc, the typelib, the plugins, mixprec-inspect,
# the Python files and the reference are where the spec puts them and in
# the package it names; the installed library holds no build folder; the
# installed mixprec-inspect lists the installed plugins and Python imports
# the installed overrides. Finally compares the packages' file lists with
# the Debian packages' of the same tarball, role by role (runtime, devel,
# plugins, tools, python, doc). Prints TAP; exits non-zero on any failure.
#
# DEBDIR holds the .deb files built from the same tarball (CI passes those
# of build-aux/install-test.sh); without it they are built here with
# dpkg-buildpackage. TARBALL defaults to a fresh `make dist` of this tree.
# Nothing is installed on the system itself. Environment:
#   MIXPREC_RPM_TEST_CHECK=yes  run the spec's %check (make check) too
#                               (default: --nocheck; CI sets it)
#   MIXPREC_RPM_TEST_KEEP=yes   keep the scratch directory (RPMs, root, logs)
set -uo pipefail

srcdir=$(cd "$(dirname "$0")/.." && pwd)
tarball=${1:-}
debdir=${2:-}
work=$(mktemp -d "${TMPDIR:-/tmp}/mixprec-rpm-test.XXXXXX")
n=0
failed=0

# shellcheck source=build-aux/package-test-lib.sh
. "$srcdir/build-aux/package-test-lib.sh"
cleanup () {
  local rc=$?
  if [ "${MIXPREC_RPM_TEST_KEEP:-no}" = yes ]; then
    say "kept $work"
  else
    rm -rf "$work"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

for tool in rpmbuild rpm rpmspec rpmlint dpkg-deb; do
  command -v "$tool" >/dev/null ||
    bail "$tool is missing (Debian: apt-get install rpm rpmlint dpkg-dev; build-aux/install-deps.sh does)"
done

# ------------------------------------------------------------ source
ensure_tarball
tarball=$(cd "$(dirname "$tarball")" && pwd)/$(basename "$tarball")
mkdir -p "$work/src"
tar -xf "$tarball" -C "$work/src" --strip-components=1 || bail "cannot unpack $tarball"
spec="$work/src/rpm/mixprec.spec"
[ -f "$spec" ] || bail "$tarball has no rpm/mixprec.spec"

# ------------------------------------------------------------ rpmbuild -tb
top="$work/rpmbuild"
check=--nocheck
[ "${MIXPREC_RPM_TEST_CHECK:-no}" = yes ] && check=
start=$(date +%s)
# brp-compress needs bash (read -d); Debian runs it with dash, which leaves
# the manual pages uncompressed: bash runs it here, as make rpm does.
if rpmbuild -tb --nodeps $check --define "_topdir $top" \
     --define "__brp_compress bash %{_rpmconfigdir}/brp-compress %{?_prefix}" \
     "$tarball" >"$work/build.log" 2>&1; then
  ok "rpmbuild -tb --nodeps ${check:+$check }$(basename "$tarball") ($(( $(date +%s) - start )) s)"
else
  not_ok "rpmbuild -tb --nodeps ${check:+$check }$(basename "$tarball")" "$work/build.log"
  exit 1
fi
grep -E '^(warning|error):' "$work/build.log" | sed 's/^/# rpmbuild: /'
# The spec's check section: the suite's totals (automake's test harness).
[ -z "$check" ] && grep -E '^# (TOTAL|PASS|SKIP|XFAIL|FAIL|XPASS|ERROR): ' "$work/build.log" |
  sed 's/^# /# %check: /'

# Every binary package the spec declares (its bconds as on this machine).
rpmspec -q --qf '%{NAME}\n' "$spec" 2>"$work/rpmspec.log" | sort -u >"$work/expected-packages" ||
  { not_ok "rpmspec -q lists the packages" "$work/rpmspec.log"; exit 1; }
find "$top/RPMS" -name '*.rpm' | sort >"$work/rpms"
: >"$work/built-packages"
while read -r f; do
  rpm -qp --qf '%{NAME}\n' "$f" 2>/dev/null >>"$work/built-packages"
  say "built $(basename "$f")"
done <"$work/rpms"
sort -u -o "$work/built-packages" "$work/built-packages"
if diff "$work/expected-packages" "$work/built-packages" >"$work/packages.diff"; then
  ok "every package of the spec was built: $(tr '\n' ' ' <"$work/expected-packages")"
else
  not_ok "every package of the spec was built" "$work/packages.diff"
fi
ucx=no
grep -qx mixprec-plugins-comm-ucx "$work/built-packages" && ucx=yes

# ------------------------------------------------------------ rpmlint
# rpmlint's own configuration for this project: rpm/rpmlintrc in the tarball.
lintrc=()
[ -f "$work/src/rpm/rpmlintrc" ] && lintrc=(-r "$work/src/rpm/rpmlintrc")
# shellcheck disable=SC2046
rpmlint "${lintrc[@]}" "$spec" $(cat "$work/rpms") >"$work/rpmlint.log" 2>&1
summary=$(grep -E '[0-9]+ packages and [0-9]+ specfiles checked' "$work/rpmlint.log" | tail -n 1)
grep -E ': [WE]: ' "$work/rpmlint.log" | sed 's/^/# rpmlint: /'
if [ -n "$summary" ] && ! grep -q ': E: ' "$work/rpmlint.log"; then
  ok "rpmlint on the spec and the packages: no errors ($summary)"
else
  not_ok "rpmlint on the spec and the packages: no errors" "$work/rpmlint.log"
fi

# ------------------------------------------------------------ scratch root
root="$work/root"
mkdir -p "$root"
# rpm 4.18 takes --dbpath inside --root: this is ROOT/var/lib/rpm (an
# absolute ROOT/var/lib/rpm would land in ROOT/ROOT/var/lib/rpm). Debian's
# rpm warns that alien should be used instead; it asks nothing.
rpmroot () { rpm --root "$root" --dbpath /var/lib/rpm "$@" 2> >(grep -v -e 'use Alien instead' \
  -e 'assuming you know what you are doing' >&2); }
# shellcheck disable=SC2046
step "rpm -i --nodeps --root into a scratch root: every package" "$work/install.log" \
  rpmroot -i --nodeps $(cat "$work/rpms") || exit 1
rpmroot -qa --qf '%{NAME}\n' | sort >"$work/installed-packages"
if [ -f "$root/var/lib/rpm/rpmdb.sqlite" ] || [ -f "$root/var/lib/rpm/Packages" ] &&
   diff "$work/built-packages" "$work/installed-packages" >"$work/installed.diff"; then
  ok "the scratch root's rpm database (ROOT/var/lib/rpm) holds every package"
else
  not_ok "the scratch root's rpm database (ROOT/var/lib/rpm) holds every package" "$work/installed.diff"
fi
step "rpm -V: the installed files match the packages" "$work/verify.log" \
  rpmroot -Va --nodeps --nodigest --nosignature

# Where the spec puts each kind of file, and which package owns it.
libdir=$(rpm --eval '%{_libdir}')
sitelib=$(rpmroot -ql python3-mixprec | sed -n 's,/gi/overrides/Mixprec\.py$,,p')
[ -n "$sitelib" ] || not_ok "python3-mixprec holds gi/overrides/Mixprec.py"
expect_owner () {
  local path=$1 package=$2 owner
  if [ ! -e "$root$path" ]; then
    not_ok "$path is installed (in $package)"
    return
  fi
  owner=$(rpmroot -qf --qf '%{NAME}\n' "$path" 2>&1)
  if [ "$owner" = "$package" ]; then
    ok "$path is installed, from $package"
  else
    echo "$owner" >"$work/owner.out"
    not_ok "$path is installed, from $package" "$work/owner.out"
  fi
}
expect_owner "$libdir/libmixprec.so.0" mixprec
expect_owner "$libdir/girepository-1.0/Mixprec-1.0.typelib" mixprec
expect_owner "$libdir/libmixprec.so" mixprec-devel
expect_owner /usr/include/mixprec-1.0/mixprec/mixprec.h mixprec-devel
expect_owner /usr/include/mixprec-1.0/mixprec/mixprec-plugin.h mixprec-devel
expect_owner "$libdir/pkgconfig/mixprec.pc" mixprec-devel
expect_owner /usr/share/gir-1.0/Mixprec-1.0.gir mixprec-devel
expect_owner /usr/share/vala/vapi/mixprec.vapi mixprec-devel
for p in adamw sgd lion; do
  expect_owner "$libdir/mixprec-1.0/mixprec-optim-$p.so" mixprec-plugins-optim
done
[ $ucx = yes ] && expect_owner "$libdir/mixprec-1.0/mixprec-comm-ucx.so" mixprec-plugins-comm-ucx
expect_owner /usr/bin/mixprec-inspect mixprec-tools
expect_owner /usr/share/man/man1/mixprec-inspect.1.gz mixprec-tools
expect_owner "$sitelib/gi/overrides/Mixprec.py" python3-mixprec
expect_owner "$sitelib/mixprec/torch.py" python3-mixprec
expect_owner /usr/share/doc/libmixprec/reference/index.html mixprec-doc

# The pkg-config file names the installed folders.
pc="$root$libdir/pkgconfig/mixprec.pc"
if grep -qx "libdir=\${exec_prefix}/${libdir#/usr/}" "$pc" || grep -qx "libdir=$libdir" "$pc"; then
  ok "mixprec.pc names $libdir"
else
  not_ok "mixprec.pc names $libdir" "$pc"
fi
# The soname link resolves inside the root.
if [ -f "$(readlink -f "$root$libdir/libmixprec.so.0")" ] &&
   [ "$(readlink -f "$root$libdir/libmixprec.so")" = "$(readlink -f "$root$libdir/libmixprec.so.0")" ]; then
  ok "libmixprec.so and libmixprec.so.0 lead to the same installed file"
else
  ls -l "$root$libdir"/libmixprec* >"$work/links.out" 2>&1
  not_ok "libmixprec.so and libmixprec.so.0 lead to the same installed file" "$work/links.out"
fi
# No build folder in the installed binaries (reproducible builds).
if grep -l -r -F "$top/BUILD" "$root$libdir" "$root/usr/bin" >"$work/paths.out" 2>&1; then
  not_ok "no installed library, plugin or tool holds the build folder" "$work/paths.out"
else
  ok "no installed library, plugin or tool holds the build folder"
fi

# The installed programs work from the root (this system's glibc and GLib).
run_root () {
  env -i PATH=/usr/bin:/bin LANG=C.UTF-8 HOME="$work" LD_LIBRARY_PATH="$root$libdir" \
    MIXPREC_PLUGIN_SYSTEM_PATH="$root$libdir/mixprec-1.0" GI_TYPELIB_PATH="$root$libdir/girepository-1.0" \
    PYTHONPATH="$root$sitelib" "$@"
}
if run_root "$root/usr/bin/mixprec-inspect" >"$work/inspect.out" 2>&1 &&
   grep -q '^optim-adamw:  adamw (optimizer, cpu, ' "$work/inspect.out" &&
   grep -q '^optim-sgd:  sgd (optimizer, cpu, ' "$work/inspect.out" &&
   grep -q '^optim-lion:  lion (optimizer, cpu, ' "$work/inspect.out" &&
   { [ $ucx = no ] || grep -q '^comm-ucx:  ' "$work/inspect.out"; }; then
  ok "the installed mixprec-inspect lists the installed plugins"
else
  not_ok "the installed mixprec-inspect lists the installed plugins" "$work/inspect.out"
fi
if run_root /usr/bin/python3 -c '
import gi
gi.require_version("Mixprec", "1.0")
from gi.repository import Mixprec
import gi.overrides.Mixprec
print(Mixprec.get_major_version(), gi.overrides.Mixprec.__file__)' >"$work/py.out" 2>&1 &&
   grep -qx "1 $root$sitelib/gi/overrides/Mixprec.py" "$work/py.out"; then
  ok "Python imports Mixprec with the installed typelib and overrides"
else
  not_ok "Python imports Mixprec with the installed typelib and overrides" "$work/py.out"
fi

# ------------------------------------------------------------ Debian's list
if [ -z "$debdir" ]; then
  debdir="$work/debs"
  mkdir -p "$debdir"
  start=$(date +%s)
  if (cd "$work/src" && DEB_BUILD_OPTIONS="nocheck parallel=$(nproc)" DEB_BUILD_PROFILES=nocheck \
        dpkg-buildpackage -us -uc -b) >"$work/deb-build.log" 2>&1; then
    mv "$work"/*.deb "$debdir/"
    ok "dpkg-buildpackage -us -uc -b for the comparison ($(( $(date +%s) - start )) s)"
  else
    not_ok "dpkg-buildpackage -us -uc -b for the comparison" "$work/deb-build.log"
    exit 1
  fi
fi
ls "$debdir"/*.deb >/dev/null 2>&1 || bail "no .deb files in $debdir"

# The role of each package of either family.
role_of () {
  case $1 in
    libmixprec0 | gir1.2-mixprec-1.0 | libmixprec | mixprec) echo runtime ;;
    libmixprec-dev | mixprec-devel) echo devel ;;
    mixprec-plugins-*) echo plugins ;;
    mixprec-tools) echo tools ;;
    python3-mixprec) echo python ;;
    libmixprec-doc | mixprec-doc) echo doc ;;
    *) echo "unknown:$1" ;;
  esac
}
# normalize PACKAGE LIBDIR SITELIB: the file names on stdin (no folders) as
# the same words for both families: LIBDIR, SITELIB, the package's own doc
# folder as PKGDOC (dh_compress gzips what it holds, rpm does not). Left
# out: what each family adds by its own policy (Debian's copyright and
# changelog in every package and its doc-base registration; RPM's license
# folder and build-id links) and the byte-compiled Python files (Debian
# compiles them when the package is installed, RPM ships them).
normalize () {
  local pkg=$1 lib=$2 site=$3
  sed -E -e "s,^$lib/,LIBDIR/," -e "s,^$site/,SITELIB/," \
      -e "s,^/usr/share/doc/$pkg(-[0-9][^/]*)?/([^/]*)$,PKGDOC/\2," -e 's,^(PKGDOC/.*)\.gz$,\1,' |
    grep -v -E '^PKGDOC/(copyright|changelog(\.Debian)?)$|^/usr/share/licenses/|^/usr/share/doc-base/|^/usr/lib/\.build-id/|/__pycache__/'
}
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo x86_64-linux-gnu)
mkdir -p "$work/lists"
: >"$work/unknown.out"
for f in "$debdir"/*.deb; do
  p=$(dpkg-deb -f "$f" Package)
  # Debug symbols: Debian's -dbgsym packages; the RPM build has no
  # debuginfo packages where the rpm macros do not make them (Debian).
  case $p in *-dbgsym) continue ;; esac
  r=$(role_of "$p")
  case $r in unknown:*) echo "$p" >>"$work/unknown.out" ;; esac
  echo "$p" >>"$work/lists/deb-$r.packages"
  dpkg-deb -c "$f" | awk '$1 !~ /^d/ { print $6 }' | sed 's,^\./,/,' |
    normalize "$p" "/usr/lib/$multiarch" /usr/lib/python3/dist-packages >>"$work/lists/deb-$r"
done
while read -r f; do
  p=$(rpm -qp --qf '%{NAME}' "$f")
  r=$(role_of "$p")
  case $r in unknown:*) echo "$p" >>"$work/unknown.out" ;; esac
  echo "$p" >>"$work/lists/rpm-$r.packages"
  rpm -qp --qf '[%{FILEMODES:perms} %{FILENAMES}\n]' "$f" | awk '$1 !~ /^d/ { print $2 }' |
    normalize "$p" "$libdir" "$sitelib" >>"$work/lists/rpm-$r"
done <"$work/rpms"
say "files by role (folders, per-family license/changelog files and __pycache__ left out):"
say "$(printf '%-8s %-48s %-48s %5s %5s %s' role Debian RPM deb rpm same)"
for r in runtime devel plugins tools python doc; do
  for fam in deb rpm; do
    touch "$work/lists/$fam-$r" "$work/lists/$fam-$r.packages"
    sort -u -o "$work/lists/$fam-$r" "$work/lists/$fam-$r"
  done
  same=yes
  diff -u "$work/lists/deb-$r" "$work/lists/rpm-$r" >"$work/lists/$r.diff" || same=no
  say "$(printf '%-8s %-48s %-48s %5s %5s %s' "$r" \
    "$(sort "$work/lists/deb-$r.packages" | tr '\n' ' ')" "$(sort "$work/lists/rpm-$r.packages" | tr '\n' ' ')" \
    "$(wc -l <"$work/lists/deb-$r")" "$(wc -l <"$work/lists/rpm-$r")" "$same")"
  if [ $same = yes ] && [ -s "$work/lists/rpm-$r" ]; then
    ok "role $r: the RPM files equal the Debian files"
  else
    not_ok "role $r: the RPM files equal the Debian files (- Debian, + RPM)" "$work/lists/$r.diff"
  fi
done
if grep -q . "$work/unknown.out"; then
  not_ok "every package has a role (these have none)" "$work/unknown.out"
fi
for r in runtime devel plugins tools python; do
  sed "s/^/# $r: /" "$work/lists/rpm-$r"
done
say "doc: $(grep -c '^/usr/share/doc/libmixprec/reference/' "$work/lists/rpm-doc") files in /usr/share/doc/libmixprec/reference/"

echo "1..$n"
[ $failed = 0 ] && say "RPM test passed" || say "RPM test FAILED"
exit $failed
