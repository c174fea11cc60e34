"""The Table I baselines (TLIO, EqNIO, IMO, AirIO) as PyTorch modules under the suite's model contract.

Each takes the raw window x (B, T, 6+K+9) = [acc, gyro, rotor, R row-major] and returns a
:class:`velobins_net.model.NetOutput`: ``v`` the displacement R_z(ψ_s)ᵀ(p_e − p_s) [m] (TLIO, EqNIO,
IMO; :mod:`.frames`) or the body velocity at the last sample [m/s] (AirIO), ``var``, ``log_sigma``
and, for EqNIO, the full ``cov``. :func:`build` makes the model of a config, :func:`.losses.baseline_loss`
its training loss. Facts and deviations per method: the module docs and docs/design.md, "Baselines (Table I)".
"""

from __future__ import annotations

from ..config import ModelConfig
from .airio import AirIONet
from .base import BaselineNet
from .eqnio import EqNIONet
from .imo import IMONet
from .losses import BASELINE_METHODS, baseline_loss
from .tlio import TLIONet

_CLASSES: dict[str, type[BaselineNet]] = {"tlio": TLIONet, "eqnio": EqNIONet, "imo": IMONet, "airio": AirIONet}


def build(cfg: ModelConfig) -> BaselineNet:
    """The baseline network of ``cfg.method`` with its published widths."""
    if cfg.method not in _CLASSES:
        raise ValueError(f"baselines.build: method must be one of {tuple(_CLASSES)}, got {cfg.method!r}")
    return _CLASSES[cfg.method](cfg)


__all__ = ["BASELINE_METHODS", "AirIONet", "BaselineNet", "EqNIONet", "IMONet", "TLIONet", "baseline_loss", "build"]
