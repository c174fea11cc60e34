"""The Table I baselines (TLIO, EqNIO, IMO, AirIO) as PyTorch modules under the suite's model contract.

Each takes the raw window x (B, T, 6+K+9) = [acc, gyro, rotor, R row-major] and returns a
:class:`velobins_net.model.NetOutput`: ``v`` the displacement R_z(ψ_s)ᵀ(p_e − p_s) [m] (TLIO, EqNIO,
IMO; :mod:`.frames`) or the body velocity at the last sample [m/s] (AirIO), ``var``, ``log_sigma``
and, for EqNIO, the full ``cov``. :func:`build` makes the model of a config, :func:`.losses.baseline_loss`
its training loss. Facts and deviations per method: the module docs and docs/design.md, "Baselines (Table I)".
"""

from __future__ import annotations

from ..config import BASELINE_METHODS, ModelConfig
from .airio import AIRIO_CHANNELS, AirIONet
from .base import BaselineNet
from .eqnio import EQNIO_HIDDEN, EqNIONet
from .imo import IMO_CHANNELS, IMONet
from .losses import baseline_loss
from .tlio import TLIO_BASE_WIDTH, TLIONet


def build(cfg: ModelConfig) -> BaselineNet:
    """The baseline network of ``cfg.method``: its published widths times ``cfg.baseline_width`` (EqNIO's
    frame network: ``cfg.frame_width``); depths, kernels and every other choice unchanged."""
    if cfg.method not in BASELINE_METHODS:
        raise ValueError(f"baselines.build: method must be one of {BASELINE_METHODS}, got {cfg.method!r}")
    w = cfg.baseline_width

    def scaled(width: int, factor: float = w) -> int:
        return max(4, round(width * factor))

    if cfg.method == "tlio":
        return TLIONet(cfg, base_width=scaled(TLIO_BASE_WIDTH))
    if cfg.method == "eqnio":
        return EqNIONet(cfg, base_width=scaled(TLIO_BASE_WIDTH), hidden=scaled(EQNIO_HIDDEN, cfg.frame_width))
    if cfg.method == "imo":
        return IMONet(cfg, channels=tuple(scaled(c) for c in IMO_CHANNELS))
    return AirIONet(cfg, channels=tuple(scaled(c) for c in AIRIO_CHANNELS))


__all__ = ["BASELINE_METHODS", "AirIONet", "BaselineNet", "EqNIONet", "IMONet", "TLIONet", "baseline_loss", "build"]
