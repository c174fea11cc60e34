"""Frames of the baselines' inputs and targets (batched torch).

The raw window of every baseline is ``x`` (B, T, 6+K+9): acc (3, specific force, FLU body frame),
gyro (3, rad/s), rotor (K), then the body->world attitude R (9, row-major, world ENU, z up) of
every sample (:data:`velobins_net.config.ATTITUDE_CHANNELS`). Sample 0 is the window start t_s,
sample T−1 its end t_e.

TLIO's *local gravity-aligned frame* of a window is the world frame turned by the ZYX yaw ψ_s of
the attitude at the window's first sample, ``R_z(ψ_s)``, ψ_s = atan2(R_s[1, 0], R_s[0, 0]) (roll
and pitch stay in the data). Displacement targets are ``R_z(ψ_s)ᵀ (p(t_e) − p(t_s))``, the
measurement model of :mod:`velobins_ekf.displacement`; inputs in that frame are
``R_z(ψ_s)ᵀ R(t) u(t)`` for each body-frame sample u(t) (:func:`gravity_aligned`). A world yaw
applied to the whole window (R → R_z(α) R, p → R_z(α) p) leaves both unchanged.

:func:`so3_log` is AirIO's attitude encoding (the rotation vector of R, pypose ``SO3.Log()``).
"""

from __future__ import annotations

import torch

from ..config import ATTITUDE_CHANNELS


def split_window(x: torch.Tensor, num_rotors: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Raw window (B, T, 6+K+9) → acc (B, T, 3), gyro (B, T, 3), rotor (B, T, K), R (B, T, 3, 3)."""
    expected = 6 + num_rotors + ATTITUDE_CHANNELS
    if x.shape[-1] != expected:
        raise ValueError(f"baseline input: expected {expected} channels (6 + K={num_rotors} + 9), got {x.shape[-1]}")
    acc = x[..., 0:3]
    gyro = x[..., 3:6]
    rotor = x[..., 6 : 6 + num_rotors]
    rot = x[..., 6 + num_rotors :].reshape(*x.shape[:-1], 3, 3)
    return acc, gyro, rotor, rot


def yaw_of(rot: torch.Tensor) -> torch.Tensor:
    """ZYX yaw ψ = atan2(R[1, 0], R[0, 0]) of body->world rotations (..., 3, 3) → (...)."""
    return torch.atan2(rot[..., 1, 0], rot[..., 0, 0])


def yaw_rotation(psi: torch.Tensor) -> torch.Tensor:
    """R_z(ψ) (..., 3, 3), the rotation about world z by ψ (...)."""
    c, s = torch.cos(psi), torch.sin(psi)
    zero, one = torch.zeros_like(psi), torch.ones_like(psi)
    rows = [torch.stack([c, -s, zero], -1), torch.stack([s, c, zero], -1), torch.stack([zero, zero, one], -1)]
    return torch.stack(rows, -2)


def yaw_frame(rot: torch.Tensor) -> torch.Tensor:
    """R_z(ψ_s) (B, 3, 3): the gravity-aligned frame of windows with attitudes ``rot`` (B, T, 3, 3), ψ_s of sample 0."""
    return yaw_rotation(yaw_of(rot[:, 0]))


def gravity_aligned(rot: torch.Tensor, body: torch.Tensor) -> torch.Tensor:
    """Body-frame samples u(t) (B, T, 3) → R_z(ψ_s)ᵀ R(t) u(t) (B, T, 3), the window start's yaw frame.

    Args:
        rot: (B, T, 3, 3) body->world attitude of every sample.
        body: (B, T, 3) body-frame vectors (acc, gyro, thrust direction, ...).
    """
    world = torch.einsum("btij,btj->bti", rot, body)
    return torch.einsum("bji,btj->bti", yaw_frame(rot), world)


def displacement_target(p_start: torch.Tensor, p_end: torch.Tensor, rot_start: torch.Tensor) -> torch.Tensor:
    """Displacement label R_z(ψ_s)ᵀ (p(t_e) − p(t_s)) (B, 3) [m] (``velobins_ekf.displacement.predict``, yaw frame).

    Args:
        p_start: (B, 3) world position at the window start t_s.
        p_end: (B, 3) world position at the window end t_e.
        rot_start: (B, 3, 3) body->world attitude at t_s.
    """
    return torch.einsum("bji,bj->bi", yaw_rotation(yaw_of(rot_start)), p_end - p_start)


def so3_log(rot: torch.Tensor) -> torch.Tensor:
    """Rotation vector θ·axis (..., 3) of rotations (..., 3, 3), |θ| ≤ π (AirIO's attitude encoding).

    Via the unit quaternion (Shepperd's branch on the largest of w², x², y², z², so it is accurate
    everywhere, 180° included), with w ≥ 0: θ·axis = 2·atan2(|q_v|, w)·q_v/|q_v| (→ 2 q_v/w at 0).
    """
    r = [[rot[..., i, j] for j in range(3)] for i in range(3)]
    trace = r[0][0] + r[1][1] + r[2][2]
    # four candidates of (w, x, y, z) up to scale, each exact where its own component is the largest
    cands = torch.stack(
        [
            torch.stack([1.0 + trace, r[2][1] - r[1][2], r[0][2] - r[2][0], r[1][0] - r[0][1]], -1),
            torch.stack(
                [r[2][1] - r[1][2], 1.0 + r[0][0] - r[1][1] - r[2][2], r[0][1] + r[1][0], r[0][2] + r[2][0]], -1
            ),
            torch.stack(
                [r[0][2] - r[2][0], r[0][1] + r[1][0], 1.0 - r[0][0] + r[1][1] - r[2][2], r[1][2] + r[2][1]], -1
            ),
            torch.stack(
                [r[1][0] - r[0][1], r[0][2] + r[2][0], r[1][2] + r[2][1], 1.0 - r[0][0] - r[1][1] + r[2][2]], -1
            ),
        ],
        -2,
    )  # (..., 4 candidates, 4 = w x y z)
    diag = torch.stack([trace, r[0][0], r[1][1], r[2][2]], -1)
    best = diag.argmax(-1, keepdim=True)  # (..., 1)
    q = torch.gather(cands, -2, best.unsqueeze(-1).expand(*best.shape[:-1], 1, 4)).squeeze(-2)
    q = q / q.norm(dim=-1, keepdim=True)
    q = torch.where(q[..., :1] < 0, -q, q)
    w, v = q[..., 0], q[..., 1:]
    vn = v.norm(dim=-1)
    safe = vn.clamp_min(1e-12)
    scale = torch.where(vn > 1e-6, 2.0 * torch.atan2(vn, w) / safe, 2.0 / w.clamp_min(1e-12))
    return v * scale.unsqueeze(-1)
