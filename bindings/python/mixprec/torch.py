# mixprec/torch.py — a PyTorch model trained with libmixprec doing the
# precision side, behind a front shaped like DeepSpeed's engine.
"""libmixprec for PyTorch models, in the shape of DeepSpeed's engine::

    import mixprec.torch
    engine = mixprec.torch.initialize(model, "ds_config.json")
    for batch in data:
        loss = loss_fn(engine(batch.inputs), batch.targets)
        engine.backward(loss)
        engine.step()
    engine.save_checkpoint("checkpoints")

``initialize()`` registers every trainable parameter of the model with a
libmixprec engine (``Mixprec.Engine``), with the class name of the module
that holds it as its module type, so that ``mixprec.fp32_modules`` and
``torch_autocast.lower_precision_safe_modules`` of the config (see
mixprec.json(5)) select modules by class ("LayerNorm", "Linear"). Each
parameter then *is* the engine's working copy: ``param.data`` becomes a
view of the engine's buffer (bfloat16 or float16, or float32 for the
modules the policy keeps in FP32), so the optimizer step writes the new
weights straight into the model. A module whose working dtype differs
from the rest of the model (a LayerNorm kept in FP32 under bf16) gets its
floating-point inputs cast to its own dtype and its outputs cast back.

Gradients leave the model as autograd produces them: a hook on each
parameter (``register_post_accumulate_grad_hook``) hands the gradient to
the engine (``param.reduce_grad``, which reads it where it lies and,
across ranks under ZeRO-2, starts its reduce-scatter) and drops it, so
no gradient of the model's size outlives its backward pass.

``engine.backward(loss)`` multiplies the loss by the engine's loss scale,
runs autograd and ends the micro-step; ``engine.step()`` runs the
engine's step at the gradient-accumulation boundary (and does nothing in
between, as DeepSpeed's does). Several ranks come from the launcher's
environment (``mixprec-run -n 2 python3 train.py``): the front needs no
``torch.distributed``; every rank must build the same model.

On the ``cuda`` device (``"mixprec": {"device": "cuda"}``) the engine's
buffers are in GPU memory: move the model there first (``model.cuda()``,
on the engine's GPU: ``LOCAL_RANK``, else 0) and each parameter becomes a
CUDA view of the engine's working copy (DLPack's ``kDLCUDA``); gradients
are handed over by their device address, read by the engine's kernels
on the GPU once torch's stream has finished them, and the loss scaling
is the same as on the cpu device. On the ``cpu`` device the model stays
in host memory.

DeepSpeed's spelling works too, so that ``import mixprec.torch as
deepspeed`` runs a script written for DeepSpeed::

    engine, optimizer, _, lr_scheduler = deepspeed.initialize(
        model=model, model_parameters=model.parameters(), config=ds_config)

``initialize()`` called with a module as its first positional argument
(``initialize(model, config)``, the 1.0 spelling) returns the Engine
alone; called DeepSpeed's way (``model=``, or ``args=`` with
``args.deepspeed_config`` from ``add_config_arguments()``) it returns
``(engine, optimizer, training_dataloader, lr_scheduler)``. A torch
optimizer passed as ``optimizer=`` (``torch.optim.AdamW``, ``Adam``,
``SGD``, or a ``Lion``) becomes the config's optimizer section, its first
param group's hyper-parameters included; a DeepSpeed scheduler object
(``WarmupLR``, ``WarmupDecayLR``, ``WarmupCosineLR``) becomes its
scheduler section. Any other optimizer or scheduler object is refused
with a ValueError that names it: libmixprec runs its own optimizer step.
The engine has DeepSpeed's ``backward``, ``step``,
``is_gradient_accumulation_boundary()``, ``get_lr()``,
``get_global_grad_norm()``, ``global_steps``, ``global_samples``,
``skipped_steps``, ``micro_steps``, ``no_sync()``, ``zero_grad()``,
``module``, ``train()``/``eval()``, ``train_batch()``,
``save_checkpoint(dir, tag, client_state=...)``,
``load_checkpoint(dir, tag)``, ``save_16bit_model()`` and the accessors
``fp16_enabled()``, ``bfloat16_enabled()``, ``zero_optimization_stage()``,
``train_micro_batch_size_per_gpu()``, ``train_batch_size()``,
``gradient_accumulation_steps()``, ``gradient_clipping()``.

Frozen parameters (``requires_grad=False``, as LoRA leaves the base
model) are not registered: they are cast to the working dtype of their
module (the model's dtype, or FP32 for a module the policy keeps in FP32)
as DeepSpeed casts the whole module, and never change (under ZeRO-3
they are partitioned too: see below). Tied parameters
(GPT-2's ``lm_head.weight`` is ``wte.weight``) are registered once, under
the first name; ``export_fp32()`` and ``save_16bit_model()`` write every
name of the model's ``state_dict()`` (under ZeRO-3 gathering the
parameters on every rank: collective).

Floating-point inputs to ``engine(...)`` are cast to the model's dtype
when the config asks for it (``"fp16": {"auto_cast": true}``, DeepSpeed's
key, or ``"bf16": {"auto_cast": true}``, the front's own, which it takes
out of the config before libmixprec reads it); without it an input of
another floating dtype gets one warning. Under ``torch_autocast`` the
model's own ``forward`` runs under ``torch.autocast``, so ``model(x)``
and ``engine(x)`` compute alike (``close()`` gives the model its forward
back).

No silent surprises: the config's warnings (``Mixprec.Config
.get_warnings()``) are issued as ``warnings.warn(..., ConfigWarning)``,
and an ``"auto"`` that leaves a precision mode off says so; a parameter
whose data no longer is the engine's working copy (``model.float()``,
``model.to(dtype)`` after initialize) fails the next ``backward()`` or
``step()`` naming it; initializing a model a second time detaches the
first engine (whose later use fails naming the cause) with a warning; a
module type named by ``fp32_modules``, ``lower_precision_safe_modules``
or ``fp8_modules`` that no module of the model has is warned about,
naming the types the model has, and ``"Linear"`` on a model with Hugging
Face ``Conv1D`` layers (GPT-2's) says that it misses them; libmixprec's
errors arrive as ``mixprec.torch.Error``, which is both a ``ValueError``
and a ``GLib.Error`` (itself a ``RuntimeError``), with libmixprec's
message, whichever call of the front (``initialize()``, the engine's
methods, ``zero.Init``, ``zero.GatheredParameters``) meets them, and the
front's own refusals are ValueError, TypeError or RuntimeError, as
DeepSpeed's are; a Python whose only ``gi`` is libmixprec's
overrides folder gets an ImportError that names PyGObject.

What differs from DeepSpeed (on purpose or for now):

* ``backward()`` does not divide the loss by
  gradient_accumulation_steps: the engine averages the micro-steps
  itself (the result is DeepSpeed's).
* ``p.grad``: each gradient is handed to the engine as autograd produces
  it and dropped; after the ``backward()`` that completes an accumulation
  window, each trained parameter's ``p.grad`` is a copy of the engine's
  accumulated gradient divided by gradient_accumulation_steps (scaled by
  the loss scale in fp16, as DeepSpeed's are), in the parameter's dtype.
  ``step()`` and ``zero_grad()`` set them back to None. Between
  boundaries, and where the gradients are sharded across ranks (ZeRO
  stages 1 to 3 on several ranks: each rank holds its slices of the sum),
  ``p.grad`` stays None. Writing ``p.grad`` changes nothing; ``expose_grads =
  False`` on the Engine skips the copies.
* ``no_sync()`` is accepted and changes nothing at ZeRO stages 0 and 1
  (the engine reduces only at the boundary anyway); at stages 2 and 3 it
  is refused, as DeepSpeed refuses it.
* ``save_checkpoint()`` and ``load_checkpoint()`` use libmixprec's
  checkpoint directory (``save_dir/tag/manifest.json`` and one
  safetensors file per rank; the default tag is DeepSpeed's
  ``global_stepN``), with ``client_state`` and the frozen parameters
  saved beside it as ``client_state.pt``; DeepSpeed's
  ``*_model_states.pt`` files are neither read nor written. The
  checkpoint does not depend on the ZeRO stage or the number of ranks: one
  saved at ZeRO-3 on 2 ranks resumes at ZeRO-1 on one process, and back
  (DeepSpeed needs its zero_to_fp32 conversion for that). An Engine
  made by the 1.0 spelling returns the path alone from
  ``load_checkpoint()``.
* ``get_global_grad_norm()`` is the norm before clipping of the last
  step, a float.
* ``train_batch(data_iter)`` is the pipeline engine's for a model that
  returns its loss (no pipeline stages).
* ``model_parameters`` (tensors or torch param groups) must cover every
  parameter that requires grad; a group's own hyper-parameters (a
  weight_decay of 0 for biases) are not applied: the optimizer's are.
* ``training_data`` is wrapped in a plain ``torch.utils.data.DataLoader``
  of train_micro_batch_size_per_gpu, without DeepSpeed's distributed
  sampler (so only on one rank); ``mpu``, ``dist_init_required`` and
  ``distributed_port`` are accepted and unused, ``config_params`` is a
  synonym of ``config``; ``init_distributed()`` does nothing (the engine
  finds its ranks in the launcher's environment).
* ``p.grad`` of a ZeRO-3 partitioned parameter stays None, as
  DeepSpeed's (its gradient is sharded across ranks).

ZeRO-3 (``"zero_optimization": {"stage": 3}``) partitions the working
copies themselves: each rank's engine holds one slice of every trained
parameter (above ``stage3_param_persistence_threshold`` elements). At
``initialize()`` the engine takes each parameter's values and the torch
parameter keeps its object with an empty placeholder as its data (the
torch copy is dropped at once) and DeepSpeed's ``ds_id``,
``ds_shape``, ``ds_numel``, ``ds_status`` and ``ds_persist`` attributes.
A forward pre-hook on each module gathers the parameters it holds (one
all-gather of their unit, copied at once into memory torch owns, the
engine's buffer freed: what anything keeps of a gathered weight stays
valid, as DeepSpeed's gathered parameters are torch's; on one process,
where the engine's copy is whole, a view of it) and starts gathering
those the first forward pass used next, within
``stage3_prefetch_bucket_size``; its forward post-hook releases them,
but for those whose backward comes within ``stage3_max_reuse_distance``
elements of gathers (DeepSpeed's key and default, 1e9: a small model's
all) once the first pass is traced, on several ranks, in a pass that
autograd records: these stay gathered, within
``stage3_max_live_parameters``, until their gradient is handed over, so
that the backward does not gather them again. Otherwise autograd keeps
no gathered copy: while the model's modules run, a
saved-tensor hook keeps a partitioned parameter an operation saves (or
a view of one) as a reference that its backward gathers again, with the
prefetch running in reverse, until the gradient is handed over (a
reduce-scatter across ranks, as at ZeRO-2). Activation checkpointing
(``torch.utils.checkpoint`` of a module's call, either mode) gathers
again as it recomputes. Tied parameters (GPT-2's
``lm_head.weight``) are gathered by each module that holds them, once
per unit. ``mixprec.torch.zero`` has DeepSpeed's names:

* ``GatheredParameters(params, modifier_rank=None)``: the parameters
  whole inside the block, on every rank (collective); parameters that are
  not partitioned are left alone, as DeepSpeed leaves them. With
  ``modifier_rank=r``, rank r's writes become the FP32 masters on every
  rank when the block ends (between steps), as DeepSpeed broadcasts them.
* ``Init(...)``: DeepSpeed's arguments (``with deepspeed.zero.Init():
  model = ...``); each module's parameters are partitioned when the
  module is built (each rank keeps a 1/world chunk, on one process the
  whole values, beside an empty placeholder) and handed to the engine
  one at a time by ``initialize()``.
* ``register_external_parameter(module, param)``: module's forward
  gathers a parameter another module holds.

What differs from DeepSpeed's ZeRO-3:

* ``zero.Init()`` partitions into even 1/world chunks of each
  parameter's flat values, not the engine's slices, so ``initialize()``
  gathers each parameter whole once (one at a time) to hand it over;
  DeepSpeed's chunks are its partitions. On several ranks of a device
  other than the cpu, where the engine joins the ranks itself when
  ``initialize()`` makes it, it partitions nothing and says so with a
  RuntimeWarning (the model is built whole on each rank and
  ``initialize()`` partitions it, a peak of about one FP32 copy of the
  model per rank). It does not take ``module=``.
* ``GatheredParameters(..., modifier_rank=r)`` sets the FP32 masters to
  rank r's values widened from the working dtype (DeepSpeed writes the
  working copy's partitions and leaves its optimizer's FP32 partitions
  as they were). Writes without it are not kept, as in DeepSpeed.
* Frozen parameters (``requires_grad=False``) are partitioned as the
  trained ones are (not below ``stage3_param_persistence_threshold``
  elements), cast to the working dtype first as at ZeRO-0 to 2, and
  gathered and released by the same hooks, with ``ds_*`` attributes and
  a placeholder, as DeepSpeed partitions them; the engine holds no
  master, gradient or optimizer state for them. Each rank keeps an even
  1/world chunk of the working-dtype values (the front's, exchanged over
  the launcher's communicator, not the engine's units), so on several
  ranks only on the cpu device; on the cuda device across ranks, where
  the engine joins the ranks itself, they stay whole on every rank.
  ``GatheredParameters(..., modifier_rank=r)`` cuts their chunks from
  rank r's values; checkpoints save them whole (``client_state.pt``),
  interchangeable with stages 0 to 2.
* A parameter of exactly ``stage3_param_persistence_threshold`` elements
  is partitioned (the engine keeps those below it whole); DeepSpeed keeps
  it whole. On one process the engine's copies are whole anyway, and the
  front partitions the torch parameters by the same rule, so that a
  script sees what it will see on several ranks.
* A gathered parameter is a copy torch owns, made from the engine's
  all-gather (a view of the engine's whole copy on one process, which
  the next step changes in place).
* A module's forward gathers the parameters it holds itself; one that
  reads a parameter of a module it does not call (torch's
  ``nn.MultiheadAttention`` reads ``out_proj.weight`` directly) needs
  ``zero.register_external_parameter(module, param)``, as in DeepSpeed;
  DeepSpeed's ``set_z3_leaf_modules()`` (gathering a whole subtree at its
  root) is not there.
* The prefetch follows the order of the first forward pass (DeepSpeed
  traces it too), each parameter once per pass; the engine bounds it by
  ``stage3_prefetch_bucket_size`` on the way and
  ``stage3_max_live_parameters`` gathered, counted in its units (padded
  to world size x 4096 elements), so a small model prefetches little.
* ``offload_param`` (``{"device": "cpu"}``) is a no-op on the cpu device,
  where the parameters are in host memory already, with a ConfigWarning
  that says so; on a GPU it needs ``offload_optimizer`` too and several
  ranks (on one process the engine partitions nothing, so it cannot keep
  a partition in host memory): ``initialize()`` refuses the other cases
  with a ValueError naming the key. DeepSpeed offloads in both.
* ``close()`` gives each partitioned parameter a whole copy back
  (gathered: collective), so the model stands alone again.
* Checkpointing a module's ``forward`` rather than its call (the hooks
  run on calls) recomputes it on placeholders, as in DeepSpeed.
"""

import contextlib
import ctypes
import functools
import json
import os
import struct
import time
import warnings
import weakref

try:
    import torch
except ImportError as e:
    raise ImportError("mixprec.torch needs PyTorch: the 'torch' package is not importable (%s)"
                      % e, name="torch") from e

import gi

if not hasattr(gi, "require_version"):
    # libmixprec installs its overrides as gi/overrides/Mixprec.py; in a
    # Python without PyGObject that folder alone is found as a namespace
    # package 'gi', which has none of PyGObject.
    raise ImportError("mixprec.torch needs PyGObject (the 'gi' package), which this Python "
                      "(%s) does not have: the only 'gi' found is the folder %s, libmixprec's "
                      "overrides. Install PyGObject (Debian: python3-gi; make the venv with "
                      "--system-site-packages to see it) or 'pip install PyGObject'"
                      % (os.sys.executable, ", ".join(getattr(gi, "__path__", [])) or "?"),
                      name="gi")

gi.require_version("GLib", "2.0")
gi.require_version("Mixprec", "1.0")
from gi.repository import GLib, Mixprec  # noqa: E402

from mixprec import _torch_zero as zero  # noqa: E402

__all__ = ["initialize", "Engine", "Error", "ConfigWarning", "add_config_arguments",
           "init_distributed", "zero"]

_DT = Mixprec.DType
_TORCH_DTYPE = {_DT.FLOAT32: torch.float32, _DT.FLOAT16: torch.float16,
                _DT.BFLOAT16: torch.bfloat16}
_MIXPREC_DTYPE = {v: k for k, v in _TORCH_DTYPE.items()}
_KDL_CPU = 1
_KDL_CUDA = 2

if not hasattr(torch.Tensor, "register_post_accumulate_grad_hook"):
    raise ImportError("mixprec.torch needs PyTorch 2.1 or later "
                      "(Tensor.register_post_accumulate_grad_hook); this is %s"
                      % torch.__version__, name="torch")


class Error(GLib.Error, ValueError):
    """A libmixprec error: a GLib.Error (``domain``, ``code``,
    ``message``, ``matches()``) that is also a ValueError, so that both
    ``except ValueError`` and ``except GLib.Error`` catch it."""


class ConfigWarning(UserWarning):
    """A warning of libmixprec's configuration (a key ignored, an "auto"
    resolved, a precision mode left off)."""


def _raise_error(e):
    raise Error(e.message, e.domain, e.code) from e


@contextlib.contextmanager
def _errors():
    """Turns the GLib.Error of a libmixprec call into an Error."""
    try:
        yield
    except Error:
        raise
    except GLib.Error as e:
        _raise_error(e)


def _translated(method):
    @functools.wraps(method)
    def wrapper(*args, **kwargs):
        with _errors():
            return method(*args, **kwargs)
    return wrapper


def _load_doc(config):
    """The config as Python objects where it is JSON (a dict, a JSON
    string, a file), else None (a Mixprec.Config)."""
    if isinstance(config, dict):
        return json.loads(json.dumps(config))
    if isinstance(config, (str, os.PathLike)):
        text = os.fspath(config)
        try:
            if not text.lstrip().startswith("{"):
                with open(text, encoding="utf-8") as f:
                    text = f.read()
            return json.loads(text)
        except (OSError, ValueError):
            return None     # the library says what is wrong with it
    return None


def _config(config):
    """A Mixprec.Config from a Mixprec.Config, a dict (DeepSpeed's JSON
    as Python objects), a JSON string or the path of a JSON file."""
    if isinstance(config, Mixprec.Config):
        return config
    with _errors():
        if isinstance(config, dict):
            return Mixprec.Config.new_from_data(json.dumps(config))
        if isinstance(config, (str, os.PathLike)):
            text = os.fspath(config)
            if text.lstrip().startswith("{"):
                return Mixprec.Config.new_from_data(text)
            return Mixprec.Config.new_from_file(text)
    raise TypeError("mixprec.torch.initialize: config must be a dict, a JSON string, a file name "
                    "or a Mixprec.Config, not %s" % type(config).__name__)


def _auto_cast(doc):
    """Whether the config asks for floating inputs cast to the model's
    dtype (fp16.auto_cast, or bf16.auto_cast)."""
    if not doc:
        return False
    for mode in ("fp16", "bf16"):
        section = doc.get(mode)
        if isinstance(section, dict) and section.get("enabled") not in (False, None, "auto") \
                and section.get("auto_cast") is True:
            return True
    return False


def _warn_config(cfg, doc):
    """Issues the config's warnings, and one that names a precision mode
    an "auto" left off."""
    for w in cfg.get_warnings() or []:
        if w.startswith(("fp16.auto_cast:", "bf16.auto_cast:")):
            continue        # the front does cast the inputs
        warnings.warn("mixprec config: " + w, ConfigWarning, stacklevel=3)
    if not doc:
        return
    mode = cfg.get_precision_mode()
    for key in ("fp16", "bf16"):
        section = doc.get(key)
        if isinstance(section, dict) and section.get("enabled") == "auto" and \
                mode == Mixprec.PrecisionMode.FP32:
            warnings.warn("mixprec config: %s.enabled is \"auto\", which resolves to false outside "
                          "the Hugging Face Trainer: this engine trains in FP32, not %s. Write "
                          "\"enabled\": true to train in %s" % (key, key, key),
                          ConfigWarning, stacklevel=3)


# ------------------------------------------------------------ DeepSpeed's objects

_OPTIMIZERS = {"AdamW": "AdamW", "Adam": "Adam", "FusedAdam": "Adam", "DeepSpeedCPUAdam": "Adam",
               "SGD": "SGD", "Lion": "Lion", "FusedLion": "Lion", "DeepSpeedCPULion": "Lion"}


def _optimizer_section(optimizer):
    """The config's optimizer section for a torch optimizer object libmixprec
    has, from its first param group; a ValueError naming any other."""
    name = type(optimizer).__name__
    kind = _OPTIMIZERS.get(name)
    groups = getattr(optimizer, "param_groups", None)
    if kind is None or not groups:
        raise ValueError("mixprec.torch.initialize: optimizer %s.%s is not one libmixprec runs; "
                         "pass torch.optim.AdamW, Adam or SGD, a Lion, or name the optimizer in "
                         "the config's \"optimizer\" section"
                         % (type(optimizer).__module__, name))
    g = groups[0]
    for other in groups[1:]:
        for key in ("lr", "betas", "eps", "momentum"):
            if other.get(key) != g.get(key):
                raise ValueError("mixprec.torch.initialize: optimizer %s has param groups with "
                                 "different %s; libmixprec runs one set of hyper-parameters"
                                 % (name, key))
    params = {"lr": float(g["lr"])}
    if "weight_decay" in g:
        params["weight_decay"] = float(g["weight_decay"])
    if kind in ("AdamW", "Adam"):
        params["betas"] = [float(b) for b in g.get("betas", (0.9, 0.999))]
        params["eps"] = float(g.get("eps", 1e-8))
        if g.get("amsgrad"):
            raise ValueError("mixprec.torch.initialize: optimizer %s: amsgrad is not supported"
                             % name)
        # torch's Adam adds weight decay to the gradient (L2); DeepSpeed's
        # FusedAdam says so with adam_w_mode.
        if kind == "Adam":
            adamw = g.get("adamw_mode", getattr(optimizer, "adam_w_mode", False))
            params["adam_w_mode"] = bool(adamw)
            if name == "Adam" and type(optimizer).__module__.startswith("torch."):
                params["adam_w_mode"] = bool(g.get("decoupled_weight_decay", False))
    elif kind == "SGD":
        for key in ("momentum", "dampening"):
            if key in g:
                params[key] = float(g[key])
        if "nesterov" in g:
            params["nesterov"] = bool(g["nesterov"])
    elif kind == "Lion":
        beta1, beta2 = g.get("betas", (0.9, 0.99))
        params["betas"] = [float(beta1), float(beta2)]
    return {"type": kind, "params": params}


def _scheduler_section(scheduler):
    """The config's scheduler section for a DeepSpeed scheduler object; a
    ValueError naming any other."""
    name = type(scheduler).__name__
    a = scheduler.__dict__
    try:
        if name in ("WarmupLR", "WarmupDecayLR"):
            params = {"warmup_min_lr": float(a["min_lrs"][0]),
                      "warmup_max_lr": float(a["max_lrs"][0]),
                      "warmup_num_steps": int(a["warmup_num_steps"]),
                      "warmup_type": a.get("warmup_type", "log")}
            if name == "WarmupDecayLR":
                params["total_num_steps"] = int(a["total_num_steps"])
            return {"type": name, "params": params}
        if name == "WarmupCosineLR":
            return {"type": name, "params": {
                "total_num_steps": int(a["total_num_steps"]),
                "warmup_num_steps": int(a["warmup_num_steps"]),
                "warmup_min_ratio": float(a["warmup_min_ratio"]),
                "cos_min_ratio": float(a["cos_min_ratio"]),
                "warmup_type": a.get("warmup_type", "log")}}
    except (KeyError, IndexError, TypeError):
        pass
    raise ValueError("mixprec.torch.initialize: lr_scheduler %s.%s is not one libmixprec runs; "
                     "pass DeepSpeed's WarmupLR, WarmupDecayLR or WarmupCosineLR, or name the "
                     "schedule in the config's \"scheduler\" section"
                     % (type(scheduler).__module__, name))


class _Optimizer(object):
    """What initialize() returns as the optimizer: the engine's, seen the
    way scripts look at a torch optimizer (param_groups' lr, zero_grad)."""

    def __init__(self, engine):
        self._engine = engine

    @property
    def param_groups(self):
        return [{"lr": self._engine.engine.get_lr(),
                 "params": [e.tensor for e in self._engine._entries]}]

    def zero_grad(self, set_to_none=True):
        self._engine.zero_grad()

    def step(self, closure=None):
        raise RuntimeError("mixprec.torch: the optimizer steps in engine.step(); call that")

    def state_dict(self):
        raise RuntimeError("mixprec.torch: the optimizer state is saved by "
                           "engine.save_checkpoint()")


class _Scheduler(object):
    """What initialize() returns as the lr_scheduler when the config has a
    schedule: the engine steps it; get_lr()/get_last_lr() read it."""

    def __init__(self, engine):
        self._engine = engine

    def get_lr(self):
        return self._engine.get_lr()

    get_last_lr = get_lr

    def step(self, *args, **kwargs):
        """Does nothing: engine.step() advances the schedule, as
        DeepSpeed's does when the engine owns the scheduler."""


def add_config_arguments(parser):
    """DeepSpeed's: adds --deepspeed and --deepspeed_config (the config
    file initialize(args=...) reads) to an argparse parser; returns it."""
    group = parser.add_argument_group("DeepSpeed", "DeepSpeed configurations")
    group.add_argument("--deepspeed", default=False, action="store_true",
                       help="Enable DeepSpeed (accepted; mixprec.torch is always on)")
    group.add_argument("--deepspeed_config", default=None, type=str,
                       help="DeepSpeed json configuration file.")
    return parser


def init_distributed(dist_backend=None, *args, **kwargs):
    """DeepSpeed's: does nothing, since libmixprec's engine finds its ranks
    in the launcher's environment itself (see the module's documentation)."""


@_translated
def initialize(args=None, model=None, optimizer=None, model_parameters=None, training_data=None,
               lr_scheduler=None, distributed_port=None, mpu=None, dist_init_required=None,
               collate_fn=None, config=None, config_params=None, comm=None,
               model_parallel_comm=None, **kwargs):
    """initialize(model=None, optimizer=None, model_parameters=None,
    training_data=None, lr_scheduler=None, config=None, ...)
    -> (engine, optimizer, training_dataloader, lr_scheduler)

    initialize(model, config, comm=None, model_parallel_comm=None) -> Engine

    The tuple DeepSpeed's way returns also acts as its engine (attributes
    and calls go to it), so 1.0's initialize(model=..., config=...) keeps
    working.

    DeepSpeed's signature, or the 1.0 one (a module as the first
    positional argument). Makes a libmixprec engine from config (a dict
    in DeepSpeed's JSON layout, a JSON file name or string, or a
    Mixprec.Config), registers model's trainable parameters with it and
    makes them views of the engine's working copies. optimizer and
    lr_scheduler: a torch optimizer or DeepSpeed scheduler object
    libmixprec has, which becomes the config's section (see the module's
    documentation). comm: a Mixprec.Comm to use instead of the one the
    launcher's environment gives; model_parallel_comm: the ranks that
    hold the other pieces of the same model, which must agree on overflow
    (Mixprec.Engine.new_with_comm)."""
    old_spelling = isinstance(args, torch.nn.Module)
    if old_spelling:
        # initialize(model, config, comm, model_parallel_comm), positionally.
        if config is None:
            config = model
        model = args
        if isinstance(optimizer, Mixprec.Comm) or isinstance(model_parameters, Mixprec.Comm):
            comm, model_parallel_comm = optimizer, model_parameters
            optimizer = model_parameters = None
    if config is None:
        config = config_params
    if config is None and args is not None and hasattr(args, "deepspeed_config"):
        config = args.deepspeed_config
    if kwargs:
        raise TypeError("mixprec.torch.initialize: unexpected keyword argument%s %s"
                        % ("s" if len(kwargs) > 1 else "", ", ".join(sorted(kwargs))))
    if not isinstance(model, torch.nn.Module):
        raise TypeError("mixprec.torch.initialize: model must be a torch.nn.Module, not %s"
                        % type(model).__name__)
    if config is None:
        raise TypeError("mixprec.torch.initialize: a config is needed (config=...)")
    if model_parameters is not None:
        given = set()
        for item in model_parameters:
            # Tensors, or torch's param groups ({"params": [...], ...}).
            if isinstance(item, dict):
                params = item.get("params", [])
                params = [params] if isinstance(params, torch.Tensor) else params
                given.update(id(p) for p in params)
            else:
                given.add(id(item))
        missing = [n for n, p in model.named_parameters() if p.requires_grad and id(p) not in given]
        if missing:
            raise ValueError("mixprec.torch.initialize: model_parameters leaves out trainable "
                             "parameters (%s): libmixprec trains every parameter that requires "
                             "grad; freeze the others with requires_grad_(False)"
                             % ", ".join(missing[:5]))
    if optimizer is not None or lr_scheduler is not None:
        doc = _load_doc(config)
        if doc is None:
            if isinstance(config, Mixprec.Config):
                raise ValueError("mixprec.torch.initialize: an optimizer or lr_scheduler object "
                                 "with a Mixprec.Config, whose resolved sections name the "
                                 "optimizer already; pass the config as a dict, JSON string "
                                 "or file instead")
            else:
                _config(config)     # says what is wrong with it
                raise TypeError("mixprec.torch.initialize: config is not JSON")
        if optimizer is not None:
            if callable(optimizer) and not hasattr(optimizer, "param_groups"):
                optimizer = optimizer([p for p in model.parameters() if p.requires_grad])
            section = _optimizer_section(optimizer)
            if "optimizer" in doc:
                raise ValueError("mixprec.torch.initialize: both an optimizer object and the "
                                 "config's \"optimizer\" section; DeepSpeed refuses that too")
            doc["optimizer"] = section
        if lr_scheduler is not None:
            if callable(lr_scheduler) and not hasattr(lr_scheduler, "step"):
                raise ValueError("mixprec.torch.initialize: an lr_scheduler callable is not "
                                 "supported; name the schedule in the config")
            section = _scheduler_section(lr_scheduler)
            if "scheduler" in doc:
                raise ValueError("mixprec.torch.initialize: both an lr_scheduler object and the "
                                 "config's \"scheduler\" section")
            doc["scheduler"] = section
        config = doc
    doc = _load_doc(config)
    auto_cast = _auto_cast(doc)
    if doc and isinstance(doc.get("bf16"), dict) and "auto_cast" in doc["bf16"]:
        # The front's key (DeepSpeed has fp16.auto_cast alone): the
        # library's config does not know it.
        doc["bf16"].pop("auto_cast")
        config = doc
    cfg = _config(config)
    _warn_config(cfg, doc)
    device = cfg.get_device()
    if device not in ("cpu", "cuda"):
        raise ValueError("mixprec.torch: mixprec.device is '%s'; mixprec.torch drives engines "
                         "on the cpu and cuda devices" % device)
    if comm is None and model_parallel_comm is None:
        comm = _launcher_comm(cfg, doc)
    with _errors():
        if comm is not None or model_parallel_comm is not None:
            engine = Mixprec.Engine.new_with_comm(cfg, comm, model_parallel_comm)
        else:
            engine = Mixprec.Engine.new(cfg)
    front = Engine(model, engine, auto_cast=auto_cast,
                   max_reuse_distance=_max_reuse_distance(doc), comm=comm)
    if old_spelling:
        return front
    front._ds_returns = True
    loader = None
    if training_data is not None:
        loader = torch.utils.data.DataLoader(training_data, collate_fn=collate_fn,
                                             batch_size=cfg.get_train_micro_batch_size_per_gpu(),
                                             drop_last=True)
    sched = _Scheduler(front) if cfg.get_scheduler_type() else None
    front.optimizer = _Optimizer(front)
    front.lr_scheduler = sched
    front.training_dataloader = loader
    return _Initialized((front, front.optimizer, loader, sched))


_launcher = {}      # "comm": the launcher's ranks joined once, or None on one process


def _max_reuse_distance(doc):
    """DeepSpeed's zero_optimization.stage3_max_reuse_distance (or
    max_reuse_distance), default 1e9 elements as DeepSpeed's: the library's
    config accepts the key and leaves it to the front (see
    mixprec/_torch_zero.py)."""
    section = doc.get("zero_optimization") if doc else None
    if not isinstance(section, dict):
        return 1000000000
    for key in ("stage3_max_reuse_distance", "max_reuse_distance"):
        if key in section:
            value = section[key]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or \
                    not value >= 0 or value != int(value):
                raise ValueError("mixprec config: zero_optimization.%s is %r; it must be a "
                                 "non-negative whole number of elements" % (key, value))
            return int(value)
    return 1000000000


def _launcher_comm(cfg, doc):
    """The communicator of the launcher's ranks (mixprec-run), joined at
    the first initialize() of the process and kept for the later ones: the
    rendezvous happens once per process (mixprec-run hands rank 0 one
    listening socket), and a script that makes a second engine (to resume
    from a checkpoint) joins the same ranks again. None where the engine
    joins them itself: on one process, on a device other than the cpu
    (whose communicator runs on the device's stream), with comm "local",
    and for a config that requires a job secret when the environment has
    none (the engine says so) or that is not JSON (which may)."""
    if cfg.get_device() != "cpu" or cfg.get_comm_backend() == "local":
        if _launcher.get("init") is not None:
            raise ValueError("mixprec.torch: zero.Init joined the launcher's ranks on the cpu "
                             "(with %s), but this config's engine joins them itself (device "
                             "'%s', comm '%s'): give zero.Init this config"
                             % (_launcher["init"], cfg.get_device(), cfg.get_comm_backend()))
        return None
    if "comm" in _launcher:
        return _launcher["comm"]
    section = doc.get("mixprec") if isinstance(doc, dict) else None
    if doc is None or (isinstance(section, dict) and section.get("require_job_secret") and
                       not (os.environ.get("MIXPREC_JOB_SECRET") or
                            os.environ.get("MIXPREC_JOB_SECRET_FILE"))):
        return None
    # The engine's timeout: MIXPREC_TIMEOUT, else the config's.
    timeout = 0 if os.environ.get("MIXPREC_TIMEOUT") else int(cfg.get_timeout() * 1000 + 0.5)
    with _errors():
        bootstrap = Mixprec.Bootstrap.new_from_environment(timeout)
        comm = None
        if bootstrap.get_world_size() > 1:
            comm = Mixprec.Comm.new(bootstrap, cfg.get_comm_backend(), "cpu", timeout)
    _launcher["comm"] = comm
    return comm


class _Initialized(tuple):
    """What initialize() returns when called DeepSpeed's way: the tuple
    (engine, optimizer, training_dataloader, lr_scheduler), which is also
    the engine itself, attributes and calls passed on to it, since 1.0's
    initialize(model=..., config=...) returned the engine and code that
    spells it so keeps working."""
    __slots__ = ()

    def __getattr__(self, name):
        return getattr(tuple.__getitem__(self, 0), name)

    def __call__(self, *args, **kwargs):
        return tuple.__getitem__(self, 0)(*args, **kwargs)


class _Entry(object):
    __slots__ = ("name", "tensor", "param", "dtype", "address", "shape",
                 # ZeRO-3 (mixprec/_torch_zero.py): whether partitioned, and its state
                 "z3", "partitioner", "unit", "count", "bwd", "kept", "view", "position",
                 "placeholder", "shaped", "chunk")


def _numel(shape):
    n = 1
    for k in shape:
        n *= k
    return n


def _init_later_ok(cfg):
    """Whether a registration with zeros and new values once laid out
    gives the bits of a registration with the values: not for Kahan
    masters (a registration starts their compensation at zero, new values
    keep their rounding's error there) nor FP8 (whose scalings start from
    the registered values)."""
    return cfg.get_master_weights() != Mixprec.MasterWeights.KAHAN and \
        cfg.get_fp8_recipe() is None


def _environment_world():
    """The world size the launcher's environment names (the variables
    Mixprec.Bootstrap reads), 1 without one."""
    for name in ("MIXPREC_WORLD_SIZE", "WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS"):
        value = os.environ.get(name)
        if value:
            try:
                return max(int(value), 1)
            except ValueError:
                return 1
    return 1


def _init_comm(config):
    """For zero.Init: (the launcher's ranks, joined as initialize() joins
    them (and kept for it), with config's backend and device (the
    defaults without one), None) on several ranks of the cpu device; (the
    one rank, None) on one process and with comm "local"; (None, why)
    where the ranks are several but initialize()'s engine joins them
    itself (a device other than the cpu), so that nothing can be
    partitioned before it."""
    if config is None:
        config = {}
    doc = config if isinstance(config, dict) else None
    if isinstance(config, (str, os.PathLike)):
        text = os.fspath(config)
        try:
            if not text.lstrip().startswith("{"):
                with open(text) as f:
                    text = f.read()
            doc = json.loads(text)
        except (OSError, ValueError) as e:
            raise ValueError("mixprec.torch.zero.Init: config %r is not a readable JSON file "
                             "or string (%s)" % (os.fspath(config), e)) from None
    cfg = _config(config)
    fresh = "comm" not in _launcher
    comm = _launcher_comm(cfg, doc)
    if fresh and comm is not None:
        _launcher["init"] = "its config" if config else "the default config"
    if comm is not None:
        return comm, None
    if cfg.get_comm_backend() == "local" or _environment_world() == 1:
        return zero.OneRank(), None
    if cfg.get_device() != "cpu":
        return None, ("on device '%s' the engine initialize() makes joins the %d ranks itself, "
                      "on the device's communicator" % (cfg.get_device(), _environment_world()))
    return None, ("the engine initialize() makes joins the %d ranks itself (the config asks "
                  "for a job secret the environment does not give)" % _environment_world())


def _fp32_bytes(t):
    t = t.detach().to(device="cpu", dtype=torch.float32).contiguous()
    return GLib.Bytes.new(ctypes.string_at(t.data_ptr(), t.numel() * 4))


def _cast_floating(value, dtype):
    if isinstance(value, torch.Tensor):
        return value.to(dtype) if value.is_floating_point() and value.dtype != dtype else value
    if isinstance(value, tuple):
        return tuple(_cast_floating(v, dtype) for v in value)
    if isinstance(value, list):
        return [_cast_floating(v, dtype) for v in value]
    if isinstance(value, dict):
        return {k: _cast_floating(v, dtype) for k, v in value.items()}
    return value


def _other_floating(value, dtype):
    """The dtype of a floating tensor in value that is not dtype, or None."""
    if isinstance(value, torch.Tensor):
        return value.dtype if value.is_floating_point() and value.dtype != dtype else None
    if isinstance(value, (tuple, list)):
        value = list(value)
    elif isinstance(value, dict):
        value = list(value.values())
    else:
        return None
    for v in value:
        found = _other_floating(v, dtype)
        if found is not None:
            return found
    return None


def _matches(pattern, class_names):
    """Whether a module type of the config names one of class_names (with
    or without its dotted package prefix, as libmixprec matches)."""
    short = pattern.rsplit(".", 1)[-1]
    return short in class_names


_ENGINE_ATTR = "_mixprec_torch_engine"
_SAFETENSORS_DTYPE = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
                      torch.float64: "F64", torch.int64: "I64", torch.int32: "I32",
                      torch.int16: "I16", torch.int8: "I8", torch.uint8: "U8", torch.bool: "BOOL"}


class Engine(object):
    """A model trained by a libmixprec engine (see the module's
    documentation). Made by initialize().

    Attributes: ``module`` (the model), ``engine`` (the Mixprec.Engine),
    ``params`` (parameter name -> Mixprec.Param, in registration order),
    ``device`` (the torch.device of the engine's buffers and the model),
    ``dtype`` (the torch dtype most of the model's weights have now),
    ``timings`` (seconds spent in the engine, summed over the run:
    ``"intake"`` handing gradients over from the hooks, ``"backward_done"``
    and ``"step"``), ``last_step`` (the Mixprec.StepResult of the last
    step, or None), ``global_steps``, ``global_samples``,
    ``skipped_steps``, ``micro_steps`` (DeepSpeed's counters).
    """

    def __init__(self, model, engine, auto_cast=False, max_reuse_distance=1000000000,
                 comm=None):
        self.module = model
        # The launcher's communicator (host memory), for ZeRO-3's frozen chunks.
        self._comm = comm
        self.max_reuse_distance = max_reuse_distance
        self.engine = engine
        self.params = {}
        self.last_step = None
        self.timings = {"intake": 0.0, "backward_done": 0.0, "step": 0.0}
        self.micro_steps = 0
        self._entries = []
        self._hooks = []
        self._autocast = None
        self._auto_cast = auto_cast
        self._warned_input = False
        self._detached = None
        self._ds_returns = False
        self._counters = (0, 0)         # (global_steps, skipped_steps) loaded
        self._grads_out = False
        self._forward = None
        self._zero3 = None
        self.expose_grads = True

        previous = getattr(model, _ENGINE_ATTR, None)
        previous = previous() if previous is not None else None
        if previous is not None and previous._detached is None:
            previous._detach("the model was initialized again by another mixprec.torch engine, "
                             "which trains it now")
            warnings.warn("mixprec.torch.initialize: this model already had a mixprec.torch "
                          "engine; that engine is detached (its hooks removed) and this one "
                          "starts from the model's current weights", RuntimeWarning,
                          stacklevel=3)

        cfg = engine.get_config()
        fp32_modules = set(cfg.get_fp32_modules() or [])
        seen = set()
        owner = {}
        frozen = []
        # Under ZeRO-3 each parameter's torch copy is dropped once the
        # engine holds its values (a reference to the same GBytes), so
        # that the model is never in memory twice; restored if anything
        # fails before the engine is prepared.
        handed = [] if cfg.get_zero_stage() == 3 else None
        # Parameters zero.Init partitioned: under ZeRO-3 on several ranks
        # registered with zeros (views of one buffer) and given their
        # values one at a time once the engine holds its slices (see
        # _torch_zero.Init). On one process, where the engine holds
        # everything anyway, each is made whole and registered with its
        # values (a set_master per parameter would cost a pass over the
        # model each on a device).
        self._init_later = [] if handed is not None and _init_later_ok(cfg) and \
            engine.get_world_size() > 1 else None
        try:
            self._register(model, engine, seen, owner, frozen, handed)
            if not self._entries:
                raise ValueError("mixprec.torch: the model has no trainable parameters")
            self._warn_unmatched(cfg, model)
            with _errors():
                engine.prepare()
            self._zeros = None
            for e in self._init_later or ():
                values = zero.init_values(e.tensor)
                with _errors():
                    engine.set_master(e.name, values, 0)
                del values
                zero.init_done(e.tensor)
        except BaseException:
            for p, dtype, values, shape in handed or ():
                p.data = torch.frombuffer(bytearray(values.get_data()), dtype=torch.float32) \
                    .reshape(shape).to(device=p.device, dtype=dtype)
            raise
        del handed
        self._finish_init(model, engine, cfg, owner, frozen, fp32_modules)

    def _register(self, model, engine, seen, owner, frozen, handed):
        """Registers the model's trainable parameters with the engine."""
        for module_name, module in model.named_modules():
            for pname, p in module.named_parameters(recurse=False):
                if id(p) in seen:
                    continue        # a tied parameter: registered once
                seen.add(id(p))
                name = module_name + "." + pname if module_name else pname
                if p.device.type not in ("cpu", "cuda"):
                    raise ValueError("mixprec.torch: parameter '%s' is on %s; mixprec.torch "
                                     "takes models in host memory (cpu) or on a CUDA device"
                                     % (name, p.device))
                later = self._init_later is not None and p.requires_grad and \
                    zero.init_partitioned(p)
                if not later:
                    zero.init_restore(p)        # zero.Init's chunks: whole again
                if not p.requires_grad:
                    frozen.append((module, p))
                    continue
                if not p.is_floating_point():
                    raise TypeError("mixprec.torch: parameter '%s' has dtype %s; libmixprec "
                                    "trains floating-point parameters" % (name, p.dtype))
                if p.numel() == 0 and not later:
                    continue
                e = _Entry()
                e.name = name
                e.tensor = p
                e.shape = zero.init_shape(p) if later else tuple(p.shape)
                # libmixprec has no 0-d parameters: a scalar is one element.
                values = self._init_zeros(model, e.shape) if later else _fp32_bytes(p)
                with _errors():
                    e.param = engine.register_param(name, list(e.shape) or [1],
                                                    type(module).__name__, _DT.FLOAT32,
                                                    values)
                if later:
                    self._init_later.append(e)
                elif handed is not None:
                    handed.append((p, p.dtype, values, e.shape))
                    p.data = torch.empty(0, dtype=p.dtype, device=p.device)
                e.dtype = e.param.get_working_dtype()
                e.address = None
                e.z3 = False
                self.params[name] = e.param
                self._entries.append(e)
                owner.setdefault(id(module), (module, []))[1].append(e)

    def _init_zeros(self, model, shape):
        """Zeros for a parameter of shape: a view of one buffer of the
        largest zero.Init parameter's size, which every such parameter's
        registration shares until the engine lays out its buffers."""
        zeros = getattr(self, "_zeros", None)
        if zeros is None:
            biggest = max(_numel(zero.init_shape(p)) for p in model.parameters()
                          if zero.init_partitioned(p))
            zeros = self._zeros = GLib.Bytes.new(bytes(4 * max(biggest, 1)))
        return GLib.Bytes.new_from_bytes(zeros, 0, 4 * max(_numel(shape), 1))

    def _finish_init(self, model, engine, cfg, owner, frozen, fp32_modules):
        # Where the engine's buffers are (DLPack's device type and id).
        dl_type, dl_id = self._engine_device()
        if dl_type == _KDL_CPU:
            self.device = torch.device("cpu")
        elif dl_type == _KDL_CUDA:
            self.device = torch.device("cuda", dl_id)
        else:
            raise ValueError("mixprec.torch: the engine's buffers are on DLPack device type %d, "
                             "which torch does not know" % dl_type)
        for e in self._entries:
            if e.tensor.device != self.device:
                raise ValueError("mixprec.torch: parameter '%s' is on %s, the engine's buffers "
                                 "on %s: move the model there first (model.to(%r))"
                                 % (e.name, e.tensor.device, self.device, str(self.device)))
        # ZeRO-3: the parameters the engine partitions stop holding data
        # (see mixprec/_torch_zero.py); the rest are views, as below ZeRO-3.
        self._zero3 = None
        if cfg.get_zero_stage() == 3:
            partitioned = [e for e in self._entries if self._partitioned(e, cfg)]
            if partitioned:
                self._zero3 = zero.Partitioner(self, partitioned, _errors, _TORCH_DTYPE)
        self._bind()

        # The model's dtype: the working dtype of most of its elements.
        counts = {}
        for e in self._entries:
            counts[e.dtype] = counts.get(e.dtype, 0) + e.param.get_numel()
        self.dtype = _TORCH_DTYPE[max(counts, key=counts.get)]
        # Frozen parameters: the working dtype, as DeepSpeed casts the
        # whole module, and never registered (no master, no gradient).
        for module, p in frozen:
            if p.is_floating_point():
                own = owner.get(id(module))
                if own is not None:
                    dtype = _TORCH_DTYPE[own[1][0].dtype]
                elif _matches_any(fp32_modules, type(module)):
                    dtype = torch.float32
                else:
                    dtype = self.dtype
                if p.dtype != dtype:
                    p.data = p.data.to(dtype)
        if cfg.get_zero_stage() == 3:
            self._partition_frozen(model, frozen, cfg)
        # Modules in another dtype (fp32_modules): inputs to theirs, outputs back.
        for module, entries in owner.values():
            dtypes = {_TORCH_DTYPE[e.dtype] for e in entries}
            if len(dtypes) == 1 and dtypes != {self.dtype}:
                own = dtypes.pop()
                self._hooks.append(module.register_forward_pre_hook(
                    lambda m, args, own=own: _cast_floating(args, own)))
                self._hooks.append(module.register_forward_hook(
                    lambda m, args, out, model_dtype=self.dtype: _cast_floating(out, model_dtype)))

        for e in self._entries:
            self._hooks.append(e.tensor.register_post_accumulate_grad_hook(self._hook(e)))
        if self._zero3 is not None:
            self._zero3.install(model)

        if cfg.get_precision_mode() == Mixprec.PrecisionMode.AUTOCAST:
            self._autocast = _TORCH_DTYPE[cfg.get_low_dtype()]
            # model(x) autocasts as engine(x) does: the model's own forward.
            inner = model.forward
            autocast_dtype = self._autocast
            device_type = self.device.type

            @functools.wraps(inner)
            def forward(*args, **kwargs):
                with torch.autocast(device_type, dtype=autocast_dtype):
                    return inner(*args, **kwargs)
            self._forward = ("forward" in model.__dict__, model.__dict__.get("forward"))
            model.forward = forward
        setattr(model, _ENGINE_ATTR, weakref.ref(self))

    def _partition_frozen(self, model, frozen, cfg):
        """ZeRO-3 partitions the frozen floating-point parameters too (not
        below stage3_param_persistence_threshold elements), as DeepSpeed
        does: chunks exchanged over the launcher's communicator in host
        memory (see mixprec/_torch_zero.py), so on several ranks only where
        the front has it (the cpu device); elsewhere they stay whole."""
        comm = self._comm
        if comm is not None and comm.get_device() != "cpu":
            comm = None
        if self.engine.get_world_size() > 1 and comm is None:
            return
        names = {id(p): n for n, p in model.named_parameters()}
        threshold = max(cfg.get_param_persistence_threshold(), 1)
        entries, seen = [], set()
        for module, p in frozen:
            if id(p) in seen or p.dtype not in _MIXPREC_DTYPE or p.numel() < threshold:
                continue
            seen.add(id(p))
            e = _Entry()
            e.name = names[id(p)]
            e.tensor = p
            e.shape = tuple(p.shape)
            e.param = zero.FrozenParam(e.name, p.numel())
            e.dtype = _MIXPREC_DTYPE[p.dtype]
            e.address = None
            entries.append(e)
        if not entries:
            return
        if self._zero3 is None:
            self._zero3 = zero.Partitioner(self, [], _errors, _TORCH_DTYPE)
        self._zero3.add_frozen(entries, comm)

    def _frozen_z3(self):
        """The tensors of the frozen parameters ZeRO-3 partitions."""
        return [e.tensor for e in self._zero3.frozen] if self._zero3 is not None else []

    def _warn_unmatched(self, cfg, model):
        classes = {type(m).__name__ for m in model.modules()}
        lists = [("mixprec.fp32_modules", cfg.get_fp32_modules())]
        if cfg.get_precision_mode() == Mixprec.PrecisionMode.AUTOCAST:
            lists.append(("torch_autocast.lower_precision_safe_modules",
                          cfg.get_lower_precision_safe_modules()))
        if cfg.get_fp8_recipe() is not None:
            lists.append(("mixprec.fp8_modules", cfg.get_fp8_modules()))
        for key, names in lists:
            for name in names or []:
                if _matches("Linear", {name}) and "Conv1D" in classes:
                    # Hugging Face's Conv1D (GPT-2's attention and MLP) is a
                    # Linear of another class: "Linear" misses it.
                    warnings.warn("mixprec config: %s names the module type '%s', which does not "
                                  "select this model's Conv1D layers (Hugging Face's Conv1D, as "
                                  "GPT-2 has, is a Linear of another class): add \"Conv1D\" to "
                                  "select them" % (key, name), ConfigWarning, stacklevel=4)
                elif not _matches(name, classes) and not key.startswith("torch_autocast"):
                    warnings.warn("mixprec config: %s names the module type '%s', which no "
                                  "module of this model has; its module types are %s"
                                  % (key, name, ", ".join(sorted(classes))),
                                  ConfigWarning, stacklevel=4)

    # ------------------------------------------------------------ views

    def _engine_device(self):
        """DLPack's (device type, id) of the engine's buffers, from a
        working copy this rank holds whole (under ZeRO-3 on several
        ranks, perhaps one gathered for the purpose: every rank does the
        same)."""
        for e in self._entries:
            try:
                return e.param.get_device_address(Mixprec.ParamBuffer.WORKING)[2:]
            except GLib.Error:
                continue
        first = self._entries[0].param
        with _errors():
            self.engine.gather(first)
        try:
            return first.get_device_address(Mixprec.ParamBuffer.WORKING)[2:]
        finally:
            self.engine.release(first)

    def _partitioned(self, e, cfg):
        """Whether ZeRO-3 partitions e: on several ranks, where the engine
        holds a slice of it only; on one process (where the engine's
        copies are whole anyway), where it is not below
        stage3_param_persistence_threshold, as on several."""
        if self.engine.get_world_size() == 1:
            return e.param.get_numel() >= cfg.get_param_persistence_threshold()
        try:
            e.param.get_device_address(Mixprec.ParamBuffer.WORKING)
            return False
        except GLib.Error:
            return True

    def _bind(self):
        """Makes each parameter's data the engine's working copy (again,
        where the engine moved it); ZeRO-3's partitioned parameters are
        gathered by their modules instead."""
        for e in self._entries:
            if e.z3:
                continue
            address, dtype = e.param.get_device_address(Mixprec.ParamBuffer.WORKING)[:2]
            if address == e.address:
                continue
            view = torch.from_dlpack(e.param.working)
            if (view.data_ptr() != address or view.dtype != _TORCH_DTYPE[dtype] or
                    view.device != self.device):
                raise RuntimeError("mixprec.torch: parameter '%s': torch.from_dlpack did not "
                                   "share the engine's working copy" % e.name)
            e.tensor.data = view.reshape(e.shape)
            e.address = address

    def _check(self):
        """Refuses to go on when the engine no longer trains the model."""
        if self._detached is not None:
            raise RuntimeError("mixprec.torch: this engine is detached from its model: %s"
                               % self._detached)
        for e in self._entries:
            if e.z3:
                replaced = e.tensor.dtype != _TORCH_DTYPE[e.dtype] or \
                    (e.count == 0 and e.tensor.numel() != 0 and
                     e.tensor.data_ptr() != e.shaped.data_ptr())
            else:
                replaced = e.tensor.data_ptr() != e.address or \
                    e.tensor.dtype != _TORCH_DTYPE[e.dtype]
            if replaced:
                raise RuntimeError(
                    "mixprec.torch: parameter '%s' (%s) is no longer the engine's working copy "
                    "(%s): its data was replaced after initialize, as model.float(), "
                    "model.to(dtype) or model.half() do, so the engine's steps would never "
                    "reach it. Leave the dtypes to the engine, or initialize again"
                    % (e.name, e.tensor.dtype, _TORCH_DTYPE[e.dtype]))

    def _detach(self, why):
        self.close()
        self._detached = why

    def _hook(self, e):
        dtype = None

        def hook(p):
            nonlocal dtype
            g = p.grad
            if g is None:
                return
            if not g.is_contiguous():
                g = g.contiguous()
            if dtype is None or _TORCH_DTYPE[dtype] != g.dtype:
                dtype = _MIXPREC_DTYPE.get(g.dtype)
                if dtype is None:
                    raise TypeError("mixprec.torch: parameter '%s': gradient of dtype %s"
                                    % (e.name, g.dtype))
            start = time.perf_counter()
            with _errors():
                if g.device.type == "cuda":
                    # The engine reads it on its own stream: torch's must be done.
                    torch.cuda.current_stream(g.device).synchronize()
                    e.param.reduce_grad_device_address(dtype, g.data_ptr())
                else:
                    e.param.reduce_grad_address(dtype, g.data_ptr())
            self.timings["intake"] += time.perf_counter() - start
            p.grad = None
            if e.z3:
                e.partitioner.after_gradient(e)
        return hook

    def _expose_grads(self):
        """At the boundary, each p.grad: the engine's accumulated gradient
        over gradient_accumulation_steps, as DeepSpeed's p.grad reads."""
        if not self.expose_grads:
            return
        if self.engine.get_world_size() > 1 and \
                self.engine.get_config().get_zero_stage() >= 1:
            # Reduce-scattered: each rank holds its slices of the sum only.
            # (Asking for a parameter's gradient buffer would make the
            # engine allocate one of the whole model under ZeRO-2, and
            # would read this rank's own gradients.)
            return
        gas = self.engine.get_gradient_accumulation_steps()
        if self.device.type != "cpu":
            # Waits for the engine's stream: the accumulated gradients are
            # complete for torch's.
            self._entries[0].param.get_device_address(Mixprec.ParamBuffer.WORKING)
        for e in self._entries:
            if e.z3:
                continue        # partitioned: its data is a placeholder
            try:
                buf = e.param.accum if gas > 1 else e.param.grad
                g = torch.from_dlpack(buf).reshape(e.shape)
            except (GLib.Error, ValueError, RuntimeError, TypeError, BufferError):
                continue        # sharded across ranks, or not in this engine
            g = g.float() / gas if gas > 1 else g.clone()
            e.tensor.grad = g.to(e.tensor.dtype)
        self._grads_out = True

    def _drop_grads(self):
        if self._grads_out:
            for e in self._entries:
                e.tensor.grad = None
            self._grads_out = False

    # ------------------------------------------------------------ training

    def __call__(self, *args, **kwargs):
        """The model's forward pass (under torch.autocast in the
        torch_autocast mode); with fp16/bf16 auto_cast, floating inputs
        cast to the model's dtype first."""
        if self._autocast is None:
            if self._auto_cast:
                args = _cast_floating(args, self.dtype)
                kwargs = _cast_floating(kwargs, self.dtype)
            elif not self._warned_input and self.dtype != torch.float32:
                other = _other_floating((args, kwargs), self.dtype)
                if other is not None:
                    self._warned_input = True
                    warnings.warn("mixprec.torch: an input of dtype %s goes to a model in %s; "
                                  "\"auto_cast\": true in the config's %s section casts floating "
                                  "inputs to the model's dtype, as DeepSpeed's fp16.auto_cast "
                                  "does" % (other, self.dtype,
                                            "fp16" if self.dtype == torch.float16 else "bf16"),
                                  RuntimeWarning, stacklevel=2)
        return self.module(*args, **kwargs)

    forward = __call__

    def train(self, mode=True):
        self.module.train(mode)
        return self

    def eval(self):
        self.module.eval()
        return self

    def parameters(self, recurse=True):
        return self.module.parameters(recurse)

    def named_parameters(self, *args, **kwargs):
        return self.module.named_parameters(*args, **kwargs)

    def state_dict(self, *args, **kwargs):
        return self.module.state_dict(*args, **kwargs)

    def backward(self, loss, retain_graph=False, scale_wrt_gas=True):
        """Runs autograd on loss (a scalar) multiplied by the engine's loss
        scale, in FP32 as DeepSpeed does; the parameters' hooks hand each
        gradient to the engine as it is produced. Then ends the micro-step
        (Mixprec.Engine.backward_done): a parameter that got no gradient
        counts as zero. The loss is not divided by
        gradient_accumulation_steps: the engine averages the micro-steps'
        gradients itself (where DeepSpeed's backward divides the loss; the
        result is the same). At the boundary the parameters' p.grad read
        the accumulated gradient (see the module's documentation).
        Returns loss, as DeepSpeed's does."""
        self._check()
        self._drop_grads()
        scale = self.engine.get_loss_scale()
        scaled = loss.float() * scale if scale != 1.0 else loss
        scaled.backward(retain_graph=retain_graph)
        if self._zero3 is not None:
            self._zero3.end_backward()
        start = time.perf_counter()
        with _errors():
            self.engine.backward_done()
        self.timings["backward_done"] += time.perf_counter() - start
        if self.engine.is_accumulation_boundary():
            self._expose_grads()
        return loss

    def is_gradient_accumulation_boundary(self):
        """DeepSpeed's: whether the micro-step under way (the next
        backward()) completes an accumulation window, counted by the
        step() calls so far."""
        gas = self.engine.get_gradient_accumulation_steps()
        return (self.micro_steps + 1) % gas == 0

    def gradient_accumulation_steps(self):
        return self.engine.get_gradient_accumulation_steps()

    def train_micro_batch_size_per_gpu(self):
        return self.engine.get_config().get_train_micro_batch_size_per_gpu()

    def train_batch_size(self):
        cfg = self.engine.get_config()
        return (cfg.get_train_micro_batch_size_per_gpu() or 1) * \
            self.engine.get_gradient_accumulation_steps() * self.engine.get_world_size()

    def gradient_clipping(self):
        return self.engine.get_config().get_gradient_clipping()

    def zero_optimization_stage(self):
        return self.engine.get_config().get_zero_stage()

    def fp16_enabled(self):
        return self.engine.get_config().get_precision_mode() in (
            Mixprec.PrecisionMode.FP16, Mixprec.PrecisionMode.FP16_NO_MASTER)

    def bfloat16_enabled(self):
        return self.engine.get_config().get_precision_mode() in (
            Mixprec.PrecisionMode.BF16, Mixprec.PrecisionMode.BF16_NO_MASTER)

    @property
    def local_rank(self):
        return int(os.environ.get("LOCAL_RANK", "0"))

    def zero_grad(self, set_to_none=True):
        """Drops the p.grad the boundary exposed (the engine's own
        gradients are zeroed by its step)."""
        self._drop_grads()
        for e in self._entries:
            e.tensor.grad = None

    @contextlib.contextmanager
    def no_sync(self):
        """DeepSpeed's no_sync(): at ZeRO stages 0 and 1 the engine reduces
        only at the boundary anyway, so it changes nothing; at stage 2 it
        is refused, as DeepSpeed refuses it."""
        stage = self.engine.get_config().get_zero_stage()
        if stage >= 2:
            raise RuntimeError("mixprec.torch: no_sync() is incompatible with gradient "
                               "partitioning (zero_optimization.stage %d)" % stage)
        yield

    def train_batch(self, data_iter=None):
        """DeepSpeed's pipeline engine's train_batch(), for a model that
        computes its own loss: runs gradient_accumulation_steps micro-steps,
        each on the next item of data_iter (a tuple or list goes in as
        positional arguments, a dict as keyword arguments, anything else as
        the one argument) with the model's output (a scalar tensor, or an
        output with a ``loss`` attribute or key) as the loss, then the
        step. Returns the mean loss of the micro-steps, a tensor."""
        if data_iter is None:
            raise ValueError("mixprec.torch: train_batch() needs data_iter (an iterator of "
                             "micro-batches)")
        losses = []
        for _ in range(self.engine.get_gradient_accumulation_steps()):
            batch = next(data_iter)
            if isinstance(batch, dict):
                out = self(**batch)
            elif isinstance(batch, (tuple, list)):
                out = self(*batch)
            else:
                out = self(batch)
            loss = out
            if not isinstance(loss, torch.Tensor):
                loss = out["loss"] if isinstance(out, dict) else getattr(out, "loss", None)
            if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
                raise TypeError("mixprec.torch: train_batch(): the model's output is not a "
                                "scalar loss, nor has one as .loss (%s)" % type(out).__name__)
            self.backward(loss)
            self.step()
            losses.append(loss.detach().float())
        return torch.stack(losses).mean()

    def step(self, lr_kwargs=None):
        """At the gradient-accumulation boundary, the engine's step
        (unscale, overflow check and skip, clipping, optimizer, new working
        copies written into the model's parameters): returns its
        Mixprec.StepResult. Between boundaries does nothing and returns
        None."""
        self._check()
        self.micro_steps += 1
        if not self.engine.is_accumulation_boundary():
            return None
        self._drop_grads()
        if self._zero3 is not None:
            self._zero3.before_step("step()")
        start = time.perf_counter()
        with _errors():
            result = self.engine.step()
        whole = [e for e in self._entries if not e.z3]
        if self.device.type != "cpu" and whole:
            # Waits for the engine's stream: the new weights are complete
            # for torch's (a ZeRO-3 gather waits for it itself).
            whole[0].param.get_device_address(Mixprec.ParamBuffer.WORKING)
        self.timings["step"] += time.perf_counter() - start
        self.last_step = result
        return result

    # ------------------------------------------------------------ state

    @property
    def loss_scale(self):
        """The scale the next loss is multiplied by."""
        return self.engine.get_loss_scale()

    @property
    def lr(self):
        """The learning rate of the next step."""
        return self.engine.get_lr()

    def get_lr(self):
        return [self.engine.get_lr()]

    @property
    def global_steps(self):
        """Optimizer steps so far, skipped ones included (DeepSpeed's
        global_steps); restored by load_checkpoint()."""
        return self.last_step.step if self.last_step is not None else self._counters[0]

    @property
    def skipped_steps(self):
        return self.last_step.skipped_steps if self.last_step is not None else self._counters[1]

    @property
    def global_samples(self):
        cfg = self.engine.get_config()
        return self.global_steps * (cfg.get_train_micro_batch_size_per_gpu() or 1) * \
            self.engine.get_gradient_accumulation_steps() * self.engine.get_world_size()

    def get_global_grad_norm(self):
        return self.last_step.grad_norm if self.last_step is not None else None

    def was_step_applied(self):
        return bool(self.last_step is not None and self.last_step.applied)

    def get_numerics(self):
        """The per-tensor numerics of the last step that measured them
        (``mixprec.numerics.every``, see mixprec.json(5)), as plain Python
        values to print or plot: ``{"step": n, "applied": bool, "params":
        {name: {stat: value}}, "module_types": {type: {stat: value}}}``;
        None when numerics are off or no step has measured them yet."""
        n = self.engine.get_numerics()
        if n is None:
            return None

        def rows(names, stats, get):
            return {name: {s: get(name, s)[1] for s in stats(name)} for name in names}

        return {"step": n.get_step(), "applied": n.get_applied(),
                "params": rows(n.list_params(), n.list_stats, n.get_stat),
                "module_types": rows(n.list_module_types(), n.list_module_stats,
                                     n.get_module_stat)}

    @property
    def rank(self):
        return self.engine.get_rank()

    @property
    def global_rank(self):
        return self.engine.get_rank()

    @property
    def world_size(self):
        return self.engine.get_world_size()

    def save_checkpoint(self, save_dir, tag=None, client_state=None, save_latest=True,
                        exclude_frozen_parameters=False):
        """Saves the engine's training state (FP32 masters, optimizer
        state, counters, loss scaler, schedule) as checkpoint tag (default
        ``global_stepN``, DeepSpeed's) in save_dir, and client_state (a
        dict) beside it as ``client_state.pt``; collective across ranks.
        Returns True."""
        if tag is None:
            tag = "global_step%d" % self.global_steps
        tag = str(tag)
        flags = (Mixprec.CheckpointSaveFlags.NONE if save_latest
                 else Mixprec.CheckpointSaveFlags.NO_LATEST)
        with _errors():
            self.engine.save_checkpoint_full(os.fspath(save_dir), tag, flags)
        # ZeRO-3's frozen parameters whole (collective), as at stages 0-2.
        with zero.GatheredParameters([] if exclude_frozen_parameters else self._frozen_z3()):
            if self.engine.get_rank() == 0:
                frozen = {}
                if not exclude_frozen_parameters:
                    trained = {id(e.tensor) for e in self._entries}
                    frozen = {n: p.detach().cpu().clone()
                              for n, p in self.module.named_parameters() if id(p) not in trained}
                path = os.path.join(os.fspath(save_dir), tag, "client_state.pt")
                torch.save({"client_state": dict(client_state or {}), "frozen": frozen},
                           path + ".tmp")
                os.replace(path + ".tmp", path)
        return True

    def load_checkpoint(self, load_dir, tag=None, load_module_strict=True,
                        load_optimizer_states=True, load_lr_scheduler_states=True,
                        load_module_only=False):
        """Restores checkpoint tag of load_dir (default: the one its
        ``latest`` names, or load_dir itself when it is a checkpoint);
        the model's parameters see the restored working copies, and
        global_steps and skipped_steps read the checkpoint's. Returns
        ``(path, client_state)`` as DeepSpeed does (the path alone for an
        Engine of the 1.0 spelling ``initialize(model, config)``);
        ``(None, None)`` when there is no checkpoint, as DeepSpeed."""
        load_dir = os.fspath(load_dir)
        if tag is None and os.path.isfile(os.path.join(load_dir, "latest")):
            with open(os.path.join(load_dir, "latest"), encoding="utf-8") as f:
                tag = f.read().strip()
        path = os.path.join(load_dir, str(tag)) if tag else load_dir
        if self._ds_returns and not os.path.isfile(os.path.join(path, "manifest.json")):
            warnings.warn("mixprec.torch: no checkpoint in %s" % path, RuntimeWarning,
                          stacklevel=2)
            return None, None
        flags = (Mixprec.CheckpointLoadFlags.NONE
                 if load_optimizer_states and not load_module_only
                 else Mixprec.CheckpointLoadFlags.WEIGHTS_ONLY)
        if self._zero3 is not None:
            self._zero3.before_step("load_checkpoint()")
        with _errors():
            self.engine.load_checkpoint_full(path, flags)
            info = Mixprec.Checkpoint.open(path)
        self._bind()
        self.last_step = None
        if flags == Mixprec.CheckpointLoadFlags.NONE:
            self._counters = (info.get_step(), info.get_skipped_steps())
            self.micro_steps = info.get_step() * self.engine.get_gradient_accumulation_steps()
        client_state = {}
        extra = os.path.join(path, "client_state.pt")
        if os.path.isfile(extra):
            saved = torch.load(extra, map_location="cpu", weights_only=False)
            client_state = saved.get("client_state", {})
            named = dict(self.module.named_parameters())
            for n, t in saved.get("frozen", {}).items():
                if n in named:
                    e = getattr(named[n], "_mixprec_zero3_entry", None)
                    if e is not None and e.unit.frozen:
                        self._zero3.set_frozen(e, t)
                    else:
                        named[n].data.copy_(t.to(named[n].dtype))
        if not self._ds_returns:
            return path
        return path, client_state

    def _fp32_state(self):
        """The model's state_dict() with every trained parameter's FP32
        master (every name of a tied one) and the rest widened to FP32."""
        masters = {}
        with _errors():
            for e in self._entries:
                data = self.engine.gather_master(e.name).get_data()
                masters[id(e.tensor)] = torch.frombuffer(bytearray(data), dtype=torch.float32) \
                    .reshape(e.shape)
        state = {}
        with zero.GatheredParameters(self._frozen_z3()):
            for n, t in self.module.state_dict(keep_vars=True).items():
                if id(t) in masters:
                    state[n] = masters[id(t)]
                else:
                    t = t.detach().cpu()
                    state[n] = t.float() if t.is_floating_point() else t
        return state

    def export_fp32(self, path):
        """Writes the model's consolidated FP32 weights, one safetensors
        file at path, under every name of ``module.state_dict()`` (tied
        parameters under each of their names, frozen ones and buffers
        included), so that ``model.load_state_dict(..., strict=True)``
        takes it. Collective across ranks; rank 0 writes."""
        state = self._fp32_state()
        if self.engine.get_rank() == 0:
            _write_safetensors(os.fspath(path), state)
        return path

    def get_fp4_copy(self, param):
        """The 4-bit working copy of param (a parameter of the model, or
        its name in named_parameters()), without a copy:
        ``(data, scales, tensor_scale, recipe)`` with data a uint8 tensor
        of the packed E2M1 bytes, shape ``(rows, cols // 2)`` (rows x cols
        the parameter flattened to two dimensions, element 2i in the low
        nibble of byte i), scales a uint8 tensor of the block scales'
        codes, shape ``(rows, cols // block size)`` (E4M3 for NVFP4, E8M0
        for MXFP4), tensor_scale NVFP4's float32 per-tensor scale (1.0 for
        MXFP4) and recipe "nvfp4", "nvfp4_2d" or "mxfp4". The tensors are
        views of the engine's memory (DLPack), which each step rewrites;
        get the tensor scale again after a step. See
        docs/reference/fp4-views.md for a matmul that decodes them."""
        if isinstance(param, str):
            found = [e for e in self._entries if e.name == param]
            what = "no parameter named '%s'" % param
        else:
            found = [e for e in self._entries if e.tensor is param]
            what = "the tensor is no parameter of the engine's model"
        if not found:
            raise ValueError("mixprec.torch: get_fp4_copy: " + what)
        e = found[0]
        if not e.param.is_fp4():
            raise ValueError("mixprec.torch: get_fp4_copy: parameter '%s' has no 4-bit copy "
                             "(fp4.enabled and fp4.modules of the config, two dimensions or more)"
                             % e.name)
        with _errors():
            copy = e.param.fp4
        return (torch.from_dlpack(copy.data), torch.from_dlpack(copy.scales), copy.tensor_scale,
                copy.recipe_name)

    def save_16bit_model(self, save_dir, save_filename="pytorch_model.bin",
                         exclude_frozen_parameters=False):
        """DeepSpeed's: the model's state_dict() in its working dtypes,
        torch.save'd as save_dir/save_filename (tied parameters under each
        name). Returns True."""
        os.makedirs(os.fspath(save_dir), exist_ok=True)
        trained = {id(e.tensor) for e in self._entries}
        state = {}
        # Under ZeRO-3 every rank gathers the partitioned parameters.
        with zero.GatheredParameters([e.tensor for e in self._entries] + self._frozen_z3()):
            for n, t in self.module.state_dict(keep_vars=True).items():
                if exclude_frozen_parameters and isinstance(t, torch.nn.Parameter) and \
                        id(t) not in trained:
                    continue
                state[n] = t.detach().cpu().clone()
        if self.engine.get_rank() == 0:
            torch.save(state, os.path.join(os.fspath(save_dir), save_filename))
        return True

    def close(self):
        """Removes the hooks (the parameters stay views of the engine's
        memory, which lives as long as they do; under ZeRO-3 the
        partitioned parameters get a copy of their whole working copies,
        gathered on every rank: collective there)."""
        if self._zero3 is not None:
            self._zero3.materialize()
            for e in self._entries:
                e.z3 = False
                e.address = None
            self._zero3 = None
        for h in self._hooks:
            h.remove()
        self._hooks = []
        if self._forward is not None:
            had, forward = self._forward
            if had:
                self.module.forward = forward
            else:
                del self.module.forward
            self._forward = None


# Every libmixprec error a script meets through the front arrives as an
# Error (a ValueError and a GLib.Error, whose GLib.Error side is a
# RuntimeError), whichever call inside raised it: the methods of the
# documented surface translate what escapes them (a translated Error
# passes as it is).
for _name in ("__call__", "backward", "step", "zero_grad", "train_batch", "get_numerics",
              "save_checkpoint", "load_checkpoint", "export_fp32", "get_fp4_copy",
              "save_16bit_model", "close"):
    setattr(Engine, _name, _translated(getattr(Engine, _name)))
del _name


def _matches_any(names, cls):
    return any(_matches(n, {cls.__name__}) for n in names)


def _write_safetensors(path, state):
    header = {}
    blobs = []
    offset = 0
    for name, t in state.items():
        t = t.contiguous()
        raw = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
        header[name] = {"dtype": _SAFETENSORS_DTYPE[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)
    os.replace(path + ".tmp", path)
