# package-test-lib.sh — what the packaging checks (install-test.sh,
# rpm-test.sh, repro-test.sh) share: TAP output and the release tarball.
# Sourced, not run; the caller sets srcdir, work, tarball, n=0 and failed=0.
# shellcheck shell=bash disable=SC2034,SC2154

say () { echo "# $*"; }
ok () { n=$((n + 1)); echo "ok $n - $1"; }
# not_ok NAME [LOG]: a failed step, with the end of its log
not_ok () {
  n=$((n + 1)); failed=1
  echo "not ok $n - $1"
  [ -n "${2:-}" ] && [ -f "$2" ] && tail -n 40 "$2" | sed 's/^/#   /'
}
# step NAME LOG COMMAND...: runs COMMAND with its output in LOG
step () {
  local name=$1 log=$2
  shift 2
  if "$@" >"$log" 2>&1; then ok "$name"; return 0; fi
  not_ok "$name" "$log"
  return 1
}
bail () {
  echo "Bail out! $*"
  exit 1
}

# ensure_tarball: leaves in $tarball the release tarball to test: the one
# the caller was given, else a fresh `make dist` of $srcdir, made in a
# scratch build folder under $work so that the tree stays as it is.
ensure_tarball () {
  if [ -z "$tarball" ]; then
    if [ ! -x "$srcdir/configure" ]; then
      (cd "$srcdir" && ./autogen.sh) >"$work/autogen.log" 2>&1 ||
        { sed 's/^/#   /' "$work/autogen.log"; bail "autogen.sh failed"; }
    fi
    mkdir -p "$work/dist"
    if (cd "$work/dist" && "$srcdir/configure" --disable-introspection --without-ucx --without-cuda &&
        make dist) >"$work/dist.log" 2>&1; then
      tarball=$(ls "$work"/dist/libmixprec-*.tar.xz)
      ok "make dist: $(basename "$tarball")"
    else
      not_ok "make dist" "$work/dist.log"
      exit 1
    fi
  fi
  [ -f "$tarball" ] || bail "no tarball $tarball"
}
