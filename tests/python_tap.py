# python_tap.py — the TAP output of the Python tests: check() records a
# named result, report() prints the plan and a line per result (with the
# detail of a failure) and exits 1 when any failed. Import it after the
# python_optional check, which may run the test again elsewhere.
import sys

results = []


def check(name, cond, detail=""):
    results.append((name, bool(cond), detail))


def report(cut=None):
    """Prints the TAP lines and exits; @cut: the longest detail line."""
    print(f"1..{len(results)}")
    for i, (name, ok, detail) in enumerate(results, 1):
        print(f"{'ok' if ok else 'not ok'} {i} - {name}")
        if not ok and detail != "":
            print(f"#   {detail!r}"[:cut])
    sys.exit(0 if all(ok for _, ok, _ in results) else 1)
