"""The IMU's own noise by Allan variance of its error against ground truth (``velobins calibrate --imu-noise allan``).

The filter's IMU model is the usual one: white noise of density N and a bias random walk of K per sensor
(:class:`velobins_ekf.config.EkfConfig`). For a rate signal with exactly these two errors the overlapping Allan
variance over clusters of length τ is (IEEE Std 952-1997, annex C)

    σ²(τ) = N²/τ + K²·τ/3,

so N shows on the short clusters (slope −½ of σ in log-log) and K on the long ones (slope +½). This module computes
that curve for the IMU's *error*: the measured specific force and angular rate minus what the ground truth implies
(:func:`imu_errors`), pooled over flights and axes, and fits the two terms to it (:func:`fit_white_and_walk`).
The same error, averaged over the first :data:`BIAS_WINDOW` seconds of each flight, is that flight's turn-on bias;
their spread over flights is the filter's initial bias sigma (:func:`initial_bias_sigma`). A prior twice the
true spread let the filter explain the network's slow velocity errors in a turn by a gyro bias about z, and drift
in heading (docs/results/recipe_platforms, items 13 and 22).
It needs no filter pass, and it sees the white noise directly, which velocity measurements at 20 Hz do not
(docs/calibrate.md, issue 28: ground truth + N(0, 0.05²) pinned the accelerometer density only through the bias
drift it absorbed).

It is exact only where the ground truth is exact at the IMU rate: simulated flights, or a static log (the vehicle
at rest, the truth columns constant, where the truth implies a constant signal that the Allan variance ignores).
Motion-capture truth is neither: its rate, latency and differentiation noise put a non-white error on the short
clusters. :func:`allan_noise` checks the slope there and how closely the two terms fit the whole curve, and refuses
(:class:`CalibrationRefused`) an error that is not white noise plus a random walk; the synthetic stage is then the
method (``--imu-noise auto`` falls back to it).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import nnls
from scipy.spatial.transform import Rotation

from velobins_data.flight import Flight

from .calibrate_fit import CalibrationRefused

SENSORS = {"acc": ("acc_noise_density", "acc_random_walk"), "gyro": ("gyro_noise_density", "gyro_random_walk")}
"""Per sensor: the filter fields of its white-noise density N and bias random walk K."""
BIAS_FIELDS = {"acc": "init_sigma_acc_bias", "gyro": "init_sigma_gyro_bias"}
"""Per sensor: the filter field of the spread of its bias at the start of a flight."""
ALLAN_FIELDS = (*(name for pair in SENSORS.values() for name in pair), *BIAS_FIELDS.values())
"""The fields the Allan stage estimates (``--fit`` with ``--imu-noise allan`` takes these and ``variance_scale``).
By default it sets the two densities and the initial bias sigmas, not the random walks: with the simulator's true
random walks (4× the filter's default for acc) the filter was less consistent on held-out flights of two presets
out of three (docs/calibrate.md), since a looser bias absorbs the network's slow errors."""
BIAS_WINDOW = 5.0
"""Seconds from a flight's start over which its IMU error is averaged into its initial bias. White noise of density
N leaves N/√T on that mean (a tenth of the simulated presets' 5·10⁻³ rad/s turn-on gyro bias), and a bias random
walk K moves it by about K√T, less again."""
UNITS = {"acc": ("m/s²/√Hz", "m/s³/√Hz"), "gyro": ("rad/s/√Hz", "rad/s²/√Hz")}
WHITE_SLOPE_TOLERANCE = 0.1
"""Largest |slope + ½| of the Allan deviation over the shortest clusters (τ₀ to :data:`SLOPE_CLUSTERS`·τ₀) for the
error to count as white there. Exact truth gives −0.50 on every simulated preset; velocity truth with 2 mm/s of white
noise gives −0.64 at 100 Hz, and NanoBench's motion capture −0.16 (train) and −0.18 (val) for the accelerometer."""
SLOPE_CLUSTERS = 16
"""The slope check spans the clusters of 1 to this many IMU periods: where white noise dominates any real IMU."""
MAX_MISFIT = 1.3
"""Largest factor between the fitted two-term curve and the measured Allan deviation where at least
:data:`MISFIT_CLUSTERS` independent clusters measure it: beyond it the error is not white noise plus a random walk
(motion-capture noise, a vibration peak, a real IMU's bias-instability floor), and the fit is refused. Exact truth
fits within ×/÷ 1.17 on two 15 s simulated flights and 1.11 on a 20-minute static log."""
MISFIT_CLUSTERS = 30
"""Independent clusters (over flights and axes) a τ needs for the misfit check: fewer, and chance alone moves it."""
CLUSTER_POINTS = 30
"""Cluster lengths on a log grid from τ₀ to :data:`LONGEST_FRACTION` of the longest uniform stretch of IMU."""
LONGEST_FRACTION = 0.25
"""The longest cluster, as a fraction of the longest uniform stretch: at least four clusters there."""
MIN_SAMPLES = 64
"""Fewest IMU samples of a uniform stretch worth using."""
STAMP_JITTER = 0.05
"""Largest |Δt/median Δt − 1| within a uniform stretch: a larger step (a dropped sample, a gap) ends it, since the
clusters assume a uniform rate."""


@dataclass(frozen=True)
class SensorNoise:
    """The Allan fit of one sensor (accelerometer or gyroscope), pooled over flights and axes."""

    sensor: str
    taus: np.ndarray
    """(M,) cluster lengths [s]."""
    avar: np.ndarray
    """(M, 3) Allan variance per axis."""
    density: float
    """N, fitted to the mean of the axes' curves."""
    random_walk: float
    """K, fitted to the same (0 when the curve shows none)."""
    axis_density: np.ndarray
    """(3,) N per axis (the spread says how well the axes agree)."""
    slope: float
    """Log-log slope of the axes' mean Allan deviation from τ₀ to :data:`SLOPE_CLUSTERS`·τ₀ (white noise: −½)."""
    misfit: float
    """Largest factor between the fitted and the measured Allan deviation over all τ."""
    initial_biases: np.ndarray
    """(F, 3) each flight's bias at its start: the mean error over its first :data:`BIAS_WINDOW` seconds."""
    bias_window: float
    """The mean length of those stretches [s] (shorter where a flight's first uniform stretch is)."""

    @property
    def bias_resolution(self) -> float:
        """The std the white noise alone leaves on one initial bias, N/√T [unit of the sensor's rate]."""
        return self.density / math.sqrt(self.bias_window)

    @property
    def initial_bias_sigma(self) -> float:
        """The filter's initial bias sigma: :func:`initial_bias_sigma` of :attr:`initial_biases`."""
        return initial_bias_sigma(self.initial_biases, self.bias_resolution)

    @property
    def bias_sigma_factor(self) -> float:
        """The 1σ factor of :attr:`initial_bias_sigma` from its number of values n: an RMS of n normal values has a
        relative standard error of about 1/√(2n) (±14 % on nine flights' 27 values)."""
        return 1.0 + 1.0 / math.sqrt(2.0 * self.initial_biases.size)

    @property
    def crossover(self) -> float:
        """τ where the two terms are equal, √3·N/K [s] (∞ without a random walk)."""
        return math.sqrt(3.0) * self.density / self.random_walk if self.random_walk > 0 else math.inf

    @property
    def walk_identified(self) -> bool:
        """Whether the curve reaches the random walk's +½ slope: the crossover lies inside the longest cluster."""
        return self.crossover <= float(self.taus[-1])

    def values(self, names: Sequence[str]) -> dict[str, float]:
        """The fitted filter fields among ``names``; an unidentified random walk is left out."""
        density_name, walk_name = SENSORS[self.sensor]
        out = {density_name: self.density} if density_name in names else {}
        if walk_name in names and self.walk_identified:
            out[walk_name] = self.random_walk
        if BIAS_FIELDS[self.sensor] in names:
            out[BIAS_FIELDS[self.sensor]] = self.initial_bias_sigma
        return out

    def lines(self, names: Sequence[str]) -> list[str]:
        """What the fit found, for the table and the overlay header."""
        walk_name = SENSORS[self.sensor][1]
        unit_n, unit_k = UNITS[self.sensor]
        lo, hi = float(self.axis_density.min()), float(self.axis_density.max())
        line = (
            f"  {self.sensor}: N {self.density:.4g} {unit_n} (axes {lo:.4g}–{hi:.4g}), slope {self.slope:+.2f} at "
            f"τ ≤ {SLOPE_CLUSTERS}τ₀, fit within ×/÷ {self.misfit:.2f} over τ {self.taus[0]:.3g}–{self.taus[-1]:.3g} s"
        )
        if self.walk_identified:
            kept = "" if walk_name in names else f"; not in --fit, the filter keeps its {walk_name}"
            walk = f"; K {self.random_walk:.4g} {unit_k} (crossover {self.crossover:.3g} s{kept})"
        else:
            why = (
                f"crossover {self.crossover:.3g} s beyond the longest cluster {self.taus[-1]:.3g} s"
                if self.random_walk > 0
                else f"no random walk in the curve up to τ {self.taus[-1]:.3g} s"
            )
            walk = f"; K not identified ({why}: longer flights or a static log show it)"
        field, unit = BIAS_FIELDS[self.sensor], UNITS[self.sensor][0].split("/√")[0]
        flights = self.initial_biases.shape[0]
        kept = "" if field in names else f"; not in --fit, the filter keeps its {field}"
        bias = (
            f"  {self.sensor}: initial bias over the first {self.bias_window:.3g} s of {flights} flight(s): RMS "
            f"{math.sqrt(np.mean(self.initial_biases**2)):.3g} {unit} over {self.initial_biases.size} values (largest "
            f"{np.abs(self.initial_biases).max():.3g}; the white noise alone leaves {self.bias_resolution:.2g}), "
            f"sigma {self.initial_bias_sigma:.3g} (×/÷ {self.bias_sigma_factor:.2f}, 1σ from "
            f"{self.initial_biases.size} values: more flights pin it down){kept}"
        )
        return [line + walk, bias]


def imu_errors(flight: Flight, part: slice = slice(None)) -> tuple[np.ndarray, np.ndarray]:
    """(acc, gyro) errors (T − 2, 3) over ``part`` of the flight: the IMU minus what the ground truth implies, at
    its interior samples.

    Specific force f = Rᵀ(dv/dt + g·e_z), dv/dt by central differences; body rate from the relative rotation
    R_{k−1}ᵀR_{k+1} over 2Δt. Both are second-order accurate, and smooth: on exact truth their error adds nothing
    white to the curve.
    """
    t = flight.t[part]
    rot = Rotation.from_quat(flight.q[part])
    accel = np.gradient(flight.v[part], t, axis=0)
    accel[:, 2] += flight.gravity
    force = rot.inv().apply(accel)[1:-1]
    rate = (rot[:-2].inv() * rot[2:]).as_rotvec() / (t[2:] - t[:-2])[:, None]
    return flight.acc[part][1:-1] - force, flight.gyro[part][1:-1] - rate


def initial_bias_sigma(biases: np.ndarray, resolution: float) -> float:
    """The spread of the bias at a flight's start, from one measured value per flight and axis: the RMS of
    ``biases`` about zero (the filter's prior is centred on zero, so a bias shared by every flight counts too) with
    the white noise's share ``resolution``² taken out, and never below ``resolution``: a smaller bias cannot be
    told from none, and a filter started that sure could not learn one."""
    excess = float(np.mean(np.asarray(biases) ** 2)) - resolution**2
    return math.sqrt(max(excess, resolution**2))


def start_biases(
    errors: Sequence[Sequence[tuple[np.ndarray, np.ndarray]]], tau0: float
) -> tuple[tuple[np.ndarray, np.ndarray], float]:
    """((acc (F, 3), gyro (F, 3)), mean window [s]): each flight's mean IMU error over the first :data:`BIAS_WINDOW`
    seconds of its first uniform stretch (``errors``: per flight, :func:`imu_errors` of each of its stretches)."""
    n = round(BIAS_WINDOW / tau0)
    firsts = [stretches[0] for stretches in errors if stretches]
    biases = tuple(np.array([first[k][:n].mean(axis=0) for first in firsts]) for k in range(2))
    return biases, float(np.mean([min(n, first[0].shape[0]) for first in firsts])) * tau0


def allan_sums(y: np.ndarray, tau0: float, clusters: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Overlapping Allan variance terms of a rate signal ``y`` (T, 3) sampled every ``tau0``: per cluster size m,
    the sum over k of (θ_{k+2m} − 2θ_{k+m} + θ_k)²/(2τ²), τ = m·τ₀, θ the integral of y, and the number of terms.
    Sums and counts of several flights add: the pooled variance is their ratio."""
    theta = np.concatenate([np.zeros((1, y.shape[1])), np.cumsum(y, axis=0) * tau0])
    sums = np.zeros((clusters.size, y.shape[1]))
    counts = np.zeros(clusters.size)
    for i, m in enumerate(clusters):
        n = theta.shape[0] - 2 * m
        if n < 1:
            continue
        d = theta[2 * m :] - 2.0 * theta[m:-m] + theta[: -2 * m]
        sums[i] = (d * d).sum(axis=0) / (2.0 * (m * tau0) ** 2)
        counts[i] = n
    return sums, counts


def fit_white_and_walk(taus: np.ndarray, avar: np.ndarray, clusters: np.ndarray | None = None) -> tuple[float, float]:
    """(N, K) ≥ 0 of σ²(τ) = N²/τ + K²τ/3 by non-negative least squares on the relative residual.

    ``clusters`` (M,) weighs each τ by √(independent clusters): an Allan variance from n clusters has a relative
    error of about √(2/n), so the short τ, averaged over many clusters, pin N down, and the few long ones are not
    trusted beyond their count. Without it every τ counts alike.
    """
    weight = np.ones_like(taus) if clusters is None else np.sqrt(np.maximum(clusters, 1.0))
    design = np.stack([1.0 / (taus * avar), taus / (3.0 * avar)], axis=1) * weight[:, None]
    (n2, k2), _ = nnls(design, weight)
    return math.sqrt(n2), math.sqrt(k2)


def uniform_stretches(flight: Flight) -> tuple[float, list[slice]]:
    """The flight's IMU period τ₀ (median step) [s] and its stretches of uniform stamps (every step within
    :data:`STAMP_JITTER` of τ₀) of at least :data:`MIN_SAMPLES` samples: a dropped sample or a gap splits the
    flight instead of bending the clusters."""
    dt = np.diff(flight.t)
    tau0 = float(np.median(dt))
    breaks = np.flatnonzero(np.abs(dt / tau0 - 1.0) > STAMP_JITTER) + 1
    edges = [0, *breaks.tolist(), flight.t.shape[0]]
    return tau0, [slice(a, b) for a, b in itertools.pairwise(edges) if b - a >= MIN_SAMPLES]


def allan_noise(flights: Sequence[Flight]) -> dict[str, SensorNoise]:
    """The Allan fit of both sensors over the uniform stretches of ``flights`` (one vehicle, one IMU rate).

    Raises:
        CalibrationRefused: no stretch of :data:`MIN_SAMPLES` uniform samples, IMU rates that differ between
            flights, or an error that is not white noise plus a random walk (the ground truth is not exact at the
            IMU rate).
    """
    found = [(f, *uniform_stretches(f)) for f in flights]
    parts = [(f, part) for f, _, stretches in found for part in stretches]
    if not parts:
        raise CalibrationRefused(f"no flight holds {MIN_SAMPLES} IMU samples at a uniform rate")
    steps = [tau0 for _, tau0, _ in found]
    tau0 = float(np.median(steps))
    if max(abs(s / tau0 - 1.0) for s in steps) > STAMP_JITTER:
        raise CalibrationRefused(
            f"the flights' IMU rates differ ({1 / max(steps):.4g}–{1 / min(steps):.4g} Hz); fit one rate at a time"
        )
    longest_part = max(p.stop - p.start for _, p in parts) - 2
    longest = max(SLOPE_CLUSTERS + 1, int(LONGEST_FRACTION * longest_part))
    clusters = np.unique(np.round(np.geomspace(1, longest, CLUSTER_POINTS)).astype(int))
    clusters = np.union1d(clusters, [SLOPE_CLUSTERS])
    taus = clusters * tau0
    out = {}
    by_flight = [[imu_errors(f, part) for part in stretches] for f, _, stretches in found]
    errors = [pair for stretches in by_flight for pair in stretches]
    biases, window = start_biases(by_flight, tau0)
    for k, sensor in enumerate(SENSORS):
        sums, counts = np.zeros((clusters.size, 3)), np.zeros(clusters.size)
        for pair in errors:
            s, c = allan_sums(pair[k], tau0, clusters)
            sums += s
            counts += c
        avar = sums / counts[:, None]
        if not np.all(avar > 0):
            raise CalibrationRefused(f"the {sensor} matches the ground truth exactly: a noise-free IMU, nothing to fit")
        mean = avar.mean(axis=1)
        independent = counts / clusters  # non-overlapping clusters over all flights
        density, walk = fit_white_and_walk(taus, mean, 3.0 * independent)
        axis_density = np.array([fit_white_and_walk(taus, avar[:, a], independent)[0] for a in range(3)])
        j = int(np.searchsorted(clusters, SLOPE_CLUSTERS))
        slope = 0.5 * math.log(mean[j] / mean[0]) / math.log(clusters[j] / clusters[0])
        model = density**2 / taus + walk**2 * taus / 3.0
        measured = 3.0 * independent >= MISFIT_CLUSTERS
        misfit = float(np.exp(np.max(np.abs(0.5 * np.log(model[measured] / mean[measured])))))
        out[sensor] = SensorNoise(sensor, taus, avar, density, walk, axis_density, slope, misfit, biases[k], window)
        if abs(slope + 0.5) > WHITE_SLOPE_TOLERANCE or misfit > MAX_MISFIT:
            raise CalibrationRefused(
                f"the {sensor} error against ground truth is not white noise plus a random walk (Allan deviation "
                f"slope {slope:+.2f} over τ {taus[0]:.3g}–{taus[j]:.3g} s, white noise gives −0.50; two-term fit off "
                f"by up to ×{misfit:.2f}): the ground truth is not exact at the IMU rate (motion capture?); use "
                "--imu-noise synthetic, or a static IMU log"
            )
    return out
