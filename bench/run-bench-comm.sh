#!/bin/sh
# run-bench-comm.sh — bus bandwidth of MixprecComm (comm-ucx) at 2 ranks on
# this host, beside Open MPI's MPI_Allreduce and PyTorch's gloo backend,
# measured in the same run; one table.
#
#   bench/run-bench-comm.sh [BUILDDIR]
#
# BUILDDIR (default .) holds bench/bench-comm (`make bench`) and the
# comm-ucx plugin. bench/bench-mpi-allreduce.c is compiled here with
# $MPICC (default mpicc) and run with $MPIRUN (default mpirun); a missing
# MPI or torch leaves its column empty. Environment: PYTHON, a Python that
# can import torch (default: BUILDDIR/../venv-bench/bin/python when it
# exists, else python3); MIN_SIZE and MAX_SIZE in bytes (default 4 KiB and
# 256 MiB); ITERATIONS (timed runs at 1 MiB, default 20); ROUNDS (default
# 2). Each round runs the three back to back; every figure is the best
# over the rounds, so on a machine shared with other work each side gets
# the same chances at its quiet moments.
set -eu

srcdir=$(cd "$(dirname "$0")/.." && pwd)
builddir=$(cd "${1:-.}" && pwd)
min_size=${MIN_SIZE:-4096}
max_size=${MAX_SIZE:-268435456}
iterations=${ITERATIONS:-20}
rounds=${ROUNDS:-2}
mpicc=${MPICC:-mpicc}
mpirun=${MPIRUN:-mpirun}
if [ -z "${PYTHON:-}" ]; then
  if [ -x "$builddir/../venv-bench/bin/python" ]; then
    PYTHON="$builddir/../venv-bench/bin/python"
  else
    PYTHON=python3
  fi
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/bench-comm-XXXXXX")
trap 'rm -rf "$tmp"' EXIT

have_mpi=no
if "$mpicc" -O2 -o "$tmp/bench-mpi-allreduce" "$srcdir/bench/bench-mpi-allreduce.c" 2>"$tmp/mpicc.log"; then
  have_mpi=yes
else
  echo "# no MPI column: $mpicc failed ($(head -n 1 "$tmp/mpicc.log"))" >&2
fi
have_torch=no
if "$PYTHON" -c 'import torch.distributed as d; assert d.is_gloo_available()' 2>/dev/null; then
  have_torch=yes
  torch_version=$("$PYTHON" -c 'import torch; print(torch.__version__)')
else
  echo "# no gloo column: $PYTHON cannot import torch.distributed with gloo" >&2
fi

MIXPREC_PLUGIN_PATH="$builddir/plugins${MIXPREC_PLUGIN_PATH:+:$MIXPREC_PLUGIN_PATH}"
LD_LIBRARY_PATH="$builddir/libmixprec/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export MIXPREC_PLUGIN_PATH LD_LIBRARY_PATH

round=0
while [ "$round" -lt "$rounds" ]; do
  round=$((round + 1))
  "$builddir/bench/bench-comm" --ranks 2 --backend ucx --tsv --min-size "$min_size" \
    --max-size "$max_size" --iterations "$iterations" >> "$tmp/results"
  if [ "$have_mpi" = yes ]; then
    "$mpirun" --allow-run-as-root --oversubscribe -np 2 "$tmp/bench-mpi-allreduce" \
      "$min_size" "$max_size" "$iterations" >> "$tmp/results"
  fi
  if [ "$have_torch" = yes ]; then
    "$PYTHON" "$srcdir/bench/bench-comm-gloo.py" --ranks 2 --min-size "$min_size" \
      --max-size "$max_size" --iterations "$iterations" >> "$tmp/results"
  fi
done

echo "# 2 ranks on this host, float32 sums; bus bandwidth in GB/s as nccl-tests defines it"
echo "# (median time of one collective, best of $rounds rounds); MPI: $("$mpirun" --version 2>/dev/null | head -n 1 || echo none);"
echo "# gloo: torch ${torch_version:-none} ($PYTHON)"
awk -F '\t' '
  { key = $1 " " $2; if (!(key in best) || $5 + 0 > best[key] + 0) best[key] = $5
    if (!($2 in seen)) { seen[$2] = 1; sizes[++n] = $2 } }
  function show(key) { return (key in best) ? sprintf("%.2f", best[key]) : "-" }
  function human(b) {
    if (b >= 1048576) return sprintf("%d MiB", b / 1048576)
    return sprintf("%d KiB", b / 1024)
  }
  END {
    printf "| %-8s | %-14s | %-14s | %-14s | %-18s | %-14s |\n", "size", "ours all_reduce", "MPI_Allreduce", "gloo all_reduce", "ours reduce_scatter", "ours all_gather"
    printf "|----------|-----------------|----------------|-----------------|---------------------|-----------------|\n"
    for (i = 1; i <= n; i++)
      printf "| %-8s | %15s | %14s | %15s | %19s | %15s |\n", human(sizes[i]),
             show("all_reduce " sizes[i]), show("mpi_all_reduce " sizes[i]),
             show("gloo_all_reduce " sizes[i]), show("reduce_scatter " sizes[i]),
             show("all_gather " sizes[i])
  }' "$tmp/results"
