#!/bin/sh
# test-doc-snippets.sh — every code block of README.md and
# examples/README.md, run against the build tree (tests/doc-snippets.py
# says how each kind runs). Prints TAP.
py=
for p in "$PYTHON_GI" python3 /usr/bin/python3; do
  if [ -n "$p" ] && [ "$p" != no ] && command -v "$p" >/dev/null 2>&1; then py=$p; break; fi
done
if [ -z "$py" ]; then
  echo "1..0 # SKIP no python3 to extract the snippets with"
  exit 0
fi
exec "$py" "${G_TEST_SRCDIR:-tests}/doc-snippets.py"
