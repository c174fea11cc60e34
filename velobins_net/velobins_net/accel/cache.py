"""Weights derived from a module's parameters, cached for gradient-free calls.

The network's forward runs on weights derived from its parameters (a block-diagonal fusion of the
branch convolutions, the folded last-layer attention, all heads as one affine map, the bin
features φ(enc(b))). With gradients they are rebuilt on every call, so training back-propagates
into the parameters; without gradients (inference, evaluation) they are a pure function of the
parameters and :class:`DerivedCache` keeps them. The cache is keyed by every source tensor's
storage and in-place version counter, so an optimiser step, ``load_state_dict``, a device or dtype
move or an in-place edit makes the next call rebuild them, and so does any optimiser step (fused
optimisers such as ``Adam(fused=True)`` update parameters without bumping their version counters,
so a global optimiser-step hook counts steps). No module has to override ``train``, ``_apply`` or
``load_state_dict`` to drop it. Parameters created under ``torch.inference_mode`` have no version
counter; only their storage is then checked. Edits through ``.data`` bypass the version counter:
after those, call :meth:`DerivedCache.clear` (``VeloBinsNet.invalidate_cache``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable, Iterator
from typing import Any, Generic, TypeVar

import torch
from torch import nn
from torch.optim.optimizer import register_optimizer_step_post_hook

_W = TypeVar("_W")

_optimizer_steps = 0
"""Optimiser steps taken in this process (part of every cache stamp)."""


def _count_step(*_: object) -> None:
    global _optimizer_steps
    _optimizer_steps += 1


register_optimizer_step_post_hook(_count_step)


class DerivedCache(Generic[_W]):
    """One cached value per variant key, rebuilt when any parameter or buffer of the source modules changed."""

    def __init__(self) -> None:
        self._sources: list[torch.Tensor] | None = None
        self._stamp: tuple[int, ...] = ()
        self._values: dict[Hashable, _W] = {}

    def _current_stamp(self, modules: tuple[nn.Module | None, ...]) -> tuple[int, ...]:
        if self._sources is None:  # the tensor objects persist: load, .to() and edits change them in place
            present = [m for m in modules if m is not None]
            self._sources = [t for m in present for t in (*m.parameters(), *m.buffers())]
        try:
            return (_optimizer_steps, *(t._version for t in self._sources), *(t.data_ptr() for t in self._sources))
        except RuntimeError:  # inference tensors (a model built under inference_mode) have no version counter
            return (
                _optimizer_steps,
                *(-1 if t.is_inference() else t._version for t in self._sources),
                *(t.data_ptr() for t in self._sources),
            )

    def get(self, modules: tuple[nn.Module | None, ...], key: Hashable, build: Callable[[], _W]) -> _W:
        """``build()`` as of the current parameters of ``modules``, from the cache when none changed since."""
        stamp = self._current_stamp(modules)
        if stamp != self._stamp:
            self._values.clear()
            self._stamp = stamp
        value = self._values.get(key)
        if value is None:
            with torch.inference_mode(False), torch.no_grad():
                value = map_tensors(build(), lambda _, t: t.detach().contiguous())
            self._values[key] = value
        return value

    def clear(self) -> None:
        """Forget every cached value and the source list (after replacing a parameter object)."""
        self._sources = None
        self._stamp = ()
        self._values.clear()


def _child(path: str, name: str | int) -> str:
    return f"{path}.{name}" if path else str(name)


def tensor_items(w: Any, path: str = "") -> Iterator[tuple[str, torch.Tensor]]:
    """(dotted path, tensor) of every tensor in nested weight records (for export buffers)."""
    if isinstance(w, torch.Tensor):
        yield path, w
    elif isinstance(w, tuple):
        for i, item in enumerate(w):
            yield from tensor_items(item, _child(path, i))
    elif dataclasses.is_dataclass(w):
        for f in dataclasses.fields(w):
            yield from tensor_items(getattr(w, f.name), _child(path, f.name))


def map_tensors(w: _W, fn: Callable[[str, torch.Tensor], torch.Tensor], path: str = "") -> _W:
    """Copy of nested weight records with every tensor t at path p replaced by fn(p, t)."""
    if isinstance(w, torch.Tensor):
        return fn(path, w)  # type: ignore[return-value]
    if isinstance(w, tuple):
        return tuple(map_tensors(item, fn, _child(path, i)) for i, item in enumerate(w))  # type: ignore[return-value]
    if dataclasses.is_dataclass(w) and not isinstance(w, type):
        values = {f.name: map_tensors(getattr(w, f.name), fn, _child(path, f.name)) for f in dataclasses.fields(w)}
        return dataclasses.replace(w, **values)
    return w
