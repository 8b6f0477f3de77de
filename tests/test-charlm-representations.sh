#!/bin/sh
# test-charlm-representations.sh — the example trainer (examples/charlm)
# in short runs with each master and optimizer-state representation of
# mixprec.master_weights / mixprec.optimizer_states (the configs
# examples/configs/bf16-master-*.json, bf16-states-*.json and
# bf16-remainder-int8.json), from the same seed as bf16.json with FP32
# masters and moments: each ends within 2% of it; remainder masters, being
# the FP32 master bit for bit, within 0.05%; bf16 without a master (round
# to nearest even) loses the small updates and ends worse than Kahan.
# The full-length runs and their val_loss are in
# docs/reference/memory-representations.md. Prints TAP.

. "${G_TEST_SRCDIR:-$(dirname "$0")}/charlm-common.sh"
charlm_setup test-charlm-repr

representations="master-remainder master-kahan states-bf16 states-fp16-scaled
  states-bf16-scaled states-fp8 states-int8 states-int4 remainder-int8"

echo "1..13"

# run NAME: 300 steps of examples/configs/bf16-NAME.json (bf16.json for
# "bf16"); the val_loss, or nothing with the run's output as comments.
run () {
  config=bf16-$1.json
  [ "$1" = bf16 ] && config=bf16.json
  "$charlm" --config "$configs/$config" --words "$words" --steps 300 --batch 64 \
    --eval-every 100 --quiet --csv "$tmp/$1.csv" >"$tmp/$1.out" 2>"$tmp/$1.err"
  rc=$?
  loss=$(sed -n '$s/^val_loss=\([0-9.]*\)$/\1/p' "$tmp/$1.out")
  if [ $rc != 0 ] || [ -z "$loss" ]; then
    sed 's/^/# /' "$tmp/$1.out" "$tmp/$1.err" | tail -n 5 >&2
  fi
  echo "$loss"
}

bf16=$(run bf16)
check "bf16 with FP32 masters and moments ends with a val_loss ($bf16)" "a != \"\" && a < 2.6" "$bf16"

for r in $representations; do
  loss=$(run "$r")
  eval "loss_$(echo "$r" | tr '-' '_')=\$loss"
  check "$r val_loss $loss within 2% of bf16 with FP32 state $bf16" \
    "a != \"\" && b > 0 && (a - b) / b < 0.02 && (b - a) / b < 0.02" "$loss" "$bf16"
done

# Remainder masters are FP32 masters; only the working copies of the rare
# masters whose low half is exactly 0x8000 round the other way.
check "master-remainder val_loss $loss_master_remainder within 0.05% of FP32 masters' $bf16" \
  "a != \"\" && b > 0 && (a - b) / b < 0.0005 && (b - a) / b < 0.0005" "$loss_master_remainder" "$bf16"

# bf16 weights without compensation round away the updates below half an
# ulp; Kahan keeps them.
loss_master_none=$(run master-none)
check "master-none ends with a val_loss ($loss_master_none)" "a != \"\" && a < 3" "$loss_master_none"
check "master-none val_loss $loss_master_none is above master-kahan's $loss_master_kahan" \
  "a != \"\" && b != \"\" && a > b" "$loss_master_none" "$loss_master_kahan"
