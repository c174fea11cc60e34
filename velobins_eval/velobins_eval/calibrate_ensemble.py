"""``velobins calibrate`` for an ensemble: its weight b on the members' disagreement, fitted with s.

An ensemble checkpoint (``velobins ensemble``) reports the mixture's variance σ̄² and, beside it, the members'
disagreement d̄ averaged over ``predictor.disagreement_tau``; the predictor hands the filter R = s·σ̄² + b·d̄.
At a fixed ratio b/s that is s·(σ̄² + (b/s)·d̄): the flights with d̄ :func:`folded` into their variances, and
the fit of s alone (``velobins_eval.calibrate.run_stage``) applies unchanged. :func:`disagreement_stage` runs it
along a profile of ratios and keeps the best (docs/calibrate.md, "What is fitted").
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .calibrate_errors import own_scale
from .calibrate_fit import DISAGREEMENT, CalibrationFlight, CalibrationRefused, Point
from .calibrate_search import SIMPLEX_STEP


def folded(flights: Sequence[CalibrationFlight], ratio: float) -> list[CalibrationFlight]:
    """The flights with an ensemble's disagreement folded into the variance: σ̂² + ``ratio``·d̄ (unchanged where
    ``ratio`` is 0 or a flight has no disagreement). A filter scaled by s then sees s·σ̂² + b·d̄ with b = ratio·s,
    which is how the fit of s alone also fits b at a given ratio."""
    if ratio == 0:
        return list(flights)
    return [cf if cf.dis is None else dataclasses.replace(cf, var=cf.var + ratio * cf.dis) for cf in flights]


DISAGREEMENT_RATIOS = (0.0, 0.25, 1.0, 4.0, 16.0, 64.0)
"""The first ratios b/s of :func:`disagreement_stage`'s profile, in units of ρ (:func:`reference_ratio`): 0, the
mixture's own variance alone, then 2½ decades from where the disagreement's term is a quarter of the variance's."""
WARM_STEP = 0.05
"""The first simplex's step [decades] of a fit of s that starts from :func:`warm_scale` or from the kept ratio's
optimum (a quarter decade from a start of unknown distance: ``calibrate_search.SIMPLEX_STEP``)."""
DISAGREEMENT_WIDENINGS = 3
"""How often the profile goes on ×4 past its largest ratio while that one is the best (then it is kept)."""


def reference_ratio(flights: Sequence) -> float:
    """ρ = median σ̄² / median d̄ over every estimate: the ratio b/s at which both terms of R are equal at the median
    (the profile's unit, so that it is scale-free). Refused when the members never disagree."""
    var = np.concatenate([cf.var.ravel() for cf in flights])
    dis = np.concatenate([cf.dis.ravel() for cf in flights if cf.dis is not None] or [np.zeros(1)])
    if not np.median(dis) > 0:
        raise CalibrationRefused(f"{DISAGREEMENT}: the ensemble's members never disagree on these flights")
    return float(np.median(var) / np.median(dis))


def warm_scale(ratio: float, rho: float, own: dict[float, float], fits: dict[float, Any]) -> float:
    """Where the fit of s at ``ratio`` starts: the network's own best s on the folded flights (``own[ratio]``), times
    the factor by which the filter's fitted s exceeded its own at the nearest ratio fitted so far (nearest in
    log(1 + ratio/ρ)). That factor comes from how long the network's errors stay correlated (the filter takes
    its estimates as independent), which the ratio hardly changes, while the own s moves with the ratio. Started
    there, a fit needs fewer filter passes and rarely a widening of its box (docs/calibrate.md)."""
    if not fits:
        return own[ratio]

    def distance(r: float) -> float:
        return abs(math.log1p(r / rho) - math.log1p(ratio / rho))

    near = min(fits, key=distance)
    return own[ratio] * fits[near].point.scale / own[near]


def disagreement_stage(
    label: str,
    flights: list[CalibrationFlight],
    start: Point,
    names: Sequence[str],
    args: argparse.Namespace,
    log: Callable[[str], None],
    initial: Point | None,
    fit_stage: Callable[..., Any],
):
    """An ensemble's s and b (R = s·σ̄² + b·d̄) with the other network fields of ``names``.

    At each ratio b/s of a profile the flights are :func:`folded` and s is fitted as for one network by
    ``fit_stage`` (``velobins_eval.calibrate.run_stage``, passed in since that module calls this one, without its
    curvature), each started from :func:`warm_scale` where ``initial`` is given; the ratio with the best objective
    is kept, refined ×2^±1, and the profile is printed, so a flat one is visible. The profile goes on past its
    largest ratio while that one wins, at most :data:`DISAGREEMENT_WIDENINGS` times; still winning then, it is kept
    and the line says that d̄ alone sets R (s·σ̄² is then a negligible share of it: the limit of the model, not the
    edge of a parameter's range). The kept ratio's s is fitted once more from its optimum with the curvature,
    which says how well the flights pin s down there. Returns ``fit_stage``'s stage with b added.
    """
    rho = reference_ratio(flights)
    fits: dict[float, Any] = {}
    own: dict[float, float] = {}  # by ratio: the network's own best s on the folded flights

    def objective(ratio: float) -> float:
        if ratio not in fits:
            data = folded(flights, ratio)
            own[ratio] = own_scale(data)
            first, step = None, SIMPLEX_STEP
            if initial is not None:
                first = dataclasses.replace(initial, scale=warm_scale(ratio, rho, own, fits))
                step = WARM_STEP if fits else SIMPLEX_STEP
            line = f"{label}, b/s {ratio:.4g}"
            fits[ratio] = fit_stage(line, data, start, names, args, log, first, None, False, step)
        return fits[ratio].objective

    best = min((k * rho for k in DISAGREEMENT_RATIOS), key=objective)
    for _ in range(DISAGREEMENT_WIDENINGS):
        if best < max(fits):
            break
        best = min((best, 4.0 * best), key=objective)
    limit = ""
    if best == max(fits):  # R tends to b·d̄ alone: the variance's term no longer counts (an asymptote, not a bound)
        share = f"s·σ̄² is 1/{best / rho:.0f} of b·d̄ at the median"
        limit = f"; the objective still falls at the largest ratio tried: d̄ alone sets R ({share})"
    elif best > 0:
        best = min((best / 2.0, best, 2.0 * best), key=objective)
    data = folded(flights, best)
    stage = fit_stage(f"{label}, b/s {best:.4g}", data, start, names, args, log, fits[best].point, step=WARM_STEP)
    b = best * stage.point.scale
    profile = ", ".join(f"{r:.3g} → {fits[r].objective:.4f}" for r in sorted(fits))
    lines = [f"profile of the objective over b/s (ρ = {rho:.3g}): {profile}; kept b/s {best:.3g}, b {b:.4g}{limit}"]
    return dataclasses.replace(
        stage,
        label=label,
        point=dataclasses.replace(stage.point, disagreement=b),
        values={**stage.values, DISAGREEMENT: b},
        passes=stage.passes + sum(st.passes for st in fits.values()),
        lines=[*lines, *stage.lines],
    )
