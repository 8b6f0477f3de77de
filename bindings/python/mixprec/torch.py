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

Limits of this version: ZeRO stages 0
to 2 (ZeRO-3 shards the working copies themselves), and frozen
parameters (``requires_grad=False``) are left to the caller as they are.
"""

import ctypes
import json
import os
import time

try:
    import torch
except ImportError as e:
    raise ImportError("mixprec.torch needs PyTorch: the 'torch' package is not importable (%s)"
                      % e, name="torch") from e

import gi

gi.require_version("GLib", "2.0")
gi.require_version("Mixprec", "1.0")
from gi.repository import GLib, Mixprec  # noqa: E402

__all__ = ["initialize", "Engine"]

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


def _config(config):
    """A Mixprec.Config from a Mixprec.Config, a dict (DeepSpeed's JSON
    as Python objects), a JSON string or the path of a JSON file."""
    if isinstance(config, Mixprec.Config):
        return config
    if isinstance(config, dict):
        return Mixprec.Config.new_from_data(json.dumps(config))
    if isinstance(config, (str, os.PathLike)):
        text = os.fspath(config)
        if text.lstrip().startswith("{"):
            return Mixprec.Config.new_from_data(text)
        return Mixprec.Config.new_from_file(text)
    raise TypeError("mixprec.torch.initialize: config must be a dict, a JSON string, a file name "
                    "or a Mixprec.Config, not %s" % type(config).__name__)


def initialize(model, config, comm=None, model_parallel_comm=None):
    """initialize(model, config, comm=None, model_parallel_comm=None) -> Engine

    Makes a libmixprec engine from config (a dict in DeepSpeed's JSON
    layout, a JSON file name or string, or a Mixprec.Config), registers
    model's trainable parameters with it and makes them views of the
    engine's working copies. comm: a Mixprec.Comm to use instead of the
    one the launcher's environment gives; model_parallel_comm: the ranks
    that hold the other pieces of the same model, which must agree on
    overflow (Mixprec.Engine.new_with_comm)."""
    if not isinstance(model, torch.nn.Module):
        raise TypeError("mixprec.torch.initialize: model must be a torch.nn.Module, not %s"
                        % type(model).__name__)
    cfg = _config(config)
    device = cfg.get_device()
    if device not in ("cpu", "cuda"):
        raise ValueError("mixprec.torch: mixprec.device is '%s'; mixprec.torch drives engines "
                         "on the cpu and cuda devices" % device)
    if cfg.get_zero_stage() > 2:
        raise ValueError("mixprec.torch: zero_optimization.stage %d: ZeRO-3 shards the working "
                         "copies themselves, which this version of mixprec.torch does not "
                         "gather for the model; use stage 0, 1 or 2" % cfg.get_zero_stage())
    if comm is not None or model_parallel_comm is not None:
        engine = Mixprec.Engine.new_with_comm(cfg, comm, model_parallel_comm)
    else:
        engine = Mixprec.Engine.new(cfg)
    return Engine(model, engine)


class _Entry(object):
    __slots__ = ("name", "tensor", "param", "dtype", "address", "shape")


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
    return value


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
    step, or None).
    """

    def __init__(self, model, engine):
        self.module = model
        self.engine = engine
        self.params = {}
        self.last_step = None
        self.timings = {"intake": 0.0, "backward_done": 0.0, "step": 0.0}
        self._entries = []
        self._hooks = []
        self._autocast = None

        seen = set()
        owner = {}
        for module_name, module in model.named_modules():
            for pname, p in module.named_parameters(recurse=False):
                if id(p) in seen or not p.requires_grad:
                    continue
                seen.add(id(p))
                name = module_name + "." + pname if module_name else pname
                if p.device.type not in ("cpu", "cuda"):
                    raise ValueError("mixprec.torch: parameter '%s' is on %s; mixprec.torch "
                                     "takes models in host memory (cpu) or on a CUDA device"
                                     % (name, p.device))
                if not p.is_floating_point():
                    raise TypeError("mixprec.torch: parameter '%s' has dtype %s; libmixprec "
                                    "trains floating-point parameters" % (name, p.dtype))
                if p.numel() == 0:
                    continue
                e = _Entry()
                e.name = name
                e.tensor = p
                e.shape = tuple(p.shape)
                # libmixprec has no 0-d parameters: a scalar is one element.
                e.param = engine.register_param(name, list(p.shape) or [1], type(module).__name__,
                                                _DT.FLOAT32, _fp32_bytes(p))
                e.dtype = e.param.get_working_dtype()
                e.address = None
                self.params[name] = e.param
                self._entries.append(e)
                owner.setdefault(id(module), (module, []))[1].append(e)
        if not self._entries:
            raise ValueError("mixprec.torch: the model has no trainable parameters")
        engine.prepare()
        # Where the engine's buffers are (DLPack's device type and id).
        dl_type, dl_id = self._entries[0].param.get_device_address(
            Mixprec.ParamBuffer.WORKING)[2:]
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
        self._bind()

        # The model's dtype: the working dtype of most of its elements.
        counts = {}
        for e in self._entries:
            counts[e.dtype] = counts.get(e.dtype, 0) + e.param.get_numel()
        self.dtype = _TORCH_DTYPE[max(counts, key=counts.get)]
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

        cfg = engine.get_config()
        if cfg.get_precision_mode() == Mixprec.PrecisionMode.AUTOCAST:
            self._autocast = _TORCH_DTYPE[cfg.get_low_dtype()]

    # ------------------------------------------------------------ views

    def _bind(self):
        """Makes each parameter's data the engine's working copy (again,
        where the engine moved it)."""
        for e in self._entries:
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
            if g.device.type == "cuda":
                # The engine reads it on its own stream: torch's must be done.
                torch.cuda.current_stream(g.device).synchronize()
                e.param.reduce_grad_device_address(dtype, g.data_ptr())
            else:
                e.param.reduce_grad_address(dtype, g.data_ptr())
            self.timings["intake"] += time.perf_counter() - start
            p.grad = None
        return hook

    # ------------------------------------------------------------ training

    def __call__(self, *args, **kwargs):
        """The model's forward pass (under torch.autocast in the
        torch_autocast mode)."""
        if self._autocast is not None:
            with torch.autocast("cpu", dtype=self._autocast):
                return self.module(*args, **kwargs)
        return self.module(*args, **kwargs)

    forward = __call__

    def train(self, mode=True):
        self.module.train(mode)
        return self

    def eval(self):
        self.module.eval()
        return self

    def backward(self, loss, retain_graph=False):
        """Runs autograd on loss (a scalar) multiplied by the engine's loss
        scale, in FP32 as DeepSpeed does; the parameters' hooks hand each
        gradient to the engine as it is produced. Then ends the micro-step
        (Mixprec.Engine.backward_done): a parameter that got no gradient
        counts as zero. The loss is not divided by
        gradient_accumulation_steps: the engine averages the micro-steps'
        gradients itself (where DeepSpeed's backward divides the loss; the
        result is the same)."""
        scale = self.engine.get_loss_scale()
        scaled = loss.float() * scale if scale != 1.0 else loss
        scaled.backward(retain_graph=retain_graph)
        start = time.perf_counter()
        self.engine.backward_done()
        self.timings["backward_done"] += time.perf_counter() - start

    def is_gradient_accumulation_boundary(self):
        return self.engine.is_accumulation_boundary()

    def step(self):
        """At the gradient-accumulation boundary, the engine's step
        (unscale, overflow check and skip, clipping, optimizer, new working
        copies written into the model's parameters): returns its
        Mixprec.StepResult. Between boundaries does nothing and returns
        None."""
        if not self.engine.is_accumulation_boundary():
            return None
        start = time.perf_counter()
        result = self.engine.step()
        if self.device.type != "cpu":
            # Waits for the engine's stream: the new weights are complete
            # for torch's.
            self._entries[0].param.get_device_address(Mixprec.ParamBuffer.WORKING)
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
        return self.last_step.step if self.last_step is not None else 0

    @property
    def skipped_steps(self):
        return self.last_step.skipped_steps if self.last_step is not None else 0

    def get_global_grad_norm(self):
        return self.last_step.grad_norm if self.last_step is not None else None

    def was_step_applied(self):
        return bool(self.last_step is not None and self.last_step.applied)

    @property
    def rank(self):
        return self.engine.get_rank()

    @property
    def world_size(self):
        return self.engine.get_world_size()

    def save_checkpoint(self, save_dir, tag=None, save_latest=True):
        """Saves the engine's training state (FP32 masters, optimizer
        state, counters, loss scaler, schedule) as checkpoint tag (default
        ``step-N``) in save_dir; collective across ranks. Returns True."""
        flags = (Mixprec.CheckpointSaveFlags.NONE if save_latest
                 else Mixprec.CheckpointSaveFlags.NO_LATEST)
        self.engine.save_checkpoint_full(os.fspath(save_dir), tag, flags)
        return True

    def load_checkpoint(self, load_dir, tag=None, load_optimizer_states=True):
        """Restores checkpoint tag of load_dir (default: the one its
        ``latest`` names, or load_dir itself when it is a checkpoint);
        the model's parameters see the restored working copies. Returns
        the path loaded."""
        path = os.path.join(os.fspath(load_dir), tag) if tag else os.fspath(load_dir)
        flags = (Mixprec.CheckpointLoadFlags.NONE if load_optimizer_states
                 else Mixprec.CheckpointLoadFlags.WEIGHTS_ONLY)
        self.engine.load_checkpoint_full(path, flags)
        self._bind()
        return path

    def close(self):
        """Removes the hooks (the parameters stay views of the engine's
        memory, which lives as long as they do)."""
        for h in self._hooks:
            h.remove()
        self._hooks = []
