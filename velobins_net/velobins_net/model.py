"""The full network: encoder + bin decoder (VeloBins) or regression head (AI-IO baseline).

:class:`VeloBinsNet` maps a raw window (B, T, 6+K) to a :class:`NetOutput`. The reported
variance ``var`` is the uncertainty source chosen by the variant (§V, Table II superscript):
``B`` the bin variance (eq:bin_variance), ``C`` the covariance decoder exp(2 log σ), ``B+C``
their sum.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn

from .config import ModelConfig
from .decoders import BinDecoder, CovarianceHead, RegressionHead
from .encoder import Encoder


class NetOutput(NamedTuple):
    """Network outputs for a batch.

    Attributes:
        v: (B, 3) body velocity estimate v̂ [m/s].
        var: (B, 3) reported variance [m²/s²] (per the uncertainty source).
        logits: (B, 3, N) bin logits, or None for the regression head.
        bin_var: (B, 3) bin variance (eq:bin_variance), or None for the regression head.
        log_sigma: (B, 3) covariance-decoder log σ, or None when there is no covariance decoder.
    """

    v: torch.Tensor
    var: torch.Tensor
    logits: torch.Tensor | None
    bin_var: torch.Tensor | None
    log_sigma: torch.Tensor | None


class VeloBinsNet(nn.Module):
    """Encoder + decoder(s) configured by a :class:`ModelConfig`."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.encoder = Encoder(cfg)
        self.bins: BinDecoder | None = BinDecoder(cfg) if cfg.head == "bins" else None
        self.reg: RegressionHead | None = RegressionHead(cfg.d_model) if cfg.head == "reg" else None
        need_cov = cfg.head == "reg" or cfg.cov_head
        self.cov: CovarianceHead | None = CovarianceHead(cfg.d_model) if need_cov else None

    def forward(self, x: torch.Tensor, last_token_only: bool = True, use_cache: bool = True) -> NetOutput:
        """x (B, T, 6+K) raw window → :class:`NetOutput`.

        ``last_token_only=False`` / ``use_cache=False`` give the straightforward computation
        (same result), kept for tests and benchmarks.
        """
        h = self.encoder(x, last_token_only=last_token_only)
        log_sigma = self.cov(h) if self.cov is not None else None
        if self.bins is None:
            assert self.reg is not None and log_sigma is not None
            return NetOutput(self.reg(h), torch.exp(2.0 * log_sigma), None, None, log_sigma)
        logits = self.bins(h, use_cache=use_cache)
        v, bin_var = self.bins.decode(logits)
        source = self.cfg.uncertainty
        if source == "B":
            var = bin_var
        else:
            assert log_sigma is not None
            var = torch.exp(2.0 * log_sigma) if source == "C" else bin_var + torch.exp(2.0 * log_sigma)
        return NetOutput(v, var, logits, bin_var, log_sigma)


def count_parameters(module: nn.Module) -> int:
    """Number of trainable parameters."""
    return sum(p.numel() for p in module.parameters() if p.requires_grad)
