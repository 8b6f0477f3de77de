#!/bin/sh
# run-bench-optim-states.sh — the optim-adamw plugin's step for each
# optimizer-state and master representation (bench/bench-optim-states)
# beside the revision-2 FP32-state kernel and, where PYTHON can import
# torchao, beside torchao's AdamW8bit, AdamW4bit and AdamWFp8 and torch's
# AdamW(fused=True) on the CPU (bench/bench-optim-states-torchao.py), in
# the same run, one table.
#
#   bench/run-bench-optim-states.sh [BUILDDIR]
#
# BUILDDIR (default .) holds bench/bench-optim-states (`make bench`) and
# the plugin. Environment: PYTHON (default: the venv of
# build-aux/install-deps.sh where it exists, else python3); SIZE in Mi
# parameters (default 16); THREADS (default 2); MIN_SECONDS per figure
# (default 1); ROUNDS (default 3); every figure is the best over the
# rounds, ours and the peers' alternating so that on a shared machine both
# get its quiet moments.
#
# The issue's goal is printed beside the table, not judged: the int8 path
# within 10% of the bf16-state path. torchao's job is not quite ours (an
# FP32 parameter updated in place, no bf16 working copy or master): its
# figures say what the PyPI peer does on this CPU, not the same bytes.
set -eu

srcdir=$(cd "$(dirname "$0")/.." && pwd)
builddir=${1:-.}
venv_python=${XDG_CACHE_HOME:-$HOME/.cache}/libmixprec/venv/bin/python
if [ -z "${PYTHON:-}" ] && [ -x "$venv_python" ]; then
  PYTHON=$venv_python
fi
python=${PYTHON:-python3}
size=${SIZE:-16}
threads=${THREADS:-2}
min_seconds=${MIN_SECONDS:-1}
rounds=${ROUNDS:-3}

ours=$(mktemp)
theirs=$(mktemp)
trap 'rm -f "$ours" "$theirs"' EXIT

have_torchao=no
if "$python" -c 'import torch, torchao.optim' >/dev/null 2>&1; then
  have_torchao=yes
fi

round=0
while [ "$round" -lt "$rounds" ]; do
  round=$((round + 1))
  "$builddir/bench/bench-optim-states" --plugin "$builddir/plugins/.libs/mixprec-optim-adamw.so" \
    --threads "$threads" --size "$size" --min-seconds "$min_seconds" --tsv >> "$ours"
  if [ "$have_torchao" = yes ]; then
    "$python" "$srcdir/bench/bench-optim-states-torchao.py" --threads "$threads" --size "$size" \
      --min-seconds "$min_seconds" 2>/dev/null >> "$theirs" || true
  fi
done

awk -F '\t' -v rounds="$rounds" -v threads="$threads" '
  function number(v) { return v ~ /^[0-9.e+-]+$/ }
  function keep(key, v) { if (!(key in best) || (number(v) && (!number(best[key]) || v + 0 > best[key] + 0))) best[key] = v }
  function ratio(a, b) { return number(a) && number(b) && b > 0 ? sprintf("%.3fx", a / b) : "-" }
  FNR == 1 { file++ }
  file == 1 { if (!($1 in bpp)) order[++n_rows] = $1; bpp[$1] = $4; n = $2; keep($1, $3) }
  file == 2 && $1 == "version" { version[$2] = $3; next }
  file == 2 { if (!($1 in pbpp)) porder[++n_peers] = $1; pbpp[$1] = $4; keep("peer " $1, $3) }
  END {
    printf "optim-adamw, %d parameters, %d threads, bf16 gradient in, bf16 working copy out; best of %d rounds\n\n",
           n, threads, rounds
    printf "| representation | params/s | B/param moved | / fp32-state kernel (v2) | / bf16 states | / torchao AdamW8bit |\n"
    printf "|---|---:|---:|---:|---:|---:|\n"
    for (i = 1; i <= n_rows; i++) {
      r = order[i]; v = best[r]
      printf "| %s | %s | %.3f | %s | %s | %s |\n", r, number(v) ? sprintf("%.4g", v) : v, bpp[r],
             ratio(v, best["fp32-v2"]), ratio(v, best["bf16"]), ratio(v, best["peer adamw8bit"])
    }
    if (n_peers > 0) {
      printf "\ntorch %s, torchao %s on the CPU (their own job: FP32 parameter and gradient, in place)\n\n",
             version["torch"], version["torchao"]
      printf "| peer | params/s | state B/param | ours int8 / peer |\n|---|---:|---:|---:|\n"
      for (i = 1; i <= n_peers; i++) {
        p = porder[i]; v = best["peer " p]
        printf "| %s | %s | %s | %s |\n", p, number(v) ? sprintf("%.4g", v) : v, pbpp[p], ratio(best["int8"], v)
      }
    } else
      printf "\ntorchao: not importable by this Python; its peers are left out\n"
    printf "\ngoal of issue 26: int8 states within 10%% of bf16 states: int8 / bf16 = %s\n",
           ratio(best["int8"], best["bf16"])
  }' "$ours" "$theirs"
