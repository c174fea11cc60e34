"""The filter's nominal state and the layout of its 15-D error state (paper §III-E).

State ``X = (R, v, p, b_a, b_g)``: body->world rotation, world velocity [m/s], world position
[m], accelerometer bias [m/s²], gyroscope bias [rad/s]. World is ENU/z-up with gravity
``g_vec = (0, 0, -g)``. The error state is ordered ``[δθ, δv, δp, δb_a, δb_g]`` with a *right*
(body-frame) rotation perturbation ``R = R̂ Exp(δθ)`` and additive errors for the rest.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from velobins_ekf.config import EkfConfig
from velobins_ekf.so3 import matrix_to_quat, quat_to_matrix

ROT = slice(0, 3)
"""Error-state block of the body-frame rotation error δθ [rad]."""
VEL = slice(3, 6)
"""Error-state block of the world velocity error δv [m/s]."""
POS = slice(6, 9)
"""Error-state block of the world position error δp [m]."""
BA = slice(9, 12)
"""Error-state block of the accelerometer bias error [m/s²]."""
BG = slice(12, 15)
"""Error-state block of the gyroscope bias error [rad/s]."""
DIM = 15
"""Error-state dimension."""


@dataclass
class NavState:
    """Nominal filter state (all arrays float64, owned by the state)."""

    rot: np.ndarray
    """(3, 3) body->world rotation matrix."""
    vel: np.ndarray
    """(3,) world velocity [m/s]."""
    pos: np.ndarray
    """(3,) world position [m]."""
    acc_bias: np.ndarray
    """(3,) accelerometer bias [m/s²]."""
    gyro_bias: np.ndarray
    """(3,) gyroscope bias [rad/s]."""

    @classmethod
    def from_pose(
        cls,
        q_xyzw: np.ndarray,
        vel: np.ndarray,
        pos: np.ndarray,
        acc_bias: np.ndarray | None = None,
        gyro_bias: np.ndarray | None = None,
    ) -> NavState:
        """Build a state from a body->world quaternion ``(x, y, z, w)``, velocity and position."""
        zeros = np.zeros(3)
        return cls(
            rot=quat_to_matrix(q_xyzw),
            vel=np.array(vel, dtype=np.float64).reshape(3),
            pos=np.array(pos, dtype=np.float64).reshape(3),
            acc_bias=np.array(zeros if acc_bias is None else acc_bias, dtype=np.float64).reshape(3),
            gyro_bias=np.array(zeros if gyro_bias is None else gyro_bias, dtype=np.float64).reshape(3),
        )

    def copy(self) -> NavState:
        """Deep copy (snapshots for re-propagation)."""
        return NavState(self.rot.copy(), self.vel.copy(), self.pos.copy(), self.acc_bias.copy(), self.gyro_bias.copy())

    @property
    def quat(self) -> np.ndarray:
        """Body->world quaternion ``(x, y, z, w)``, ``w ≥ 0``."""
        return matrix_to_quat(self.rot)

    @property
    def body_velocity(self) -> np.ndarray:
        """Body-frame velocity ``Rᵀ v`` [m/s]."""
        return self.rot.T @ self.vel


def initial_covariance(config: EkfConfig, rot: np.ndarray) -> np.ndarray:
    """15x15 initial covariance from the config's initial sigmas.

    Roll/pitch and yaw sigmas are specified about world axes (``diag(σ_rp², σ_rp², σ_yaw²)``)
    and rotated into the body-frame error: ``Σ_θ = Rᵀ Σ_world R``.
    """
    p = np.zeros((DIM, DIM))
    sw = np.diag([config.init_sigma_rot**2, config.init_sigma_rot**2, config.init_sigma_yaw**2])
    p[ROT, ROT] = rot.T @ sw @ rot
    p[VEL, VEL] = np.eye(3) * config.init_sigma_vel**2
    p[POS, POS] = np.eye(3) * config.init_sigma_pos**2
    p[BA, BA] = np.eye(3) * config.init_sigma_acc_bias**2
    p[BG, BG] = np.eye(3) * config.init_sigma_gyro_bias**2
    return p


def with_pose(
    state: NavState, cov: np.ndarray, pos: np.ndarray, rot: np.ndarray, cov6: np.ndarray | None, config: EkfConfig
) -> tuple[NavState, np.ndarray]:
    """``state`` and ``cov`` with the pose replaced (robot_localization's set_pose): position ``pos``,
    attitude ``rot``, pose covariance ``cov6`` (6x6, ROS order ``x, y, z, rotX, rotY, rotZ`` with the
    rotation error about the world axes, ``δθ_w = R δθ``), uncorrelated with the rest. The biases keep
    their values and blocks; the velocity keeps its body-frame value (what the updates observe), so the
    world velocity and its rows of the covariance turn with the attitude: ``v ← ΔR v``, ``ΔR = R_new R_oldᵀ``.
    A ``cov6`` that is None or not positive definite gives the initial sigmas' pose block
    (``ros2 topic pub`` sends zeros by default). Copies; the inputs are not changed.
    """
    out = state.copy()
    out.pos, out.rot = np.array(pos, dtype=np.float64), np.array(rot, dtype=np.float64)
    turn = out.rot @ state.rot.T
    out.vel = turn @ state.vel
    c6 = None if cov6 is None else np.asarray(cov6, dtype=np.float64).reshape(6, 6)
    if c6 is not None:
        c6 = 0.5 * (c6 + c6.T)
        if not np.all(np.isfinite(c6)) or np.linalg.eigvalsh(c6)[0] <= 0.0:
            c6 = None
    idx = np.r_[6:9, 0:3]  # the filter's (POS, ROT) error, in the order of the ROS pose error
    back = np.zeros((6, 6))  # (δp, δθ) = back (δp, δθ_w)
    back[0:3, 0:3] = np.eye(3)
    back[3:6, 3:6] = out.rot.T
    p = np.array(cov, dtype=np.float64)
    p[VEL, :] = turn @ p[VEL, :]
    p[:, VEL] = p[:, VEL] @ turn.T
    p[idx, :] = 0.0
    p[:, idx] = 0.0
    if c6 is None:
        p[np.ix_(idx, idx)] = initial_covariance(config, out.rot)[np.ix_(idx, idx)]
    else:
        p[np.ix_(idx, idx)] = back @ c6 @ back.T
    return out, p


def join_blocks(nav_cov: np.ndarray, cross: np.ndarray, cov: np.ndarray) -> np.ndarray:
    """The covariance ``[[P_xx, P_xa], [P_xaᵀ, P_aa]]`` of the navigation error and states appended beside it (the
    clones, the velocity-measurement error), from its blocks: a new array."""
    n = DIM + cov.shape[0]
    full = np.empty((n, n))
    full[:DIM, :DIM] = nav_cov
    full[:DIM, DIM:] = cross
    full[DIM:, :DIM] = cross.T
    full[DIM:, DIM:] = cov
    return full


def split_blocks(full: np.ndarray, nav_cov: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`join_blocks` undone: ``nav_cov`` := the navigation block (in place); returns copies of
    ``(P_xa, P_aa)``."""
    nav_cov[...] = full[:DIM, :DIM]
    return full[:DIM, DIM:].copy(), full[DIM:, DIM:].copy()
