#!/bin/sh
# test-version-macros.sh — the availability and deprecation macros of
# <mixprec/mixprec-version.h> do what their documentation says, for a
# program compiled against the build tree's headers: API of 1.1 (functions
# and the GTypes of enums added in 1.1) warns under
# MIXPREC_VERSION_MAX_ALLOWED=MIXPREC_VERSION_1_0 and 1.0 API does not;
# MIXPREC_DEPRECATED_IN_1_1[_FOR] warn from MIXPREC_VERSION_MIN_REQUIRED
# 1.1 (the default) and not below it, nor with
# MIXPREC_DISABLE_DEPRECATION_WARNINGS. Compiles only (-c). Prints TAP.
top_builddir=${MIXPREC_TOP_BUILDDIR:-.}
cc=${CC:-cc}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/test-version-macros.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT

# The dependencies' flags as configure found them, else pkg-config's.
cflags=${MIXPREC_DEPS_CFLAGS:-$(pkg-config --cflags glib-2.0 gobject-2.0 gio-2.0 json-glib-1.0 2>/dev/null)}
if [ -z "$cflags" ]; then
  echo "1..0 # SKIP neither MIXPREC_DEPS_CFLAGS nor pkg-config gives GLib's compiler flags"; exit 0
fi

n=0
# compiles NAME EXPECT(clean|warns) WARNING_TEXT BODY [CPPFLAGS...]
compiles () {
  name=$1 expect=$2 text=$3 body=$4; shift 4
  n=$((n + 1))
  cat >"$tmp/t.c" <<EOC
#include <mixprec/mixprec.h>
MIXPREC_DEPRECATED_IN_1_1 void old_function (void);
MIXPREC_DEPRECATED_IN_1_1_FOR (new_function) void replaced_function (void);
void use (void);
void use (void) { $body }
EOC
  # shellcheck disable=SC2086
  if $cc -c -Wall -Werror "$@" -I"$top_builddir/include" $cflags -o "$tmp/t.o" "$tmp/t.c" \
       >"$tmp/cc.log" 2>&1; then
    got=clean
  else
    got=warns
  fi
  if [ $got = $expect ] && { [ $got = clean ] || grep -q "$text" "$tmp/cc.log"; }; then
    echo "ok $n - $name"
  else
    echo "not ok $n - $name (expected the compiler to be $expect, it $got)"
    sed 's/^/#   /' "$tmp/cc.log"
  fi
}

echo "1..9"
max10=-DMIXPREC_VERSION_MAX_ALLOWED=MIXPREC_VERSION_1_0
min10=-DMIXPREC_VERSION_MIN_REQUIRED=MIXPREC_VERSION_1_0
compiles "1.1 API compiles cleanly by default" clean "" \
  'g_autoptr(MixprecConfig) c = mixprec_config_new_from_string ("{}", NULL); (void) c;'
compiles "1.1 API warns under MAX_ALLOWED 1.0" warns "mixprec_config_new_from_string" \
  'g_autoptr(MixprecConfig) c = mixprec_config_new_from_string ("{}", NULL); (void) c;' \
  "$max10" "$min10"
compiles "1.0 API compiles cleanly under MAX_ALLOWED 1.0" clean "" \
  'g_autoptr(MixprecConfig) c = mixprec_config_new_from_data ("{}", -1, NULL); (void) c;' \
  "$max10" "$min10"
compiles "the GType of an enum added in 1.1 warns under MAX_ALLOWED 1.0" warns "mixprec_fp8_role_get_type" \
  'g_type_ensure (MIXPREC_TYPE_FP8_ROLE);' "$max10" "$min10"
compiles "the GType of a 1.0 enum compiles cleanly under MAX_ALLOWED 1.0" clean "" \
  'g_type_ensure (MIXPREC_TYPE_DTYPE);' "$max10" "$min10"
compiles "DEPRECATED_IN_1_1 warns by default (MIN_REQUIRED is the current version)" warns "old_function" \
  'old_function ();'
compiles "DEPRECATED_IN_1_1_FOR names the replacement" warns "new_function" \
  'replaced_function ();'
compiles "DEPRECATED_IN_1_1 is silent under MIN_REQUIRED 1.0" clean "" \
  'old_function (); replaced_function ();' "$min10"
compiles "DEPRECATED_IN_1_1 is silent with MIXPREC_DISABLE_DEPRECATION_WARNINGS" clean "" \
  'old_function (); replaced_function ();' -DMIXPREC_DISABLE_DEPRECATION_WARNINGS
