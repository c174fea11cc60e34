"""Decoders on the last-step feature h (§III-B): bin decoder, regression head, covariance decoder.

Bin decoder, logits ``θ_i(h) · φ(enc(b_n))`` (eq:softmax) with three bin encodings:

* ``direct``: no encoding, one linear layer h → 3N logits (3N(D_h+1) parameters);
* ``pe``: fixed sine positional encoding PE(b) ∈ R^C of the bin centres, projected by φ: C → D;
* ``spe``: learnable sine positional encoding SPE(b) = sin(γ ⊙ PE(b)) (eq:spe) with a learnable
  per-channel γ ∈ R^C (initialised to 1), then φ. Parameters C + D(C+1) + 3D(D_h+1) = 6 848 for
  C = 64, D = 32, D_h = 48 at any N.

PE(b) uses the normalised coordinate u = b/R ∈ (−1, 1): channels c < C/2 are sin(ω_c u), the
others cos(ω_c u), with ω_c = π·F^(c/(C/2−1)) geometrically spaced from π to F·π (F = 64), so
the slowest channel is monotone over the range and the fastest resolves a few bins at N = 512.

The bin encodings do not depend on the input: in eval mode φ(enc(b)) is computed once and
cached; switching to training mode or loading a state dict drops the cache.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from .bins import BinGrid, decode
from .config import ModelConfig

PE_MAX_FREQUENCY = 64.0
"""F: the fastest PE channel has angular frequency F·π in the normalised coordinate u = b/R."""


def fixed_positional_encoding(u: torch.Tensor, channels: int) -> torch.Tensor:
    """(N,) normalised coordinates u ∈ (−1, 1) → (N, C) fixed sine/cosine encoding PE (see module doc)."""
    if channels % 2 or channels < 4:
        raise ValueError(f"positional encoding: channels must be even and >= 4, got {channels}")
    half = channels // 2
    omega = math.pi * PE_MAX_FREQUENCY ** (torch.arange(half, dtype=torch.float64) / (half - 1))
    arg = u.to(torch.float64).unsqueeze(1) * omega
    return torch.cat([torch.sin(arg), torch.cos(arg)], dim=1).float()


class BinDecoder(nn.Module):
    """h (B, D_h) → bin logits (B, 3, N) (eq:softmax), plus decoding to (v̂, σ̂²)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.encoding = cfg.bin_encoding
        self.num_bins = cfg.num_bins
        grid = BinGrid(cfg.num_bins, cfg.velocity_range)
        self.register_buffer("centres", grid.centres())
        self._cache: torch.Tensor | None = None
        if self.encoding == "direct":
            self.theta = nn.Linear(cfg.d_model, 3 * cfg.num_bins)
        else:
            self.enc_dim = cfg.enc_dim
            self.register_buffer("pe", fixed_positional_encoding(grid.centres() / cfg.velocity_range, cfg.enc_channels))
            self.gamma = nn.Parameter(torch.ones(cfg.enc_channels)) if self.encoding == "spe" else None
            self.phi = nn.Linear(cfg.enc_channels, cfg.enc_dim)
            self.theta = nn.Linear(cfg.d_model, 3 * cfg.enc_dim)
        self._register_load_state_dict_pre_hook(self._drop_cache_hook)

    # ------------------------------------------------------------------ bin encodings and cache
    def compute_bin_features(self) -> torch.Tensor:
        """(N, D) φ(enc(b)) computed from the current parameters (no cache)."""
        enc = self.pe if self.gamma is None else torch.sin(self.gamma * self.pe)
        return self.phi(enc)

    def bin_features(self, use_cache: bool = True) -> torch.Tensor:
        """φ(enc(b)), cached in eval mode (input-independent, §III-B / Inference and Runtime)."""
        if self.training or not use_cache:
            return self.compute_bin_features()
        if self._cache is None:
            with torch.inference_mode(False), torch.no_grad():
                self._cache = self.compute_bin_features().detach().clone()
        return self._cache

    def invalidate_cache(self) -> None:
        """Forget the cached bin features (parameters changed)."""
        self._cache = None

    def train(self, mode: bool = True) -> BinDecoder:
        """Switching mode drops the cache, so training never sees stale encodings."""
        self._cache = None
        return super().train(mode)

    def _drop_cache_hook(self, *args: Any, **kwargs: Any) -> None:
        self._cache = None

    # ------------------------------------------------------------------ forward
    def forward(self, h: torch.Tensor, use_cache: bool = True) -> torch.Tensor:
        """h (B, D_h) → logits (B, 3, N)."""
        if self.encoding == "direct":
            return self.theta(h).view(h.shape[0], 3, self.num_bins)
        q = self.theta(h).view(h.shape[0], 3, self.enc_dim)
        return q @ self.bin_features(use_cache).t()

    def decode(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """logits (B, 3, N) → v̂ (B, 3) (eq:decode), σ̂² (B, 3) (eq:bin_variance)."""
        return decode(F.softmax(logits, dim=-1), self.centres)


class CovarianceHead(nn.Module):
    """AI-IO covariance decoder: h → log σ per axis (B, 3); variance = exp(2 log σ)."""

    def __init__(self, d_model: int):
        super().__init__()
        self.linear = nn.Linear(d_model, 3)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        """h (B, D_h) → log σ (B, 3)."""
        return self.linear(h)


class RegressionHead(nn.Module):
    """AI-IO regression baseline: velocity head h → v̂ (B, 3)."""

    def __init__(self, d_model: int):
        super().__init__()
        self.linear = nn.Linear(d_model, 3)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        """h (B, D_h) → v̂ (B, 3)."""
        return self.linear(h)
