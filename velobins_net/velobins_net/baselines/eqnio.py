"""EqNIO (Jayanth et al. 2025): TLIO made yaw-equivariant with a learned SO(2) canonical frame.

Facts from the public code (fork harsh-sutariya/EqNIO, ``TLIO-master/src/network/``; the upstream
repository is not in the index):

* ``model_factory.py`` arch ``eq_vn_cnn_wo_t_tlio_frame_fullCov_frameop_2vec`` (SO(2) frame, TLIO
  backbone): ``Eq_Motion_Model_fullCov(dim_in=2, dim_out=2, scalar_dim_in=5, hidden_dim=128,
  scalar_hidden_dim=128, depth=2, kernel=(32, 1), padding='same', replicate)``, then
  ``ResNet1D(BasicBlock1D, 6, 3, [2, 2, 2, 2])`` with 3 log-σ outputs.
* ``model_eq_VNCnn_frame_TLIO_v2_2vectors.py``: the xy parts of the gravity-aligned acc and gyro are
  2-vectors, invariants are scalars; equivariant linear maps act on [v, J v] (``orthogonal_input``,
  J the 90° rotation) without bias; the non-linearity gates each vector by a ReLU'd linear map of
  (|v|, scalars) times its direction; vector layer norm on the norms; mean pooling over time; an
  MLP; frame from the output vectors; the backbone sees the input rotated by Fᵀ (xy) beside the
  z components, and the displacement is rotated back: d = F d_c (z unchanged).
* ``losses.py`` ``get_loss``: MSE for the first 10 epochs (σ detached), then for ``_frameop`` archs
  the diagonal NLL of the canonical-frame σ (log σ ≥ log 1e-3, TLIO's clamp), which equals the
  full-covariance NLL of Σ = F diag(σ_c²) Fᵀ in the original frame (rotations keep e Σ⁻¹ e and det).

Ours (own code, same structure): vectors (B, C, T, 2), scalars (B, S, T); the 5 input scalars are
acc_z, gyro_z, |acc_xy|, |gyro_xy|, acc_xy·gyro_xy (EqNIO has 5, names not recorded in the code
read); the gate is sigmoid(linear(|v|, s)) · v; one output vector u gives F = [û, J û] ∈ SO(2)
(EqNIO's ``model_resnet_frame.py`` builds it so; the "2vec" model Gram-Schmidts two vectors).
Deviations: window ``cfg.window_len`` (100 at 100 Hz, EqNIO/TLIO 200 at 200 Hz); widths are
constructor constants. ``set_normalization`` statistics are stored but not used (EqNIO feeds raw IMU).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..config import MIN_LOG_STD, ModelConfig
from ..decoders import covariance_variance
from ..model import NetOutput
from .base import BaselineNet
from .frames import gravity_aligned, split_window
from .tlio import TLIO_BASE_WIDTH, ResNet1D

EQNIO_HIDDEN = 128
"""Vector and scalar channels of the frame network (EqNIO ``hidden_dim`` = ``scalar_hidden_dim`` = 128)."""

EQNIO_DEPTH = 2
"""Equivariant convolution layers of the frame network (EqNIO ``depth=2``)."""

EQNIO_KERNEL = 32
"""Temporal kernel of those convolutions (EqNIO ``kernel=(32, 1)``, 'same' replicate padding)."""

_EPS = 1e-6


def rot90(v: torch.Tensor) -> torch.Tensor:
    """J v: 2-vectors (..., 2) turned by +90° about z."""
    return torch.stack([-v[..., 1], v[..., 0]], -1)


def vector_norm(v: torch.Tensor) -> torch.Tensor:
    """|v| (...) of 2-vectors (..., 2), smooth at 0."""
    return torch.sqrt(v.square().sum(-1) + _EPS * _EPS)


class EqConv(nn.Module):
    """SO(2)-equivariant temporal convolution: vectors by a conv on [v, J v] (no bias), scalars by a conv."""

    def __init__(self, v_in: int, v_out: int, s_in: int, s_out: int, kernel: int):
        super().__init__()
        pad = {"padding": "same", "padding_mode": "replicate"} if kernel > 1 else {}
        self.vec = nn.Conv1d(2 * v_in, v_out, kernel, bias=False, **pad)
        self.sca = nn.Conv1d(s_in, s_out, kernel, **pad) if s_out > 0 else None

    def forward(self, v: torch.Tensor, s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """v (B, C, T, 2), s (B, S, T) → (B, C', T, 2), (B, S', T)."""
        b, _, t, _ = v.shape
        vv = torch.cat([v, rot90(v)], 1).permute(0, 3, 1, 2).reshape(2 * b, -1, t)  # x, y share the weights
        out = self.vec(vv).reshape(b, 2, -1, t).permute(0, 2, 3, 1)
        return out, s[:, :0] if self.sca is None else self.sca(s)


class EqGate(nn.Module):
    """Gated non-linearity: invariants (|v|, s) → linear → sigmoid gates for v, ReLU for the new scalars."""

    def __init__(self, v_dim: int, s_in: int, s_out: int):
        super().__init__()
        self.v_dim = v_dim
        self.linear = nn.Linear(v_dim + s_in, v_dim + s_out)

    def forward(self, v: torch.Tensor, s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        z = self.linear(torch.cat([vector_norm(v), s], 1).transpose(1, 2)).transpose(1, 2)
        gate = torch.sigmoid(z[:, : self.v_dim])
        return v * gate.unsqueeze(-1), torch.relu(z[:, self.v_dim :])


def vector_layer_norm(v: torch.Tensor) -> torch.Tensor:
    """v (B, C, T, 2) / RMS over channels of |v| (per time step): scale-normalised, still equivariant."""
    return v / torch.sqrt(v.square().sum(-1).mean(1, keepdim=True) + _EPS).unsqueeze(-1)


def scalar_layer_norm(s: torch.Tensor) -> torch.Tensor:
    """LayerNorm of scalars (B, S, T) over the channels (no affine; ε = 1e-5 as ``F.layer_norm``),
    written out so an ONNX export sees no shape-dependent argument."""
    mean = s.mean(1, keepdim=True)
    return (s - mean) * torch.rsqrt(s.var(1, unbiased=False, keepdim=True) + 1e-5)


def equivariant_inputs(ga_acc: torch.Tensor, ga_gyro: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Gravity-aligned acc, gyro (B, T, 3) → vectors (B, 2, T, 2) [acc_xy, gyro_xy], invariant scalars (B, 5, T)."""
    a, g = ga_acc[..., :2], ga_gyro[..., :2]
    vectors = torch.stack([a, g], 1)
    scalars = torch.stack([ga_acc[..., 2], ga_gyro[..., 2], vector_norm(a), vector_norm(g), (a * g).sum(-1)], 1)
    return vectors, scalars


class FrameNet(nn.Module):
    """Equivariant network: gravity-aligned IMU → one 2-vector u (B, 2) that turns with the input's yaw."""

    def __init__(self, hidden: int = EQNIO_HIDDEN, depth: int = EQNIO_DEPTH, kernel: int = EQNIO_KERNEL):
        super().__init__()
        self.lift = EqConv(2, hidden, 5, hidden, 1)
        self.lift_gate = EqGate(hidden, hidden, hidden)
        self.convs = nn.ModuleList(EqConv(hidden, hidden, hidden, hidden, kernel) for _ in range(depth))
        self.gates = nn.ModuleList(EqGate(hidden, hidden, hidden) for _ in range(depth))
        self.mlp = EqConv(hidden, hidden, hidden, hidden, 1)
        self.mlp_gate = EqGate(hidden, hidden, 0)
        self.out = EqConv(hidden, 1, 0, 0, 1)

    def forward(self, ga_acc: torch.Tensor, ga_gyro: torch.Tensor) -> torch.Tensor:
        v, s = equivariant_inputs(ga_acc, ga_gyro)
        v, s = self.lift_gate(*self.lift(v, s))
        for conv, gate in zip(self.convs, self.gates, strict=True):
            v, s = gate(*conv(v, s))
            v, s = vector_layer_norm(v), scalar_layer_norm(s)
        v, s = v.mean(2, keepdim=True), s.mean(2, keepdim=True)  # pool over time
        v, s = self.mlp_gate(*self.mlp(v, s))
        v = vector_layer_norm(v)
        u, _ = self.out(v, s)
        return u[:, 0, 0]  # (B, 2)


def frame_from_vector(u: torch.Tensor) -> torch.Tensor:
    """F = [û, J û] (B, 2, 2) ∈ SO(2) from a 2-vector u (B, 2)."""
    uh = u / vector_norm(u).clamp_min(1e-8).unsqueeze(-1)
    return torch.stack([uh, rot90(uh)], -1)


def embed_z(frame: torch.Tensor) -> torch.Tensor:
    """F (B, 2, 2) → (B, 3, 3) rotation about z."""
    out = F.pad(frame, (0, 1, 0, 1))
    out[:, 2, 2] = 1.0
    return out


class EqNIONet(BaselineNet):
    """EqNIO: canonical frame F from an equivariant net, TLIO ResNet on Fᵀ-rotated input, d = F d_c, Σ = F Σ_c Fᵀ.

    ``log_sigma`` is the backbone's (clamped) log σ in the canonical frame; ``cov`` the full 3×3
    covariance in the window start's yaw frame and ``var`` its diagonal.
    """

    method = "eqnio"

    def __init__(
        self,
        cfg: ModelConfig,
        base_width: int = TLIO_BASE_WIDTH,
        hidden: int = EQNIO_HIDDEN,
        depth: int = EQNIO_DEPTH,
        kernel: int = EQNIO_KERNEL,
    ):
        super().__init__(cfg)
        self.frame_net = FrameNet(hidden, depth, kernel)
        self.backbone = ResNet1D(6, cfg.window_len, base_width=base_width)

    def forward_aligned(
        self, ga_acc: torch.Tensor, ga_gyro: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Gravity-aligned acc, gyro (B, T, 3) → d (B, 3), cov (B, 3, 3), canonical log σ (B, 3), F (B, 3, 3)."""
        f3 = embed_z(frame_from_vector(self.frame_net(ga_acc, ga_gyro)))
        c_acc = torch.einsum("bji,btj->bti", f3, ga_acc)  # Fᵀ u: yaw-invariant
        c_gyro = torch.einsum("bji,btj->bti", f3, ga_gyro)
        d_c, log_sigma = self.backbone(torch.cat([c_gyro, c_acc], -1).transpose(1, 2))
        log_sigma = log_sigma.clamp_min(MIN_LOG_STD)
        d = torch.einsum("bij,bj->bi", f3, d_c)
        cov = (
            f3
            @ (
                covariance_variance(log_sigma).unsqueeze(-1)
                * torch.eye(3, dtype=log_sigma.dtype, device=log_sigma.device)
            )
            @ f3.transpose(1, 2)
        )
        return d, cov, log_sigma, f3

    def forward(self, x: torch.Tensor, uncertainty: str | None = None) -> NetOutput:
        """x (B, T, 6+K+9) → displacement [m] in the window start's yaw frame with its full covariance."""
        self.check_call(x, uncertainty)
        acc, gyro, _, rot = split_window(x, self.num_rotors)
        d, cov, log_sigma, _ = self.forward_aligned(gravity_aligned(rot, acc), gravity_aligned(rot, gyro))
        return NetOutput(d, torch.diagonal(cov, dim1=-2, dim2=-1), None, None, log_sigma, None, cov)
