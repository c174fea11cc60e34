"""A few windows without gradients: the model's own forward, traced and frozen (TorchScript).

At one window the network does little arithmetic, and the Python around each layer (module calls,
attribute look-ups, the fast-path checks) costs about as much as the layers themselves. So a
gradient-free call of at most :data:`MAX_BATCH` windows on the CPU runs the forward as TorchScript:
traced once per call signature (input shape, dtype and device, the forward's other arguments),
frozen (the parameters become constants, so the weights the fast paths derive from them are
computed once) and kept until a parameter changes (:class:`.cache.DerivedCache`). Nothing is
written twice: the trace records the module's forward as it runs, with the accelerator on, except
the native kernels, which step aside under tracing (PyTorch's ops are recorded in their place).

A signature is traced at its first call (a few tens of milliseconds) and every call of it runs
the same frozen graph, so a window's estimate does not depend on the calls before it. A forward
the tracer cannot record (a layer with data-dependent Python control flow, say) keeps running
eagerly, with the reason logged once. The forward must return a NamedTuple of tensors or None
(:class:`velobins_net.model.NetOutput`).
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Hashable, Iterator
from typing import Any, NamedTuple

import torch
from torch import nn

from .cache import DerivedCache
from .native import kernels_enabled

_LOG = logging.getLogger(__name__)

MAX_BATCH = 4
"""Gradient-free calls of at most this many windows run traced. Beyond, the eager forward wins: its
arithmetic outweighs the Python around it, and it has the native attention kernel, which a trace
replaces by PyTorch's (``benchmarks/bench_net_latency.py`` times batch 1)."""

MAX_SIGNATURES = 8
"""Traced graphs kept per module (the oldest is dropped beyond)."""

_eager_depth = [0]
"""> 0 inside :func:`eager`: no frozen call (the tracer's own run of the forward, a warm-up)."""


@contextlib.contextmanager
def eager() -> Iterator[None]:
    """Run the forwards inside eagerly (no frozen call), e.g. to fill the derived-weight caches before a trace."""
    _eager_depth[0] += 1
    try:
        yield
    finally:
        _eager_depth[0] -= 1


class _Failed(NamedTuple):
    """A signature the tracer could not record (why), remembered so it is not tried again."""

    reason: str


class _Traced(nn.Module):
    """The module's forward on fixed extra arguments, returning only its tensor outputs (what a trace can return)."""

    def __init__(self, module: nn.Module, args: tuple[Any, ...], fields: tuple[str, ...]):
        super().__init__()
        self.module = module
        self.args = args
        self.fields = fields

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        out = self.module(x, *self.args)
        return tuple(getattr(out, name) for name in self.fields)


class TracedForward:
    """Traced, frozen graphs of one module's forward, one per call signature (see the module doc)."""

    def __init__(self) -> None:
        self._cache: DerivedCache[Any] = DerivedCache(max_values=MAX_SIGNATURES)

    def applies(self, x: torch.Tensor) -> bool:
        """Whether a call on ``x`` may run traced: accelerator on, no gradient, no tracer, a few windows on the CPU
        (where the Python per layer is what the frozen graph saves; GPU inference stays eager)."""
        if not kernels_enabled() or torch.is_grad_enabled() or _eager_depth[0]:
            return False
        if x.shape[0] > MAX_BATCH or x.device.type != "cpu":
            return False
        return not torch.jit.is_tracing() and not torch.jit.is_scripting()

    def __call__(self, module: nn.Module, x: torch.Tensor, *args: Hashable) -> Any:
        """``module(x, *args)``: frozen (traced at a signature's first call with these parameters), or eager
        where the tracer failed."""
        key = (tuple(x.shape), x.dtype, x.device, args)
        frozen = self._cache.get((module,), key, lambda: _freeze(module, x, args))
        if isinstance(frozen, _Failed):
            with eager():
                return module(x, *args)
        out_type, fields, script = frozen
        values = dict(zip(fields, script(x), strict=True))
        return out_type(*(values.get(name) for name in out_type._fields))

    def clear(self) -> None:
        """Forget every frozen trace (after editing a parameter through ``.data``)."""
        self._cache.clear()


def _freeze(module: nn.Module, x: torch.Tensor, args: tuple[Any, ...]) -> tuple[type, tuple[str, ...], Any] | _Failed:
    """(output type, tensor fields, frozen TorchScript) of ``module(x, *args)``, or why it could not be made."""
    x = x.clone()  # a normal tensor, also when the caller's is an inference tensor
    with eager():
        out = module(x, *args)  # a user's error is raised here; also fills the forward's derived-weight caches
    fields = tuple(name for name in out._fields if getattr(out, name) is not None)
    modes = [(m, m.training) for m in module.modules()]  # freezing wants eval mode: restored as it was
    try:
        with eager(), warnings.catch_warnings():
            # the tracer's notes on shape-dependent Python (part of the signature), and torch.jit's
            # deprecation notice (TorchScript is still libtorch's format; a failure here runs eagerly)
            warnings.simplefilter("ignore")
            traced = torch.jit.trace(_Traced(module, args, fields), (x,), check_trace=False)
            script = torch.jit.freeze(traced.eval())
            with contextlib.suppress(RuntimeError):  # fuses and pre-packs for the CPU where the build supports it
                script = torch.jit.optimize_for_inference(script)
    except Exception as exc:  # a forward the tracer cannot record keeps running eagerly
        reason = f"{type(exc).__name__}: {exc}".splitlines()[0]
        _LOG.warning("traced forward unavailable for %s: %s; running eagerly", type(module).__name__, reason)
        return _Failed(reason)
    finally:
        for m, training in modes:
            m.training = training
    return type(out), fields, script
