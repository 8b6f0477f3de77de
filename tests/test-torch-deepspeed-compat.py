#!/usr/bin/env python3
# test-torch-deepspeed-compat.py — mixprec.torch as a drop-in for
# DeepSpeed: tests/torch-ds-train.py, a script written for DeepSpeed
# (GPT-2 from transformers, frozen position embedding, gradient
# accumulation 2, WarmupLR, checkpoint save and resume with client state),
# runs once with `import deepspeed` and once with that line replaced by
# `import mixprec.torch as deepspeed`, nothing else changed; bf16 and fp16,
# ZeRO 0, 1, 2 and 3 on one rank of the cpu (fp16 with DeepSpeed's cpu
# accelerator's dtype table opened, see tests/torch_ds_common.py; ZeRO-3
# with every parameter partitioned, the weights read under
# GatheredParameters), and once with a torch.optim.AdamW object in place
# of the config's optimizer section. The losses of every micro-step
# stay within 1% of DeepSpeed's, the learning rates and step counters
# equal DeepSpeed's, and the resumed run repeats the uninterrupted one as
# DeepSpeed's does. Prints TAP.
import os
import sys
import tempfile
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


from torch_ds_common import load_script, open_cpu_deepspeed  # noqa: E402

ds_script = load_script("deepspeed")
mp_script = load_script("mixprec")
import deepspeed as _ds  # noqa: E402
import mixprec.torch as _mp  # noqa: E402
check("the two runs of the script import DeepSpeed and mixprec.torch",
      ds_script.deepspeed is _ds and mp_script.deepspeed is _mp)


# fp16 on DeepSpeed's cpu accelerator, and no shared-memory all-reduce
# build (see torch_ds_common.py).
open_cpu_deepspeed()


def rel(a, b):
    return abs(a - b) / max(abs(b), 1e-12)


cases = [(mode, stage, False) for mode in ("bf16", "fp16") for stage in (0, 1, 2, 3)]
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
    # ZeRO-3 partitions the frozen embedding too (DeepSpeed partitions
    # every parameter): an empty placeholder outside GatheredParameters.
    frozen_numel = 0 if stage == 3 else 16 * 32
    check(f"{label}: the frozen embedding has {frozen_numel} elements outside "
          f"GatheredParameters, as DeepSpeed's",
          ours["wpe_numel_outside"] == theirs["wpe_numel_outside"] == frozen_numel,
          (ours["wpe_numel_outside"], theirs["wpe_numel_outside"]))
    # ZeRO-3: the weights are partitioned (an empty placeholder) outside
    # GatheredParameters, whole inside it; GPT-2's tied lm_head is wte.
    numel = 0 if stage == 3 else 64 * 32
    check(f"{label}: GatheredParameters shows the tied wte whole, {numel} elements outside it, "
          f"as DeepSpeed's",
          ours["tied"] and theirs["tied"] and
          ours["wte_numel_outside"] == theirs["wte_numel_outside"] == numel and
          rel(ours["wte_sum"], theirs["wte_sum"]) <= 0.05,
          ((ours["tied"], ours["wte_numel_outside"], ours["wte_sum"]),
           (theirs["tied"], theirs["wte_numel_outside"], theirs["wte_sum"])))
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
