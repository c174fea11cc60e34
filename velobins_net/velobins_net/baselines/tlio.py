"""TLIO (Liu et al. 2020): ResNet-1D over the gravity-aligned IMU → displacement and log σ.

Facts from the public code (CathIAS/TLIO):

* ``src/network/model_resnet.py``: ``ResNet1D(BasicBlock1D, in_dim=6, out_dim=3, [2, 2, 2, 2],
  inter_dim)``: input block conv k7 s2 (64 ch, no bias) + BN + ReLU + max-pool k3 s2; four residual
  groups of BasicBlock1D (two conv k3 + BN, identity or conv1x1+BN shortcut) with 64/128/256/512
  channels, strides 1/2/2/2; two ``FcBlock`` heads (conv1x1 512→128 + BN, flatten, FC 128·L→512,
  ReLU, dropout 0.5, FC 512→512, ReLU, dropout 0.5, FC 512→3): mean displacement and log σ.
  Init: Kaiming-normal (fan_out) convs, BN (1, 0), Linear N(0, 0.01) with zero bias.
* ``src/network/train.py`` ``arg_conversion``: ``inter_dim = window_size // 32 + 1``; here the exact
  length after the strides (4 for T = 100, as the formula).
* Input ``feat`` = [gyro, acc] (6 channels) in the local gravity-aligned frame (yaw of the filter's
  clone at the window start, ``scekf.py``: ``Ri_zᵀ (p_j − p_i)``); no input normalisation.
* ``src/network/losses.py`` (newest): log σ clamped from below at log 1e-3 (``MIN_LOG_STD``); first
  10 epochs MSE (older commit) or the NLL with σ detached (newer), then the diagonal Gaussian NLL
  ``e²/(2σ²) + log σ``.

Deviations: TLIO's window is 1 s at 200 Hz (200 samples, inter_dim 7); ours is ``cfg.window_len``
(100 at 100 Hz, inter_dim 4). The width ``base_width`` (TLIO: 64) is a constructor constant; the
FC heads scale with it (prep 2w, hidden 8w: TLIO's 128 / 512 at w = 64). Rotor channels unused.
``set_normalization`` statistics are stored but not used (TLIO feeds raw IMU).
"""

from __future__ import annotations

import torch
from torch import nn

from ..config import MIN_LOG_STD, ModelConfig
from ..model import NetOutput
from .base import BaselineNet, diagonal_output
from .frames import gravity_aligned, split_window

TLIO_BASE_WIDTH = 64
"""Channels of TLIO's first residual group (then ×2, ×4, ×8): ``model_resnet.py`` ``base_plane``."""

TLIO_GROUP_SIZES = (2, 2, 2, 2)
"""BasicBlock1D per residual group (``model_factory.py``, arch ``resnet``)."""


class BasicBlock1D(nn.Module):
    """Two k3 convs with BN and ReLU, plus the (projected when shapes differ) shortcut."""

    def __init__(self, c_in: int, c_out: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv1d(c_in, c_out, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm1d(c_out)
        self.conv2 = nn.Conv1d(c_out, c_out, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm1d(c_out)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or c_in != c_out:
            self.shortcut = nn.Sequential(nn.Conv1d(c_in, c_out, 1, stride=stride, bias=False), nn.BatchNorm1d(c_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return torch.relu(out + self.shortcut(x))


class FcBlock(nn.Module):
    """TLIO's output head: conv1x1 + BN, flatten, FC-ReLU-dropout ×2, FC → out."""

    def __init__(self, c_in: int, out: int, length: int, prep: int, hidden: int, dropout: float = 0.5):
        super().__init__()
        self.prep = nn.Conv1d(c_in, prep, 1, bias=False)
        self.bn = nn.BatchNorm1d(prep)
        self.mlp = nn.Sequential(
            nn.Linear(prep * length, hidden),
            nn.ReLU(),
            nn.Dropout(dropout),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Dropout(dropout),
            nn.Linear(hidden, out),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mlp(self.bn(self.prep(x)).flatten(1))


def resnet_length(window_len: int) -> int:
    """Time length after the input block (k7 s2 p3, max-pool k3 s2 p1) and three stride-2 groups."""
    n = (window_len + 2 * 3 - 7) // 2 + 1
    n = (n + 2 * 1 - 3) // 2 + 1
    for _ in range(3):
        n = (n + 2 * 1 - 3) // 2 + 1
    return n


class ResNet1D(nn.Module):
    """TLIO's ResNet-1D: (B, C_in, T) → mean (B, out), raw log σ (B, out)."""

    def __init__(
        self,
        in_dim: int,
        window_len: int,
        out_dim: int = 3,
        base_width: int = TLIO_BASE_WIDTH,
        group_sizes: tuple[int, ...] = TLIO_GROUP_SIZES,
    ):
        super().__init__()
        w = base_width
        self.input_block = nn.Sequential(
            nn.Conv1d(in_dim, w, 7, stride=2, padding=3, bias=False),
            nn.BatchNorm1d(w),
            nn.ReLU(),
            nn.MaxPool1d(3, stride=2, padding=1),
        )
        groups: list[nn.Module] = []
        c_in = w
        for i, n in enumerate(group_sizes):
            c_out = w * 2**i
            blocks = [BasicBlock1D(c_in, c_out, 1 if i == 0 else 2)]
            blocks += [BasicBlock1D(c_out, c_out, 1) for _ in range(n - 1)]
            groups.append(nn.Sequential(*blocks))
            c_in = c_out
        self.groups = nn.Sequential(*groups)
        length = resnet_length(window_len)
        self.mean_head = FcBlock(c_in, out_dim, length, prep=2 * w, hidden=8 * w)
        self.log_sigma_head = FcBlock(c_in, out_dim, length, prep=2 * w, hidden=8 * w)
        for m in self.modules():
            if isinstance(m, nn.Conv1d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm1d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0.0, 0.01)
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        z = self.groups(self.input_block(x))
        return self.mean_head(z), self.log_sigma_head(z)


def tlio_features(acc: torch.Tensor, gyro: torch.Tensor, rot: torch.Tensor) -> torch.Tensor:
    """TLIO's network input (B, 6, T): [gyro, acc] in the window start's gravity-aligned frame."""
    return torch.cat([gravity_aligned(rot, gyro), gravity_aligned(rot, acc)], -1).transpose(1, 2)


class TLIONet(BaselineNet):
    """TLIO: displacement R_z(ψ_s)ᵀ(p_e − p_s) and its diagonal log σ (clamped at log 1e-3)."""

    method = "tlio"

    def __init__(self, cfg: ModelConfig, base_width: int = TLIO_BASE_WIDTH):
        super().__init__(cfg)
        self.backbone = ResNet1D(6, cfg.window_len, base_width=base_width)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """Raw window → the backbone's input (B, 6, T)."""
        acc, gyro, _, rot = split_window(x, self.num_rotors)
        return tlio_features(acc, gyro, rot)

    def forward(self, x: torch.Tensor, uncertainty: str | None = None) -> NetOutput:
        """x (B, T, 6+K+9) → displacement [m] in the window start's yaw frame, var = σ² (source C only)."""
        self.check_call(x, uncertainty)
        mean, log_sigma = self.backbone(self.features(x))
        return diagonal_output(mean, log_sigma.clamp_min(MIN_LOG_STD))
