# python_optional.py — for the Python tests that need a PyPI package
# Debian does not have (torch, safetensors, tensorboard). make check runs
# .py tests with PYTHON_GI; configure may have found another Python that
# has the package (the venv of build-aux/install-deps.sh, which also sees
# Debian's gi and numpy) and exported it as PYTHON_TORCH etc. A test asks
# for its package first thing; where this Python lacks it, the test runs
# again under that one. A venv's python is a link to the system one, so
# the interpreters cannot be compared by path: the environment marks the
# second run, and there is never a third.
import importlib.util
import os
import sys

REEXEC_MARK = "MIXPREC_TEST_REEXEC"


def require(module, python_var, optional=False):
    """Returns True when @module can be imported. Otherwise re-executes the
    test under the Python named by $python_var, once; where there is none,
    prints a TAP plan that skips the whole test and exits, or returns False
    when @optional (the test has checks that run without the package)."""
    if importlib.util.find_spec(module) is not None:
        return True
    other = os.environ.get(python_var, "")
    if other not in ("", "no") and REEXEC_MARK not in os.environ:
        os.environ[REEXEC_MARK] = "1"
        sys.stdout.flush()
        os.execv(other, [other] + sys.argv)
    if optional:
        return False
    print("1..0 # SKIP %s is not importable (no Python with gi and %s: see %s)"
          % (module, module, python_var))
    sys.exit(0)
