"""The displacement measurement between a cloned past pose and the current pose (TLIO §III-D).

TLIO, EqNIO and IMO regress the displacement of the body over a window ``[t_s, t_e]`` in the
*local gravity-aligned frame* of the window start: the world frame rotated by the yaw ``ψ_s`` of
the body at ``t_s`` (roll and pitch removed; TLIO ``scekf.py`` ``update``: ``Ri_zᵀ (p_j − p_i)``).
With the clone ``(R_s, p_s)`` of the pose at ``t_s`` (:mod:`velobins_ekf.clone`) and the current
position ``p`` at ``t_e``::

    h = R_z(ψ_s)ᵀ (p − p_s),    ψ_s = atan2(R_s[1, 0], R_s[0, 0])         (yaw frame, default)
    h = p − p_s                                                           (world frame)

``ψ`` is the ZYX (yaw-pitch-roll) yaw, TLIO's extrinsic-xyz Euler yaw; it is undefined at
±90° pitch, where the update is refused. Jacobians against the error state ``[δx, δc]`` (right
rotation error ``R_s = R̂_s Exp(δθ_s)``)::

    ∂h/∂δp = A,  ∂h/∂δp_s = −A,  A = R_z(ψ_s)ᵀ (or I)
    ∂h/∂δθ_s = ([h]× e_z) (∂ψ/∂δθ_s),   ∂ψ/∂δθ_s = −(−r₁₀, r₀₀, 0) R̂_s [e_x]× / (r₀₀² + r₁₀²)

(``d R_zᵀ/dψ = −[e_z]× R_zᵀ`` and ``d(R e_x) = −R̂ [e_x]× δθ``). TLIO writes the same yaw
derivative for its left error as ``(cos ψ tan θ, sin ψ tan θ, 1)`` about the world axes. The
measurement covariance is the method's (diagonal or full) and is used as given.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from velobins_ekf.clone import C_POS, C_ROT, CLONE_DIM, CloneSet, block
from velobins_ekf.so3 import skew
from velobins_ekf.state import DIM, POS, NavState

E_X = np.array([1.0, 0.0, 0.0])
E_Z = np.array([0.0, 0.0, 1.0])
YAW_SINGULAR = 1e-6
"""``r₀₀² + r₁₀² = cos²θ`` below this (pitch within ~0.06° of ±90°): the yaw frame is undefined."""


@dataclass
class DisplacementResult:
    """Diagnostics of one displacement update (per-update record, for NIS analysis)."""

    stamp: float
    """Window end ``t_e`` [s]."""
    t_start: float
    """Window start ``t_s`` [s] (the clone's stamp)."""
    accepted: bool
    """False when the χ² gate rejected it or the yaw frame was singular (state unchanged)."""
    innovation: np.ndarray
    """(3,) ``z − h(X̂⁻)`` [m]."""
    innovation_cov: np.ndarray
    """(3, 3) ``S = H P Hᵀ + R``."""
    nis: float
    """``yᵀ S⁻¹ y`` (χ²₃ when consistent)."""
    pos: np.ndarray
    """(3,) world position right after the update [m]."""
    rot: np.ndarray
    """(3, 3) body->world rotation right after the update."""
    vel_world: np.ndarray | None = None
    """(3,) world velocity right after the update [m/s] (what the report scores, as for velocity updates)."""
    vel_world_cov: np.ndarray | None = None
    """(3, 3) its covariance [m²/s²]."""


def yaw_of(rot: np.ndarray) -> float:
    """ZYX yaw ``ψ = atan2(R[1, 0], R[0, 0])`` [rad] of a body->world rotation."""
    return math.atan2(rot[1, 0], rot[0, 0])


def yaw_rotation(psi: float) -> np.ndarray:
    """``R_z(ψ)``, the rotation about world z by ``ψ``."""
    c, s = math.cos(psi), math.sin(psi)
    return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])


def yaw_jacobian(rot: np.ndarray) -> np.ndarray:
    """``∂ψ/∂δθ`` (3,) of the yaw of ``rot Exp(δθ)`` at ``δθ = 0`` (module docstring)."""
    r00, r10 = rot[0, 0], rot[1, 0]
    grad = np.array([-r10, r00, 0.0]) / (r00 * r00 + r10 * r10)
    return -(grad @ rot @ skew(E_X))


def frame_rotation(clone_rot: np.ndarray, yaw_frame: bool) -> np.ndarray:
    """``A``: world -> measurement frame, ``R_z(ψ_s)ᵀ`` (yaw frame) or ``I`` (world frame)."""
    return yaw_rotation(yaw_of(clone_rot)).T if yaw_frame else np.eye(3)


def predict(state: NavState, clones: CloneSet, i: int, yaw_frame: bool) -> np.ndarray:
    """``h(X)`` (3,): displacement from clone ``i`` to the current position, in the measurement frame."""
    return frame_rotation(clones.rot[i], yaw_frame) @ (state.pos - clones.pos[i])


def jacobian(state: NavState, clones: CloneSet, i: int, yaw_frame: bool) -> np.ndarray:
    """``H`` (3 x (15 + 6N)) of :func:`predict` against ``[δx, δc]``."""
    a = frame_rotation(clones.rot[i], yaw_frame)
    h = np.zeros((3, DIM + CLONE_DIM * len(clones)))
    h[:, POS] = a
    cols = block(i)
    c = slice(DIM + cols.start, DIM + cols.stop)
    h[:, c][:, C_POS] = -a
    if yaw_frame:
        hx = a @ (state.pos - clones.pos[i])
        h[:, c][:, C_ROT] = np.outer(skew(hx) @ E_Z, yaw_jacobian(clones.rot[i]))
    return h


def yaw_frame_defined(clone_rot: np.ndarray) -> bool:
    """False within :data:`YAW_SINGULAR` of ±90° pitch, where ``ψ`` and its Jacobian are undefined."""
    return clone_rot[0, 0] ** 2 + clone_rot[1, 0] ** 2 > YAW_SINGULAR
