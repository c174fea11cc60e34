"""The full network: encoder + bin decoder (VeloBins) or regression head (AI-IO baseline).

:class:`VeloBinsNet` maps a raw window (B, T, 6+K) to a :class:`NetOutput`. The reported
variance ``var`` is the uncertainty source chosen by the variant (§V, Table II superscript):
``B`` the bin variance (eq:bin_variance), ``C`` the covariance decoder exp(2 log σ), ``B+C``
their sum.

In eval mode without gradients (``torch.inference_mode`` / ``no_grad``) the default call runs the
fused fast path (:mod:`velobins_net.fastpath`): cached fused encoder weights, all heads' linear
maps as one cached matmul on h and one product with the cached bin features;
``last_token_only=False`` / ``use_cache=False`` give the plain module-by-module reference.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch
from torch import nn

from .config import ModelConfig
from .decoders import BinDecoder, CovarianceHead, RegressionHead
from .encoder import Encoder
from .fastpath import EncoderWeights, HeadWeights, encode, heads


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
        self._heads: HeadWeights | None = None
        self._register_load_state_dict_pre_hook(self._drop_cache_hook)

    def forward(self, x: torch.Tensor, last_token_only: bool = True, use_cache: bool = True) -> NetOutput:
        """x (B, T, 6+K) raw window → :class:`NetOutput`.

        ``last_token_only=False`` / ``use_cache=False`` give the straightforward computation
        (same result), kept for tests and benchmarks.
        """
        if last_token_only and use_cache and not self.training and not torch.is_grad_enabled():
            return self._fast_forward(x)
        h = self.encoder(x, last_token_only=last_token_only)
        log_sigma = self.cov(h) if self.cov is not None else None
        if self.bins is None:
            assert self.reg is not None and log_sigma is not None
            return NetOutput(self.reg(h), torch.exp(2.0 * log_sigma), None, None, log_sigma)
        logits = self.bins(h, use_cache=use_cache)
        v, bin_var = self.bins.decode(logits)
        return NetOutput(v, self._reported_var(bin_var, log_sigma), logits, bin_var, log_sigma)

    def _reported_var(self, bin_var: torch.Tensor, log_sigma: torch.Tensor | None) -> torch.Tensor:
        """Variance from the configured uncertainty source (B, C or B+C)."""
        source = self.cfg.uncertainty
        if source == "B":
            return bin_var
        assert log_sigma is not None
        return torch.exp(2.0 * log_sigma) if source == "C" else bin_var + torch.exp(2.0 * log_sigma)

    # ------------------------------------------------------------------ fused inference path
    def head_weights(self) -> HeadWeights:
        """All heads as one cached affine map on h plus the cached bin features (see :mod:`velobins_net.fastpath`).

        Dropped on :meth:`train`, device moves, ``load_state_dict`` and :meth:`invalidate_cache`.
        """
        if self._heads is None:
            with torch.inference_mode(False), torch.no_grad():
                self._heads = self._fuse_heads()
        return self._heads

    def _fuse_heads(self) -> HeadWeights:
        weights, biases = [], []
        n = bin_cols = 0
        features_t = centres = None
        if self.bins is not None:
            n = self.bins.num_bins
            weights.append(self.bins.theta.weight.t())
            biases.append(self.bins.theta.bias)
            bin_cols = self.bins.theta.out_features
            centres = self.bins.centres.detach().clone()
            if self.bins.encoding != "direct":
                features_t = self.bins.compute_bin_features().t().detach().contiguous()
        if self.reg is not None:
            weights.append(self.reg.linear.weight.t())
            biases.append(self.reg.linear.bias)
        if self.cov is not None:
            weights.append(self.cov.linear.weight.t())
            biases.append(self.cov.linear.bias)
        weight_t = torch.cat(weights, dim=1).detach().contiguous()
        bias = torch.cat(biases).detach().contiguous()
        return HeadWeights(weight_t, bias, n, bin_cols, features_t, centres, self.cov is not None, self.cfg.uncertainty)

    def _fast_forward(self, x: torch.Tensor) -> NetOutput:
        """Fused, cached eval path; same outputs as the reference to float rounding."""
        enc = self.encoder
        if x.shape[1] != enc.window_len:
            raise ValueError(f"encoder input: expected {enc.window_len} time steps, got {x.shape[1]}")
        hw = self._heads if self._heads is not None else self.head_weights()
        return NetOutput(*heads(encode(x, enc.inference_weights(x.shape[0])), hw))

    def fused_forward(self, x: torch.Tensor, enc: EncoderWeights, hw: HeadWeights) -> NetOutput:
        """Fast path on given fused weights (the export wrapper passes its own buffers)."""
        return NetOutput(*heads(encode(x, enc), hw))

    def invalidate_cache(self) -> None:
        """Forget every cached derived tensor (fused encoder weights, bin features, fused heads).

        Needed only after editing parameters in place while in eval mode; mode switches, device
        moves and ``load_state_dict`` drop the caches themselves.
        """
        self.encoder.invalidate_cache()
        if self.bins is not None:
            self.bins.invalidate_cache()
        self._heads = None

    def train(self, mode: bool = True) -> VeloBinsNet:
        """Switching mode drops every cache (also in the submodules)."""
        self._heads = None
        return super().train(mode)

    def _apply(self, fn: Callable[[torch.Tensor], torch.Tensor], recurse: bool = True) -> VeloBinsNet:
        """Device / dtype moves (``to``, ``double`` …) drop the caches."""
        self._heads = None
        if self.bins is not None:
            self.bins.invalidate_cache()
        return super()._apply(fn, recurse)

    def _drop_cache_hook(self, *args: object, **kwargs: object) -> None:
        self._heads = None


def count_parameters(module: nn.Module) -> int:
    """Number of trainable parameters."""
    return sum(p.numel() for p in module.parameters() if p.requires_grad)
