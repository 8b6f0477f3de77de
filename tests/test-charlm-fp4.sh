#!/bin/sh
# test-charlm-fp4.sh — a short smoke run of the example trainer
# (examples/charlm) with 4-bit working copies: NVFP4 with 16x16 weight
# tiles and the random Hadamard transform on the weight-gradient operands,
# and MXFP4, the first and last layers kept in bf16 (fp4.exclude_params).
# From the same seed and batches as the bf16 run, each ends within 3% of
# bf16's validation loss, the setup line names the recipe, and the hidden
# layer's matmuls really multiplied with 4-bit values. Prints TAP.

. "${G_TEST_SRCDIR:-$(dirname "$0")}/charlm-common.sh"
charlm_setup test-charlm-fp4
run_options="--steps 150 --batch 64 --eval-every 150"

echo "1..8"

run bf16 bf16.json
run nvfp4 bf16-nvfp4.json
run mxfp4 bf16-mxfp4.json

# 1-3: every run trains to the end.
runs_ok bf16
runs_ok nvfp4
runs_ok mxfp4
bf16=$(val_loss bf16)

# 4, 5: within 3% of bf16, and not the bf16 run under another name.
for r in nvfp4 mxfp4; do
  v=$(val_loss $r)
  check "$r val_loss $v within 3% of bf16 $bf16 and not equal to it" \
    "a != \"\" && b > 0 && a != b && (a - b) / b < 0.03 && (b - a) / b < 0.03" "$v" "$bf16"
done

# 6: the setup lines name the recipes (none for bf16).
if grep -q '^charlm: fp4 working copies for Linear (except h1\.\*, out\.\*): NVFP4, an E4M3 scale per 16x16 tile.*random Hadamard transform (signs 0x' \
     "$tmp/nvfp4.err" &&
   grep -q '^charlm: fp4 working copies for Linear (except h1\.\*, out\.\*): MXFP4, an E8M0 scale per 32 elements (floor); weight gradients in the working dtype' \
     "$tmp/mxfp4.err" &&
   ! grep -q 'fp4 working copies' "$tmp/bf16.err"; then
  ok "the setup lines name each run's 4-bit recipe (and none for bf16)"
else
  not_ok "the setup lines name each run's 4-bit recipe (and none for bf16)"
  grep -h '^charlm: fp4' "$tmp"/*.err | sed 's/^/# /'
fi

# 7, 8: h2 was multiplied in 4 bits (E2M1 has 15 values: with one scale
# per 16x16 tile or per 32 elements, a few hundred at most, against
# thousands in bf16), h1 and out in bf16.
for r in nvfp4 mxfp4; do
  d=$(distinct $r h2.weight)
  b=$(distinct bf16 h2.weight)
  if grep -q "^charlm:   h2.weight: \(NVFP4 16x16\|MXFP4\) (4-bit E2M1)" "$tmp/$r.err" &&
     grep -q "^charlm:   h1.weight: bfloat16" "$tmp/$r.err" &&
     grep -q "^charlm:   out.weight: bfloat16" "$tmp/$r.err" &&
     [ -n "$d" ] && [ -n "$b" ] && [ "$d" -lt 1000 ] && [ "$b" -gt 1000 ]; then
    ok "$r: h2 multiplied with 4-bit values ($d distinct; bf16 $b), h1 and out in bf16"
  else
    not_ok "$r: h2 multiplied with 4-bit values ($d distinct; bf16 $b), h1 and out in bf16"
    grep -h '^charlm:   ' "$tmp/$r.err" | sed 's/^/# /'
  fi
done
