"""Weights derived from a module's parameters, cached for gradient-free calls.

The network's forward runs on weights derived from its parameters (a block-diagonal fusion of the
branch convolutions, the folded last-layer attention, all heads as one affine map, the bin
features φ(enc(b))). With gradients they are rebuilt on every call, so training back-propagates
into the parameters; without gradients (inference, evaluation) they are a pure function of the
parameters and :class:`DerivedCache` keeps them. Its stamp is every source tensor's in-place
version counter, the storage of the module (a device or dtype move replaces it), the number of
optimiser steps taken in the process (fused optimisers such as ``Adam(fused=True)`` update
parameters without bumping version counters) and of parameter registrations (a parameter
replaced by another object). So an optimiser step, ``load_state_dict``, a move or an in-place
edit makes the next call rebuild them, and no module has to override ``train``, ``_apply`` or
``load_state_dict``. Parameters created under ``torch.inference_mode`` have no version counter.
Edits through ``.data`` bypass the version counter: after those, call :meth:`DerivedCache.clear`
(``VeloBinsNet.invalidate_cache``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable, Iterator
from operator import attrgetter
from typing import Any, Generic, TypeVar

import torch
from torch import nn
from torch.nn.modules.module import (
    register_module_buffer_registration_hook,
    register_module_parameter_registration_hook,
)
from torch.optim.optimizer import register_optimizer_step_post_hook

_W = TypeVar("_W")
_version = attrgetter("_version")

_events = [0, 0]
"""[optimiser steps, parameter/buffer registrations] in this process (part of every cache stamp)."""


def _count_step(*_: object) -> None:
    _events[0] += 1


def _count_registration(*_: object) -> None:
    _events[1] += 1


register_optimizer_step_post_hook(_count_step)
register_module_parameter_registration_hook(_count_registration)
register_module_buffer_registration_hook(_count_registration)


class DerivedCache(Generic[_W]):
    """One cached value per variant key, rebuilt when any parameter or buffer of the source modules changed."""

    def __init__(self) -> None:
        self._sources: list[torch.Tensor] = []
        self._registrations = -1
        self._stamp: tuple[int, ...] = ()
        self._values: dict[Hashable, _W] = {}

    def _current_stamp(self, modules: tuple[nn.Module | None, ...]) -> tuple[int, ...]:
        """Optimiser steps, every source's version counter, and the storage of the first and last source.

        A device or dtype move replaces the storage of every tensor of a module at once, so two
        of them stand for all; a parameter or buffer replaced by another object (``setattr``,
        ``load_state_dict(assign=True)``) is a registration, after which the sources are listed again.
        """
        if self._registrations != _events[1]:
            present = [m for m in modules if m is not None]
            self._sources = [t for m in present for t in (*m.parameters(), *m.buffers())]
            self._registrations = _events[1]
        src = self._sources
        try:
            versions = tuple(map(_version, src))
        except RuntimeError:  # inference tensors (a model built under inference_mode) have no version counter
            versions = tuple(-1 if t.is_inference() else t._version for t in src)
        return (_events[0], *versions, src[0].data_ptr(), src[-1].data_ptr()) if src else ()

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
        """Forget every cached value and the source list (after editing a parameter through ``.data``)."""
        self._registrations = -1
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
