"""accel.traced: a few gradient-free windows run the module's own forward traced and frozen, once per signature."""

from __future__ import annotations

import logging
from typing import NamedTuple

import pytest
import torch
from reference import accelerator, assert_same_outputs
from torch import nn

from velobins_net import accel
from velobins_net.accel import traced
from velobins_net.config import ModelConfig
from velobins_net.model import VeloBinsNet

torch.set_num_threads(1)


@pytest.fixture
def traces(monkeypatch) -> list[int]:
    """Counts the traces made (one per frozen signature)."""
    made: list[int] = []
    real = torch.jit.trace

    def counting(*args, **kwargs):
        made.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(torch.jit, "trace", counting)
    return made


def _model(**kw) -> VeloBinsNet:
    torch.manual_seed(0)
    return VeloBinsNet(ModelConfig(num_bins=32, **kw)).eval()


def _eager(model: nn.Module, x: torch.Tensor, *args):
    with accel.eager():
        return model(x, *args)


def test_one_frozen_graph_per_signature_equal_to_the_eager_forward(traces):
    model = _model(cov_head=True, uncertainty="B+C")
    x = torch.randn(traced.MAX_BATCH, 100, 10)
    with torch.inference_mode():
        first = model(x[:1])
        assert len(traces) == 1
        assert_same_outputs(model(x[:1]), first, rtol=0, atol=0)  # the same graph again
        assert_same_outputs(first, _eager(model, x[:1]))
        assert len(traces) == 1
        model(x[:1], "C")  # another uncertainty source, another batch size: their own graphs
        model(x)
        assert len(traces) == 3
        assert_same_outputs(model(x, "C"), _eager(model, x, "C"))
    assert len(traces) == 4


def test_large_batches_gradients_the_switch_and_eager_blocks_stay_eager(traces):
    model = _model()
    x = torch.randn(1, 100, 10)
    with torch.inference_mode():
        model(torch.randn(traced.MAX_BATCH + 1, 100, 10))
        with accelerator(False):
            model(x)
        with accel.eager():
            model(x)
    model(x).v.sum().backward()  # with gradients
    assert not traces
    assert model.encoder.proj.weight.grad is not None


def test_a_parameter_change_makes_a_new_graph(traces):
    model = _model()
    x = torch.randn(2, 100, 10)
    with torch.no_grad():
        before = model(x)
        model.bins.theta.bias.add_(0.5)
        after = model(x)
    assert len(traces) == 2
    assert not torch.allclose(before.v, after.v)
    with torch.no_grad():
        assert_same_outputs(after, _eager(model, x))


class _Out(NamedTuple):
    y: torch.Tensor
    count: int | None = None
    extra: torch.Tensor | None = None


class _Toy(nn.Module):
    """A small module with the traced fast path; ``untraceable`` returns a plain int (no trace can)."""

    def __init__(self, untraceable: bool = False):
        super().__init__()
        self.lin = nn.Linear(3, 2)
        self.untraceable = untraceable
        self._traced = accel.TracedForward()

    def forward(self, x: torch.Tensor, scale: float = 1.0) -> _Out:
        if self._traced.applies(x):
            return self._traced(self, x, scale)
        return _Out(self.lin(x) * scale, 7 if self.untraceable else None)


def test_a_forward_the_tracer_cannot_record_runs_eagerly_with_one_warning(caplog):
    toy = _Toy(untraceable=True)
    x = torch.randn(2, 3)
    with caplog.at_level(logging.WARNING, logger=traced.__name__), torch.no_grad():
        outs = [toy(x) for _ in range(3)]
    assert [r.getMessage() for r in caplog.records if "traced forward unavailable" in r.getMessage()] == [
        caplog.records[0].getMessage()
    ]
    assert all(o.count == 7 for o in outs)
    torch.testing.assert_close(outs[-1].y, toy.lin(x))


def test_training_flag_none_fields_and_inference_tensors(traces):
    toy = _Toy().train()
    toy.lin.eval()  # a submodule's own mode is kept too
    with torch.inference_mode():
        x = torch.randn(2, 3)  # an inference tensor
        out = toy(x, 2.0)
        again = toy(x, 2.0)
        want = 2.0 * toy.lin(x)
    assert len(traces) == 1 and toy.training and not toy.lin.training  # tracing leaves the modes as they were
    assert out.count is None and out.extra is None
    torch.testing.assert_close(out.y, want)
    torch.testing.assert_close(again.y, out.y, rtol=0, atol=0)


def test_signatures_kept_are_bounded(traces):
    toy = _Toy()
    x = torch.randn(1, 3)
    with torch.no_grad():
        for scale in range(traced.MAX_SIGNATURES + 3):
            toy(x, float(scale))
        toy(x, float(traced.MAX_SIGNATURES + 2))  # the newest is kept
        assert len(traces) == traced.MAX_SIGNATURES + 3
        toy(x, 0.0)  # the oldest was dropped: traced again
    assert len(traces) == traced.MAX_SIGNATURES + 4
