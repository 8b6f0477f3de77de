#!/bin/sh
# test-torch-charlm.sh — examples/torch-charlm.py in short runs: both
# trainings (libmixprec through mixprec.torch, and torch's own AdamW) end
# with finite validation losses, the comparison lines and a PNG; and, with
# a comm plugin, two ranks under mixprec-run at ZeRO-2 print the same
# losses, bit for bit, as one process taking two micro-batches per step
# (bf16 accumulates in FP32, in rank order). Prints TAP.
top="$MIXPREC_TOP_BUILDDIR"
src="${G_TEST_SRCDIR:-$top/tests}/.."
example="$src/examples/torch-charlm.py"
run="$top/tools/mixprec-run"
py="${PYTHON_TORCH:-no}"

if [ "$py" = no ] || ! "$py" -c 'import torch' >/dev/null 2>&1; then
  echo "1..0 # SKIP torch is not importable (no Python with gi and torch: see PYTHON_TORCH)"
  exit 0
fi
if [ ! -f /usr/share/dict/american-english ]; then
  echo "1..0 # SKIP /usr/share/dict/american-english is missing (Debian package wamerican)"
  exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1
export PYTHONPATH="$src/bindings:$src/bindings/python${PYTHONPATH:+:$PYTHONPATH}"
export MIXPREC_COMM_TIMEOUT_MS=20000
unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT

n=0
fail=0
ok () { n=$((n + 1)); if [ "$1" = 0 ]; then echo "ok $n - $2"; else echo "not ok $n - $2"; fail=1; fi; }
finite () { grep -q "^$1 val_loss=[0-9][0-9.e-]*[ ]*" "$2" && ! grep "^$1 val_loss=" "$2" | grep -q -i 'nan\|inf'; }

dist=no
[ "${MIXPREC_TEST_HAVE_UCX:-no}" = yes ] && dist=yes
[ $dist = yes ] && echo "1..4" || echo "1..3"

# One process taking two micro-batches per step; below, two ranks taking
# one each must print its libmixprec losses.
args="--steps 10 --batch 16 --d-model 32 --layers 1 --eval-every 5 --eval-words 128 --quiet"
"$py" "$example" $args --accumulation 2 --plot curves.png >both.out 2>&1
status=$?
finite mixprec both.out && finite torch both.out
ok $(( $? + status )) "bf16: libmixprec and torch's AdamW both train to a finite validation loss"
[ $status != 0 ] && sed 's/^/# /' both.out | tail -15
grep -q "^val loss ratio mixprec/torch = " both.out &&
  grep -q "^per-step time outside forward/backward: libmixprec [0-9.]* ms .* torch AdamW + casts [0-9.]* ms" both.out
ok $? "the ratio of the validation losses and the per-step times are printed"
[ "$(head -c 4 curves.png | od -An -c | tr -d ' ')" = '211PNG' ]
ok $? "the loss curves are saved as a PNG"

if [ $dist = yes ]; then
  expected=$(grep -o '^mixprec val_loss=.*' both.out | sed 's/ (rank [0-9]* of [0-9]*)//')
  "$run" -n 2 "$py" "$example" $args --no-torch --zero-stage 2 >dist.out 2>&1
  status=$?
  got=$(grep -o 'mixprec val_loss=.*' dist.out | sed 's/ (rank [0-9]* of [0-9]*)//' | sort -u)
  [ $status = 0 ] && [ -n "$expected" ] && [ "$got" = "$expected" ] &&
    [ "$(grep -c 'val_loss=.*(rank [01] of 2)' dist.out)" = 2 ]
  ok $? "2 ranks at ZeRO-2 print one process's losses bit for bit ($got)"
  if [ $status != 0 ] || [ "$got" != "$expected" ]; then
    echo "# one process: $expected"
    sed 's/^/# /' dist.out | tail -10
  fi
fi
exit $fail
