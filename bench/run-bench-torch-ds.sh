#!/bin/sh
# run-bench-torch-ds.sh — seconds per optimizer step of one DeepSpeed
# training loop (bench/bench-torch-ds.py: a small Hugging Face GPT-2 from
# a config, bf16, AdamW, gradient clipping) on 2 ranks of this host, under
# DeepSpeed (gloo on 127.0.0.1) and under mixprec.torch (mixprec-run -n 2),
# at ZeRO-1, 2 and 3. The two run in turn, stage after stage, ROUNDS times
# over, so that a load the host picks up midway falls on both; each run
# reports the median of its timed steps, and the table has the median of
# those per system and stage, and the ratio mixprec.torch / DeepSpeed,
# then the CPU seconds of a step and the times a rank slept in one (see
# bench/bench-torch-ds.py): on a shared host the wall-clock seconds are
# noisy, and these tell how much of them was work. The load average is
# printed before and after. The ratio is printed, not judged.
#
# Each rank of either system computes on one thread: torch and OpenMP as
# set below, libmixprec's CPU kernels as mixprec-run sets them for its
# ranks (the processors divided by the ranks: one each on 2 cores).
#
#   bench/run-bench-torch-ds.sh [BUILDDIR]
#
# BUILDDIR (default .) holds tools/mixprec-run, the library, its typelib
# and the plugins. Environment: PYTHON (default: the venv of
# build-aux/install-deps.sh where it exists, else python3; it needs gi,
# torch, transformers and deepspeed), ROUNDS (default 3), STAGES (default
# "1 2 3"), and STEPS / WARMUP / GAS / LAYERS / EMBD / HEADS / CTX /
# BATCH / VOCAB for bench/bench-torch-ds.py (defaults: 10 timed steps
# after 3, one micro-batch a step, the shape of bench/run-bench-gpt2.sh).
set -eu

srcdir=$(cd "$(dirname "$0")/.." && pwd)
builddir=$(cd "${1:-.}" && pwd)
venv_python=${XDG_CACHE_HOME:-$HOME/.cache}/libmixprec/venv/bin/python
if [ -z "${PYTHON:-}" ] && [ -x "$venv_python" ]; then
  PYTHON=$venv_python
fi
python=${PYTHON:-python3}
rounds=${ROUNDS:-3}
stages=${STAGES:-1 2 3}
driver="$srcdir/bench/bench-torch-ds.py"

LD_LIBRARY_PATH="$builddir/libmixprec/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
GI_TYPELIB_PATH="$builddir/bindings${GI_TYPELIB_PATH:+:$GI_TYPELIB_PATH}"
PYTHONPATH="$srcdir/bindings/python:$srcdir/bindings:$srcdir/tests${PYTHONPATH:+:$PYTHONPATH}"
MIXPREC_PLUGIN_PATH="$builddir/plugins"
MIXPREC_PLUGIN_SYSTEM_PATH=""
UCX_NET_DEVICES=lo
OMP_NUM_THREADS=1
OPENBLAS_NUM_THREADS=1
DS_ACCELERATOR=cpu
TRANSFORMERS_VERBOSITY=error
export LD_LIBRARY_PATH GI_TYPELIB_PATH PYTHONPATH MIXPREC_PLUGIN_PATH MIXPREC_PLUGIN_SYSTEM_PATH \
  UCX_NET_DEVICES OMP_NUM_THREADS OPENBLAS_NUM_THREADS DS_ACCELERATOR TRANSFORMERS_VERBOSITY
unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
results="$tmp/results"
: >"$results"

free_port() {
  "$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# DeepSpeed's two ranks: the environment its launcher gives them.
run_deepspeed() {
  port=$(free_port)
  for r in 0 1; do
    RANK=$r LOCAL_RANK=$r WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 \
      MASTER_PORT=$port GLOO_SOCKET_IFNAME=lo \
      "$python" "$driver" deepspeed "$1" "$tmp" >"$tmp/ds$r.out" 2>&1 &
    eval "pid$r=\$!"
  done
  # shellcheck disable=SC2154
  if ! wait "$pid0" || ! wait "$pid1"; then
    echo "run-bench-torch-ds.sh: DeepSpeed at ZeRO-$1 failed:" >&2
    tail -n 20 "$tmp/ds0.out" "$tmp/ds1.out" >&2
    exit 1
  fi
  grep -h '^RESULT ' "$tmp/ds0.out" >>"$results"
}

run_mixprec() {
  if ! MIXPREC_COMM_TIMEOUT_MS=120000 "$builddir/tools/mixprec-run" -n 2 \
      "$python" "$driver" mixprec "$1" "$tmp" >"$tmp/mp.out" 2>&1; then
    echo "run-bench-torch-ds.sh: mixprec.torch at ZeRO-$1 failed:" >&2
    tail -n 20 "$tmp/mp.out" >&2
    exit 1
  fi
  grep -h 'RESULT ' "$tmp/mp.out" | sed 's/^.*RESULT /RESULT /' >>"$results"
}

echo "torch-ds: load before: $(uptime)" >&2
round=1
while [ "$round" -le "$rounds" ]; do
  for stage in $stages; do
    # Which system goes first alternates from round to round.
    if [ $((round % 2)) -eq 1 ]; then
      run_deepspeed "$stage"; run_mixprec "$stage"
    else
      run_mixprec "$stage"; run_deepspeed "$stage"
    fi
    echo "torch-ds: round $round, ZeRO-$stage done" >&2
  done
  round=$((round + 1))
done
echo "torch-ds: load after: $(uptime)" >&2

"$python" - "$results" <<'EOF'
import json
import statistics
import sys

runs = [json.loads(line.split("RESULT ", 1)[1]) for line in open(sys.argv[1])]
by = {}
for r in runs:
    by.setdefault((r["stage"], r["impl"]), []).append(r)
print("GPT-2 of %d parameters, bf16, %d micro-batch(es) a step, 2 ranks: s/step, median over "
      "runs of each run's median" % (runs[0]["params"], runs[0]["gas"]))
print("| ZeRO | DeepSpeed s/step | mixprec.torch s/step | ours / DeepSpeed | "
      "mixprec.torch intake / backward_done / step (s/step) | runs |")
print("|---|---|---|---|---|---|")
for stage in sorted({r["stage"] for r in runs}):
    ds = statistics.median(r["median"] for r in by[(stage, "deepspeed")])
    mp = statistics.median(r["median"] for r in by[(stage, "mixprec")])
    t = {k: statistics.median(r["timings"][k] for r in by[(stage, "mixprec")])
         for k in ("intake", "backward_done", "step")}
    print("| %d | %.4f | %.4f | %.2fx | %.4f / %.4f / %.4f | %d |"
          % (stage, ds, mp, mp / ds, t["intake"], t["backward_done"], t["step"],
             len(by[(stage, "mixprec")])))
print()
print("| ZeRO | DeepSpeed CPU s/step | mixprec.torch CPU s/step | ours / DeepSpeed | "
      "DeepSpeed sleeps/step | mixprec.torch sleeps/step |")
print("|---|---|---|---|---|---|")
for stage in sorted({r["stage"] for r in runs}):
    cpu = [statistics.median(r["cpu"] for r in by[(stage, impl)])
           for impl in ("deepspeed", "mixprec")]
    waits = [statistics.median(r["waits"] for r in by[(stage, impl)])
             for impl in ("deepspeed", "mixprec")]
    print("| %d | %.4f | %.4f | %.2fx | %d | %d |"
          % (stage, cpu[0], cpu[1], cpu[1] / cpu[0], waits[0], waits[1]))
EOF
