#!/bin/sh
# test-inspect-uninstalled.sh — the tools of a build tree find the build's
# plugins by themselves: with MIXPREC_PLUGIN_PATH and
# MIXPREC_PLUGIN_SYSTEM_PATH unset, ./tools/mixprec-inspect lists the
# optimizers built in plugins/ and --plan works. The same program with a
# copy of the library from outside the tree (as once installed) searches
# the installed plugin directory only. The search path is read from the
# registry's debug message. Prints TAP.

top=$(cd "${MIXPREC_TOP_BUILDDIR:-.}" && pwd)
srcdir=${G_TEST_SRCDIR:-$top/tests}/..
tmp=$(mktemp -d "${TMPDIR:-/tmp}/mixprec-uninstalled-XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
unset MIXPREC_PLUGIN_PATH MIXPREC_PLUGIN_SYSTEM_PATH

n=0
failed=0
check () {
  n=$((n + 1))
  if [ "$1" = 0 ]; then
    echo "ok $n - $2"
  else
    failed=1
    echo "not ok $n - $2"
    sed 's/^/# /' "$tmp/out" "$tmp/err"
  fi
}
skip () { n=$((n + 1)); echo "ok $n - $1 # SKIP $2"; }

# search_path: the directories of the registry's "plugin search path" debug
# line (GLib prints debug messages on stdout or stderr)
search_path () { cat "$tmp/out" "$tmp/err" | sed -n 's/.*plugin search path: //p' | head -n 1; }

echo "1..8"

# From the top of the build tree, as the README runs it.
(cd "$top" && G_MESSAGES_DEBUG=Mixprec ./tools/mixprec-inspect) >"$tmp/out" 2>"$tmp/err"
status=$?
[ "$status" = 0 ] &&
  grep -q '^optim-adamw:  adamw (optimizer, cpu, rank ' "$tmp/out" &&
  grep -q '^optim-sgd:  sgd (optimizer, cpu, rank ' "$tmp/out" &&
  grep -q '^optim-lion:  lion (optimizer, cpu, rank ' "$tmp/out"
check $? "mixprec-inspect from the build tree lists the build's optimizers"
[ "$(search_path)" = "$top/plugins" ]
check $? "the search path is the build tree's plugins/ (got '$(search_path)')"
(cd "$top" && ./tools/mixprec-inspect optim-adamw) >"$tmp/out" 2>"$tmp/err"
grep -q "$top/plugins/" "$tmp/out"
check $? "the adamw plugin loaded is the build's file"

(cd "$top" && ./tools/mixprec-inspect --plan --params 1000000 --world 2 \
   --config "$srcdir/examples/configs/bf16.json") >"$tmp/out" 2>"$tmp/err"
status=$?
[ "$status" = 0 ] && grep -q '^  total ' "$tmp/out"
check $? "mixprec-inspect --plan works from the build tree"

# MIXPREC_PLUGIN_PATH comes first; the build tree stays behind it.
(cd "$top" && MIXPREC_PLUGIN_PATH="$tmp/first" G_MESSAGES_DEBUG=Mixprec \
   ./tools/mixprec-inspect) >"$tmp/out" 2>"$tmp/err"
[ "$(search_path)" = "$tmp/first:$top/plugins" ]
check $? "MIXPREC_PLUGIN_PATH is searched before the build tree"

# MIXPREC_PLUGIN_SYSTEM_PATH replaces the build tree, as it replaces the
# installed directory: empty searches no system directory at all.
(cd "$top" && MIXPREC_PLUGIN_SYSTEM_PATH= G_MESSAGES_DEBUG=Mixprec \
   ./tools/mixprec-inspect) >"$tmp/out" 2>"$tmp/err"
[ -z "$(search_path)" ] && ! grep -q '^optim-adamw:' "$tmp/out" &&
  grep -q 'No plugin files were found' "$tmp/out"
check $? "an empty MIXPREC_PLUGIN_SYSTEM_PATH searches neither the tree nor the system"

# The library copied out of the tree behaves as an installed one: it
# searches the configured plugin directory, not the build's.
binary=
for b in "$top/tools/.libs/mixprec-inspect" "$top/tools/.libs/lt-mixprec-inspect"; do
  [ -x "$b" ] && { binary=$b; break; }
done
lib=$(ls "$top"/libmixprec/.libs/libmixprec.so.[0-9]* 2>/dev/null | head -n 1)
if [ -z "$binary" ] || [ -z "$lib" ]; then
  skip "a copy of the library outside the tree searches the installed plugin directory" \
    "no shared library or libtool binary in the build tree"
  skip "a copy of the library outside the tree loads none of the build's plugins" "as above"
else
  mkdir -p "$tmp/lib"
  soname=$(basename "$lib" | sed 's/^\(libmixprec\.so\.[0-9]*\).*/\1/')
  cp -L "$lib" "$tmp/lib/$soname"
  if ! LD_LIBRARY_PATH="$tmp/lib" ldd "$binary" 2>/dev/null | grep -q "$tmp/lib/$soname"; then
    skip "a copy of the library outside the tree searches the installed plugin directory" \
      "$binary does not load the copy (an RPATH into the tree?)"
    skip "a copy of the library outside the tree loads none of the build's plugins" "as above"
  else
    (cd "$top" && LD_LIBRARY_PATH="$tmp/lib" G_MESSAGES_DEBUG=Mixprec "$binary") \
      >"$tmp/out" 2>"$tmp/err"
    path=$(search_path)
    case $path in
      */mixprec-1.0) [ "$path" != "$top/plugins" ] ;;
      *) false ;;
    esac
    check $? "a copy of the library outside the tree searches the installed plugin directory (got '$path')"
    (cd "$top" && LD_LIBRARY_PATH="$tmp/lib" "$binary" optim-adamw) >"$tmp/out" 2>"$tmp/err"
    ! grep -q "$top/plugins" "$tmp/out" "$tmp/err"
    check $? "a copy of the library outside the tree loads none of the build's plugins"
  fi
fi
exit $failed
