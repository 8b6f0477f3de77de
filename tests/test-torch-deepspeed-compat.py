#!/usr/bin/env python3
# test-torch-deepspeed-compat.py — mixprec.torch as a drop-in for
# DeepSpeed: tests/torch-ds-train.py, a script written for DeepSpeed
# (GPT-2 from transformers, frozen position embedding, gradient
# accumulation 2, WarmupLR, checkpoint save and resume with client state),
# runs once with `import deepspeed` and once with that line replaced by
# `import mixprec.torch as deepspeed`, nothing else changed; bf16 and fp16,
# ZeRO 0, 1 and 2 on one rank of the cpu (fp16 with DeepSpeed's cpu
# accelerator's dtype table opened, see below), and once with a
# torch.optim.AdamW object in place of the config's optimizer section. The losses of every micro-step
# stay within 1% of DeepSpeed's, the learning rates and step counters
# equal DeepSpeed's, and the resumed run repeats the uninterrupted one as
# DeepSpeed's does. Prints TAP.
import os
import sys
import tempfile
import types
import warnings

from python_optional import require  # noqa: E402

require("torch", "PYTHON_TORCH")
if not require("deepspeed", "PYTHON_TORCH", optional=True) or \
        not require("transformers", "PYTHON_TORCH", optional=True):
    print("1..0 # SKIP deepspeed and transformers are not importable (see PYTHON_TORCH)")
    sys.exit(0)

# DeepSpeed on one process of the cpu, without a launcher.
os.environ.setdefault("DS_ACCELERATOR", "cpu")
os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000))
for k, v in (("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1")):
    os.environ.setdefault(k, v)
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
warnings.simplefilter("ignore")

import torch  # noqa: E402

torch.set_num_threads(1)
import logging  # noqa: E402
logging.getLogger("DeepSpeed").setLevel(logging.ERROR)

results = []


def check(name, cond, detail=""):
    results.append((name, bool(cond), detail))


here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "torch-ds-train.py"), encoding="utf-8") as f:
    source = f.read()
assert source.count("\nimport deepspeed\n") == 1


def load(src, name):
    module = types.ModuleType(name)
    module.__file__ = name
    exec(compile(src, name, "exec"), module.__dict__)
    return module


ds_script = load(source, "torch-ds-train.py (import deepspeed)")
mp_script = load(source.replace("\nimport deepspeed\n", "\nimport mixprec.torch as deepspeed\n"),
                 "torch-ds-train.py (import mixprec.torch as deepspeed)")
import deepspeed as _ds  # noqa: E402
import mixprec.torch as _mp  # noqa: E402
check("the two runs of the script import DeepSpeed and mixprec.torch",
      ds_script.deepspeed is _ds and mp_script.deepspeed is _mp)


# DeepSpeed's cpu accelerator turns fp16 away by a capability table
# (supported_dtypes) although its fp16 path (FP16_Optimizer, dynamic loss
# scaling) runs on torch's cpu kernels: open the table so that fp16 is
# compared too.
from deepspeed.accelerator import get_accelerator  # noqa: E402
_acc = get_accelerator()
if torch.float16 not in _acc.supported_dtypes():
    _dtypes = _acc.supported_dtypes()
    _acc.supported_dtypes = lambda: list(_dtypes) + [torch.float16]
    _acc.is_fp16_supported = lambda: True


# One rank needs none of the shared-memory all-reduce DeepSpeed's cpu
# backend compiles on first use (a C++ build of minutes on a fresh machine).
import deepspeed.ops  # noqa: E402
deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False


def rel(a, b):
    return abs(a - b) / max(abs(b), 1e-12)


cases = [(mode, stage, False) for mode in ("bf16", "fp16") for stage in (0, 1, 2)]
cases.append(("bf16", 1, True))
for mode, stage, own_optimizer in cases:
    label = f"{mode}, ZeRO-{stage}" + (", torch.optim.AdamW object" if own_optimizer else "")
    with tempfile.TemporaryDirectory() as t1, tempfile.TemporaryDirectory() as t2:
        try:
            theirs = ds_script.run(mode, stage, t1, own_optimizer=own_optimizer)
        except Exception as e:          # DeepSpeed's own limits on the cpu
            check(f"{label}: # SKIP DeepSpeed does not run it here ({type(e).__name__}: "
                  f"{str(e)[:120]})", True)
            continue
        ours = mp_script.run(mode, stage, t2, own_optimizer=own_optimizer)
    worst = max(rel(a, b) for a, b in zip(ours["loss"], theirs["loss"]))
    print(f"# {label}: losses ours {[round(v, 4) for v in ours['loss']]}")
    print(f"# {label}: losses DeepSpeed {[round(v, 4) for v in theirs['loss']]}")
    print(f"# {label}: worst relative loss difference {worst:.4%}")
    check(f"{label}: every micro-step's loss within 1% of DeepSpeed's (worst {worst:.3%})",
          len(ours["loss"]) == len(theirs["loss"]) == 16 and worst <= 0.01,
          (ours["loss"], theirs["loss"]))
    check(f"{label}: the loss falls as DeepSpeed's does",
          ours["loss"][-1] < ours["loss"][0] and theirs["loss"][-1] < theirs["loss"][0],
          (ours["loss"], theirs["loss"]))
    check(f"{label}: is_gradient_accumulation_boundary() and global_steps as DeepSpeed's",
          ours["boundary"] == theirs["boundary"] and ours["steps"] == theirs["steps"],
          ((ours["boundary"], ours["steps"]), (theirs["boundary"], theirs["steps"])))
    check(f"{label}: get_lr() follows DeepSpeed's WarmupLR",
          len(ours["lr"]) == len(theirs["lr"]) and
          all(rel(a, b) <= 1e-6 for a, b in zip(ours["lr"], theirs["lr"])),
          (ours["lr"], theirs["lr"]))
    check(f"{label}: the frozen embedding is cast to {mode} and unchanged, as DeepSpeed's",
          ours["wpe_dtype"] == theirs["wpe_dtype"] and ours["wpe_unchanged"] and
          theirs["wpe_unchanged"],
          (ours["wpe_dtype"], theirs["wpe_dtype"], ours["wpe_unchanged"]))
    check(f"{label}: load_checkpoint returns the client state and the step counter",
          ours["client_state"] == theirs["client_state"] == 8 and
          ours["steps_after_load"] == theirs["steps_after_load"] == 4,
          ((ours["client_state"], ours["steps_after_load"]),
           (theirs["client_state"], theirs["steps_after_load"])))
    tail = ours["loss"][8:]
    worst_resume = max(rel(a, b) for a, b in zip(ours["resumed"]["loss"], tail))
    ds_resume = max(rel(a, b) for a, b in zip(theirs["resumed"]["loss"], theirs["loss"][8:]))
    print(f"# {label}: resumed run against the uninterrupted one: ours {worst_resume:.4%}, "
          f"DeepSpeed {ds_resume:.4%}")
    check(f"{label}: the resumed run repeats the uninterrupted one (ours {worst_resume:.3%}, "
          f"DeepSpeed {ds_resume:.3%})",
          worst_resume <= max(1e-6, ds_resume) and
          ours["resumed"]["steps"] == theirs["resumed"]["steps"],
          (ours["resumed"], tail))

print(f"1..{len(results)}")
for i, (name, ok, detail) in enumerate(results, 1):
    print(f"{'ok' if ok else 'not ok'} {i} - {name}")
    if not ok and detail != "":
        print(f"#   {detail!r}"[:2000])
sys.exit(0 if all(ok for _, ok, _ in results) else 1)
