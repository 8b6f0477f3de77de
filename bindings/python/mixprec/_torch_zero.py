# mixprec/_torch_zero.py — ZeRO-3 for mixprec.torch: the model's
# parameters partitioned by the engine, gathered around each module's
# forward and each backward that reads them; and DeepSpeed's deepspeed.zero
# namespace (Init, GatheredParameters, register_external_parameter).
"""ZeRO-3 behind mixprec.torch (``mixprec.torch.zero``).

Under ``zero_optimization.stage`` 3 the engine keeps only this rank's
slice of each working copy. The torch parameter keeps its Parameter
object (optimizers, ``named_parameters()`` and tied weights still see
it) with an empty placeholder as its data, as DeepSpeed's does, and the
attributes DeepSpeed gives it (``ds_id``, ``ds_shape``, ``ds_numel``,
``ds_status``, ``ds_persist``):

* a forward pre-hook on each module gathers the parameters the module
  holds itself (``mixprec_engine_gather``: an all-gather of their unit,
  copied into tensors torch owns and released at once; on one process a
  DLPack view of the engine's whole working copy), and prefetches the
  parameters the first forward pass used next, within
  ``stage3_prefetch_bucket_size`` (``mixprec_engine_prefetch``); a
  forward post-hook releases them, but for those it keeps for their
  backward (DeepSpeed's ``stage3_max_reuse_distance``: see _keep), which
  stay gathered until their gradient is handed over: one all-gather per
  step rather than two;
* otherwise autograd does not keep them: while the model's modules run, a
  saved-tensor hook (``torch.autograd.graph.saved_tensors_hooks``) stores
  a partitioned parameter (or a view of it) that an operation saves for
  its backward as a reference, and the backward that reads it gathers it
  again, prefetching the parameters the forward pass used before it;
* the gradient goes to the engine as at ZeRO-2 (``reduce_grad``, a
  reduce-scatter across ranks) once autograd has accumulated it, and that
  releases the parameter's backward gathers and the gather kept for them.

Parameters below ``stage3_param_persistence_threshold`` elements stay
whole on every rank (the engine's persistent units, DeepSpeed's
persistent parameters).

Frozen parameters (``requires_grad=False``), which the engine does not
hold (they have no master, gradient or optimizer state), are partitioned
here by the same rule, as DeepSpeed partitions them: each rank keeps an
even 1/world chunk of the parameter's flat values in its working dtype
(add_frozen), and the same module hooks gather it (an all-gather of the
chunks over the launcher's communicator, into a tensor torch owns; on
one process a view of the whole values, kept as one chunk) and release
it; the saved-tensor hook keeps a reference for the backward as for the
others, and end_backward() releases what the backward gathered.
"""

import bisect
import enum
import functools
import warnings

import torch

from gi.repository import GLib, Mixprec

__all__ = ["Init", "GatheredParameters", "register_external_parameter",
           "unregister_external_parameter", "ZeroParamStatus"]

# On a partitioned torch parameter: its Partitioner's entry.
_ATTR = "_mixprec_zero3_entry"
# On a module: parameters its forward uses that another module holds.
_EXTERNAL = "_mixprec_external_params"


class ZeroParamStatus(enum.Enum):
    """DeepSpeed's ``ds_status`` values."""
    AVAILABLE = 1
    NOT_AVAILABLE = 2
    INFLIGHT = 3


def _top_saved_hooks():
    """The saved-tensor hooks in force (torch.autograd.graph.
    saved_tensors_hooks), or None."""
    top = getattr(torch._C._autograd, "_top_saved_tensors_default_hooks", None)
    return top(False) if top is not None else None


def _readable(param):
    """Whether param's working copy is whole on this rank now."""
    try:
        param.get_device_address(Mixprec.ParamBuffer.WORKING)
        return True
    except GLib.Error:
        return False


class _Unit(object):
    """Partitioned parameters one all-gather of the engine brings in, and
    their whole copies while any of them is gathered; or one frozen
    parameter, gathered from its chunks."""
    __slots__ = ("members", "active", "tensors", "frozen")

    def __init__(self, members, frozen=False):
        self.members = members
        self.active = 0             # members gathered now
        self.tensors = {}           # member -> its whole tensor, while active
        self.frozen = frozen


class FrozenParam(object):
    """What a frozen parameter's entry has in place of the Mixprec.Param
    the engine does not make for it: its name and element count."""
    __slots__ = ("name", "numel")

    def __init__(self, name, numel):
        self.name = name
        self.numel = numel

    def get_name(self):
        return self.name

    def get_numel(self):
        return self.numel


def _tensor_bytes(t):
    """A contiguous host tensor's bytes, as GLib.Bytes."""
    t = t.detach().to("cpu").contiguous().reshape(-1)
    return GLib.Bytes.new(t.view(torch.uint8).numpy().tobytes())


class _Saved(object):
    """What autograd keeps of a partitioned parameter (or of a view of
    it) saved for backward: the entry, and the view's geometry."""
    __slots__ = ("entry", "geometry")

    def __init__(self, entry, geometry):
        self.entry = entry
        self.geometry = geometry


class Partitioner(object):
    """The ZeRO-3 side of one mixprec.torch Engine: its partitioned
    entries, the hooks that gather and release them, the order the first
    forward pass used them in (for the prefetch)."""

    def __init__(self, front, entries, errors, dtypes):
        self.front = front
        self.engine = front.engine
        self.errors = errors            # the front's GLib.Error -> Error translation
        self.entries = entries
        self.by_cdata = {e.tensor._cdata: e for e in entries}
        self.live = {}                  # storage address of a gathered view -> entry
        self.order = []                 # entries in the order the first forward gathered them
        self.prefix = [0]               # elements of order[:i], for the prefetch window
        self.ahead = -1                 # the last order index prefetched in this forward pass
        self.behind = None              # the first one prefetched in this backward pass
        self.prefetches = 0             # prefetches the engine started (several ranks)
        self.traced = False
        self.depth = 0
        self.saving = None
        self.hooks = []
        cfg = self.engine.get_config()
        self.bucket = cfg.get_prefetch_bucket_size()
        self.reuse = getattr(front, "max_reuse_distance", 1000000000)
        self.max_live = cfg.get_max_live_parameters()
        self.kept = 0                   # elements of the parameters kept from forward to backward
        self.world = self.engine.get_world_size()
        self.dtypes = dtypes
        self.comm = None                # frozen parameters' chunks: the launcher's ranks
        self.frozen = []
        for i, e in enumerate(entries):
            self._adopt(e, i)
            self.hooks.append(e.tensor.register_hook(self._before_accumulate(e)))
        self._find_units()

    def _adopt(self, e, i):
        """Makes e's torch parameter a placeholder with DeepSpeed's ds_*
        attributes."""
        e.z3 = True
        e.count = 0
        e.bwd = 0
        e.kept = False
        e.view = None
        e.position = None
        e.partitioner = self
        p = e.tensor
        dtype = self.dtypes[e.dtype]        # the working dtype
        e.placeholder = torch.empty(0, dtype=dtype, device=p.device)
        # The whole shape in one element of memory (zero strides): what
        # autograd accumulates a gradient into when the parameter is
        # not gathered (an embedding's backward reads none of it).
        e.shaped = torch.zeros((), dtype=dtype, device=p.device).expand(e.shape)
        p.data = e.placeholder
        p.ds_id = i
        p.ds_shape = torch.Size(e.shape)
        p.ds_numel = e.param.get_numel() if e.shape else 1
        p.ds_persist = False
        p.ds_status = ZeroParamStatus.NOT_AVAILABLE
        setattr(p, _ATTR, e)

    def add_frozen(self, entries, comm):
        """Partitions frozen parameters (entries whose param is a
        FrozenParam, their torch parameters already in their working
        dtype): each rank keeps chunk rank of world even chunks of the
        flat values (the last padded with zeros), exchanged over comm, the
        launcher's communicator (None on one process, where the one chunk
        is the whole parameter, without a copy)."""
        self.comm = comm
        for e in entries:
            flat = e.tensor.detach().reshape(-1)
            if self.world > 1:
                n = -(-flat.numel() // self.world)
                rank = comm.get_rank()
                mine = flat[rank * n:(rank + 1) * n]
                e.chunk = torch.zeros(n, dtype=flat.dtype, device=flat.device)
                e.chunk[:mine.numel()] = mine
            else:
                e.chunk = flat
            self._adopt(e, len(self.entries))
            e.unit = _Unit([e], frozen=True)
            self.entries.append(e)
            self.frozen.append(e)
            self.by_cdata[e.tensor._cdata] = e

    def set_frozen(self, e, values, root=None):
        """Gives frozen e new values: values (a tensor of e's numel
        elements) on every rank, or with root, rank root's, broadcast
        (collective: every rank passes a tensor of the size). Nothing may
        be gathered."""
        flat = values.detach().reshape(-1).to(device=e.chunk.device, dtype=e.chunk.dtype)
        if self.world == 1:
            e.chunk.copy_(flat)
            return
        if root is not None:
            with self.errors():
                got = self.comm.broadcast(_tensor_bytes(flat), self._mixprec_dtype(e), root)
            flat = torch.frombuffer(bytearray(got.get_data()), dtype=e.chunk.dtype) \
                .to(e.chunk.device)
        n = e.chunk.numel()
        mine = flat[self.comm.get_rank() * n:(self.comm.get_rank() + 1) * n]
        e.chunk.zero_()
        e.chunk[:mine.numel()] = mine

    def _mixprec_dtype(self, e):
        return next(k for k, v in self.dtypes.items() if v == e.chunk.dtype)

    def _fill_frozen(self, e):
        """Frozen e's whole values: its chunks all-gathered from every
        rank (collective), or on one process a view of its one chunk."""
        if self.world == 1:
            return e.chunk.view(e.shape)
        with self.errors():
            got = self.comm.all_gather(_tensor_bytes(e.chunk), self._mixprec_dtype(e))
        whole = torch.frombuffer(bytearray(got.get_data()), dtype=e.chunk.dtype)
        return whole[:e.param.get_numel()].reshape(e.shape).to(e.chunk.device)

    def _find_units(self):
        """Which partitioned parameters share an engine unit (one
        all-gather brings them all): on several ranks, gathering each
        unit once and seeing whose working copy became readable
        (collective); on one process each parameter alone, the engine's
        copy being whole."""
        if self.world == 1:
            for e in self.entries:
                e.unit = _Unit([e])
            return
        pending = list(self.entries)
        while pending:
            e = pending[0]
            with self.errors():
                self.engine.gather(e.param)
            try:
                members = [f for f in pending if f is e or _readable(f.param)]
            finally:
                self.engine.release(e.param)
            unit = _Unit(members)
            for f in members:
                f.unit = unit
            pending = [f for f in pending if f not in members]

    # ------------------------------------------------------------ gather, release

    def _fill(self, unit):
        """The whole working copies of unit's parameters as torch tensors.
        On several ranks the engine's all-gather lands in a buffer it
        frees at the release: each parameter is copied out of it into
        memory torch owns, and the engine's unit released at once, so that
        whatever autograd or the model keeps of a weight (activation
        checkpointing keeps the recomputed ones) stays valid however long
        it lives, as DeepSpeed's gathered parameters are torch's. On one
        process the engine's working copy is whole and never freed: the
        tensor is a view of it (DLPack), without a copy."""
        first = unit.members[0]
        if unit.frozen:
            unit.tensors[first] = self._fill_frozen(first)
            return
        if self.world > 1:
            with self.errors():
                self.engine.gather(first.param)
        try:
            for f in unit.members:
                view = torch.from_dlpack(f.param.working).reshape(f.shape)
                unit.tensors[f] = view.clone() if self.world > 1 else view
        except (GLib.Error, BufferError, RuntimeError, ValueError) as err:
            unit.tensors = {}
            raise RuntimeError("mixprec.torch: parameter '%s': the gathered working copy is "
                               "not readable by torch (%s)" % (first.name, err)) from None
        finally:
            if self.world > 1:
                self.engine.release(first.param)

    def gather(self, e, backward=False):
        """Makes e's parameter whole (nested: as many release() as
        gather()); collective on several ranks, where it all-gathers e's
        unit unless one of its parameters is gathered already."""
        if e.count == 0:
            unit = e.unit
            if unit.active == 0:
                self._fill(unit)
            unit.active += 1
            view = unit.tensors[e]
            e.tensor.data = view
            e.view = view
            e.tensor.ds_status = ZeroParamStatus.AVAILABLE
            self.live[view.untyped_storage().data_ptr()] = e
            if not self.traced and e.position is None:
                e.position = len(self.order)
                self.order.append(e)
        e.count += 1
        if backward:
            e.bwd += 1

    def release(self, e):
        if e.count == 0:
            return
        e.count -= 1
        if e.count == 0:
            self._drop(e)

    def _drop(self, e):
        e.tensor.data = e.placeholder
        e.tensor.ds_status = ZeroParamStatus.NOT_AVAILABLE
        self.live.pop(e.view.untyped_storage().data_ptr(), None)
        e.view = None
        unit = e.unit
        unit.active -= 1
        if unit.active == 0:
            unit.tensors = {}       # torch frees them once nothing else holds them

    def prefetch(self, e, forward):
        """Starts gathering the parameters the first forward pass used
        after e (before e, in the backward pass) within
        stage3_prefetch_bucket_size elements of it, each once per pass;
        the engine bounds what is on its way and live too. Collective, as
        gather() is: every rank runs the same model, so the same
        prefetches."""
        if not self.traced or e.position is None or self.bucket == 0:
            return
        i, prefix = e.position, self.prefix
        if forward:
            # The last j with order[i+1..j] within the bucket.
            last = bisect.bisect_right(prefix, prefix[i + 1] + self.bucket) - 2
            todo = range(max(i + 1, self.ahead + 1), last + 1)
            self.ahead = max(self.ahead, last)
        else:
            first = bisect.bisect_left(prefix, prefix[i] - self.bucket)
            start = i - 1 if self.behind is None else min(i - 1, self.behind - 1)
            todo = range(start, first - 1, -1)
            self.behind = first if self.behind is None else min(self.behind, first)
        for j in todo:
            f = self.order[j]
            if f.unit.active == 0 and self.world > 1 and not f.unit.frozen:
                before = self.engine.get_gathered_bytes()
                with self.errors():
                    self.engine.prefetch(f.param)
                self.prefetches += self.engine.get_gathered_bytes() > before

    # ------------------------------------------------------------ hooks

    def install(self, model):
        """The module hooks: each module gathers what it holds (and its
        registered external parameters) for its forward; the model's own
        forward runs under the saved-tensor hooks."""
        self.hooks.append(model.register_forward_pre_hook(self._enter_model))
        for module in model.modules():
            own = []
            for _, p in module.named_parameters(recurse=False):
                e = getattr(p, _ATTR, None)
                if e is not None and e not in own and e.tensor is p:
                    own.append(e)
            self.hooks.append(module.register_forward_pre_hook(self._module_pre(own)))
            self.hooks.append(module.register_forward_hook(self._module_post(own),
                                                           always_call=True))
        # After the model's own post-hook above: the pass is over.
        self.hooks.append(model.register_forward_hook(self._leave_model, always_call=True))

    def _external(self, module):
        found = []
        for p in getattr(module, _EXTERNAL, ()):
            e = getattr(p, _ATTR, None)
            if e is not None and e in self.entries:
                found.append(e)
        return found

    def _module_pre(self, own):
        def hook(module, args):
            entries = own + self._external(module) if _EXTERNAL in module.__dict__ else own
            module.__dict__["_mixprec_gathered"] = entries
            # Any of the model's modules running (the model's forward, or
            # a layer that reentrant activation checkpointing recomputes in
            # the backward) saves for backward under the saved-tensor
            # hooks, unless other hooks take the saved tensors already
            # (non-reentrant checkpointing's recomputation, which keeps
            # them itself; save_on_cpu): what they keep of a gathered
            # parameter is torch's memory, or the engine's whole copy.
            self.depth += 1
            if self.depth == 1 and _top_saved_hooks() is None:
                self.saving = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)
                self.saving.__enter__()
            for e in entries:
                self.gather(e)
            for e in entries:
                self.prefetch(e, True)
        return hook

    def _module_post(self, own):
        def hook(module, args, output):
            entries = module.__dict__.pop("_mixprec_gathered", None)
            if entries is None:
                return          # its pre-hook did not run
            for e in reversed(entries):
                if not self._keep(e):
                    self.release(e)
            self.depth -= 1
            if self.depth == 0 and self.saving is not None:
                self.saving.__exit__(None, None, None)
                self.saving = None
        return hook

    def _keep(self, e):
        """Whether e, gathered for a forward pass that autograd records,
        stays gathered until its backward reads it, instead of being
        gathered again there (DeepSpeed's stage3_max_reuse_distance): on
        several ranks, once the first pass is traced, when the elements
        gathered between the two uses (the parameters after e in the
        forward pass, then again in the backward) are within the
        distance, and the parameters kept stay within
        stage3_max_live_parameters. Released once its gradient is handed
        over (after_gradient), at the latest at the end of the backward
        pass or before the step."""
        if (self.world == 1 or not self.traced or e.kept or e.count != 1 or e.position is None
                or not torch.is_grad_enabled()):
            return False
        numel = e.param.get_numel()
        if 2 * (self.prefix[-1] - self.prefix[e.position + 1]) > self.reuse or \
                self.kept + numel > self.max_live:
            return False
        e.kept = True
        self.kept += numel
        return True

    def _enter_model(self, module, args):
        self.ahead = -1
        self.behind = None

    def _leave_model(self, module, args, output):
        if self.depth == 0:
            if self.order and torch.is_grad_enabled() and not self.traced:
                self.traced = True
                for f in self.order:
                    self.prefix.append(self.prefix[-1] + f.param.get_numel())

    def _pack(self, t):
        if not self.live:
            return t
        e = self.by_cdata.get(t._cdata)
        if e is not None and e.count > 0:
            return _Saved(e, None)
        try:
            e = self.live.get(t.untyped_storage().data_ptr())
        except (RuntimeError, NotImplementedError, TypeError):
            return t            # a tensor without storage (sparse, a subclass)
        if e is not None:
            return _Saved(e, (tuple(t.size()), tuple(t.stride()), t.storage_offset()))
        return t

    def _unpack(self, saved):
        if not isinstance(saved, _Saved):
            return saved
        e = saved.entry
        self.gather(e, backward=True)
        self.prefetch(e, False)
        if saved.geometry is None:
            return e.view
        return e.view.as_strided(*saved.geometry)

    def _before_accumulate(self, e):
        def hook(grad):
            # Autograd accumulates the gradient into a tensor of the
            # parameter's shape.
            if e.count == 0:
                e.tensor.data = e.shaped
        return hook

    def after_gradient(self, e):
        """The gradient was handed to the engine: the backward gathers of
        e end, and its gather kept from the forward pass."""
        while e.bwd > 0:
            e.bwd -= 1
            self.release(e)
        if e.kept:
            e.kept = False
            self.kept -= e.param.get_numel()
            self.release(e)
        if e.count == 0:
            e.tensor.data = e.placeholder

    def end_backward(self):
        """Releases the backward gathers of parameters that got no
        gradient, so that every partitioned parameter is back to its
        placeholder."""
        for e in self.entries:
            self.after_gradient(e)

    def before_step(self, what):
        """The step rewrites the working copies: nothing may be gathered."""
        self.end_backward()
        held = [e.name for e in self.entries if e.count > 0]
        if held:
            raise RuntimeError("mixprec.torch: %s with ZeRO-3 parameters gathered (%s): leave "
                               "every GatheredParameters block and forward pass first"
                               % (what, ", ".join(held[:5])))

    def materialize(self):
        """Gives every partitioned parameter a torch-owned copy of its
        whole working copy (collective) and removes the hooks: the model
        stands alone again."""
        for h in self.hooks:
            h.remove()
        self.hooks = []
        for e in self.entries:
            if e.count == 0:
                self.gather(e)
            whole = e.view.clone()
            e.count = 1
            self.release(e)
            e.tensor.data = whole
            for name in ("ds_id", "ds_shape", "ds_numel", "ds_persist", "ds_status", _ATTR):
                e.tensor.__dict__.pop(name, None)


# ------------------------------------------------------------ deepspeed.zero

class GatheredParameters(object):
    """DeepSpeed's ``deepspeed.zero.GatheredParameters(params,
    modifier_rank=None, fwd_module=None, enabled=True)``: within the
    block, the ZeRO-3 parameters among params (a parameter or an iterable
    of them) are whole on every rank. Collective: every rank enters it
    with the same parameters. Parameters that are not partitioned (ZeRO
    stages 0 to 2, persistent parameters, a model not initialized yet)
    are left as they are, as DeepSpeed leaves them;
    parameters zero.Init partitioned are gathered from their chunks before
    initialize() too, and with ``modifier_rank=r`` cut from rank r's
    values again on leaving (what Hugging Face's weight initialization
    does under DeepSpeed's Init).

    With ``modifier_rank=r`` what rank r wrote into the gathered
    parameters is kept: on leaving the block (without an exception), each
    one's values on rank r, widened to FP32, become its FP32 masters on
    every rank (``mixprec_engine_set_master``, which broadcasts them from
    r and rounds the working copies from them; the other ranks' writes are
    dropped), as DeepSpeed broadcasts rank r's values into the
    partitions; a frozen parameter's chunks are cut from rank r's values,
    broadcast in its working dtype. The optimizer state is left as it is. It must be left
    between steps (not between backward() and step()). Writes to a
    gathered parameter without it are not kept, as in DeepSpeed."""

    def __init__(self, params, modifier_rank=None, fwd_module=None, enabled=True):
        if isinstance(params, torch.Tensor):
            params = [params]
        self.entries = []
        self.modifier_rank = modifier_rank
        self.done = []
        if not enabled:
            return
        # Parameters zero.Init partitioned, before initialize().
        self.chunked = []
        for p in params:
            e = getattr(p, _ATTR, None)
            if e is not None and getattr(e, "z3", False) and e not in self.entries:
                self.entries.append(e)
            elif hasattr(p, _INIT) and not any(p is q for q in self.chunked):
                self.chunked.append(p)
        if modifier_rank is not None and (self.entries or self.chunked):
            world = self.entries[0].partitioner.world if self.entries else \
                getattr(self.chunked[0], _INIT)[2].get_world_size()
            if isinstance(modifier_rank, bool) or not isinstance(modifier_rank, int) or \
               not 0 <= modifier_rank < world:
                raise ValueError("mixprec.torch.zero.GatheredParameters: modifier_rank=%r is not "
                                 "a rank (world size %d)" % (modifier_rank, world))

    def __enter__(self):
        for e in self.entries:
            e.partitioner.gather(e)
            self.done.append(e)
        for p in self.chunked:
            p.data = init_whole(p)
        return None

    def __exit__(self, exc_type, *exc):
        for p in self.chunked:
            shape, mine, comm = getattr(p, _INIT)
            if self.modifier_rank is not None and exc_type is None:
                # Rank r's values, cut into the chunks again.
                whole = p.detach().reshape(-1).to("cpu", torch.float32, copy=True)
                with _front_errors():
                    got = comm.broadcast(GLib.Bytes.new(whole.numpy().tobytes()),
                                         Mixprec.DType.FLOAT32, self.modifier_rank)
                whole = torch.frombuffer(bytearray(got.get_data()), dtype=torch.float32)
                chunk = -(-whole.numel() // comm.get_world_size())
                mine = whole[comm.get_rank() * chunk:(comm.get_rank() + 1) * chunk] \
                    .to(device=p.device, dtype=p.dtype, copy=True)
                setattr(p, _INIT, (shape, mine, comm))
            p.data = torch.empty(0, dtype=p.dtype, device=p.device)
        modified = []
        if self.modifier_rank is not None and exc_type is None:
            rank = self.entries[0].partitioner.engine.get_rank() if self.entries else 0
            for e in self.done:
                values = None
                if e.unit.frozen:
                    # Every rank passes the broadcast a buffer of the size.
                    values = e.tensor.detach().reshape(-1).clone()
                elif rank == self.modifier_rank:
                    # What the block wrote, in the working dtype, widened.
                    whole = e.tensor.detach().reshape(-1).to("cpu", torch.float32, copy=True)
                    values = GLib.Bytes.new(whole.numpy().tobytes())
                modified.append((e, values))
        while self.done:
            e = self.done.pop()
            e.partitioner.release(e)
        # The engine takes new values with nothing gathered; every rank
        # calls it for the same parameters in the same order.
        for e, values in modified:
            if e.unit.frozen:
                e.partitioner.set_frozen(e, values, self.modifier_rank)
                continue
            with e.partitioner.errors():
                e.partitioner.engine.set_master(e.param.get_name(), values, self.modifier_rank)
        return False


# On a parameter built under Init: (its shape, this
# rank's chunk of its flat values, the communicator of the ranks).
_INIT = "_mixprec_init_chunk"


class Init(object):
    """DeepSpeed's ``deepspeed.zero.Init(...)``, accepted with its
    arguments: a context to build a model in, on each rank.

    On several ranks (the launcher's, joined here as initialize() joins
    them; ``config_dict_or_path`` or ``config`` says the communication
    backend and the device), each module's parameters are partitioned as
    soon as the module's outermost ``__init__`` returns, as DeepSpeed
    partitions them: every rank keeps an even 1/world chunk of each
    parameter's flat values (the last one shorter) beside an empty
    placeholder, so that no rank holds more of the model than its chunks
    and the module being built. The ranks must build the same model with
    the same values (seed torch alike on every rank). initialize() then
    gathers one parameter at a time and hands it to the engine (under
    ZeRO-3 after the engine laid out its slices, with
    mixprec_engine_set_master), so a rank's peak is its chunks, its
    slices and the largest parameter; frozen parameters and stages below
    3 get their whole values back first.

    On one process (and with comm "local", where each process trains
    alone) each parameter's one chunk is its whole values, as DeepSpeed's
    partitions over one rank are, so that a script sees the empty
    placeholders it will see on several ranks. It partitions nothing
    (the model is built whole, and initialize() under ZeRO-3 partitions
    it) with ``enabled=False``, and on several ranks of a device other
    than the cpu, where the engine joins the ranks itself, which a
    RuntimeWarning says."""

    def __init__(self, module=None, data_parallel_group=None, mem_efficient_linear=True,
                 remote_device=None, pin_memory=False, config_dict_or_path=None, config=None,
                 enabled=True, dtype=None, mpu=None, **kwargs):
        self.enabled = enabled
        self.config = config_dict_or_path if config_dict_or_path is not None else config
        self.comm = None
        self.patched = []
        self.subclass_hook = None
        if module is not None and enabled:
            raise ValueError("mixprec.torch.zero.Init: module= (partitioning a model built "
                             "already) is not supported; build it inside the context")

    def __enter__(self):
        if not self.enabled:
            return self
        from mixprec import torch as front
        self.comm, why = front._init_comm(self.config)
        if self.comm is None:
            warnings.warn("mixprec.torch.zero.Init: %s, so zero.Init cannot partition the model "
                          "as it is built: each rank builds it whole, and initialize() "
                          "partitions it (ZeRO-3)" % why, RuntimeWarning, stacklevel=2)
            return self
        self.rank = self.comm.get_rank()
        self.world = self.comm.get_world_size()
        for cls in _subclasses(torch.nn.Module):
            self._wrap(cls)
        # Classes defined inside the context too, as DeepSpeed's.
        ctx = self
        previous = torch.nn.Module.__dict__.get("__init_subclass__")

        @classmethod
        def init_subclass(cls, **kwargs):
            super(torch.nn.Module, cls).__init_subclass__(**kwargs)
            ctx._wrap(cls)
        self.subclass_hook = previous
        torch.nn.Module.__init_subclass__ = init_subclass
        return self

    def __exit__(self, *exc):
        if self.comm is None:
            return False
        if self.subclass_hook is not None:
            torch.nn.Module.__init_subclass__ = self.subclass_hook
        else:
            del torch.nn.Module.__init_subclass__
        while self.patched:
            cls, init = self.patched.pop()
            cls.__init__ = init
        return False

    def _wrap(self, cls):
        init = cls.__dict__.get("__init__")
        if init is None or getattr(init, "_mixprec_wrapped", False):
            return          # it runs a base's __init__, wrapped there
        ctx = self

        @functools.wraps(init)
        def wrapped(module, *args, **kwargs):
            # A subclass's __init__ calls its bases': partition once the
            # outermost returns, when the module is complete.
            depth = module.__dict__.get("_mixprec_init_depth", 0)
            module.__dict__["_mixprec_init_depth"] = depth + 1
            try:
                init(module, *args, **kwargs)
            finally:
                module.__dict__["_mixprec_init_depth"] = depth
            if depth == 0:
                del module.__dict__["_mixprec_init_depth"]
                ctx._partition(module)
        wrapped._mixprec_wrapped = True
        try:
            cls.__init__ = wrapped
        except (TypeError, AttributeError):
            return          # a type that takes no new attributes
        self.patched.append((cls, init))

    def _partition(self, module):
        for _, p in module.named_parameters(recurse=False):
            if hasattr(p, _INIT) or not p.is_floating_point() or p.numel() == 0:
                continue
            flat = p.detach().reshape(-1)
            chunk = -(-flat.numel() // self.world)
            mine = flat[self.rank * chunk:(self.rank + 1) * chunk].clone()
            setattr(p, _INIT, (tuple(p.shape), mine, self.comm))
            p.data = torch.empty(0, dtype=p.dtype, device=p.device)


def _front_errors():
    """mixprec.torch's translation of libmixprec's GLib.Error (a
    context)."""
    from mixprec import torch as front
    return front._errors()


class OneRank(object):
    """The communicator of one rank, for Init on one process (and with
    comm "local", where each process trains alone): each parameter's one
    chunk is its whole values."""

    def get_rank(self):
        return 0

    def get_world_size(self):
        return 1

    def all_gather(self, values, dtype):
        return values

    def broadcast(self, values, dtype, root):
        return values


def _subclasses(cls):
    found, todo = [], [cls]
    while todo:
        for sub in todo.pop().__subclasses__():
            if sub not in found:
                found.append(sub)
                todo.append(sub)
    return found


def init_partitioned(p):
    """Whether p was partitioned by Init and still waits for its values."""
    return hasattr(p, _INIT)


def init_shape(p):
    return getattr(p, _INIT)[0]


def init_values(p):
    """p's whole values as FP32 bytes, its chunks gathered from every rank
    (collective: every rank asks for the same parameters in the same
    order). A chunk in p's dtype widens to FP32 exactly, so the bytes are
    the gathered ones, without a copy."""
    shape, mine, comm = getattr(p, _INIT)
    world = comm.get_world_size()
    numel = 1
    for n in shape:
        numel *= n
    chunk = -(-numel // world)
    send = torch.zeros(chunk, dtype=torch.float32)
    send[:mine.numel()] = mine.to(torch.float32)
    with _front_errors():
        got = comm.all_gather(GLib.Bytes.new(send.numpy().tobytes()), Mixprec.DType.FLOAT32)
    return GLib.Bytes.new_from_bytes(got, 0, numel * 4)


def init_whole(p):
    """p's whole values, in p's dtype (collective, as init_values())."""
    values = init_values(p)
    whole = torch.frombuffer(bytearray(values.get_data()), dtype=torch.float32)
    return whole.reshape(init_shape(p)).to(device=p.device, dtype=p.dtype)


def init_restore(p):
    """Gives p its whole values back (collective)."""
    if hasattr(p, _INIT):
        p.data = init_whole(p)
        delattr(p, _INIT)


def init_done(p):
    delattr(p, _INIT)


def register_external_parameter(module, parameter):
    """DeepSpeed's: module's forward uses parameter, which another module
    holds; under ZeRO-3 module's forward gathers it too."""
    if not isinstance(module, torch.nn.Module):
        raise TypeError("mixprec.torch.zero.register_external_parameter: %s is not a "
                        "torch.nn.Module" % type(module).__name__)
    if not isinstance(parameter, torch.nn.Parameter):
        raise TypeError("mixprec.torch.zero.register_external_parameter: %s is not a "
                        "torch.nn.Parameter" % type(parameter).__name__)
    external = module.__dict__.setdefault(_EXTERNAL, [])
    if not any(p is parameter for p in external):
        external.append(parameter)


def unregister_external_parameter(module, parameter):
    """DeepSpeed's: undoes register_external_parameter()."""
    external = module.__dict__.get(_EXTERNAL, [])
    module.__dict__[_EXTERNAL] = [p for p in external if p is not parameter]
