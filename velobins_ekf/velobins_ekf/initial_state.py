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
from collections import deque

import numpy as np

from velobins_ekf.config import EkfConfig
from velobins_ekf.integrity import ImuFault, check_specific_force
from velobins_ekf.state import NavState

Sample = tuple[float, float, float, float, float, float]
"""IMU sample values ``(ax, ay, az, gx, gy, gz)`` as plain floats."""

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


class AlignmentWindow:
    """The IMU a self-initialisation aligns with gravity: the samples of the last ``init_window``
    seconds (and the one before, so that a full window can be told from a short one).

    Used both ways the filter starts itself: at the first measurement (``init_mode: align``, the
    velocity from the network) and at rest (``align_at_rest``, zero velocity). Before a state is
    made, the window's specific force is checked (:func:`velobins_ekf.integrity.check_specific_force`):
    an IMU in g or an FRD IMU published as FLU gives an :class:`~velobins_ekf.integrity.ImuFault`,
    not an upside-down filter. A gap longer than ``max_imu_interval`` empties the window.
    """

    def __init__(self, config: EkfConfig) -> None:
        self.config = config
        self._buf: deque[tuple[float, Sample]] = deque()

    def add(self, t: float, sample: Sample) -> None:
        """One IMU sample (stamp [s], ``(ax, ay, az, gx, gy, gz)``), stamps increasing."""
        buf = self._buf
        if buf and t - buf[-1][0] > self.config.max_imu_interval:
            buf.clear()  # never align across a gap
        buf.append((t, sample))
        horizon = t - self.config.init_window
        while len(buf) > 1 and buf[1][0] <= horizon:
            buf.popleft()

    def clear(self) -> None:
        self._buf.clear()

    @property
    def span(self) -> float:
        """Seconds between the oldest and the newest sample kept."""
        return self._buf[-1][0] - self._buf[0][0] if len(self._buf) >= 2 else 0.0

    def align(self, vel_body: np.ndarray, min_span: float) -> tuple[float, Sample, NavState] | ImuFault | None:
        """The state at the newest sample, with body velocity ``vel_body``, from the samples within
        ``init_window`` of it: ``(stamp, sample, state)``; an :class:`ImuFault` when their specific
        force is implausible; None while the kept samples span less than ``min_span`` seconds."""
        buf = self._buf
        if self.span < min_span:
            return None
        t_last = buf[-1][0]
        acc = np.array([s[0:3] for t, s in buf if t >= t_last - self.config.init_window])
        norms = np.linalg.norm(acc, axis=1)
        fault = check_specific_force(acc.mean(axis=0), float(norms.mean()), self.config)
        if fault is not None:
            return fault
        cfg = self.config
        try:
            state = state_from_alignment(acc, vel_body, yaw=cfg.init_yaw, gravity=cfg.gravity)
        except ValueError as exc:  # not expected past the check; refused like an implausible IMU
            return ImuFault("imu_alignment", str(exc))
        return t_last, buf[-1][1], state
