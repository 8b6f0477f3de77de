#!/bin/sh
# test-inspect-plan.sh — mixprec-inspect --plan against the layout rules
# worked out here: a unit (here the one parameter) padded to a multiple of
# world * 4096 elements (whole sum-of-squares blocks per rank), the
# accumulation sharded across ranks, masters and optimizer state from
# ZeRO-1, gradients handed over per parameter from ZeRO-2, working copies
# at ZeRO-3; and DeepSpeed's formula beside it.
inspect="$MIXPREC_TOP_BUILDDIR/tools/mixprec-inspect"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
n=0
fail=0
ok () { n=$((n + 1)); if [ "$1" = 0 ]; then echo "ok $n - $2"; else echo "not ok $n - $2"; fail=1; fi; }
field () { awk -v k="$1" '$0 ~ "^  " k " " { for (i = 1; i <= NF; i++) if ($i == "bytes") { print $(i - 1); exit } }' "$2"; }

echo "1..33"

# FP32, one process, AdamW: working 4 + gradient 4 + two state slots 8.
"$inspect" --plan --params 1000 >"$tmp/fp32" 2>&1
ok $? "plan for fp32 exits 0"
# One sum-of-squares block: 8 bytes.
[ "$(field 'working copies' "$tmp/fp32")" = 4000 ] && [ "$(field gradients "$tmp/fp32")" = 4000 ] &&
  [ -z "$(field 'FP32 master weights' "$tmp/fp32")" ] &&
  [ "$(field 'optimizer state' "$tmp/fp32")" = 8000 ] &&
  [ "$(field 'gradient norm blocks' "$tmp/fp32")" = 8 ] &&
  [ "$(field total "$tmp/fp32")" = 16008 ]
ok $? "fp32 on one process: 16 bytes per parameter"

# fp16 without masters (fp16.fp16_master_weights_and_grads): the fp16
# working copy is all there is, 2 + 2 + 8 bytes per parameter.
cat >"$tmp/nm.json" <<'JSON'
{"fp16": {"enabled": true, "fp16_master_weights_and_grads": true}, "optimizer": {"type": "AdamW"}}
JSON
"$inspect" --plan --params 1000 --config "$tmp/nm.json" >"$tmp/nm" 2>&1
grep -q "fp16_no_master" "$tmp/nm" &&
  [ "$(field 'working copies' "$tmp/nm")" = 2000 ] && [ "$(field gradients "$tmp/nm")" = 2000 ] &&
  [ -z "$(field 'FP32 master weights' "$tmp/nm")" ] &&
  [ "$(field 'optimizer state' "$tmp/nm")" = 8000 ] &&
  [ "$(field total "$tmp/nm")" = 12008 ]
ok $? "fp16 without masters counts no master bytes"

# bf16, ZeRO-2, 8 ranks, 10^9 parameters: padded to 30518 * 32768.
cat >"$tmp/z2.json" <<'JSON'
{"bf16": {"enabled": true}, "zero_optimization": {"stage": 2}, "optimizer": {"type": "AdamW"}}
JSON
"$inspect" --plan --params 1000000000 --world 8 --config "$tmp/z2.json" >"$tmp/z2" 2>&1
padded=$((30518 * 32768))
part=$((padded / 8))
[ "$(field 'working copies' "$tmp/z2")" = $((2 * padded)) ] &&
  [ "$(field 'FP32 master weights' "$tmp/z2")" = $((4 * part)) ] &&
  [ "$(field 'gradient accumulation' "$tmp/z2")" = $((4 * part)) ] &&
  [ "$(field 'optimizer state' "$tmp/z2")" = $((8 * part)) ] &&
  [ -z "$(field gradients "$tmp/z2")" ]
ok $? "bf16 ZeRO-2 over 8 ranks shards masters, state and accumulation, holds no gradients"

# bf16.bf16_optimizer_states: AdamW's two moments in 2 bytes each, the
# rest as above.
cat >"$tmp/z2s.json" <<'JSON'
{"bf16": {"enabled": true, "bf16_optimizer_states": true}, "zero_optimization": {"stage": 2},
 "optimizer": {"type": "AdamW"}}
JSON
"$inspect" --plan --params 1000000000 --world 8 --config "$tmp/z2s.json" >"$tmp/z2s" 2>&1
[ "$(field 'optimizer state' "$tmp/z2s")" = $((4 * part)) ] &&
  [ "$(field 'FP32 master weights' "$tmp/z2s")" = $((4 * part)) ] &&
  [ "$(field 'working copies' "$tmp/z2s")" = $((2 * padded)) ]
ok $? "bf16 optimizer states: 4 bytes per parameter for AdamW's moments instead of 8"

# Two staging slots of 2^22 bf16 elements ((5e8 + 5e8) / 2 is more).
[ "$(field 'gradient staging' "$tmp/z2")" = $((2 * 4194304 * 2)) ]
ok $? "ZeRO-2 stages gradients in two slots of at most 2^22 elements"

# Smaller buckets: the two slots share reduce_bucket_size +
# allgather_bucket_size, (1e6 + 2e6) / 2 elements each.
cat >"$tmp/z2b.json" <<'JSON'
{"bf16": {"enabled": true}, "optimizer": {"type": "AdamW"},
 "zero_optimization": {"stage": 2, "reduce_bucket_size": 1e6, "allgather_bucket_size": 2e6}}
JSON
"$inspect" --plan --params 1000000000 --world 8 --config "$tmp/z2b.json" >"$tmp/z2b" 2>&1
[ "$(field 'gradient staging' "$tmp/z2b")" = $((2 * 1500000 * 2)) ]
ok $? "ZeRO-2 staging is bounded by reduce_bucket_size + allgather_bucket_size"

cat >"$tmp/z3.json" <<'JSON'
{"bf16": {"enabled": true}, "zero_optimization": {"stage": 3}, "optimizer": {"type": "AdamW"}}
JSON
"$inspect" --plan --params 1000000000 --world 8 --config "$tmp/z3.json" >"$tmp/z3" 2>&1
# Gathered: one prefetch bucket (5e7) held, one prefetching, bf16.
[ "$(field 'working copies' "$tmp/z3")" = $((2 * part)) ] &&
  [ "$(field 'gathered working copies' "$tmp/z3")" = 200000000 ]
ok $? "ZeRO-3 keeps only this rank's working copy and the gathered window"

# The issue's bounds for 10^9 parameters over 8 ranks, bf16 + AdamW, in
# bytes per parameter as printed: DeepSpeed's formula plus the buckets.
bpp () { awk '/^  total / { print $(NF - 1) }' "$1"; }
dsb () { awk '/^  total / { print $NF }' "$1"; }
for s in 0 1; do
  sed "s/\"stage\": 2/\"stage\": $s/" "$tmp/z2.json" >"$tmp/z$s.json"
  "$inspect" --plan --params 1000000000 --world 8 --config "$tmp/z$s.json" >"$tmp/z$s" 2>&1
done
awk -v a="$(bpp "$tmp/z0")" -v b="$(bpp "$tmp/z1")" -v c="$(bpp "$tmp/z2")" -v d="$(bpp "$tmp/z3")" \
  'BEGIN { exit !(a <= 16.5 && b <= 6.0 && c <= 4.25 && d <= 2.5) }'
ok $? "stages 0-3 within 16.5, 6.0, 4.25 and 2.5 bytes per parameter"
[ "$(dsb "$tmp/z0")" = 16.00 ] && [ "$(dsb "$tmp/z1")" = 5.50 ] && [ "$(dsb "$tmp/z2")" = 3.75 ] &&
  [ "$(dsb "$tmp/z3")" = 2.00 ]
ok $? "DeepSpeed's formula: 16, 5.5, 3.75 and 2 bytes per parameter"

# ZeRO-Offload on a device: the masters (4) and AdamW's state (8) in host
# memory with two transfer buffers of bf16 gradients and working copies
# (2 * (2 + 2)), pinned as pin_memory asks (the cuda plugin has pinned
# memory); the working copy and gradient (2 + 2) and one norm block
# (8 bytes) on the device. The plan shows both sides.
cat >"$tmp/off.json" <<'JSON'
{"bf16": {"enabled": true}, "optimizer": {"type": "AdamW"}, "mixprec": {"device": "cuda"},
 "zero_optimization": {"offload_optimizer": {"device": "cpu", "pin_memory": true}}}
JSON
"$inspect" --plan --params 1000 --config "$tmp/off.json" >"$tmp/off" 2>&1
grep -q "optimizer offloaded" "$tmp/off" &&
  [ "$(field 'working copies' "$tmp/off")" = 2000 ] && [ "$(field gradients "$tmp/off")" = 2000 ] &&
  [ "$(field 'FP32 master weights \\(host\\)' "$tmp/off")" = 4000 ] &&
  [ "$(field 'optimizer state \\(host\\)' "$tmp/off")" = 8000 ] &&
  [ "$(field 'offload staging, pinned \\(host\\)' "$tmp/off")" = 8000 ] &&
  ! grep -Eq "^  (FP32 master weights|optimizer state) +[0-9]" "$tmp/off" &&
  [ "$(field total "$tmp/off")" = 24008 ] &&
  [ "$(field '  on the device' "$tmp/off")" = 4008 ] &&
  [ "$(field '  in host memory' "$tmp/off")" = 20000 ]
ok $? "offload_optimizer cpu on a device: masters and state counted in host memory"

# On the cpu device there is nothing to offload: the plain plan.
sed 's/"cuda"/"cpu"/' "$tmp/off.json" >"$tmp/offcpu.json"
"$inspect" --plan --params 1000 --config "$tmp/offcpu.json" >"$tmp/offcpu" 2>&1
! grep -q "(host)" "$tmp/offcpu" && ! grep -q "^    in host memory" "$tmp/offcpu" &&
  [ "$(field 'FP32 master weights' "$tmp/offcpu")" = 4000 ]
ok $? "offload_optimizer cpu on the cpu device changes nothing"

# ZeRO-Offload across 4 ranks: a million parameters are one unit, padded
# to 4 * 4096 (1015808, 253952 a rank). Each rank's masters (4) and state
# (8) of its partition in host memory, its transfer buffers sized by its
# partition (two of 253952 FP32 accumulated gradients and bf16 working
# copies: 2 * (4 + 2)). DeepSpeed's split (ZeRO-Offload,
# estimate_zero2/3_model_states_mem_needs without the buffer factor):
# device 2 bytes per parameter (ZeRO-3: 2/4), host (4 + 8 + 4 FP32
# gradients) / 4.
sed 's/"zero_optimization": {/"zero_optimization": {"stage": 2, /' "$tmp/off.json" >"$tmp/offz2.json"
sed 's/"stage": 2/"stage": 3/' "$tmp/offz2.json" >"$tmp/offz3.json"
dsrow () { awk -v k="$1" '$0 ~ "^  " k " " { print $NF; exit }' "$2"; }
"$inspect" --plan --params 1000000 --world 4 --config "$tmp/offz2.json" >"$tmp/off2" 2>&1 &&
"$inspect" --plan --params 1000000 --world 4 --config "$tmp/offz3.json" >"$tmp/off3" 2>&1 &&
  grep -q "optimizer offloaded: .*this rank's partition" "$tmp/off2" &&
  [ "$(field 'FP32 master weights \\(host\\)' "$tmp/off2")" = 1015808 ] &&
  [ "$(field 'optimizer state \\(host\\)' "$tmp/off2")" = 2031616 ] &&
  [ "$(field 'offload staging, pinned \\(host\\)' "$tmp/off2")" = 3047424 ] &&
  [ "$(field 'working copies' "$tmp/off2")" = 2031616 ] &&
  [ "$(field '  in host memory' "$tmp/off2")" = 6094848 ] &&
  [ "$(dsrow '  on the device' "$tmp/off2")" = 2.00 ] &&
  [ "$(dsrow '  in host memory' "$tmp/off2")" = 4.00 ] &&
  [ "$(field 'FP32 master weights \\(host\\)' "$tmp/off3")" = 1015808 ] &&
  [ "$(dsrow '  on the device' "$tmp/off3")" = 0.50 ] &&
  [ "$(dsrow '  in host memory' "$tmp/off3")" = 4.00 ]
ok $? "offload on 4 ranks: each rank's partition in host memory, beside DeepSpeed's split"

# offload_param under ZeRO-3: each rank's bf16 working partition (253952
# elements, 2 bytes) in pinned host memory instead of the device's;
# DeepSpeed's split (estimate_zero3_model_states_mem_needs with
# cpu_offload_params): nothing on the device, (2 + 4 + 8 + 4) / 4 = 4.5
# bytes per parameter in host memory.
sed 's/"offload_optimizer": {/"offload_param": {"device": "cpu", "pin_memory": true}, "offload_optimizer": {/' \
  "$tmp/offz3.json" >"$tmp/offp3.json"
"$inspect" --plan --params 1000000 --world 4 --config "$tmp/offp3.json" >"$tmp/offp3" 2>&1 &&
  grep -q "parameters offloaded" "$tmp/offp3" &&
  [ "$(field 'working copies, pinned \\(host\\)' "$tmp/offp3")" = 507904 ] &&
  [ -z "$(field 'working copies' "$tmp/offp3")" ] &&
  [ "$(dsrow '  on the device' "$tmp/offp3")" = 0.00 ] &&
  [ "$(dsrow '  in host memory' "$tmp/offp3")" = 4.50 ] &&
  ! grep -q "parameters offloaded" "$tmp/off3"
ok $? "offload_param on 4 ranks under ZeRO-3: the working partition in host memory"

"$inspect" --plan --world 2 >"$tmp/bad" 2>&1
[ $? = 2 ] && grep -q -- "--params" "$tmp/bad"
ok $? "--plan without --params is a usage error"

# Issue 15, item 8: counts as people write them, and no option ignored.
"$inspect" --plan --params 1000000000 --world 8 --config "$tmp/z2.json" >"$tmp/digits" 2>&1 &&
  "$inspect" --plan --params 1e9 --world 8 --config "$tmp/z2.json" >"$tmp/exp" 2>&1 &&
  cmp -s "$tmp/digits" "$tmp/exp"
ok $? "--params 1e9 is the plan of --params 1000000000"
for bad in 1.5 -3 0 abc 1e400; do
  "$inspect" --plan --params "$bad" >"$tmp/bad" 2>&1
  [ $? = 2 ] && grep -q -- "--params: must be a whole number" "$tmp/bad" || break
done
ok $? "--params 1.5, -3, 0, abc and 1e400 are usage errors naming the rule"
"$inspect" --plan --params 1e9 --world 0 >"$tmp/bad" 2>&1
[ $? = 2 ] && grep -q -- "--world: must be a whole number from 1" "$tmp/bad"
ok $? "--world 0 is a usage error"
for opt in "--params 1e9" "--world 8" "--gathered 5"; do
  # shellcheck disable=SC2086
  "$inspect" $opt >"$tmp/bad" 2>&1
  [ $? = 2 ] && grep -q -- "${opt%% *} only applies to --plan" "$tmp/bad" || break
done
ok $? "--params, --world and --gathered without --plan are usage errors, not ignored"
# Issue 26: remainder masters (2 bytes beside the bf16 working copy) and
# int8 moments with an FP32 scale per 256 elements: 2 + 2 + 2 + 2 + 2 *
# 4 / 256 bytes per parameter, against DeepSpeed's 16.
cat >"$tmp/r8.json" <<'JSON'
{"bf16": {"enabled": true}, "optimizer": {"type": "AdamW"},
 "mixprec": {"master_weights": "remainder",
             "optimizer_states": {"exp_avg": "int8", "exp_avg_sq": "int8", "block_size": 256}}}
JSON
per_param () { awk '$1 == "total" { t = $2 } END { print t / 1e9 }' "$1"; }
"$inspect" --plan --params 1000000000 --config "$tmp/r8.json" >"$tmp/r8" 2>&1 &&
  [ "$(field 'master remainders' "$tmp/r8")" = 2000000000 ] &&
  [ "$(field 'optimizer state' "$tmp/r8")" = 2000000000 ] &&
  [ "$(field 'optimizer state scales' "$tmp/r8")" = $((2 * 3906250 * 4)) ] &&
  [ -z "$(field 'FP32 master weights' "$tmp/r8")" ] &&
  awk '$1 == "total" { exit !($2 <= 8.6e9 && $NF == "16.00") }' "$tmp/r8"
ok $? "remainder masters and int8 moments: at most 8.6 bytes per parameter on one process, DeepSpeed 16"

# int4 moments (blocks of 128 by default): half a byte per slot.
"$inspect" --plan --params 1000000000 --config "$tmp/r8.json" \
  --set mixprec.optimizer_states='"int4"' >"$tmp/r4" 2>&1 &&
  [ "$(field 'optimizer state' "$tmp/r4")" = 1000000000 ] &&
  [ "$(field 'optimizer state scales' "$tmp/r4")" = $((2 * 7812500 * 4)) ] &&
  [ "$(field total "$tmp/r4")" -lt "$(field total "$tmp/r8")" ]
ok $? "int4 moments: lower still"

# ZeRO-3 on 8 ranks: every buffer sharded. The FP32 accumulation of the
# gradient shard costs 0.5 bytes per parameter; accumulating in bf16
# brings the plan under 1.3.
"$inspect" --plan --params 1000000000 --world 8 --config "$tmp/r8.json" \
  --set zero_optimization.stage=3 >"$tmp/r8z3" 2>&1 &&
  "$inspect" --plan --params 1000000000 --world 8 --config "$tmp/r8.json" \
  --set zero_optimization.stage=3 --set data_types.grad_accum_dtype='"bf16"' >"$tmp/r8z3b" 2>&1 &&
  [ "$(field 'master remainders' "$tmp/r8z3")" = $((2 * 1000013824 / 8)) ] &&
  [ "$(field 'gradient accumulation' "$tmp/r8z3")" = $((4 * 1000013824 / 8)) ] &&
  [ "$(field 'gradient accumulation' "$tmp/r8z3b")" = $((2 * 1000013824 / 8)) ] &&
  awk '$1 == "total" { exit !($2 <= 1.5e9 && $NF == "2.00") }' "$tmp/r8z3" &&
  awk '$1 == "total" { exit !($2 <= 1.3e9) }' "$tmp/r8z3b"
ok $? "ZeRO-3 on 8 ranks: under 1.5 bytes per parameter, under 1.3 with bf16 accumulation (DeepSpeed 2)"

# Kahan compensation is its own buffer, in the masters' column.
"$inspect" --plan --params 1000 --config "$tmp/r8.json" --set mixprec.master_weights='"kahan"' >"$tmp/k" 2>&1 &&
  [ "$(field 'Kahan compensation' "$tmp/k")" = 2000 ] && [ -z "$(field 'master remainders' "$tmp/k")" ]
ok $? "Kahan compensation: 2 bytes per parameter"

# ZeRO++ LoCo: a float16 error per element of the padded model on every
# rank (1000 elements padded to 4 * 4096), counted as gradient staging;
# qgZ alone adds nothing that stays.
cat >"$tmp/qgz.json" <<'JSON'
{"bf16": {"enabled": true}, "zero_optimization": {"stage": 3, "zero_quantized_gradients": true}}
JSON
"$inspect" --plan --params 1000 --world 4 --config "$tmp/qgz.json" >"$tmp/qgz" 2>&1 &&
  "$inspect" --plan --params 1000 --world 4 --config "$tmp/qgz.json" \
  --set zero_optimization.zeropp_loco_param='{"err_beta": 0.8}' >"$tmp/loco" 2>&1 &&
  [ $(( $(field 'gradient staging' "$tmp/loco") - $(field 'gradient staging' "$tmp/qgz") )) = $((2 * 16384)) ]
ok $? "LoCo: 2 bytes per padded element of the model on every rank"
# ---- bytes on the wire per step per rank (mixprec_comm_bytes_plan_new)
# The row of @1 in @2: "bytes" ours, then the numbers after "intra",
# "inter" and "DeepSpeed" ("(intra" and "inter" after it for DeepSpeed's).
wire () {
  awk -v k="$1" -v w="$3" '$0 ~ "^  " k " " {
    for (i = 1; i <= NF; i++) {
      if (w == "bytes" && $i == "bytes") { print $(i - 1); exit }
      if (w == "intra" && $i == "intra") { print $(i + 1); exit }
      if (w == "inter" && $i == "inter") { print $(i + 1); exit }
      if (w == "ds" && $i == "DeepSpeed") { print $(i + 1); exit }
      if (w == "ds_inter" && $i == "inter" && seen) { v = $(i + 1); sub(/\)/, "", v); print v; exit }
      if ($i == "DeepSpeed") seen = 1
    } }' "$2"
}
# DeepSpeed's block count for qwZ over a slice of $1 elements.
qwz_groups () {
  n=$1; g=$(( (n + 7999) / 8000 ))
  while [ $((n % (8 * g))) != 0 ]; do g=$((g + 1)); done
  while [ $((n % (16 * g))) = 0 ] && [ "$n" -gt $((8000 * g)) ]; do g=$((g * 2)); done
  echo $g
}

# bf16 ZeRO-3, 10^6 parameters on 3 ranks of one host: padded to 82 *
# 12288 elements, slices of 335872. Forward and backward gather 2 slices
# each to the 2 peers, the gradients one reduce-scatter, norm blocks of
# 4096 as doubles; DeepSpeed: 2 x 2/3 Psi x 2 bytes and 2/3 Psi x 2.
cat >"$tmp/w3.json" <<'JSON'
{"bf16": {"enabled": true}, "zero_optimization": {"stage": 3}}
JSON
slice=335872
"$inspect" --plan --params 1000000 --world 3 --config "$tmp/w3.json" >"$tmp/w3" 2>&1 &&
  [ "$(wire 'all-gather' "$tmp/w3" bytes)" = $((2 * 2 * slice * 2)) ] &&
  [ "$(wire 'reduce-scatter' "$tmp/w3" bytes)" = $((2 * slice * 2)) ] &&
  [ "$(wire 'scalars' "$tmp/w3" bytes)" = $((2 * 82 * 8)) ] &&
  [ "$(wire 'all-gather' "$tmp/w3" inter)" = 0 ] &&
  [ "$(wire 'all-gather' "$tmp/w3" ds)" = $((2 * (2 * 2000000 / 3))) ] &&
  [ "$(wire 'reduce-scatter' "$tmp/w3" ds)" = $((2 * 2000000 / 3)) ]
ok $? "wire: bf16 ZeRO-3 on 3 ranks, two gathers and one reduce-scatter per step, beside DeepSpeed's"

# The same ranks on 3 hosts (--ranks-per-host 1): every byte crosses.
"$inspect" --plan --params 1000000 --world 3 --ranks-per-host 1 --config "$tmp/w3.json" >"$tmp/w3h" 2>&1 &&
  [ "$(wire 'wire total' "$tmp/w3h" intra)" = 0 ] &&
  [ "$(wire 'wire total' "$tmp/w3h" inter)" = "$(wire 'wire total' "$tmp/w3" bytes)" ] &&
  [ "$(wire 'all-gather' "$tmp/w3h" ds_inter)" = "$(wire 'all-gather' "$tmp/w3h" ds)" ]
ok $? "wire: one rank per host sends everything across hosts"

# 6 ranks on 3 hosts: 1 of the 5 peers on the own host, so a fifth of
# the reductions' bytes stays on the host; the gathers run in two levels,
# a slice to the rank of the same place on each of the 2 other hosts,
# then the 3 slices it holds to the other rank of the host: 3 of 5.
"$inspect" --plan --params 1000000 --world 6 --hosts 3 --config "$tmp/w3.json" >"$tmp/w6" 2>&1 &&
  a=$(wire 'all-gather' "$tmp/w6" bytes) && r=$(wire 'reduce-scatter' "$tmp/w6" bytes) &&
  [ "$(wire 'all-gather' "$tmp/w6" intra)" = $((a / 5 * 3)) ] &&
  [ "$(wire 'all-gather' "$tmp/w6" inter)" = $((a / 5 * 2)) ] &&
  [ "$(wire 'reduce-scatter' "$tmp/w6" intra)" = $((r / 5)) ] &&
  [ "$(wire 'reduce-scatter' "$tmp/w6" inter)" = $((r / 5 * 4)) ]
ok $? "wire: 6 ranks on 3 hosts, a fifth of the reductions and three fifths of the gathers on the host"

# qwZ + qgZ: int8 codes and DeepSpeed's FP32 block scales per gather,
# int4 blocks of 512 with an FP32 scale (260 bytes) per reduction;
# DeepSpeed's figures: 1 byte and half a byte per element.
g=$(qwz_groups $slice)
"$inspect" --plan --params 1000000 --world 3 --config "$tmp/w3.json" \
  --set zero_optimization.zero_quantized_weights=true \
  --set zero_optimization.zero_quantized_gradients=true >"$tmp/w3q" 2>&1 &&
  [ "$(wire 'all-gather' "$tmp/w3q" bytes)" = $((2 * 2 * (slice + 4 * g))) ] &&
  [ "$(wire 'reduce-scatter' "$tmp/w3q" bytes)" = $((2 * (slice / 512) * 260)) ] &&
  [ "$(wire 'all-gather' "$tmp/w3q" ds)" = $((2 * (1000000 * 2 / 3))) ] &&
  [ "$(wire 'reduce-scatter' "$tmp/w3q" ds)" = $((1000000 / 3)) ]
ok $? "wire: qwZ and qgZ cut the gathers to int8 and the reductions to int4, with their scales"

# hpZ, a group per host (6 ranks on 2 hosts, groups of 3): the forward
# gathers int8 over the world in two levels (its chunk to the other
# host's rank of its place, then the 2 chunks it holds to the 2 other
# ranks of the host), the backward gathers inside the group, 1/3 of the
# unit (padded to 6 slices of 200704) in bf16 to each of the 2 other
# members, none across hosts; each rank keeps that third as its
# secondary partition. DeepSpeed's figures: its backward gather stays on
# the host too, in int8; its forward is (W - R) / W across hosts.
slice=200704
g=$(qwz_groups $slice)
"$inspect" --plan --params 1200000 --world 6 --hosts 2 --config "$tmp/w3.json" \
  --set zero_optimization.zero_quantized_weights=true \
  --set zero_optimization.zero_hpz_partition_size=3 >"$tmp/hpz" 2>&1 &&
  [ "$(wire 'working copies' "$tmp/hpz" bytes)" = $((slice * 2)) ] &&
  [ "$(wire 'hpZ secondary working copies' "$tmp/hpz" bytes)" = $((6 * slice / 3 * 2)) ] &&
  [ "$(wire 'all-gather' "$tmp/hpz" inter)" = $((slice + 4 * g)) ] &&
  [ "$(wire 'all-gather' "$tmp/hpz" intra)" = $((4 * (slice + 4 * g) + 2 * (6 * slice / 3 * 2))) ] &&
  [ "$(wire 'all-gather' "$tmp/hpz" ds)" = $((1200000 * 2 / 6 + 1200000 * 3 / 6 + 1200000 * 2 / 3)) ] &&
  [ "$(wire 'all-gather' "$tmp/hpz" ds_inter)" = $((1200000 * 3 / 6)) ]
ok $? "wire: hpZ keeps the backward gather inside the host, ours and DeepSpeed's"

# qgZ over 2 hosts of 3 ranks runs in two levels: per window the runs
# for both hosts to each of the 2 other ranks of the host (4 runs), then
# one run across; a run of 200704 elements is 392 int4 blocks of 260
# bytes. DeepSpeed's figures: (R - 1) / R of half a byte per element
# inside the host, (W - R) / (W R) across.
"$inspect" --plan --params 1200000 --world 6 --hosts 2 --config "$tmp/w3.json" \
  --set zero_optimization.zero_quantized_gradients=true >"$tmp/qgz2" 2>&1 &&
  [ "$(wire 'reduce-scatter' "$tmp/qgz2" intra)" = $((4 * 392 * 260)) ] &&
  [ "$(wire 'reduce-scatter' "$tmp/qgz2" inter)" = $((392 * 260)) ] &&
  [ "$(wire 'reduce-scatter' "$tmp/qgz2" ds)" = $((1200000 / 2 * 2 / 3 + 1200000 / 2 * 3 / 18)) ] &&
  [ "$(wire 'reduce-scatter' "$tmp/qgz2" ds_inter)" = $((1200000 / 2 * 3 / 18)) ]
ok $? "wire: qgZ over 2 hosts of 3 in two levels, a partial sum per host across hosts, ours and DeepSpeed's"

# Groups that do not divide the world are not planned, as the engine
# refuses them.
"$inspect" --plan --params 1200000 --world 6 --config "$tmp/w3.json" \
  --set zero_optimization.zero_hpz_partition_size=4 >"$tmp/hpz4" 2>&1
grep -q "not planned: zero_optimization.zero_hpz_partition_size: 4: the groups of the secondary partition must divide the world of 6 ranks" "$tmp/hpz4"
ok $? "wire: hpZ groups of 4 in a world of 6 are not planned"

# Without ZeRO (bf16, 4 ranks): the gradients are reduce-scattered in
# bf16 and gathered back in FP32, (W-1) slice x (2 + 4), against
# DeepSpeed's all-reduce, 2 (W-1)/W Psi x 2; no weights move.
"$inspect" --plan --params 1000000 --world 4 --set bf16.enabled=true >"$tmp/z0" 2>&1 &&
  [ "$(wire 'reduce-scatter' "$tmp/z0" bytes)" = $((3 * 253952 * 6)) ] &&
  [ "$(wire 'reduce-scatter' "$tmp/z0" ds)" = 3000000 ] &&
  [ "$(wire 'all-gather' "$tmp/z0" bytes)" = 0 ]
ok $? "wire: ZeRO-0 reduces and gathers back the gradients, DeepSpeed all-reduces them"

# Bad host counts are refused.
"$inspect" --plan --params 1000 --world 6 --hosts 4 >"$tmp/bad" 2>&1
[ $? = 2 ] && grep -q "does not spread" "$tmp/bad"
ok $? "--hosts must spread the ranks equally"
exit $fail
