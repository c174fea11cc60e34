"""IMO (Cioffi et al. 2023, "Learned Inertial Odometry for Autonomous Drone Racing"): TCN over gyro + thrust.

Facts from the public code (uzh-rpg/learned_inertial_model_odometry):

* ``src/learning/network/model_factory.py``: ``Tcn(6, 3, [64, 64, 64, 64, 128, 128, 128],
  kernel_size=2, dropout=0.2, activation="GELU")``; ``model_tcn.py`` (after TLIO's ``model_tcn.py``):
  causal TemporalBlocks (two weight-normed dilated convs, dilation 2^i, chomp, activation, dropout;
  1x1 conv shortcut when widths differ; ReLU after the sum), conv weights N(0, 0.01), and a Linear
  on the LAST time step → 3 (the displacement).
* ``src/learning/data_management/datasets.py``: features = [R(t) ω(t), R(t) T(t)], the gyro and the
  mass-normalised collective thrust vector (``i_thrust``, IMU frame) rotated into the WORLD frame with
  the ground-truth attitude; target ``p(t_e) − p(t_s)`` in the world frame; no input normalisation;
  training perturbs the attitude (random axis, ≤ 5°).
* ``results/Blackbird/.../model_net_parameters_net_blackbird.json``: 0.5 s windows at 100 Hz, Huber
  loss δ = 0.5 m, lr 1e-4, batch 128.
* No learned uncertainty: ``src/filter/python/src/meas_source_network.py`` uses ``meas_cov =
  np.eye(3)`` ("ToDo: learn covariance").

Deviations: (1) inputs and target are in the window start's yaw frame R_z(ψ_s)ᵀ (the contract's
displacement frame; IMO's world frame differs from it by that one yaw per window, which the network
could not know). (2) A log-σ head (Linear on the same last-step feature, clamped at log 1e-3 as
TLIO) so the EKF gets a covariance; trained by the Gaussian NLL after the Huber warm-up.
(3) Window ``cfg.window_len`` (1 s) instead of 0.5 s. (4) Thrust: no thrust coefficient or mass in
NanoBench, so the collective thrust is the proxy f = c · Σ_k r_k, r_k = ω_k² (kind speed, thrust ∝ ω²) or
the PWM command u_k (kind command; Crazyflie commands are thrust set-points), with c = g / Σ_k mean(r_k) from
the training statistics (``set_normalization``): the training-average thrust is taken as g (hover
on average). Before statistics are installed c = 1. The thrust vector is f · R(t) e_z.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.utils import parametrizations

from velobins_common.constants import ROTOR_SPEED, STANDARD_GRAVITY

from ..config import MIN_LOG_STD, ModelConfig
from ..model import NetOutput
from .base import BaselineNet, diagonal_output
from .frames import gravity_aligned, split_window

IMO_CHANNELS = (64, 64, 64, 64, 128, 128, 128)
"""TCN level widths (IMO ``model_factory.py``)."""

IMO_KERNEL = 2
"""TCN kernel size (dilations 1, 2, 4, ..., receptive field 1 + 2(k−1)(2^L − 1) = 255 samples)."""

IMO_DROPOUT = 0.2
"""Dropout inside each TemporalBlock."""


class TemporalBlock(nn.Module):
    """Two causal dilated weight-normed convs with GELU and dropout, plus the residual; ReLU after the sum."""

    def __init__(self, c_in: int, c_out: int, kernel: int, dilation: int, dropout: float):
        super().__init__()
        self.chomp = (kernel - 1) * dilation
        conv = {"padding": self.chomp, "dilation": dilation}
        self.conv1 = parametrizations.weight_norm(nn.Conv1d(c_in, c_out, kernel, **conv))
        self.conv2 = parametrizations.weight_norm(nn.Conv1d(c_out, c_out, kernel, **conv))
        self.drop = nn.Dropout(dropout)
        self.act = nn.GELU()
        self.shortcut = nn.Conv1d(c_in, c_out, 1) if c_in != c_out else None
        with torch.no_grad():
            for conv in (self.conv1, self.conv2):
                conv.parametrizations.weight.original1.normal_(0.0, 0.01)
            if self.shortcut is not None:
                self.shortcut.weight.normal_(0.0, 0.01)

    def causal(self, conv: nn.Module, x: torch.Tensor) -> torch.Tensor:
        return conv(x)[..., : -self.chomp] if self.chomp else conv(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.drop(self.act(self.causal(self.conv1, x)))
        out = self.drop(self.act(self.causal(self.conv2, out)))
        res = x if self.shortcut is None else self.shortcut(x)
        return torch.relu(out + res)


class TCN(nn.Module):
    """IMO's TCN: (B, C_in, T) → last-step feature (B, C_last)."""

    def __init__(
        self,
        c_in: int,
        channels: tuple[int, ...] = IMO_CHANNELS,
        kernel: int = IMO_KERNEL,
        dropout: float = IMO_DROPOUT,
    ):
        super().__init__()
        blocks = []
        for i, c_out in enumerate(channels):
            blocks.append(TemporalBlock(c_in, c_out, kernel, 2**i, dropout))
            c_in = c_out
        self.blocks = nn.Sequential(*blocks)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.blocks(x)[..., -1]


def collective_thrust(rotor: torch.Tensor, rotor_kind: str, scale: torch.Tensor) -> torch.Tensor:
    """Thrust proxy f (B, T) [m/s²]: scale · Σ_k ω_k² (rotor speeds) or scale · Σ_k u_k (commands)."""
    r = rotor.square() if rotor_kind == ROTOR_SPEED else rotor
    return scale * r.sum(-1)


class IMONet(BaselineNet):
    """IMO: gyro and thrust vector (yaw frame of the window start) → displacement and log σ."""

    method = "imo"

    def __init__(self, cfg: ModelConfig, channels: tuple[int, ...] = IMO_CHANNELS):
        super().__init__(cfg)
        self.rotor_kind = cfg.rotor_kind
        self.register_buffer("thrust_scale", torch.tensor(1.0))
        self.tcn = TCN(6, channels)
        self.mean_head = nn.Linear(channels[-1], 3)
        self.log_sigma_head = nn.Linear(channels[-1], 3)
        with torch.no_grad():
            self.mean_head.weight.normal_(0.0, 0.01)
            self.log_sigma_head.weight.normal_(0.0, 0.01)

    def set_normalization(self, mean: torch.Tensor, std: torch.Tensor) -> None:
        """Store the statistics and set the thrust scale c = g / Σ_k mean(rotor feature_k) (module doc)."""
        super().set_normalization(mean, std)
        total = float(self.norm_mean[6:].sum())
        with torch.no_grad():
            self.thrust_scale.fill_(STANDARD_GRAVITY / total if total > 0 else 1.0)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """Raw window → the TCN's input (B, 6, T): [gyro, thrust vector], both in the yaw frame of the window start."""
        _, gyro, rotor, rot = split_window(x, self.num_rotors)
        f = collective_thrust(rotor, self.rotor_kind, self.thrust_scale)
        thrust_body = torch.stack([torch.zeros_like(f), torch.zeros_like(f), f], -1)
        return torch.cat([gravity_aligned(rot, gyro), gravity_aligned(rot, thrust_body)], -1).transpose(1, 2)

    def forward(self, x: torch.Tensor, uncertainty: str | None = None) -> NetOutput:
        """x (B, T, 6+K+9) → displacement [m] in the window start's yaw frame, var = σ² (source C only)."""
        self.check_call(x, uncertainty)
        h = self.tcn(self.features(x))
        return diagonal_output(self.mean_head(h), self.log_sigma_head(h).clamp_min(MIN_LOG_STD))
