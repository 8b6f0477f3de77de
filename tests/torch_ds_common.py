# torch_ds_common.py — what the tests that run tests/torch-ds-train.py
# under DeepSpeed and under mixprec.torch share: the script loaded with
# either import line, and DeepSpeed's cpu accelerator opened to fp16.
import os
import types

HERE = os.path.dirname(os.path.abspath(__file__))
IMPORTS = {"deepspeed": "\nimport deepspeed\n",
           "mixprec": "\nimport mixprec.torch as deepspeed\n"}


def load_script(impl):
    """tests/torch-ds-train.py as a module, unchanged but for its import
    line: `import deepspeed` (impl "deepspeed") or `import mixprec.torch
    as deepspeed` (impl "mixprec")."""
    with open(os.path.join(HERE, "torch-ds-train.py"), encoding="utf-8") as f:
        source = f.read()
    assert source.count(IMPORTS["deepspeed"]) == 1
    source = source.replace(IMPORTS["deepspeed"], IMPORTS[impl])
    name = "torch-ds-train.py (%s)" % IMPORTS[impl].strip()
    module = types.ModuleType(name)
    module.__file__ = name
    exec(compile(source, name, "exec"), module.__dict__)
    return module


def open_cpu_deepspeed():
    """DeepSpeed's cpu accelerator turns fp16 away by a capability table
    (supported_dtypes) although its fp16 path (FP16_Optimizer, dynamic
    loss scaling) runs on torch's cpu kernels: opens the table so that fp16
    is compared too. And turns off the shared-memory all-reduce DeepSpeed's
    cpu backend compiles on first use (a C++ build of minutes on a fresh
    machine; gloo does the reductions)."""
    import torch
    from deepspeed.accelerator import get_accelerator
    import deepspeed.ops
    acc = get_accelerator()
    if torch.float16 not in acc.supported_dtypes():
        dtypes = acc.supported_dtypes()
        acc.supported_dtypes = lambda: list(dtypes) + [torch.float16]
        acc.is_fp16_supported = lambda: True
    deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False
