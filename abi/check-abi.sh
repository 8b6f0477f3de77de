#!/bin/sh
# check-abi.sh LIBRARY BASELINE HEADERS_DIR SUPPRESSIONS SONAME
#
# `make check-abi`: compares the built libmixprec against the committed ABI
# baseline and checks how the library exports its symbols. Exit 0 when the
# ABI is the baseline's or a compatible extension of it (added symbols), 1 on
# any incompatible change. Without abidiff or a baseline for this CPU the
# comparison is skipped with a message (exit 0), unless CHECK_ABI_STRICT=yes
# (CI), which makes a skip a failure.
set -u
lib=$1 baseline=$2 headers=$3 suppressions=$4 soname=$5
ABIDIFF=${ABIDIFF:-abidiff}
NM=${NM:-nm}
READELF=${READELF:-readelf}
status=0

fail () { echo "check-abi: FAIL: $*"; status=1; }
skip () {
  echo "check-abi: SKIP the baseline comparison: $*"
  [ "${CHECK_ABI_STRICT:-no}" = yes ] && fail "CHECK_ABI_STRICT=yes does not allow skipping"
  exit $status
}

[ -f "$lib" ] || { echo "check-abi: $lib is not built"; exit 1; }

# 1. Linking discipline, independent of abidiff: the soname follows
# configure.ac's libtool version, and every exported symbol is public API
# (mixprec_*), exported by the anonymous node of libmixprec/libmixprec.map
# (no version symbol, so `nm -D --defined-only` lists mixprec_* alone).
got_soname=$($READELF -d "$lib" | sed -n 's/.*Library soname: \[\(.*\)\].*/\1/p')
[ "$got_soname" = "$soname" ] || fail "soname is '$got_soname', configure.ac's libtool version gives '$soname'"
bad=$($NM -D --defined-only "$lib" | awk '{ print $3 }' | grep -v -E '^mixprec_[A-Za-z0-9_]+$')
[ -z "$bad" ] || fail "exported symbols outside the version script's public set: $(echo $bad)"
n_syms=$($NM -D --defined-only "$lib" | grep -c ' mixprec_')
echo "check-abi: $soname exports $n_syms symbols, all mixprec_*"

# 2. Types and symbols against the baseline of the released ABI.
if [ "x$ABIDIFF" = xno ] || ! command -v "$ABIDIFF" >/dev/null 2>&1; then
  skip "abidiff not found (Debian: apt install abigail-tools, then rerun configure)"
fi
if [ ! -f "$baseline" ]; then
  skip "no baseline for this CPU ($baseline)"
fi
if ! $READELF -S "$lib" | grep -q '\.debug_info'; then
  fail "$lib has no debug information; build with CFLAGS containing -g"
  exit $status
fi

report=$(mktemp)
trap 'rm -f "$report"' EXIT
# --no-added-syms: additions are compatible and leave the report empty;
# anything still reported (a removed symbol, a changed function or public
# struct) breaks programs built against the baseline. Deliberate, harmless
# changes (a reserved field turned into a named one of the same size) are
# declared in the suppressions file, each with its reason.
"$ABIDIFF" --no-added-syms --fail-no-debug-info --suppressions "$suppressions" \
  --headers-dir2 "$headers" --drop-private-types \
  "$baseline" "$lib" >"$report" 2>&1
rc=$?
# abidiff's exit status is a bit field: 1 error, 2 usage error, 4 ABI change,
# 8 incompatible ABI change.
if [ $((rc & 3)) -ne 0 ]; then
  cat "$report"
  fail "abidiff could not compare (exit status $rc)"
elif [ $((rc & 12)) -ne 0 ]; then
  cat "$report"
  fail "the ABI differs from the baseline $(basename "$baseline") (abidiff exit status $rc)"
  echo "check-abi: a released ABI only grows. If this release breaks ABI on purpose, bump"
  echo "check-abi: the soname (libtool current/age in configure.ac) and run 'make abi-baseline'."
else
  added=$("$ABIDIFF" --suppressions "$suppressions" --headers-dir2 "$headers" --drop-private-types \
            "$baseline" "$lib" 2>/dev/null | sed -n 's/^Functions changes summary:.* \([0-9][0-9]*\) Added function.*/\1/p' | head -n 1)
  echo "check-abi: PASS: compatible with $(basename "$baseline")${added:+ ($added functions added since)}"
fi
exit $status
