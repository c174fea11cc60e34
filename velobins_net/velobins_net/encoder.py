"""AI-IO style encoder (§III-B, Fig. 2): per-modality 1-D convolutions, a transformer, last-step feature h.

Input: a window (B, T, 6+K) of raw [acc (3), gyro (3), rotor (K)] samples at the network rate.
Rotor preprocessing follows the actuation physics: thrust ∝ ω², so measured speeds (``speed``,
rad/s) are fed squared, normalised commands (``command``) raw. Every channel is then standardised with
statistics fitted once on the training set and stored as buffers (never updated at inference).
:meth:`Encoder.forward` reads top to bottom as the architecture; for the defaults (D_h = 48,
K = 4, branch width 16, kernel 5, 4 heads, FFN 224):

====================================  ===================================  ========
layer                                 arithmetic                           params
====================================  ===================================  ========
acc branch conv 3→16, k=5             3·16·5 + 16                          256
gyro branch conv 3→16, k=5            3·16·5 + 16                          256
rotor branch conv K→16, k=5           4·16·5 + 16                          336
second conv, per modality (groups=3)  48·16·5 + 48                         3 888
projection 48→48                      48·48 + 48                           2 352
transformer layer ×2                  2·(LN 96 + QKV 7 056 + out 2 352     62 752
                                      + LN 96 + FFN 10 976 + 10 800)
final LayerNorm                       2·48                                 96
total                                                                      69 936
====================================  ===================================  ========

69 936 is within 0.2 % of the paper's 69.8 k. Time positions use a fixed sinusoidal encoding
(no parameters, any window length). Only h, the last token of the last layer, is used, so that
layer computes the last token only (:class:`velobins_net.transformer.TransformerLayer`).

Fast paths, each a commented branch beside the plain computation (on with the accelerator switch
:func:`velobins_net.accel.enabled`, held to the plain branch by the tests): the three branch
convolutions as one convolution with a block-diagonal weight (one kernel call instead of three, no
slicing, no concatenation), and for small gradient-free batches the grouped mixing convolution as
the equivalent dense block-diagonal one (the grouped kernel has a large fixed cost there). Without
gradients their weights are cached until a parameter changes (:class:`velobins_net.accel.DerivedCache`).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from velobins_common.constants import ROTOR_SPEED

from . import accel
from .config import ModelConfig
from .transformer import TransformerLayer

DENSE_MIX_MAX_BATCH = 16
"""Gradient-free batches up to this size use the dense block-diagonal mixing convolution (fixed cost
of the grouped kernel dominates there); larger ones keep the grouped kernel (1/3 of the FLOPs)."""


def sinusoidal_table(length: int, dim: int, base: float = 10000.0) -> torch.Tensor:
    """(length, dim) fixed sine/cosine encoding of positions 0..length−1 (Vaswani et al.)."""
    pos = torch.arange(length, dtype=torch.float64).unsqueeze(1)
    freq = torch.exp(-math.log(base) * torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    table = torch.zeros(length, dim, dtype=torch.float64)
    table[:, 0::2] = torch.sin(pos * freq)
    table[:, 1::2] = torch.cos(pos * freq[: dim // 2])
    return table.float()


def block_diagonal(blocks: list[torch.Tensor]) -> torch.Tensor:
    """Conv weights (out_i, in_i, k) → (Σ out_i, Σ in_i, k) with zeros off the diagonal blocks (differentiable).

    A convolution with this weight computes every block's convolution on its own input channels,
    stacked: the zero blocks contribute exact zeros.
    """
    total_in = sum(b.shape[1] for b in blocks)
    rows, start = [], 0
    for b in blocks:
        rows.append(F.pad(b, (0, 0, start, total_in - start - b.shape[1])))
        start += b.shape[1]
    return torch.cat(rows, dim=0)


class Encoder(nn.Module):
    """Window (B, T, 6+K) of raw inputs → last-step feature h (B, D_h) (§III-B)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        c, k, d = cfg.conv_channels, cfg.conv_kernel, cfg.d_model
        self.square_rotor = cfg.rotor_kind == ROTOR_SPEED
        self.window_len = cfg.window_len
        n_in = cfg.input_channels
        # Normalisation statistics: fitted on the training set (data.fit_normalization), then frozen.
        self.register_buffer("norm_mean", torch.zeros(n_in))
        self.register_buffer("norm_std", torch.ones(n_in))
        self.acc_conv = nn.Conv1d(3, c, k, padding=k // 2)
        self.gyro_conv = nn.Conv1d(3, c, k, padding=k // 2)
        self.rotor_conv = nn.Conv1d(cfg.num_rotors, c, k, padding=k // 2)
        self.mix_conv = nn.Conv1d(3 * c, 3 * c, k, padding=k // 2, groups=3)  # still per modality
        self.proj = nn.Linear(3 * c, d)
        self.register_buffer("time_pe", sinusoidal_table(cfg.window_len, d), persistent=False)
        self.layers = nn.ModuleList(TransformerLayer(d, cfg.num_heads, cfg.ffn_dim) for _ in range(cfg.num_layers))
        self.norm = nn.LayerNorm(d)
        self._cache: accel.DerivedCache[tuple[torch.Tensor, ...]] = accel.DerivedCache()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (B, T, 6+K) raw window → h (B, D_h)."""
        if x.shape[1] != self.window_len:
            raise ValueError(f"encoder input: expected {self.window_len} time steps, got {x.shape[1]}")
        z = self.standardise(x).transpose(1, 2)  # (B, C, T)
        z = accel.gelu(self.branch_convs(z))  # acc, gyro, rotor: each through its own convolution
        z = accel.gelu(self.mixing_conv(z))  # a second convolution, still per modality
        z = self.proj(z.transpose(1, 2)) + self.time_pe  # one token per time step, with its time position
        for layer in self.layers[:-1]:
            z = layer(z)
        if self.layers:  # h is the last token of the last layer: that layer computes only it
            z = self.layers[-1](z, last_only=True)
        return self.norm(z[:, -1])

    def standardise(self, x: torch.Tensor) -> torch.Tensor:
        """Raw (B, T, 6+K) → the standardised network input: rotor speeds as ω² (thrust ∝ ω²), then (x − μ)/σ."""
        if self.square_rotor:
            x = torch.cat([x[..., :6], x[..., 6:].square()], dim=-1)
        return (x - self.norm_mean) / self.norm_std

    def branch_convs(self, z: torch.Tensor) -> torch.Tensor:
        """The acc, gyro and rotor channels of z (B, 6+K, T), each through its own convolution, stacked: (B, 3c, T)."""
        if accel.enabled():  # fast path: one convolution whose weight holds the three on its block diagonal
            weight, bias = self._cache.derive(self._conv_modules(), "branches", self._branch_weights)
            return F.conv1d(z, weight, bias, padding=self.acc_conv.padding)
        acc, gyro, rotor = z.split([3, 3, z.shape[1] - 6], dim=1)
        return torch.cat([self.acc_conv(acc), self.gyro_conv(gyro), self.rotor_conv(rotor)], dim=1)

    def mixing_conv(self, z: torch.Tensor) -> torch.Tensor:
        """The second, grouped convolution (one group per modality): (B, 3c, T) → (B, 3c, T)."""
        if accel.enabled() and not torch.is_grad_enabled() and z.shape[0] <= DENSE_MIX_MAX_BATCH:
            # fast path: a small batch pays the grouped kernel's large fixed cost; the dense convolution
            # with the groups on a block-diagonal weight computes the same sums without it
            (weight,) = self._cache.get(self._conv_modules(), "dense mix", self._dense_mix_weight)
            return F.conv1d(z, weight, self.mix_conv.bias, padding=self.mix_conv.padding)
        return self.mix_conv(z)

    def _conv_modules(self) -> tuple[nn.Module, ...]:
        """The modules whose parameters the cached convolution weights derive from."""
        return self.acc_conv, self.gyro_conv, self.rotor_conv, self.mix_conv

    def _branch_weights(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The branch convolutions' weights on a block diagonal, and their biases (differentiable)."""
        convs = (self.acc_conv, self.gyro_conv, self.rotor_conv)
        return block_diagonal([c.weight for c in convs]), torch.cat([c.bias for c in convs])

    def _dense_mix_weight(self) -> tuple[torch.Tensor]:
        """The grouped mixing weight (3c, c, k) as a dense block-diagonal one (3c, 3c, k)."""
        return (block_diagonal(list(self.mix_conv.weight.chunk(self.mix_conv.groups, dim=0))),)

    def set_normalization(self, mean: torch.Tensor, std: torch.Tensor) -> None:
        """Install training-set statistics of the (rotor-transformed) input channels."""
        if mean.shape != self.norm_mean.shape or std.shape != self.norm_std.shape:
            raise ValueError(f"normalisation: expected shape {tuple(self.norm_mean.shape)}, got {tuple(mean.shape)}")
        if not bool((std > 0).all()):
            raise ValueError("normalisation: every channel std must be > 0")
        self.norm_mean.copy_(mean)
        self.norm_std.copy_(std)
