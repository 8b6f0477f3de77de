#!/bin/sh
# test-inspect-config.sh — `mixprec-inspect --config FILE`: a valid file
# prints the resolved configuration and exits 0; an invalid one prints every
# problem on stderr and exits 1. Prints TAP.

top=${MIXPREC_TOP_BUILDDIR:-.}
srcdir=${G_TEST_SRCDIR:-$(dirname "$0")}
inspect="$top/tools/mixprec-inspect"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/mixprec-inspect-config-XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT

n=0
failed=0

ok () {
  n=$((n + 1))
  echo "ok $n - $1"
}

not_ok () {
  n=$((n + 1))
  failed=1
  echo "not ok $n - $1"
  sed 's/^/# /' "$tmp/out" "$tmp/err"
}

check () {
  if eval "$2"; then ok "$1"; else not_ok "$1"; fi
}

# run EXPECTED-STATUS ARGS...: output in $tmp/out and $tmp/err
run () {
  expected=$1
  shift
  "$inspect" "$@" >"$tmp/out" 2>"$tmp/err"
  [ $? -eq "$expected" ]
}

has () {
  grep -F -q -e "$2" "$1"
}

echo "1..21"

check "a valid ZeRO-2 fp16 file exits 0 and prints resolved keys" \
  'run 0 --config "$srcdir/configs/zero2-fp16-warmup.json" &&
   has "$tmp/out" "\"precision_mode\": \"fp16\"" &&
   has "$tmp/out" "\"grad_accum_dtype\": \"fp16\"" &&
   has "$tmp/out" "\"reduce_bucket_size\": 200000000"'

check "defaults DeepSpeed leaves implicit are printed" \
  'has "$tmp/out" "\"hysteresis\": 2" && has "$tmp/out" "\"semantics\": \"deepspeed\""'

check "DeepSpeed-only sections are warnings on stderr, not errors" \
  'has "$tmp/err" "warning: " && has "$tmp/err" "wall_clock_breakdown" &&
   ! has "$tmp/err" "error: "'

check "the printed configuration loads again and prints the same" \
  'cp "$tmp/out" "$tmp/resolved.json" &&
   run 0 --config "$tmp/resolved.json" && cmp -s "$tmp/out" "$tmp/resolved.json" &&
   [ ! -s "$tmp/err" ]'

cat >"$tmp/bad.json" <<'JSON'
{
  "fp16": {"enabled": true, "loss_scale_window": -3, "loss_scale_windw": 5},
  "bf16": {"enabled": true},
  "zero_optimization": {"stage": 5},
  "gradient_clipping": -1,
  "wandb": {"enabled": true}
}
JSON

check "an invalid file exits 1 with nothing on stdout" \
  'run 1 --config "$tmp/bad.json" && [ ! -s "$tmp/out" ]'

check "every problem is printed, each with the file and the JSON path" \
  'has "$tmp/err" "bad.json: fp16.loss_scale_window: must be a positive integer, got -3" &&
   has "$tmp/err" "bad.json: fp16.loss_scale_windw: unknown key in fp16 (did you mean loss_scale_window?)" &&
   has "$tmp/err" "bad.json: bf16.enabled: cannot be true while fp16.enabled is also true" &&
   has "$tmp/err" "bad.json: zero_optimization.stage: must be an integer from 0 to 3, got 5" &&
   has "$tmp/err" "bad.json: gradient_clipping: " &&
   [ "$(grep -c "^error: " "$tmp/err")" -eq 5 ]'

printf '{"fp16": {"enabled": tru' >"$tmp/truncated.json"
check "malformed JSON is reported with its line and column" \
  'run 1 --config "$tmp/truncated.json" && has "$tmp/err" "line 1, column 22"'

check "a missing file exits 1" \
  'run 1 --config "$tmp/no-such-file.json" && has "$tmp/err" "no-such-file.json"'

# --- "auto", --set, leniency

check "\"auto\" resolves to the Trainer's defaults, each reported on stderr" \
  'run 0 --config "$srcdir/configs/hf-trainer-auto.json" &&
   has "$tmp/err" "warning: $srcdir/configs/hf-trainer-auto.json: optimizer.params.lr: \"auto\" -> 5e-05 (the Trainer" &&
   has "$tmp/err" "zero_optimization.reduce_bucket_size: \"auto\" -> 500000000 (DeepSpeed" &&
   [ "$(grep -c "\"auto\" -> " "$tmp/err")" -eq 16 ] &&
   has "$tmp/out" "\"lr\": 5e-05" && has "$tmp/out" "\"train_micro_batch_size_per_gpu\": 8"'

check "--set overrides values and feeds model.hidden_size to the ZeRO sizes" \
  'run 0 --config "$srcdir/configs/hf-trainer-auto.json" --set model.hidden_size=1024 \
     --set optimizer.params.lr=3e-4 --set bf16.enabled=true &&
   has "$tmp/out" "\"reduce_bucket_size\": 1048576" &&
   has "$tmp/out" "\"stage3_param_persistence_threshold\": 10240" &&
   has "$tmp/out" "\"lr\": 0.0003" && has "$tmp/out" "\"warmup_max_lr\": 0.0003" &&
   has "$tmp/out" "\"precision_mode\": \"bf16\"" &&
   ! has "$tmp/err" "optimizer.params.lr: \"auto\""'

check "an \"auto\" nothing resolves names the --set to pass" \
  'run 1 --config "$srcdir/configs/real/accelerate-zero_stage2_config.json" &&
   has "$tmp/err" "scheduler.params.total_num_steps: must be an actual value, got \"auto\"" &&
   has "$tmp/err" "--set scheduler.params.total_num_steps=VALUE" &&
   run 0 --config "$srcdir/configs/real/accelerate-zero_stage2_config.json" \
     --set scheduler.params.total_num_steps=1000 &&
   has "$tmp/out" "\"total_num_steps\": 1000"'

check "an unknown top-level key is a warning, as in DeepSpeed" \
  'run 0 --config "$srcdir/configs/real/dsexamples-imagenet_ds_fp16_z1_config.json" &&
   has "$tmp/err" "warning: $srcdir/configs/real/dsexamples-imagenet_ds_fp16_z1_config.json: cuda_visible_devices: unknown key in the top level" &&
   has "$tmp/out" "\"stage\": 1"'

check "mixprec.strict=true turns the warnings into errors" \
  'run 1 --config "$srcdir/configs/real/dsexamples-imagenet_ds_fp16_z1_config.json" --set mixprec.strict=true &&
   has "$tmp/err" "error: $srcdir/configs/real/dsexamples-imagenet_ds_fp16_z1_config.json: cuda_visible_devices: " &&
   has "$tmp/err" "(refused: mixprec.strict is true)" && [ ! -s "$tmp/out" ]'

check "--set with a path that names no setting is an error" \
  'run 1 --config "$srcdir/configs/zero2-fp16-warmup.json" --set cuda_visible_devices=0 &&
   has "$tmp/err" "cuda_visible_devices: set by an override but unknown" &&
   run 1 --config "$srcdir/configs/zero2-fp16-warmup.json" --set fp16.enabled.x=1 &&
   has "$tmp/err" "fp16.enabled.x: cannot be set"'

check "--set without = or without --config is refused" \
  'run 1 --config "$srcdir/configs/zero2-fp16-warmup.json" --set fp16.enabled &&
   has "$tmp/err" "fp16.enabled: not an override; write path=VALUE" &&
   run 2 --set fp16.enabled=true'

check "--plan reads --set too" \
  'run 0 --plan --params 1000000 --world 2 --set zero_optimization.stage=2 --set bf16.enabled=true &&
   has "$tmp/out" "2 ranks, bf16, ZeRO stage 2"'

check "the optimizer and the schedule are checked as the engine checks them, every error at once" \
  'printf "%s\n" "{\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"amsgrad\": true," \
     " \"eps\": -1}}, \"scheduler\": {\"type\": \"WarmupDecayLR\"}}" >"$tmp/opt.json" &&
   run 1 --config "$tmp/opt.json" &&
   has "$tmp/err" "error: $tmp/opt.json: optimizer.params.amsgrad: must be false, got true" &&
   has "$tmp/err" "error: $tmp/opt.json: optimizer.params.eps: must be between" &&
   has "$tmp/err" "error: $tmp/opt.json: scheduler.params.total_num_steps: WarmupDecayLR needs it" &&
   has "$tmp/err" "3 problems; nothing was loaded"'

check "without an optimizer section the resolved output shows the AdamW the engine runs" \
  'printf "{}\n" >"$tmp/empty.json" && run 0 --config "$tmp/empty.json" &&
   has "$tmp/out" "\"type\": \"AdamW\"" && has "$tmp/out" "\"lr\": 0.001" &&
   MIXPREC_PLUGIN_PATH=$tmp/none run 0 --config "$tmp/empty.json" &&
   has "$tmp/err" "optimizer: absent, so the engine runs AdamW" &&
   has "$tmp/out" "\"optimizer\": null"'

check "an Apex amp section resolves onto fp16 and the apex scaler" \
  'printf "%s\n" "{\"amp\": {\"enabled\": true, \"opt_level\": \"O2\"}}" >"$tmp/amp.json" &&
   run 0 --config "$tmp/amp.json" &&
   has "$tmp/out" "\"precision_mode\": \"fp16\"" && has "$tmp/out" "\"semantics\": \"apex\"" &&
   has "$tmp/out" "\"max_scale\": 16777216.0" && has "$tmp/out" "\"BatchNorm2d\""'

check "Apex O3 resolves onto fp16 without masters at a static scale of 1" \
  'printf "%s\n" "{\"amp\": {\"enabled\": true, \"opt_level\": \"O3\"}}" >"$tmp/o3.json" &&
   run 0 --config "$tmp/o3.json" &&
   has "$tmp/out" "\"precision_mode\": \"fp16_no_master\"" &&
   has "$tmp/out" "\"fp16_master_weights_and_grads\": true" &&
   has "$tmp/out" "\"loss_scale\": 1.0" && ! has "$tmp/out" "\"BatchNorm2d\""'

check "the resolved fp16 no-master configuration loads again and prints the same" \
  'cp "$tmp/out" "$tmp/o3-resolved.json" && run 0 --config "$tmp/o3-resolved.json" &&
   cmp -s "$tmp/out" "$tmp/o3-resolved.json"'

exit $failed
