#!/bin/sh
# run-bench-adamw.sh — the fused AdamW step of the optim-adamw plugin and
# its CPU peers on the same job, sizes and threads, one table: PyTorch's
# AdamW(fused=True) and AdamW(foreach=True), and DeepSpeedCPUAdam.
#
#   bench/run-bench-adamw.sh [BUILDDIR]
#
# BUILDDIR (default .) holds bench/bench-adamw (`make bench`) and the
# plugin. Environment: PYTHON, a Python that can import torch and deepspeed
# (default python3; bench/setup-bench-venv.sh makes a venv with both and
# prints its Python); PEERS (default fused,foreach,deepspeed); SIZES in Mi
# parameters (default 1,4,16,64,256); THREADS (default 2); MIN_SECONDS per
# figure (default 1); ROUNDS (default 3).
#
# The job is bench-adamw's: fp32 master, exp_avg and exp_avg_sq, a bf16
# gradient in times an unscale factor, a bf16 working copy out. A peer's
# figure includes the casts it needs for that around its fp32 step (see
# bench/bench-adamw-torch.py), and each peer is checked against torch's
# AdamW in float64 before it is timed. A peer that is unavailable (no
# fused CPU AdamW, DeepSpeed missing or its cpu_adam op failing to build)
# or fails the check is reported below the table, and the rest still run.
#
# Each round measures the bandwidth, then each size with ours and with each
# peer back to back, every peer in a process of its own; every figure is
# the best over the rounds. On a machine shared with other work this gives
# all sides the same chances at its quiet moments. The ratios are printed,
# not judged.
set -eu

srcdir=$(cd "$(dirname "$0")/.." && pwd)
builddir=${1:-.}
python=${PYTHON:-python3}
sizes=${SIZES:-1,4,16,64,256}
threads=${THREADS:-2}
min_seconds=${MIN_SECONDS:-1}
rounds=${ROUNDS:-3}
peers=${PEERS:-fused,foreach,deepspeed}

ours=$(mktemp)
theirs=$(mktemp)
one=$(mktemp)
trap 'rm -f "$ours" "$theirs" "$one"' EXIT

bench="$builddir/bench/bench-adamw --plugin $builddir/plugins/.libs/mixprec-optim-adamw.so"
bench="$bench --threads $threads --min-seconds $min_seconds --tsv"
torch="$python $srcdir/bench/bench-adamw-torch.py --threads $threads --min-seconds $min_seconds"

round=0
while [ "$round" -lt "$rounds" ]; do
  round=$((round + 1))
  $bench --sizes "" >> "$ours"
  for size in $(echo "$sizes" | tr ',' ' '); do
    $bench --bandwidth-mib 0 --sizes "$size" >> "$ours"
    for peer in $(echo "$peers" | tr ',' ' '); do
      $torch --peers "$peer" --sizes "$size" > "$one" || {
        status=$?
        n=$(awk -v m="$size" 'BEGIN { printf "%d", m * 1048576 }')
        printf '%s\t%s\tskipped: %s exited with status %s\n' "$peer" "$n" "$python" "$status" >> "$one"
      }
      cat "$one" >> "$theirs"
      # Unavailable here: not worth asking again.
      if grep -q "^$peer	0	skipped" "$one"; then
        peers=$(echo ",$peers," | sed "s/,$peer,/,/; s/^,//; s/,\$//")
      fi
    done
  done
done

awk -F '\t' -v rounds="$rounds" '
  function number(v) { return v ~ /^[0-9.e+-]+$/ }
  function keep(key, v) { if (!(key in best) || (number(v) && (!number(best[key]) || v + 0 > best[key] + 0))) best[key] = v }
  function show(v) { return number(v) ? sprintf("%.3g", v) : (v == "" ? "-" : "skipped") }
  function cell(peer, k) { return (peer " " k) in best ? best[peer " " k] : best[peer " 0"] }
  function ratio(a, b) { return number(b) && b > 0 ? sprintf("%.2fx", a / b) : "-" }
  FNR == 1 { file++ }
  file == 1 && $1 == "bandwidth" { keep("bw " $2, $3); if (!($2 in seen)) { seen[$2] = 1; names[++n_names] = $2 } }
  file == 1 && $1 == "adamw" { if (!(("n " $2) in best)) sizes[++n_sizes] = $2; best["n " $2] = 1; keep("ours " $2, $3) }
  file == 2 && $1 == "version" { version[$2] = $3; if ($2 == "torch") tthreads = $4 }
  file == 2 && $1 == "check" { if (!($2 in err) || $4 + 0 > err[$2] + 0) err[$2] = $4; if ($3 != "ok") failed[$2] = 1 }
  file == 2 && ($1 == "fused" || $1 == "foreach" || $1 == "deepspeed") { keep($1 " " $2, $3) }
  END {
    for (i = 1; i <= n_names; i++) {
      v = best["bw " names[i]]
      list = list sep names[i] " " sprintf("%.2f", v); sep = ", "
      if (v + 0 > bw) bw = v + 0
    }
    printf "memory bandwidth: %.2f GB/s, the best of %s GB/s\n", bw, list
    printf "libmixprec optim-adamw, 28 B/param; PyTorch %s AdamW and DeepSpeed %s DeepSpeedCPUAdam,\n",
           "torch" in version ? version["torch"] : "-", "deepspeed" in version ? version["deepspeed"] : "-"
    printf "with their casts; %s threads; best of %d rounds\n\n", tthreads, rounds
    printf "| params | ours params/s | ours GB/s | %% of bandwidth | torch fused params/s | torch foreach params/s | DeepSpeedCPUAdam params/s | ours / fused | ours / foreach | ours / DeepSpeedCPUAdam |\n"
    printf "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"
    for (i = 1; i <= n_sizes; i++) {
      k = sizes[i]; o = best["ours " k]; gbs = o * 28 / 1e9
      printf "| %gM | %.3g | %.2f | %.0f%% | %s | %s | %s | %s | %s | %s |\n", k / 1048576, o, gbs,
             100 * gbs / bw, show(cell("fused", k)), show(cell("foreach", k)), show(cell("deepspeed", k)),
             ratio(o, cell("fused", k)), ratio(o, cell("foreach", k)), ratio(o, cell("deepspeed", k))
    }
    line = ""
    for (p in err) line = line sprintf("%s %s%s, ", p, err[p], p in failed ? " (FAILED)" : "")
    if (line != "")
      printf "\nchecked against torch AdamW in float64, worst relative error: %s\n", substr(line, 1, length(line) - 2)
  }' "$ours" "$theirs"
grep -h 'skipped' "$theirs" | cut -f 1,3- | sort -u | sed 's/\t/: /; s/^/note: /' || true
