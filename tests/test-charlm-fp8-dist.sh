#!/bin/sh
# test-charlm-fp8-dist.sh — examples/charlm with FP8 Linear weights under
# mixprec-run: on 2 ranks at ZeRO-2 and ZeRO-3 (where the FP8 copies and
# their scales are what is gathered) it prints the same val_loss as one
# process taking 2 micro-batches per step, for delayed scaling and MX, and
# with 4-bit copies (NVFP4 with the Hadamard transform, MXFP4).
top="$MIXPREC_TOP_BUILDDIR"
src="${G_TEST_SRCDIR:-$top/tests}/.."
charlm="$top/examples/charlm"
run="$top/tools/mixprec-run"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1
export MIXPREC_COMM_TIMEOUT_MS=20000
n=0
fail=0
ok () { n=$((n + 1)); if [ "$1" = 0 ]; then echo "ok $n - $2"; else echo "not ok $n - $2"; fail=1; fi; }
val () { grep -o 'val_loss=[0-9.]*' "$1" | sort -u; }

if [ ! -f /usr/share/dict/american-english ]; then
  echo "1..0 # SKIP /usr/share/dict/american-english is missing (Debian package wamerican)"
  exit 0
fi

echo "1..8"
steps=20
for config in bf16-fp8 bf16-fp8-mx bf16-nvfp4 bf16-mxfp4; do
  cfg="$src/examples/configs/$config.json"
  "$charlm" --config "$cfg" --steps $steps --accumulation 2 --quiet --csv single.csv >single.out 2>&1
  expected=$(val single.out)
  for stage in 2 3; do
    # A rank whose leak check LeakSanitizer's tracer could not run gets
    # the run repeated, twice at most (see test-charlm-dist.sh).
    attempt=1
    while :; do
      "$run" -n 2 "$charlm" --config "$cfg" --steps $steps --zero-stage $stage --quiet \
        --csv dist.csv >dist.out 2>&1
      status=$?
      [ $status != 0 ] && [ $attempt -lt 3 ] &&
        grep -q 'LeakSanitizer has encountered a fatal error' dist.out &&
        ! grep -q 'detected memory leaks' dist.out || break
      attempt=$((attempt + 1))
    done
    got=$(val dist.out)
    [ $status = 0 ] && [ -n "$expected" ] && [ "$got" = "$expected" ] &&
      [ "$(grep -c 'val_loss=' dist.out)" = 2 ]
    ok $? "$config on 2 ranks, ZeRO-$stage: $got (one process: $expected)"
    [ $status != 0 ] && sed 's/^/# /' dist.out | tail -5
  done
done
exit $fail
