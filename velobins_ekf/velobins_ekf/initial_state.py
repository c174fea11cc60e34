"""Filter initialisation: from a full state (ground truth) or by gravity alignment.

Gravity alignment (§III-E start-up, as in TLIO/AI-IO): with little acceleration the mean specific
force is ``f̄ ≈ Rᵀ (0, 0, g)``, i.e. the body-frame "up" direction. With ``R = Rz(yaw) Ry(pitch)
Rx(roll)`` one has ``Rᵀ e_z = (−sin pitch, sin roll cos pitch, cos roll cos pitch)``, hence
``roll = atan2(f_y, f_z)`` and ``pitch = atan2(−f_x, √(f_y² + f_z²))``; yaw is unobservable and
taken as given (0 by default). On a flying start the vehicle's own acceleration biases this, which
the initial roll/pitch sigma must cover. The velocity comes from the first network output,
``v = R v̂_body``.
"""

from __future__ import annotations

import math

import numpy as np

from velobins_ekf.state import NavState

_MIN_GRAVITY_FRACTION = 0.5  # |f̄| below this fraction of g means free fall / garbage: refuse


def gravity_aligned_rotation(
    mean_specific_force: np.ndarray, yaw: float = 0.0, gravity: float | None = None
) -> np.ndarray:
    """Body->world rotation whose roll/pitch put ``mean_specific_force`` along world +z.

    Raises ``ValueError`` when the force is not finite or (if ``gravity`` is given) much smaller
    than gravity, where no attitude can be inferred.
    """
    f = np.asarray(mean_specific_force, dtype=np.float64).reshape(-1)
    if f.shape != (3,) or not np.all(np.isfinite(f)):
        raise ValueError(f"gravity alignment: mean_specific_force must be 3 finite values, got {mean_specific_force!r}")
    norm = float(np.linalg.norm(f))
    if norm == 0.0 or (gravity is not None and norm < _MIN_GRAVITY_FRACTION * gravity):
        raise ValueError(f"gravity alignment: |mean specific force| = {norm:.3f} m/s² is too small to find 'up'")
    roll = math.atan2(f[1], f[2])
    pitch = math.atan2(-f[0], math.hypot(f[1], f[2]))
    cr, sr, cp, sp, cy, sy = (
        math.cos(roll),
        math.sin(roll),
        math.cos(pitch),
        math.sin(pitch),
        math.cos(yaw),
        math.sin(yaw),
    )
    rz = np.array([[cy, -sy, 0.0], [sy, cy, 0.0], [0.0, 0.0, 1.0]])
    ry = np.array([[cp, 0.0, sp], [0.0, 1.0, 0.0], [-sp, 0.0, cp]])
    rx = np.array([[1.0, 0.0, 0.0], [0.0, cr, -sr], [0.0, sr, cr]])
    return rz @ ry @ rx


def state_from_alignment(
    acc_samples: np.ndarray,
    vel_body: np.ndarray,
    yaw: float = 0.0,
    position: np.ndarray | None = None,
    gravity: float | None = None,
) -> NavState:
    """Initial state from a short window of specific force (N, 3) and the first body velocity.

    Biases start at zero (a flying start cannot separate them from motion); position defaults
    to the origin.
    """
    acc = np.asarray(acc_samples, dtype=np.float64).reshape(-1, 3)
    if acc.shape[0] == 0:
        raise ValueError("state_from_alignment: acc_samples is empty")
    rot = gravity_aligned_rotation(acc.mean(axis=0), yaw=yaw, gravity=gravity)
    vb = np.asarray(vel_body, dtype=np.float64).reshape(3)
    return NavState(
        rot=rot,
        vel=rot @ vb,
        pos=np.zeros(3) if position is None else np.asarray(position, dtype=np.float64).reshape(3).copy(),
        acc_bias=np.zeros(3),
        gyro_bias=np.zeros(3),
    )
