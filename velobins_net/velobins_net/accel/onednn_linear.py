"""Linear layers of the all-token transformer layer on oneDNN's matmul, with MKL as the fallback.

PyTorch's CPU ``F.linear`` goes to MKL's sgemm, which on some CPUs (e.g. AMD EPYC, where MKL takes
a generic code path) runs the encoder's all-token products well below oneDNN's matmul — the one
PyTorch's inductor backend calls on the CPU, ``torch.ops.mkldnn._linear_pointwise`` — with the
same float32 results to rounding. ``python benchmarks/bench_net_train.py`` prints both (the
FFN-linear row). That op has no autograd, so :class:`_OneDnnLinear` supplies the backward: the
input gradient is another oneDNN matmul, the weight gradient (inner dimension = tokens, where MKL
is fast) stays ``torch.mm``.

Used for float32 CPU tensors outside tracing (exports keep ``F.linear``), when this PyTorch build
has the op; ``VELOBINS_NATIVE_KERNELS=0`` turns it off together with the native kernels. The model
holds such layers as :class:`Linear`: an ``nn.Linear`` (same parameters and state-dict keys) whose
forward is :func:`linear`.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from .native import kernels_enabled


def _op() -> Any | None:
    try:
        return torch.ops.mkldnn._linear_pointwise.default
    except (AttributeError, RuntimeError):
        return None


_LINEAR = _op() if torch.backends.mkldnn.is_available() else None
MIN_ROWS = 1024
"""Fewer rows (tokens) than this stay on ``F.linear``: at one window (100 rows) the autograd wrapper
costs more than the faster matmul saves."""


class _OneDnnLinear(torch.autograd.Function):
    """y = x Wᵀ + b by oneDNN; backward: dx by oneDNN, dW and db by PyTorch."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:  # type: ignore[override]
        assert _LINEAR is not None
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        return _LINEAR(x, weight, bias, "none", [], "")

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:  # type: ignore[override]
        assert _LINEAR is not None
        x, weight = ctx.saved_tensors
        dx = dw = db = None
        if ctx.needs_input_grad[0]:
            dx = _LINEAR(grad, weight.t().contiguous(), None, "none", [], "")
        g2 = grad.reshape(-1, grad.shape[-1])
        if ctx.needs_input_grad[1]:
            dw = torch.mm(g2.t(), x.reshape(-1, x.shape[-1]))
        if ctx.has_bias and ctx.needs_input_grad[2]:
            db = g2.sum(0)
        return dx, dw, db


def onednn_applies(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether :func:`linear` would take oneDNN's matmul for these operands."""
    if _LINEAR is None or torch.jit.is_scripting() or torch.jit.is_tracing():
        return False
    if x.device.type != "cpu" or x.dtype != torch.float32 or weight.dtype != torch.float32:
        return False
    if x.numel() < MIN_ROWS * x.shape[-1]:
        return False
    return kernels_enabled()


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear(x, weight, bias)``, on oneDNN's matmul where :func:`onednn_applies`."""
    if onednn_applies(x, weight):
        return _OneDnnLinear.apply(x, weight, bias)
    return F.linear(x, weight, bias)


class Linear(nn.Linear):
    """``nn.Linear`` on oneDNN's matmul for training-size inputs (:func:`linear`); the same layer otherwise."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (..., in) → (..., out): x Wᵀ + b."""
        return linear(x, self.weight, self.bias)
