"""How well the flights pin the fitted values down: the objective's curvature at the fit, in log₁₀ space.

At a minimum x̂ of a total negative log-likelihood F(x) = Σ_b F_b(x), summed over blocks b of
flight time, two standard errors of the estimate follow from finite differences (step ``h``
decades):

* the **curvature** H = ∇²F (central second differences): cov = H⁻¹ if the model were exactly
  right and every update independent (the inverse observed Fisher information);
* the **robust** (sandwich) covariance H⁻¹ J H⁻¹, J = Σ_b g_b g_bᵀ with g_b = ∇F_b (central first
  differences, from the same evaluations): valid for an M-estimator under a misspecified model and
  for errors correlated within a block (the network's estimates are: consecutive updates share
  most of their window), as long as blocks are roughly independent. Blocks are
  ``block_s`` seconds of a flight (:meth:`velobins_eval.calibrate_fit.Objective.blocks`);
* the **by-flight** sandwich: the same with J summed over whole flights (the blocks of one flight added
  first), scaled by G/(G−1) for G flights (the usual small-sample factor of a cluster-robust covariance).
  Blocks of one flight share what is constant over it (a turn-on bias, a style of flying, a network's
  error on that flight), so the 10 s blocks are not independent, and the robust std then describes
  another set of 10 s blocks of *these* flights. The by-flight std describes another set of flights like
  these. It is still no bound for flights of another kind (faster, more agile): two sets of six
  simulated flights of one vehicle, one faster than the other, gave acc densities a factor 1.9 apart,
  where the by-flight factors were 1.15 and 1.19 (docs/calibrate.md §5). With few flights it is itself
  uncertain; it is reported from three flights up.

The printed std is of log₁₀ of each value, shown also as a factor 10^std ("× / ÷"): a large factor
is a flat objective along that field. A curvature that is not positive definite means the fit is
not at a clear minimum; its std is then infinite.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

STEP_DECADES = 0.1
"""Finite-difference step [decades] (the objective is smooth and deterministic; 26 % of a value)."""
BLOCK_S = 10.0
"""Length of the independent blocks of the robust covariance [s] (10× the network's 1 s window)."""
FLAT_FACTOR = 3.0
"""A 1σ factor above this (half a decade) marks a field the flights barely identify."""
MIN_FLIGHTS = 3
"""Fewest flights for the by-flight sandwich (with two, J has rank one and G/(G−1) doubles it)."""


@dataclass
class Curvature:
    """Curvature and standard errors of a fit (log₁₀ space, order of ``names``)."""

    names: tuple[str, ...]
    hessian: np.ndarray
    """(n, n) ∇² of the total NLL [nats/decade²]."""
    std: np.ndarray
    """(n,) std of log₁₀ from H⁻¹ (independent updates; inf where H is not positive definite)."""
    robust_std: np.ndarray
    """(n,) std of log₁₀ from the sandwich H⁻¹JH⁻¹ over blocks (inf where H is not positive definite)."""
    blocks: int
    evaluations: int
    flight_std: np.ndarray | None = None
    """(n,) std of log₁₀ from the by-flight sandwich (None without at least ``MIN_FLIGHTS`` flights)."""
    flights: int = 0

    def lines(self, values: dict[str, float], likelihood: bool = True) -> list[str]:
        """One line per field: the value, its 1σ factors and whether the objective is flat along it.

        ``likelihood`` False (an objective that is not a negative log-likelihood, such as ``accuracy``): the
        curvature factor H⁻¹ is left out, since it is a standard error only for a likelihood; the sandwich
        factors hold for any M-estimator.
        """
        by_flight = self.flight_std is not None
        head = (
            f"uncertainty of the fit (1σ, from the objective's curvature in log10 space, step {STEP_DECADES:g} "
            f"decade; robust = sandwich over {self.blocks} blocks of {BLOCK_S:g} s"
        )
        if by_flight:
            head += f"; by flight = sandwich over the {self.flights} flights, what another set of flights may give"
        if not likelihood:
            head += "; no curvature factor: the objective is not a likelihood"
        out = [head + "):"]
        for i, n in enumerate(self.names):
            stds = ([self.std[i]] if likelihood else []) + [self.robust_std[i]]
            stds += [self.flight_std[i]] if by_flight else []
            flat = max(stds) > math.log10(FLAT_FACTOR)
            out.append(
                f"  {n} {values[n]:.4g}: "
                + (f"×/÷ {factor(self.std[i])} (curvature), " if likelihood else "")
                + f"×/÷ {factor(self.robust_std[i])} (robust)"
                + (f", ×/÷ {factor(self.flight_std[i])} (by flight)" if by_flight else "")
                + ("  <- flat: the flights barely identify it" if flat else "")
            )
        return out


def factor(std_log10: float) -> str:
    """10^std as text (``inf`` when unidentified)."""
    return "inf" if not math.isfinite(std_log10) or std_log10 > 6 else f"{10.0**std_log10:.3g}"


def curvature(
    blocks_at: Callable[[np.ndarray], np.ndarray],
    x: np.ndarray,
    names: Sequence[str],
    limits: Sequence[tuple[float, float]],
    step: float = STEP_DECADES,
    block_counts: Sequence[int] | None = None,
) -> Curvature:
    """Finite-difference curvature of Σ ``blocks_at(x)`` at ``x`` (log₁₀), and its standard errors.

    ``blocks_at(x)`` returns the NLL per block (a fixed number of blocks). The step per field is
    ``step``, shortened to stay inside its ``limits`` (log₁₀); 1 + 2n + 2n(n−1) evaluations.
    ``block_counts``, the number of consecutive blocks of each flight, adds the by-flight sandwich
    (from the same evaluations) when there are at least ``MIN_FLIGHTS`` flights.
    """
    n = len(x)
    h = np.array([max(min(step, 0.9 * (x[i] - limits[i][0]), 0.9 * (limits[i][1] - x[i])), 1e-4) for i in range(n)])
    cache: dict[tuple[int, ...], np.ndarray] = {}

    def at(offsets: tuple[int, ...]) -> np.ndarray:
        if offsets not in cache:
            cache[offsets] = np.asarray(blocks_at(x + np.asarray(offsets) * h), dtype=np.float64)
        return cache[offsets]

    def unit(*pairs: tuple[int, int]) -> tuple[int, ...]:
        o = [0] * n
        for i, s in pairs:
            o[i] += s
        return tuple(o)

    f0 = at(unit()).sum()
    hess = np.zeros((n, n))
    grads = []
    for i in range(n):
        plus, minus = at(unit((i, 1))), at(unit((i, -1)))
        hess[i, i] = (plus.sum() - 2.0 * f0 + minus.sum()) / h[i] ** 2
        grads.append((plus - minus) / (2.0 * h[i]))
        for j in range(i):
            pp, pm = at(unit((i, 1), (j, 1))).sum(), at(unit((i, 1), (j, -1))).sum()
            mp, mm = at(unit((i, -1), (j, 1))).sum(), at(unit((i, -1), (j, -1))).sum()
            hess[i, j] = hess[j, i] = (pp - pm - mp + mm) / (4.0 * h[i] * h[j])
    g = np.stack(grads, axis=1)  # (blocks, n)
    flights = len(block_counts) if block_counts is not None else 0
    if flights and sum(block_counts) != g.shape[0]:
        raise ValueError(f"curvature: block_counts sum to {sum(block_counts)}, blocks_at gave {g.shape[0]} blocks")
    by_flight = flights >= MIN_FLIGHTS
    std = robust = np.full(n, math.inf)
    flight_std = np.full(n, math.inf) if by_flight else None
    if np.all(np.isfinite(hess)) and np.all(np.linalg.eigvalsh(hess) > 0):
        inv = np.linalg.inv(hess)
        std = np.sqrt(np.diag(inv))
        robust = np.sqrt(np.maximum(np.diag(inv @ (g.T @ g) @ inv), 0.0))
        if by_flight:
            gf = np.add.reduceat(g, np.cumsum([0, *block_counts[:-1]]), axis=0)  # (flights, n): per-flight sums
            j = gf.T @ gf * flights / (flights - 1)
            flight_std = np.sqrt(np.maximum(np.diag(inv @ j @ inv), 0.0))
    return Curvature(tuple(names), hess, std, robust, g.shape[0], len(cache), flight_std, flights)
