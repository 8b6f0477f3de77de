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

echo "1..6"
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

# name<TAB>VERSION|no (its Since: tag) for every doc block naming a
# mixprec_ symbol
awk '
  /^\/\*\*[ \t]*$/ { inblock = 1; name = ""; since = "no"; next }
  inblock && name == "" && /^ \* mixprec_[a-z0-9_]+:/ {
    name = $2; sub(/:.*/, "", name); next }
  inblock && /^ \* Since: [0-9]+\.[0-9]+/ { since = $3 }
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

# The ABI baseline (abi/, the 1.0 interface) says which functions are 1.0;
# every other export is 1.1 API. An application that builds with
# MIXPREC_VERSION_MAX_ALLOWED=MIXPREC_VERSION_1_0 relies on the macro, and
# a reader of the reference on the Since: tag, so both must tell the truth.
baseline=$top_srcdir/abi/libmixprec.so.0.x86_64.abi
sed -n "s/.*<elf-symbol name='\(mixprec_[a-z0-9_]*\)'.*/\1/p" "$baseline" | sort -u >"$tmp/baseline"
comm -23 "$tmp/exported" "$tmp/baseline" >"$tmp/added"
if [ "$(wc -l <"$tmp/baseline")" -lt 200 ]; then
  echo "not ok 5 - Since: tags follow the ABI baseline # could not read $baseline"
else
  wrong=$(awk -F '\t' 'NR == FNR { added[$1] = 1; next }
                       ($1 in added) && $2 != "1.1" { print $1 " says Since: " $2 ", added after 1.0" }
                       !($1 in added) && $2 != "1.0" && $2 != "no" { print $1 " says Since: " $2 ", in the 1.0 baseline" }' \
            "$tmp/added" "$tmp/blocks" | sort -u | while read -r fn rest; do
            grep -qx "$fn" "$tmp/exported" && echo "$fn $rest"; done)
  if [ -z "$wrong" ]; then
    echo "ok 5 - Since: tags follow the ABI baseline ($(wc -l <"$tmp/added") functions added after 1.0)"
  else
    echo "not ok 5 - Since: tags follow the ABI baseline"
    echo "$wrong" | sed 's/^/#   /'
  fi
fi

# name<TAB>macro for every function declared in a public header: the
# MIXPREC_AVAILABLE_IN_ line that precedes its declaration.
awk '
  /MIXPREC_AVAILABLE_IN_[0-9_]+/ { match($0, /MIXPREC_AVAILABLE_IN_[0-9_]+/);
                                   macro = substr($0, RSTART, RLENGTH); next }
  macro != "" && match($0, /[ *]mixprec_[a-z0-9_]+[ \t]*\(/) {
    fn = substr($0, RSTART + 1, RLENGTH - 1); sub(/[ \t]*\($/, "", fn);
    print fn "\t" macro; macro = "" }
' "$top_srcdir"/libmixprec/*.h | sort -u >"$tmp/macros"
# GType functions are left out, as in $tmp/exported: the enum ones are
# generated with one macro for all.
wrong=$(awk -F '\t' 'NR == FNR { added[$1] = 1; next }
                     $1 ~ /_get_type$/ { next }
                     ($1 in added) && $2 != "MIXPREC_AVAILABLE_IN_1_1" { print $1 " is declared " $2 ", added after 1.0" }
                     !($1 in added) && $2 == "MIXPREC_AVAILABLE_IN_1_1" { print $1 " is declared " $2 ", in the 1.0 baseline" }' \
          "$tmp/added" "$tmp/macros")
missing=$(cut -f1 "$tmp/macros" | sort -u | comm -13 - "$tmp/exported")
if [ -z "$wrong" ] && [ -z "$missing" ]; then
  echo "ok 6 - declarations use the MIXPREC_AVAILABLE_IN_ macro of their version"
else
  echo "not ok 6 - declarations use the MIXPREC_AVAILABLE_IN_ macro of their version"
  { echo "$wrong"; echo "$missing" | sed 's/$/ has no MIXPREC_AVAILABLE_IN_ macro/'; } | grep -v '^ *$\|^ has no' | sed 's/^/#   /'
fi
