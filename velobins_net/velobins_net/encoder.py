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

Speed trick (exact): only h = the last token of the last layer is used, so the last layer runs
its query, attention output and feed-forward for the last token only; with one query per head
its attention folds into per-head (d × d) matrices so no key or value is projected at all
(:func:`velobins_net.fastpath._last_layer`). That path runs on fused weights
(:mod:`velobins_net.fastpath`: one block-diagonal branch convolution, no module calls), cached in
eval mode when gradients are off. :meth:`Encoder.forward` with ``last_token_only=False`` runs the
plain module-by-module all-token computation (the reference for tests and the "straightforward"
benchmark baseline); :meth:`TransformerLayer.forward` keeps an unfolded last-token option.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from .config import ModelConfig
from .fastpath import EncoderWeights, encode, fuse_encoder, map_tensors

DENSE_MIX_MAX_BATCH = 16
"""Inference batches up to this size use the dense block-diagonal mixing convolution (fixed cost
of the grouped kernel dominates there); larger ones keep the grouped kernel (1/3 of the FLOPs)."""


def sinusoidal_table(length: int, dim: int, base: float = 10000.0) -> torch.Tensor:
    """(length, dim) fixed sine/cosine encoding of positions 0..length−1 (Vaswani et al.)."""
    pos = torch.arange(length, dtype=torch.float64).unsqueeze(1)
    freq = torch.exp(-math.log(base) * torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    table = torch.zeros(length, dim, dtype=torch.float64)
    table[:, 0::2] = torch.sin(pos * freq)
    table[:, 1::2] = torch.cos(pos * freq[: dim // 2])
    return table.float()


class TransformerLayer(nn.Module):
    """Pre-norm transformer encoder layer with fused attention and a last-token-only path."""

    def __init__(self, d_model: int, num_heads: int, ffn_dim: int):
        super().__init__()
        self.d_model = d_model
        self.num_heads = num_heads
        self.norm1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.ff1 = nn.Linear(d_model, ffn_dim)
        self.ff2 = nn.Linear(ffn_dim, d_model)

    def _heads(self, t: torch.Tensor) -> torch.Tensor:
        b, n, _ = t.shape
        return t.view(b, n, self.num_heads, self.d_model // self.num_heads).transpose(1, 2)

    def forward(self, x: torch.Tensor, last_token_only: bool = False) -> torch.Tensor:
        """x (B, T, d) → (B, T, d), or (B, 1, d) holding only the last token when ``last_token_only``."""
        d = self.d_model
        y = self.norm1(x)
        w, b = self.qkv.weight, self.qkv.bias
        kv = F.linear(y, w[d:], b[d:])
        k, v = kv.split(d, dim=-1)
        if last_token_only:
            x = x[:, -1:]
            y = y[:, -1:]
        q = F.linear(y, w[:d], b[:d])
        a = F.scaled_dot_product_attention(self._heads(q), self._heads(k), self._heads(v))
        a = a.transpose(1, 2).reshape(x.shape[0], x.shape[1], d)
        x = x + self.out(a)
        return x + self.ff2(F.gelu(self.ff1(self.norm2(x))))


class Encoder(nn.Module):
    """Window (B, T, 6+K) of raw inputs → last-step feature h (B, D_h) (§III-B)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        c, k, d = cfg.conv_channels, cfg.conv_kernel, cfg.d_model
        self.square_rotor = cfg.rotor_kind == "rpm"
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
        self._fused: tuple[EncoderWeights, EncoderWeights] | None = None
        self._register_load_state_dict_pre_hook(self._drop_cache_hook)

    # ------------------------------------------------------------------ fused-weight cache
    def inference_weights(self, batch: int = 1) -> EncoderWeights:
        """Fused weights for a gradient-free eval forward of ``batch`` windows, computed once and cached.

        The cache is dropped by :meth:`train`, device/dtype moves, ``load_state_dict`` and
        :meth:`set_normalization`; call :meth:`invalidate_cache` after editing parameters in place
        while in eval mode.
        """
        if self._fused is None:
            with torch.inference_mode(False), torch.no_grad():
                self._fused = (_detached(fuse_encoder(self, True)), _detached(fuse_encoder(self, False)))
        return self._fused[0] if batch <= DENSE_MIX_MAX_BATCH else self._fused[1]

    def invalidate_cache(self) -> None:
        """Forget the cached fused weights (parameters or normalisation changed)."""
        self._fused = None

    def train(self, mode: bool = True) -> Encoder:
        """Switching mode drops the fused-weight cache."""
        self._fused = None
        return super().train(mode)

    def _apply(self, fn: Callable[[torch.Tensor], torch.Tensor], recurse: bool = True) -> Encoder:
        """Device / dtype moves (``to``, ``double`` …) drop the caches."""
        self._fused = None
        return super()._apply(fn, recurse)

    def _drop_cache_hook(self, *args: object, **kwargs: object) -> None:
        self._fused = None

    def set_normalization(self, mean: torch.Tensor, std: torch.Tensor) -> None:
        """Install training-set statistics of the (rotor-transformed) input channels."""
        if mean.shape != self.norm_mean.shape or std.shape != self.norm_std.shape:
            raise ValueError(f"normalisation: expected shape {tuple(self.norm_mean.shape)}, got {tuple(mean.shape)}")
        if not bool((std > 0).all()):
            raise ValueError("normalisation: every channel std must be > 0")
        self.norm_mean.copy_(mean)
        self.norm_std.copy_(std)
        self._fused = None

    def preprocess(self, x: torch.Tensor) -> torch.Tensor:
        """Rotor feature (ω² for rpm, raw pwm) then per-channel standardisation; x (B, T, 6+K)."""
        if self.square_rotor:
            x = torch.cat([x[..., :6], x[..., 6:].square()], dim=-1)
        return (x - self.norm_mean) / self.norm_std

    def forward(self, x: torch.Tensor, last_token_only: bool = True) -> torch.Tensor:
        """x (B, T, 6+K) raw window → h (B, D_h).

        ``last_token_only=True``: fused path (:func:`velobins_net.fastpath.encode`), on cached
        weights in eval mode without gradients, else on weights fused from the parameters (so
        training back-propagates into them). ``False``: the plain module-by-module reference.
        """
        if x.shape[1] != self.time_pe.shape[0]:
            raise ValueError(f"encoder input: expected {self.time_pe.shape[0]} time steps, got {x.shape[1]}")
        if last_token_only:
            if self.training or torch.is_grad_enabled():
                return encode(x, fuse_encoder(self, dense_mix=False))
            return encode(x, self.inference_weights(x.shape[0]))
        z = self.preprocess(x).transpose(1, 2)  # (B, C, T)
        z = torch.cat([self.acc_conv(z[:, :3]), self.gyro_conv(z[:, 3:6]), self.rotor_conv(z[:, 6:])], dim=1)
        z = F.gelu(self.mix_conv(F.gelu(z)))
        z = self.proj(z.transpose(1, 2)) + self.time_pe
        for layer in self.layers:
            z = layer(z)
        return self.norm(z[:, -1])


def _detached(w: EncoderWeights) -> EncoderWeights:
    """Copy of fused weights with every tensor detached and contiguous (a cache independent of autograd)."""
    return map_tensors(w, lambda _, t: t.detach().contiguous())
