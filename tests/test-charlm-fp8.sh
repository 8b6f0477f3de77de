#!/bin/sh
# test-charlm-fp8.sh — the example trainer (examples/charlm) with FP8
# working copies for its Linear layers: the engine keeps an FP8 copy of
# their weights (delayed scaling, current scaling, MX block scaling) and
# charlm's matmuls multiply with it, dequantised on the CPU. From the same
# seed and batches as the bf16 run, each FP8 run ends within 3% of bf16's
# validation loss, and the weights the matmuls saw really were FP8. Prints
# TAP.

. "${G_TEST_SRCDIR:-$(dirname "$0")}/charlm-common.sh"
charlm_setup test-charlm-fp8
run_options="--steps 300 --batch 64 --eval-every 300"

echo "1..15"

run bf16 bf16.json
run delayed bf16-fp8.json
run current bf16.json --fp8 current
run mx bf16-fp8-mx.json
run off bf16-fp8.json --fp8 off

# 1-4: every run trains to the end.
runs_ok bf16
runs_ok delayed
runs_ok current
runs_ok mx
bf16=$(val_loss bf16)

# 5-7: the Done-when of FP8 training: within 3% of the bf16 validation
# loss, from the same initial weights and batches. Observed (300 steps,
# batch 64): bf16 2.369662, delayed 2.369634, current 2.369845, mx
# 2.370325: FP8 weights alone cost this model almost nothing.
for r in delayed current mx; do
  v=$(val_loss $r)
  check "$r FP8 val_loss $v within 3% of bf16 $bf16" \
    "a != \"\" && b > 0 && (a - b) / b < 0.03 && (b - a) / b < 0.03" "$v" "$bf16"
done

# 8: the runs are not the bf16 run under another name: FP8 weights change
# the numbers.
check "delayed FP8 ($(val_loss delayed)) and bf16 ($bf16) runs are not identical" \
  "a != \"\" && a != b" "$(val_loss delayed)" "$bf16"

# 9: the setup line names the recipe the config asked for.
if grep -q '^charlm: fp8 working copies for Linear: e4m3 forward, e5m2 backward, delayed scaling' \
     "$tmp/delayed.err" &&
   grep -q '^charlm: fp8 working copies for Linear: .*current scaling' "$tmp/current.err" &&
   grep -q '^charlm: fp8 working copies for Linear: e4m3, MX block scaling (32 elements' \
     "$tmp/mx.err" &&
   ! grep -q 'fp8 working copies' "$tmp/bf16.err"; then
  ok "the setup line names each run's FP8 recipe (and none for bf16)"
else
  not_ok "the setup line names each run's FP8 recipe (and none for bf16)"
  grep -h '^charlm: fp8' "$tmp"/*.err | sed 's/^/# /'
fi

# 10, 11: what the matmuls multiplied with. A per-tensor FP8 copy holds
# one byte per value and one scale: at most 256 distinct values in the
# fp32 weights after dequantising. The bf16 weights hold thousands. An
# independent count, taken over the fp32 weights the model used.
fp8_grid=yes
for r in delayed current; do
  for p in h1.weight h2.weight out.weight; do
    d=$(distinct $r $p)
    if [ -z "$d" ] || [ "$d" -gt 256 ] ||
       ! grep -q "^charlm:   $p: float8_e4m3 x scale_inv " "$tmp/$r.err"; then
      fp8_grid=no
      echo "# $r $p: '$d' distinct values"
    fi
  done
done
if [ $fp8_grid = yes ]; then
  ok "delayed and current runs multiplied with e4m3 values times one scale (<= 256 distinct values)"
else
  not_ok "delayed and current runs multiplied with e4m3 values times one scale (<= 256 distinct values)"
  grep -h '^charlm:   ' "$tmp"/delayed.err "$tmp"/current.err | sed 's/^/# /'
fi
bf16_d=$(distinct bf16 h1.weight)
check "the bf16 run multiplied with many more values ($bf16_d distinct in h1.weight)" \
  "a != \"\" && a > 1000" "$bf16_d"

# 12: MX: the report names the block scales; values per 32-block share one
# power of two, so there are more distinct values than one scale allows
# but far fewer than bf16 has.
mx_d=$(distinct mx h1.weight)
if grep -q '^charlm:   h1.weight: float8_e4m3 with an E8M0 scale per 32 elements' "$tmp/mx.err" &&
   [ -n "$mx_d" ] && [ -n "$bf16_d" ] && [ "$mx_d" -lt "$bf16_d" ]; then
  ok "the MX run multiplied with e4m3 values and block scales ($mx_d distinct in h1.weight)"
else
  not_ok "the MX run multiplied with e4m3 values and block scales ($mx_d distinct in h1.weight)"
  grep -h '^charlm:   ' "$tmp/mx.err" | sed 's/^/# /'
fi

# 13: --fp8 off turns the config's fp8 section off: the bf16 run, bit for bit.
if [ "$(cat "$tmp/off.rc")" = 0 ] && [ "$(val_loss off)" = "$bf16" ]; then
  ok "--fp8 off on the FP8 config gives the bf16 run ($bf16)"
else
  not_ok "--fp8 off on the FP8 config gives the bf16 run ($(val_loss off) vs $bf16)"
  sed 's/^/# /' "$tmp/off.err"
fi

# 14: a recipe it does not know is refused, with the option and the choices.
"$charlm" --config "$configs/bf16.json" --words "$words" --fp8 e3m4 >"$tmp/e1.out" 2>&1
rc=$?
if [ $rc = 1 ] && grep -q -- "--fp8" "$tmp/e1.out" && grep -q "e3m4" "$tmp/e1.out" &&
   grep -q "delayed" "$tmp/e1.out"; then
  ok "--fp8 with an unknown recipe is refused with the option, the value and the choices"
else
  not_ok "--fp8 with an unknown recipe is refused with the option, the value and the choices (exit $rc)"
  sed 's/^/# /' "$tmp/e1.out"
fi

# 15: a bad fp8 section is reported with the file and the JSON path.
sed 's/"amax_compute_algo": "max"/"amax_compute_algo": "median"/' \
  "$configs/bf16-fp8.json" >"$tmp/bad.json"
"$charlm" --config "$tmp/bad.json" --words "$words" >"$tmp/e2.out" 2>&1
rc=$?
if [ $rc = 1 ] && grep -q "bad.json" "$tmp/e2.out" && grep -q "fp8.amax_compute_algo" "$tmp/e2.out"; then
  ok "an invalid fp8 section is reported with the file and the JSON path"
else
  not_ok "an invalid fp8 section is reported with the file and the JSON path (exit $rc)"
  sed 's/^/# /' "$tmp/e2.out"
fi
