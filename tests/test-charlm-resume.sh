#!/bin/sh
# test-charlm-resume.sh — the example trainer's --save-every, --save-dir and
# --resume: a run stopped at a checkpoint and resumed writes, at the end, a
# checkpoint byte for byte equal to the uninterrupted run's, and prints the
# same val_loss. fp16 with dynamic loss scaling, so the scaler state, the
# schedule and the batch order must all resume; then bf16 with remainder
# masters and int8 optimizer state, saved as the run keeps them. Prints TAP.

. "${G_TEST_SRCDIR:-$(dirname "$0")}/charlm-common.sh"
config=$configs/fp16.json
charlm_setup test-charlm-resume

echo "1..10"
failed=0

# As charlm-common.sh's, and the runs' stderr with a failure.
not_ok () {
  n=$((n + 1))
  failed=1
  echo "not ok $n - $1"
  for f in "$tmp"/*.err; do sed "s|^|# $(basename "$f"): |" "$f"; done
}

check () {
  if eval "$2"; then ok "$1"; else not_ok "$1"; fi
}

# train NAME [OPTIONS...]: 30 steps checkpointed every 10 into $tmp/ck.
train () {
  name=$1
  shift
  "$charlm" --config "$config" --words "$words" --steps 30 --batch 32 --eval-every 10 \
    --csv "$tmp/$name.csv" --save-every 10 --save-dir "$tmp/ck" "$@" \
    >"$tmp/$name.out" 2>"$tmp/$name.err"
}

sum () {
  sha256sum "$1" | cut -d' ' -f1
}

train whole
rc=$?
check "an uninterrupted run saves step-10, step-20 and step-30" \
  '[ $rc -eq 0 ] && [ -f "$tmp/ck/step-10/manifest.json" ] && [ -f "$tmp/ck/step-30/manifest.json" ]'
check "latest names the last checkpoint" '[ "$(cat "$tmp/ck/latest")" = step-30 ]'
whole_sum=$(sum "$tmp/ck/step-30/rank-00000.safetensors")
whole_manifest=$(grep -v '"sha256"' "$tmp/ck/step-30/manifest.json")

# As if the job had died after step 10: latest names step-10 again.
printf 'step-10\n' >"$tmp/ck/latest"
train resumed --resume
rc=$?
check "the resumed run finishes" '[ $rc -eq 0 ] && grep -q "resuming after step 10" "$tmp/resumed.err"'
check "its step-30 shard is byte for byte the uninterrupted run's" \
  '[ "$(sum "$tmp/ck/step-30/rank-00000.safetensors")" = "$whole_sum" ]'
check "its step-30 manifest too (counters, scaler, schedule)" \
  '[ "$(grep -v "\"sha256\"" "$tmp/ck/step-30/manifest.json")" = "$whole_manifest" ]'
check "the same val_loss" '[ "$(cat "$tmp/resumed.out")" = "$(cat "$tmp/whole.out")" ]'

# The same in bf16 with remainder masters and int8 moments.
sed 's|"mixprec": { "seed": 1234 }|"mixprec": { "seed": 1234, "master_weights": "remainder", "optimizer_states": "int8" }|' \
  "$srcdir/examples/configs/bf16.json" >"$tmp/repr.json"
config=$tmp/repr.json
rm -rf "$tmp/ck"
train repr-whole
rc=$?
check "remainder masters and int8 state: an uninterrupted run saves step-30" \
  '[ $rc -eq 0 ] && grep -q "\"int8\"" "$tmp/ck/step-30/manifest.json" && grep -q "\"remainder\"" "$tmp/ck/step-30/manifest.json"'
whole_sum=$(sum "$tmp/ck/step-30/rank-00000.safetensors")
whole_manifest=$(grep -v '"sha256"' "$tmp/ck/step-30/manifest.json")
printf 'step-10\n' >"$tmp/ck/latest"
train repr-resumed --resume
rc=$?
check "remainder masters and int8 state: the resumed run finishes" '[ $rc -eq 0 ]'
check "remainder masters and int8 state: step-30 byte for byte the uninterrupted run's" \
  '[ "$(sum "$tmp/ck/step-30/rank-00000.safetensors")" = "$whole_sum" ] &&
   [ "$(grep -v "\"sha256\"" "$tmp/ck/step-30/manifest.json")" = "$whole_manifest" ]'
check "remainder masters and int8 state: the same val_loss" \
  '[ "$(cat "$tmp/repr-resumed.out")" = "$(cat "$tmp/repr-whole.out")" ]'

exit $failed
