"""Error-state EKF with IMU propagation and body-velocity updates (paper §III-E, after AI-IO).

The filter core, :class:`ErrorStateEkf`, holds the nominal state (:mod:`velobins_ekf.state`) and
the 15x15 error-state covariance, and applies the two steps whose formulas live in one module
each: IMU propagation (:mod:`velobins_ekf.propagation`: the integration scheme, ``F``, ``G``, ``Q``)
and the velocity update (:mod:`velobins_ekf.update`: ``H``, Joseph form, injection and reset).
It adds the bookkeeping: deferred propagation (blocks through :mod:`velobins_ekf.batch`, single
intervals through :func:`velobins_ekf.nominal.nominal_step`), symmetrisation and a PD guard. For displacement
methods (TLIO, EqNIO, IMO) it also keeps cloned past poses (:mod:`velobins_ekf.clone`) and fuses
the displacement between a clone and the current pose (:mod:`velobins_ekf.displacement`), and optionally a slow
error of the velocity measurements (:mod:`velobins_ekf.velocity_error`). Without either, every step is the 15-D
filter's, operation for operation.
"""

from __future__ import annotations

import math

import numpy as np

from velobins_ekf import clone as cl
from velobins_ekf import displacement as disp
from velobins_ekf import velocity_error as ve
from velobins_ekf.batch import propagate_block
from velobins_ekf.config import EkfConfig
from velobins_ekf.nominal import nominal_step, rotation_series
from velobins_ekf.propagation import (
    Interval,
    Transition,
    compose,
    concatenate,
    transition_and_noise,
    white_noise_variance,
)
from velobins_ekf.so3 import orthonormalise
from velobins_ekf.state import BA, BG, DIM, POS, ROT, VEL, NavState, initial_covariance
from velobins_ekf.update import (
    Innovation,
    UpdateResult,
    body_velocity_covariance,
    inject,
    innovation,
    kalman_innovation,
    measurement_jacobian,
    updated_covariance,
)

__all__ = ["BA", "BG", "DIM", "POS", "ROT", "VEL", "ErrorStateEkf", "NavState", "UpdateResult", "initial_covariance"]

_SYMMETRISE_EVERY = 256  # propagations between symmetrising P and re-orthonormalising R (round-off hygiene)
_PD_FLOOR = 1e-15  # smallest eigenvalue kept by the PD guard (relative to the largest)
_BATCH_MIN = 8  # queued intervals from which one block is faster than one interval at a time
_QUEUE_MAX = 256  # queued intervals that force a flush (bounds memory between reads)


def positive_definite(p: np.ndarray) -> np.ndarray:
    """The PD guard: ``p`` symmetrised, and where Cholesky fails, its eigenvalues clipped to a small
    floor relative to the largest (round-off after an update can leave a tiny negative one)."""
    p = 0.5 * (p + p.T)
    try:
        np.linalg.cholesky(p)
    except np.linalg.LinAlgError:
        w, v = np.linalg.eigh(p)
        floor = max(float(w.max()), 1e-30) * _PD_FLOOR
        p = (v * np.maximum(w, floor)) @ v.T
        p = 0.5 * (p + p.T)
    return p


class ErrorStateEkf:
    """The filter core: nominal state, 15x15 covariance, propagation and velocity update.

    No timing logic lives here (see :class:`velobins_ekf.runner.VelocityEkf`); every method works
    on the current state in place.

    Propagation is deferred: :meth:`propagate` queues the interval, and the queue is applied when
    something reads :attr:`state` (nominal state only) or :attr:`cov` (and before every update).
    A short queue runs the propagation functions one interval at a time, a longer one (a whole
    update interval, typically) runs the same functions on the block, where the nominal chain is
    a log-depth scan and the covariance steps fold into one (:func:`~velobins_ekf.propagation.compose`):
    the same result to round-off at a fraction of the cost. A caller that reads the state after
    every sample (the ROS node publishing odometry) thus pays the per-interval cost, and one that
    reads it at the updates (offline evaluation) the block one.
    """

    def __init__(self, config: EkfConfig | None = None, state: NavState | None = None, cov: np.ndarray | None = None):
        self.config = config if config is not None else EkfConfig()
        self._state = NavState.from_pose(np.array([0.0, 0.0, 0.0, 1.0]), np.zeros(3), np.zeros(3))
        self._cov = initial_covariance(self.config, self._state.rot)
        self._g = float(self.config.gravity)
        self._queue: list[tuple[float, ...]] = []  # intervals not yet applied to the nominal state
        self._lin: list[Interval] = []  # linearisation points not yet applied to the covariance
        self._lin_count = 0  # intervals in self._lin
        self._last_f = np.eye(DIM)
        self._last_q = np.zeros((DIM, DIM))
        self._nominal_count = 0
        self._cov_count = 0
        self._tmp = np.empty((DIM, DIM))
        self._one = Transition()  # the one-interval covariance step reuses its buffers
        self._sink: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None  # pose rows: pos, rot, vel
        self._marks: list[tuple[int, int]] = []  # (queued intervals before the mark, sink row)
        self._clones = cl.CloneSet()  # cloned past poses (displacement measurements), none by default
        self._verr = self._velocity_error_prior()  # slow velocity-measurement error, None when modelled white
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
        if self._marks:  # the queued intervals still owe these rows their poses
            self._flush_nominal()
        self._queue.clear()
        self._lin.clear()
        self._lin_count = 0
        self._state = s
        self._cov = 0.5 * (c + c.T)
        self._clones = cl.CloneSet()
        self._verr = self._velocity_error_prior()

    def _velocity_error_prior(self) -> ve.VelocityError | None:
        sigma = self.config.velocity_error_sigma
        return ve.VelocityError.prior(sigma, self.config.velocity_error_tau) if sigma > 0 else None

    # ------------------------------------------------------------------ propagation
    def propagate(self, dt: float, acc: np.ndarray, gyro: np.ndarray) -> None:
        """Propagate state and covariance over ``dt`` [s] with specific force ``acc`` [m/s²] and
        rate ``gyro`` [rad/s] (body frame, the interval's mean values); the scheme is
        :mod:`velobins_ekf.propagation`'s.

        The interval is queued (see the class docstring); reading :attr:`state` or :attr:`cov`
        applies it.
        """
        q = self._queue
        q.append(
            (float(dt), float(acc[0]), float(acc[1]), float(acc[2]), float(gyro[0]), float(gyro[1]), float(gyro[2]))
        )
        if len(q) >= _QUEUE_MAX:
            self._flush_nominal()

    def record_poses(self, pos: np.ndarray, rot: np.ndarray, vel: np.ndarray) -> None:
        """Give :meth:`mark_pose` its destination: (M, 3) world position, (M, 3, 3) body->world
        rotation and (M, 3) world velocity arrays, written row by row."""
        self._sink = (pos, rot, vel)

    def mark_pose(self, row: int) -> None:
        """Write the nominal pose after the intervals propagated so far into row ``row`` of the
        :meth:`record_poses` arrays, when those intervals are applied.

        Recording the trajectory at every IMU sample thus leaves the queue to run as blocks, whose
        scan yields the pose after every interval (:func:`~velobins_ekf.batch.propagate_block`).
        """
        if self._queue:
            self._marks.append((len(self._queue), row))
        else:
            self._write_pose(row, self._state.pos, self._state.rot, self._state.vel)

    def _write_pose(self, row, pos: np.ndarray, rot: np.ndarray, vel: np.ndarray) -> None:
        """Rows ``row`` (an int or an index array) of the pose arrays := ``pos``, ``rot``, ``vel``."""
        if self._sink is None:
            raise RuntimeError("ErrorStateEkf.mark_pose: call record_poses first")
        sink_pos, sink_rot, sink_vel = self._sink
        sink_pos[row] = pos
        sink_rot[row] = rot
        sink_vel[row] = vel

    def flush(self) -> None:
        """Apply every queued interval to the state and the covariance now."""
        self._flush_cov()

    def _flush_nominal(self) -> None:
        q, marks, st = self._queue, self._marks, self._state
        if len(q) < _BATCH_MIN:
            m = 0
            for k, row in enumerate(q, 1):
                self._lin.append(self._step(row))
                while m < len(marks) and marks[m][0] == k:
                    self._write_pose(marks[m][1], st.pos, st.rot, st.vel)
                    m += 1
        else:
            iv, poses = propagate_block(st, self._g, np.array(q))
            self._lin.append(iv)
            if marks:
                after, rows = np.array(marks).T
                self._write_pose(rows, poses.pos[after - 1], poses.rot[after - 1], poses.vel[after - 1])
        marks.clear()
        self._lin_count += len(q)
        before = self._nominal_count
        self._nominal_count += len(q)
        q.clear()
        if self._nominal_count // _SYMMETRISE_EVERY != before // _SYMMETRISE_EVERY:
            self._state.rot = orthonormalise(self._state.rot)
        if self._lin_count >= _QUEUE_MAX:
            self._flush_cov()

    def _step(self, row: tuple[float, ...]) -> Interval:
        """Integrate the state over one queued interval ``(dt, f, ω)``; its linearisation point."""
        st, dt, values = self._state, row[0], np.array(row)
        series = rotation_series(dt, values[4:7], st.gyro_bias)
        acc = values[1:4] - st.acc_bias
        step = nominal_step(st.rot, st.vel, st.pos, acc, series, dt, self._g)
        st.rot, st.vel, st.pos = step.rot, step.vel, step.pos
        return Interval(dt, step.r_mid, acc, series)

    def _flush_cov(self) -> None:
        if self._queue:
            self._flush_nominal()
        lin = self._lin
        if not lin:
            return
        cov, tmp = self._cov, self._tmp
        if self._lin_count < _BATCH_MIN and len(lin) == self._lin_count:  # a few single intervals
            for iv in lin:
                f, q = self._one.build(iv, self.config)
                np.matmul(f, cov, out=tmp)
                np.matmul(tmp, self._one.transpose, out=cov)
                cov += q
                cl.propagate_cross(self._clones, f)
                if self._verr is not None:
                    ve.propagate(self._verr, f, iv.dt)
        else:
            block = concatenate(lin)
            f, q = transition_and_noise(block, self.config)
            phi, q_sum = compose(f, q)
            np.matmul(phi, cov, out=tmp)
            np.matmul(tmp, phi.T, out=cov)
            cov += q_sum
            cl.propagate_cross(self._clones, phi)
            if self._verr is not None:  # diag(Φ, aI) composes to diag(Φ_block, a_block I): one step
                ve.propagate(self._verr, phi, float(np.sum(block.dt)))
            f, q = f[-1], q[-1]
        self._last_f, self._last_q = f, q
        before = self._cov_count
        self._cov_count += self._lin_count
        lin.clear()
        self._lin_count = 0
        if self._cov_count // _SYMMETRISE_EVERY != before // _SYMMETRISE_EVERY:
            self._symmetrise()

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
        return measurement_jacobian(self.state)

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
        and symmetric positive definite (3, 3) ``r`` (the streaming wrapper checks both).
        ``config.velocity_noise_floor`` > 0 adds its variance to ``r`` here, the one place every update passes."""
        floor = self.config.velocity_noise_floor
        if floor > 0:
            r = r + np.eye(3) * (floor * floor)
        st, p = self.state, self.cov
        if self._verr is not None:  # z = Rᵀv + b + n: the update of [δx, δb]
            gate = self.config.gate_threshold if self.config.gate_enabled else None
            inn, p_new = ve.kalman_update(st, p, self._verr, z, r, gate)
            if p_new is not None:
                ve.split(positive_definite(p_new), self._cov, self._verr)
            return self._result(stamp, p_new is not None, inn.y, inn.s, inn.nis)
        if len(self._clones):  # the clones are correlated with the state: the update moves them too
            h_jac = measurement_jacobian(st)
            h = np.zeros((3, p.shape[0] + cl.CLONE_DIM * len(self._clones)))
            h[:, :DIM] = h_jac
            accepted, inn = self._update_augmented(h, z - st.rot.T @ st.vel, r)
            return self._result(stamp, accepted, inn.y, inn.s, inn.nis)
        inn = innovation(st, p, z, r)
        if self.config.gate_enabled and inn.nis > self.config.gate_threshold:
            return self._result(stamp, False, inn.y, inn.s, inn.nis)
        p_new = updated_covariance(p, inn, r)
        inject(st, inn.gain @ inn.y, p_new)
        self._cov[...] = positive_definite(p_new)
        return self._result(stamp, True, inn.y, inn.s, inn.nis)

    @property
    def velocity_error(self) -> ve.VelocityError | None:
        """The slow velocity-measurement error b and its blocks (live object), None when the filter models the
        measurement errors as white (``config.velocity_error_sigma`` 0)."""
        self.flush()
        return self._verr

    def set_velocity_error(self, err: ve.VelocityError | None) -> None:
        """Replace b and its blocks by a copy of ``err`` (a snapshot's, after :meth:`reset`); None: keep the prior."""
        self.flush()
        if err is not None and self._verr is not None:
            self._verr = err.copy()

    # ------------------------------------------------------------------ clones and displacement
    @property
    def clones(self) -> cl.CloneSet:
        """The cloned past poses and their covariance blocks (live object; :meth:`set_clones` to replace)."""
        self.flush()
        return self._clones

    def set_clones(self, clones: cl.CloneSet) -> None:
        """Replace the clones (a copy is kept), e.g. with a snapshot's after :meth:`reset`."""
        self.flush()
        self._clones = clones.copy()

    def clone_pose(self, t: float) -> bool:
        """Clone the current pose as the pose at stamp ``t`` (:func:`~velobins_ekf.clone.augment`).

        At most ``config.max_clones`` are kept: beyond, the oldest is marginalised first and True
        is returned (the caller counts it).
        """
        if self._verr is not None:
            raise ValueError(
                "clone_pose: velocity_error_sigma > 0 models velocity measurements; displacement methods need it 0"
            )
        self.flush()
        dropped = len(self._clones) >= self.config.max_clones
        if dropped:
            cl.marginalise(self._clones, 0)
        cl.augment(self.state, self._cov, self._clones, t)
        return dropped

    def drop_clone(self, t: float) -> None:
        """Marginalise the clone stamped ``t`` (no-op when there is none)."""
        i = self._clones.index(t)
        if i >= 0:
            self.flush()
            cl.marginalise(self._clones, i)

    def update_displacement(
        self, t_start: float, z: np.ndarray, meas_cov: np.ndarray, stamp: float = math.nan
    ) -> disp.DisplacementResult:
        """Fuse a displacement ``z`` (3,) [m] from the clone stamped ``t_start`` to the current
        pose, with covariance ``meas_cov`` (3, 3) (frame: ``config.displacement_yaw_frame``, see
        :mod:`velobins_ekf.displacement`). Raises ``ValueError`` when no clone has that stamp.

        Inputs are taken as validated (finite, ``meas_cov`` symmetric positive definite): the
        streaming wrapper checks them. Refused (``accepted`` False, nothing changed) by the χ² gate
        when it is on, or when the clone's pitch is at ±90° in the yaw frame.
        """
        i = self._clones.index(t_start)
        if i < 0:
            raise ValueError(f"update_displacement: no clone at t_start={t_start!r}")
        st, yaw = self.state, self.config.displacement_yaw_frame
        clones = self.clones
        y = np.asarray(z, dtype=np.float64) - disp.predict(st, clones, i, yaw)
        accepted, s, nis = False, np.full((3, 3), np.nan), math.nan
        if not yaw or disp.yaw_frame_defined(clones.rot[i]):
            accepted, inn = self._update_augmented(disp.jacobian(st, clones, i, yaw), y, r=meas_cov)
            s, nis = inn.s, inn.nis
        return disp.DisplacementResult(
            float(stamp),
            float(t_start),
            accepted,
            y,
            s,
            nis,
            st.pos.copy(),
            st.rot.copy(),
            st.vel.copy(),
            self.cov[VEL, VEL].copy(),
        )

    def _update_augmented(self, h: np.ndarray, y: np.ndarray, r: np.ndarray) -> tuple[bool, Innovation]:
        """Kalman update of ``[δx, δc]`` with Jacobian ``h`` (m x (15 + 6N)) and innovation ``y``:
        the velocity update's gain and Joseph form (:mod:`velobins_ekf.update`) on the full
        covariance, then injection into the state and the clones, with their resets."""
        p = cl.assemble(self.cov, self._clones)
        pht = p @ h.T
        inn = kalman_innovation(y, pht, h @ pht, r, h)
        if self.config.gate_enabled and inn.nis > self.config.gate_threshold:
            return False, inn
        p_new = updated_covariance(p, inn, r)
        dx = inn.gain @ y
        inject(self._state, dx[:DIM], p_new)
        cl.inject_clones(self._clones, dx[DIM:], p_new)
        cl.split(positive_definite(p_new), self._cov, self._clones)
        return True, inn

    def _result(self, stamp: float, accepted: bool, y: np.ndarray, s: np.ndarray, nis: float) -> UpdateResult:
        st, p = self.state, self.cov
        return UpdateResult(
            stamp=float(stamp),
            accepted=accepted,
            innovation=y,
            innovation_cov=s,
            nis=nis,
            vel_world=st.vel.copy(),
            vel_body=st.body_velocity,
            vel_world_cov=p[VEL, VEL].copy(),
            vel_body_cov=body_velocity_covariance(st, p),
            pos=st.pos.copy(),
            rot=st.rot.copy(),
        )

    # ------------------------------------------------------------------ covariance hygiene
    def _symmetrise(self) -> None:
        p = self.cov
        np.add(p, p.T, out=self._tmp)
        np.multiply(self._tmp, 0.5, out=p)

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
        return body_velocity_covariance(self.state, self.cov)

    def twist_covariance(self, imu_dt: float) -> np.ndarray:
        """6x6 covariance of the Odometry twist, ROS order (body linear velocity, body rate).

        The rate is one raw gyro sample less the bias estimate, ``ω − b_g``: its covariance is the
        bias block of P plus the sample's white-noise variance σ_g²/dt (``imu_dt`` floored at 0.1 ms).
        """
        out = np.zeros((6, 6))
        out[0:3, 0:3] = self.twist_covariance_body()
        variance = white_noise_variance(self.config.gyro_noise_density, max(imu_dt, 1e-4))
        out[3:6, 3:6] = self.cov[BG, BG] + np.eye(3) * variance
        return out
