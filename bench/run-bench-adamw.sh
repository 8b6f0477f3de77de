#!/bin/sh
# run-bench-adamw.sh — the fused AdamW step of the optim-adamw plugin and
# PyTorch's CPU AdamW on the same job, sizes and threads, one table.
#
#   bench/run-bench-adamw.sh [BUILDDIR]
#
# BUILDDIR (default .) holds bench/bench-adamw (`make bench`) and the
# plugin. Environment: PYTHON, a Python that can import torch (default
# python3); SIZES in Mi parameters (default 1,4,16,64,256); THREADS
# (default 2); MIN_SECONDS per figure (default 1); ROUNDS (default 3).
#
# Each round measures the bandwidth, then each size with ours and with
# PyTorch back to back; every figure is the best over the rounds. On a
# machine shared with other work this gives both sides the same chances at
# its quiet moments.
set -eu

srcdir=$(cd "$(dirname "$0")/.." && pwd)
builddir=${1:-.}
python=${PYTHON:-python3}
sizes=${SIZES:-1,4,16,64,256}
threads=${THREADS:-2}
min_seconds=${MIN_SECONDS:-1}
rounds=${ROUNDS:-3}

ours=$(mktemp)
theirs=$(mktemp)
trap 'rm -f "$ours" "$theirs"' EXIT

bench="$builddir/bench/bench-adamw --plugin $builddir/plugins/.libs/mixprec-optim-adamw.so"
bench="$bench --threads $threads --min-seconds $min_seconds --tsv"
torch="$python $srcdir/bench/bench-adamw-torch.py --threads $threads --min-seconds $min_seconds"

round=0
while [ "$round" -lt "$rounds" ]; do
  round=$((round + 1))
  $bench --sizes "" >> "$ours"
  for size in $(echo "$sizes" | tr ',' ' '); do
    $bench --bandwidth-mib 0 --sizes "$size" >> "$ours"
    $torch --sizes "$size" >> "$theirs"
  done
done

awk -F '\t' -v rounds="$rounds" '
  function number(v) { return v ~ /^[0-9.e+-]+$/ }
  function keep(key, v) { if (!(key in best) || (number(v) && (!number(best[key]) || v + 0 > best[key] + 0))) best[key] = v }
  FNR == 1 { file++ }
  file == 1 && $1 == "bandwidth" { keep("bw " $2, $3); if (!($2 in seen)) { seen[$2] = 1; names[++n_names] = $2 } }
  file == 1 && $1 == "adamw" { if (!(("n " $2) in best)) sizes[++n_sizes] = $2; best["n " $2] = 1; keep("ours " $2, $3) }
  file == 2 && $1 == "torch" { version = $2; tthreads = $3 }
  file == 2 && ($1 == "fused" || $1 == "foreach") { keep($1 " " $2, $3) }
  function show(v) { return number(v) ? sprintf("%.3g", v) : (v == "" ? "-" : "skipped") }
  function ratio(a, b) { return number(b) && b > 0 ? sprintf("%.2fx", a / b) : "-" }
  END {
    for (i = 1; i <= n_names; i++) {
      v = best["bw " names[i]]
      list = list sep names[i] " " sprintf("%.2f", v); sep = ", "
      if (v + 0 > bw) bw = v + 0
    }
    printf "memory bandwidth: %.2f GB/s, the best of %s GB/s\n", bw, list
    printf "libmixprec optim-adamw, 28 B/param; PyTorch %s CPU AdamW, %s threads; best of %d rounds\n\n",
           version, tthreads, rounds
    printf "| params | ours params/s | ours GB/s | %% of bandwidth | torch fused params/s | torch foreach params/s | ours / fused | ours / foreach |\n"
    printf "|---:|---:|---:|---:|---:|---:|---:|---:|\n"
    for (i = 1; i <= n_sizes; i++) {
      k = sizes[i]; o = best["ours " k]; gbs = o * 28 / 1e9
      printf "| %gM | %.3g | %.2f | %.0f%% | %s | %s | %s | %s |\n", k / 1048576, o, gbs,
             100 * gbs / bw, show(best["fused " k]), show(best["foreach " k]),
             ratio(o, best["fused " k]), ratio(o, best["foreach " k])
    }
  }' "$ours" "$theirs"
grep -h 'skipped' "$theirs" | sort -u | sed 's/^/note: torch /' || true
