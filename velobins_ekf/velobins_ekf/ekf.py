"""Error-state EKF with IMU propagation and body-velocity updates (paper §III-E, after AI-IO).

State ``X = (R, v, p, b_a, b_g)``: body->world rotation, world velocity [m/s], world position
[m], accelerometer bias [m/s²], gyroscope bias [rad/s]. World is ENU/z-up with gravity
``g_vec = (0, 0, -g)``; the IMU measures specific force ``f = Rᵀ (a - g_vec) + b_a + n_a`` and
rate ``ω = ω_true + b_g + n_g`` (body frame).

Error state (15-D), order ``[δθ, δv, δp, δb_a, δb_g]``, with a *right* (body-frame) rotation
perturbation ``R = R̂ Exp(δθ)`` and additive errors for the rest (``v = v̂ + δv`` ...).

Propagation over one IMU interval ``dt`` (inputs are the interval's mean specific force and
rate; the :class:`~velobins_ekf.runner.VelocityEkf` wrapper averages consecutive samples, which
makes the scheme second-order accurate)::

    φ = (ω - b_g) dt,  ā = f - b_a,  R_m = R Exp(φ/2)          (mid-interval attitude)
    a_w = R_m ā + g_vec
    p⁺ = p + v dt + ½ a_w dt²,   v⁺ = v + a_w dt,   R⁺ = R_m Exp(φ/2) = R Exp(φ)

Its exact first-order error dynamics ``δx⁺ = F δx + G n`` are::

    δθ⁺ = Exp(φ)ᵀ δθ − Jr(φ) dt (δb_g + n_g)
    δv⁺ = δv − R_m [ā]× Exp(φ/2)ᵀ dt δθ − R_m dt (δb_a + n_a) + ½ dt² R_m [ā]× Jr(φ/2) (δb_g + n_g)
    δp⁺ = δp + dt δv + ½ dt (δv⁺ − δv)                        (same blocks scaled by dt/2)
    δb⁺ = δb + n_b

The IMU white noise enters exactly like the bias error, so ``G`` is ``F``'s bias columns. The
samples are zero-order held, so a density σ [unit/√Hz] is a per-sample variance σ²/dt and a bias
random walk σ_b gives an increment variance σ_b² dt: ``Q = G diag(σ_a²/dt, σ_g²/dt) Gᵀ +
diag(0, σ_ba² dt, σ_bg² dt)``, exact for this discrete model.

Velocity update: ``z = v̂_body`` (the network output), ``h(X) = Rᵀ v``, ``H = [[h]×, Rᵀ, 0, 0, 0]``
(from ``Exp(δθ)ᵀ R̂ᵀ (v̂ + δv) ≈ h + [h]× δθ + R̂ᵀ δv``); the measurement covariance is used as
given (no rescaling), χ² gating optional and off by default (paper: none). Joseph-form
covariance update, symmetrisation and a PD guard; the error is injected and the covariance
reset with ``Jr(δθ̂)`` on the rotation block (first-order: the new right error is
``Jr(δθ̂)(δθ − δθ̂)``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from velobins_ekf.config import EkfConfig
from velobins_ekf.propagation import compose, propagate_nominal, transition_and_noise, white_noise_variance
from velobins_ekf.so3 import (
    exp_coefficients,
    matrix_to_quat,
    orthonormalise,
    quat_to_matrix,
    right_jacobian,
    skew,
)
from velobins_ekf.so3 import so3_exp as _so3_exp

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

_SYMMETRISE_EVERY = 256  # propagations between symmetrising P and re-orthonormalising R (round-off hygiene)
_PD_FLOOR = 1e-15  # smallest eigenvalue kept by the PD guard (relative to the largest)
_BATCH_MIN = 8  # queued intervals from which the batched path is faster than the per-sample one
_QUEUE_MAX = 256  # queued intervals that force a flush (bounds memory between reads)
_DT_REL_TOL = 1e-9  # dt changes below this relative size (stamp round-off) reuse the cached noise terms


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


@dataclass
class UpdateResult:
    """Diagnostics of one velocity update (per-update record, used for NIS/NEES analysis)."""

    stamp: float
    """Measurement stamp [s] (NaN when the caller gave none)."""
    accepted: bool
    """False when the χ² gate rejected the update (state and covariance then unchanged)."""
    innovation: np.ndarray
    """(3,) z − h(X̂⁻) [m/s], body frame."""
    innovation_cov: np.ndarray
    """(3, 3) S = H P Hᵀ + R_meas."""
    nis: float
    """Normalised innovation squared yᵀ S⁻¹ y (χ²₃ when consistent)."""
    vel_world: np.ndarray
    """(3,) fused world velocity after the update [m/s]."""
    vel_body: np.ndarray
    """(3,) fused body velocity Rᵀ v after the update [m/s]."""
    vel_world_cov: np.ndarray
    """(3, 3) covariance of the fused world velocity (for NEES)."""
    vel_body_cov: np.ndarray
    """(3, 3) covariance of the fused body velocity, H P Hᵀ (for NEES against body ground truth)."""
    pos: np.ndarray
    """(3,) world position right after the update [m] (the ATE/RTE sample of this update)."""
    rot: np.ndarray
    """(3, 3) body->world rotation right after the update (a copy; converting to a quaternion here
    would cost more than the update itself)."""


class ErrorStateEkf:
    """The filter core: nominal state, 15x15 covariance, propagation and velocity update.

    No timing logic lives here (see :class:`velobins_ekf.runner.VelocityEkf`); every method works
    on the current state in place.

    Propagation is deferred: :meth:`propagate` queues the interval, and the queue is applied when
    something reads :attr:`state` (nominal state only) or :attr:`cov` (and before every update).
    Short queues run the per-sample float path; longer ones (a whole update interval, typically)
    run the batched numpy path of :mod:`velobins_ekf.propagation`, which gives the same result
    to round-off at a fraction of the per-sample cost. A caller that reads the state after every
    sample (the ROS node publishing odometry) thus pays the per-sample cost, and one that reads it
    at the updates (offline evaluation) the batched one.
    """

    def __init__(self, config: EkfConfig | None = None, state: NavState | None = None, cov: np.ndarray | None = None):
        self.config = config if config is not None else EkfConfig()
        self._state = NavState.from_pose(np.array([0.0, 0.0, 0.0, 1.0]), np.zeros(3), np.zeros(3))
        self._cov = initial_covariance(self.config, self._state.rot)
        self._g = float(self.config.gravity)
        self._queue: list[tuple[float, ...]] = []  # intervals not yet applied to the nominal state
        self._lin: list[tuple[float, ...]] = []  # linearisation rows not yet applied to the covariance
        self._last_f = np.eye(DIM)
        self._last_q = np.zeros((DIM, DIM))
        self._nominal_count = 0
        self._cov_count = 0
        # per-sample path buffers (views are created once: slicing costs as much as the arithmetic)
        self._e_half = np.empty((3, 3))
        self._e_half_flat = self._e_half.reshape(-1)
        self._rot_mid = np.empty((3, 3))
        self._rm_flat = self._rot_mid.reshape(-1)
        self._f = f = np.eye(DIM)
        self._tmp = np.empty((DIM, DIM))
        self._q = np.zeros((DIM, DIM))
        self._q9 = self._q[0:9, 0:9]
        self._work = np.zeros(54)
        w = self._work
        self._rm_in = w[0:9].reshape(3, 3)
        self._et_jr = w[9:27].reshape(3, 6)
        self._skew_a = w[27:36].reshape(3, 3)
        self._exp_t = w[36:45].reshape(3, 3)
        self._njr = w[45:54].reshape(3, 3)
        self._m = np.empty((3, 3))
        self._y = np.empty((3, 6))
        self._y_rot = self._y[:, 0:3]
        self._y_bg = self._y[:, 3:6]
        self._fviews = (
            f[ROT, ROT],
            f[ROT, BG],
            f[VEL, ROT],
            f[VEL, BG],
            f[VEL, BA],
            f[POS, ROT],
            f[VEL, 9:15],
            f[POS, 9:15],
        )
        self._f_g = f[0:9, 9:15]
        self._gs = np.empty((9, 6))
        self._noise_dt = math.nan
        self._noise_scale = np.empty(6)
        self._q_bias_diag = np.einsum("ii->i", self._q[9:15, 9:15])  # writable view of Q's bias diagonal
        if state is not None:
            self.reset(state, cov)

    # ------------------------------------------------------------------ state
    @property
    def state(self) -> NavState:
        """The nominal state at the end of all propagated intervals (live object, not a copy)."""
        if self._queue:
            self._flush_nominal()
        return self._state

    @property
    def cov(self) -> np.ndarray:
        """The 15x15 error-state covariance at the end of all propagated intervals (live array)."""
        if self._queue or self._lin:
            self._flush_cov()
        return self._cov

    def reset(self, state: NavState, cov: np.ndarray | None = None) -> None:
        """Set the nominal state (copied) and covariance (default: :func:`initial_covariance`);
        queued intervals are discarded."""
        s = state.copy()
        s.rot = orthonormalise(s.rot)
        for name in ("rot", "vel", "pos", "acc_bias", "gyro_bias"):
            if not np.all(np.isfinite(getattr(s, name))):
                raise ValueError(f"ErrorStateEkf.reset: state field '{name}' is not finite")
        c = initial_covariance(self.config, s.rot) if cov is None else np.array(cov, dtype=np.float64)
        if c.shape != (DIM, DIM) or not np.all(np.isfinite(c)):
            raise ValueError(f"ErrorStateEkf.reset: covariance must be a finite {DIM}x{DIM} array, got {c.shape}")
        self._queue.clear()
        self._lin.clear()
        self._state = s
        self._cov = 0.5 * (c + c.T)

    # ------------------------------------------------------------------ propagation
    def propagate(self, dt: float, acc: np.ndarray, gyro: np.ndarray) -> None:
        """Propagate state and covariance over ``dt`` [s] with specific force ``acc`` [m/s²] and
        rate ``gyro`` [rad/s] (body frame, the interval's mean values). See module docstring.

        The interval is queued (see the class docstring); reading :attr:`state` or :attr:`cov`
        applies it.
        """
        q = self._queue
        q.append(
            (float(dt), float(acc[0]), float(acc[1]), float(acc[2]), float(gyro[0]), float(gyro[1]), float(gyro[2]))
        )
        if len(q) >= _QUEUE_MAX:
            self._flush_nominal()

    def flush(self) -> None:
        """Apply every queued interval to the state and the covariance now."""
        self._flush_cov()

    def _flush_nominal(self) -> None:
        q = self._queue
        if len(q) < _BATCH_MIN:
            for item in q:
                self._nominal_step(*item)
        else:
            st = self._state
            st.rot, st.vel, st.pos, lin = propagate_nominal(
                st.rot, st.vel, st.pos, st.acc_bias, st.gyro_bias, self._g, np.array(q)
            )
            self._lin.extend(lin.tolist())
        before = self._nominal_count
        self._nominal_count += len(q)
        q.clear()
        if self._nominal_count // _SYMMETRISE_EVERY != before // _SYMMETRISE_EVERY:
            self._state.rot = orthonormalise(self._state.rot)
        if len(self._lin) >= _QUEUE_MAX:
            self._flush_cov()

    def _flush_cov(self) -> None:
        if self._queue:
            self._flush_nominal()
        lin = self._lin
        if not lin:
            return
        if len(lin) < _BATCH_MIN:
            for row in lin:
                self._cov_step(row)
        else:
            f, q = transition_and_noise(np.array(lin), self.config)
            self._last_f, self._last_q = f[-1], q[-1]
            phi, q_sum = compose(f, q)
            np.matmul(phi, self._cov, out=self._tmp)
            np.matmul(self._tmp, phi.T, out=self._cov)
            self._cov += q_sum
        before = self._cov_count
        self._cov_count += len(lin)
        lin.clear()
        if self._cov_count // _SYMMETRISE_EVERY != before // _SYMMETRISE_EVERY:
            self._symmetrise()

    def _nominal_step(self, dt: float, fx: float, fy: float, fz: float, wx: float, wy: float, wz: float) -> None:
        """One interval of the nominal state on floats; queues its linearisation row."""
        st = self._state
        ba0, ba1, ba2 = st.acc_bias.tolist()
        bg0, bg1, bg2 = st.gyro_bias.tolist()
        ax, ay, az = fx - ba0, fy - ba1, fz - ba2
        hd = 0.5 * dt
        hx, hy, hz = (wx - bg0) * hd, (wy - bg1) * hd, (wz - bg2) * hd
        # half-angle Exp(h) = I + a K + b K², K = [h]×, K² = h hᵀ − |h|² I
        t2 = hx * hx + hy * hy + hz * hz
        a, b, _ = exp_coefficients(t2)
        xx, yy, zz, xy, xz, yz = hx * hx - t2, hy * hy - t2, hz * hz - t2, hx * hy, hx * hz, hy * hz
        self._e_half_flat[:] = (
            1.0 + b * xx, -a * hz + b * xy, a * hy + b * xz,
            a * hz + b * xy, 1.0 + b * yy, -a * hx + b * yz,
            -a * hy + b * xz, a * hx + b * yz, 1.0 + b * zz,
        )  # fmt: skip
        rm = self._rot_mid
        np.matmul(st.rot, self._e_half, out=rm)
        rml = self._rm_flat.tolist()
        r00, r01, r02, r10, r11, r12, r20, r21, r22 = rml
        awx = r00 * ax + r01 * ay + r02 * az
        awy = r10 * ax + r11 * ay + r12 * az
        awz = r20 * ax + r21 * ay + r22 * az - self._g
        vel = st.vel
        vx, vy, vz = vel.tolist()
        h2 = hd * dt
        st.pos += (vx * dt + awx * h2, vy * dt + awy * h2, vz * dt + awz * h2)
        vel[:] = (vx + awx * dt, vy + awy * dt, vz + awz * dt)
        np.matmul(rm, self._e_half, out=st.rot)  # R⁺ = R_m Exp(φ/2)
        self._lin.append((dt, *rml, ax, ay, az, hx, hy, hz))

    def _cov_step(self, row: tuple[float, ...]) -> None:
        """``P ← F P Fᵀ + Q`` for one linearisation row, on floats and preallocated buffers."""
        dt = row[0]
        ax, ay, az, hx, hy, hz = row[10:16]
        hd = 0.5 * dt
        t2 = hx * hx + hy * hy + hz * hz
        xx, yy, zz, xy, xz, yz = hx * hx - t2, hy * hy - t2, hz * hz - t2, hx * hy, hx * hz, hy * hz
        # half angle h and full angle φ = 2h (K_φ = 2K, K_φ² = 4K²); Jr(h) = I − b K + c K²
        a, b, c = exp_coefficients(t2)
        af, bf, cf = exp_coefficients(4.0 * t2)
        af2, bf4, bj2, cj4 = 2.0 * af, 4.0 * bf, -2.0 * bf, 4.0 * cf
        ndt = -dt
        h2 = hd * dt
        # one write of every float-computed block into the flat work buffer (see __init__ views)
        self._work[:] = (
            # R_m
            *row[1:10],
            # [−dt Exp(h)ᵀ | ½dt² Jr(h)]: the scales of the δv⁺ blocks folded in
            ndt * (1.0 + b * xx), ndt * (a * hz + b * xy), ndt * (-a * hy + b * xz),
            h2 * (1.0 + c * xx), h2 * (b * hz + c * xy), h2 * (-b * hy + c * xz),
            ndt * (-a * hz + b * xy), ndt * (1.0 + b * yy), ndt * (a * hx + b * yz),
            h2 * (-b * hz + c * xy), h2 * (1.0 + c * yy), h2 * (b * hx + c * yz),
            ndt * (a * hy + b * xz), ndt * (-a * hx + b * yz), ndt * (1.0 + b * zz),
            h2 * (b * hy + c * xz), h2 * (-b * hx + c * yz), h2 * (1.0 + c * zz),
            # [ā]×
            0.0, -az, ay,
            az, 0.0, -ax,
            -ay, ax, 0.0,
            # Exp(φ)ᵀ
            1.0 + bf4 * xx, af2 * hz + bf4 * xy, -af2 * hy + bf4 * xz,
            -af2 * hz + bf4 * xy, 1.0 + bf4 * yy, af2 * hx + bf4 * yz,
            af2 * hy + bf4 * xz, -af2 * hx + bf4 * yz, 1.0 + bf4 * zz,
            # −dt Jr(φ), Jr(φ) = I − b_f K_φ + c_f K_φ²
            ndt * (1.0 + cj4 * xx), ndt * (-bj2 * hz + cj4 * xy), ndt * (bj2 * hy + cj4 * xz),
            ndt * (bj2 * hz + cj4 * xy), ndt * (1.0 + cj4 * yy), ndt * (-bj2 * hx + cj4 * yz),
            ndt * (-bj2 * hy + cj4 * xz), ndt * (bj2 * hx + cj4 * yz), ndt * (1.0 + cj4 * zz),
        )  # fmt: skip
        rm = self._rm_in
        np.matmul(rm, self._skew_a, out=self._m)
        np.matmul(self._m, self._et_jr, out=self._y)

        f = self._f
        fv = self._fviews
        fv[0][...] = self._exp_t
        fv[1][...] = self._njr
        fv[2][...] = self._y_rot
        fv[3][...] = self._y_bg
        np.multiply(rm, ndt, out=fv[4])
        np.multiply(fv[2], hd, out=fv[5])
        np.multiply(fv[6], hd, out=fv[7])
        f[6, 3] = dt
        f[7, 4] = dt
        f[8, 5] = dt

        # process noise Q = G W Gᵀ (+ bias random walks), G = F's bias columns (rows 0..8)
        if not abs(dt - self._noise_dt) <= _DT_REL_TOL * dt:  # also true for the initial NaN
            self._set_noise_dt(dt)
        np.multiply(self._f_g, self._noise_scale, out=self._gs)
        np.matmul(self._gs, self._gs.T, out=self._q9)
        self._last_f, self._last_q = f, self._q

        # covariance: P = F P Fᵀ + Q
        cov = self._cov
        np.matmul(f, cov, out=self._tmp)
        np.matmul(self._tmp, f.T, out=cov)
        cov += self._q

    def _set_noise_dt(self, dt: float) -> None:
        """Refresh the dt-dependent noise terms (only when dt changes)."""
        cfg = self.config
        sq = 1.0 / math.sqrt(dt)
        self._noise_scale[0:3] = cfg.acc_noise_density * sq
        self._noise_scale[3:6] = cfg.gyro_noise_density * sq
        qa, qg = cfg.acc_random_walk**2 * dt, cfg.gyro_random_walk**2 * dt
        self._q_bias_diag[:] = (qa, qa, qa, qg, qg, qg)
        self._noise_dt = dt

    def transition_matrix(self) -> np.ndarray:
        """Copy of the last propagated interval's F (15x15), for tests and analysis."""
        self.flush()
        return self._last_f.copy()

    def process_noise(self) -> np.ndarray:
        """Copy of the last propagated interval's Q (15x15), for tests and analysis."""
        self.flush()
        return self._last_q.copy()

    # ------------------------------------------------------------------ update
    def measurement_jacobian(self) -> np.ndarray:
        """H (3x15) of ``h(X) = Rᵀ v`` at the current state."""
        h = np.zeros((3, DIM))
        rt = self.state.rot.T
        h[:, ROT] = skew(rt @ self.state.vel)
        h[:, VEL] = rt
        return h

    def update_velocity(self, z_body: np.ndarray, meas_cov: np.ndarray, stamp: float = math.nan) -> UpdateResult:
        """Fuse a body-frame velocity ``z_body`` (3,) [m/s] with covariance ``meas_cov`` (3, 3).

        Raises ``ValueError`` on non-finite or wrongly shaped inputs or a covariance that is not
        symmetric positive definite (the wrapper validates first and counts rejections).
        """
        z = np.asarray(z_body, dtype=np.float64).reshape(-1)
        r = np.asarray(meas_cov, dtype=np.float64)
        if z.shape != (3,) or not np.all(np.isfinite(z)):
            raise ValueError(f"update_velocity: z_body must be 3 finite values, got {z_body!r}")
        if r.shape != (3, 3) or not np.all(np.isfinite(r)):
            raise ValueError(f"update_velocity: meas_cov must be a finite 3x3 array, got shape {r.shape}")
        r = 0.5 * (r + r.T)
        try:
            np.linalg.cholesky(r)
        except np.linalg.LinAlgError as exc:
            raise ValueError("update_velocity: meas_cov is not positive definite") from exc
        return self.update_velocity_unchecked(z, r, stamp)

    def update_velocity_unchecked(self, z: np.ndarray, r: np.ndarray, stamp: float = math.nan) -> UpdateResult:
        """:meth:`update_velocity` for inputs already validated by the caller: (3,) finite ``z``
        and symmetric positive definite (3, 3) ``r`` (the streaming wrapper checks both)."""
        st = self.state
        p = self.cov
        h_jac = self.measurement_jacobian()
        hx = st.rot.T @ st.vel
        y = z - hx
        h6 = h_jac[:, 0:6]
        pht = p[:, 0:6] @ h6.T  # (15, 3): H is zero beyond the first 6 columns
        s = h6 @ pht[0:6] + r
        s = 0.5 * (s + s.T)
        # One factorisation of S for both S⁻¹y (NIS) and K = P Hᵀ S⁻¹ (S symmetric).
        sol = np.linalg.solve(s, np.column_stack((y, pht.T)))
        nis = float(y @ sol[:, 0])
        if self.config.gate_enabled and nis > self.config.gate_threshold:
            return self._result(stamp, False, y, s, nis)

        k = sol[:, 1:].T
        dx = k @ y
        ikh = np.eye(DIM) - k @ h_jac
        p_new = ikh @ p @ ikh.T + k @ r @ k.T
        self._inject(dx, p_new)
        return self._result(stamp, True, y, s, nis)

    def _inject(self, dx: np.ndarray, p_new: np.ndarray) -> None:
        """Inject the error estimate into the nominal state and reset the covariance."""
        st = self.state
        dtheta = dx[ROT]
        st.rot = st.rot @ _so3_exp(dtheta)
        st.vel += dx[VEL]
        st.pos += dx[POS]
        st.acc_bias += dx[BA]
        st.gyro_bias += dx[BG]
        jr = right_jacobian(dtheta)
        p_new[ROT, :] = jr @ p_new[ROT, :]
        p_new[:, ROT] = p_new[:, ROT] @ jr.T
        self.cov[...] = p_new
        self._symmetrise()
        self._ensure_pd()

    def _result(self, stamp: float, accepted: bool, y: np.ndarray, s: np.ndarray, nis: float) -> UpdateResult:
        h6 = self.measurement_jacobian()[:, 0:6]
        p6 = self.cov[0:6, 0:6]
        return UpdateResult(
            stamp=float(stamp),
            accepted=accepted,
            innovation=y,
            innovation_cov=s,
            nis=nis,
            vel_world=self.state.vel.copy(),
            vel_body=self.state.body_velocity,
            vel_world_cov=self.cov[VEL, VEL].copy(),
            vel_body_cov=h6 @ p6 @ h6.T,
            pos=self.state.pos.copy(),
            rot=self.state.rot.copy(),
        )

    # ------------------------------------------------------------------ covariance hygiene
    def _symmetrise(self) -> None:
        p = self.cov
        np.add(p, p.T, out=self._tmp)
        np.multiply(self._tmp, 0.5, out=p)

    def _ensure_pd(self) -> None:
        """Keep P positive definite: if Cholesky fails, clip eigenvalues to a small floor."""
        try:
            np.linalg.cholesky(self.cov)
        except np.linalg.LinAlgError:
            w, v = np.linalg.eigh(self.cov)
            floor = max(float(w.max()), 1e-30) * _PD_FLOOR
            self.cov[...] = (v * np.maximum(w, floor)) @ v.T
            self._symmetrise()

    # ------------------------------------------------------------------ outputs
    @property
    def position(self) -> np.ndarray:
        """World position [m] (copy)."""
        return self.state.pos.copy()

    @property
    def quaternion(self) -> np.ndarray:
        """Body->world quaternion ``(x, y, z, w)``."""
        return self.state.quat

    @property
    def velocity_world(self) -> np.ndarray:
        """World velocity [m/s] (copy)."""
        return self.state.vel.copy()

    @property
    def velocity_body(self) -> np.ndarray:
        """Body velocity ``Rᵀ v`` [m/s]."""
        return self.state.body_velocity

    @property
    def covariance(self) -> np.ndarray:
        """15x15 error-state covariance (copy), order ``[δθ, δv, δp, δb_a, δb_g]``."""
        return self.cov.copy()

    def pose_covariance_ros(self) -> np.ndarray:
        """6x6 pose covariance in ROS order ``(x, y, z, rotX, rotY, rotZ)`` for nav_msgs/Odometry.

        Position is the world position error; the rotation error is expressed about the world
        (``odom``) axes, ``δθ_w = R δθ`` (the filter's own error is body-frame), as the pose is
        given in the ``odom`` frame.
        """
        j = np.zeros((6, DIM))
        j[0:3, POS] = np.eye(3)
        j[3:6, ROT] = self.state.rot
        out = j @ self.cov @ j.T
        return 0.5 * (out + out.T)

    def twist_covariance_body(self) -> np.ndarray:
        """3x3 covariance of the body-frame velocity ``Rᵀ v`` (the Odometry twist's linear part)."""
        h6 = self.measurement_jacobian()[:, 0:6]
        return h6 @ self.cov[0:6, 0:6] @ h6.T

    def twist_covariance(self, imu_dt: float) -> np.ndarray:
        """6x6 covariance of the Odometry twist, ROS order (body linear velocity, body rate).

        The rate is one raw gyro sample less the bias estimate, ``ω − b_g``: its covariance is the
        bias block of P plus the sample's white-noise variance σ_g²/dt (``imu_dt`` floored at 0.1 ms).
        """
        out = np.zeros((6, 6))
        out[0:3, 0:3] = self.twist_covariance_body()
        out[3:6, 3:6] = self.cov[BG, BG] + np.eye(3) * white_noise_variance(
            self.config.gyro_noise_density, max(imu_dt, 1e-4)
        )
        return out
