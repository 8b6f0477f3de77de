# mixprec/__init__.py — the pure-Python package shipped with libmixprec's
# bindings. The library itself is reached through GObject Introspection
# (``from gi.repository import Mixprec``, with the overrides' zero-copy
# views); this package holds the fronts for frameworks, each imported
# only when asked for so that ``import mixprec`` needs nothing else.
"""Python fronts for libmixprec.

``mixprec.torch``: a PyTorch model trained with libmixprec doing the
precision side, in the shape of DeepSpeed's engine
(``engine = mixprec.torch.initialize(model, config)``, then
``engine.backward(loss)`` and ``engine.step()``), which also takes
DeepSpeed's ``initialize(model=..., config=...)`` and returns its tuple,
so that ``import mixprec.torch as deepspeed`` runs a DeepSpeed script.
Importing it needs PyTorch and PyGObject.
"""

__all__ = []
