# netns-hosts.sh — sourced by the multi-host tests and the bytes bench:
# three "hosts" made of network namespaces "$tag-0" .. "$tag-2" joined by
# a bridge in "$tag-hub", 10.77.0.1 .. 10.77.0.3/24 on each host's eth0.
# A rank runs in its host with `ip netns exec "$tag-$r" unshare --pid
# --fork --kill-child --mount-proc --uts ...`, so that it also has a PID
# namespace and a host name of its own; netns_make_hosts checks that this
# works.
#
# The caller sources this file, then calls netns_begin TAG: a temporary
# folder $tmp, the namespaces' prefix $tag, and a trap that on every exit
# kills the processes in $pids, deletes the namespaces in $made and
# removes $tmp. It defines skip MESSAGE, which must exit.

netns_begin () {
  tmp=$(mktemp -d)
  tag="$1$$"
  hub="$tag-hub"
  made=""
  pids=""
  trap netns_cleanup EXIT
  trap 'exit 1' INT TERM HUP
}

netns_cleanup () {
  for pid in $pids; do kill "$pid" 2>/dev/null; done
  for ns in $made; do ip netns del "$ns" 2>/dev/null; done
  rm -rf "$tmp"
}

# Waits for the ranks whose pids $pids lists (started in the background;
# until then the cleanup trap kills any still running), keeps each one's
# exit status in $statuses (124: its timeout stopped it) and $status (1
# if any failed), empties $pids and returns $status.
netns_wait_ranks () {
  status=0
  statuses=""
  for pid in $pids; do
    wait "$pid"
    rc=$?
    statuses="$statuses $rc"
    [ $rc = 0 ] || status=1
  done
  pids=""
  return $status
}

# Skips unless this process can make namespaces.
netns_require () {
  [ "$(id -u)" = 0 ] || skip "making network namespaces needs root (running as uid $(id -u))"
  command -v ip >/dev/null 2>&1 || skip "ip (iproute2) is not installed"
  command -v unshare >/dev/null 2>&1 || skip "unshare (util-linux) is not installed"
}

# One step of the setup; a refusal skips with its first line of error.
netns_step () {
  "$@" 2>"$tmp/setup.err" && return 0
  skip "'$*' was refused: $(head -n 1 "$tmp/setup.err")"
}

netns_make_hosts () {
  hub="$tag-hub"
  netns_step ip netns add "$hub"
  made="$made $hub"
  netns_step ip -n "$hub" link add br0 type bridge
  netns_step ip -n "$hub" link set br0 up
  for r in 0 1 2; do
    ns="$tag-$r"
    netns_step ip netns add "$ns"
    made="$made $ns"
    netns_step ip link add eth0 netns "$ns" type veth peer name "p$r" netns "$hub"
    netns_step ip -n "$hub" link set "p$r" master br0
    netns_step ip -n "$hub" link set "p$r" up
    netns_step ip -n "$ns" addr add "10.77.0.$((r + 1))/24" dev eth0
    netns_step ip -n "$ns" link set eth0 up
    netns_step ip -n "$ns" link set lo up
  done
  netns_step ip netns exec "$tag-1" unshare --pid --fork --kill-child --mount-proc --uts true
}
