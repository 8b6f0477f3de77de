#!/bin/sh
# test-multihost-netns.sh — the example trainer on 3 "hosts": one rank in
# each of 3 network namespaces that this test makes, joined by a bridge
# (10.77.0.1-3/24 on each namespace's eth0), each rank also in its own
# PID and UTS namespace so that comm-ucx sees three hosts. The rendezvous
# runs over TCP to rank 0's address and UCX over TCP on eth0
# (UCX_TLS=tcp, UCX_NET_DEVICES=eth0). It must print the same val_loss as
# one process taking 3 times as many micro-batches per step (the engine
# makes the two runs identical bit for bit; see test-charlm-dist.sh).
# A second case sets UCX_NET_DEVICES=lo, which cannot reach the other
# hosts: the ranks must fail, naming UCX_NET_DEVICES, within the timeout.
#
# Needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN), ip from iproute2 and unshare
# from util-linux; skips with the reason where any is missing or refused.
# The namespaces are removed on every exit.
top="$MIXPREC_TOP_BUILDDIR"
src="${G_TEST_SRCDIR:-$top/tests}/.."
charlm="$top/examples/charlm"
. "${G_TEST_SRCDIR:-$(dirname "$0")}/netns-hosts.sh"
netns_begin mpx
cd "$tmp" || exit 1

skip () { echo "1..0 # SKIP $*"; exit 0; }

[ -f /usr/share/dict/american-english ] ||
  skip "/usr/share/dict/american-english is missing (Debian package wamerican)"
netns_require
command -v timeout >/dev/null 2>&1 || skip "timeout (coreutils) is not installed"

netns_make_hosts
n=0
fail=0
ok () { n=$((n + 1)); if [ "$1" = 0 ]; then echo "ok $n - $2"; else echo "not ok $n - $2"; fail=1; fi; }
val () { grep -ho 'val_loss=[0-9.]*' "$@" | sort -u; }

# Runs rank $1 of 3 in its namespace as host$1; the rest is charlm's
# command line. UCX_NET_DEVICES comes from $net_devices. Run in the
# background, it becomes timeout(1) itself, so that its pid stops the
# whole rank: timeout passes the signal on, and unshare --kill-child ends
# the rank's PID namespace with it.
rank () {
  r=$1
  shift
  exec timeout 300 ip netns exec "$tag-$r" unshare --pid --fork --kill-child --mount-proc --uts \
    env MIXPREC_RANK="$r" MIXPREC_WORLD_SIZE=3 MIXPREC_LOCAL_RANK=0 MIXPREC_LOCAL_WORLD_SIZE=1 \
    MIXPREC_MASTER_ADDR=10.77.0.1 MIXPREC_MASTER_PORT=29577 MIXPREC_TIMEOUT="$rank_timeout" \
    MIXPREC_JOB_SECRET=6d756c7469686f737420746573742073656372657421 \
    UCX_TLS=tcp UCX_NET_DEVICES="$net_devices" \
    sh -c 'hostname "host$0" && exec "$@"' "$r" "$@" >"rank$r.out" 2>&1
}

# Starts the 3 ranks and waits for them; returns non-zero if any failed.
run3 () {
  pids=""
  for r in 0 1 2; do
    rank $r "$@" &
    pids="$pids $!"
  done
  netns_wait_ranks
}

echo "1..3"
steps=20
cfg="$src/examples/configs/bf16.json"
"$charlm" --config "$cfg" --steps $steps --accumulation 3 --quiet >single.out 2>&1
expected=$(val single.out)

net_devices=eth0
rank_timeout=60
for stage in 0 2; do
  run3 "$charlm" --config "$cfg" --steps $steps --zero-stage $stage --quiet
  status=$?
  got=$(val rank0.out rank1.out rank2.out)
  [ $status = 0 ] && [ -n "$expected" ] && [ "$got" = "$expected" ] &&
    [ "$(cat rank0.out rank1.out rank2.out | grep -c 'val_loss=')" = 3 ]
  ok $? "bf16 on 3 hosts over UCX/TCP, ZeRO-$stage: $got (one process: $expected)"
  [ $status = 0 ] || tail -n 3 rank0.out rank1.out rank2.out | sed 's/^/# /'
done

# Loopback cannot cross hosts: every rank fails, and says why.
net_devices=lo
rank_timeout=10
run3 "$charlm" --config "$cfg" --steps 2 --quiet
status=$?
named=$(grep -l 'UCX_NET_DEVICES=lo' rank0.out rank1.out rank2.out | wc -l)
[ $status != 0 ] && [ "$named" -ge 1 ]
ok $? "UCX_NET_DEVICES=lo across hosts fails naming it ($named of 3 ranks)"
[ "$named" -ge 1 ] || tail -n 3 rank0.out rank1.out rank2.out | sed 's/^/# /'
grep -h 'UCX_NET_DEVICES=lo' rank0.out rank1.out rank2.out | head -n 1 | sed 's/^/# /'
exit $fail
