"""Health of a running node, decided without ROS: input rates, stream states, filter consistency.

The nodes publish what these functions decide on ``/diagnostics`` (``velobins_ros.health`` is the
thin ROS side). Everything here takes the current time as an argument, so the tests drive it with
made-up clocks:

* :class:`RateMeter`: arrivals of one input stream (rate over a sliding window, age of the last);
* :class:`NisMonitor`: the normalised innovation squared of the last N filter updates against its
  χ² bounds (share inside the two-sided interval, mean NIS and the interval of that mean);
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


# ----------------------------------------------------------------------------- χ² bounds
def chi2_cdf(x: float, dof: int) -> float:
    """P(X ≤ x) for X ~ χ²(dof): the regularised lower incomplete gamma P(dof/2, x/2), by its series."""
    if x <= 0:
        return 0.0
    a, h = 0.5 * dof, 0.5 * x
    term = total = 1.0 / a
    n = 0
    while term > 1e-16 * total and n < 10_000:
        n += 1
        term *= h / (a + n)
        total += term
    return min(1.0, math.exp(a * math.log(h) - h - math.lgamma(a)) * total)


def chi2_quantile(p: float, dof: int) -> float:
    """x with P(X ≤ x) = p for X ~ χ²(dof) (bisection on :func:`chi2_cdf`; 0 < p < 1)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"chi2_quantile: p must be in (0, 1), got {p!r}")
    lo, hi = 0.0, max(1.0, dof)
    while chi2_cdf(hi, dof) < p:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if chi2_cdf(mid, dof) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-12 * hi:
            break
    return 0.5 * (lo + hi)


class NisMonitor:
    """NIS of the last ``window`` updates against the χ²(dof) interval of probability ``coverage``.

    A consistent filter has about ``coverage`` of its NIS values inside ``[lower, upper]`` and a mean
    NIS near ``dof``; the mean of n values has its own interval, χ²(n·dof)/n.
    """

    def __init__(self, window: int = 100, dof: int = 3, coverage: float = 0.95):
        self.window, self.dof, self.coverage = window, dof, coverage
        tail = 0.5 * (1.0 - coverage)
        self.lower = chi2_quantile(tail, dof)
        self.upper = chi2_quantile(1.0 - tail, dof)
        self._values: deque[float] = deque(maxlen=window)
        self._mean_bounds: dict[int, tuple[float, float]] = {}
        self.total = 0

    def add(self, nis: float) -> None:
        """One update's NIS (non-finite values are ignored)."""
        if math.isfinite(nis):
            self._values.append(float(nis))
            self.total += 1

    def __len__(self) -> int:
        return len(self._values)

    def share_inside(self) -> float | None:
        """Fraction of the kept values inside ``[lower, upper]``; None when there are none."""
        if not self._values:
            return None
        return sum(self.lower <= v <= self.upper for v in self._values) / len(self._values)

    def mean(self) -> float | None:
        """Mean of the kept values; None when there are none."""
        return sum(self._values) / len(self._values) if self._values else None

    def mean_bounds(self) -> tuple[float, float] | None:
        """Interval (probability ``coverage``) of the mean of the kept values: χ²(n·dof)/n."""
        n = len(self._values)
        if n == 0:
            return None
        if n not in self._mean_bounds:
            tail = 0.5 * (1.0 - self.coverage)
            k = n * self.dof
            self._mean_bounds[n] = (chi2_quantile(tail, k) / n, chi2_quantile(1.0 - tail, k) / n)
        return self._mean_bounds[n]

    def values(self) -> dict[str, str]:
        """Key-values for a diagnostic status."""
        out = {
            "NIS updates (window)": str(len(self._values)),
            f"NIS {self.coverage:.0%} interval (χ²{self.dof})": f"[{self.lower:.3f}, {self.upper:.3f}]",
        }
        share, mean, bounds = self.share_inside(), self.mean(), self.mean_bounds()
        if share is not None and mean is not None and bounds is not None:
            out["NIS share inside"] = f"{share:.2f}"
            out["NIS mean"] = f"{mean:.3f}"
            out["NIS mean interval"] = f"[{bounds[0]:.3f}, {bounds[1]:.3f}]"
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


def imu_status(imu: Stream, timeout: float) -> Status | None:
    """STALE before the first IMU message, WARN when it stopped for more than ``timeout`` [s]."""
    if imu.age is None:
        return Status(STALE, f"{_missing(imu)} yet")
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


def ekf_status(
    imu: Stream,
    velocity: Stream,
    timeout: float,
    initialised: bool,
    waiting_for: str,
    nis: NisMonitor,
    nis_min_share: float,
    drops: Mapping[str, int],
) -> Status:
    """The EKF node's state, first cause first.

    Args:
        imu, velocity: the input streams (``timeout`` [s] without a message = stopped).
        initialised: whether the filter has a state.
        waiting_for: what initialisation waits for, for the message.
        nis: the running NIS of the recent updates.
        nis_min_share: a full NIS window with less than this share inside the interval is a WARN
            (0 disables the check).
        drops: inputs dropped since the last decision, by reason.
    """
    bad = imu_status(imu, timeout)
    if bad is not None:
        return bad
    if not initialised:
        return Status(WARN, f"not initialised: waiting for {waiting_for}")
    if _silent(velocity.age, timeout):
        return Status(WARN, f"{_missing(velocity)}: IMU-only dead reckoning")
    share = nis.share_inside()
    if nis_min_share > 0 and len(nis) >= nis.window and share is not None and share < nis_min_share:
        return Status(
            WARN,
            f"filter inconsistent: {share:.0%} of the last {len(nis)} NIS inside the χ²{nis.dof} "
            f"{nis.coverage:.0%} interval (mean {nis.mean():.2f})",
        )
    return _dropping(drops) or Status(OK, "tracking")


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
