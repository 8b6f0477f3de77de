#!/usr/bin/env python3
"""test-charlm-py.py: smoke test of examples/charlm.py, the Python twin of
the example trainer. A few steps in each default mode must give finite
losses and a PNG of the curves; and since both trainers draw the same
initial weights and batches, the Python fp32 run must end where the C one
does. Prints TAP."""

import contextlib
import importlib.util
import io
import math
import os
import subprocess
import sys
import tempfile

WORDS = "/usr/share/dict/american-english"
srcdir = os.path.join(os.environ.get("G_TEST_SRCDIR", os.path.dirname(os.path.abspath(__file__))), "..")
builddir = os.environ.get("MIXPREC_TOP_BUILDDIR", ".")

missing = [m for m in ("numpy", "matplotlib") if importlib.util.find_spec(m) is None]
if missing:
    print(f"1..0 # SKIP the Python trainer needs {' and '.join(missing)}")
    sys.exit(0)
if not os.access(WORDS, os.R_OK):
    print(f"1..0 # SKIP {WORDS} is missing (Debian package wamerican)")
    sys.exit(0)

spec = importlib.util.spec_from_file_location("charlm", os.path.join(srcdir, "examples", "charlm.py"))
charlm = importlib.util.module_from_spec(spec)
spec.loader.exec_module(charlm)

print("1..5")
count = 0


def check(condition, description, detail=""):
    global count
    count += 1
    print(f"{'ok' if condition else 'not ok'} {count} - {description}")
    if not condition and detail:
        for line in str(detail).splitlines():
            print(f"# {line}")


with tempfile.TemporaryDirectory() as tmp:
    png = os.path.join(tmp, "loss.png")
    args = ["--steps", "20", "--batch", "32", "--eval-every", "10", "--png", png, "--quiet"]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        results = charlm.main(args)

    with open(png, "rb") as f:
        head = f.read(8)
    check(head == b"\x89PNG\r\n\x1a\n" and os.path.getsize(png) > 10000,
          f"the loss curves are saved as a PNG ({os.path.getsize(png)} bytes)")

    check(sorted(results) == ["bf16", "fp16", "fp32"], "fp32, bf16 and fp16 all ran", sorted(results))

    finite = all(math.isfinite(v) and v < math.log(27)
                 and all(math.isfinite(t) and math.isfinite(e) for _, t, e in h)
                 for v, h in results.values())
    check(finite, "every train and val loss is finite, and the final ones beat uniform guessing",
          {m: (v, h) for m, (v, h) in results.items()})

    check([[s for s, _, _ in h] for _, h in results.values()] == [[10, 20]] * 3,
          "each mode records evaluations at steps 10 and 20", results)

    # The C trainer with the same settings: same weights, same batches,
    # only the order of the fp32 sums differs (BLAS against plain loops).
    c = subprocess.run([os.path.join(builddir, "examples", "charlm"),
                        "--config", os.path.join(srcdir, "examples", "configs", "fp32.json"),
                        "--csv", os.path.join(tmp, "c.csv")] + args[:6] + ["--quiet"],
                       capture_output=True, text=True)
    c_loss = float(c.stdout.strip().splitlines()[-1].split("=")[1]) if c.returncode == 0 else math.nan
    py_loss = results["fp32"][0]
    check(abs(c_loss - py_loss) < 1e-3,
          f"Python fp32 val_loss {py_loss:.6f} matches the C trainer's {c_loss:.6f}",
          c.stderr)
