"""AI-IO style encoder (§III-B): per-modality 1-D convolutions, a transformer, last-step feature h.

Input: a window (B, T, 6 + K) of raw [acc (3), gyro (3), rotor (K)] samples at the network rate.
Rotor preprocessing follows the actuation physics: thrust ∝ ω², so measured speeds (``rpm``,
rad/s) are fed squared, commanded ``pwm`` values raw. Every channel is then standardised with
statistics fitted once on the training set and stored as buffers (never updated at inference).

Architecture and parameter arithmetic for the defaults (D_h = 48, K = 4, branch width 16,
kernel 5, 4 heads, FFN 224):

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
(no parameters, any window length).

One forward, for training and inference: :meth:`Encoder.forward` runs :func:`encode` on weights
derived from the parameters (:meth:`Encoder.weights`), which computes the same function as the
layer-by-layer description above with fewer and cheaper ops:

* standardisation as one ``addcmul`` (x·(1/std) − mean/std), the ω² rotor feature as one ``where``;
* the three per-modality branch convolutions as ONE convolution with a block-diagonal weight
  (zero blocks contribute exact zeros), so no slicing of the input and no ``cat``;
* the grouped mixing convolution kept grouped (large batches: fewest FLOPs) or as an equivalent
  dense block-diagonal convolution (small batches: the grouped kernel has a large fixed cost);
* projection and time encoding in one ``baddbmm`` with the precomputed (time PE + bias);
* every layer but the last on every token, the last layer for the last token only, since only
  h = the last token of the last layer is used (:mod:`velobins_net.transformer`).

With gradients the weights are rebuilt from the parameters on every call (training
back-propagates through them); without, they are cached until a parameter changes
(:class:`velobins_net.accel.DerivedCache`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from velobins_common.constants import ROTOR_SPEED

from . import accel
from .config import ModelConfig
from .transformer import LastTokenWeights, LayerWeights, TransformerLayer, all_tokens, last_token

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


@dataclass(frozen=True)
class EncoderWeights:
    """Everything :func:`encode` needs, derived from an :class:`Encoder` (:meth:`Encoder.weights`).

    Attributes:
        in_scale: (C,) 1/std of the input channels.
        in_shift: (C,) −mean/std.
        square_mask: (C,) bool, True on rotor channels fed as ω² (rpm), or None (pwm).
        conv_w: (3c, C, k) block-diagonal fusion of the acc / gyro / rotor branch convolutions.
        conv_b: (3c,) their biases.
        mix_w: mixing convolution weight, grouped (3c, c, k) or dense block-diagonal (3c, 3c, k).
        mix_b: (3c,) its bias.
        mix_groups: 3 for the grouped weight, 1 for the dense one.
        padding: 'same' padding of the convolutions.
        proj_wt: (3c, d) transposed projection weight.
        pe_bias: (T, d) time encoding plus projection bias.
        layers: every layer but the last (all tokens).
        last: the last layer (last token only), or None without transformer layers.
        norm_w: (d,) final LayerNorm weight.
        norm_b: (d,) final LayerNorm bias.
        num_heads: attention heads.
        d_model: transformer width d (a plain int, so exporters see a static LayerNorm shape).
    """

    in_scale: torch.Tensor
    in_shift: torch.Tensor
    square_mask: torch.Tensor | None
    conv_w: torch.Tensor
    conv_b: torch.Tensor
    mix_w: torch.Tensor
    mix_b: torch.Tensor
    mix_groups: int
    padding: int
    proj_wt: torch.Tensor
    pe_bias: torch.Tensor
    layers: tuple[LayerWeights, ...]
    last: LastTokenWeights | None
    norm_w: torch.Tensor
    norm_b: torch.Tensor
    num_heads: int
    d_model: int


def block_diagonal(blocks: list[torch.Tensor]) -> torch.Tensor:
    """Conv weights (out_i, in_i, k) → (Σ out_i, Σ in_i, k) with zeros off the diagonal blocks (differentiable)."""
    total_in = sum(b.shape[1] for b in blocks)
    rows, start = [], 0
    for b in blocks:
        rows.append(F.pad(b, (0, 0, start, total_in - start - b.shape[1])))
        start += b.shape[1]
    return torch.cat(rows, dim=0)


def encode(x: torch.Tensor, w: EncoderWeights) -> torch.Tensor:
    """Raw window x (B, T, 6+K) → last-step feature h (B, d) (§III-B, see the module doc)."""
    if w.square_mask is not None:
        x = torch.where(w.square_mask, x * x, x)  # thrust ∝ ω²
    z = torch.addcmul(w.in_shift, x, w.in_scale).transpose(1, 2)  # (B, C, T), standardised
    z = accel.gelu(F.conv1d(z, w.conv_w, w.conv_b, padding=w.padding))  # the three branches
    z = accel.gelu(F.conv1d(z, w.mix_w, w.mix_b, padding=w.padding, groups=w.mix_groups))
    z = torch.baddbmm(w.pe_bias, z.transpose(1, 2), w.proj_wt.expand(z.shape[0], -1, -1))  # proj + time PE
    for lw in w.layers:
        z = all_tokens(z, lw, w.num_heads, w.d_model)
    # only h = the last token of the last layer is used: run that layer for the last token only
    h = z[:, -1] if w.last is None else last_token(z, w.last, w.num_heads, w.d_model)
    return F.layer_norm(h, (w.d_model,), w.norm_w, w.norm_b)


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
        self._cache: accel.DerivedCache[EncoderWeights] = accel.DerivedCache()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (B, T, 6+K) raw window → h (B, D_h): :func:`encode` on this encoder's weights."""
        if x.shape[1] != self.window_len:
            raise ValueError(f"encoder input: expected {self.window_len} time steps, got {x.shape[1]}")
        if torch.is_grad_enabled():
            return encode(x, self.weights(dense_mix=False))
        dense = x.shape[0] <= DENSE_MIX_MAX_BATCH
        return encode(x, self._cache.get((self,), dense, lambda: self.weights(dense)))

    def inference_weights(self, batch: int = 1) -> EncoderWeights:
        """Detached weights for a gradient-free forward of ``batch`` windows (cached; used by the exporter)."""
        dense = batch <= DENSE_MIX_MAX_BATCH
        return self._cache.get((self,), dense, lambda: self.weights(dense))

    def weights(self, dense_mix: bool) -> EncoderWeights:
        """Weights of :func:`encode` derived from the parameters (differentiable in them).

        ``dense_mix``: express the grouped mixing convolution as a dense block-diagonal one.
        """
        square_mask = None
        if self.square_rotor:
            square_mask = torch.arange(self.norm_mean.shape[0], device=self.norm_mean.device) >= 6
        mix_w, groups = self.mix_conv.weight, self.mix_conv.groups
        if dense_mix and groups > 1:
            mix_w, groups = block_diagonal(list(mix_w.chunk(groups, dim=0))), 1
        layers = list(self.layers)
        return EncoderWeights(
            in_scale=1.0 / self.norm_std,
            in_shift=-self.norm_mean / self.norm_std,
            square_mask=square_mask,
            conv_w=block_diagonal([self.acc_conv.weight, self.gyro_conv.weight, self.rotor_conv.weight]),
            conv_b=torch.cat([self.acc_conv.bias, self.gyro_conv.bias, self.rotor_conv.bias]),
            mix_w=mix_w,
            mix_b=self.mix_conv.bias,
            mix_groups=groups,
            padding=self.acc_conv.padding[0],
            proj_wt=self.proj.weight.t(),
            pe_bias=self.time_pe + self.proj.bias,
            layers=tuple(layer.weights() for layer in layers[:-1]),
            last=layers[-1].last_token_weights() if layers else None,
            norm_w=self.norm.weight,
            norm_b=self.norm.bias,
            num_heads=layers[0].num_heads if layers else 1,
            d_model=self.proj.out_features,
        )

    def set_normalization(self, mean: torch.Tensor, std: torch.Tensor) -> None:
        """Install training-set statistics of the (rotor-transformed) input channels."""
        if mean.shape != self.norm_mean.shape or std.shape != self.norm_std.shape:
            raise ValueError(f"normalisation: expected shape {tuple(self.norm_mean.shape)}, got {tuple(mean.shape)}")
        if not bool((std > 0).all()):
            raise ValueError("normalisation: every channel std must be > 0")
        self.norm_mean.copy_(mean)
        self.norm_std.copy_(std)
