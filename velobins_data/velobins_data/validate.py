"""Physical plausibility of a flight: one validator for every adapter (issue 13).

:meth:`Flight.validate <velobins_data.flight.Flight.validate>` enforces the *contract*
(shapes, finite values, increasing stamps, unit quaternions, rotor sign/range). A flight can meet
it and still be garbage: an accelerometer in g, swapped columns, a 1e30 spike, a wrong frame.
This module checks the *physics*, with thresholds measured on every real NanoBench flight and on
every simulator preset (``docs/data_formats.md``, "First step for your own data").

Each check has a stable name (:data:`CHECKS`) that a user can pass as ``--allow NAME``.
:func:`inspect_flight` gathers the statistics and every :class:`Finding` (used by ``velobins
check``); :func:`check_flight` raises :class:`PlausibilityError` on the first finding that is not
allowed, and :class:`~velobins_data.datasets.errors.UnusableFlightError` for a too-short flight
(skipped and counted by :func:`velobins_data.datasets.load_flights`). Everything is vectorised
numpy (``benchmarks/bench_validation.py`` prints its cost against loading, scoring and training).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field

import numpy as np
from scipy.spatial.transform import Rotation

from velobins_common.constants import ROTOR_SPEED
from velobins_common.errors import OptionError
from velobins_data.datasets.errors import DatasetError, UnusableFlightError
from velobins_data.flight import Flight

CHECKS: dict[str, str] = {
    "stamps": "absolute stamps below 1e10 s (not ns, no corrupt stamp) and no logging gap above max_gap_s",
    "specific_force": "median |f| over the flight near g (catches acc in g, gyro in the acc columns)",
    "gyro": "median |ω| in rad/s, not deg/s (catches deg/s and acc values in the gyro columns)",
    "input_limits": "every acc / gyro axis within the full scale of flight IMUs (catches spikes, wrong units)",
    "ground_truth_limits": "every v / p axis within 100 m/s and 10 km (catches spikes, mm, UTM/ECEF positions)",
    "imu_frozen": "acc and gyro readings change: none repeats bit-identically longer than max_frozen_imu_s "
    "(catches a frozen or constant IMU)",
    "position_jump": "no step of p larger than v·dt allows (catches mocap glitches, p/v from different sources)",
    "rotor_range": "rotor signal logged (no all-zero column) and in its kind's range (catches RPM given as rad/s)",
    "gravity_residual": "median ‖R·f − g·e_z − dv/dt‖ small (catches frame errors, g units, swapped columns)",
    "duration": "flight at least min_duration_s long; shorter flights are skipped and counted, not an error",
}
"""Every check name (usable with ``--allow``) and what it verifies, in evaluation order."""


@dataclass(frozen=True)
class PlausibilityLimits:
    """Every threshold of the validator, in one place (measured ranges: ``docs/data_formats.md``)."""

    min_duration_s: float = 1.0
    """[s] Shortest usable flight: one input window of the network (``ModelConfig.window_s``, 1 s
    as in the paper); a shorter flight cannot give a single training or evaluation window."""
    max_abs_stamp_s: float = 1e10
    """[s] Largest absolute stamp (year 2286 as Unix time): larger means ns/µs stamps or a corrupt row."""
    max_gap_s: float = 0.5
    """[s] Largest step between stamps: a longer logging dropout breaks any window across it
    (NanoBench's largest step is 0.03 s)."""
    specific_force_median_g: tuple[float, float] = (0.5, 3.0)
    """[g] Range of the flight's median |f|. Flight needs thrust ≈ 1 g (NanoBench 1.00-1.03 g,
    simulator 0.99-1.47 g); acc in g reads 0.1 g here, ft/s² 3.3 g, mg or cm/s² over 100 g."""
    max_abs_acc_g: float = 25.0
    """[g] Largest accelerometer axis reading: above the ±24 g full scale of the widest flight IMU
    (BMI088); NanoBench peaks at 10.6 g (landing impacts)."""
    max_abs_gyro: float = 40.0
    """[rad/s] Largest gyro axis reading: 2290 deg/s, beyond the ±2000 deg/s full scale of
    flight-controller gyros (BMI088, ICM-42688, MPU-6000); NanoBench peaks at 7.1, the simulator at 4.4."""
    max_frozen_imu_s: float = 2.0
    """[s] Longest run of bit-identical consecutive accelerometer (or gyro) readings: a real IMU's
    noise changes a digit every sample (NanoBench: no reading ever repeats), the noise-free
    simulator holds still for 1.5 s before take-off; a frozen driver or a constant column repeats
    one reading for the whole flight (and ``calibrate`` would then fit a noise of zero)."""
    max_gyro_median: float = 8.0
    """[rad/s] Largest median |ω|: a whole flight turning at 460 deg/s is implausible (NanoBench
    ≤ 0.45 rad/s, simulator ≤ 2.3); deg/s data of a lively flight and acc in the gyro columns exceed it."""
    residual_window_s: float = 0.15
    """[s] Averaging window of the gravity residual: mocap velocity and IMU noise are both smoothed."""
    max_gravity_residual: float = 2.0
    """[m/s²] Largest median gravity residual: NanoBench 0.13-0.81 (IMU bias, vibration), simulator
    0.05-0.32; acc in g gives ≈ 8.8, an FRD body ≈ 19.6, swapped acc/gyro columns ≈ 10."""
    max_abs_velocity: float = 100.0
    """[m/s] Largest ground-truth velocity axis: twice the fastest racing drones."""
    max_abs_position: float = 1e4
    """[m] Largest ground-truth position axis: a local ENU frame; mm, UTM or ECEF exceed it."""
    position_jump_m: float = 0.5
    """[m] Position step allowed beyond 2·|v|·dt (per axis): NanoBench's largest excess is 2.4 mm."""
    max_rotor_speed: float = 1e4
    """[rad/s] Largest ``rpm``-kind value (95 000 RPM; hobby motors stay below ~60 000 RPM): RPM
    given as rad/s exceeds it (a 0.75 kg quad hovers at ≈ 10 000 RPM)."""
    min_peak_rotor_speed: float = 10.0
    """[rad/s] Smallest flight maximum of an ``rpm``-kind signal: below it the column holds a
    normalised command, not a speed."""


DEFAULT_LIMITS = PlausibilityLimits()
"""The limits used when none are given."""


@dataclass(frozen=True)
class Finding:
    """One failed check.

    Attributes:
        check: name in :data:`CHECKS` (what ``--allow`` takes).
        field: the Flight field at fault (``acc``, ``v``, ``rotor``, ``t``, ...); the message
            names the axis or column (``acc_x``, ``rotor_2``).
        row: first bad row (0-based, of the loaded flight) where it applies, else ``None``.
        message: the measured value and the likely cause.
        fatal: ``False`` only for ``duration`` (the flight is skipped, not an error).
    """

    check: str
    field: str
    row: int | None
    message: str
    fatal: bool = True


@dataclass
class FlightInspection:
    """Statistics of one flight (the columns of ``velobins check``) and its findings."""

    name: str
    source: str
    rows: int
    duration_s: float
    imu_rate_hz: float
    rotor_rate_hz: float
    """Rate [Hz] at which the rotor signal changes (the IMU rate when rows are shared)."""
    max_gap_s: float
    gaps: int
    """Steps longer than 1.5 × the median step: at least one missing sample (a bound of exactly 2 ×
    would count a single missing sample or not depending on stamp jitter)."""
    dropped_stamps: int
    median_specific_force: float
    gravity_residual: float
    speed_range: tuple[float, float]
    rotor_range: tuple[float, float]
    rotor_kind: str
    findings: list[Finding] = field(default_factory=list)

    def blocking(self, allow: Iterable[str] = ()) -> Finding | None:
        """The finding :func:`check_flight` raises for, given ``allow``; ``None`` if it passes.

        A too-short flight comes first (it is skipped whatever else is wrong with it), then the
        first fatal finding not overridden.
        """
        allowed = parse_allow(allow)
        pending = [f for f in self.findings if f.check not in allowed]
        return next((f for f in pending if not f.fatal), pending[0] if pending else None)

    def to_dict(self) -> dict[str, object]:
        """Plain JSON-ready dict."""
        return asdict(self)


class PlausibilityError(DatasetError):
    """A flight is well formed but physically implausible; names file, field, row, check and cause."""

    def __init__(self, source: str, finding: Finding):
        super().__init__(source, finding.field, finding.message, finding.row)
        self.check = finding.check
        self.finding = finding
        self.args = (f"{self.args[0]} [check '{finding.check}'; --allow {finding.check} overrides]",)


def parse_allow(allow: Iterable[str] | str | None) -> frozenset[str]:
    """Check names from ``allow`` (names or comma-separated names); ``ValueError`` lists the valid ones."""
    if allow is None:
        return frozenset()
    items = [allow] if isinstance(allow, str) else list(allow)
    names = {n.strip() for item in items for n in str(item).split(",") if n.strip()}
    unknown = sorted(names - CHECKS.keys())
    if unknown:
        raise OptionError("--allow", f"unknown check name(s) {unknown}; valid names: {', '.join(CHECKS)}")
    return frozenset(names)


# ------------------------------------------------------------------------------------- helpers
def _first_outside(arr: np.ndarray, limit: float) -> tuple[int, int] | None:
    """(row, column) of the first entry with |x| > limit, else None."""
    bad = np.abs(arr) > limit
    if not bad.any():
        return None
    row = int(np.argmax(bad.any(axis=1)))
    return row, int(np.argmax(bad[row]))


_AXES = "xyz"


def _axis_limit(check: str, name: str, arr: np.ndarray, limit: float, unit: str, cause: str) -> Finding | None:
    hit = _first_outside(arr, limit)
    if hit is None:
        return None
    row, col = hit
    column = f"{name}_{_AXES[col]}"
    msg = f"|{column}| = {abs(arr[row, col]):.4g} {unit} exceeds {limit:.4g} {unit}: {cause}"
    return Finding(check, name, row, msg)


def gravity_residual(flight: Flight, window_s: float, acc_clip: float = np.inf) -> float:
    """Median over windows of ``‖mean(R·f) − g·e_z − Δv/Δt‖`` [m/s²] (NaN when too short).

    ``R·f`` is averaged by trapezoid integration over ``[t_{k-h}, t_{k+h}]`` (``2h`` steps ≈
    ``window_s``), which is exactly the quantity ``(v_{k+h} − v_{k-h}) / (t_{k+h} − t_{k-h})``
    estimates; both sides are smoothed the same way, so mocap and IMU noise average out. ``R·f``
    is clipped to ``acc_clip`` so a single spike spoils only its own windows.
    """
    t = flight.t
    h = max(1, round(window_s / (2.0 * float(np.median(np.diff(t))))))
    if t.shape[0] <= 2 * h:
        return float("nan")
    fw = np.clip(Rotation.from_quat(flight.q).apply(flight.acc), -acc_clip, acc_clip)
    fw[:, 2] -= flight.gravity
    integral = np.zeros_like(fw)
    np.cumsum(0.5 * (fw[1:] + fw[:-1]) * np.diff(t)[:, None], axis=0, out=integral[1:])
    span = (t[2 * h :] - t[: -2 * h])[:, None]
    mean_acc = (integral[2 * h :] - integral[: -2 * h]) / span
    dv_dt = (flight.v[2 * h :] - flight.v[: -2 * h]) / span
    with np.errstate(over="ignore", invalid="ignore"):
        return float(np.median(np.linalg.norm(mean_acc - dv_dt, axis=1)))


# ------------------------------------------------------------------------------------- checks
def _check_stamps(flight: Flight, lim: PlausibilityLimits, dt: np.ndarray) -> list[Finding]:
    out = []
    bad = np.abs(flight.t) > lim.max_abs_stamp_s
    if bad.any():
        row = int(np.argmax(bad))
        msg = (
            f"|t| = {abs(flight.t[row]):.4g} s exceeds {lim.max_abs_stamp_s:.0e} s: stamps in ns/µs, or a corrupt stamp"
        )
        out.append(Finding("stamps", "t", row, msg))
    k = int(np.argmax(dt))
    if dt[k] > lim.max_gap_s:
        msg = (
            f"gap of {dt[k]:.4g} s before this row (median step {np.median(dt) * 1e3:.3g} ms) exceeds "
            f"{lim.max_gap_s} s: a logging dropout, or a corrupt stamp"
        )
        out.append(Finding("stamps", "t", k + 1, msg))
    return out


def _check_specific_force(flight: Flight, lim: PlausibilityLimits, median_f: float) -> list[Finding]:
    g = flight.gravity
    lo, hi = (x * g for x in lim.specific_force_median_g)
    if lo <= median_f <= hi:
        return []
    if median_f < lo:
        cause = (
            "accelerometer in g? expected m/s² (about 9.81 in flight)"
            if 0.7 < median_f < 1.5
            else "the acc columns hold something else (gyro? swapped columns?)"
        )
    elif abs(median_f - g * g) < 0.2 * g * g:
        cause = "acc multiplied by g twice? (m/s² in a file the adapter reads as g)"
    elif 30.0 < median_f < 34.0:
        cause = "accelerometer in ft/s²? expected m/s²"
    else:
        cause = "accelerometer in mg or cm/s²? expected m/s²" if median_f > 100 * g else "implausibly large thrust"
    msg = f"median |f| = {median_f:.2f} m/s² outside [{lo:.2f}, {hi:.2f}]: {cause}"
    return [Finding("specific_force", "acc", None, msg)]


def _check_gyro(flight: Flight, lim: PlausibilityLimits, median_w: float) -> list[Finding]:
    if median_w <= lim.max_gyro_median:
        return []
    near_g = abs(median_w - flight.gravity) < 0.15 * flight.gravity
    cause = "acc values in the gyro columns (swapped columns)?" if near_g else "gyro in deg/s? expected rad/s"
    msg = f"median |ω| = {median_w:.3g} rad/s exceeds {lim.max_gyro_median} rad/s: {cause}"
    return [Finding("gyro", "gyro", None, msg)]


def _check_limits(flight: Flight, lim: PlausibilityLimits) -> list[Finding]:
    amax = lim.max_abs_acc_g * flight.gravity
    acc_cause = f"beyond any flight IMU ({lim.max_abs_acc_g:g} g): a spike or wrong unit"
    found = [
        _axis_limit("input_limits", "acc", flight.acc, amax, "m/s²", acc_cause),
        _axis_limit(
            "input_limits", "gyro", flight.gyro, lim.max_abs_gyro, "rad/s", "beyond ±2000 deg/s: spike or deg/s"
        ),
        _axis_limit("ground_truth_limits", "v", flight.v, lim.max_abs_velocity, "m/s", "a spike, or mm/s or cm/s"),
        _axis_limit("ground_truth_limits", "p", flight.p, lim.max_abs_position, "m", "a spike, mm, or UTM/ECEF?"),
    ]
    return [f for f in found if f is not None]


def longest_repeat(t: np.ndarray, x: np.ndarray) -> tuple[float, int]:
    """Longest time [s] over which the rows of ``x`` repeat bit-identically, and the row it starts at."""
    same = (x[1:] == x[:-1]).all(axis=1)
    if not same.any():
        return 0.0, 0
    edges = np.flatnonzero(np.diff(np.concatenate(([0], same.astype(np.int8), [0]))))
    starts, ends = edges[::2], edges[1::2]
    spans = t[ends] - t[starts]
    k = int(np.argmax(spans))
    return float(spans[k]), int(starts[k])


def _check_frozen(flight: Flight, lim: PlausibilityLimits) -> list[Finding]:
    out = []
    for name in ("acc", "gyro"):
        span, row = longest_repeat(flight.t, getattr(flight, name))
        if span > lim.max_frozen_imu_s:
            msg = (
                f"{name} repeats one reading bit-identically for {span:.3g} s from this row (limit "
                f"{lim.max_frozen_imu_s:g} s): a frozen or constant IMU, not a measurement"
            )
            out.append(Finding("imu_frozen", name, row, msg))
    return out


def _check_position_jump(flight: Flight, lim: PlausibilityLimits, dt: np.ndarray) -> list[Finding]:
    speed = np.abs(flight.v)
    allowed = lim.position_jump_m + 2.0 * np.maximum(speed[1:], speed[:-1]) * dt[:, None]
    with np.errstate(over="ignore", invalid="ignore"):
        step = np.abs(np.diff(flight.p, axis=0))
        bad = step > allowed
    if not bad.any():
        return []
    k = int(np.argmax(bad.any(axis=1)))
    c = int(np.argmax(bad[k]))
    msg = (
        f"p_{_AXES[c]} jumps {step[k, c]:.4g} m in {dt[k] * 1e3:.3g} ms from row {k} while v allows "
        f"{allowed[k, c]:.3g} m: a mocap glitch, or p and v from different sources or units"
    )
    return [Finding("position_jump", "p", k + 1, msg)]


def _check_rotor(flight: Flight, lim: PlausibilityLimits) -> list[Finding]:
    r = flight.rotor
    if not r.any():
        return [Finding("rotor_range", "rotor", None, "rotor signal is 0 in every row: motors not logged")]
    dead = np.flatnonzero(~r.any(axis=0))
    if dead.size:
        k = int(dead[0])
        return [Finding("rotor_range", "rotor", None, f"rotor_{k + 1} is 0 in every row: a motor not logged")]
    if flight.rotor_kind != ROTOR_SPEED:
        return []  # a command: Flight.validate already enforces [0, 1]
    hit = _first_outside(r, lim.max_rotor_speed)
    if hit is not None:
        row, k = hit
        msg = f"rotor_{k + 1} = {r[row, k]:.4g} rad/s exceeds {lim.max_rotor_speed:.4g} rad/s: speeds in RPM? (× 2π/60)"
        return [Finding("rotor_range", "rotor", row, msg)]
    peak = float(r.max())
    if peak < lim.min_peak_rotor_speed:
        msg = (
            f"largest rotor speed {peak:.3g} rad/s < {lim.min_peak_rotor_speed} rad/s: "
            "a normalised command labelled rpm? use pwm_ columns"
        )
        return [Finding("rotor_range", "rotor", None, msg)]
    return []


def inspect_flight(flight: Flight, limits: PlausibilityLimits = DEFAULT_LIMITS) -> FlightInspection:
    """Every statistic and every finding of ``seq`` (nothing raised; :func:`check_flight` decides)."""
    lim = limits
    dt = np.diff(flight.t)
    med_dt = float(np.median(dt))
    duration = flight.duration
    with np.errstate(over="ignore"):
        median_f = float(np.median(np.linalg.norm(flight.acc, axis=1)))
        median_w = float(np.median(np.linalg.norm(flight.gyro, axis=1)))
        speed = np.linalg.norm(flight.v, axis=1)
    residual = gravity_residual(flight, lim.residual_window_s, acc_clip=lim.max_abs_acc_g * flight.gravity)
    changes = int(np.count_nonzero((np.diff(flight.rotor, axis=0) != 0).any(axis=1)))
    findings = _check_stamps(flight, lim, dt)
    findings += _check_specific_force(flight, lim, median_f)
    findings += _check_gyro(flight, lim, median_w)
    findings += _check_limits(flight, lim)
    findings += _check_frozen(flight, lim)
    findings += _check_position_jump(flight, lim, dt)
    findings += _check_rotor(flight, lim)
    if residual > lim.max_gravity_residual:  # NaN (too short to tell) passes
        msg = (
            f"median ‖R·f − g·e_z − dv/dt‖ = {residual:.3g} m/s² exceeds {lim.max_gravity_residual} m/s²: IMU and "
            "ground truth disagree (body not FLU, q not body→world, v not world, acc in g, swapped columns?)"
        )
        findings.append(Finding("gravity_residual", "acc/q/v", None, msg))
    if duration < lim.min_duration_s:
        msg = f"flight lasts {duration:.3g} s < {lim.min_duration_s} s: too short for training windows; skipped"
        findings.append(Finding("duration", "t", None, msg, fatal=False))
    return FlightInspection(
        name=flight.name,
        source=flight.source,
        rows=len(flight),
        duration_s=duration,
        imu_rate_hz=1.0 / med_dt,
        rotor_rate_hz=changes / duration if duration > 0 else float("nan"),
        max_gap_s=float(dt.max()),
        gaps=int(np.count_nonzero(dt > 1.5 * med_dt)),
        dropped_stamps=int(flight.metadata.get("dropped_stamps", 0)),
        median_specific_force=median_f,
        gravity_residual=residual,
        speed_range=(float(speed.min()), float(speed.max())),
        rotor_range=(float(flight.rotor.min()), float(flight.rotor.max())),
        rotor_kind=flight.rotor_kind,
        findings=findings,
    )


def check_flight(
    flight: Flight, allow: Iterable[str] = (), limits: PlausibilityLimits = DEFAULT_LIMITS
) -> FlightInspection:
    """Inspect ``seq`` and raise on the first finding not in ``allow``; return the inspection.

    Raises:
        UnusableFlightError: shorter than ``limits.min_duration_s`` (and ``duration`` not allowed):
            callers loading many flights skip and count it.
        PlausibilityError: the first other finding not allowed (file, field, row, value, cause).
        ValueError: an unknown name in ``allow``.
    """
    inspection = inspect_flight(flight, limits)
    blocking = inspection.blocking(allow)
    if blocking is None:
        return inspection
    if not blocking.fatal:
        err = UnusableFlightError(flight.source, blocking.field, blocking.message, blocking.row)
        err.args = (f"{err.args[0]} [check '{blocking.check}'; --allow {blocking.check} overrides]",)
        raise err
    raise PlausibilityError(flight.source, blocking)
