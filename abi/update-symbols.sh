#!/bin/sh
# update-symbols.sh LIBRARY SYMBOLS_FILE VERSION
#
# `make update-symbols`: rewrites debian/libmixprec0.symbols from the built
# library with dpkg-gensymbols. Symbols already listed keep their version;
# new ones get VERSION (the release that adds them); a symbol of an earlier
# release that disappeared is an ABI break, so the script refuses to drop
# it and says so instead.
set -eu
lib=$1 symbols=$2 version=$3
command -v dpkg-gensymbols >/dev/null 2>&1 ||
  { echo "update-symbols: dpkg-gensymbols not found (Debian: apt install dpkg-dev)"; exit 1; }

soname=$(readelf -d "$lib" | sed -n 's/.*Library soname: \[\(.*\)\].*/\1/p')
case $soname in
  libmixprec.so.*) package=libmixprec${soname#libmixprec.so.} ;;
  *) echo "update-symbols: $lib has soname '$soname'"; exit 1 ;;
esac

# dpkg-gensymbols reads a package tree: lay the library out as installed.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/root/usr/lib" "$tmp/debian"
cp "$lib" "$tmp/root/usr/lib/$soname"
# Symbols of the version being prepared are not released yet: one that
# left the library before the release simply goes (dpkg-gensymbols would
# keep it, silently). A symbol of an earlier version that disappeared makes
# dpkg-gensymbols fail below.
if [ -f "$symbols" ]; then
  nm -D --defined-only --with-symbol-versions "$lib" | awk '{ sub(/@@/, "@", $3); print $3 }' >"$tmp/exported"
  awk -v v="$version" 'NR == FNR { have[$1] = 1; next }
       /^ / && $2 == v && !($1 in have) { next }
       { print }' "$tmp/exported" "$symbols" >"$tmp/debian/$package.symbols"
fi

# -c1: fail on a missing symbol (ABI break), accept new ones.
(cd "$tmp" && dpkg-gensymbols -q -c1 -p"$package" -P"$tmp/root" -v"$version" \
   -e"$tmp/root/usr/lib/$soname" -O"$tmp/new.symbols") || {
  echo "update-symbols: symbols of $symbols are missing from $lib: that breaks the ABI"
  exit 1
}
# The dev package name is a property of debian/control, not of the library.
{ head -n 1 "$tmp/new.symbols"
  echo "* Build-Depends-Package: libmixprec-dev"
  tail -n +2 "$tmp/new.symbols" | grep -v '^\* Build-Depends-Package:'
} >"$tmp/out.symbols"
if [ -f "$symbols" ] && cmp -s "$tmp/out.symbols" "$symbols"; then
  echo "update-symbols: $symbols is up to date ($(grep -c '^ ' "$symbols") symbols)"
else
  cp "$tmp/out.symbols" "$symbols"
  echo "update-symbols: wrote $symbols ($(grep -c '^ ' "$symbols") symbols)"
fi
