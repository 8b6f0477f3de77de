#!/bin/sh
# test-charlm.sh — the example trainer (examples/charlm) in short runs:
# fp32, bf16 and fp16 with dynamic loss scaling, from the same seed, end
# within 2% of each other; fp16 with a static loss scale of 1 loses its
# small gradients to underflow and ends clearly worse. Prints TAP.

. "${G_TEST_SRCDIR:-$(dirname "$0")}/charlm-common.sh"
charlm_setup test-charlm
run_options="--steps 300 --batch 64 --eval-every 100 --quiet"

echo "1..11"

# The last CSV row's grad_underflow column.
underflow () {
  awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "grad_underflow") col = i }
           END { print $col }' "$tmp/$1.csv"
}

# 1: the trainer runs and ends with a finite val_loss line.
run fp32 fp32.json
fp32=$(val_loss fp32)
if [ "$(cat "$tmp/fp32.rc")" = 0 ] && [ -n "$fp32" ]; then
  ok "fp32 run exits 0 and ends with val_loss=$fp32"
else
  not_ok "fp32 run exits 0 and ends with val_loss=<number>"
  sed 's/^/# /' "$tmp/fp32.out" "$tmp/fp32.err"
fi

# 2: the CSV has its header and one row per evaluation (steps 100, 200, 300).
if [ "$(head -n 1 "$tmp/fp32.csv")" = "step,train_loss,val_loss,loss_scale,grad_norm,skipped_steps,lr,tokens_per_s,grad_underflow" ] &&
   [ "$(cut -d, -f1 "$tmp/fp32.csv" | tail -n +2 | tr '\n' ' ')" = "100 200 300 " ]; then
  ok "CSV has the header and rows for steps 100, 200, 300"
else
  not_ok "CSV has the header and rows for steps 100, 200, 300"
  sed 's/^/# /' "$tmp/fp32.csv"
fi

# 3: it learned something: uniform guessing over 27 tokens costs
# ln 27 = 3.296 nats; 300 steps reach about 2.37.
check "fp32 val_loss $fp32 is well below ln(27) = 3.296" "a != \"\" && a < 2.6" "$fp32"

# 4, 5: same seed, same batches; bf16 and fp16 (dynamic) end within 2% of
# fp32. Observed (300 steps, batch 64): fp32 2.369621, bf16 2.369662,
# fp16 2.369623.
run bf16 bf16.json
run fp16 fp16.json
bf16=$(val_loss bf16)
fp16=$(val_loss fp16)
check "bf16 val_loss $bf16 within 2% of fp32 $fp32" \
  "a != \"\" && b > 0 && (a - b) / b < 0.02 && (b - a) / b < 0.02" "$bf16" "$fp32"
check "fp16 (dynamic scale) val_loss $fp16 within 2% of fp32 $fp32" \
  "a != \"\" && b > 0 && (a - b) / b < 0.02 && (b - a) / b < 0.02" "$fp16" "$fp32"

# 6: the emulation is real: bf16 rounding changes the numbers, if only a
# little (equal values would mean the run never left fp32).
check "bf16 ($bf16) and fp32 ($fp32) runs are not identical" "a != b" "$bf16" "$fp32"

# 7, 8, 9: fp16 at a static scale of 1. This model's gradients are too
# large to underflow at the defaults (a weight-1 run at scale 1 matches the
# others), so the loss is weighted by 1e-4, which shrinks every gradient
# the way averaging over 10^4 times more tokens would. AdamW does not care
# about the size of a gradient, so with loss scaling fp16 trains as before;
# without it the gradients below about 3e-8 flush to zero.
# Observed (300 steps, batch 64, weight 1e-4): dynamic 2.372445 with
# 0.0015% of the gradient values flushed, static scale 1 2.470911 (+4.2%)
# with 38.8% flushed.
run fp16-small fp16.json --loss-weight 1e-4
run static1-small fp16-static1.json --loss-weight 1e-4
dynamic=$(val_loss fp16-small)
static1=$(val_loss static1-small)
check "fp16 static scale 1 ($static1) ends over 2% worse than dynamic scaling ($dynamic)" \
  "a != \"\" && b != \"\" && a > b * 1.02" "$static1" "$dynamic"
check "fp16 static scale 1 flushes over 20% of its gradient values ($(underflow static1-small))" \
  "a > 0.2" "$(underflow static1-small)"
check "fp16 dynamic scaling flushes under 1% ($(underflow fp16-small))" \
  "a != \"\" && a < 0.01" "$(underflow fp16-small)"

# 10, 11: bad input is a message naming the file, and exit status 1.
"$charlm" --config "$configs/fp32.json" --words "$tmp/no-such-words" >"$tmp/e1.out" 2>&1
rc=$?
if [ $rc = 1 ] && grep -q "no-such-words" "$tmp/e1.out" && grep -q -- "--words" "$tmp/e1.out"; then
  ok "a missing word list is reported with its name and a hint"
else
  not_ok "a missing word list is reported with its name and a hint (exit $rc)"
  sed 's/^/# /' "$tmp/e1.out"
fi
printf '{ "fp16": { "enabled": true, "loss_scale": -1 } }\n' >"$tmp/bad.json"
"$charlm" --config "$tmp/bad.json" --words "$words" >"$tmp/e2.out" 2>&1
rc=$?
if [ $rc = 1 ] && grep -q "bad.json" "$tmp/e2.out" && grep -q "fp16.loss_scale" "$tmp/e2.out"; then
  ok "an invalid config is reported with the file and the JSON path"
else
  not_ok "an invalid config is reported with the file and the JSON path (exit $rc)"
  sed 's/^/# /' "$tmp/e2.out"
fi
