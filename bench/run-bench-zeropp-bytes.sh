#!/bin/sh
# run-bench-zeropp-bytes.sh — bytes on the wire per optimizer step per rank
# and the step time of ZeRO-3 on 3 ranks, for fp32, bf16 + FP32 sums,
# qwZ+qgZ, qwZ+qgZ+hpZ and qwZ+qgZ with FP8 blocks, with their ratios to the bf16 run of the same
# invocation beside DeepSpeed's (bench/bench-zeropp-bytes.c): first as 3
# processes on 127.0.0.1, then on 3 "hosts" (one rank in each of 3
# network namespaces joined by a bridge, each in its own PID and UTS
# namespace, UCX over TCP on eth0, as tests/test-multihost-netns.sh sets
# them up), where every byte crosses hosts, and as 4 ranks on 2 of those
# hosts with hpZ groups of a host's 2 ranks. The namespace parts need root,
# ip (iproute2) and unshare (util-linux); it is skipped, saying why,
# where any is missing or refused.
#
#   bench/run-bench-zeropp-bytes.sh [BUILDDIR]
#
# BUILDDIR (default .) holds bench/bench-zeropp-bytes (`make bench`) and
# the plugins. Environment: LAYERS (default 8), HIDDEN (default 1024:
# every layer a ZeRO-3 unit of its own), STEPS (default 5).
set -u

srcdir=$(cd "$(dirname "$0")/.." && pwd)
builddir=$(cd "${1:-.}" && pwd)
bench="$builddir/bench/bench-zeropp-bytes"
layers=${LAYERS:-8}
hidden=${HIDDEN:-1024}
steps=${STEPS:-5}

MIXPREC_PLUGIN_PATH="$builddir/plugins${MIXPREC_PLUGIN_PATH:+:$MIXPREC_PLUGIN_PATH}"
LD_LIBRARY_PATH="$builddir/libmixprec/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
UCX_LOG_LEVEL=${UCX_LOG_LEVEL:-error}
export MIXPREC_PLUGIN_PATH LD_LIBRARY_PATH UCX_LOG_LEVEL

[ -x "$bench" ] || { echo "run-bench-zeropp-bytes: $bench is missing (make bench)" >&2; exit 1; }

echo "## 3 processes on 127.0.0.1 (one host)"
UCX_NET_DEVICES=${UCX_NET_DEVICES:-lo} "$bench" --ranks 3 --layers "$layers" --hidden "$hidden" \
  --steps "$steps" || exit 1

echo
echo "## 3 hosts (network namespaces, UCX over TCP)"
. "$srcdir/tests/netns-hosts.sh"
netns_begin mpb

skip () { echo "skipped: $*"; exit 0; }
netns_require
netns_make_hosts

# Runs mode $1 as $2 ranks, $3 to a namespace host (host r / $3), each
# writing $4.RANK; stops the script, saying why, if a rank fails. hpZ's
# groups are a host's ranks, or the world where a host has one.
run_ranks () {
  hpz=$3
  [ "$hpz" -gt 1 ] || hpz=$2
  port=$((port + 1))
  pids=""
  r=0
  while [ $r -lt "$2" ]; do
    h=$((r / $3))
    timeout 600 ip netns exec "$tag-$h" unshare --pid --fork --kill-child --mount-proc --uts \
      env MIXPREC_RANK="$r" MIXPREC_WORLD_SIZE="$2" MIXPREC_LOCAL_RANK=$((r % $3)) MIXPREC_LOCAL_WORLD_SIZE="$3" \
      MIXPREC_MASTER_ADDR=10.77.0.1 MIXPREC_MASTER_PORT="$port" MIXPREC_TIMEOUT=120 \
      MIXPREC_JOB_SECRET=7a65726f70702062797465732062656e6368206a6f622073656372657421 \
      UCX_TLS=tcp UCX_NET_DEVICES=eth0 BENCH_ZPP_HPZ="$hpz" \
      BENCH_ZPP_RANK="$layers:$hidden:$steps" BENCH_ZPP_MODE="$1" BENCH_ZPP_OUT_PREFIX="$4" \
      sh -c 'hostname "host$0" && exec "$@"' "$h" "$bench" >"$tmp/rank$r.out" 2>&1 &
    pids="$pids $!"
    r=$((r + 1))
  done
  status=0
  for pid in $pids; do wait "$pid" || status=1; done
  pids=""
  if [ $status != 0 ]; then
    echo "run-bench-zeropp-bytes: mode $1 failed on the namespace hosts ($2 ranks, $3 a host):" >&2
    tail -n 3 "$tmp"/rank*.out >&2
    exit 1
  fi
}

port=29600
for mode in "bf16+fp32sum" fp32 "qwZ+qgZ" "qwZ+qgZ+hpZ" "qwZ+qgZ-fp8"; do
  run_ranks "$mode" 3 1 "$tmp/$mode"
done
"$bench" --from "$tmp" --ranks 3 --ranks-per-host 1 --layers "$layers" --hidden "$hidden" \
  --steps "$steps" || exit 1

# hpZ needs hosts of several ranks: 4 ranks, 2 in each of the first two
# namespaces, hpZ groups of the 2 ranks of a host. The backward gathers
# stay inside the host.
echo
echo "## 4 ranks on 2 hosts (2 per network namespace, UCX over TCP), hpZ per host"
mkdir -p "$tmp/h2"
for mode in "bf16+fp32sum" "qwZ+qgZ" "qwZ+qgZ+hpZ"; do
  run_ranks "$mode" 4 2 "$tmp/h2/$mode"
done
"$bench" --from "$tmp/h2" --ranks 4 --ranks-per-host 2 --modes "bf16+fp32sum,qwZ+qgZ,qwZ+qgZ+hpZ" \
  --layers "$layers" --hidden "$hidden" --steps "$steps"
