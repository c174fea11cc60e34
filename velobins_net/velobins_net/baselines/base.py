"""What every baseline network shares: the ModelConfig contract, normalisation buffers, the output record."""

from __future__ import annotations

import torch
from torch import nn

from ..config import ModelConfig
from ..decoders import check_uncertainty, covariance_variance
from ..model import NetOutput


class BaselineNet(nn.Module):
    """Base of the Table I baselines: checks the config and input, holds the normalisation buffers.

    ``norm_mean`` / ``norm_std`` (6+K, the statistics of :func:`velobins_net.data.fit_normalization`,
    rpm rotor channels as ω²) are buffers so they travel in the state dict; each subclass says in its
    docstring whether its method's own code uses them.
    """

    method = ""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        if cfg.method != self.method:
            raise ValueError(f"{type(self).__name__}: ModelConfig.method is {cfg.method!r}, expected {self.method!r}")
        self.cfg = cfg
        self.num_rotors = cfg.num_rotors
        self.window_len = cfg.window_len
        self.register_buffer("norm_mean", torch.zeros(cfg.sensor_channels))
        self.register_buffer("norm_std", torch.ones(cfg.sensor_channels))

    def set_normalization(self, mean: torch.Tensor, std: torch.Tensor) -> None:
        """Install training-set statistics of the 6+K sensor channels (rpm rotors as ω²)."""
        mean = torch.as_tensor(mean, dtype=self.norm_mean.dtype, device=self.norm_mean.device)
        std = torch.as_tensor(std, dtype=self.norm_std.dtype, device=self.norm_std.device)
        if mean.shape != self.norm_mean.shape or std.shape != self.norm_std.shape:
            raise ValueError(f"normalisation: expected shape {tuple(self.norm_mean.shape)}, got {tuple(mean.shape)}")
        if not bool((std > 0).all()):
            raise ValueError("normalisation: every channel std must be > 0")
        with torch.no_grad():
            self.norm_mean.copy_(mean)
            self.norm_std.copy_(std)

    def invalidate_cache(self) -> None:
        """No derived-weight cache in the baselines: nothing to forget."""

    def check_call(self, x: torch.Tensor, uncertainty: str | None) -> None:
        """Raise ValueError on a window of the wrong shape or an uncertainty source other than C."""
        check_uncertainty(uncertainty or "C", has_bins=False, has_cov=True)
        expected = self.cfg.input_channels
        if x.dim() != 3 or x.shape[1] != self.window_len or x.shape[2] != expected:
            raise ValueError(f"{self.method} input: expected (B, {self.window_len}, {expected}), got {tuple(x.shape)}")


def diagonal_output(mean: torch.Tensor, log_sigma: torch.Tensor) -> NetOutput:
    """NetOutput of a mean (B, 3) with a diagonal Gaussian of std exp(log σ) (B, 3)."""
    return NetOutput(mean, covariance_variance(log_sigma), None, None, log_sigma)
