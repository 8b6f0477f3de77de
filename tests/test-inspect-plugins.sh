#!/bin/sh
# test-inspect-plugins.sh — mixprec-inspect's plugin listing and details,
# against the build tree's optimizer plugins and the test plugins of
# tests/plugins/ (three valid, ten broken), and the built-in plugin.
# Prints TAP.

top=${MIXPREC_TOP_BUILDDIR:-.}
inspect="$top/tools/mixprec-inspect"
test_plugins="$top/tests/plugins"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/mixprec-inspect-XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT

n=0
failed=0

ok () {
  n=$((n + 1))
  echo "ok $n - $1"
}

not_ok () {
  n=$((n + 1))
  failed=1
  echo "not ok $n - $1"
  sed 's/^/# /' "$tmp/out" "$tmp/err"
}

skip () {
  n=$((n + 1))
  echo "ok $n - $1 # SKIP $2"
}

# run EXPECTED-STATUS ARGS...: runs mixprec-inspect, output in $tmp/out and $tmp/err
run () {
  expected=$1
  shift
  "$inspect" "$@" >"$tmp/out" 2>"$tmp/err"
  status=$?
  [ "$status" -eq "$expected" ]
}

# has FILE TEXT: the fixed string TEXT is one of FILE's lines' contents
has () {
  grep -F -q -e "$2" "$1"
}

echo "1..23"

# The build tree's optimizer plugins (make check puts plugins/ on MIXPREC_PLUGIN_PATH).
if run 0 && has "$tmp/out" "Total count: "; then
  ok "listing ends with the totals"
else
  not_ok "listing ends with the totals"
fi
if [ -d "$top/plugins/.libs" ]; then
  if run 0 && has "$tmp/out" "optim-adamw:  adamw (optimizer, cpu, rank " &&
     has "$tmp/out" "optim-sgd:  sgd (optimizer, cpu, rank " &&
     has "$tmp/out" "optim-lion:  lion (optimizer, cpu, rank "; then
    ok "listing shows adamw, sgd and lion for cpu"
  else
    not_ok "listing shows adamw, sgd and lion for cpu"
  fi
  if run 0 adamw && has "$tmp/out" "Feature Details:" && has "$tmp/out" "Hyper-parameters (" &&
     grep -E -q '^  lr +: ' "$tmp/out" && grep -E -q 'Double\. Range: .* Default: ' "$tmp/out"; then
    ok "adamw details list its hyper-parameters"
  else
    not_ok "adamw details list its hyper-parameters"
  fi
else
  skip "listing shows adamw, sgd and lion for cpu" "no plugins built in plugins/.libs"
  skip "adamw details list its hyper-parameters" "no plugins built in plugins/.libs"
fi

# The test plugins: three valid, ten broken.
MIXPREC_PLUGIN_PATH=$test_plugins
export MIXPREC_PLUGIN_PATH

if run 0 && has "$tmp/out" "test-good:  testopt (optimizer, cpu, rank 100): momentum SGD for the registry tests"; then
  ok "listing shows a feature line per feature"
else
  not_ok "listing shows a feature line per feature"
fi
if has "$tmp/out" "Total count: 4 plugins, 7 features"; then
  ok "totals count the loaded plugins and their features"
else
  not_ok "totals count the loaded plugins and their features"
fi
if has "$tmp/out" "Failed to load: 10 plugins"; then
  ok "failures are counted"
else
  not_ok "failures are counted"
fi
if has "$tmp/out" "mixprec-test-abi-major.so: built for plugin ABI 2.0, this libmixprec supports 1.0" &&
   has "$tmp/out" "mixprec-test-init-fails.so: plugin 'test-init-fails' failed to initialise: the test accelerator is not present"; then
  ok "each failure names the file and the reason"
else
  not_ok "each failure names the file and the reason"
fi

if run 0 testopt && has "$tmp/out" "Rank                     200" &&
   has "$tmp/out" "Rank                     100" &&
   has "$tmp/out" "Gradients                float32, float16, bfloat16" &&
   has "$tmp/out" "  momentum_buffer"; then
  ok "feature details: every feature of that name, dtypes, state"
else
  not_ok "feature details: every feature of that name, dtypes, state"
fi
if has "$tmp/out" "Integer. Range: 0 - 1000 Default: 10" &&
   has "$tmp/out" "Double. Range: 0 - inf Default: 0.001" &&
   has "$tmp/out" "Boolean. Default: false"; then
  ok "feature details: every hyper-parameter with type, range and default"
else
  not_ok "feature details: every hyper-parameter with type, range and default"
fi

if run 0 test-good && has "$tmp/out" "Plugin Details:" &&
   has "$tmp/out" "Filename                 $test_plugins/.libs/mixprec-test-good.so" &&
   has "$tmp/out" "Version                  1.2.3" &&
   has "$tmp/out" "License                  LGPL-2.1-or-later" &&
   has "$tmp/out" "ABI                      1.7" &&
   has "$tmp/out" "  2 features"; then
  ok "plugin details"
else
  not_ok "plugin details"
fi

# Which optimizer vtable each plugin speaks: the shipped ones revision 3
# (every state and master format), a plugin of ABI 1.0 revision 1 through
# the shim (float32 only).
if MIXPREC_PLUGIN_PATH="$top/plugins" run 0 adamw &&
   has "$tmp/out" "ABI                      optimizer v3 (MixprecOptimizerV3)" &&
   has "$tmp/out" "State                    float32, bfloat16" &&
   MIXPREC_PLUGIN_PATH="$top/plugins" run 0 optim-sgd && has "$tmp/out" "sgd (optimizer, cpu, rank 256, ABI: optimizer v3)" &&
   MIXPREC_PLUGIN_PATH="$top/tests/abi-plugins" run 0 sgdv1 &&
   has "$tmp/out" "ABI                      optimizer v1 (MixprecOptimizerV1)" &&
   has "$tmp/out" "State                    float32" &&
   has "$tmp/out" "State formats            float32" &&
   has "$tmp/out" "Master weights           float32"; then
  ok "optimizer ABI revision and state dtypes"
else
  not_ok "optimizer ABI revision and state dtypes"
fi
if MIXPREC_PLUGIN_PATH="$top/plugins" run 0 adamw &&
   has "$tmp/out" "State formats            float32, bfloat16, float16 block-scaled, bfloat16 block-scaled, float8 e4m3 block-scaled, int8 block-wise dynamic, int4 block-wise dynamic" &&
   has "$tmp/out" "Master weights           float32, remainder (bfloat16 + int16, exact), kahan (bfloat16 + bfloat16 compensation)"; then
  ok "the state and master formats an optimizer speaks"
else
  not_ok "the state and master formats an optimizer speaks"
fi

if run 0 && has "$tmp/out" "builtin:  local (comm, cpu, rank 0): a world of one process" &&
   has "$tmp/out" "test-comm:  testcomm (comm, cpu, rank 1)"; then
  ok "communicators are listed, the built-in one too"
else
  not_ok "communicators are listed, the built-in one too"
fi

if run 0 testcomm && has "$tmp/out" "Kind                     comm" &&
   has "$tmp/out" "Data types               float32" &&
   has "$tmp/out" "Buffers                  host memory" &&
   has "$tmp/out" "(comm ABI revision 1: no all_to_all)"; then
  ok "communicator details: data types and memory"
else
  not_ok "communicator details: data types and memory"
fi

if run 0 local && has "$tmp/out" "barrier, all_to_all; each blocking or started"; then
  ok "a communicator of revision 2 has the all-to-all"
else
  not_ok "a communicator of revision 2 has the all-to-all"
fi

if run 0 builtin && has "$tmp/out" "Filename                 (built into libmixprec)" &&
   has "$tmp/out" "  local (comm, cpu, rank 0)"; then
  ok "the built-in plugin has no file"
else
  not_ok "the built-in plugin has no file"
fi

if run 1 test-name-mismatch && has "$tmp/out" "Status                   failed to load" &&
   has "$tmp/out" "the plugin calls itself 'test-renamed'"; then
  ok "a plugin that failed: details with the reason, exit status 1"
else
  not_ok "a plugin that failed: details with the reason, exit status 1"
fi

if run 1 no-such-thing && has "$tmp/err" "No such plugin or feature 'no-such-thing'" &&
   [ ! -s "$tmp/out" ]; then
  ok "an unknown name exits with status 1"
else
  not_ok "an unknown name exits with status 1"
fi

# Issue 15, item 8: a misspelt name gets a suggestion; a file that is no
# shared object is never handed to the plugin loader.
if [ -d "$top/plugins/.libs" ]; then
  if MIXPREC_PLUGIN_PATH="$top/plugins" run 1 adamv &&
     has "$tmp/err" "No such plugin or feature 'adamv'; did you mean 'adamw'?" &&
     MIXPREC_PLUGIN_PATH="$top/plugins" run 1 optim-sdg && has "$tmp/err" "did you mean 'optim-sgd'?" &&
     MIXPREC_PLUGIN_PATH="$top/plugins" run 1 zzzzzz && ! has "$tmp/err" "did you mean"; then
    ok "a misspelt feature or plugin name suggests the likely one"
  else
    not_ok "a misspelt feature or plugin name suggests the likely one"
  fi
else
  skip "a misspelt feature or plugin name suggests the likely one" "no plugins built"
fi
printf 'root:x:0:0:root:/root:/bin/sh\n' >"$tmp/passwd"
if run 1 "$tmp/passwd" && has "$tmp/err" "$tmp/passwd: not a plugin file: a plugin is a shared object" &&
   [ ! -s "$tmp/out" ] && run 1 /etc/passwd && has "$tmp/err" "/etc/passwd: not a plugin file"; then
  ok "a text file given by its path is not a plugin file"
else
  not_ok "a text file given by its path is not a plugin file"
fi
if run 1 "$tmp/missing.so" && has "$tmp/err" "$tmp/missing.so: not a plugin file: no such file" &&
   run 1 "$tmp" && has "$tmp/err" "$tmp: not a plugin file: not a regular file"; then
  ok "a missing file or a folder given by its path is not a plugin file"
else
  not_ok "a missing file or a folder given by its path is not a plugin file"
fi

# An empty search path from here on.
MIXPREC_PLUGIN_PATH=

if run 0 "$test_plugins/.libs/mixprec-test-good.so" &&
   has "$tmp/out" "Name                     test-good"; then
  ok "a plugin file given by its path"
else
  not_ok "a plugin file given by its path"
fi

if run 0 && has "$tmp/out" "Total count: 1 plugin, 1 feature" &&
   has "$tmp/out" "the plugin search path is empty"; then
  ok "an empty search path is explained"
else
  not_ok "an empty search path is explained"
fi

exit $failed
