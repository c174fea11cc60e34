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

The bin encodings do not depend on the input, so gradient-free calls reuse φ(enc(b)) until a
parameter changes (a commented fast path of :meth:`BinDecoder.forward`, cached by
:class:`velobins_net.accel.DerivedCache`).

Covariance decoders: the AI-IO regression baseline's log-σ head (:class:`CovarianceHead`,
σ = exp(log σ), unbounded) and the M variants' σ head (:class:`RTMOSigmaHead`), RTMO's
(Lu et al. 2024; mmpose ``DCC.sigma_fc``) linear → sigmoid → ×0.1, so σ ∈ [10⁻³, 0.1) is a
fraction of the bin span 2R, and its Laplace kernel of scale b = 2σ·2R (:func:`laplace_scale`)
whose variance 2b² is the decoder's reported variance (docs/design.md, "M: RTMO's MLE loss").

Each decoder is a module whose forward maps h to its outputs; :class:`velobins_net.model.VeloBinsNet`
applies them. The reported variance by uncertainty source (B, C, B+C) is :func:`reported_variance`.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import nn

from velobins_common.errors import UserError

from . import accel
from .bins import BinGrid, decode, decode_queries
from .config import AIIO_FILTER_MIN_LOG_STD, ModelConfig

PE_MAX_FREQUENCY = 64.0
"""F: the fastest PE channel has angular frequency F·π in the normalised coordinate u = b/R."""

UNCERTAINTY_SOURCES = ("B", "C", "B+C")
"""Reported variance: bin variance (B), covariance decoder (C), or their sum (§V, Table II superscript)."""


def fixed_positional_encoding(u: torch.Tensor, channels: int) -> torch.Tensor:
    """(N,) normalised coordinates u ∈ (−1, 1) → (N, C) fixed sine/cosine encoding PE (see module doc)."""
    if channels % 2 or channels < 4:
        raise ValueError(f"positional encoding: channels must be even and >= 4, got {channels}")
    half = channels // 2
    omega = math.pi * PE_MAX_FREQUENCY ** (torch.arange(half, dtype=torch.float64) / (half - 1))
    arg = u.to(torch.float64).unsqueeze(1) * omega
    return torch.cat([torch.sin(arg), torch.cos(arg)], dim=1).float()


def learnable_sine_encoding(pe: torch.Tensor, gamma: torch.Tensor) -> torch.Tensor:
    """SPE(b) = sin(γ ⊙ PE(b)) (eq:spe); pe (N, C), gamma (C,) → (N, C)."""
    return torch.sin(gamma * pe)


RTMO_SIGMA_MAX = 0.1
"""Upper bound of RTMO's σ: mmpose ``DCC.sigma_fc`` ends in Sigmoid then Scale(0.1)."""

RTMO_SIGMA_MIN = 1e-3
"""Lower clip of RTMO's σ: mmpose ``DCC.generate_target_heatmap`` uses ``sigmas.clip(min=1e-3)``."""


def rtmo_sigma(z: torch.Tensor) -> torch.Tensor:
    """RTMO's bounded σ = max(0.1 · sigmoid(z), 10⁻³) from the head's raw output z (B, 3).

    RTMO (mmpose ``rtmo_head.py``, ``DCC``) bounds σ with a sigmoid scaled by 0.1 and clips it at
    10⁻³ where the kernel uses it; the clip is applied here so training and the reported variance
    see the same σ. σ is dimensionless: a fraction of the normalising length (:func:`laplace_scale`).
    """
    return (RTMO_SIGMA_MAX * torch.sigmoid(z)).clamp_min(RTMO_SIGMA_MIN)


def laplace_scale(sigma: torch.Tensor, span: float) -> torch.Tensor:
    """Scale b [m/s] of RTMO's Laplace kernel exp(−|v − b_n| / b): b = 2σ·span.

    RTMO's target heatmap is exp(−d / 2) / σ with d = |t − b_n| / (√area · σ), i.e. a Laplace
    kernel of scale 2σ·√area; here the normalising length is the bin span 2R (``span``), the
    range the bins cover as RTMO's bins cover the (padded) instance box.
    """
    return 2.0 * span * sigma


def laplace_variance(scale: torch.Tensor) -> torch.Tensor:
    """Variance 2b² of a Laplace kernel of scale b: the M variants' covariance-decoder variance (C).

    With it, B + C = Σ π_n (b_n − v̂)² + 2b² is the exact variance of the mixture Σ π_n Laplace(b_n, b)
    that RTMO's loss fits (law of total variance).
    """
    return 2.0 * scale.square()


def covariance_variance(log_sigma: torch.Tensor, min_log_sigma: float | None = None) -> torch.Tensor:
    """Variance of the covariance decoder, σ² = exp(2 log σ), with log σ floored at ``min_log_sigma``
    when given (the AI-IO head: :data:`velobins_net.config.AIIO_FILTER_MIN_LOG_STD`, as AI-IO hands
    it to its filter)."""
    if min_log_sigma is not None:
        log_sigma = log_sigma.clamp_min(min_log_sigma)
    return torch.exp(2.0 * log_sigma)


def check_uncertainty(source: str, has_bins: bool, has_cov: bool) -> None:
    """Raise a UserError unless ``source`` is B, C or B+C and the model has the decoders it needs."""
    if source not in UNCERTAINTY_SOURCES:
        raise UserError(f"uncertainty: must be one of {UNCERTAINTY_SOURCES}, got {source!r}")
    if "B" in source and not has_bins:
        raise UserError(f"uncertainty {source!r}: this model has no bin decoder")
    if "C" in source and not has_cov:
        raise UserError(f"uncertainty {source!r}: this model has no covariance decoder (cov_head)")


def reported_variance(source: str, bin_var: torch.Tensor | None, cov_var: torch.Tensor | None) -> torch.Tensor:
    """The variance a model reports for uncertainty source ``B``, ``C`` or ``B+C`` (§V, Table II superscript).

    ``B``: the bin variance (eq:bin_variance); ``C``: the covariance decoder's variance ``cov_var``
    (:func:`covariance_variance` for the AI-IO head, :func:`laplace_variance` for the M head);
    ``B+C``: their sum.

    Raises:
        ValueError: an unknown source, or one the model has no decoder for.
    """
    check_uncertainty(source, bin_var is not None, cov_var is not None)
    if source == "B":
        assert bin_var is not None
        return bin_var
    assert cov_var is not None
    return cov_var if source == "C" else bin_var + cov_var


class BinOutput(NamedTuple):
    """The bin decoder's outputs for a batch: logits (B, 3, N), v̂ (B, 3) (eq:decode), σ̂² (B, 3) (eq:bin_variance)."""

    logits: torch.Tensor
    v: torch.Tensor
    var: torch.Tensor


class CovarianceOutput(NamedTuple):
    """A covariance decoder's outputs for a batch, each (B, 3).

    Attributes:
        var: its variance (the reported variance of source C).
        log_sigma: log of its standard deviation, ½ log ``var`` (for the M head: log √2·b).
        rtmo_sigma: RTMO's bounded σ (the M head's loss input), or None for the AI-IO head.
    """

    var: torch.Tensor
    log_sigma: torch.Tensor
    rtmo_sigma: torch.Tensor | None


class BinDecoder(nn.Module):
    """Bin decoder (eq:softmax): logits θ_i(h)·φ(enc(b_n)) per axis i and bin n, decoded to v̂ and σ̂²."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.encoding = cfg.bin_encoding
        self.num_bins = cfg.num_bins
        grid = BinGrid(cfg.num_bins, cfg.velocity_range)
        self.register_buffer("centres", grid.centres())
        if self.encoding == "direct":
            self.theta = nn.Linear(cfg.d_model, 3 * cfg.num_bins)
        else:
            self.enc_dim = cfg.enc_dim
            self.register_buffer("pe", fixed_positional_encoding(grid.centres() / cfg.velocity_range, cfg.enc_channels))
            self.gamma = nn.Parameter(torch.ones(cfg.enc_channels)) if self.encoding == "spe" else None
            self.phi = nn.Linear(cfg.enc_channels, cfg.enc_dim)
            self.theta = nn.Linear(cfg.d_model, 3 * cfg.enc_dim)
        self._cache: accel.DerivedCache[torch.Tensor] = accel.DerivedCache()

    def forward(self, h: torch.Tensor) -> BinOutput:
        """h (B, D_h) → :class:`BinOutput`: π = softmax(logits) per axis, decoded (eq:decode, eq:bin_variance)."""
        if self.encoding == "direct":  # one linear layer gives the 3N logits
            logits = self.theta(h).view(-1, 3, self.num_bins)
            return BinOutput(logits, *decode(logits, self.centres))
        queries = self.theta(h).view(-1, 3, self.enc_dim)  # θ_i(h): one query per axis
        if accel.enabled():  # fast path: the bin features do not depend on the input; cached without gradients
            features_t = self._cache.derive((self,), "features", lambda: self.bin_features().t())
        else:
            features_t = self.bin_features().t()
        return BinOutput(*decode_queries(queries, features_t, self.centres))

    def bin_features(self) -> torch.Tensor:
        """(N, D) φ(enc(b)) from the current parameters: enc = PE (``pe``) or SPE (``spe``)."""
        enc = self.pe if self.gamma is None else learnable_sine_encoding(self.pe, self.gamma)
        return self.phi(enc)


class CovarianceHead(nn.Module):
    """The AI-IO covariance decoder: h → log σ per axis (B, 3); variance exp(2 max(log σ, −4)), AI-IO's floor."""

    def __init__(self, d_model: int):
        super().__init__()
        self.linear = nn.Linear(d_model, 3)

    def forward(self, h: torch.Tensor) -> CovarianceOutput:
        """h (B, D_h) → :class:`CovarianceOutput` (no RTMO σ)."""
        log_sigma = self.linear(h)
        return CovarianceOutput(covariance_variance(log_sigma, AIIO_FILTER_MIN_LOG_STD), log_sigma, None)


LEGACY_M_CHECKPOINT = (
    "an M/M+H model from before RTMO's loss (Gaussian kernel, unbounded log-sigma head, no 'cov.span'); "
    "its variance head means something else now: retrain it (velobins train --variant M...)"
)
"""One-line reason an old M checkpoint is refused (docs/design.md, "M: RTMO's MLE loss")."""


class LegacyMCheckpointError(RuntimeError, UserError):
    """An old M state dict: a RuntimeError as ``load_state_dict`` raises (checkpoint loading wraps it
    into a CheckpointError) and a UserError, the suite's user error (one line, exit 2, e.g. on resume)."""


class RTMOSigmaHead(nn.Module):
    """The M variants' σ head: h → z (B, 3), σ = :func:`rtmo_sigma` (z), Laplace scale b = 2σ·2R, variance 2b².

    ``span`` (2R, the bin span) is a buffer so the checkpoint carries it: its absence marks a
    checkpoint of the superseded log-σ M head, which is refused with one line
    (:data:`LEGACY_M_CHECKPOINT`) instead of being read with another meaning.
    """

    def __init__(self, d_model: int, velocity_range: float):
        super().__init__()
        self.linear = nn.Linear(d_model, 3)
        self.register_buffer("span", torch.tensor(2.0 * velocity_range))

    def forward(self, h: torch.Tensor) -> CovarianceOutput:
        """h (B, D_h) → :class:`CovarianceOutput`: variance 2b², log σ = ½ log 2b², RTMO's σ (docs/design.md)."""
        sigma = rtmo_sigma(self.linear(h))
        var = laplace_variance(laplace_scale(sigma, self.span))
        return CovarianceOutput(var, 0.5 * torch.log(var), sigma)

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing, unexpected, errors):  # type: ignore[no-untyped-def]
        """Refuse, in one line, a state dict of the superseded M head (no ``span``)."""
        if prefix + "linear.weight" in state_dict and prefix + "span" not in state_dict:
            raise LegacyMCheckpointError(LEGACY_M_CHECKPOINT)
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing, unexpected, errors)


class RegressionHead(nn.Module):
    """The AI-IO regression baseline's velocity head: h → v̂ (B, 3)."""

    def __init__(self, d_model: int):
        super().__init__()
        self.linear = nn.Linear(d_model, 3)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        """h (B, D_h) → v̂ (B, 3)."""
        return self.linear(h)
