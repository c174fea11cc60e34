"""AirIO (Qiu et al. 2025): body-frame IMU + attitude encoding → body velocity and its covariance.

Facts from the public code (fork bavovna-ai/Air-IO of haleqiu's AirIO; the upstream repository is
not in the index), ``model/code.py`` ``CodeNetMotionwithRot`` (network ``codewithrot``):

* Input: the IMU in the BODY frame (``coordinate: body_coord``; gravity removed only with the
  optional ``remove_g``, off in the Blackbird configs) and the attitude encoded as its so(3)
  rotation vector, ``train_motion.py``: ``rot = label['gt_rot'][:, :-1, :].Log()`` (3 channels).
* Two CNN encoders of the same shape, one for the IMU (6 ch) and one for the attitude (3 ch):
  Conv1d 32 (k7 s3 p3) + BN + GELU, Conv1d 64 (k7 s3 p3) + BN + GELU, Dropout 0.5 (``CNNEncoder``).
  Features concatenated (128) → Linear 128→64 → BN → GELU → bi-GRU(64, hidden 64) → bi-GRU(128,
  hidden 128) → 256 per output step. Decoders: velocity MLP 256→128 (GELU)→3; covariance MLP
  256→128 (GELU)→3 with variance exp(z − 5). No input normalisation.
* Loss (``model/losses.py``, ``configs/*/motion_body_rot.conf``): weight 100 × [Huber(δ = 0.005)
  of the velocity error + 1e-4 × mean(e²/σ² + log σ²)] with ``covaug`` (the error not detached);
  one phase, from the first epoch; Adam lr 1e-3, weight decay 1e-3, batch 128.
* AirIO predicts every 9th step (stride 3·3); here the output at the LAST step is the body velocity
  Rᵀv at the window end (the contract's target).

Deviations: window ``cfg.window_len`` (1 s at 100 Hz; AirIO trains on 1000-sample sequences);
rotor channels unused; ``set_normalization`` statistics are stored but not used.
"""

from __future__ import annotations

import torch
from torch import nn

from ..config import ModelConfig
from ..decoders import covariance_variance
from ..model import NetOutput
from .base import BaselineNet
from .frames import so3_log, split_window

AIRIO_CHANNELS = (32, 64)
"""Channels of each CNN encoder (``feature_channels``)."""

AIRIO_COV_SHIFT = 5.0
"""Variance = exp(z − 5) of the covariance decoder (``cov_decoder``)."""


class CNNEncoder(nn.Module):
    """Conv (k7, s3, p3) + BN + GELU per level, then dropout 0.5: (B, C, T) → (B, C_last, T')."""

    def __init__(self, c_in: int, channels: tuple[int, ...] = AIRIO_CHANNELS):
        super().__init__()
        layers: list[nn.Module] = []
        for c_out in channels:
            layers += [nn.Conv1d(c_in, c_out, 7, stride=3, padding=3), nn.BatchNorm1d(c_out), nn.GELU()]
            c_in = c_out
        layers.append(nn.Dropout(0.5))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class AirIONet(BaselineNet):
    """AirIO with attitude encoding: body velocity at the window end and its diagonal log σ."""

    method = "airio"

    def __init__(self, cfg: ModelConfig, channels: tuple[int, ...] = AIRIO_CHANNELS):
        super().__init__(cfg)
        self.imu_encoder = CNNEncoder(6, channels)
        self.ori_encoder = CNNEncoder(3, channels)
        self.fuse = nn.Linear(2 * channels[-1], 64)
        self.fuse_bn = nn.BatchNorm1d(64)
        self.gru1 = nn.GRU(64, 64, batch_first=True, bidirectional=True)
        self.gru2 = nn.GRU(128, 128, batch_first=True, bidirectional=True)
        self.vel_decoder = nn.Sequential(nn.Linear(256, 128), nn.GELU(), nn.Linear(128, 3))
        self.cov_decoder = nn.Sequential(nn.Linear(256, 128), nn.GELU(), nn.Linear(128, 3))

    def features(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Raw window → body IMU (B, 6, T) [acc, gyro] and attitude rotation vectors (B, 3, T)."""
        acc, gyro, _, rot = split_window(x, self.num_rotors)
        return torch.cat([acc, gyro], -1).transpose(1, 2), so3_log(rot).transpose(1, 2)

    def forward(self, x: torch.Tensor, uncertainty: str | None = None) -> NetOutput:
        """x (B, T, 6+K+9) → body velocity [m/s] at the last sample, var = exp(z − 5) (source C only)."""
        self.check_call(x, uncertainty)
        imu, ori = self.features(x)
        z = torch.cat([self.imu_encoder(imu), self.ori_encoder(ori)], 1)  # (B, 128, T')
        z = self.fuse(z.transpose(1, 2))
        z = torch.nn.functional.gelu(self.fuse_bn(z.transpose(1, 2))).transpose(1, 2)
        z, _ = self.gru1(z)
        z, _ = self.gru2(z)
        h = z[:, -1]
        log_sigma = 0.5 * (self.cov_decoder(h) - AIRIO_COV_SHIFT)
        return NetOutput(self.vel_decoder(h), covariance_variance(log_sigma), None, None, log_sigma)
