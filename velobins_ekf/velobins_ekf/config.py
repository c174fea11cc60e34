"""Configuration of the velocity-aided error-state EKF (paper §III-E).

One dataclass, :class:`EkfConfig`, holds every tunable of the filter core and of the time
handling wrapper; the ROS node maps its parameters onto it and nothing else defines a default.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

from velobins_common.constants import STANDARD_GRAVITY
from velobins_common.fields import param, param_spec

DISPLACEMENT_HISTORY_MARGIN = 0.5
"""Filter history [s] a displacement needs beyond its window (network latency): ``history_length``
must be at least window + this for the clone at the window start to be made by re-propagation (the
EKF node warns when it is not; offline evaluation raises it, ``velobins_eval.closed_loop``)."""


@dataclass(frozen=True)
class EkfConfig:
    """Noise model, initial uncertainty, gravity, gating and history of the EKF.

    IMU noise is the usual continuous-time model: white noise densities (``*_noise_density``)
    and bias random walks (``*_random_walk``). The filter discretises them per IMU interval dt as
    per-sample variances ``density² / dt`` (a sampled, zero-order-held IMU) and bias increments
    ``random_walk² · dt`` (see :mod:`velobins_ekf.propagation`).
    """

    acc_noise_density: float = param(0.02, min=1e-6, max=10.0, live=True)
    """Accelerometer white noise [m/s²/√Hz]; MEMS drone IMUs 0.002–0.05 (vibration included). Typical 0.02."""
    gyro_noise_density: float = param(0.002, min=1e-7, max=1.0, live=True)
    """Gyroscope white noise [rad/s/√Hz]; typical 1e-4 (datasheet) to 5e-3 (in flight). Typical 0.002."""
    acc_random_walk: float = param(1e-3, min=0.0, max=1.0, live=True)
    """Accelerometer bias random walk [m/s³/√Hz]; typical 1e-4–1e-2. Typical 1e-3."""
    gyro_random_walk: float = param(1e-4, min=0.0, max=0.1, live=True)
    """Gyroscope bias random walk [rad/s²/√Hz]; typical 1e-5–1e-3. Typical 1e-4."""
    gravity: float = param(STANDARD_GRAVITY, min=9.0, max=10.5)
    """Gravity magnitude g [m/s²]; the world gravity vector is (0, 0, -g) (ENU, z up). Typical 9.80665."""

    init_sigma_rot: float = param(math.radians(1.0), min=1e-6, max=math.pi)
    """Initial roll/pitch standard deviation [rad] (per axis of the body-frame error). Typical 0.017."""
    init_sigma_yaw: float = param(math.radians(1.0), min=1e-6, max=math.pi)
    """Initial yaw standard deviation [rad] (applied to the world-z component). Typical 0.017 from ground
    truth, up to π when yaw is unknown."""
    init_sigma_vel: float = param(0.1, min=1e-6, max=100.0)
    """Initial velocity standard deviation [m/s] per axis. Typical 0.1."""
    init_sigma_pos: float = param(1e-3, min=1e-9, max=1000.0)
    """Initial position standard deviation [m] per axis, > 0 (position is unobservable; it only grows).
    Typical 1e-3."""
    init_sigma_acc_bias: float = param(0.1, min=1e-6, max=10.0)
    """Initial accelerometer bias standard deviation [m/s²] per axis: the spread of the turn-on bias. Typical
    0.05–0.3; ``velobins calibrate`` measures it where its Allan stage applies (docs/calibrate.md §2)."""
    init_sigma_gyro_bias: float = param(0.01, min=1e-7, max=1.0)
    """Initial gyroscope bias standard deviation [rad/s] per axis: the spread of the turn-on bias. Typical
    0.005–0.05; ``velobins calibrate`` measures it where its Allan stage applies. A prior looser than the IMU's
    spread lets the filter turn the network's slow errors into a heading drift (docs/calibrate.md §2). A gyro
    the autopilot calibrates at rest before take-off leaves little: the shipped Crazyflie overlays set 0.001."""

    velocity_noise_floor: float = param(0.0, min=0.0, max=10.0, live=True)
    """Standard deviation [m/s] of white noise added to every velocity measurement's own, per body axis: the
    update uses R + floor² I. A network's variance (times ``variance_scale``) can be small where its error is
    not; a floor keeps the filter from trusting any one estimate beyond it. 0 (the default): R as given (the
    paper). ``velobins calibrate --fit ...,velocity_noise_floor`` fits it with the scale. Typical 0 or 0.1–5."""
    velocity_error_sigma: float = param(0.0, min=0.0, max=10.0)
    """Standard deviation [m/s] per body axis of a slow error of the velocity measurements, modelled as a
    first-order Gauss-Markov process b appended to the error state (velobins_ekf.velocity_error): z = Rᵀv + b + n.
    A network's estimates share most of their 1 s window, so its errors last 0.5–1 s (``velobins calibrate``
    prints how long); the paper's filter takes them as white (0, the default: the 15-D filter, operation for
    operation). Fit it with ``velobins calibrate --fit ... velocity_error_sigma velocity_error_tau``. Velocity
    methods only: displacement methods (clones) need 0. Typical 0 (white) or 0.2–2."""
    velocity_error_tau: float = param(0.5, min=0.01, max=60.0)
    """Correlation time τ [s] of that error (its autocorrelation is exp(−|Δt|/τ)); unused while
    ``velocity_error_sigma`` is 0. Typical 0.25–1 (the network's window is 1 s)."""

    gate_enabled: bool = param(False, live=True)
    """χ² innovation gating of velocity updates. Off by default: the paper uses no gating (§III-E)."""
    gate_threshold: float = param(16.27, min=0.01, max=1e6, live=True)
    """NIS threshold (3 dof) above which an update is rejected when gating is on; 16.27 = χ²₃ 99.9 %."""

    history_length: float = param(1.5, min=0.01, max=60.0)
    """Seconds of IMU samples and filter snapshots kept to apply late (out-of-order) measurements at
    their own stamp and to make a displacement's clone at its window start by re-propagation (1 s
    windows + latency: 1.5); older measurements are dropped and counted. Typical 0.5–2."""
    snapshot_period: float = param(0.05, min=1e-4, max=10.0)
    """Minimum spacing [s] of the state snapshots re-propagation starts from (one is also taken after
    every update). Smaller = less re-propagation work per late measurement, more memory. Typical 0.05."""
    max_pending: int = param(100, min=1, max=100000)
    """Velocity measurements waiting for IMU to reach their stamp, at most; beyond it the oldest is
    dropped and counted. Typical 100."""
    max_clones: int = param(25, min=1, max=1000)
    """Cloned past poses kept for displacement measurements (TLIO, EqNIO, IMO), at most; beyond it the
    oldest is marginalised and counted. Typical 25 (1 s windows at 20 Hz plus latency)."""
    displacement_yaw_frame: bool = param(True)
    """Displacement measurements are expressed in the gravity-aligned yaw frame of the window start
    (TLIO's local frame, ``R_z(ψ_s)ᵀ (p_e − p_s)``); false: in the world frame (``p_e − p_s``)."""
    init_yaw: float = param(0.0, min=-2 * math.pi, max=2 * math.pi)
    """Yaw [rad] given to a self-initialised filter (yaw is unobservable from gravity). Typical 0."""
    init_window: float = param(0.2, min=0.01, max=10.0)
    """Seconds of IMU averaged for gravity alignment when the filter initialises itself. Typical 0.2–1."""

    max_imu_interval: float = param(0.25, min=1e-3, max=10.0, live=True)
    """Longest IMU interval [s] the filter propagates. A longer gap (samples lost, a stopped driver) or a
    forward stamp jump holds the filter instead: no propagation across it, the state kept, the covariance
    grown by what the gap can hide (velobins_ekf.integrity.gap_inflation), measurements stamped inside the
    gap dropped; counted as imu_gaps. Typical 0.1–0.3: 0.25 is 25 lost samples at 100 Hz, longer than a
    busy publisher's stall (a loaded machine's graph tests saw 0.11 s), short enough that one mean sample
    still describes the interval."""
    gap_accel_sigma: float = param(1.0, min=0.0, max=100.0, live=True)
    """Acceleration σ [m/s²] per axis that a hold assumes over an IMU gap: the velocity σ grows by it ×
    the gap (velobins_ekf.integrity.gap_inflation), so the first update after the gap is weighed by
    what the vehicle could do meanwhile. NanoBench's Crazyflie flights change velocity by 0.45–0.67
    m/s² per axis RMS over 0.3 s (benchmarks/bench_gap_hold.py); raise it for an agile vehicle."""
    gap_rate_sigma: float = param(0.3, min=0.0, max=10.0, live=True)
    """Angular rate σ [rad/s] per world axis that a hold assumes over an IMU gap: the attitude σ grows by
    it × the gap, up to 0.5 rad (velobins_ekf.integrity.MAX_HELD_ROT_SIGMA). NanoBench's flights turn
    0.29 rad/s RMS over 0.3 s; raise it for an agile vehicle."""
    imu_check_window: float = param(1.0, min=0.05, max=60.0, live=True)
    """Seconds of IMU whose mean specific force is checked for plausibility (unit, frame) while the filter
    runs; the alignment window is checked before a self-initialisation. Typical 1."""
    imu_force_min: float = param(0.5, min=0.01, max=1.0, live=True)
    """Mean specific-force magnitude, in g, below which the IMU is implausible (an IMU in g reads ~0.1 g,
    a dead accelerometer ~0). Typical 0.5."""
    imu_force_max: float = param(3.0, min=1.0, max=1000.0, live=True)
    """Mean specific-force magnitude, in g, above which the IMU is implausible (wrong scale). Typical 3."""
    imu_max_tilt: float = param(1.3, min=0.1, max=math.pi, live=True)
    """Largest angle [rad] between the mean specific force and body +z (FLU): a multirotor's thrust and, at
    rest, gravity's reaction point along +z; an FRD IMU published as FLU reads ~π. Typical 1.3 (75°)."""

    def live_fields(self) -> frozenset[str]:
        """Fields a running filter can take a new value of (:meth:`VelocityEkf.set_config`): the noise
        model and the gate, which only enter the next propagation or update."""
        return frozenset(f.name for f in fields(self) if param_spec(f).live)

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool):
                continue
            if not math.isfinite(float(value)):
                raise ValueError(f"EkfConfig.{f.name}: must be finite, got {value!r}")
            nonneg = {"acc_random_walk", "gyro_random_walk", "gap_accel_sigma", "gap_rate_sigma"}
            nonneg.update(("velocity_error_sigma", "velocity_noise_floor"))
            if f.name == "init_yaw":
                continue
            if f.name in nonneg and value < 0:
                raise ValueError(f"EkfConfig.{f.name}: must be >= 0, got {value!r}")
            if f.name not in nonneg and value <= 0:
                raise ValueError(f"EkfConfig.{f.name}: must be > 0, got {value!r}")
