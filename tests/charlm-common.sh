# charlm-common.sh — sourced by the shell tests that run the example
# trainer (examples/charlm); not a test itself. Sets top_builddir, srcdir,
# charlm, configs and words, and defines the TAP helpers they share. A
# test sources it as
#   . "${G_TEST_SRCDIR:-$(dirname "$0")}/charlm-common.sh"
# then calls charlm_setup NAME.

top_builddir=${MIXPREC_TOP_BUILDDIR:-.}
srcdir=${G_TEST_SRCDIR:-$(dirname "$0")}/..
charlm=$top_builddir/examples/charlm
configs=$srcdir/examples/configs
words=/usr/share/dict/american-english

# charlm_setup NAME: skips the test without a word list, bails out without
# the trainer, and makes the scratch folder $tmp (removed on exit).
charlm_setup () {
  if [ ! -r "$words" ]; then
    echo "1..0 # SKIP $words is missing (Debian package wamerican)"
    exit 0
  fi
  if [ ! -x "$charlm" ]; then
    echo "Bail out! $charlm is not built"
    exit 1
  fi
  tmp=$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX") || exit 1
  trap 'rm -rf "$tmp"' EXIT
  n=0
}

ok () {
  n=$((n + 1))
  echo "ok $n - $1"
}

not_ok () {
  n=$((n + 1))
  echo "not ok $n - $1"
}

# check DESCRIPTION AWK-CONDITION VALUES...: passes when the awk condition,
# over the variables a, b, c (the values), holds.
check () {
  description=$1
  condition=$2
  shift 2
  if awk -v a="$1" -v b="${2:-0}" -v c="${3:-0}" "BEGIN { exit !($condition) }"; then
    ok "$description"
  else
    not_ok "$description"
    echo "# values: $*"
  fi
}

# run NAME CONFIG [OPTIONS...]: a run with the options in $run_options;
# its stdout goes to $tmp/NAME.out, its stderr (setup and the weights
# report) to $tmp/NAME.err, its exit status to $tmp/NAME.rc.
run () {
  name=$1
  config=$2
  shift 2
  # shellcheck disable=SC2086  # $run_options is a list of options
  "$charlm" --config "$configs/$config" --words "$words" $run_options \
    --csv "$tmp/$name.csv" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err"
  echo $? >"$tmp/$name.rc"
}

# The final line of run NAME, val_loss=<value>.
val_loss () {
  sed -n '$s/^val_loss=\([0-9.]*\)$/\1/p' "$tmp/$1.out"
}

# distinct NAME PARAM: how many distinct values the run's last evaluation
# multiplied with in PARAM ("h1.weight: ..., 231 distinct values in 15360").
distinct () {
  sed -n "s/^charlm:   $2: .*, \([0-9]*\) distinct values in [0-9]*\$/\1/p" "$tmp/$1.err"
}

# runs_ok NAME: exit status 0 and a val_loss line, else the run's output.
runs_ok () {
  if [ "$(cat "$tmp/$1.rc")" = 0 ] && [ -n "$(val_loss "$1")" ]; then
    ok "$1 run exits 0 and ends with val_loss=$(val_loss "$1")"
  else
    not_ok "$1 run exits 0 and ends with val_loss=<number>"
    sed 's/^/# /' "$tmp/$1.out" "$tmp/$1.err"
  fi
}
