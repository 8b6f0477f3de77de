#!/bin/sh
# run-bench-comm.sh — all_reduce bus bandwidth of MixprecComm (comm-ucx)
# beside Open MPI's MPI_Allreduce, measured in the same run, at 2 and 3
# ranks on this host, twice: on a quiet host, and loaded, with one
# CPU-bound process per core that this script starts for the pass and
# stops after it. One table, with the ratio ours / MPI.
#
#   bench/run-bench-comm.sh [BUILDDIR]
#
# BUILDDIR (default .) holds bench/bench-comm (`make bench`) and the
# comm-ucx plugin. bench/bench-mpi-allreduce.c is compiled here with
# $MPICC (default mpicc, Debian's libopenmpi-dev) and run with $MPIRUN
# (default mpirun, Debian's openmpi-bin); without MPI the MPI column is
# empty. PyTorch's gloo backend gets a column too when $PYTHON (default:
# BUILDDIR/../venv-bench/bin/python when it exists, else python3) imports
# torch.distributed with gloo.
#
# Environment: WORLDS (default "2 3"); PASSES (default "quiet loaded");
# MIN_SIZE and MAX_SIZE in bytes (default 64 KiB and 256 MiB); ITERATIONS
# (timed runs at 1 MiB, default 20); ROUNDS (default 2); MPIRUN_ARGS
# (default "--bind-to none"; as root the script adds --allow-run-as-root).
# Each round runs the programs back to back; every figure is the best over
# the rounds, so on a machine shared with other work each side gets the
# same chances at its quiet moments. The load average before each pass is
# printed with the table.
set -eu

srcdir=$(cd "$(dirname "$0")/.." && pwd)
builddir=$(cd "${1:-.}" && pwd)
worlds=${WORLDS:-2 3}
passes=${PASSES:-quiet loaded}
min_size=${MIN_SIZE:-65536}
max_size=${MAX_SIZE:-268435456}
iterations=${ITERATIONS:-20}
rounds=${ROUNDS:-2}
mpicc=${MPICC:-mpicc}
mpirun=${MPIRUN:-mpirun}
mpirun_args=${MPIRUN_ARGS:---bind-to none}
if [ -z "${PYTHON:-}" ]; then
  if [ -x "$builddir/../venv-bench/bin/python" ]; then
    PYTHON="$builddir/../venv-bench/bin/python"
  else
    PYTHON=python3
  fi
fi

if [ ! -x "$builddir/bench/bench-comm" ]; then
  echo "run-bench-comm.sh: $builddir/bench/bench-comm is missing: run \`make bench\` first" >&2
  exit 1
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/bench-comm-XXXXXX")
busy_pids=
stop_load () {
  for pid in $busy_pids; do kill "$pid" 2>/dev/null || :; done
  for pid in $busy_pids; do wait "$pid" 2>/dev/null || :; done
  busy_pids=
}
trap 'stop_load; rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM

have_mpi=no
if "$mpicc" -O2 -o "$tmp/bench-mpi-allreduce" "$srcdir/bench/bench-mpi-allreduce.c" 2>"$tmp/mpicc.log"; then
  have_mpi=yes
else
  echo "# no MPI column: $mpicc failed ($(head -n 1 "$tmp/mpicc.log"))" >&2
fi
# Open MPI refuses root unless told; a container's root is common.
if [ "$(id -u)" = 0 ]; then
  mpirun_args="--allow-run-as-root $mpirun_args"
  OMPI_ALLOW_RUN_AS_ROOT=1
  OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  export OMPI_ALLOW_RUN_AS_ROOT OMPI_ALLOW_RUN_AS_ROOT_CONFIRM
fi
have_torch=no
if "$PYTHON" -c 'import torch.distributed as d; assert d.is_gloo_available()' 2>/dev/null; then
  have_torch=yes
  torch_version=$("$PYTHON" -c 'import torch; print(torch.__version__)')
fi

MIXPREC_PLUGIN_PATH="$builddir/plugins${MIXPREC_PLUGIN_PATH:+:$MIXPREC_PLUGIN_PATH}"
LD_LIBRARY_PATH="$builddir/libmixprec/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export MIXPREC_PLUGIN_PATH LD_LIBRARY_PATH

# One CPU-bound process per core this script may use.
start_load () {
  n=$(nproc)
  i=0
  while [ "$i" -lt "$n" ]; do
    sh -c 'while :; do :; done' &
    busy_pids="$busy_pids $!"
    i=$((i + 1))
  done
  sleep 1
}

for pass in $passes; do
  [ "$pass" = loaded ] && start_load
  echo "$pass $(cut -d ' ' -f 1-3 /proc/loadavg)" >> "$tmp/loads"
  for world in $worlds; do
    round=0
    while [ "$round" -lt "$rounds" ]; do
      round=$((round + 1))
      "$builddir/bench/bench-comm" --ranks "$world" --backend ucx --ops all_reduce --tsv \
        --min-size "$min_size" --max-size "$max_size" --iterations "$iterations" |
        sed "s/^/$pass\t$world\t/" >> "$tmp/results"
      if [ "$have_mpi" = yes ]; then
        # shellcheck disable=SC2086 # MPIRUN_ARGS is a list of words
        "$mpirun" $mpirun_args --oversubscribe -np "$world" "$tmp/bench-mpi-allreduce" \
          "$min_size" "$max_size" "$iterations" | sed "s/^/$pass\t$world\t/" >> "$tmp/results"
      fi
      if [ "$have_torch" = yes ]; then
        "$PYTHON" "$srcdir/bench/bench-comm-gloo.py" --ranks "$world" --min-size "$min_size" \
          --max-size "$max_size" --iterations "$iterations" |
          sed "s/^/$pass\t$world\t/" >> "$tmp/results"
      fi
    done
  done
  [ "$pass" = loaded ] && stop_load
done

echo "# all_reduce, float32 sums, ranks on this host ($(nproc) CPUs); bus bandwidth in GB/s as"
echo "# nccl-tests defines it (median time of one collective, best of $rounds rounds)"
echo "# MPI: $("$mpirun" --version 2>/dev/null | head -n 1 || echo none) ($mpirun_args)"
[ "$have_torch" = yes ] && echo "# gloo: torch $torch_version ($PYTHON)"
while read -r pass load1 load5 load15; do
  echo "# $pass pass: load average $load1 $load5 $load15 at its start"
done < "$tmp/loads"
awk -F '\t' -v gloo="$have_torch" '
  { key = $1 " " $2 " " $3 " " $4
    if (!(key in best) || $7 + 0 > best[key] + 0) best[key] = $7
    row = $1 " " $2 " " $4
    if (!(row in seen)) { seen[row] = 1; rows[++n] = row; pass[n] = $1; world[n] = $2; size[n] = $4 } }
  function show(key) { return (key in best) ? sprintf("%.2f", best[key]) : "-" }
  function human(b) {
    if (b >= 1048576) return sprintf("%d MiB", b / 1048576)
    return sprintf("%d KiB", b / 1024)
  }
  END {
    printf "| pass   | ranks | size     | ours  | MPI_Allreduce | ours/MPI |%s\n", gloo == "yes" ? " gloo  |" : ""
    printf "|--------|-------|----------|-------|---------------|----------|%s\n", gloo == "yes" ? "-------|" : ""
    for (i = 1; i <= n; i++) {
      p = pass[i] " " world[i]
      ours = p " all_reduce " size[i]; mpi = p " mpi_all_reduce " size[i]
      ratio = (ours in best) && (mpi in best) && best[mpi] + 0 > 0 ? sprintf("%.2f", best[ours] / best[mpi]) : "-"
      printf "| %-6s | %5s | %-8s | %5s | %13s | %8s |", pass[i], world[i], human(size[i]),
             show(ours), show(mpi), ratio
      if (gloo == "yes") printf " %5s |", show(p " gloo_all_reduce " size[i])
      printf "\n"
    }
  }' "$tmp/results"
