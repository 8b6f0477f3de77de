#!/bin/sh
# run-bench-gpt2.sh — examples/gpt2 (the C GPT-2 on libmixprec, bf16
# working copies, LayerNorm in fp32) beside examples/gpt2/torch-gpt2.py
# (Hugging Face's GPT2LMHeadModel with torch's AdamW) on the same initial
# weights, the same byte windows in the same order and the same number of
# threads: torch in fp32 for the whole run, and under torch autocast bf16
# for its first AUTOCAST_STEPS steps (on a CPU without bf16 instructions
# autocast is an order of magnitude slower than fp32, so a whole run of
# it would take hours). The loss curves, the validation losses and the
# tokens/s of each in one table; a PNG of the curves.
#
#   bench/run-bench-gpt2.sh [BUILDDIR]
#
# BUILDDIR (default .) holds examples/gpt2/gpt2. Environment: PYTHON (the
# venv of build-aux/install-deps.sh where it exists, else python3; it needs
# torch and transformers), STEPS (default 500), THREADS (default 2),
# AUTOCAST_STEPS (default 20), LAYERS / EMBD / HEADS / CTX / BATCH
# (default 6 / 384 / 6 / 128 / 8), OUT
# (default bench-gpt2: the CSVs, the PNG and the table go there). The
# ratio is printed, not judged.
set -eu

srcdir=$(cd "$(dirname "$0")/.." && pwd)
builddir=$(cd "${1:-.}" && pwd)
venv_python=${XDG_CACHE_HOME:-$HOME/.cache}/libmixprec/venv/bin/python
if [ -z "${PYTHON:-}" ] && [ -x "$venv_python" ]; then
  PYTHON=$venv_python
fi
python=${PYTHON:-python3}
steps=${STEPS:-500}
autocast_steps=${AUTOCAST_STEPS:-20}
threads=${THREADS:-2}
layers=${LAYERS:-6}
embd=${EMBD:-384}
heads=${HEADS:-6}
ctx=${CTX:-128}
batch=${BATCH:-8}
out=${OUT:-bench-gpt2}
mkdir -p "$out"

shape="--layers $layers --heads $heads --embd $embd --ctx $ctx --batch $batch --steps $steps"
eval_every=$((steps / 10))
[ "$eval_every" -gt 0 ] || eval_every=1
export OMP_NUM_THREADS="$threads" OPENBLAS_NUM_THREADS="$threads"

echo "gpt2: libmixprec, $layers layers, width $embd, context $ctx, batch $batch, $steps steps, $threads threads" >&2
"$builddir/examples/gpt2/gpt2" --config "$srcdir/examples/configs/gpt2-bf16.json" $shape \
  --eval-every "$eval_every" --export-init "$out/init.safetensors" --csv "$out/ours.csv" \
  >"$out/ours.out"
echo "gpt2: torch fp32, the same weights and batches" >&2
"$python" "$srcdir/examples/gpt2/torch-gpt2.py" --init "$out/init.safetensors" $shape --mode fp32 \
  --eval-every "$eval_every" --threads "$threads" --csv "$out/torch-fp32.csv" >"$out/torch-fp32.out"
ac_every=$((autocast_steps / 2))
[ "$ac_every" -gt 0 ] || ac_every=1
echo "gpt2: torch autocast bf16, the first $autocast_steps steps" >&2
"$python" "$srcdir/examples/gpt2/torch-gpt2.py" --init "$out/init.safetensors" \
  --layers $layers --heads $heads --embd $embd --ctx $ctx --batch $batch --steps $steps \
  --stop-after "$autocast_steps" --eval-every "$ac_every" --threads "$threads" \
  --csv "$out/torch-autocast.csv" >"$out/torch-autocast.out"

"$python" "$srcdir/bench/plot-gpt2.py" "$out/ours.csv" "$out/torch-fp32.csv" \
  "$out/torch-autocast.csv" "$out/gpt2-loss.png" | tee "$out/table.md"
