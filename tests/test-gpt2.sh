#!/bin/sh
# test-gpt2.sh — examples/gpt2 in short runs of a small model: in each
# precision (fp32, bf16 with fp32 LayerNorm, fp16 with dynamic loss
# scaling, bf16 with FP8 Linear layers) the validation loss falls well
# below a uniform guess over the bytes (ln 256 = 5.545 nats); a run
# resumed from its checkpoint ends with the same FP32 masters, byte for
# byte, as the run that was never stopped; and with a comm plugin two
# ranks under mixprec-run at ZeRO-2 end with the same masters, byte for
# byte, as one process taking two micro-batches per step. Prints TAP.
top="$MIXPREC_TOP_BUILDDIR"
src="${G_TEST_SRCDIR:-$top/tests}/.."
gpt2="$top/examples/gpt2/gpt2"
run="$top/tools/mixprec-run"
configs="$src/examples/configs"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1
export MIXPREC_COMM_TIMEOUT_MS=60000
# One BLAS and OpenMP thread per process: the ranks under mixprec-run
# share the machine's cores, and the comparisons are bit for bit anyway.
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT

if [ ! -f /usr/share/dict/american-english ]; then
  echo "1..0 # SKIP /usr/share/dict/american-english is missing (Debian package wamerican)"
  exit 0
fi

n=0
fail=0
ok () { n=$((n + 1)); if [ "$1" = 0 ]; then echo "ok $n - $2"; else echo "not ok $n - $2"; fail=1; fi; }
val () { grep -o 'val_loss=[0-9.]*' "$1" | sed 's/val_loss=//' | tail -n 1; }
# A small model, so that a run takes seconds: 2 layers, width 64, 32 bytes of context.
small="--layers 2 --heads 4 --embd 64 --ctx 32 --batch 8 --val-windows 64"
# Below this the model has learned more than byte frequencies (a unigram
# model of the word list is about 3.3 nats).
learned=3.0

echo "1..8"

for config in fp32 bf16 fp16 bf16-fp8; do
  "$gpt2" --config "$configs/gpt2-$config.json" $small --steps 150 --eval-every 50 \
    --csv "$config.csv" >"$config.out" 2>"$config.err"
  status=$?
  loss=$(val "$config.out")
  first=$(sed -n '2p' "$config.csv" | cut -d, -f3)
  [ $status = 0 ] && [ -n "$loss" ] && awk -v l="$loss" -v f="$first" -v t=$learned \
    'BEGIN { exit !(l < t && l < f) }'
  ok $? "gpt2-$config: val_loss $loss after 150 steps (after 50: $first; must be < $learned)"
  [ $status = 0 ] || sed 's/^/# /' "$config.err" | tail -n 5
done

# A bad flag is an error naming it, not a crash.
"$gpt2" $small --embd 65 --steps 2 >bad.out 2>bad.err
status=$?
[ $status = 1 ] && grep -q "multiple" bad.err
ok $? "--embd 65 with 4 heads is refused: $(head -n 1 bad.err)"

# Resume: 40 steps saved every 20, then from step 20 again as if the job
# had died there (latest names step-20).
args="--config $configs/gpt2-bf16.json $small --steps 40 --eval-every 20 --quiet --save-every 20 --save-dir ckpt"
"$gpt2" $args --export whole.safetensors >whole.out 2>whole.err &&
  printf 'step-20\n' >ckpt/latest &&
  "$gpt2" $args --resume --export resumed.safetensors >resumed.out 2>resumed.err &&
  cmp -s whole.safetensors resumed.safetensors && [ -s whole.safetensors ]
ok $? "bf16, resumed at step 20 of 40: the same masters byte for byte (val_loss $(val whole.out) / $(val resumed.out))"

if [ "${MIXPREC_TEST_HAVE_UCX:-}" != yes ]; then
  echo "ok 7 # SKIP no comm plugin (UCX) in this build"
  echo "ok 8 # SKIP no comm plugin (UCX) in this build"
  exit $fail
fi

for config in bf16 fp16; do
  args="--config $configs/gpt2-$config.json $small --steps 20 --eval-every 20 --quiet"
  "$gpt2" $args --accumulation 2 --export single.safetensors >single.out 2>&1
  "$run" -n 2 "$gpt2" $args --zero-stage 2 --export dist.safetensors >dist.out 2>&1
  status=$?
  [ $status = 0 ] && [ -s single.safetensors ] && cmp -s single.safetensors dist.safetensors
  ok $? "$config, 2 ranks at ZeRO-2: the masters of one process with GAS 2, byte for byte (val_loss $(val single.out) / $(val dist.out | head -n 1))"
  [ $status = 0 ] || sed 's/^/# /' dist.out | tail -n 5
done
exit $fail
