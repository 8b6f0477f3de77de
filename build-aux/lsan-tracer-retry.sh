#!/bin/sh
# lsan-tracer-retry.sh COMMAND... — runs a test under the sanitizers and
# runs it again (twice at most) when it failed only because LeakSanitizer
# could not stop the process's threads at exit: the tool then prints
# "LeakSanitizer has encountered a fatal error" without checking anything.
# It is a known intermittent fault of LeakSanitizer's ptrace-based tracer
# on loaded machines, hit here by the multi-process tests, whose ranks all
# run their leak checks at the same moment. A leak report ("detected memory
# leaks"), any other sanitizer report and any other failure end the test
# at once, as without this script.
out=$(mktemp) || exit 99
err=$(mktemp) || exit 99
trap 'rm -f "$out" "$err"' EXIT

attempt=1
while :; do
  "$@" >"$out" 2>"$err"
  status=$?
  if [ $status = 0 ] || [ $attempt = 3 ] ||
     ! grep -q 'LeakSanitizer has encountered a fatal error' "$out" "$err" ||
     grep -q 'detected memory leaks' "$out" "$err"; then
    break
  fi
  echo "# LeakSanitizer's tracer failed in attempt $attempt; running the test again" >&2
  grep -h 'Sanitizer' "$out" "$err" | sed 's/^/# attempt '"$attempt"': /' >&2
  attempt=$((attempt + 1))
done
cat "$out"
cat "$err" >&2
exit $status
