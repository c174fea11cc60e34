"""The full network (Fig. 2): encoder, then the bin decoder (VeloBins) or the regression head (AI-IO baseline).

:class:`VeloBinsNet` maps a raw window (B, T, 6+K) to a :class:`NetOutput`, one forward for
training and inference: the encoder (:mod:`velobins_net.encoder`) gives the last-step feature h;
the bin decoder scores per-axis queries θ_i(h) against the bin features and decodes the
distribution (eq:softmax, eq:decode, eq:bin_variance: :class:`velobins_net.decoders.BinDecoder`), or
the regression head gives the velocity; the covariance decoder, where the variant has one, gives the
AI-IO head's log σ or, for M variants, RTMO's bounded σ with its Laplace kernel's variance 2b²
(:mod:`velobins_net.decoders`).

The reported variance ``var`` depends on the uncertainty source (§V, Table II superscript), an
inference-time choice: ``B`` the bin variance, ``C`` the covariance decoder's variance, ``B+C``
their sum (:func:`velobins_net.decoders.reported_variance`). ``forward(x, uncertainty=...)``
takes it per call; without it, the model config's ``uncertainty`` (the variant it was trained
as) is used.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn

from . import accel
from .config import ModelConfig
from .decoders import BinDecoder, CovarianceHead, RegressionHead, RTMOSigmaHead, reported_variance
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
        disagreement: (B, 3) an ensemble's disagreement, the variance of its members' means (part of ``var``;
            :mod:`velobins_net.ensemble`), or None for one network.
    """

    v: torch.Tensor
    var: torch.Tensor
    logits: torch.Tensor | None
    bin_var: torch.Tensor | None
    log_sigma: torch.Tensor | None
    rtmo_sigma: torch.Tensor | None = None
    cov: torch.Tensor | None = None
    disagreement: torch.Tensor | None = None


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
        self._traced = accel.TracedForward()

    def forward(self, x: torch.Tensor, uncertainty: str | None = None) -> NetOutput:
        """x (B, T, 6+K) raw window → :class:`NetOutput`.

        Args:
            x: raw window.
            uncertainty: reported variance source ``B``, ``C`` or ``B+C``; None: ``cfg.uncertainty``.
        """
        source = uncertainty or self.cfg.uncertainty
        if self._traced.applies(x):  # fast path: a few windows run this same forward traced and frozen
            return self._traced(self, x, source)
        h = self.encoder(x)  # last-step feature (B, D_h)
        logits = bin_var = None
        if self.bins is not None:  # VeloBins: a distribution over velocity bins per axis, decoded
            logits, v, bin_var = self.bins(h)
        else:  # AI-IO regression baseline: the velocity itself
            assert self.reg is not None
            v = self.reg(h)
        cov = self.cov(h) if self.cov is not None else None  # covariance decoder: AI-IO's log σ or RTMO's σ
        var = reported_variance(source, bin_var, None if cov is None else cov.var)
        if cov is None:
            return NetOutput(v, var, logits, bin_var, None)
        return NetOutput(v, var, logits, bin_var, cov.log_sigma, cov.rtmo_sigma)

    def set_normalization(self, mean: torch.Tensor, std: torch.Tensor) -> None:
        """Install the training-set statistics of the sensor channels (:meth:`Encoder.set_normalization`)."""
        self.encoder.set_normalization(mean, std)

    def invalidate_cache(self) -> None:
        """Forget the derived-weight caches; needed only after editing parameters through ``.data``.

        Every other change (optimiser steps, ``load_state_dict``, in-place edits, device or dtype
        moves, :meth:`Encoder.set_normalization`) is seen by the caches themselves.
        """
        self._traced.clear()
        self.encoder._cache.clear()
        for layer in self.encoder.layers:
            layer._cache.clear()
        if self.bins is not None:
            self.bins._cache.clear()


def count_parameters(module: nn.Module) -> int:
    """Number of trainable parameters."""
    return sum(p.numel() for p in module.parameters() if p.requires_grad)
