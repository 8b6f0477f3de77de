#!/bin/sh
# test-gi-docgen-check.sh — `gi-docgen check` finds nothing to report in
# the built bindings/Mixprec-1.0.gir: every symbol, parameter and return
# value introspection sees has its documentation. The HTML reference
# (docs/local.mk) renders the same comments; this test runs whether or
# not it is built. Skips, saying why, without gi-docgen or introspection.
# Prints TAP (every test here runs under the TAP driver, whose skip is
# "1..0 # SKIP", not exit status 77).
gir=${MIXPREC_GIR:-}
docgen=${GI_DOCGEN:-no}

if [ -z "$gir" ]; then
  echo "1..0 # SKIP configure found no GObject introspection (no .gir to check)"; exit 0
fi
if [ "x$docgen" = xno ] || ! command -v "$docgen" >/dev/null 2>&1; then
  echo "1..0 # SKIP configure found no gi-docgen (Debian: apt install gi-docgen, then rerun configure)"
  exit 0
fi
if [ ! -f "$gir" ]; then
  echo "Bail out! no $gir: build first (make)"; exit 1
fi

echo "1..2"
n_symbols=$(grep -c 'c:identifier="mixprec_' "$gir")
# About 400 functions and methods: far fewer means the wrong file.
if [ "$n_symbols" -ge 300 ]; then
  echo "ok 1 - $(basename "$gir") declares $n_symbols mixprec_ symbols"
else
  echo "not ok 1 - $(basename "$gir") declares $n_symbols mixprec_ symbols (expected 300 or more)"
fi

report=$("$docgen" check --quiet --fatal-warnings \
           --add-include-path "$(dirname "$gir")" "$gir" 2>&1)
rc=$?
# Without colour codes, and without the progress lines --quiet may leave.
problems=$(printf '%s\n' "$report" | sed 's/\x1b\[[0-9;]*m//g' | grep -v '^INFO:' | grep -v '^ *$')
if [ $rc -eq 0 ] && [ -z "$problems" ]; then
  echo "ok 2 - gi-docgen check reports nothing"
else
  echo "not ok 2 - gi-docgen check reports nothing (exit status $rc, $(printf '%s\n' "$problems" | grep -c .) lines)"
  printf '%s\n' "$problems" | sed 's/^/#   /'
fi
