#!/bin/sh
# test-docs-reference.sh — the HTML API reference that gi-docgen built
# (docs/local.mk): every conceptual page of docs/reference/mixprec.toml.in
# rendered with its own title and linked from the index, the class and
# method pages rendered from the doc comments, and a page for every
# function that introspection skips (C-only, with raw pointers) too.
# Prints TAP.
top_builddir=${MIXPREC_TOP_BUILDDIR:-.}
top_srcdir=${G_TEST_SRCDIR:-tests}/..
html=$top_builddir/docs/reference/html
toml=$top_srcdir/docs/reference/mixprec.toml.in
n=0
ok () { n=$((n + 1)); echo "ok $n - $1"; }
not_ok () { n=$((n + 1)); echo "not ok $n - $1"; [ -z "${2:-}" ] || echo "$2" | sed 's/^/#   /'; }
check () { # check NAME COMMAND...
  name=$1; shift
  if "$@"; then ok "$name"; else not_ok "$name"; fi
}

[ -f "$html/index.html" ] || { echo "Bail out! no $html/index.html: the reference was not built"; exit 1; }

# The content files, in the toml's order.
pages=$(sed -n '/^content_files = \[/,/^\]/p' "$toml" | sed -n 's/^ *"\([a-z0-9-]*\)\.md",*$/\1/p')
[ -n "$pages" ] || { echo "Bail out! no content_files in $toml"; exit 1; }

for page in $pages; do
  file=$html/$page.html
  title=$(sed -n '1s/^Title: //p' "$top_srcdir/docs/reference/$page.md")
  if [ ! -f "$file" ]; then
    not_ok "$page.html exists"
  elif ! grep -qF "<title>" "$file" || grep -q "Unknown document" "$file"; then
    not_ok "$page.html has its title" "$(grep -m1 '<title>' "$file")"
  elif ! grep -qF "$title" "$file"; then
    not_ok "$page.html has its title \"$title\"" "$(grep -m1 '<title>' "$file")"
  else
    ok "$page.html has its title \"$title\""
  fi
  check "index.html links $page.html" grep -q "href=\"$page.html\"" "$html/index.html"
done

# Pages rendered from the doc comments, one of them for a function that
# had none before (mixprec_param_get_master), with words of its comment.
check "class.Engine.html exists" test -f "$html/class.Engine.html"
check "method.Engine.step.html describes the step" grep -q "Runs the optimizer step" "$html/method.Engine.step.html"
check "method.Param.get_master.html has its description" \
  grep -q "gather_master" "$html/method.Param.get_master.html"
check "method.Param.set_grad.html has its description" \
  grep -q "round to nearest" "$html/method.Param.set_grad.html"
check "internals.html maps the engine's words to DeepSpeed's" \
  grep -q "independent partition gradient" "$html/internals.html"
check "internals.html draws one step" grep -q "reduce-scatter of unit k" "$html/internals.html"
check "the search index exists" test -s "$html/index.json"
check "the Devhelp book is named after the installed folder" test -s "$html/reference.devhelp2"

# Every (skip) function of the sources has a page of its own, which says
# that bindings cannot call it.
skipped=$(sed -n 's/^ \* \(mixprec_[a-z0-9_]*\): (skip)$/\1/p' "$top_srcdir"/libmixprec/*.c | sort -u)
absent=
for f in $skipped; do
  grep -l -F ">$f<" "$html"/*.html 2>/dev/null | xargs -r grep -q "not directly available" ||
    absent="$absent $f"
done
if [ -n "$skipped" ] && [ -z "$absent" ]; then
  ok "the $(echo $skipped | wc -w) functions introspection skips have pages marked C-only"
else
  not_ok "the functions introspection skips have pages marked C-only" "missing:$absent"
fi

echo "1..$n"
