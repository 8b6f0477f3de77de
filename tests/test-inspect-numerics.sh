#!/bin/sh
# test-inspect-numerics.sh — `mixprec-inspect --numerics`: on a crafted
# csv_monitor folder (a layer whose gradients start to underflow at step
# 12, a NaN, a parameter that stops recording, a step written twice) the
# ranked table's order and numbers; the heat map's size, row order and
# cell colours against matplotlib's own viridis (PNG decoded by
# matplotlib, not by cairo); binning of long runs; the SVG parses as XML;
# the same run as a TensorBoard event file written by tensorboard's own
# writer; and every bad input's message and exit status. Prints TAP.

top=$(cd "${MIXPREC_TOP_BUILDDIR:-.}" && pwd)
inspect=$top/tools/mixprec-inspect
tmp=$(mktemp -d "${TMPDIR:-/tmp}/test-inspect-numerics.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
export LC_ALL=C

n=0
failed=0
ok () { n=$((n + 1)); echo "ok $n - $1"; }
not_ok () { n=$((n + 1)); failed=1; echo "not ok $n - $1"; [ -z "${2:-}" ] || printf '%s\n' "$2" | sed 's/^/#   /'; }
skip () { n=$((n + 1)); echo "ok $n - $1 # SKIP $2"; }

# --- the run: 20 steps, grad_underflow of four parameters, grad_amax of
# two, and the engine's count of skipped steps (one skip, at step 12).
run=$tmp/job
mkdir -p "$run"
series () { # series FILE STAT then "step,value" rows on stdin
  { echo "step,$2"; cat; } >"$run/$1"
}
seq 1 20 | awk '{ print $1 "," ($1 >= 12 ? 0.75 : 0) }' |
  series Numerics_blocks.10.mlp.fc1.weight_grad_underflow.csv grad_underflow
# Step 3 written twice (a resumed job): the later record wins.
seq 1 20 | awk '{ print $1 ",0.25"; if ($1 == 2) print "3,0.9" }' |
  series Numerics_blocks.2.mlp.fc1.weight_grad_underflow.csv grad_underflow
seq 1 20 | awk '{ print $1 "," ($1 == 15 ? "nan" : 0) }' |
  series Numerics_blocks.1.attn.qkv.weight_grad_underflow.csv grad_underflow
seq 1 10 | awk '{ print $1 "," ($1 == 5 ? 0.5 : 0.1) }' |
  series Numerics_embed.weight_grad_underflow.csv grad_underflow
seq 1 20 | awk '{ print $1 ",1e-3" }' | series Numerics_embed.weight_grad_amax.csv grad_amax
seq 1 20 | awk '{ print $1 "," ($1 == 7 ? "inf" : 2.5) }' |
  series Numerics_blocks.2.mlp.fc1.weight_grad_amax.csv grad_amax
seq 1 20 | awk '{ print $1 "," ($1 >= 12 ? 1 : 0) }' | series Train_Steps_skipped_steps.csv skipped_steps

# --- the ranked table
out=$("$inspect" --numerics "$run" --stat grad_underflow 2>&1)
rc=$?
if [ $rc -eq 0 ]; then ok "--numerics --stat grad_underflow exits 0"; else not_ok "--numerics exits 0 (got $rc)" "$out"; fi
row () { # row RANK EXPECTED: the fields after the rank
  got=$(printf '%s\n' "$out" | awk -v r="$1" '$1 == r && NF == 7 { $1 = ""; print substr($0, 2) }')
  if [ "$got" = "$2" ]; then ok "rank $1: $2"; else not_ok "rank $1: want '$2', got '$got'" "$out"; fi
}
# NaN ranks first; then the layer that went bad (0.75 from step 12: mean
# 9 x 0.75 / 20); the 0.5 spike (mean (9 x 0.1 + 0.5) / 10); 0.25 last.
row 1 "blocks.1.attn.qkv.weight nan 15 0 0 1"
row 2 "blocks.10.mlp.fc1.weight 0.75 12 0.3375 0.75 0"
row 3 "embed.weight 0.5 5 0.14 0.1 0"
row 4 "blocks.2.mlp.fc1.weight 0.25 1 0.25 0.25 0"
case $out in
  *"4 parameters, 20 steps (1 to 20), 1 skipped by the loss scaler"*)
    ok "the summary counts parameters, steps and skipped steps" ;;
  *) not_ok "the summary counts parameters, steps and skipped steps" "$out" ;;
esac
out=$("$inspect" --numerics "$run" --stat grad_underflow --top 2)
if [ "$(printf '%s\n' "$out" | awk 'NF == 7 && $1 ~ /^[0-9]+$/' | wc -l)" -eq 2 ]; then
  ok "--top 2 lists two"
else
  not_ok "--top 2 lists two" "$out"
fi
out=$("$inspect" --numerics "$run/Numerics_blocks.2.mlp.fc1.weight_grad_amax.csv")
case $out in
  *"blocks.2.mlp.fc1.weight"*" inf "*" 7 "*) ok "one CSV file: its statistic from its header, inf worst at step 7" ;;
  *) not_ok "one CSV file: its statistic from its header, inf worst at step 7" "$out" ;;
esac

# --- bad inputs: each a message naming the place, and a non-zero status
expect_error () { # expect_error NAME STATUS TEXT COMMAND...
  name=$1 status=$2 text=$3
  shift 3
  msg=$("$@" 2>&1 >/dev/null)
  rc=$?
  case $msg in
    *"$text"*) if [ $rc -eq "$status" ]; then ok "$name"; else not_ok "$name: status $rc, want $status" "$msg"; fi ;;
    *) not_ok "$name: want '$text' (status $rc)" "$msg" ;;
  esac
}
expect_error "a missing folder" 1 "$tmp/absent: No such file or directory" \
  "$inspect" --numerics "$tmp/absent"
mkdir "$tmp/empty"
expect_error "a folder without numerics files" 1 "no Numerics_*.csv files" \
  "$inspect" --numerics "$tmp/empty"
expect_error "--by type in a folder without NumericsByType_ files" 1 "no NumericsByType_*.csv files" \
  "$inspect" --numerics "$run" --by type
expect_error "several statistics and no --stat lists them" 1 \
  "choose one with --stat (grad_amax, grad_underflow)" "$inspect" --numerics "$run"
expect_error "an unknown statistic lists the available ones" 1 \
  "no series of the statistic \"grad_bogus\"; the folder holds: grad_amax, grad_underflow" \
  "$inspect" --numerics "$run" --stat grad_bogus
expect_error "--by takes param or type" 2 "--by: must be 'param'" \
  "$inspect" --numerics "$run" --by layer
expect_error "--top takes a count" 2 "--top: must be a whole number" \
  "$inspect" --numerics "$run" --top many
expect_error "--stat needs --numerics" 2 "--stat only applies to --numerics" \
  "$inspect" --stat grad_amax

bad=$tmp/bad
mkdir "$bad"
printf 'step,grad_norm\n1,0.5\n2,0.5\n3,abc\n' >"$bad/Numerics_w_grad_norm.csv"
expect_error "a garbled row names its file and line" 1 \
  "$bad/Numerics_w_grad_norm.csv:4: expected \"step,value\"" "$inspect" --numerics "$bad"
printf 'step,grad_norm\n1,0.5\n-2,0.5\n' >"$bad/Numerics_w_grad_norm.csv"
expect_error "a negative step is garbled" 1 "Numerics_w_grad_norm.csv:3:" "$inspect" --numerics "$bad"
printf 'step,grad_norm\n1,0.5\n2,1e' >"$bad/Numerics_w_grad_norm.csv"
out=$("$inspect" --numerics "$bad" 2>&1)
case $out in
  *"Numerics_w_grad_norm.csv:3: an incomplete last row"*"1 step (1 to 1)"*) ok "a last row with no newline is left out with a warning" ;;
  *) not_ok "a last row with no newline is left out with a warning" "$out" ;;
esac
mkdir "$tmp/fresh"
printf 'step,grad_norm\n' >"$tmp/fresh/Numerics_a.1_grad_norm.csv"
printf 'step,grad_norm\n1,0.5\n' >"$tmp/fresh/Numerics_b.1_grad_norm.csv"
out=$("$inspect" --numerics "$tmp/fresh" 2>&1)
if [ "$(printf '%s\n' "$out" | awk '$1 ~ /^[0-9]+$/ { print $1, $2, $3 }' | tr '\n' ' ')" = "1 b.1 0.5 2 a.1 - " ]; then
  ok "a series with a header alone ranks last, with no numbers"
else
  not_ok "a series with a header alone ranks last, with no numbers" "$out"
fi
rm "$tmp/fresh/Numerics_b.1_grad_norm.csv"
printf 'hello\n' >"$bad/Numerics_w_grad_norm.csv"
expect_error "a file that is not csv_monitor's" 1 \
  "Numerics_w_grad_norm.csv:1: not a csv_monitor file" "$inspect" --numerics "$bad"
printf 'step,grad_amax\n1,2\n' >"$bad/Numerics_w_grad_norm.csv"
expect_error "a header that disagrees with the file name" 1 \
  "the header names the statistic \"grad_amax\", but the file name does not end in \"_grad_amax.csv\"" \
  "$inspect" --numerics "$bad"
rm "$bad/Numerics_w_grad_norm.csv"
printf 'step,grad_norm\n1,2\n' >"$tmp/elsewhere.csv"
ln -s "$tmp/elsewhere.csv" "$bad/Numerics_w_grad_norm.csv"
expect_error "a link in the folder is not followed" 1 \
  "Numerics_w_grad_norm.csv: is a symbolic link, which is not followed" "$inspect" --numerics "$bad"

# --- the same run as a TensorBoard event file, written by tensorboard's
# own writer: the same table (the values are exact in float32 but 0.1,
# whose mean still prints 0.14); a damaged record and a cut-short one.
tb_python=${PYTHON_TENSORBOARD:-}
if ! "$inspect" --version | grep -q '^event files: protobuf-c'; then
  skip "TensorBoard event files" "mixprec-inspect was built without protobuf-c"
elif [ -z "$tb_python" ] || [ "$tb_python" = no ] ||
     ! "$tb_python" -c 'import tensorboard' >/dev/null 2>&1; then
  skip "TensorBoard event files" "no Python with tensorboard (build-aux/install-deps.sh)"
else
  "$tb_python" - "$run" "$tmp/tb" <<'PY'
import glob, os, sys
from tensorboard.compat.proto.event_pb2 import Event
from tensorboard.compat.proto.summary_pb2 import Summary
from tensorboard.summary.writer.event_file_writer import EventFileWriter

rows = {}
for path in sorted(glob.glob(os.path.join(sys.argv[1], "*.csv"))):
    lines = open(path).read().split("\n")
    stat = lines[0].split(",", 1)[1]
    base = os.path.basename(path)[:-len(".csv")]
    if base.startswith("Numerics_"):
        tag = "Numerics/%s/%s" % (base[len("Numerics_"):-len(stat) - 1], stat)
    else:
        tag = "Train/Steps/" + stat
    for line in lines[1:]:
        if line:
            step, value = line.split(",")
            rows.setdefault(int(step), []).append((tag, float(value)))
writer = EventFileWriter(sys.argv[2])
for step in sorted(rows):
    values = [Summary.Value(tag=t, simple_value=v) for t, v in rows[step]]
    writer.add_event(Event(step=step, wall_time=1.0, summary=Summary(value=values)))
writer.close()
PY
  csv_table=$("$inspect" --numerics "$run" --stat grad_underflow | sed 1d)
  tb_table=$("$inspect" --numerics "$tmp/tb" --stat grad_underflow 2>&1)
  if [ -n "$csv_table" ] && [ "$(printf '%s\n' "$tb_table" | sed 1d)" = "$csv_table" ]; then
    ok "an event file gives the table of the CSV files"
  else
    not_ok "an event file gives the table of the CSV files" "$tb_table"
  fi
  case $tb_table in
    *"4 parameters, 20 steps (1 to 20), 1 skipped by the loss scaler"*) ok "an event file's skipped steps" ;;
    *) not_ok "an event file's skipped steps" "$tb_table" ;;
  esac
  event=$(ls "$tmp/tb"/*tfevents*)
  expect_error "an event file without numerics tags" 1 \
    "no scalar tagged NumericsByType/<module type>/<statistic>" \
    "$inspect" --numerics "$event" --by type
  size=$(wc -c <"$event")
  mkdir "$tmp/cut" "$tmp/damaged"
  head -c $((size - 5)) "$event" >"$tmp/cut/events.out.tfevents.1"
  out=$("$inspect" --numerics "$tmp/cut" --stat grad_underflow 2>&1)
  case $out in
    *"is cut short"*"is the run still writing?"*"19 steps (1 to 19)"*)
      ok "a cut-short last record is left out with a warning" ;;
    *) not_ok "a cut-short last record is left out with a warning" "$out" ;;
  esac
  # One byte flipped inside the tenth record's payload.
  "$tb_python" - "$event" "$tmp/damaged/events.out.tfevents.1" <<'PY'
import struct, sys
data = bytearray(open(sys.argv[1], "rb").read())
at = 0
for _ in range(9):
    at += 16 + struct.unpack("<Q", data[at:at + 8])[0]
data[at + 14] ^= 0x40
open(sys.argv[2], "wb").write(bytes(data))
PY
  expect_error "a damaged record names the file, the record and its byte" 1 \
    "damaged/events.out.tfevents.1: record 10 at byte" \
    "$inspect" --numerics "$tmp/damaged" --stat grad_underflow
  expect_error "a damaged record says the checksum does not match" 1 \
    "does not match: the file is damaged" "$inspect" --numerics "$tmp/damaged" --stat grad_underflow
  printf 'step,grad_norm\n1,2\n' >"$tmp/damaged/events.out.tfevents.1"
  expect_error "a file that is no event file" 1 \
    "record 1 at byte 0: the CRC-32C of its length does not match" \
    "$inspect" --numerics "$tmp/damaged/events.out.tfevents.1"
fi

# --- the heat map
if "$inspect" --version | grep -q '^heat maps: cairo'; then
  have_cairo=yes
else
  have_cairo=no
  expect_error "--heatmap says the tool was built without cairo" 2 "built without cairo" \
    "$inspect" --numerics "$run" --stat grad_underflow --heatmap "$tmp/u.png"
fi
python=
for py in "${PYTHON_GI:-}" /usr/bin/python3 python3; do
  if [ -n "$py" ] && [ "$py" != no ] &&
     "$py" -c 'import matplotlib, numpy, xml.dom.minidom' >/dev/null 2>&1; then
    python=$py
    break
  fi
done

if [ $have_cairo = yes ]; then
  expect_error "no step recorded: no heat map" 1 "no step recorded yet" \
    "$inspect" --numerics "$tmp/fresh" --heatmap "$tmp/fresh.png"
  expect_error "--heatmap wants .png or .svg" 2 "a PNG or an SVG file" \
    "$inspect" --numerics "$run" --stat grad_underflow --heatmap "$tmp/u.jpg"
  expect_error "an unwritable heat map names the file" 1 \
    "--heatmap $tmp/absent/u.png: cannot write the heat map: No such file or directory" \
    "$inspect" --numerics "$run" --stat grad_underflow --heatmap "$tmp/absent/u.png"
  ln -s "$tmp/elsewhere.csv" "$tmp/link.png"
  expect_error "a heat map is not written through a link" 1 "it is a symbolic link" \
    "$inspect" --numerics "$run" --stat grad_underflow --heatmap "$tmp/link.png"
  if [ "$(cat "$tmp/elsewhere.csv")" = "$(printf 'step,grad_norm\n1,2')" ]; then
    ok "the link's target is untouched"
  else
    not_ok "the link's target is untouched"
  fi

  png_out=$("$inspect" --numerics "$run" --stat grad_underflow --heatmap "$tmp/u.png" 2>&1)
  if [ $? -eq 0 ] && [ -s "$tmp/u.png" ]; then ok "--heatmap u.png writes it"; else not_ok "--heatmap u.png writes it" "$png_out"; fi
  # 3000 steps of one series: 1000 columns of 3 steps; the column of step
  # 1500 (with 1499 and 1501) shows its spike, the worst of the three.
  seq 0 2999 | awk '{ print $1 "," ($1 == 1500 ? 1 : 0) }' >"$tmp/long.csv.rows"
  { echo "step,fp8_saturation"; cat "$tmp/long.csv.rows"; } >"$tmp/Numerics_w_fp8_saturation.csv"
  long_out=$("$inspect" --numerics "$tmp/Numerics_w_fp8_saturation.csv" --heatmap "$tmp/long.png" 2>&1)
  case $long_out in
    *"1 row by 1000 columns of 3 steps"*) ok "3000 steps are drawn as 1000 columns of 3 steps" ;;
    *) not_ok "3000 steps are drawn as 1000 columns of 3 steps" "$long_out" ;;
  esac
  svg_out=$("$inspect" --numerics "$run" --stat grad_amax --heatmap "$tmp/a.svg" 2>&1)
  if [ $? -eq 0 ] && [ -s "$tmp/a.svg" ]; then ok "--heatmap a.svg writes it"; else not_ok "--heatmap a.svg writes it" "$svg_out"; fi

  if [ -z "$python" ]; then
    skip "the PNG's size and colours" "no Python with matplotlib and numpy (Debian: python3-matplotlib)"
  else
    # Rows in layer order: blocks.1, blocks.2, blocks.10, embed. The scale
    # is linear from 0 to 0.75; matplotlib's viridis gives the colours.
    check=$("$python" - "$tmp/u.png" "$png_out" "$tmp/long.png" "$long_out" "$tmp/a.svg" <<'EOF'
import re, sys, xml.dom.minidom
import numpy
from matplotlib import cm, image

def geometry(text):
    m = re.search(r"Heat map \S+: (\d+)x(\d+), cells at \((\d+),(\d+)\)-\((\d+),(\d+)\): "
                  r"(\d+) rows? by (\d+) columns?", text)
    return [int(g) for g in m.groups()]

def cell(img, g, row, col):
    w, h, x0, y0, x1, y1, rows, cols = g
    x = int(x0 + (col + 0.5) * (x1 - x0) / cols)
    y = int(y0 + (row + 0.5) * (y1 - y0) / rows)
    return [int(round(c * 255)) for c in img[y, x, :3]]

def viridis(t):
    return [int(round(c * 255)) for c in cm.get_cmap("viridis")(t)[:3]]

failures = []
def expect(name, got, want):
    if max(abs(a - b) for a, b in zip(got, want)) > 1:
        failures.append("%s: got %s, want %s" % (name, got, want))

img = image.imread(sys.argv[1])
g = geometry(sys.argv[2])
if (img.shape[1], img.shape[0]) != (g[0], g[1]):
    failures.append("PNG is %dx%d, the tool said %dx%d" % (img.shape[1], img.shape[0], g[0], g[1]))
if g[6:] != [4, 20]:
    failures.append("cells: %s, want 4 rows by 20 columns" % g[6:])
# blocks.10 at step 11 (column 10) and step 12 (column 11): 0 then 0.75.
expect("blocks.10 before step 12", cell(img, g, 2, 10), viridis(0.0))
expect("blocks.10 at step 12", cell(img, g, 2, 11), viridis(1.0))
expect("blocks.10 at step 20", cell(img, g, 2, 19), viridis(1.0))
expect("blocks.2 at step 3 (its last record)", cell(img, g, 1, 2), viridis(0.25 / 0.75))
expect("embed at step 5", cell(img, g, 3, 4), viridis(0.5 / 0.75))
expect("embed at step 6", cell(img, g, 3, 5), viridis(0.1 / 0.75))
expect("embed at step 15: no record", cell(img, g, 3, 14), [217, 217, 217])
expect("blocks.1 at step 15: nan", cell(img, g, 0, 14), [228, 26, 28])
expect("blocks.1 at step 14", cell(img, g, 0, 13), viridis(0.0))

img = image.imread(sys.argv[3])
g = geometry(sys.argv[4])
expect("the column of step 1500", cell(img, g, 0, 500), viridis(1.0))
expect("the column before", cell(img, g, 0, 499), viridis(0.0))
expect("the column after", cell(img, g, 0, 501), viridis(0.0))

svg = xml.dom.minidom.parse(sys.argv[5]).documentElement
if svg.tagName != "svg" or svg.namespaceURI != "http://www.w3.org/2000/svg":
    failures.append("the SVG's root is %s" % svg.tagName)
print("\n".join(failures) if failures else "ok")
EOF
)
    if [ "$check" = ok ]; then
      ok "the PNG's size, the rows in layer order, the cells' viridis colours, binning, the SVG parses"
    else
      not_ok "the PNG's size, the rows in layer order, the cells' viridis colours, binning, the SVG parses" "$check"
    fi
  fi
fi

echo "1..$n"
exit $failed
