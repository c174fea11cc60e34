"""accel.cache.DerivedCache: values derived from parameters, rebuilt exactly when a parameter changes."""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn

from velobins_net.accel import DerivedCache


class _Pair(NamedTuple):
    a: torch.Tensor
    b: torch.Tensor


def _counting(lin: nn.Linear, builds: list[int]):
    def build() -> _Pair:
        builds.append(1)
        return _Pair(lin.weight.t() * 2.0, lin.bias + 1.0)

    return build


def test_derived_values_are_cached_without_gradients_and_rebuilt_with():
    lin, builds = nn.Linear(3, 4), []
    cache: DerivedCache[_Pair] = DerivedCache()
    with torch.no_grad():
        first = cache.derive((lin,), "k", _counting(lin, builds))
        again = cache.derive((lin,), "k", _counting(lin, builds))
    assert len(builds) == 1 and again is first
    assert isinstance(first, _Pair) and first.a.is_contiguous() and not first.a.requires_grad
    live = cache.derive((lin,), "k", _counting(lin, builds))  # autograd records: built afresh
    assert len(builds) == 2 and live.a.requires_grad


def test_changes_rebuild_and_data_edits_need_clear():
    lin, builds = nn.Linear(3, 4), []
    cache: DerivedCache[_Pair] = DerivedCache()
    opt = torch.optim.Adam(lin.parameters(), lr=0.1, fused=True)

    def value() -> _Pair:
        with torch.no_grad():
            return cache.get((lin, None), "k", _counting(lin, builds))

    value()
    with torch.no_grad():
        lin.bias.add_(1.0)  # an in-place edit
    torch.testing.assert_close(value().b, lin.bias.detach() + 1.0)
    lin(torch.randn(2, 3)).sum().backward()
    opt.step()  # fused: no version counter bump, but a counted step
    torch.testing.assert_close(value().b, lin.bias.detach() + 1.0)
    lin.load_state_dict(nn.Linear(3, 4).state_dict())
    torch.testing.assert_close(value().b, lin.bias.detach() + 1.0)
    lin.double()  # a dtype move replaces the storage
    assert value().a.dtype == torch.float64
    assert len(builds) == 5
    lin.bias.data.add_(1.0)  # invisible: the caller must clear
    assert len(builds) == 5 and not torch.allclose(value().b, lin.bias.detach() + 1.0)
    cache.clear()
    torch.testing.assert_close(value().b, lin.bias.detach() + 1.0)


def test_other_values_are_kept_as_they_are_and_the_oldest_key_goes_first():
    lin = nn.Linear(3, 4)
    cache: DerivedCache[object] = DerivedCache(max_values=2)
    marker = object()
    with torch.no_grad():
        assert cache.get((lin,), "obj", lambda: marker) is marker
        assert cache.get((lin,), "text", lambda: ("a", 1)) == ("a", 1)
        cache.get((lin,), "third", lambda: 3)
        assert cache.get((lin,), "obj", lambda: "rebuilt") == "rebuilt"  # "obj" had been dropped
