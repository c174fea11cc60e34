"""The fitting core of ``velobins calibrate``: the EKF's IMU noise by maximum likelihood of its innovations.

Why this method (docs/calibrate.md): the filter's noise densities decide how far it trusts the IMU
against the velocity measurements. With measurements whose noise is *known* — ground-truth body
velocity plus seeded N(0, σ²) noise, σ = ``--meas-sigma`` — every remaining inconsistency of the
filter comes from its IMU noise model. For a linear-Gaussian state-space model the innovations
νₖ = zₖ − h(x̂ₖ⁻) are independent N(0, Sₖ), so the exact log-likelihood of all measurements is

    −log L = ½ Σₖ (νₖᵀ Sₖ⁻¹ νₖ + log det Sₖ + 3 log 2π)            (innovation form)

and its maximiser over the noise densities is the maximum-likelihood noise model (for the EKF, to
first order). Unlike a search on NEES share or median, it uses every update, weighs the
time-correlation of the errors (a too-small density makes the innovations drift, a too-large one
makes S too wide) and is smooth in the parameters, so an optimiser refines it. The measurement
noise is drawn once per flight and reused at every evaluation (common random numbers): the
objective is a deterministic function of the parameters.

Search: a coarse grid over the densities in log₁₀ space, then Nelder–Mead from the best grid point
in log₁₀ space (scale-free steps; every parameter stays positive), inside the parameters' own
``ParamSpec`` bounds. The filter is :func:`velobins_ekf.offline.run_offline` started from ground
truth (as :func:`velobins_eval.evaluate.fuse_flight` starts it); the consistency figures of the
before/after table are :func:`~velobins_eval.evaluate.fuse_flight` scored by
:func:`velobins_eval.scoring.score`, the numbers ``velobins evaluate`` would print.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from velobins_common.errors import OptionError, UserError
from velobins_common.fields import param_spec
from velobins_common.progress import progress_bar
from velobins_common.stats import gaussian_nll_full
from velobins_data.flight import Flight

from .scoring import GroundTruth, aggregate, score

FITTABLE = (
    "acc_noise_density",
    "gyro_noise_density",
    "acc_random_walk",
    "gyro_random_walk",
    "init_sigma_acc_bias",
    "init_sigma_gyro_bias",
)
"""EKF noise fields ``calibrate`` can fit (``--fit``)."""
DEFAULT_FIT = ("acc_noise_density", "gyro_noise_density")
"""Fitted by default: the white-noise densities. The random walks barely move the objective; the initial bias
sigmas do (docs/calibrate.md) and can be added with ``--fit``."""
GRID_LOG10 = {"acc_noise_density": (-2.5, 0.0), "gyro_noise_density": (-3.5, -1.0)}
"""log₁₀ range of the coarse grid per density: acc 0.003–1 m/s²/√Hz, gyro 3e-4–0.1 rad/s/√Hz (MEMS in flight,
vibration included); a fitted field without a range here starts the refinement at its given value."""
MEAS_RATE_HZ = 20.0
"""Rate of the synthetic velocity measurements [Hz]: the network node's update rate."""


@dataclass
class CalibrationFlight:
    """One flight with its synthetic velocity measurements (ground truth + known noise)."""

    flight: Flight
    t: np.ndarray
    """(U,) measurement stamps [s]."""
    z: np.ndarray
    """(U, 3) body velocity measurements [m/s]."""
    var: np.ndarray
    """(U, 3) their variances [m²/s²] (σ², the noise actually drawn)."""


def synthetic_measurements(
    seq: Flight, sigma: float, rng: np.random.Generator, rate_hz: float = MEAS_RATE_HZ
) -> CalibrationFlight:
    """Ground-truth body velocity at ``rate_hz`` (from one period after the first sample) plus N(0, sigma²)."""
    if not sigma > 0:
        raise ValueError(f"--meas-sigma must be > 0 m/s, got {sigma}")
    t = np.arange(seq.t[0] + 1.0 / rate_hz, seq.t[-1], 1.0 / rate_hz)
    if t.size < 2:
        raise UserError(f"{seq.source}: flight too short for velocity measurements ({seq.duration:.2f} s)")
    vb = GroundTruth.of(seq).at(t).body_velocity
    z = vb + rng.normal(0.0, sigma, size=vb.shape)
    return CalibrationFlight(seq, t, z, np.full_like(z, sigma**2))


def innovation_nll(updates: Sequence) -> tuple[float, int]:
    """(Σ ½(νᵀS⁻¹ν + log det S + d log 2π), count) over the accepted updates (``UpdateResult`` records).

    Each term is :func:`velobins_common.stats.gaussian_nll_full` of the innovation (its NIS is νᵀS⁻¹ν)."""
    total = 0.0
    count = 0
    for u in updates:
        if not u.accepted:
            continue
        sign, logdet = np.linalg.slogdet(u.innovation_cov)
        if sign <= 0:
            return math.inf, count + 1
        total += gaussian_nll_full(u.nis, logdet, u.innovation.size)
        count += 1
    return total, count


def objective(flights: Sequence[CalibrationFlight], config) -> float:
    """Mean innovation NLL per update [nats] of the filter ``config`` over ``flights`` (lower is better)."""
    from velobins_ekf.offline import run_offline

    from .evaluate import ground_truth_state

    total, count = 0.0, 0
    for cf in flights:
        seq = cf.flight
        res = run_offline(
            seq.t,
            seq.acc,
            seq.gyro,
            cf.t,
            cf.z,
            cf.var,
            init_state=ground_truth_state(seq),
            config=config,
            output_stride=max(1, len(seq)),
        )
        nll, n = innovation_nll(res.updates)
        total += nll
        count += n
    if count == 0:
        raise UserError("calibrate: the filter applied no velocity update on any flight")
    return total / count


def consistency(flights: Sequence[CalibrationFlight], config) -> dict[str, float]:
    """Fused AVE, median NEES and NEES share in bounds (means over flights, as ``velobins evaluate``)."""
    from .evaluate import fuse_flight

    per_flight = {}
    for cf in flights:
        rec = fuse_flight(cf.flight, cf.t, cf.z, cf.var, "calibrate", config)
        per_flight[cf.flight.name] = score(rec, GroundTruth.of(cf.flight))
    agg = aggregate(per_flight)
    return {k: agg[k] for k in ("ave", "nees_median", "nees_in_bounds")}


def log_bounds(name: str) -> tuple[float, float]:
    """log₁₀ of the ``EkfConfig`` field's allowed (min, max); random walks get a floor of 1e-9 (log of 0)."""
    from velobins_ekf.config import EkfConfig

    spec = param_spec(next(f for f in dataclasses.fields(EkfConfig) if f.name == name))
    lo = max(spec.min if spec.min is not None else 0.0, 1e-9)
    hi = spec.max if spec.max is not None else 1e3
    return math.log10(lo), math.log10(hi)


@dataclass
class FitResult:
    """What :func:`fit_noise` found."""

    config: object
    """The fitted ``EkfConfig`` (start config with the fitted fields replaced)."""
    objective: float
    """Mean innovation NLL per update at the fit [nats]."""
    start_objective: float
    """The same at the start config."""
    names: tuple[str, ...]
    evaluations: int
    """Filter runs over all flights (grid + refinement + start)."""
    grid_best: dict[str, float] = field(default_factory=dict)
    at_grid_edge: list[str] = field(default_factory=list)
    """Fields whose best grid value was at the grid's edge (the refinement may go beyond it)."""


def check_fit_names(names: Sequence[str]) -> tuple[str, ...]:
    """The ``--fit`` list, checked (unknown or repeated names are a user error)."""
    out = tuple(n.strip() for n in names if n.strip())
    bad = [n for n in out if n not in FITTABLE]
    if bad or not out or len(set(out)) != len(out):
        raise OptionError("--fit", f"need distinct names from {', '.join(FITTABLE)}; got {', '.join(names) or 'none'}")
    return out


def fit_noise(
    flights: Sequence[CalibrationFlight],
    start,
    names: Sequence[str] = DEFAULT_FIT,
    grid_points: int = 6,
    max_evals: int = 60,
    progress: bool = True,
    log: Callable[[str], None] | None = None,
) -> FitResult:
    """Maximum-likelihood IMU noise of the EKF: coarse log grid over the densities, then Nelder–Mead.

    Args:
        flights: flights with synthetic measurements (:func:`synthetic_measurements`).
        start: ``EkfConfig`` to start from (its other fields are kept).
        names: fields to fit (:data:`FITTABLE`).
        grid_points: grid values per density in :data:`GRID_LOG10` (1 skips the grid).
        max_evals: objective evaluations of the refinement, at most.
        progress: progress bar of the grid (terminal only).
        log: receives one line per stage (the command prints them).
    """
    from scipy.optimize import minimize

    names = check_fit_names(names)
    for n in names:
        if getattr(start, n) <= 0:
            raise UserError(f"calibrate: cannot fit {n} from a start value of 0 (set it > 0 in --params)")
    say = log or (lambda _msg: None)
    evals = 0

    def value(x: np.ndarray) -> float:
        nonlocal evals
        evals += 1
        cfg = dataclasses.replace(start, **{n: float(10.0**v) for n, v in zip(names, x, strict=True)})
        return objective(flights, cfg)

    x0 = np.array([math.log10(getattr(start, n)) for n in names])
    start_obj = value(x0)
    best_x, best_f = x0.copy(), start_obj
    gridded = [i for i, n in enumerate(names) if n in GRID_LOG10]
    edges: list[str] = []
    if grid_points > 1 and gridded:
        axes = [np.linspace(*GRID_LOG10[names[i]], grid_points) for i in gridded]
        mesh = np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1).reshape(-1, len(gridded))
        for point in progress_bar(mesh, enabled=progress, desc="calibrate grid", unit="point"):
            x = x0.copy()
            x[gridded] = point
            f = value(x)
            if f < best_f:
                best_x, best_f = x, f
        edges = [names[i] for i, ax in zip(gridded, axes, strict=True) if best_x[i] in (ax[0], ax[-1])]
        grid_desc = ", ".join(f"{names[i]} {10 ** best_x[i]:.4g}" for i in gridded)
        say(f"grid ({mesh.shape[0]} points): best {grid_desc}, objective {best_f:.4f} nats/update")
    grid_best = {n: float(10 ** best_x[i]) for i, n in enumerate(names)}
    bounds = [log_bounds(n) for n in names]
    simplex = np.vstack([best_x] + [best_x + 0.25 * np.eye(len(names))[i] for i in range(len(names))])
    res = minimize(
        value,
        best_x,
        method="Nelder-Mead",
        bounds=bounds,
        options={"initial_simplex": simplex, "xatol": 0.005, "fatol": 1e-6, "maxfev": max(1, max_evals)},
    )
    x_fit, f_fit = (res.x, float(res.fun)) if res.fun < best_f else (best_x, best_f)
    fitted = dataclasses.replace(start, **{n: float(10.0**v) for n, v in zip(names, x_fit, strict=True)})
    say(f"refinement: {res.nfev} evaluations, objective {f_fit:.4f} nats/update ({res.message})")
    return FitResult(fitted, f_fit, start_obj, names, evals, grid_best, edges)


BOUND_TOLERANCE_DECADES = 0.01
"""A fitted value within this many decades of a bound of its search ended at the bound."""


def at_search_bound(fit: FitResult) -> dict[str, tuple[float, float]]:
    """{field: (fitted value, the bound it ended at)} for fitted fields pinned to a bound of :func:`log_bounds`.

    A maximum at the bound of the search is no maximum the flights determine (a frozen or noise-free
    IMU fits a density of zero): the command refuses it instead of writing it.
    """
    out = {}
    for name in fit.names:
        x = math.log10(getattr(fit.config, name))
        bound = min(log_bounds(name), key=lambda b: abs(x - b))
        if abs(x - bound) < BOUND_TOLERANCE_DECADES:
            out[name] = (float(10.0**x), float(10.0**bound))
    return out


def variance_scale(err: np.ndarray, var: np.ndarray) -> float:
    """Maximum-likelihood s of N(0, s·σ²) for errors ``err`` with variances ``var``: s = mean(e² / σ²)."""
    e2 = np.asarray(err, dtype=np.float64) ** 2
    v = np.asarray(var, dtype=np.float64)
    if e2.shape != v.shape or e2.size == 0 or np.any(v <= 0) or not np.all(np.isfinite(e2 / v)):
        raise ValueError("calibrate: network errors and variances must be non-empty, finite, same shape, var > 0")
    return float(np.mean(e2 / v))
