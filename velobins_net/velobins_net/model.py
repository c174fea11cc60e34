"""The full network: encoder + bin decoder (VeloBins) or regression head (AI-IO baseline).

:class:`VeloBinsNet` maps a raw window (B, T, 6+K) to a :class:`NetOutput`, one forward for
training and inference: the encoder (:mod:`velobins_net.encoder`) gives the last-step feature h,
then every head's linear map runs on h as ONE affine map (:func:`heads`): the per-axis bin
queries θ_i(h), scored against the bin features and decoded (eq:softmax, eq:decode,
eq:bin_variance: :func:`velobins_net.bins.decode_queries`), the regression velocity, and the
covariance decoder: the AI-IO head's log σ, or for M variants RTMO's bounded σ
(:func:`velobins_net.decoders.rtmo_sigma`) with its Laplace kernel's variance 2b².

The reported variance ``var`` depends on the uncertainty source (§V, Table II superscript), an
inference-time choice: ``B`` the bin variance, ``C`` the covariance decoder exp(2 log σ), ``B+C``
their sum (:func:`velobins_net.decoders.reported_variance`). ``forward(x, uncertainty=...)``
takes it per call; without it, the model config's ``uncertainty`` (the variant it was trained
as) is used.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import nn

from . import accel
from .bins import decode, decode_queries
from .config import AIIO_FILTER_MIN_LOG_STD, ModelConfig
from .decoders import (
    BinDecoder,
    CovarianceHead,
    RegressionHead,
    RTMOSigmaHead,
    covariance_variance,
    laplace_scale,
    laplace_variance,
    reported_variance,
    rtmo_sigma,
)
from .encoder import Encoder


class NetOutput(NamedTuple):
    """Network outputs for a batch.

    Attributes:
        v: (B, 3) body velocity estimate v̂ [m/s].
        var: (B, 3) reported variance [m²/s²] (per the uncertainty source).
        logits: (B, 3, N) bin logits, or None for the regression head.
        bin_var: (B, 3) bin variance (eq:bin_variance), or None for the regression head.
        log_sigma: (B, 3) log of the covariance decoder's standard deviation (its variance is
            exp(2 log σ)), or None when there is no covariance decoder. For the M head this is
            log √2·b of its Laplace kernel.
        rtmo_sigma: (B, 3) RTMO's bounded σ ∈ [10⁻³, 0.1) of the M variants' head (the loss's
            input, :func:`velobins_net.losses.rtmo_mle_loss`), or None for other heads.
        cov: (B, 3, 3) full covariance of ``v`` when the method predicts one that is not diagonal
            (EqNIO: diagonal in its canonical frame, rotated back); None: diag(var).
    """

    v: torch.Tensor
    var: torch.Tensor
    logits: torch.Tensor | None
    bin_var: torch.Tensor | None
    log_sigma: torch.Tensor | None
    rtmo_sigma: torch.Tensor | None = None
    cov: torch.Tensor | None = None


@dataclass(frozen=True)
class HeadWeights:
    """All heads on h as one affine map h → [bin queries | velocity (3) | log σ (3)] (present parts only).

    With a bin encoding, the bin block holds the per-axis queries θ_i(h) ∈ R^D (3D columns),
    scored against the bin features in one (3 × D)·(D × N) product (eq:softmax); with the
    ``direct`` encoding it holds the 3N logits themselves.

    Attributes:
        weight_t: (D_h, O) transposed weight of the fused map.
        bias: (O,) its bias.
        num_bins: N (0 without a bin decoder).
        bin_cols: columns of the bin block (3D, 3N for ``direct``, 0 without bins).
        features_t: (D, N) transposed bin features φ(enc(b)), or None (``direct`` / no bins).
        centres: (N,) bin centres, or None.
        has_log_sigma: a covariance block (3 columns) comes last.
        sigma_span: None: that block is the AI-IO head's log σ; else the M head's raw z
            (σ = rtmo_sigma(z)) and this is the bin span 2R of its Laplace scale.
    """

    weight_t: torch.Tensor
    bias: torch.Tensor
    num_bins: int
    bin_cols: int
    features_t: torch.Tensor | None
    centres: torch.Tensor | None
    has_log_sigma: bool
    sigma_span: torch.Tensor | None = None


def covariance_block(
    cov: torch.Tensor | None, span: torch.Tensor | None
) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
    """The covariance decoder's raw block (B, 3) → (variance, log σ, RTMO σ); all None without one.

    AI-IO head (``span`` None): the block is log σ, variance exp(2 max(log σ, −4)) (AI-IO's filter
    floor). M head: σ = rtmo_sigma(block), Laplace scale b = laplace_scale(σ, span), variance 2b²,
    log σ = ½ log 2b² (docs/design.md).
    """
    if cov is None:
        return None, None, None
    if span is None:
        return covariance_variance(cov, AIIO_FILTER_MIN_LOG_STD), cov, None
    sigma = rtmo_sigma(cov)
    var = laplace_variance(laplace_scale(sigma, span))
    return var, 0.5 * torch.log(var), sigma


def heads(h: torch.Tensor, w: HeadWeights, uncertainty: str) -> NetOutput:
    """h (B, D_h) → :class:`NetOutput`, the reported variance from source ``uncertainty`` (B, C or B+C)."""
    out = torch.addmm(w.bias, h, w.weight_t)
    cov_var, log_sigma, sigma = covariance_block(out[:, -3:] if w.has_log_sigma else None, w.sigma_span)
    if w.num_bins == 0:  # regression baseline: velocity and log σ
        return NetOutput(out[:, :3], reported_variance(uncertainty, None, cov_var), None, None, log_sigma)
    assert w.centres is not None
    if w.features_t is None:  # direct encoding: the bin block holds the logits themselves
        logits = out[:, : w.bin_cols].reshape(-1, 3, w.num_bins)
        v, bin_var = decode(logits, w.centres)
    else:
        queries = out[:, : w.bin_cols].reshape(-1, 3, w.features_t.shape[0])
        logits, v, bin_var = decode_queries(queries, w.features_t, w.centres)
    return NetOutput(v, reported_variance(uncertainty, bin_var, cov_var), logits, bin_var, log_sigma, sigma)


class VeloBinsNet(nn.Module):
    """Encoder + decoder(s) configured by a :class:`ModelConfig`."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.encoder = Encoder(cfg)
        self.bins: BinDecoder | None = BinDecoder(cfg) if cfg.head == "bins" else None
        self.reg: RegressionHead | None = RegressionHead(cfg.d_model) if cfg.head == "reg" else None
        # The covariance decoder: AI-IO's log-σ head for the baseline; beside the bins only M
        # variants have one (cov_head), and theirs is RTMO's bounded σ head.
        self.cov: CovarianceHead | RTMOSigmaHead | None = None
        if cfg.head == "reg":
            self.cov = CovarianceHead(cfg.d_model)
        elif cfg.cov_head:
            self.cov = RTMOSigmaHead(cfg.d_model, cfg.velocity_range)
        self._cache: accel.DerivedCache[HeadWeights] = accel.DerivedCache()

    def forward(self, x: torch.Tensor, uncertainty: str | None = None) -> NetOutput:
        """x (B, T, 6+K) raw window → :class:`NetOutput`.

        Args:
            x: raw window.
            uncertainty: reported variance source ``B``, ``C`` or ``B+C``; None: ``cfg.uncertainty``.
        """
        return heads(self.encoder(x), self.inference_head_weights(), uncertainty or self.cfg.uncertainty)

    def inference_head_weights(self) -> HeadWeights:
        """:meth:`head_weights`, cached for gradient-free calls (rebuilt when a parameter changes)."""
        if torch.is_grad_enabled():
            return self.head_weights()
        return self._cache.get((self.bins, self.reg, self.cov), None, self.head_weights)

    def head_weights(self) -> HeadWeights:
        """All heads as one affine map on h plus the bin features (differentiable in the parameters)."""
        weights, biases = [], []
        n = bin_cols = 0
        features_t = centres = None
        if self.bins is not None:
            n = self.bins.num_bins
            weights.append(self.bins.theta.weight.t())
            biases.append(self.bins.theta.bias)
            bin_cols = self.bins.theta.out_features
            centres = self.bins.centres
            if self.bins.encoding != "direct":
                features_t = self.bins.bin_features().t()
        for head in (self.reg, self.cov):
            if head is not None:
                weights.append(head.linear.weight.t())
                biases.append(head.linear.bias)
        span = self.cov.span if isinstance(self.cov, RTMOSigmaHead) else None
        return HeadWeights(
            torch.cat(weights, dim=1), torch.cat(biases), n, bin_cols, features_t, centres, self.cov is not None, span
        )

    def set_normalization(self, mean: torch.Tensor, std: torch.Tensor) -> None:
        """Install the training-set statistics of the sensor channels (:meth:`Encoder.set_normalization`)."""
        self.encoder.set_normalization(mean, std)

    def invalidate_cache(self) -> None:
        """Forget the derived-weight caches; needed only after editing parameters through ``.data``.

        Every other change (optimiser steps, ``load_state_dict``, in-place edits, device or dtype
        moves, :meth:`Encoder.set_normalization`) is seen by the caches themselves.
        """
        self._cache.clear()
        self.encoder._cache.clear()


def count_parameters(module: nn.Module) -> int:
    """Number of trainable parameters."""
    return sum(p.numel() for p in module.parameters() if p.requires_grad)
