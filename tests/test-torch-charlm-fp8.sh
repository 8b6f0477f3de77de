#!/bin/sh
# test-torch-charlm-fp8.sh — examples/torch-charlm.py --fp8: the mixprec
# run's nn.Linear layers multiply with the engine's FP8 working copies,
# decoded by torch's own float8_e4m3fn. From the same weights and batches,
# the delayed and MX runs end within 3% of the bf16 run's validation loss,
# differ from it, and per-tensor FP8 weights hold at most 256 distinct
# values. Prints TAP.
top="$MIXPREC_TOP_BUILDDIR"
src="${G_TEST_SRCDIR:-$top/tests}/.."
example="$src/examples/torch-charlm.py"
py="${PYTHON_TORCH:-no}"

if [ "$py" = no ] || ! "$py" -c 'import torch; torch.float8_e4m3fn' >/dev/null 2>&1; then
  echo "1..0 # SKIP torch with float8_e4m3fn is not importable (no Python with gi and torch: see PYTHON_TORCH)"
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
unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT

n=0
fail=0
ok () { n=$((n + 1)); if [ "$1" = 0 ]; then echo "ok $n - $2"; else echo "not ok $n - $2"; fail=1; fi; }
loss () { sed -n 's/^mixprec val_loss=\([0-9.e-]*\) .*/\1/p' "$1.out"; }
within3 () { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a != "" && b > 0 && (a - b) / b < 0.03 && (b - a) / b < 0.03) }'; }

echo "1..6"
args="--steps 60 --batch 32 --d-model 32 --layers 1 --eval-every 30 --eval-words 256 --no-torch --quiet"
for r in bf16 delayed mx; do
  if [ $r = bf16 ]; then fp8=; else fp8="--fp8 $r"; fi
  "$py" "$example" $args $fp8 >$r.out 2>$r.err
  echo $? >$r.rc
done

status=0
for r in bf16 delayed mx; do
  [ "$(cat $r.rc)" = 0 ] && [ -n "$(loss $r)" ] || { status=1; sed 's/^/# /' $r.out $r.err | tail -10; }
done
ok $status "bf16, delayed and mx runs end with a validation loss ($(loss bf16), $(loss delayed), $(loss mx))"

for r in delayed mx; do
  within3 "$(loss $r)" "$(loss bf16)"
  ok $? "$r FP8 val_loss $(loss $r) within 3% of bf16 $(loss bf16)"
done

[ -n "$(loss delayed)" ] && [ "$(loss delayed)" != "$(loss bf16)" ]
ok $? "the delayed FP8 run is not the bf16 run ($(loss delayed) vs $(loss bf16))"

# "blocks.0.qkv.weight 151, ...": distinct values each layer multiplied
# with; a per-tensor FP8 copy is one byte per value times one scale.
counts=$(sed -n 's/^mixprec fp8 delayed: distinct values the Linear layers multiplied with: //p' delayed.out)
echo "$counts" | grep -q "blocks.0.qkv.weight [0-9]" &&
  echo "$counts" | grep -q "head.weight [0-9]" &&
  [ -z "$(echo "$counts" | tr ',' '\n' | awk '$2 > 256')" ]
ok $? "the delayed run's Linear weights hold at most 256 distinct values each ($counts)"
! grep -q "^mixprec fp8" bf16.out
ok $? "the bf16 run reports no FP8 layers"
exit $fail
