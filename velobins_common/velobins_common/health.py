"""Health of a running node, decided without ROS: input rates, stream states, filter consistency.

The nodes publish what these functions decide on ``/diagnostics`` (``velobins_ros.health`` is the
thin ROS side). Everything here takes the current time as an argument, so the tests drive it with
made-up clocks:

* :class:`RateMeter`: arrivals of one input stream (rate over a sliding window, age of the last);
* :class:`SampleLoss`: the share of a stream's samples missing, told by the gaps in its stamps (so
  the expected rate needs no configuration and holds at any replay speed);
* :class:`LatencyMeter`: percentiles of a delay (IMU stamp -> odometry publish);
* :class:`NisMonitor`: a windowed χ² test of the filter's normalised innovation squared, with
  hysteresis;
* :func:`net_status` / :func:`ekf_status`: the level and the message that names the cause, in a
  fixed order of precedence (the first problem that explains the others wins);
* :class:`SilenceAlarm`: when to log "no output for X s" while the inputs still arrive (throttled).

Levels are those of ``diagnostic_msgs/DiagnosticStatus`` (OK, WARN, ERROR, STALE).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field

from velobins_common.stats import chi2_quantile

OK, WARN, ERROR, STALE = 0, 1, 2, 3
"""Diagnostic levels (the values of diagnostic_msgs/DiagnosticStatus)."""
LEVEL_NAMES = {OK: "OK", WARN: "WARN", ERROR: "ERROR", STALE: "STALE"}


@dataclass(frozen=True)
class Status:
    """One decision: level, a message naming the cause, and the key-values that back it up."""

    level: int
    message: str
    values: dict[str, str] = field(default_factory=dict)


class RateMeter:
    """Arrivals of one stream: rate over the last ``window`` seconds and age of the last arrival.

    Args:
        window: length of the sliding window the rate is averaged over [s].
    """

    def __init__(self, window: float = 2.0):
        self.window = window
        self._times: deque[float] = deque()
        self.count = 0
        self.first: float | None = None
        self.last: float | None = None
        self.last_stamp: float | None = None

    def tick(self, now: float, stamp: float | None = None) -> None:
        """One arrival at time ``now`` [s] (a monotonic clock); ``stamp`` = its header stamp [s]."""
        self._times.append(now)
        self.count += 1
        if self.first is None:
            self.first = now
        self.last = now
        if stamp is not None:
            self.last_stamp = stamp
        self._expire(now)

    def _expire(self, now: float) -> None:
        while self._times and self._times[0] < now - self.window:
            self._times.popleft()

    def rate(self, now: float) -> float:
        """Arrivals per second over the last ``window`` seconds (or since the first, if shorter)."""
        self._expire(now)
        if self.first is None:
            return 0.0
        span = min(self.window, now - self.first)
        return len(self._times) / span if span > 0 else 0.0

    def age(self, now: float) -> float | None:
        """Seconds since the last arrival; None if nothing arrived yet."""
        return None if self.last is None else now - self.last


class SampleLoss:
    """Share of a stream's samples missing over the last ``window`` seconds of its stamps.

    The stream's period is the median spacing of its recent stamps (robust to a minority of
    holes; recomputed every ``min_samples`` stamps, so :meth:`period` is cheap per sample); the
    samples expected over the stamps' span are ``span / period + 1``, those received are counted.
    Lost in transport, dropped by a full queue or never sent: a hole in the stamps is a loss,
    whatever the replay speed.
    """

    def __init__(self, window: float = 2.0, min_samples: int = 10, refresh: int = 200):
        self.window, self.min_samples, self.refresh = window, min_samples, refresh
        self._stamps: deque[float] = deque()
        self._period: float | None = None
        self._since = 0  # stamps added since the period was computed

    def add(self, stamp: float) -> None:
        """One received sample's stamp [s]; a stamp going back (a bag loop) starts again."""
        st = self._stamps
        if st and stamp <= st[-1]:
            st.clear()
            self._period = None
        st.append(stamp)
        self._since += 1
        while st[0] < stamp - self.window:
            st.popleft()

    def period(self) -> float | None:
        """Median stamp spacing [s]; None with fewer than ``min_samples`` stamps."""
        st = self._stamps
        if len(st) < self.min_samples:
            return None
        if self._period is None or self._since >= self.refresh:
            diffs = sorted(b - a for a, b in zip(st, list(st)[1:], strict=False))
            self._period, self._since = diffs[len(diffs) // 2], 0
        return self._period

    def loss(self) -> float | None:
        """Share of the samples expected from the stamps that did not arrive, in [0, 1); None while unknown."""
        period = self.period()
        if period is None or period <= 0:
            return None
        expected = (self._stamps[-1] - self._stamps[0]) / period + 1.0
        return max(0.0, 1.0 - len(self._stamps) / expected)


class LatencyMeter:
    """The last ``size`` values of a delay [s] and their percentiles."""

    def __init__(self, size: int = 500):
        self._values: deque[float] = deque(maxlen=size)

    def add(self, seconds: float) -> None:
        if math.isfinite(seconds):
            self._values.append(seconds)

    def percentile(self, q: float) -> float | None:
        """The ``q`` quantile (0..1, nearest rank) of the kept values; None when there are none."""
        if not self._values:
            return None
        ordered = sorted(self._values)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class CountDelta:
    """What a growing counter gained since the previous call (so a status shows new drops only).

    A counter that shrank was replaced (a predictor rebuilt after a time jump): its whole content
    counts as new.
    """

    def __init__(self) -> None:
        self._prev: dict[str, int] = {}

    def since(self, counts: Mapping[str, int]) -> dict[str, int]:
        """Non-zero gains of ``counts`` since the previous call."""
        new = {k: v - self._prev.get(k, 0) for k, v in counts.items()}
        if any(v < 0 for v in new.values()) or any(k not in counts for k in self._prev):
            new = dict(counts)
        self._prev = dict(counts)
        return {k: v for k, v in new.items() if v}


class NisMonitor:
    """Consistency of a filter: a windowed χ² test of the NIS of its last ``window`` updates, with hysteresis.

    For a consistent filter with independent innovations of ``dof`` dimensions, the sum of the last
    ``window`` NIS values is χ²(window · dof). The test is one-sided: a filter that trusts a wrong
    state (an IMU in the wrong unit or frame, a model outside its domain) has innovations far larger
    than their covariance says, so the sum grows; a conservative measurement covariance (NIS below
    dof, as a bin distribution's variance often is) is not a fault and only shows in the values. A
    network error that drifts slowly is not seen at all: the filter follows it and its innovations stay
    small (docs/ros_interface.md).

    * :attr:`raised` becomes True when a full window's sum exceeds the χ²(window · dof) quantile of
      probability ``1 − alarm_probability``: a false alarm per window at most that likely for white
      innovations (a network's are correlated, which is why the probability is small);
    * it clears only once the sum has fallen back below the median of that distribution (a mean NIS
      of about ``dof``): hysteresis, so a filter at the edge does not flap.

    A discontinuity the filter could not model (a hold over an IMU gap keeps the attitude and velocity
    of before it, off by what the gap hid) is passed to :meth:`mark`: while the updates just after it are in
    the window, :meth:`message` names it as the cause rather than the IMU and the network.
    """

    def __init__(self, window: int = 40, dof: int = 3, alarm_probability: float = 1e-3, coverage: float = 0.95):
        self.window, self.dof, self.coverage = window, dof, coverage
        self.alarm_probability = alarm_probability
        tail = 0.5 * (1.0 - coverage)
        self.lower = chi2_quantile(tail, dof)
        self.upper = chi2_quantile(1.0 - tail, dof)
        self.raise_sum = chi2_quantile(1.0 - alarm_probability, window * dof)
        self.clear_sum = chi2_quantile(0.5, window * dof)
        self._values: deque[float] = deque(maxlen=window)
        self._sum = 0.0
        self.raised = False
        self.raises = 0
        self.total = 0
        self._mark: tuple[str, int] | None = None  # (what, total at the mark)

    def mark(self, what: str) -> None:
        """``what`` (e.g. "IMU gap of 1.5 s") happened before the next update: see the class docstring."""
        self._mark = (what, self.total)

    def marked(self) -> str | None:
        """The last :meth:`mark` while the first update after it is still in the window, else None."""
        if self._mark is None or not 1 <= self.total - self._mark[1] <= len(self._values):
            return None
        return self._mark[0]

    def add(self, nis: float) -> None:
        """One update's NIS (non-finite values are ignored); updates :attr:`raised`."""
        if not math.isfinite(nis):
            return
        if len(self._values) == self.window:
            self._sum -= self._values[0]
        self._values.append(float(nis))
        self._sum += float(nis)
        self.total += 1
        if len(self._values) < self.window:
            return
        total = sum(self._values) if self.total % self.window == 0 else self._sum  # bound round-off drift
        self._sum = total
        if not self.raised and total > self.raise_sum:
            self.raised = True
            self.raises += 1
        elif self.raised and total < self.clear_sum:
            self.raised = False

    def reset(self) -> None:
        """Forget the window (a restarted filter); the raise count is kept."""
        self._values.clear()
        self._sum = 0.0
        self.raised = False
        self._mark = None

    def __len__(self) -> int:
        return len(self._values)

    def share_inside(self) -> float | None:
        """Fraction of the kept values inside the two-sided ``coverage`` interval; None when there are none."""
        if not self._values:
            return None
        return sum(self.lower <= v <= self.upper for v in self._values) / len(self._values)

    def mean(self) -> float | None:
        """Mean of the kept values; None when there are none."""
        return self._sum / len(self._values) if self._values else None

    def message(self) -> str:
        """What a raised test says: the window's mean against the alarm, and the likely cause."""
        marked = self.marked()
        cause = (
            "the IMU and the network disagree (IMU unit or frame, a model outside its training domain)"
            if marked is None
            else f"after the {marked} (filter held): the attitude and velocity it kept are off by what the gap "
            "hid, until the updates correct them"
        )
        return (
            f"filter inconsistent: mean NIS {self.mean():.2f} over the last {len(self)} updates > "
            f"{self.raise_sum / self.window:.2f} (χ²{self.window * self.dof} at {1 - self.alarm_probability:.1%}, "
            f"consistent ≈ {self.dof}): {cause}"
        )

    def values(self) -> dict[str, str]:
        """Key-values for a diagnostic status."""
        out = {
            "NIS updates (window)": str(len(self._values)),
            f"NIS {self.coverage:.0%} interval (χ²{self.dof})": f"[{self.lower:.3f}, {self.upper:.3f}]",
            "NIS window mean alarm above": f"{self.raise_sum / self.window:.3f}",
            "NIS alarms": str(self.raises),
        }
        share, mean = self.share_inside(), self.mean()
        if share is not None and mean is not None:
            out["NIS share inside"] = f"{share:.2f}"
            out["NIS mean"] = f"{mean:.3f}"
        return out


# ----------------------------------------------------------------------------- decisions
@dataclass(frozen=True)
class Stream:
    """What a status decision needs to know about one input stream.

    Attributes:
        label: what flows on it, for messages ("IMU", "rotor speeds", "velocity estimates").
        topic: its topic name as the node resolved it.
        age: seconds since its last message; None if none arrived yet.
    """

    label: str
    topic: str
    age: float | None


def _silent(age: float | None, timeout: float) -> bool:
    return age is None or age > timeout


def _missing(stream: Stream) -> str:
    if stream.age is None:
        return f"no {stream.label} on {stream.topic}"
    return f"no {stream.label} on {stream.topic} for {stream.age:.1f} s"


def imu_status(imu: Stream, timeout: float, error_after: float = math.inf) -> Status | None:
    """STALE before the first IMU message, WARN when it stopped for more than ``timeout`` [s],
    ERROR after ``error_after`` [s]."""
    if imu.age is None:
        return Status(STALE, f"{_missing(imu)} yet")
    if imu.age > error_after:
        return Status(ERROR, _missing(imu) + ": no propagation, no odometry")
    if imu.age > timeout:
        return Status(WARN, _missing(imu))
    return None


def _dropping(drops: Mapping[str, int]) -> Status | None:
    new = {k: v for k, v in drops.items() if v}
    if not new:
        return None
    return Status(WARN, "dropping input: " + ", ".join(f"{k} ×{v}" for k, v in sorted(new.items())))


def net_status(
    imu: Stream,
    rotor: Stream,
    timeout: float,
    rotor_lag: float | None,
    max_rotor_age: float,
    silence: float | None,
    silence_after: float,
    reasons: Mapping[str, int],
    drops: Mapping[str, int],
) -> Status:
    """The network node's state, first cause first.

    Args:
        imu, rotor: the input streams (``timeout`` [s] without a message = stopped).
        rotor_lag: newest IMU stamp − newest rotor stamp [s] (None until both arrived).
        max_rotor_age: the predictor's bound on that lag [s].
        silence: seconds without an estimate while IMU arrives (since the first IMU if none yet).
        silence_after: silence that is a problem [s].
        reasons: the predictor's outcomes since the last decision (why no estimate went out).
        drops: inputs dropped since the last decision, by reason (a silence names the most frequent
            of these and the reasons: e.g. every IMU message dropped while its frame is unknown).
    """
    bad = imu_status(imu, timeout)
    if bad is not None:
        return bad
    if _silent(rotor.age, timeout):
        return Status(ERROR, f"{_missing(rotor)}: no estimates")
    if rotor_lag is not None and rotor_lag > max_rotor_age:
        return Status(
            WARN,
            f"rotor stream stale: newest rotor sample lags the IMU by {rotor_lag:.3f} s "
            f"(max_rotor_age {max_rotor_age:g} s): no estimates",
        )
    if silence is not None and silence > silence_after:
        causes = {k: v for k, v in reasons.items() if k not in ("ok", "rate_limited")} | dict(drops)
        why = max(causes, key=causes.__getitem__) if causes else ""
        return Status(WARN, f"no estimate for {silence:.1f} s" + (f": {why}" if why else ""))
    return _dropping(drops) or Status(OK, "estimating")


@dataclass(frozen=True)
class EkfLimits:
    """Thresholds of :func:`ekf_status` (the EKF node's parameters of the same names; seconds, metres, m/s)."""

    input_timeout: float
    imu_error_after: float
    update_warn_after: float
    update_error_after: float
    pos_sigma_warn: float
    pos_sigma_error: float
    vel_sigma_warn: float
    vel_sigma_error: float
    imu_loss_warn: float
    latency_warn: float


@dataclass(frozen=True)
class EkfView:
    """What :func:`ekf_status` decides on: the node's inputs and the filter's state, now.

    Attributes:
        imu, measurements: the input streams (the network's velocities or displacements).
        initialised: whether the filter has a state; ``waiting_for`` says what its start waits for.
        imu_fault: why the IMU is implausible (unit, frame; the filter's own check), or None.
        since_update: seconds of IMU time since the last fused update (or since the filter started).
        pos_sigma, vel_sigma: largest per-axis standard deviation of position [m] and velocity [m/s].
        nis: the windowed consistency test of the updates.
        event: a recent event to report (a hold over an IMU gap, a restart, a pose set), or None.
        imu_loss: share of IMU samples missing from the stamps (None: unknown yet).
        latency_p95: 95th percentile of IMU stamp -> odometry publish [s] (None: none yet).
        drops: inputs dropped since the last decision, by reason.
    """

    imu: Stream
    measurements: Stream
    initialised: bool
    waiting_for: str
    imu_fault: str | None
    since_update: float | None
    pos_sigma: float | None
    vel_sigma: float | None
    nis: NisMonitor
    event: str | None
    imu_loss: float | None
    latency_p95: float | None
    drops: Mapping[str, int]


def ekf_status(view: EkfView, limits: EkfLimits) -> Status:
    """The EKF node's state, first cause first (the table in docs/ros_interface.md).

    Precedence: IMU missing; IMU implausible (ERROR, named); not initialised; no fused update for
    long (dead reckoning: WARN, then ERROR); a recent hold, restart or pose set (WARN, followed by
    what the two next checks find, at their level); covariance beyond its bounds (WARN, then ERROR);
    consistency test raised (ERROR); IMU samples lost or odometry late (WARN); inputs dropped (WARN);
    else OK.
    """
    v, lim = view, limits
    bad = imu_status(v.imu, lim.input_timeout, lim.imu_error_after)
    if bad is not None:
        return bad
    if v.imu_fault:
        return Status(ERROR, v.imu_fault)
    if not v.initialised:
        return Status(WARN, f"not initialised: waiting for {v.waiting_for}")
    silent = _silent(v.measurements.age, lim.input_timeout)
    if v.since_update is not None and (v.since_update > lim.update_warn_after or silent):
        level = ERROR if v.since_update > lim.update_error_after else WARN
        why = f" ({_missing(v.measurements)})" if silent else ""
        return Status(level, f"no fused update for {v.since_update:.1f} s{why}: IMU-only dead reckoning")
    estimate = _estimate_status(v, lim)
    if v.event:  # a recent hold, restart or pose set explains what follows it: named first, nothing hidden
        level = WARN if estimate is None else max(WARN, estimate.level)
        return Status(level, v.event + ("" if estimate is None else f"; {estimate.message}"))
    if estimate is not None:
        return estimate
    if v.imu_loss is not None and v.imu_loss > lim.imu_loss_warn:
        return Status(
            WARN, f"losing {v.imu_loss:.0%} of the IMU samples (holes in the stamps): the node or the link falls behind"
        )
    if v.latency_p95 is not None and v.latency_p95 > lim.latency_warn:
        return Status(WARN, f"odometry late: 95 % of IMU stamp -> publish within {v.latency_p95 * 1000:.0f} ms")
    return _dropping(v.drops) or Status(OK, "tracking")


def _estimate_status(v: EkfView, lim: EkfLimits) -> Status | None:
    """Covariance beyond its bounds (WARN, then ERROR) or the consistency test raised (ERROR)."""
    for name, sigma, warn, error, unit in (
        ("position", v.pos_sigma, lim.pos_sigma_warn, lim.pos_sigma_error, "m"),
        ("velocity", v.vel_sigma, lim.vel_sigma_warn, lim.vel_sigma_error, "m/s"),
    ):
        if sigma is not None and sigma > warn:
            bound = error if sigma > error else warn
            return Status(
                ERROR if sigma > error else WARN,
                f"{name} uncertain: σ {sigma:.2f} {unit} > {bound:g} {unit} (after dead reckoning or a hold; "
                "set_pose or reset to restart it)",
            )
    if v.nis.raised:
        return Status(ERROR, v.nis.message())
    return None


class SilenceAlarm:
    """When to warn that no output went out for ``after`` seconds while the input arrives.

    Args:
        after: silence that is worth a warning [s].
        every: at most one warning per this many seconds.
    """

    def __init__(self, after: float, every: float = 5.0):
        self.after, self.every = after, every
        self._next = -math.inf

    @staticmethod
    def silence(now: float, last_output: float | None, first_input: float | None) -> float | None:
        """Seconds without output, counted from the first input while none went out yet."""
        since = last_output if last_output is not None else first_input
        return None if since is None else now - since

    def due(self, now: float, silence: float | None, input_age: float | None, timeout: float) -> bool:
        """True (and throttled from then on) when ``silence`` > ``after`` while the input is fresh."""
        if silence is None or silence <= self.after or _silent(input_age, timeout) or now < self._next:
            return False
        self._next = now + self.every
        return True
