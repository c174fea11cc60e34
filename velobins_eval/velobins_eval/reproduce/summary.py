"""From unit results to rows: seeds grouped, the IMU-only baseline added, the ``metrics.json`` document.

A row (``reg``, ``G+H^B``, ``M^C``, ...) holds every seed's per-flight metrics; its aggregate is the
mean over seeds of the per-seed aggregates (:func:`velobins_eval.scoring.aggregate`: mean over
flights), its spread the sample standard deviation over seeds. ``metrics.json`` is the
``velobins evaluate`` layout (:func:`velobins_eval.report.metrics_entry`) plus ``seeds`` and
``aggregate_std`` for the multi-seed rows.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import metrics
from ..report import json_value, metrics_entry
from ..scoring import ALL_KEYS, aggregate, nanmean
from .errors import ReproduceError
from .evaluation import UnitResult
from .plan import HEADLINE, IMU_ONLY, REGRESSION


@dataclass
class RowSummary:
    """One metrics.json row: every seed's per-flight metrics.

    Attributes:
        seed_flights: {seed: {flight: FlightMetrics}}.
    """

    seed_flights: dict[int, dict[str, metrics.FlightMetrics]]

    @property
    def flights(self) -> dict[str, metrics.FlightMetrics]:
        """Per-flight metrics of the seed-0 model (the lowest seed when 0 is absent)."""
        return self.seed_flights[min(self.seed_flights)]

    @property
    def seeds(self) -> dict[int, dict[str, float]]:
        """{seed: aggregate over flights}."""
        return {s: aggregate(f) for s, f in sorted(self.seed_flights.items())}

    @property
    def mean(self) -> dict[str, float]:
        """Mean over seeds of the per-seed aggregates (the aggregate itself for one seed)."""
        seeds = self.seeds
        return {k: nanmean([a[k] for a in seeds.values()]) for k in ALL_KEYS}

    @property
    def std(self) -> dict[str, float] | None:
        """Sample standard deviation over seeds (ddof = 1) of the aggregates; None for a single seed."""
        if len(self.seed_flights) < 2:
            return None
        seeds = self.seeds
        return {k: _nanstd([a[k] for a in seeds.values()]) for k in ALL_KEYS}


def _nanstd(values: Iterable[float]) -> float:
    arr = np.asarray(list(values), dtype=float)
    arr = arr[np.isfinite(arr)]
    return float(np.std(arr, ddof=1)) if arr.size >= 2 else math.nan


def summarise(results: list[UnitResult]) -> dict[str, RowSummary]:
    """Group unit results by row."""
    rows: dict[str, RowSummary] = {}
    for res in results:
        rows.setdefault(res.unit.row, RowSummary({})).seed_flights[res.unit.seed] = res.flights
    return rows


@dataclass
class SplitOutcome:
    """Everything scored on one split, ready for the report."""

    name: str
    rows: dict[str, RowSummary]
    nees: dict[str, np.ndarray]
    records: dict[str, dict[str, Any]]
    seqs: list
    given: tuple[str, ...] = ()
    """Rows of checkpoints given with ``--checkpoint`` (:mod:`.given`), scored beside the trained rows."""
    filters: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Rows (or ``trained rows``) -> the filter parameters they used (:func:`.given.filters_section`)."""


def score_split(name: str, results: list[UnitResult], seqs: list) -> SplitOutcome:
    """Rows of the unit results (the IMU-only baseline among them: :func:`.evaluation.imu_only_unit`)."""
    rows = summarise(results)
    nees = {r.unit.row: np.concatenate(list(r.nees.values())) for r in results if r.unit.seed == 0 and r.nees}
    records: dict[str, dict[str, Any]] = {r.unit.row: r.records for r in results if r.records}
    for needed in (HEADLINE, IMU_ONLY):
        if needed not in records:
            raise ReproduceError(f"split {name}: no {needed} records (every report draws its trajectories)")
    return SplitOutcome(name, rows, nees, records, seqs)


def metrics_document(rows: dict[str, RowSummary]) -> dict[str, Any]:
    """The ``velobins evaluate`` metrics.json layout, plus ``seeds`` / ``aggregate_std`` for multi-seed rows.

    ``aggregate`` is the mean over seeds of the per-seed aggregates (the seed-0 aggregate when
    there is one seed); ``flights`` are the seed-0 model's.
    """
    doc: dict[str, Any] = {}
    for name, row in rows.items():
        entry = metrics_entry(row.mean, row.flights)
        if len(row.seeds) > 1 or name in (HEADLINE, REGRESSION):
            entry["seeds"] = {str(s): {k: json_value(v) for k, v in a.items()} for s, a in sorted(row.seeds.items())}
            std = row.std
            entry["aggregate_std"] = {k: json_value(std[k] if std else None) for k in ALL_KEYS}
        doc[name] = entry
    return doc
