"""Velocity bins and their decoding (§III-A).

N bin centres per axis uniformly cover [−R, R] (shared by the three axes). Bin n's support is
[b⁻_n, b⁺_n] with boundaries at midpoints between neighbouring centres, and the outermost
boundaries at ∓R. A per-axis distribution π over the bins decodes to the velocity (eq:decode)
and its variance about that velocity (eq:bin_variance).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import torch

from velobins_common.errors import UserError

from . import accel
from .config import RANGE_MARGIN


@dataclass(frozen=True)
class BinGrid:
    """Uniform bin grid over [−R, R].

    Attributes:
        num_bins: N.
        velocity_range: R [m/s].
    """

    num_bins: int
    velocity_range: float

    def __post_init__(self) -> None:
        if self.num_bins < 2:
            raise ValueError(f"BinGrid.num_bins: need >= 2 bins, got {self.num_bins}")
        if not self.velocity_range > 0:
            raise ValueError(f"BinGrid.velocity_range: must be > 0, got {self.velocity_range}")

    @property
    def width(self) -> float:
        """Bin width 2R/N [m/s]."""
        return 2.0 * self.velocity_range / self.num_bins

    def centres(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """(N,) bin centres b_n = −R + (n + ½)·width."""
        n = torch.arange(self.num_bins, dtype=torch.float64)
        return (-self.velocity_range + (n + 0.5) * self.width).to(dtype)

    def edges(self, dtype: torch.dtype = torch.float64) -> tuple[torch.Tensor, torch.Tensor]:
        """(lower, upper) boundaries, each (N,): midpoints between centres, first/last at ∓R (§III-A)."""
        b = self.centres(torch.float64)
        mid = 0.5 * (b[1:] + b[:-1])
        r = torch.tensor([self.velocity_range], dtype=torch.float64)
        lower = torch.cat([-r, mid])
        upper = torch.cat([mid, r])
        return lower.to(dtype), upper.to(dtype)


def velocity_range_from(body_velocities: Iterable[np.ndarray], margin: float = RANGE_MARGIN) -> float:
    """R = margin × the axis-wise max |body velocity| over all given (T, 3) arrays (Implementation Details).

    The max is taken over every axis and sample of the training set, so the one range shared by
    the axes covers the fastest axis with a 10 % margin.
    """
    peak = 0.0
    count = 0
    for i, v in enumerate(body_velocities):
        arr = np.asarray(v, dtype=np.float64)
        if arr.ndim != 2 or arr.shape[1] != 3:
            raise ValueError(f"velocity_range_from: array {i} must be (T, 3), got {arr.shape}")
        if arr.size:
            peak = max(peak, float(np.max(np.abs(arr))))
            count += 1
    if count == 0 or peak <= 0.0:
        raise UserError("the training flights hold no non-zero body velocity (a vehicle that never moved?)")
    return margin * peak


def expected_velocity(probs: torch.Tensor, centres: torch.Tensor) -> torch.Tensor:
    """v̂ = Σ_n π_n b_n (eq:decode); probs (..., N), centres (N,) → (...,)."""
    return probs @ centres


def bin_variance(probs: torch.Tensor, centres: torch.Tensor, mean: torch.Tensor) -> torch.Tensor:
    """σ̂² = Σ_n π_n (b_n − v̂)² (eq:bin_variance) about ``mean`` = v̂; probs (..., N) → (...,)."""
    return (probs * (centres - mean.unsqueeze(-1)).square()).sum(-1)


def decode(logits: torch.Tensor, centres: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Bin logits (..., N) → (v̂, σ̂²), each (...,): π = softmax(logits) (eq:softmax), then eq:decode, eq:bin_variance."""
    probs = torch.softmax(logits, dim=-1)
    v = expected_velocity(probs, centres)
    return v, bin_variance(probs, centres, v)


def decode_queries(
    queries: torch.Tensor, features_t: torch.Tensor, centres: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-axis queries θ_i(h) (..., D) against bin features φ(enc(b))ᵀ (D, N) → (logits (..., N), v̂ (...), σ̂² (...)).

    logits = θ_i(h) · φ(enc(b_n)) (eq:softmax), decoded by :func:`decode`. Gradient-free float32
    CPU calls run all of it in one native call (:func:`velobins_net.accel.bin_decode`, the same
    formulas), anything else these PyTorch expressions.
    """
    native = accel.bin_decode(queries.reshape(-1, queries.shape[-1]), features_t, centres)
    if native is not None:
        rows = queries.shape[:-1]
        logits, v, var = native
        return logits.view(*rows, -1), v.view(rows), var.view(rows)
    logits = queries @ features_t
    return (logits, *decode(logits, centres))
