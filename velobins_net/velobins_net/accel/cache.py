"""Weights derived from a module's parameters, cached for gradient-free calls.

A few of the model's fast paths run on weights derived from its parameters: the three branch
convolutions as one block-diagonal weight, the grouped mixing convolution as a dense one, the
last layer's attention folded for its one query, the bin features φ(enc(b)) (which do not depend
on the input). With gradients they are rebuilt on every
call, so training back-propagates into the parameters; without gradients (inference, evaluation)
they are a pure function of the parameters and :meth:`DerivedCache.derive` keeps them. Its stamp
is every source tensor's in-place version counter, the storage of the module (a device or dtype
move replaces it), the number of optimiser steps taken in the process (fused optimisers such as
``Adam(fused=True)`` update parameters without bumping version counters) and of parameter
registrations (a parameter replaced by another object). So an optimiser step,
``load_state_dict``, a move or an in-place edit makes the next call rebuild them, and no module
has to override ``train``, ``_apply`` or ``load_state_dict``. Parameters created under
``torch.inference_mode`` have no version counter. Edits through ``.data`` bypass the version
counter: after those, call :meth:`DerivedCache.clear` (``VeloBinsNet.invalidate_cache``).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from operator import attrgetter
from typing import Generic, TypeVar

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
    """One cached value per key (tensors, or anything built from the parameters), rebuilt when any parameter or
    buffer of the source modules changed; the same source modules on every call of one cache, at most
    ``max_values`` keys (the oldest dropped) when given."""

    def __init__(self, max_values: int | None = None) -> None:
        self._sources: list[torch.Tensor] = []
        self._registrations = -1
        self._stamp: tuple[int, ...] = ()
        self._values: dict[Hashable, _W] = {}
        self._max_values = max_values

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
                value = _detached(build())
            if self._max_values is not None and len(self._values) >= self._max_values:
                del self._values[next(iter(self._values))]  # the oldest
            self._values[key] = value
        return value

    def derive(self, modules: tuple[nn.Module | None, ...], key: Hashable, build: Callable[[], _W]) -> _W:
        """``build()``: computed afresh when autograd records it (training), else from the cache (:meth:`get`)."""
        if torch.is_grad_enabled():
            return build()
        return self.get(modules, key, build)

    def clear(self) -> None:
        """Forget every cached value and the source list (after editing a parameter through ``.data``)."""
        self._registrations = -1
        self._stamp = ()
        self._values.clear()


def _detached(value: _W) -> _W:
    """Tensors, also inside (named) tuples, detached and contiguous (what the cache keeps); other values as they are."""
    if isinstance(value, torch.Tensor):
        return value.detach().contiguous()  # type: ignore[return-value]
    if not isinstance(value, tuple):
        return value
    items = [_detached(v) for v in value]
    return type(value)(*items) if hasattr(value, "_fields") else tuple(items)  # type: ignore[return-value]
