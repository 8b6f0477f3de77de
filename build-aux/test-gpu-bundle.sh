#!/bin/bash
# test-gpu-bundle.sh — proves that the GPU bundle (build-aux/gpu-bundle.sh)
# runs on a machine with none of libmixprec's dependencies: it copies the
# bundle into a fresh minimal Debian root (debootstrap --variant=minbase:
# no GLib, no json-glib, no CUDA, no NCCL, no Python, no GPU) and runs
# run.sh there, in a mount namespace of its own, then checks that
#   - the root really lacks GLib and CUDA (else the test proves nothing);
#   - ldd, inside the root, resolves every library of every program and
#     plugin of the bundle except the device-provided ones of MANIFEST;
#   - run.sh's loader and inspect steps pass (every program loads), every
#     GPU step skips with its reason, none fails;
#   - run.sh exits with 77, "skipped, not failed", and says so.
#
#   build-aux/test-gpu-bundle.sh [BUNDLE]      (default: _gpu)
#
# Needs root (chroot, mounts) and debootstrap; the root is made once in
# $FRESH_ROOT (default _build/fresh-root) from the first Debian mirror of
# apt's sources and kept for later runs. Prints TAP and a closing
# "N passed, N failed" line; exits 0 only when every check passed.
set -uo pipefail

srcdir=$(cd "$(dirname "$0")/.." && pwd)
bundle=${1:-"$srcdir/_gpu"}
root=${FRESH_ROOT:-"$srcdir/_build/fresh-root"}

die() { echo "Bail out! test-gpu-bundle: $*"; exit 1; }

[ "$(id -u)" = 0 ] || die "needs root (debootstrap, chroot and a mount namespace)"
[ -x "$bundle/run.sh" ] && [ -f "$bundle/MANIFEST" ] || die "no bundle at $bundle: run build-aux/gpu-bundle.sh first"
command -v debootstrap >/dev/null 2>&1 || die "debootstrap is missing (apt-get install debootstrap)"
command -v unshare >/dev/null 2>&1 || die "unshare (util-linux) is missing"

if [ ! -x "$root/bin/bash" ] || [ ! -f "$root/.fresh-root-complete" ]; then
  mirror=$(sed -n 's/^URIs: *\([^ ]*\).*/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null | grep -v security | head -n 1)
  [ -n "$mirror" ] || mirror=$(awk '$1 == "deb" && $2 !~ /security/ { print $2; exit }' /etc/apt/sources.list 2>/dev/null)
  mirror=${mirror:-http://deb.debian.org/debian}
  echo "# debootstrap --variant=minbase bookworm $root $mirror"
  rm -rf "$root"
  debootstrap --variant=minbase bookworm "$root" "$mirror" > "$root.log" 2>&1 ||
    die "debootstrap failed (see $root.log)"
  touch "$root/.fresh-root-complete"
fi

rm -rf "$root/opt/bundle" "$root/opt/out"
cp -a "$bundle" "$root/opt/bundle"
mkdir -p "$root/opt/out"

# Runs "$@" inside the root, with its own /proc, in a mount namespace that
# goes away with it.
in_root() {
  unshare --mount --fork sh -c 'root=$1; shift; mount -t proc proc "$root/proc" && exec chroot "$root" "$@"' \
    _ "$root" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root TMPDIR=/tmp OUT=/opt/out "$@"
}

n=0
passed=0
failed=0
check() {
  local what=$1; shift
  n=$((n + 1))
  if "$@"; then
    echo "ok $n - $what"; passed=$((passed + 1))
  else
    echo "not ok $n - $what"; failed=$((failed + 1))
  fi
}

echo "1..7"
check "the root has no GLib, json-glib, CUDA runtime, NCCL or Python" \
  bash -c '! ls "$0"/usr/lib/x86_64-linux-gnu/{libglib-2.0,libjson-glib-1.0,libcudart,libnccl}.so* "$0"/usr/bin/python3 >/dev/null 2>&1' "$root"

unresolved=$(in_root sh -c 'for f in $(find /opt/bundle -type f); do
    head -c 4 "$f" | grep -q ELF || continue
    LD_LIBRARY_PATH=/opt/bundle/lib ldd "$f" | sed -n "s|^[[:space:]]*\([^ ]*\) => not found|$f: \1|p"
  done')
echo "$unresolved" | sed 's/^/# unresolved: /'
check "ldd in the root resolves everything but libcuda.so.1 and libnccl.so.2" \
  bash -c '! echo "$0" | grep -v -E ": (libcuda\.so\.1|libnccl\.so\.2)$" | grep -q .' "$unresolved"

in_root /opt/bundle/run.sh > "$root/opt/out/run.txt" 2>&1
status=$?
sed 's/^/# /' "$root/opt/out/run.txt"
summary=$root/opt/out/summary.md
check "run.sh exits with 77 (skipped, not failed); it exited with $status" test "$status" = 77
check "summary.md says skipped, not failed" grep -q '^verdict: SKIPPED, not failed' "$summary"
check "the loader and inspect steps pass: every program loads" \
  bash -c 'grep -q "^| loader | PASS |" "$0" && grep -q "^| inspect | PASS |" "$0"' "$summary"
check "every GPU step skips with a reason" \
  bash -c 'for s in device-cuda comm-nccl engine-cuda fp8-cuda bench-adamw torch-adamw; do
             grep -Eq "^\| $s \| SKIP \| [0-9]+ \| .*(no cuda device|no CUDA device|no usable CUDA device|no libnccl|no Python with torch|driver)" "$0" || { echo "# $s did not skip with a reason"; exit 1; }
           done' "$summary"
check "no step failed, and logs.txt and results.tar.gz came back" \
  bash -c '! grep -q "| FAIL |" "$0/summary.md" && [ -s "$0/logs.txt" ] && [ -s "$0/results.tar.gz" ]' "$root/opt/out"

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
