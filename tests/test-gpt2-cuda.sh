#!/bin/sh
# test-gpt2-cuda.sh — examples/gpt2 with --device cuda (the model of
# gpt2-cuda.cu) against the same run on the CPU (gpt2-model.c), from the
# same seed and batches, for 20 steps of a small model in fp32 and in
# bf16: the first step's loss (the forward) and gradient norm (the
# backward) agree, every step's loss stays within a stated tolerance of
# the CPU's, and the loss falls. Skips where --device cuda cannot start
# (no GPU, or a build without CUDA) unless MIXPREC_REQUIRE_GPU=1. Prints TAP.
top=${MIXPREC_TOP_BUILDDIR:-.}
src=${G_TEST_SRCDIR:-$top/tests}/..
gpt2=$top/examples/gpt2/gpt2
configs=$src/examples/configs
tmp=$(mktemp -d "${TMPDIR:-/tmp}/test-gpt2-cuda.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT

if [ ! -f /usr/share/dict/american-english ]; then
  echo "1..0 # SKIP /usr/share/dict/american-english is missing (Debian package wamerican)"
  exit 0
fi
if [ ! -x "$gpt2" ]; then
  echo "Bail out! $gpt2 is not built"
  exit 1
fi

# As test-gpt2.sh's small model; one evaluation per step, so that the CSV
# has every step's training loss and gradient norm.
small="--layers 2 --heads 4 --embd 64 --ctx 32 --batch 8 --val-windows 16 --seed 7"
steps=20

# The probe: two steps on the GPU (the shortest schedule a config allows). A crash is a failure, never a skip.
"$gpt2" --device cuda $small --steps 2 --quiet --csv "$tmp/probe.csv" >"$tmp/probe.out" 2>"$tmp/probe.err"
status=$?
if [ $status != 0 ]; then
  reason=$(grep -v '^$' "$tmp/probe.err" | head -n 1)
  if [ $status -gt 128 ] || [ "${MIXPREC_REQUIRE_GPU:-0}" = 1 ]; then
    echo "1..1"
    echo "not ok 1 - gpt2 --device cuda runs one step (exit $status: $reason)"
    exit 1
  fi
  echo "1..0 # SKIP no CUDA device ($reason)"
  exit 0
fi

n=0
fail=0
ok () {
  n=$((n + 1))
  if [ "$1" = 0 ]; then echo "ok $n - $2"; else echo "not ok $n - $2"; fail=1; fi
}
val () { sed -n 's/^val_loss=\([0-9.eE+-]*\)$/\1/p' "$1" | tail -n 1; }
# field CSV STEP COLUMN: step,train_loss,val_loss,loss_scale,grad_norm,...
field () { awk -F, -v s="$2" -v c="$3" '$1 == s { print $c }' "$1"; }
# within A B TOLERANCE: |A - B| <= TOLERANCE * |B|.
within () {
  awk -v a="$1" -v b="$2" -v t="$3" \
    'BEGIN { d = a - b; if (d < 0) d = -d; m = b < 0 ? -b : b; exit !(a != "" && b != "" && d <= t * m) }'
}

echo "1..10"

# Tolerances, relative to the CPU's value: fp32 differs only in the order
# of the sums (cuBLAS against gpt2-model.c, no TF32), bf16 also in which
# products round up or down when those sums differ; 20 steps of AdamW
# amplify either a little.
for case in "fp32 1e-4 1e-3 0.01" "bf16 5e-3 0.02 0.03"; do
  set -- $case
  config=$1 tol_forward=$2 tol_grad=$3 tol_loss=$4

  for device in cpu cuda; do
    "$gpt2" --config "$configs/gpt2-$config.json" --device $device $small --steps $steps \
      --eval-every 1 --quiet --csv "$tmp/$config-$device.csv" \
      >"$tmp/$config-$device.out" 2>"$tmp/$config-$device.err"
    echo $? >"$tmp/$config-$device.rc"
  done
  cpu=$tmp/$config-cpu.csv
  gpu=$tmp/$config-cuda.csv
  cpu_val=$(val "$tmp/$config-cpu.out")
  gpu_val=$(val "$tmp/$config-cuda.out")

  [ "$(cat "$tmp/$config-cpu.rc")" = 0 ] && [ "$(cat "$tmp/$config-cuda.rc")" = 0 ] &&
    [ -n "$cpu_val" ] && [ -n "$gpu_val" ]
  ok $? "$config: the cpu and cuda runs end with val_loss ($cpu_val, $gpu_val)"
  for d in cpu cuda; do
    [ "$(cat "$tmp/$config-$d.rc")" = 0 ] || sed "s/^/# $d: /" "$tmp/$config-$d.err" | tail -n 5
  done

  a=$(field "$gpu" 1 2) b=$(field "$cpu" 1 2)
  within "$a" "$b" "$tol_forward"
  ok $? "$config: step 1 loss on cuda $a within $tol_forward of the cpu's $b (forward)"

  a=$(field "$gpu" 1 5) b=$(field "$cpu" 1 5)
  within "$a" "$b" "$tol_grad"
  ok $? "$config: step 1 gradient norm on cuda $a within $tol_grad of the cpu's $b (backward)"

  worst=$(paste -d, "$gpu" "$cpu" | awk -F, -v t="$tol_loss" '
    NR > 1 { d = $2 - $10; if (d < 0) d = -d; r = d / $10; if (r > w) w = r; k++ }
    END { printf "%.3g %d\n", w, (k == 0 || w > t) }')
  [ "${worst#* }" = 0 ] && within "$gpu_val" "$cpu_val" "$tol_loss"
  ok $? "$config: every step's loss within $tol_loss of the cpu's (worst ${worst% *}), val_loss too"

  first=$(field "$gpu" 1 2) last=$(field "$gpu" $steps 2)
  awk -v f="$first" -v l="$last" -v v="$gpu_val" \
    'BEGIN { exit !(f != "" && l != "" && v != "" && l < f && v < f) }'
  ok $? "$config: the cuda run's loss falls (step 1 $first, step $steps $last, val_loss $gpu_val)"
done
exit $fail
