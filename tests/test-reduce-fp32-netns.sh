#!/bin/sh
# test-reduce-fp32-netns.sh — low-precision transport with FP32 sums
# across hosts: the child of tests/test-reduce-fp32 (a bfloat16
# reduce-scatter and all-reduce of random gradients of wide dynamic range,
# with FP32 sums and with a bfloat16 result) on 2, 3, 4 and 8 ranks spread
# over 3 "hosts" (network namespaces joined by a bridge, each rank in its
# own PID and UTS namespace, UCX over TCP on eth0; as
# tests/test-multihost-netns.sh sets them up), beside the same ranks on
# 127.0.0.1. On the hosts every rank must receive the bits it receives on
# one host (the results do not depend on how ranks are grouped into
# hosts), the FP32 sums must be the fold of the bfloat16 terms in rank
# order, their error within one bfloat16 rounding per contribution at
# every world size, while at 8 ranks the bfloat16 result exceeds that
# bound. Needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN), ip and unshare; skips
# with the reason where any is missing or refused.
top="$MIXPREC_TOP_BUILDDIR"
child="$top/tests/test-reduce-fp32"
. "${G_TEST_SRCDIR:-$(dirname "$0")}/netns-hosts.sh"
netns_begin mpr
cd "$tmp" || exit 1

skip () { echo "1..0 # SKIP $*"; exit 0; }

[ -x "$child" ] || skip "$child is not built"
netns_require
command -v timeout >/dev/null 2>&1 || skip "timeout (coreutils) is not installed"
netns_make_hosts

secret=7265647563652d66703332206e65746e7320746573742073656372657421
worlds="2 3 4 8"
n=0
fail=0
ok () { n=$((n + 1)); if [ "$1" = 0 ]; then echo "ok $n - $2"; else echo "not ok $n - $2"; fail=1; fi; }

# The host of rank $1 of $2: consecutive ranks share one, as a launcher
# places them (2: hosts 0 1; 4: 0 0 1 2; 8: 0 0 0 1 1 1 2 2).
host_of () { echo $(($1 * 3 / $2)); }
first_on () { r=0; while [ "$(host_of $r $2)" != "$1" ]; do r=$((r + 1)); done; echo $r; }
count_on () { c=0; r=0; while [ $r -lt $2 ]; do [ "$(host_of $r $2)" = "$1" ] && c=$((c + 1)); r=$((r + 1)); done; echo $c; }

# Rank $1 of $2, on 127.0.0.1 ($3 = lo) or on its host ($3 = ns).
rank () {
  r=$1 w=$2 mode=$3
  if [ "$mode" = ns ]; then
    h=$(host_of $r $w)
    set -- ip netns exec "$tag-$h" unshare --pid --fork --kill-child --mount-proc --uts \
      env MIXPREC_MASTER_ADDR=10.77.0.1 MIXPREC_LOCAL_RANK=$((r - $(first_on $h $w))) \
      MIXPREC_LOCAL_WORLD_SIZE=$(count_on $h $w) UCX_TLS=tcp UCX_NET_DEVICES=eth0 \
      sh -c 'hostname "host$0" && exec "$1"' "$h" "$child"
  else
    set -- env MIXPREC_MASTER_ADDR=127.0.0.1 MIXPREC_LOCAL_RANK=$r MIXPREC_LOCAL_WORLD_SIZE=$w \
      UCX_NET_DEVICES=lo "$child"
  fi
  exec timeout 120 env MIXPREC_RANK=$r MIXPREC_WORLD_SIZE=$w MIXPREC_MASTER_PORT=$port \
    MIXPREC_TIMEOUT=60 MIXPREC_JOB_SECRET=$secret UCX_LOG_LEVEL=error \
    MIXPREC_TEST_REDUCE_CHILD=1 MIXPREC_TEST_REDUCE_DTYPE=bf16 MIXPREC_TEST_OUT="$tmp/$mode-$w" \
    "$@" >"rank$r.$mode-$w.out" 2>&1
}

# Runs the $1 ranks of run $2; $statuses holds their exit statuses.
run () {
  pids=""
  r=0
  while [ $r -lt $1 ]; do
    rank $r $1 $2 &
    pids="$pids $!"
    r=$((r + 1))
  done
  netns_wait_ranks
}

# What the ranks of a failed run said.
ranks_said () {
  echo "# exit statuses:$statuses"
  r=0
  while [ $r -lt $1 ]; do
    tail -n 3 "rank$r.$2-$1.out" 2>/dev/null | sed "s/^/# rank $r: /"
    r=$((r + 1))
  done
}

echo "1..$((4 * 4))"
port=29601
for w in $worlds; do
  port=$((port + 1))
  run $w lo
  lo_status=$?
  [ $lo_status = 0 ] || ranks_said $w lo
  port=$((port + 1))
  run $w ns
  ns_status=$?
  [ $ns_status = 0 ] || ranks_said $w ns
  [ $lo_status = 0 ] && [ $ns_status = 0 ]
  ok $? "$w ranks on 127.0.0.1 and on 3 namespace hosts run"

  # Each line: rs-hash ar-hash unordered err-rs-fp32 err-rs-bf16 err-ar-fp32 err-ar-bf16.
  same=0
  r=0
  while [ $r -lt $w ]; do
    cmp -s "$tmp/lo-$w.$r" "$tmp/ns-$w.$r" || same=1
    r=$((r + 1))
  done
  ok $same "$w ranks: every rank receives the same bits on 3 hosts as on one"
  cat "$tmp"/ns-$w.* 2>/dev/null | awk -v w=$w '
    { if ($2 != ar && NR > 1) bad = 1; ar = $2; if ($3 != 0) bad = 1
      for (i = 4; i <= 6; i += 2) if ($i > ours) ours = $i
      for (i = 5; i <= 7; i += 2) if ($i > today) today = $i }
    END { bound = 2 ^ -8 + 2 ^ -20
          printf "# %d ranks on 3 hosts: max relative error %.4g with FP32 sums, %.4g with a bf16 result (bound %.4g)\n", w, ours, today, bound
          exit !(NR == w && !bad && ours <= bound && ours > 2 ^ -9) }'
  ok $? "$w ranks on 3 hosts: FP32 sums in rank order, one bf16 rounding per contribution, the same all-reduce on every rank"
  if [ $w = 8 ]; then
    cat "$tmp"/ns-$w.* | awk '{ for (i = 5; i <= 7; i += 2) if ($i > t) t = $i } END { exit !(t > 2 ^ -8 + 2 ^ -20) }'
    ok $? "8 ranks on 3 hosts: a bf16 result exceeds that bound"
  else
    cat "$tmp"/ns-$w.* | awk '{ for (i = 5; i <= 7; i += 2) if ($i > t) t = $i } END { exit !(t > 2 ^ -9) }'
    ok $? "$w ranks on 3 hosts: the bf16 result carries its rounding too"
  fi
done
exit $fail
