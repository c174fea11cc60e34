"""The search of ``velobins calibrate``: the fields of :mod:`velobins_eval.calibrate_fit` fitted in log₁₀ space.

Search, in log₁₀ space (scale-free steps, every value positive): an optional coarse grid over the
densities, then Nelder–Mead inside a *search box*. A fit within :data:`EDGE_DECADES` of a box edge
widens that edge by :data:`WIDEN_DECADES` and refines again (said in the log); a fit at a field's
hard limit (its ``ParamSpec``) is refused (:class:`~velobins_eval.calibrate_fit.CalibrationRefused`): the flights do not
identify that value. The objective is a deterministic function of the parameters (fixed
measurements; the synthetic noise is drawn once: common random numbers).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from velobins_common.errors import UserError
from velobins_common.progress import progress_bar

from .calibrate_fit import (
    DEFAULT_FIT,
    OBJECTIVE_UNITS,
    CalibrationRefused,
    Objective,
    Point,
    check_fit_names,
    log_limits,
    point_at,
)

GRID_LOG10 = {"acc_noise_density": (-2.5, 0.0), "gyro_noise_density": (-3.5, -1.0)}
"""log₁₀ range of the first search box (and the coarse grid) per density: acc 0.003–1 m/s²/√Hz, gyro
3e-4–0.1 rad/s/√Hz (MEMS in flight, vibration included). Other fields start with a box of ±:data:`BOX_DECADES`
around their start value."""
BOX_DECADES = 1.5
"""Half-width [decades] of the first search box of a field without a :data:`GRID_LOG10` range."""
EDGE_DECADES = 0.02
"""A fitted value this close to a search-box edge [decades] counts as *at* the edge."""
WIDEN_DECADES = 1.0
"""How far a box edge moves the first time the fit lands on it [decades]; each later widening doubles the step
(1, 2, 4 decades), so three reach any field's limit from its first box."""
MAX_WIDENINGS = 3
"""Widenings per fit before a fit still at an edge is refused."""
SIMPLEX_STEP = 0.25
"""The first simplex's step from the start along each field [decades] (a start of unknown distance to the fit)."""


def first_box(name: str, start_log10: float) -> tuple[float, float]:
    """The first search box of a field [log₁₀]: :data:`GRID_LOG10`, else ±:data:`BOX_DECADES` around the start;
    widened to hold the start, clipped to the field's limits."""
    lo, hi = GRID_LOG10.get(name, (start_log10 - BOX_DECADES, start_log10 + BOX_DECADES))
    lim = log_limits(name)
    return max(min(lo, start_log10), lim[0]), min(max(hi, start_log10), lim[1])


@dataclass
class FitResult:
    """What :func:`fit_noise` found."""

    point: Point
    """The fit: the start config with the fitted fields replaced, and s."""
    objective: float
    """The objective per update at the fit (nats, or m/s for ``accuracy`` and ``crps``)."""
    start_objective: float
    """The same at the start."""
    names: tuple[str, ...]
    x: np.ndarray
    """The fit in log₁₀ space (order of ``names``)."""
    evaluations: int
    """Filter passes over all flights (start + grid + refinement)."""
    boxes: dict[str, tuple[float, float]] = field(default_factory=dict)
    """The final search box per field [log₁₀]."""
    widened: list[str] = field(default_factory=list)
    """One line per widening of the search."""

    @property
    def values(self) -> dict[str, float]:
        """The fitted values by name."""
        return {n: float(10.0**v) for n, v in zip(self.names, self.x, strict=True)}


def log_values(point: Point, names: Sequence[str]) -> np.ndarray:
    """log₁₀ of the fields ``names`` of ``point``."""
    return np.array([math.log10(point.value(n)) for n in names])


def fit_noise(
    objective: Objective,
    start: Point,
    names: Sequence[str] = DEFAULT_FIT,
    grid_points: int = 6,
    max_evals: int = 60,
    progress: bool = True,
    log: Callable[[str], None] | None = None,
    initial: Point | None = None,
    step: float = SIMPLEX_STEP,
) -> FitResult:
    """Minimise ``objective`` over ``names`` in log₁₀ space: coarse grid over the densities, then Nelder–Mead
    inside the search box, widened where the fit lands on an edge (module docstring).

    Args:
        objective: the flights and the objective kind (:class:`Objective`).
        start: the 'before' point (its other fields are kept in the fit); a fitted field must be > 0.
        names: fields to fit (:data:`FITTABLE`).
        grid_points: grid values per density in :data:`GRID_LOG10` (1 skips the grid).
        max_evals: objective evaluations of each refinement, at most.
        progress: progress bar of the grid (terminal only).
        log: receives one line per stage (the command prints them).
        initial: where the search starts, if not at ``start`` (the command starts s at the value that fits the
            network's own errors best); the grid's other coordinates and the first box are taken from here.
        step: the first simplex's step [decades]; smaller from a start known to lie near the fit (fewer passes).

    Raises:
        CalibrationRefused: a fitted field ran to its hard limit, or was still at a box edge after
            :data:`MAX_WIDENINGS` widenings.
    """
    names = check_fit_names(names)
    for n in names:
        if start.value(n) <= 0:
            raise UserError(f"calibrate: cannot fit {n} from a start value of 0 (set it > 0 in --params)")
    say = log or (lambda _msg: None)
    unit = OBJECTIVE_UNITS[objective.kind]
    x_start = log_values(start, names)

    def value(x: np.ndarray) -> float:
        return objective(point_at(start, names, x))

    evals0 = objective.evaluations
    start_obj = value(x_start)
    best_x, best_f = x_start, start_obj
    x0 = x_start if initial is None else log_values(initial, names)
    if initial is not None:
        f = value(x0)
        if f < best_f:
            best_x, best_f = x0, f
    boxes = [first_box(n, x0[i]) for i, n in enumerate(names)]
    gridded = [i for i, n in enumerate(names) if n in GRID_LOG10]
    if grid_points > 1 and gridded:
        axes = [np.linspace(*boxes[i], grid_points) for i in gridded]
        mesh = np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1).reshape(-1, len(gridded))
        for p in progress_bar(mesh, enabled=progress, desc="calibrate grid", unit="point"):
            x = x0.copy()
            x[gridded] = p
            f = value(x)
            if f < best_f:
                best_x, best_f = x, f
        grid_desc = ", ".join(f"{names[i]} {10 ** best_x[i]:.4g}" for i in gridded)
        say(f"grid ({mesh.shape[0]} points): best {grid_desc}, objective {best_f:.4f} {unit}")
    widened: list[str] = []
    for rounds in range(MAX_WIDENINGS + 1):
        best_x, best_f, message = refine(value, best_x, best_f, boxes, max_evals, step)
        say(f"refinement: objective {best_f:.4f} {unit} ({message})")
        edges = at_edges(names, best_x, boxes)
        if not edges:
            break
        for i, side in edges:
            line = widen(names[i], side, best_x[i], boxes, i, rounds, f"{best_f:.4f} {unit}")
            widened.append(line)
            say(line)
    return FitResult(
        point_at(start, names, best_x),
        best_f,
        start_obj,
        names,
        best_x,
        objective.evaluations - evals0,
        {n: boxes[i] for i, n in enumerate(names)},
        widened,
    )


def widen(name: str, side: str, x: float, boxes: list[tuple[float, float]], i: int, rounds: int, objective: str) -> str:
    """Move the ``side`` edge of ``boxes[i]`` out by :data:`WIDEN_DECADES` · 2^``rounds`` (clipped to the field's
    limit) and return the line that says so; refuse (:class:`CalibrationRefused`) a fit at the limit itself, or
    one still at an edge after :data:`MAX_WIDENINGS` widenings. ``objective``: the value and unit a refusal quotes."""
    limit = log_limits(name)[0 if side == "lower" else 1]
    if abs(x - limit) <= EDGE_DECADES:
        raise CalibrationRefused(
            f"calibrate: refused: {name} ended at a bound of its search, its {side} limit {10**limit:.3g}: the "
            f"objective keeps improving toward it ({objective}), so the flights do not determine it "
            "(a frozen or noise-free IMU? too little flight?). Fix it with --params and leave it out of --fit, or "
            "calibrate on more or other flights"
        )
    if rounds >= MAX_WIDENINGS:
        raise CalibrationRefused(
            f"calibrate: refused: {name} still ended at a bound of its search ({10**x:.3g}, {side}) after "
            f"{MAX_WIDENINGS} widenings"
        )
    lo, hi = boxes[i]
    step = WIDEN_DECADES * 2**rounds
    boxes[i] = (max(lo - step, limit), hi) if side == "lower" else (lo, min(hi + step, limit))
    return (
        f"widening the search: {name} fit {10**x:.4g} at the {side} edge of [{10**lo:.3g}, {10**hi:.3g}]; "
        f"now [{10 ** boxes[i][0]:.3g}, {10 ** boxes[i][1]:.3g}]"
    )


def refine(
    value: Callable[[np.ndarray], float],
    x: np.ndarray,
    f: float,
    boxes: list[tuple[float, float]],
    max_evals: int,
    step: float = SIMPLEX_STEP,
) -> tuple[np.ndarray, float, str]:
    """Nelder–Mead from ``x`` inside ``boxes``, its first simplex ``step`` decades along each field (stops when the
    simplex spans < 0.01 decade and its values differ by < 1e-4, nats/update or m/s); (best x, best value, scipy's
    message)."""
    from scipy.optimize import minimize

    n = len(x)
    # The best point so far may lie outside a box centred elsewhere (a variance scale that starts at 1 while its
    # search is centred on the network's own errors): Nelder-Mead starts from its projection into the boxes.
    start = np.clip(x, [b[0] for b in boxes], [b[1] for b in boxes])
    steps = [step if start[i] + step <= boxes[i][1] else -step for i in range(n)]
    simplex = np.vstack([start] + [start + steps[i] * np.eye(n)[i] for i in range(n)])
    res = minimize(
        value,
        start,
        method="Nelder-Mead",
        bounds=boxes,
        options={"initial_simplex": simplex, "xatol": 0.01, "fatol": 1e-4, "maxfev": max(1, max_evals)},
    )
    message = f"{res.nfev} evaluations, {res.message}"
    return (np.asarray(res.x, dtype=float), float(res.fun), message) if res.fun < f else (x, f, message)


def at_edges(names: Sequence[str], x: np.ndarray, boxes: list[tuple[float, float]]) -> list[tuple[int, str]]:
    """(index, 'lower'/'upper') of every fitted value within :data:`EDGE_DECADES` of its box edge."""
    out = []
    for i in range(len(names)):
        if x[i] - boxes[i][0] <= EDGE_DECADES:
            out.append((i, "lower"))
        elif boxes[i][1] - x[i] <= EDGE_DECADES:
            out.append((i, "upper"))
    return out
