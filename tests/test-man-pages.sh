#!/bin/sh
# test-man-pages.sh — every manual page in man/ renders with man's
# warnings enabled at 80 columns without a warning (groff's too: unknown
# requests, tables wider than the line), and every libmixprec page that a
# page refers to as NAME(SECTION) exists in man/. Prints TAP.
top_srcdir=${G_TEST_SRCDIR:-tests}/..
if ! command -v man >/dev/null 2>&1; then
  echo "1..0 # SKIP man (Debian: man-db) is not installed"
  exit 0
fi
n=0
for page in "$top_srcdir"/man/*.[1-8]; do
  name=$(basename "$page")
  n=$((n + 1))
  out=$(LC_ALL=C.UTF-8 MANROFFSEQ='' MANWIDTH=80 man --warnings -E UTF-8 -l "$page" 2>&1 >/dev/null)
  if [ -z "$out" ]; then
    echo "ok $n - $name renders without warnings"
  else
    echo "not ok $n - $name renders without warnings"
    echo "$out" | sed 's/^/#   /'
  fi
  refs=$(LC_ALL=C.UTF-8 MANWIDTH=200 man -E UTF-8 -l "$page" 2>/dev/null | col -b |
         grep -oE '(^|[^a-z_.-])(lib)?mixprec[a-z.-]*\([1-8]\)' | sed 's/^[^lm]*//' | sort -u)
  missing=
  for ref in $refs; do
    file=$(echo "$ref" | sed 's/(\([1-8]\))$/.\1/')
    [ -f "$top_srcdir/man/$file" ] || missing="$missing $ref"
  done
  n=$((n + 1))
  if [ -z "$missing" ]; then
    echo "ok $n - the pages $name refers to exist ($(echo $refs | wc -w) references)"
  else
    echo "not ok $n - the pages $name refers to exist: missing$missing"
  fi
done
echo "1..$n"
