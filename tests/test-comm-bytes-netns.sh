#!/bin/sh
# test-comm-bytes-netns.sh — the engine's byte counts split by host: the
# child of tests/test-comm-bytes (two ZeRO-3 steps of a small model) as
# one rank in each of 3 network namespaces, each also in its own PID and
# UTS namespace with a host name of its own (as tests/test-multihost-netns.sh
# sets them up), UCX over TCP on eth0. With every peer on another host,
# every byte a rank sends is inter-host: inter_host must equal the total,
# and the all-gather and reduce-scatter parts their inter-host parts; the
# totals must be those of the same run on one host (127.0.0.1), where no
# byte is inter-host; and as 4 ranks on 2 hosts, 2 on each, with and
# without hpZ groups of a host's ranks (zero_hpz_partition_size 2): hpZ
# keeps the backward pass's gathers on the host, so half the all-gather
# bytes that crossed hosts still do, and the gradients move as before;
# qgZ's reductions and ZeRO-3's gathers run in two levels there.
# Needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN), ip and
# unshare; skips with the reason where any is missing or refused.
top="$MIXPREC_TOP_BUILDDIR"
child="$top/tests/test-comm-bytes"
. "${G_TEST_SRCDIR:-$(dirname "$0")}/netns-hosts.sh"
netns_begin mpc
cd "$tmp" || exit 1

skip () { echo "1..0 # SKIP $*"; exit 0; }

[ -x "$child" ] || skip "$child is not built"
netns_require
command -v od >/dev/null 2>&1 || skip "od (coreutils) is not installed"

netns_make_hosts

json='{"bf16": {"enabled": true}, "gradient_accumulation_steps": 1, "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0, "stage3_max_reuse_distance": 0, "zero_quantized_weights": true, "zero_quantized_gradients": true}, "optimizer": {"type": "SGD", "params": {"lr": 0.01}}}'
secret=636f6d6d2d6279746573206e65746e7320746573742073656372657421

# Rank $1 of 3: in its namespace as host$1 ($2 = "ns"), ranks 0 and 1 in
# the first namespace as host0 and rank 2 in the second ($2 = "two"), or
# on 127.0.0.1.
rank () {
  r=$1
  mode=$2
  if [ "$2" = ns ]; then
    set -- ip netns exec "$tag-$r" unshare --pid --fork --kill-child --mount-proc --uts \
      env MIXPREC_MASTER_ADDR=10.77.0.1 MIXPREC_LOCAL_RANK=0 MIXPREC_LOCAL_WORLD_SIZE=1 \
      UCX_TLS=tcp UCX_NET_DEVICES=eth0 sh -c 'hostname "host$0" && exec "$1"' "$r" "$child"
    out="$tmp/ns"
  elif [ "$2" = four ] || [ "$2" = fourhpz ] || [ "$2" = fourq ] || [ "$2" = fourb ]; then
    h=$((r / 2))
    out="$tmp/$2"
    set -- ip netns exec "$tag-$h" unshare --pid --fork --kill-child --mount-proc --uts \
      env MIXPREC_MASTER_ADDR=10.77.0.1 MIXPREC_LOCAL_RANK=$((r % 2)) MIXPREC_LOCAL_WORLD_SIZE=2 \
      UCX_TLS=tcp UCX_NET_DEVICES=eth0 sh -c 'hostname "host$0" && exec "$1"' "$h" "$child"
  elif [ "$2" = two ]; then
    h=$((r / 2))
    set -- ip netns exec "$tag-$h" unshare --pid --fork --kill-child --mount-proc --uts \
      env MIXPREC_MASTER_ADDR=10.77.0.1 MIXPREC_LOCAL_RANK=$((r % 2)) \
      MIXPREC_LOCAL_WORLD_SIZE=$((2 - h)) UCX_TLS=tcp UCX_NET_DEVICES=eth0 \
      sh -c 'hostname "host$0" && exec "$1"' "$h" "$child"
    out="$tmp/two"
  else
    out="$tmp/$2"
    set -- env MIXPREC_MASTER_ADDR=127.0.0.1 MIXPREC_LOCAL_RANK="$r" MIXPREC_LOCAL_WORLD_SIZE="$world" \
      UCX_NET_DEVICES=lo "$child"
  fi
  exec timeout 120 env MIXPREC_RANK="$r" MIXPREC_WORLD_SIZE="$world" MIXPREC_MASTER_PORT="$port" \
    MIXPREC_TIMEOUT=60 MIXPREC_JOB_SECRET=$secret UCX_LOG_LEVEL=error \
    MIXPREC_TEST_COMM_BYTES_CHILD=1 MIXPREC_TEST_JSON="$run_json" MIXPREC_TEST_OUT="$out" \
    "$@" >"rank$r.$mode.out" 2>&1
}

# Runs the 3 ranks (4 for "four" and "fourhpz"); $statuses keeps each
# one's exit status (124: the timeout stopped it).
run3 () {
  pids=""
  world=3
  run_json=$json
  case $1 in
    four) world=4 ;;
    fourhpz) world=4; run_json=$(echo "$json" | sed 's/"stage": 3,/"stage": 3, "zero_hpz_partition_size": 2,/') ;;
    fourq|fourqlo) world=4; run_json=$(echo "$json" | sed 's/"zero_quantized_gradients": true/"zero_quantized_gradients": false/') ;;
    fourb|fourblo) world=4; run_json=$(echo "$json" | sed 's/"zero_quantized_gradients": true/"zero_quantized_gradients": false/; s/"zero_quantized_weights": true/"zero_quantized_weights": false/') ;;
  esac
  for r in $(seq 0 $((world - 1))); do
    rank $r "$1" &
    pids="$pids $!"
  done
  netns_wait_ranks
}

# What the ranks of run $1 said, for a failed run.
ranks_said () {
  echo "# exit statuses of the ranks:$statuses"
  for r in 0 1 2 3; do
    [ -e "rank$r.$1.out" ] || continue
    echo "# rank $r ($(wc -c <"rank$r.$1.out" 2>/dev/null || echo no) bytes of output):"
    tail -n 10 "rank$r.$1.out" 2>/dev/null | sed 's/^/#   /'
  done
}

# The 8 counts a rank wrote: all_gather reduce_scatter scalars other
# total inter_host inter_host_all_gather inter_host_reduce_scatter.
counts () { od -An -v -t u8 "$1" | tr -s ' \n' ' ' | sed 's/^ //; s/ $//'; }

n=0
fail=0
ok () { n=$((n + 1)); if [ "$1" = 0 ]; then echo "ok $n - $2"; else echo "not ok $n - $2"; fail=1; fi; }
echo "1..12"

port=29591
run3 lo
status=$?
ok $status "3 ranks on 127.0.0.1 run"
[ $status = 0 ] || ranks_said lo
port=29592
run3 ns
status=$?
ok $status "3 ranks on 3 namespace hosts run"
[ $status = 0 ] || ranks_said ns

good=0
for r in 0 1 2; do
  set -- $(counts "$tmp/lo.$r") x
  lo_ag=$1 lo_rs=$2 lo_total=$5 lo_inter=$6
  set -- $(counts "$tmp/ns.$r") x
  echo "# rank $r: one host: total $lo_total, inter-host $lo_inter; 3 hosts: total $5, inter-host $6 (all-gather $1/$7, reduce-scatter $2/$8)"
  [ "$lo_inter" = 0 ] && [ "$5" = "$lo_total" ] && [ "$1" = "$lo_ag" ] && [ "$2" = "$lo_rs" ] &&
    [ "$6" = "$5" ] && [ "$7" = "$1" ] && [ "$8" = "$2" ] && [ "$1" -gt 0 ] && [ "$2" -gt 0 ] ||
    good=1
done
ok $good "every byte inter-host on 3 hosts, none on one, the same totals"

# 2 hosts: ranks 0 and 1 share one, so half their bytes stay on it.
port=29593
run3 two
status=$?
ok $status "3 ranks on 2 namespace hosts run"
[ $status = 0 ] || ranks_said two
good=0
for r in 0 1 2; do
  set -- $(counts "$tmp/two.$r") x
  want=$5
  [ $r -lt 2 ] && want=$(($5 / 2))
  echo "# rank $r on host$((r / 2)): total $5, inter-host $6 (all-gather $7 of $1, reduce-scatter $8 of $2)"
  [ "$5" -gt 0 ] && [ "$6" = "$want" ] || good=1
  [ $r -lt 2 ] && { [ "$7" = $(($1 / 2)) ] && [ "$8" = $(($2 / 2)) ] || good=1; }
done
ok $good "ranks sharing a host send half their bytes across hosts, the other all of them"

# 4 ranks on 2 hosts, without and with hpZ over each host's 2 ranks.
port=29594
run3 four
status=$?
port=29595
[ $status = 0 ] && { run3 fourhpz; status=$?; }
ok $status "4 ranks on 2 namespace hosts run, without and with hpZ"
[ $status = 0 ] || { ranks_said four; ranks_said fourhpz; }
good=0
for r in 0 1 2 3; do
  set -- $(counts "$tmp/four.$r") x
  ag=$1 rs=$2 ag_inter=$7 rs_inter=$8
  set -- $(counts "$tmp/fourhpz.$r") x
  echo "# rank $r: all-gather $ag, across hosts $ag_inter; with hpZ $1, across hosts $7 (reduce-scatter $rs/$2, across $rs_inter/$8)"
  [ "$ag_inter" -gt 0 ] && [ $(($7 * 2)) = "$ag_inter" ] && [ "$2" = "$rs" ] && [ "$8" = "$rs_inter" ] &&
    [ "$1" -gt "$7" ] || good=1
done
ok $good "hpZ: the backward gathers stay on the host, half the all-gather bytes across hosts remain"
# qgZ in two levels over 2 hosts of 2: a window's 2 runs to the other
# rank of the host, then 1 run across (one level: 1 run on the host, 2
# across).
good=0
for r in 0 1 2 3; do
  set -- $(counts "$tmp/four.$r") x
  [ "$8" -gt 0 ] && [ $(($2 - $8)) = $((2 * $8)) ] || good=1
done
ok $good "qgZ in two levels: a third of the gradient bytes cross hosts, where one level sends two thirds"
# The gathers too: a slice to the other host's rank of the same place,
# then the two slices of each host to the other rank of the host.
good=0
for r in 0 1 2 3; do
  set -- $(counts "$tmp/four.$r") x
  [ "$7" -gt 0 ] && [ $(($1 - $7)) = $((2 * $7)) ] || good=1
done
ok $good "ZeRO-3 gathers in two levels: a third of the weight bytes cross hosts, where one level sends two thirds"
# The two levels move bytes, not values: bf16 slices and qwZ's codes
# gathered on 2 hosts give the masters of the same 4 ranks on 127.0.0.1.
status=0
for mode in fourb fourblo fourq fourqlo; do
  port=$((port + 1))
  run3 $mode || { status=1; ranks_said $mode; }
done
ok $status "4 ranks on 127.0.0.1 and on 2 hosts run, bf16 and qwZ gathers"
good=0
for r in 0 1 2 3; do
  cmp -s "$tmp/fourb.values.$r" "$tmp/fourblo.values.$r" && cmp -s "$tmp/fourq.values.$r" "$tmp/fourqlo.values.$r" ||
    good=1
  cmp -s "$tmp/fourb.values.$r" "$tmp/fourq.values.$r" && good=1
done
ok $good "gathers in two levels: the masters of one host, bf16 and qwZ (which differ from each other)"
good=0
for r in 0 1 2 3; do
  cmp -s "$tmp/four.values.$r" "$tmp/fourhpz.values.$r" || good=1
done
ok $good "hpZ changes no value: the masters after the steps are the run's without it"
exit $fail
