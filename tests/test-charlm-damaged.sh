#!/bin/sh
# test-charlm-damaged.sh — --resume over a save folder whose newest
# checkpoint is damaged (its manifest.json removed): the run must neither
# start over at step 1 nor touch the older checkpoints. It resumes from
# the newest whole one, says so, and keeps the damaged folder aside; with
# no whole checkpoint left it refuses. Prints TAP.

. "${G_TEST_SRCDIR:-$(dirname "$0")}/charlm-common.sh"
config=$configs/fp16.json
charlm_setup test-charlm-damaged

echo "1..9"
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

# train NAME STEPS [OPTIONS...]: checkpointed every 2 steps into $tmp/ck.
train () {
  name=$1
  steps=$2
  shift 2
  "$charlm" --config "$config" --words "$words" --steps "$steps" --batch 16 --eval-every 10 \
    --csv "$tmp/$name.csv" --save-every 2 --save-dir "$tmp/ck" "$@" \
    >"$tmp/$name.out" 2>"$tmp/$name.err"
}

# The hashes of every file of the checkpoints step-2 .. step-8.
older () {
  (cd "$tmp/ck" && sha256sum step-2/* step-4/* step-6/* step-8/*)
}

sum () {
  sha256sum "$1" | cut -d' ' -f1
}

train first 10
rc=$?
check "a run of 10 steps saves step-2 .. step-10" \
  '[ $rc -eq 0 ] && [ -f "$tmp/ck/step-10/manifest.json" ] && [ "$(cat "$tmp/ck/latest")" = step-10 ]'
before=$(older)
shard10=$(sum "$tmp/ck/step-10/rank-00000.safetensors")

# The issue's reproduction: the newest checkpoint loses its manifest.
rm "$tmp/ck/step-10/manifest.json"
train resumed 20 --resume
rc=$?
check "the resumed run finishes" '[ $rc -eq 0 ]'
check "it does not start over at step 1" '! grep -q "starting at step 1" "$tmp/resumed.err"'
check "it says it falls back to step-8 and why" \
  'grep -q "WARNING: falling back to .*step-8.*(step 8)" "$tmp/resumed.err" &&
   grep -q "step-10/manifest.json does not exist" "$tmp/resumed.err" &&
   grep -q "resuming after step 8" "$tmp/resumed.err"'
check "the older checkpoints are byte for byte intact" '[ "$(older)" = "$before" ]'
check "the damaged step-10 is kept aside as step-10.damaged" \
  '[ "$(sum "$tmp/ck/step-10.damaged/rank-00000.safetensors")" = "$shard10" ]'
check "the run saved a new step-10 and latest names step-20" \
  '[ -f "$tmp/ck/step-10/manifest.json" ] &&
   [ "$(cat "$tmp/ck/latest")" = step-20 ] && [ -f "$tmp/ck/step-20/manifest.json" ]'

# No whole checkpoint left: --resume refuses and changes nothing.
rm "$tmp/ck"/step-*/manifest.json
listing=$(cd "$tmp/ck" && ls -a . step-*)
train refused 30 --resume
rc=$?
check "with no whole checkpoint --resume refuses" \
  '[ $rc -ne 0 ] && grep -q "holds no whole checkpoint" "$tmp/refused.err"'
check "and leaves the folder as it was" '[ "$(cd "$tmp/ck" && ls -a . step-*)" = "$listing" ]'

exit $failed
