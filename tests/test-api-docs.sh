#!/bin/sh
# test-api-docs.sh — every function libmixprec.so exports has a doc
# comment (the gi-docgen/gtk-doc block "/**\n * NAME:") with a Since: tag
# in the library's sources, and every documented mixprec_ function is
# exported. The exports come from the built library (nm -D), not from the
# sources, so a function added without documentation fails here whether
# or not the HTML reference is built. GType functions (*_get_type) are
# documented by their type's comment. Prints TAP.
top_builddir=${MIXPREC_TOP_BUILDDIR:-.}
top_srcdir=${G_TEST_SRCDIR:-tests}/..
lib=$top_builddir/libmixprec/.libs/libmixprec.so
tmp=$(mktemp -d "${TMPDIR:-/tmp}/test-api-docs.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT

echo "1..4"
if ! command -v nm >/dev/null 2>&1; then
  echo "Bail out! nm (binutils) is not installed"; exit 1
fi
if [ ! -f "$lib" ]; then
  echo "Bail out! no $lib: build the library first"; exit 1
fi

nm -D --defined-only "$lib" | awk '$2 == "T" && $3 ~ /^mixprec_/ { print $3 }' |
  grep -v '_get_type$' | sort -u >"$tmp/exported"
n=$(wc -l <"$tmp/exported")
# The 1.0 API has about 300 functions: far fewer means nm read the wrong file.
if [ "$n" -ge 200 ]; then
  echo "ok 1 - libmixprec.so exports $n mixprec_ functions besides the GType ones"
else
  echo "not ok 1 - libmixprec.so exports $n mixprec_ functions besides the GType ones (expected 200 or more)"
fi

# name<TAB>yes|no (has Since:) for every doc block naming a mixprec_ symbol
awk '
  /^\/\*\*[ \t]*$/ { inblock = 1; name = ""; since = "no"; next }
  inblock && name == "" && /^ \* mixprec_[a-z0-9_]+:/ {
    name = $2; sub(/:.*/, "", name); next }
  inblock && /^ \* Since: [0-9]+\.[0-9]+/ { since = "yes" }
  inblock && /\*\// { if (name != "") print name "\t" since; inblock = 0 }
' "$top_srcdir"/libmixprec/*.c "$top_srcdir"/libmixprec/*.h | sort -u >"$tmp/blocks"
cut -f1 "$tmp/blocks" | sort -u >"$tmp/documented"

missing=$(comm -23 "$tmp/exported" "$tmp/documented")
if [ -z "$missing" ]; then
  echo "ok 2 - every exported function has a doc comment"
else
  echo "not ok 2 - every exported function has a doc comment"
  echo "$missing" | sed 's/^/#   undocumented: /'
fi

nosince=$(awk -F '\t' '$2 == "no" { print $1 }' "$tmp/blocks" | sort -u | comm -12 - "$tmp/exported")
if [ -z "$nosince" ]; then
  echo "ok 3 - every exported function's doc comment has a Since: tag"
else
  echo "not ok 3 - every exported function's doc comment has a Since: tag"
  echo "$nosince" | sed 's/^/#   no Since: /'
fi

stale=$(comm -13 "$tmp/exported" "$tmp/documented" | grep -v '_get_type$')
if [ -z "$stale" ]; then
  echo "ok 4 - every documented mixprec_ function is exported"
else
  echo "not ok 4 - every documented mixprec_ function is exported"
  echo "$stale" | sed 's/^/#   documented but not exported: /'
fi
