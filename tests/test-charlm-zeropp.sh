#!/bin/sh
# test-charlm-zeropp.sh — the example trainer at ZeRO-3 on 3 ranks with
# each ZeRO++ mode: qwZ (int8 weight gathers), qgZ (int4 gradient
# reductions), both, both with hpZ (zero_hpz_partition_size = the world,
# the one hpZ the engine runs), qgZ with LoCo's error feedback, and both
# in FP8 blocks. Each must reach a val_loss within 1% of the unquantized
# run after 400 steps (both printed), and differ from it (the
# quantization is there). First as 3 processes on 127.0.0.1, then on 3
# "hosts" (one rank in each of 3 network namespaces, in its own PID and
# UTS namespace, UCX over TCP; as tests/test-multihost-netns.sh sets them
# up), where every mode must give the bits it gave on one host: the
# transport and the host split change no value. The namespace part needs
# root (CAP_NET_ADMIN, CAP_SYS_ADMIN), ip and unshare; without them its
# checks are skipped, saying why. Under the sanitizers
# (MIXPREC_TEST_SANITIZERS=yes) every mode trains 40 steps instead, for
# memory errors: too few for the 1% comparisons, which are skipped then;
# the bitwise checks stay. Then 4 ranks on 2 of those hosts (2 each):
# the unquantized run, qwZ + qgZ, whose qgZ runs in two levels across
# hosts, and that with hpZ over each host's 2 ranks, which must give the
# bits of qwZ + qgZ; qwZ + qgZ within 1% of the unquantized run.
top="$MIXPREC_TOP_BUILDDIR"
src="${G_TEST_SRCDIR:-$top/tests}/.."
charlm="$top/examples/charlm"
launch="$top/tools/mixprec-run"
. "${G_TEST_SRCDIR:-$(dirname "$0")}/netns-hosts.sh"
netns_begin mpz
cd "$tmp" || exit 1

modes="plain qwz qgz qwz-qgz hpz loco fp8"
steps=400
short=no
[ "${MIXPREC_TEST_SANITIZERS:-no}" = yes ] && { steps=40; short=yes; }
# Under the sanitizers the ranks skip LeakSanitizer at exit, as those of
# tests/multiproc.c do and for the same reason: its tracer meets dynamic
# TLS entries of the modules UCX loaded that it cannot read and aborts the
# rank ("Tracer caught signal 11") without checking anything, more often
# the more ranks run at once. The single-process tests leak-check the same
# library code; AddressSanitizer still checks every rank.
[ $short = yes ] && export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
n_modes=7
n=0
fail=0
ok () { n=$((n + 1)); if [ "$1" = 0 ]; then echo "ok $n - $2"; else echo "not ok $n - $2"; fail=1; fi; }
val () { grep -ho 'val_loss=[0-9.]*' "$@" | sed 's/val_loss=//' | sort -u; }

# Before the plan: nothing of this test can run.
skip () { echo "1..0 # SKIP $*"; exit 0; }
[ -f /usr/share/dict/american-english ] ||
  skip "/usr/share/dict/american-english is missing (Debian package wamerican)"
[ -x "$charlm" ] || { echo "Bail out! $charlm is not built"; exit 1; }
command -v timeout >/dev/null 2>&1 || skip "timeout (coreutils) is not installed"

# The config of each mode: the bf16 example at ZeRO-3, every parameter
# partitioned (none kept whole by the persistence threshold).
config () {
  case $1 in
    plain) zpp='' ;;
    qwz) zpp=', "zero_quantized_weights": true' ;;
    qgz) zpp=', "zero_quantized_gradients": true' ;;
    qwz-qgz) zpp=', "zero_quantized_weights": true, "zero_quantized_gradients": true' ;;
    hpz) zpp=', "zero_quantized_weights": true, "zero_quantized_gradients": true, "zero_hpz_partition_size": 3' ;;
    loco) zpp=', "zero_quantized_gradients": true, "zeropp_loco_param": {"err_beta": 0.8, "reset_T": 1024}' ;;
    fp8) zpp=', "zero_quantized_weights": true, "zero_quantized_gradients": true' ;;
  esac
  fmt=''
  [ "$1" = fp8 ] && fmt=', "quantized_weights_format": "fp8_e4m3", "quantized_gradients_format": "fp8_e4m3"'
  sed -e "s|\"bf16\": { \"enabled\": true },|\"bf16\": { \"enabled\": true }, \"zero_optimization\": { \"stage\": 3, \"stage3_param_persistence_threshold\": 0$zpp },|" \
      -e "s|\"mixprec\": { \"seed\": 1234 }|\"mixprec\": { \"seed\": 1234$fmt }|" \
      "$src/examples/configs/bf16.json" >"$1.json"
  grep -q '"stage": 3' "$1.json" && grep -q '"seed": 1234' "$1.json" ||
    { echo "Bail out! examples/configs/bf16.json is not the file this test edits"; exit 1; }
}

# and 4 ranks on 2 namespace hosts: the unquantized run, qwZ + qgZ (qgZ
# and the gathers in two levels there) and the same with hpZ over each
# host's 2 ranks
n_two=4
echo "1..$((3 * n_modes + n_two))"

# --- one host: 3 processes on 127.0.0.1
for m in $modes; do
  config $m
  UCX_NET_DEVICES=lo UCX_LOG_LEVEL=error MIXPREC_TIMEOUT=120 timeout 600 "$launch" -n 3 "$charlm" --config "$m.json" \
    --steps $steps --eval-every $steps --quiet --csv "$m.lo.csv" >"$m.lo.out" 2>&1
  status=$?
  got=$(val "$m.lo.out")
  [ $status = 0 ] && [ "$(grep -c 'val_loss=' "$m.lo.out")" = 3 ] && [ "$(echo "$got" | wc -l)" = 1 ]
  ok $? "$m on 3 ranks on 127.0.0.1: val_loss $got"
  [ $status = 0 ] || tail -n 5 "$m.lo.out" | sed 's/^/# /'
  eval "lo_$(echo $m | tr - _)=\$got"
done
for m in $modes; do
  [ $m = plain ] && continue
  got=$(eval echo "\$lo_$(echo $m | tr - _)")
  if [ $short = yes ]; then
    n=$((n + 1))
    echo "ok $n # SKIP $m against the unquantized run: $steps steps under the sanitizers ($got against $lo_plain)"
    continue
  fi
  awk -v a="$got" -v b="$lo_plain" 'BEGIN { exit !(a != "" && b != "" && a != b && (a - b) / b <= 0.01 && (b - a) / b <= 0.01) }'
  ok $? "$m within 1% of the unquantized run and not equal to it: $got against $lo_plain ($(awk -v a="$got" -v b="$lo_plain" 'BEGIN { if (b != "") printf "%+.3f%%", (a - b) / b * 100 }'))"
done
ok $([ "$lo_hpz" = "$lo_qwz_qgz" ]; echo $?) "hpZ over the world adds nothing: $lo_hpz, as qwZ + qgZ $lo_qwz_qgz"

# --- 3 hosts: from here a refusal skips the checks left.
skip () {
  while [ $n -lt $((3 * n_modes + n_two)) ]; do
    n=$((n + 1))
    echo "ok $n # SKIP $*"
  done
  exit $fail
}
netns_require
netns_make_hosts

# Rank $1 of 3 in its namespace as host$1; the rest is charlm's command
# line. Run in the background, it becomes timeout(1) itself, so that its
# pid stops the whole rank.
rank () {
  r=$1
  shift
  exec timeout 600 ip netns exec "$tag-$r" unshare --pid --fork --kill-child --mount-proc --uts \
    env MIXPREC_RANK="$r" MIXPREC_WORLD_SIZE=3 MIXPREC_LOCAL_RANK=0 MIXPREC_LOCAL_WORLD_SIZE=1 \
    MIXPREC_MASTER_ADDR=10.77.0.1 MIXPREC_MASTER_PORT=29579 MIXPREC_TIMEOUT=120 \
    MIXPREC_JOB_SECRET=7a65726f2b2b206e616d65737061636520686f737473 \
    UCX_TLS=tcp UCX_NET_DEVICES=eth0 UCX_LOG_LEVEL=error \
    sh -c 'hostname "host$0" && exec "$@"' "$r" "$@" >"$mode.ns.$r.out" 2>&1
}

for mode in $modes; do
  pids=""
  for r in 0 1 2; do
    rank $r "$charlm" --config "$mode.json" --steps $steps --eval-every $steps --quiet --csv "$mode.ns.$r.csv" &
    pids="$pids $!"
  done
  netns_wait_ranks
  got=$(val "$mode.ns.0.out" "$mode.ns.1.out" "$mode.ns.2.out")
  want=$(eval echo "\$lo_$(echo $mode | tr - _)")
  [ $status = 0 ] && [ -n "$want" ] && [ "$got" = "$want" ] &&
    [ "$(cat "$mode.ns.0.out" "$mode.ns.1.out" "$mode.ns.2.out" | grep -c 'val_loss=')" = 3 ]
  ok $? "$mode on 3 namespace hosts over UCX/TCP: val_loss $got (one host: $want)"
  if [ $status != 0 ]; then
    echo "# exit statuses of ranks 0 1 2:$statuses"
    tail -n 5 "$mode.ns.0.out" "$mode.ns.1.out" "$mode.ns.2.out" | sed 's/^/# /'
  fi
done

# --- 4 ranks on 2 hosts, 2 in each of the first two namespaces.
rank4 () {
  r=$1
  h=$((r / 2))
  shift
  exec timeout 600 ip netns exec "$tag-$h" unshare --pid --fork --kill-child --mount-proc --uts \
    env MIXPREC_RANK="$r" MIXPREC_WORLD_SIZE=4 MIXPREC_LOCAL_RANK=$((r % 2)) MIXPREC_LOCAL_WORLD_SIZE=2 \
    MIXPREC_MASTER_ADDR=10.77.0.1 MIXPREC_MASTER_PORT="$port" MIXPREC_TIMEOUT=120 \
    MIXPREC_JOB_SECRET=7a65726f2b2b206e616d65737061636520686f737473 \
    UCX_TLS=tcp UCX_NET_DEVICES=eth0 UCX_LOG_LEVEL=error \
    sh -c 'hostname "host$0" && exec "$@"' "$h" "$@" >"$mode.h2.$r.out" 2>&1
}
sed 's/"zero_hpz_partition_size": 3/"zero_hpz_partition_size": 2/' hpz.json >hpz2.json
port=29580
for mode in plain qwz-qgz hpz2; do
  port=$((port + 1))
  pids=""
  for r in 0 1 2 3; do
    rank4 $r "$charlm" --config "$mode.json" --steps $steps --eval-every $steps --quiet &
    pids="$pids $!"
  done
  netns_wait_ranks
  got=$(val "$mode.h2.0.out" "$mode.h2.1.out" "$mode.h2.2.out" "$mode.h2.3.out")
  [ $status = 0 ] && [ "$(echo "$got" | wc -l)" = 1 ] &&
    [ "$(cat "$mode.h2.0.out" "$mode.h2.1.out" "$mode.h2.2.out" "$mode.h2.3.out" | grep -c 'val_loss=')" = 4 ]
  ok $? "$mode on 4 ranks on 2 namespace hosts: val_loss $got"
  if [ $status != 0 ]; then
    echo "# exit statuses of ranks 0 1 2 3:$statuses"
    tail -n 5 "$mode.h2.0.out" "$mode.h2.1.out" "$mode.h2.2.out" "$mode.h2.3.out" | sed 's/^/# /'
  fi
  eval "h2_$(echo $mode | tr - _)=\$got"
done
if [ $short = yes ]; then
  # too few steps for the 1%; hpZ's bits still
  [ -n "$h2_hpz2" ] && [ "$h2_hpz2" = "$h2_qwz_qgz" ]
  ok $? "hpZ over each host on 2 hosts: the bits of qwZ + qgZ ($h2_hpz2, $h2_qwz_qgz; $steps steps under the sanitizers, too few to compare with the unquantized run)"
else
  awk -v a="$h2_qwz_qgz" -v b="$h2_plain" 'BEGIN { exit !(a != "" && b != "" && a != b && (a - b) / b <= 0.01 && (b - a) / b <= 0.01) }' &&
    [ "$h2_hpz2" = "$h2_qwz_qgz" ]
  ok $? "qwZ + qgZ (two levels) within 1% of the unquantized run on 2 hosts, hpZ over each host the same bits: $h2_qwz_qgz against $h2_plain ($(awk -v a="$h2_qwz_qgz" -v b="$h2_plain" 'BEGIN { if (b != "") printf "%+.3f%%", (a - b) / b * 100 }')), hpZ $h2_hpz2"
fi
exit $fail
