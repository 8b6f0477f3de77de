#!/bin/sh
# test-mixprec-run.sh — the local launcher: the rank variables each rank
# sees, the "[RANK] " prefix on stdout and stderr, the first failure ending
# the job (by status or by signal, quickly, with a message naming the rank),
# SIGTERM reaching the ranks, usage errors, and a real three-rank
# rendezvous through test-bootstrap's child mode. Prints TAP.

top=${MIXPREC_TOP_BUILDDIR:-.}
run="$top/tools/mixprec-run"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/mixprec-run-XXXXXX") || exit 99
background=
stopped=
cleanup () {
  [ -n "$background" ] && kill -KILL "$background" 2>/dev/null
  [ -n "$stopped" ] && kill -KILL "$stopped" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT

n=0
# this job's ranks must not look like part of an outer launcher's job
unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT

ok () {
  n=$((n + 1))
  echo "ok $n - $1"
}

not_ok () {
  n=$((n + 1))
  echo "not ok $n - $1"
  sed 's/^/# out: /' "$tmp/out"
  sed 's/^/# err: /' "$tmp/err"
}

check () {
  if [ "$1" = 0 ]; then ok "$2"; else not_ok "$2"; fi
}

# launch ARGS...: runs mixprec-run; output in $tmp/out and $tmp/err,
# exit status in $status, wall time in $elapsed_ms
launch () {
  start=$(date +%s%3N)
  "$run" "$@" >"$tmp/out" 2>"$tmp/err"
  status=$?
  elapsed_ms=$(( $(date +%s%3N) - start ))
}

# has FILE TEXT: some line of FILE is exactly TEXT
has () {
  grep -F -x -q -e "$2" "$1"
}

# contains FILE TEXT: some line of FILE contains TEXT
contains () {
  grep -F -q -e "$2" "$1"
}

echo "1..27"

launch -n 3 sh -c 'echo rank $MIXPREC_RANK of $MIXPREC_WORLD_SIZE'
sort "$tmp/out" > "$tmp/sorted"
printf '[0] rank 0 of 3\n[1] rank 1 of 3\n[2] rank 2 of 3\n' > "$tmp/expected"
cmp -s "$tmp/sorted" "$tmp/expected" && [ "$status" = 0 ] && [ ! -s "$tmp/err" ]
check $? "three ranks, each line prefixed with its rank; exit 0"

launch -n 2 sh -c 'echo $MIXPREC_RANK $MIXPREC_LOCAL_RANK $MIXPREC_LOCAL_WORLD_SIZE $MIXPREC_MASTER_ADDR $MIXPREC_MASTER_PORT ${MIXPREC_TIMEOUT-unset}'
port=$(sed -n 's/^\[0\] 0 0 2 127\.0\.0\.1 \([0-9][0-9]*\) unset$/\1/p' "$tmp/out")
[ -n "$port" ] && [ "$port" -ge 1 ] && [ "$port" -le 65535 ] && has "$tmp/out" "[1] 1 1 2 127.0.0.1 $port unset"
check $? "local rank, local world size, address and a free port, the same for every rank"

# torchrun's rank variables too, as torchrun sets them; not the address
launch -n 2 sh -c 'echo $RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE ${MASTER_ADDR-unset} ${MASTER_PORT-unset}'
has "$tmp/out" "[0] 0 2 0 2 unset unset" && has "$tmp/out" "[1] 1 2 1 2 unset unset" && [ ! -s "$tmp/err" ]
check $? "RANK, WORLD_SIZE, LOCAL_RANK and LOCAL_WORLD_SIZE as torchrun sets them"

# each rank's CPU kernels: its share of the processors nproc(1) counts
# (the affinity mask), unless the caller chose
share=$(( $(nproc) / 3 )); [ "$share" -ge 1 ] || share=1
unset MIXPREC_NUM_THREADS
launch -n 3 sh -c 'echo threads $MIXPREC_NUM_THREADS'
a=$(grep -c "threads $share\$" "$tmp/out")
launch -n 1 sh -c 'echo threads ${MIXPREC_NUM_THREADS-unset}'
b=$(grep -c 'threads unset$' "$tmp/out")
MIXPREC_NUM_THREADS=7 "$run" -n 2 sh -c 'echo threads $MIXPREC_NUM_THREADS' >"$tmp/out" 2>"$tmp/err"
c=$(grep -c 'threads 7$' "$tmp/out")
[ "$a" = 3 ] && [ "$b" = 1 ] && [ "$c" = 2 ]
check $? "MIXPREC_NUM_THREADS: the processors divided by the ranks, not set for one rank, an inherited value kept"

# inside another launcher's job they are left alone, with a note
RANK=5 "$run" -n 2 sh -c 'echo ${RANK-unset} ${WORLD_SIZE-unset} ${LOCAL_RANK-unset} $MIXPREC_RANK' \
  >"$tmp/out" 2>"$tmp/err"
has "$tmp/out" "[0] 5 unset unset 0" && has "$tmp/out" "[1] 5 unset unset 1" \
  && contains "$tmp/err" "mixprec-run: RANK is set already"
check $? "an inherited RANK: the torchrun variables are left as they are, with a note"

launch -n 1 --port 23456 --timeout 2.5 --addr 127.0.0.1 sh -c 'echo $MIXPREC_MASTER_PORT $MIXPREC_TIMEOUT'
has "$tmp/out" "[0] 23456 2.5" && [ "$status" = 0 ]
check $? "--port and --timeout reach the ranks"

launch -n 2 sh -c 'echo to-stdout; echo to-stderr >&2'
has "$tmp/out" "[1] to-stdout" && has "$tmp/err" "[1] to-stderr" && ! contains "$tmp/out" "to-stderr" \
  && ! contains "$tmp/err" "to-stdout"
check $? "stderr is prefixed too, and stays on stderr"

launch -n 1 sh -c 'printf "a\nb\n\nno newline"'
printf '[0] a\n[0] b\n[0] \n[0] no newline\n' > "$tmp/expected"
cmp -s "$tmp/out" "$tmp/expected"
check $? "several lines in one write, an empty line, and a final partial line"

launch -n 1 sh -c 'printf "\001\377\000x\n"'
printf '[0] \001\377\000x\n' > "$tmp/expected"
cmp -s "$tmp/out" "$tmp/expected"
check $? "bytes pass through unchanged"

launch -n 3 sh -c 'if [ $MIXPREC_RANK = 1 ]; then echo failing; exit 3; fi; sleep 30'
[ "$status" = 3 ] && has "$tmp/err" "mixprec-run: rank 1 exited with status 3" && has "$tmp/out" "[1] failing" \
  && [ "$elapsed_ms" -lt 7000 ]
check $? "a failing rank: its status, a message naming it, the sleeping ranks ended at once (${elapsed_ms} ms)"

# rank 0 fails only once rank 1 ignores SIGTERM
export MIXPREC_TEST_FLAG="$tmp/trapped"
launch -n 2 --grace 1 sh -c 'if [ $MIXPREC_RANK = 0 ]; then
    while [ ! -e "$MIXPREC_TEST_FLAG" ]; do sleep 0.05; done; exit 5
  fi
  trap "" TERM; touch "$MIXPREC_TEST_FLAG"; sleep 30'
unset MIXPREC_TEST_FLAG
[ "$status" = 5 ] && [ "$elapsed_ms" -ge 900 ] && [ "$elapsed_ms" -lt 3000 ]
check $? "a rank that ignores SIGTERM is killed after the grace period (${elapsed_ms} ms)"

launch -n 2 sh -c 'if [ $MIXPREC_RANK = 0 ]; then kill -SEGV $$; fi; sleep 30'
[ "$status" = 139 ] && has "$tmp/err" "mixprec-run: rank 0 was killed by signal SIGSEGV" && [ "$elapsed_ms" -lt 7000 ]
check $? "a rank killed by a signal: 128 + signal, a message naming the signal"

"$run" -n 2 sh -c 'trap "echo got TERM; exit 7" TERM; echo ready; sleep 30 & wait $!' >"$tmp/out" 2>"$tmp/err" &
background=$!
tries=0
while [ "$(grep -c ready "$tmp/out" 2>/dev/null)" != 2 ] && [ $tries -lt 100 ]; do
  sleep 0.1
  tries=$((tries + 1))
done
kill -TERM "$background"
wait "$background"
status=$?
background=
[ "$status" = 7 ] && has "$tmp/out" "[0] got TERM" && has "$tmp/out" "[1] got TERM" \
  && contains "$tmp/err" "got SIGTERM, passing it to the ranks"
check $? "SIGTERM to mixprec-run reaches every rank; exit with what the ranks did (7)"

# ranks that end cleanly on the signal: mixprec-run says so (0), and
# ranks the signal kills: 128 + SIGTERM
for rank_exit in 0 default; do
  if [ $rank_exit = 0 ]; then handler='trap "exit 0" TERM;'; want=0; else handler=; want=143; fi
  # not the last job's "ready" lines: the new job truncates them only once it runs
  rm -f "$tmp/out" "$tmp/err"
  "$run" -n 2 sh -c "$handler echo ready; sleep 30 & wait \$!" >"$tmp/out" 2>"$tmp/err" &
  background=$!
  tries=0
  while [ "$(grep -c ready "$tmp/out" 2>/dev/null)" != 2 ] && [ $tries -lt 100 ]; do
    sleep 0.1
    tries=$((tries + 1))
  done
  kill -TERM "$background"
  wait "$background"
  status=$?
  background=
  [ "$status" = $want ]
  check $? "after a forwarded SIGTERM, ranks that exit $rank_exit: mixprec-run exits $want (got $status)"
done

# mixprec-run SIGKILLed: nothing it started survives, not the ranks and
# not what they started (the guardian ends their process groups)
rm -f "$tmp/out" "$tmp/err"
"$run" -n 2 --grace 1 sh -c 'sleep 300 & echo "child $!"; echo "rank $$"; wait' >"$tmp/out" 2>"$tmp/err" &
background=$!
tries=0
while [ "$(grep -c 'child\|rank' "$tmp/out" 2>/dev/null)" != 4 ] && [ $tries -lt 100 ]; do
  sleep 0.1
  tries=$((tries + 1))
done
pids=$(sed -n 's/^\[[0-9]\] \(child\|rank\) \([0-9][0-9]*\)$/\2/p' "$tmp/out")
kill -KILL "$background"
wait "$background" 2>/dev/null
background=
tries=0
alive=$pids
while [ -n "$alive" ] && [ $tries -lt 50 ]; do
  sleep 0.1
  tries=$((tries + 1))
  left=
  for p in $alive; do
    # a zombie is dead: only a process that still runs counts
    if [ -e /proc/$p ] && ! grep -q '^State:.*Z' /proc/$p/status 2>/dev/null; then left="$left $p"; fi
  done
  alive=$left
done
[ "$(echo $pids | wc -w)" = 4 ] && [ -z "$alive" ]
check $? "mixprec-run SIGKILLed: its ranks and their children are gone within 5 s (left:${alive:- none})"

# every job gets its own secret; a secret file of the caller's is not passed on
MIXPREC_JOB_SECRET_FILE=/nonexistent launch -n 2 sh -c 'echo ${#MIXPREC_JOB_SECRET} ${MIXPREC_JOB_SECRET_FILE-unset}'
has "$tmp/out" "[0] 64 unset" && has "$tmp/out" "[1] 64 unset"
check $? "the ranks get a fresh 32-byte MIXPREC_JOB_SECRET, and no MIXPREC_JOB_SECRET_FILE"
a=$(sed -n 's/^\[0\] //p' "$tmp/out")
launch -n 1 sh -c 'echo $MIXPREC_JOB_SECRET'
b=$(sed -n 's/^\[0\] //p' "$tmp/out")
launch -n 1 sh -c 'echo $MIXPREC_JOB_SECRET'
[ -n "$b" ] && [ "$b" != "$(sed -n 's/^\[0\] //p' "$tmp/out")" ]
check $? "each job has a different secret"

# rank 0 inherits the port mixprec-run bound; the others do not. Every rank
# exits 0: a rank that failed (rank 1's test of an unset variable) would end
# the job, and could stop rank 0 before it printed.
launch -n 2 sh -c 'echo ${MIXPREC_BOOTSTRAP_LISTEN_FD-none}; if [ -n "$MIXPREC_BOOTSTRAP_LISTEN_FD" ] && [ -e /proc/$$/fd/$MIXPREC_BOOTSTRAP_LISTEN_FD ]; then echo held; fi'
grep -q '^\[0\] [0-9]' "$tmp/out" && has "$tmp/out" "[0] held" && has "$tmp/out" "[1] none"
check $? "rank 0 inherits the listening socket (MIXPREC_BOOTSTRAP_LISTEN_FD); rank 1 does not"

launch -n 1 sh -c 'echo "args: $*"' sh -n 5 --port x
has "$tmp/out" "[0] args: -n 5 --port x"
check $? "the program's own options pass through"

launch -n 2 -- sh -c 'echo plain'
has "$tmp/out" "[0] plain" && has "$tmp/out" "[1] plain"
check $? "-- before the program"

launch -n 2 --no-prefix sh -c 'echo plain'
[ "$(cat "$tmp/out")" = "$(printf 'plain\nplain')" ]
check $? "--no-prefix leaves the output alone"

launch -n 0 true
[ "$status" = 2 ] && contains "$tmp/err" "-n must be from 1 to"
check $? "-n 0 is a usage error (exit 2)"

ok_usage=0
for args in "true" "-n 2" "--bogus -n 2 true" "-n 2 --port 70000 true" "-n 2 --timeout soon true" "-n x true"; do
  # shellcheck disable=SC2086
  launch $args
  if [ "$status" != 2 ] || ! contains "$tmp/err" "mixprec-run: "; then
    echo "# '$args' gave status $status"
    ok_usage=1
  fi
done
check $ok_usage "missing -n or program, unknown options and bad values exit 2 with a message"

launch -n 2 "$tmp/does-not-exist"
[ "$status" = 127 ] && contains "$tmp/err" "mixprec-run: cannot start rank 0:"
check $? "a program that cannot start: exit 127, naming the rank"

if [ -x "$top/tests/test-bootstrap" ]; then
  launch -n 3 --timeout 10 "$top/tests/test-bootstrap" --child gather
  sort "$tmp/out" > "$tmp/sorted"
  printf '[0] ok\n[1] ok\n[2] ok\n' > "$tmp/expected"
  cmp -s "$tmp/sorted" "$tmp/expected" && [ "$status" = 0 ]
  check $? "three real ranks meet through the bootstrap and all-gather"
else
  ok "three real ranks meet through the bootstrap # SKIP tests/test-bootstrap not built"
fi

# A rank stopped in the middle of training: the other rank's collective
# fails after --timeout (MIXPREC_TIMEOUT, which mixprec_engine_new honours),
# naming the timeout, and mixprec-run ends the stopped rank too.
if [ -x "$top/tests/test-bootstrap" ]; then
  "$run" -n 2 --timeout 3 "$top/tests/test-bootstrap" --child engine >"$tmp/out" 2>"$tmp/err" &
  background=$!
  tries=0
  while ! grep -q '^\[1\] stepping' "$tmp/out" && kill -0 "$background" 2>/dev/null \
        && [ $tries -lt 300 ]; do
    sleep 0.1
    tries=$((tries + 1))
  done
  stopped=$(sed -n 's/^\[1\] stepping \([0-9][0-9]*\)$/\1/p' "$tmp/out")
  if [ -z "$stopped" ] && contains "$tmp/err" "communication backend"; then
    kill -KILL "$background" 2>/dev/null
    wait "$background"
    background=
    ok "a stopped rank ends the job after --timeout # SKIP no multi-process comm backend"
  else
    start=$(date +%s%3N)
    [ -n "$stopped" ] && kill -STOP "$stopped"
    # mixprec-run itself is not stopped: a watchdog for a job that hangs
    ( sleep 30; kill -KILL "$background" 2>/dev/null ) &
    watchdog=$!
    wait "$background"
    status=$?
    elapsed_ms=$(( $(date +%s%3N) - start ))
    background=
    kill "$watchdog" 2>/dev/null
    [ -n "$stopped" ] && [ "$status" = 1 ] && [ "$elapsed_ms" -lt 10000 ] \
      && contains "$tmp/err" "the timeout is 3000 ms (MIXPREC_TIMEOUT or mixprec.timeout)" \
      && ! kill -0 "$stopped" 2>/dev/null
    check $? "a stopped rank ends the job after --timeout 3, with a message naming it (${elapsed_ms} ms)"
    stopped=
  fi
else
  ok "a stopped rank ends the job after --timeout # SKIP tests/test-bootstrap not built"
fi
