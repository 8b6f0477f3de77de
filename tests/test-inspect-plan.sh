#!/bin/sh
# test-inspect-plan.sh — mixprec-inspect --plan against the layout rules
# worked out here: parameters padded to a multiple of world * 4096 elements
# (whole sum-of-squares blocks per rank), masters and optimizer state
# sharded from ZeRO-1, accumulation from ZeRO-2, working copies at ZeRO-3.
inspect="$MIXPREC_TOP_BUILDDIR/tools/mixprec-inspect"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
n=0
fail=0
ok () { n=$((n + 1)); if [ "$1" = 0 ]; then echo "ok $n - $2"; else echo "not ok $n - $2"; fail=1; fi; }
field () { awk -v k="$1" '$0 ~ "^  " k " " { for (i = 1; i <= NF; i++) if ($i == "bytes") { print $(i - 1); exit } }' "$2"; }

echo "1..5"

# FP32, one process, AdamW: working 4 + gradient 4 + two state slots 8.
"$inspect" --plan --params 1000 >"$tmp/fp32" 2>&1
ok $? "plan for fp32 exits 0"
[ "$(field working "$tmp/fp32")" = 4000 ] && [ "$(field gradients "$tmp/fp32")" = 4000 ] &&
  [ "$(field masters "$tmp/fp32")" = 0 ] && [ "$(field 'optimizer state' "$tmp/fp32")" = 8000 ] &&
  [ "$(field total "$tmp/fp32")" = 16000 ]
ok $? "fp32 on one process: 16 bytes per parameter"

# bf16, ZeRO-2, 8 ranks, 10^9 parameters: padded to 30518 * 32768.
cat >"$tmp/z2.json" <<'JSON'
{"bf16": {"enabled": true}, "zero_optimization": {"stage": 2}, "optimizer": {"type": "AdamW"}}
JSON
"$inspect" --plan --params 1000000000 --world 8 --config "$tmp/z2.json" >"$tmp/z2" 2>&1
padded=$((30518 * 32768))
part=$((padded / 8))
[ "$(field working "$tmp/z2")" = $((2 * padded)) ] && [ "$(field masters "$tmp/z2")" = $((4 * part)) ] &&
  [ "$(field accumulation "$tmp/z2")" = $((4 * part)) ] &&
  [ "$(field 'optimizer state' "$tmp/z2")" = $((8 * part)) ]
ok $? "bf16 ZeRO-2 over 8 ranks shards masters, state and accumulation"

cat >"$tmp/z3.json" <<'JSON'
{"bf16": {"enabled": true}, "zero_optimization": {"stage": 3}, "optimizer": {"type": "AdamW"}}
JSON
"$inspect" --plan --params 1000000000 --world 8 --config "$tmp/z3.json" >"$tmp/z3" 2>&1
[ "$(field working "$tmp/z3")" = $((2 * part)) ]
ok $? "ZeRO-3 keeps only this rank's working copy"

"$inspect" --plan --world 2 >"$tmp/bad" 2>&1
[ $? = 2 ] && grep -q -- "--params" "$tmp/bad"
ok $? "--plan without --params is a usage error"
exit $fail
