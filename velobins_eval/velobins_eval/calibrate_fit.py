"""The fitting core of ``velobins calibrate``: filter noise and network variance scale by maximum likelihood.

What is fitted (docs/calibrate.md): the EKF's IMU noise densities and, when the velocity
measurements come from the network, the scale s of the network's variance (R = s·σ̂², the
predictor's ``variance_scale``), jointly, because they trade against each other: the filter's
trust in the IMU relative to the network is what they set together.

The measurements (:class:`CalibrationFlight`) are either the network's own estimates on flights it
never saw (:mod:`velobins_eval.calibrate_measure`: a held-out set, or cross-fitting) or, without a
network, ground truth plus seeded white noise of a known σ (:func:`synthetic_measurements`).

Four objectives, each a mean per update (lower is better); the first two are Gaussian negative log-likelihoods:

* ``posterior`` (default): the log score of the filter's *fused* velocity against ground truth,
  ½(eᵀP⁻¹e + log det P + 3 log 2π), e = v̂_fused − v_true, P its covariance after the update.
  A strictly proper scoring rule: its expectation is smallest for the predictive distribution
  closest (in KL) to the truth, and along the overall scale of P its stationary point is mean
  NEES = 3. It judges the output the user relies on, and it stays meaningful when the measurement
  errors are time-correlated (the network's are: consecutive 20 Hz estimates share most of their
  1 s window), which the filter's white-noise model does not know.
* ``innovation``: the classical likelihood of the measurements, ½(νᵀS⁻¹ν + log det S + 3 log 2π)
  over the innovations ν = z − h(x̂⁻). Exact for a linear-Gaussian model with white measurement
  noise (then the innovations are independent N(0, S)); it needs no ground truth beyond the start.
  With correlated measurement errors it mistakes their slow part for motion and trades it into the
  IMU noise (docs/calibrate.md measures how far).
* ``accuracy``: not a likelihood but the fused velocity's error, ‖v̂_fused − v_true‖ per update (its mean is
  the fused AVE at the updates). For the network's fields only: with errors that last 0.5–1 s a white filter
  that is consistent on average still follows each slow error, and through the turns of a flight into its
  heading; the s that makes the fused velocity most *accurate* is then larger than the most *consistent* one
  (recipe study item 20 measures both). The IMU stage of a fit keeps ``posterior``.
* ``crps``: the continuous ranked probability score of the fused velocity's marginals
  (:func:`~velobins_common.stats.gaussian_crps_samples`), in m/s. Strictly proper like ``posterior``, so it
  still asks for a covariance that fits the errors, but linear in e/σ where the log score is quadratic: a
  middle between ``posterior`` and ``accuracy`` (recipe study item 21 measures all three). Like ``accuracy``,
  for the network's fields only.

The search over these fields in log₁₀ space is :mod:`velobins_eval.calibrate_search`. The filter is
:func:`velobins_ekf.offline.run_offline` started from ground truth, as
:func:`velobins_eval.evaluate.fuse_flight` starts it; the consistency figures are
:func:`~velobins_eval.evaluate.fuse_flight` scored by :func:`velobins_eval.scoring.score`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from velobins_common.errors import OptionError, UserError
from velobins_common.fields import param_spec
from velobins_common.stats import gaussian_crps_samples, gaussian_nll_samples
from velobins_data.flight import Flight

from .calibrate_pool import FlightPool
from .scoring import GroundTruth, aggregate, score

SCALE = "variance_scale"
"""The network variance scale s (``velobins_net: predictor: variance_scale``), fittable beside the EKF fields."""
DISAGREEMENT = "disagreement_scale"
"""An ensemble's weight b on its members' smoothed disagreement (R = s·σ̄² + b·d̄; ``predictor.disagreement_scale``),
fitted with s by a profile over the ratio b/s (:mod:`velobins_eval.calibrate_ensemble`)."""
VELOCITY_ERROR = ("velocity_error_sigma", "velocity_error_tau")
"""The EKF's model of a slow error of the velocity measurements (:mod:`velobins_ekf.velocity_error`): σ_b and τ."""
FLOOR = "velocity_noise_floor"
"""The EKF's white noise added to every velocity measurement's variance (R + floor² I)."""
EKF_FITTABLE = (
    "acc_noise_density",
    "gyro_noise_density",
    "acc_random_walk",
    "gyro_random_walk",
    "init_sigma_acc_bias",
    "init_sigma_gyro_bias",
    FLOOR,
    *VELOCITY_ERROR,
)
"""EKF noise fields ``calibrate`` can fit."""
AXIS_FACTORS = "axis_variance_factors"
"""Factors k (x, y, z) per axis on the network's variance after s and b (R_i = k_i·(s·σ̂²_i + b·d̄_i);
``predictor.axis_variance_factors``): one ``--fit`` name for three fields, :data:`AXES`, fitted with s and b held."""
AXES = tuple(f"{AXIS_FACTORS}.{axis}" for axis in "xyz")
"""The three fields :data:`AXIS_FACTORS` stands for in a fit (what its lines and uncertainty name)."""
UNIT_AXES = (1.0, 1.0, 1.0)
"""Axis factors that change nothing (``predictor.axis_variance_factors``' default)."""
FITTABLE = (*EKF_FITTABLE, SCALE, DISAGREEMENT, *AXES)
"""Every field a fit can set (``--fit`` names the three :data:`AXES` as :data:`AXIS_FACTORS`)."""
NETWORK_FITTABLE = (SCALE, DISAGREEMENT, FLOOR, *VELOCITY_ERROR, *AXES)
"""The fields that describe the network's errors: fitted to its estimates only, never to synthetic measurements."""
DEFAULT_FIT = ("acc_noise_density", "gyro_noise_density")
"""Fitted by default (with :data:`SCALE` added when the measurements come from a network). The random walks
barely move the objective; the initial bias sigmas do (docs/calibrate.md) and can be added with ``--fit``."""
OBJECTIVES = ("posterior", "innovation", "accuracy", "crps")
"""``--objective`` values (module docstring)."""
LIKELIHOODS = ("posterior", "innovation")
"""The :data:`OBJECTIVES` that are likelihoods: the ones a fit of IMU noise may use."""
OBJECTIVE_UNITS = {"posterior": "nats/update", "innovation": "nats/update", "accuracy": "m/s", "crps": "m/s"}
"""Unit of each objective's value (the report's table)."""
MEAS_RATE_HZ = 20.0
"""Rate of the synthetic velocity measurements [Hz]: the network node's update rate."""
SCALE_LIMITS = (1e-6, 1e6)
"""Allowed range of s and of each axis factor (``PredictorConfig.variance_scale``'s and ``axis_variance_factors``'
ParamSpec, repeated here so this module imports no torch; test_calibrate checks that both agree)."""


class CalibrationRefused(UserError):
    """The fit ran to a hard limit of a field: the flights do not identify it; no overlay is written."""


@dataclass
class CalibrationFlight:
    """One flight with velocity measurements: the network's estimates or synthetic ones (ground truth + noise)."""

    flight: Flight
    t: np.ndarray
    """(U,) measurement stamps [s]."""
    z: np.ndarray
    """(U, 3) body velocity measurements [m/s]."""
    var: np.ndarray
    """(U, 3) their variances [m²/s²] as the measurement source states them (network: σ̂², unscaled)."""
    dis: np.ndarray | None = None
    """(U, 3) an ensemble's disagreement averaged as the predictor averages it (``disagreement_tau``), or None."""
    v_true: np.ndarray = field(init=False, repr=False)
    """(U, 3) ground-truth world velocity at ``t`` (the posterior objective's reference)."""
    v_body_true: np.ndarray = field(init=False, repr=False)
    """(U, 3) ground-truth body velocity at ``t`` (what the measurements' errors are taken against)."""

    def __post_init__(self) -> None:
        truth = GroundTruth.of(self.flight).at(self.t)
        self.v_true, self.v_body_true = truth.v, truth.body_velocity


def synthetic_measurements(
    seq: Flight, sigma: float, rng: np.random.Generator, rate_hz: float = MEAS_RATE_HZ
) -> CalibrationFlight:
    """Ground-truth body velocity at ``rate_hz`` (from one period after the first sample) plus N(0, sigma²)."""
    if not sigma > 0:
        raise OptionError("--meas-sigma", f"must be > 0 m/s, got {sigma}")
    t = np.arange(seq.t[0] + 1.0 / rate_hz, seq.t[-1], 1.0 / rate_hz)
    if t.size < 2:
        raise UserError(f"{seq.source}: flight too short for velocity measurements ({seq.duration:.2f} s)")
    vb = GroundTruth.of(seq).at(t).body_velocity
    z = vb + rng.normal(0.0, sigma, size=vb.shape)
    return CalibrationFlight(seq, t, z, np.full_like(z, sigma**2))


def innovation_nll(updates: Sequence) -> tuple[float, int]:
    """(Σ ½(νᵀS⁻¹ν + log det S + d log 2π), count) over the accepted updates (``UpdateResult`` records)."""
    ups = [u for u in updates if u.accepted]
    if not ups:
        return 0.0, 0
    terms = gaussian_nll_samples(np.array([u.innovation for u in ups]), np.array([u.innovation_cov for u in ups]))
    return float(terms.sum()), len(ups)


def flight_terms(cf: CalibrationFlight, config, scale: float | np.ndarray, kind: str) -> tuple[np.ndarray, np.ndarray]:
    """(stamps (U,), per-update objective terms (U,)) of the filter ``config`` on one flight, measurement variance
    ``scale``·``cf.var`` (``scale`` one factor, or (3,) per axis: :attr:`Point.factors`); ``kind`` is an
    :data:`OBJECTIVES` entry. Only accepted updates count."""
    from velobins_ekf.offline import run_offline

    from .evaluate import ground_truth_state

    seq = cf.flight
    res = run_offline(
        seq.t,
        seq.acc,
        seq.gyro,
        cf.t,
        cf.z,
        scale * cf.var,
        init_state=ground_truth_state(seq),
        config=config,
        output_stride=max(1, len(seq)),
    )
    ups = [u for u in res.updates if u.accepted]
    if not ups:
        return np.empty(0), np.empty(0)
    stamps = np.array([u.stamp for u in ups])
    if kind == "innovation":
        terms = gaussian_nll_samples(np.array([u.innovation for u in ups]), np.array([u.innovation_cov for u in ups]))
        return stamps, terms
    index = np.clip(np.searchsorted(cf.t, stamps), 0, len(cf.t) - 1)
    err = np.array([u.vel_world for u in ups]) - cf.v_true[index]
    if kind == "accuracy":
        return stamps, np.linalg.norm(err, axis=1)
    cov = np.array([u.vel_world_cov for u in ups])
    if kind == "crps":
        return stamps, gaussian_crps_samples(err, cov)
    return stamps, gaussian_nll_samples(err, cov)


@dataclass(frozen=True)
class Point:
    """A candidate: the filter config and the network variance scale it is scored with."""

    config: object
    scale: float
    disagreement: float = 0.0
    """b, an ensemble's weight on its disagreement (:data:`DISAGREEMENT`); 0 for one network."""
    axes: tuple[float, float, float] = UNIT_AXES
    """k, the factors per axis on the network's variance after s and b (:data:`AXIS_FACTORS`)."""

    def value(self, name: str) -> float:
        """The field ``name`` (:data:`FITTABLE`): s, b, an axis factor, or the filter config's field of that name."""
        if name == DISAGREEMENT:
            return float(self.disagreement)
        if name in AXES:
            return float(self.axes[AXES.index(name)])
        return float(self.scale if name == SCALE else getattr(self.config, name))

    @property
    def factors(self) -> np.ndarray:
        """(3,) s·k: what the flights' variances (with an ensemble's disagreement folded in) are multiplied by."""
        return self.scale * np.asarray(self.axes, dtype=np.float64)

    @property
    def ratio(self) -> float:
        """b/s: an ensemble's b·d̄ as part of s·(σ̄² + (b/s)·d̄), the ratio its flights are ``folded`` at."""
        return self.disagreement / self.scale

    def network_neutral(self) -> Point:
        """This point with the network's fields at their neutral values (s 1, b 0, k 1): how synthetic measurements
        are scored, whose variance is the known σ² of their noise (a ``--params`` overlay's s is the network's)."""
        return dataclasses.replace(self, scale=1.0, disagreement=0.0, axes=UNIT_AXES)


class Objective:
    """Mean objective term per update of a :class:`Point` over the flights (``kind``: an :data:`OBJECTIVES` entry).

    Flights are filtered in ``workers`` processes when > 1 (:class:`~velobins_eval.calibrate_pool.FlightPool`).
    :meth:`blocks` gives the terms summed per ``block_s`` of each flight: the units the curvature's robust
    (sandwich) uncertainty treats as independent (:mod:`velobins_eval.calibrate_uncertainty`).
    """

    def __init__(self, flights: Sequence[CalibrationFlight], kind: str = "posterior", workers: int = 1):
        if kind not in OBJECTIVES:
            raise OptionError("--objective", f"must be one of {', '.join(OBJECTIVES)}, got {kind!r}")
        self.flights = list(flights)
        self.kind = kind
        self.pool = FlightPool(self.flights, flight_terms, workers)
        self.evaluations = 0

    def close(self) -> None:
        self.pool.close()

    def terms(self, point: Point) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per flight: (stamps, per-update objective terms)."""
        self.evaluations += 1
        return self.pool.map(point.config, point.factors, self.kind)

    def __call__(self, point: Point) -> float:
        per_flight = self.terms(point)
        count = sum(len(t) for _, t in per_flight)
        if count == 0:
            raise UserError("calibrate: the filter applied no velocity update on any flight")
        return float(sum(t.sum() for _, t in per_flight)) / count

    def blocks(self, point: Point, block_s: float) -> np.ndarray:
        """Objective terms summed per ``block_s`` seconds of each flight (all blocks of all flights, in order)."""
        out = []
        for cf, (stamps, terms), count in zip(self.flights, self.terms(point), self.block_counts(block_s), strict=True):
            index = np.clip(((stamps - cf.flight.t[0]) // block_s).astype(int), 0, count - 1)  # ends: edge blocks
            out.append(np.bincount(index, weights=terms, minlength=count))
        return np.concatenate(out)

    def block_counts(self, block_s: float) -> list[int]:
        """How many of :meth:`blocks`' blocks each flight has (in flight order)."""
        return [int(cf.flight.duration // block_s) + 1 for cf in self.flights]


def consistency(flights: Sequence[CalibrationFlight], config, scale: float | np.ndarray = 1.0) -> dict[str, float]:
    """Fused AVE, median NEES and NEES share in bounds (means over flights, as ``velobins evaluate``) with the
    variances times ``scale`` (one factor or (3,) per axis); an ensemble's disagreement counts as far as it is
    :func:`folded` into the flights' variances."""
    from .evaluate import fuse_flight

    per_flight = {}
    for cf in flights:
        rec = fuse_flight(cf.flight, cf.t, cf.z, scale * cf.var, "calibrate", config)
        per_flight[cf.flight.name] = score(rec, GroundTruth.of(cf.flight))
    agg = aggregate(per_flight)
    return {k: agg[k] for k in ("ave", "nees_median", "nees_in_bounds")}


def log_limits(name: str) -> tuple[float, float]:
    """log₁₀ of a fittable field's allowed (min, max); random walks get a floor of 1e-9 (log of 0)."""
    if name == SCALE or name in AXES:
        return math.log10(SCALE_LIMITS[0]), math.log10(SCALE_LIMITS[1])
    from velobins_ekf.config import EkfConfig

    spec = param_spec(next(f for f in dataclasses.fields(EkfConfig) if f.name == name))
    lo = max(spec.min if spec.min is not None else 0.0, 1e-9)
    hi = spec.max if spec.max is not None else 1e3
    return math.log10(lo), math.log10(hi)


FIT_NAMES = (*EKF_FITTABLE, SCALE, DISAGREEMENT, AXIS_FACTORS)
"""Everything ``--fit`` accepts."""


def check_fit_names(names: Sequence[str]) -> tuple[str, ...]:
    """The ``--fit`` list, checked (unknown or repeated names are a user error), :data:`AXIS_FACTORS` given as its
    three :data:`AXES` (which may also be named one by one)."""
    given = [n.strip() for n in names if n.strip()]
    out = tuple(field for n in given for field in (AXES if n == AXIS_FACTORS else (n,)))
    bad = [n for n in out if n not in FITTABLE]
    if bad or not out or len(set(out)) != len(out):
        raise OptionError("--fit", f"need distinct names from {', '.join(FIT_NAMES)}; got {', '.join(names) or 'none'}")
    return out


def point_at(start: Point, names: Sequence[str], x: np.ndarray) -> Point:
    """``start`` with the fields ``names`` set to 10**``x``."""
    values = {n: float(10.0**v) for n, v in zip(names, x, strict=True)}
    scale = values.pop(SCALE, start.scale)
    disagreement = values.pop(DISAGREEMENT, start.disagreement)
    axes = tuple(values.pop(name, k) for name, k in zip(AXES, start.axes, strict=True))
    return Point(dataclasses.replace(start.config, **values), scale, disagreement, axes)
