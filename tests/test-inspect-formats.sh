#!/bin/sh
# test-inspect-formats.sh — `mixprec-inspect --formats` lists the dtypes
# and the formats of the 4-bit block recipes with their limits: FP4 E2M1
# (max 6, min normal 1, min subnormal 0.5, epsilon 0.5: OCP MX v1.0,
# table 5) and E8M0 (2^127 down to 2^-127, powers of two only). Prints TAP.

top=$(cd "${MIXPREC_TOP_BUILDDIR:-.}" && pwd)
out=$("$top/tools/mixprec-inspect" --formats) || { echo "1..1"; echo "not ok 1 - mixprec-inspect --formats ran"; exit 1; }

n=0
failed=0
row () {
  n=$((n + 1))
  got=$(printf '%s\n' "$out" | awk -v f="$1" '$1 == f { $1 = ""; print substr($0, 2) }')
  if [ "$got" = "$2" ]; then
    echo "ok $n - $1: $2"
  else
    failed=1
    echo "not ok $n - $1: want '$2', got '$got'"
  fi
}

row float8_e4m3 "8 448 0.015625 0.00195312 0.125"
row float4_e2m1 "4 6 1 0.5 0.5"
row e8m0 "8 1.70141e+38 5.87747e-39 5.87747e-39 1"
echo "1..$n"
exit $failed
