"""Scoring one evaluation unit on one split (an evaluation job of :mod:`.tasks` runs one).

Each unit (a row and seed, see :class:`~velobins_eval.reproduce.plan.EvalUnit`) goes through the
code paths of ``velobins evaluate``: :func:`~velobins_eval.evaluate.flight_record` (network then
filter, or both in one loop for the Table I baselines) and :func:`~velobins_eval.scoring.score`.
The IMU-only baseline is a unit too (:func:`imu_only_unit`), sampled at the headline model's stamps.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from velobins_common.errors import UserError

from .. import metrics
from ..evaluate import flight_record, imu_only_flight
from ..scoring import GroundTruth, score
from .plan import BASELINE_ROWS, HEADLINE, IMU_ONLY, REGRESSION, EvalUnit


@dataclass
class UnitResult:
    """Scores of one :class:`EvalUnit` on one split.

    Attributes:
        unit: what was scored.
        flights: {flight: FlightMetrics}.
        nees: {flight: per-update NEES of the fused velocity} (for the NEES figure).
        records: {flight: FlightRecord} when kept (headline rows, for trajectories and IMU-only stamps).
    """

    unit: EvalUnit
    flights: dict[str, metrics.FlightMetrics]
    nees: dict[str, np.ndarray]
    records: dict[str, Any] = field(default_factory=dict)


def evaluate_unit(
    unit: EvalUnit, checkpoint: str | Path, seqs: list, keep_records: bool, ekf_config: Any = None
) -> UnitResult:
    """Network-only and EKF-fused scores of one model (with its uncertainty source) on ``seqs``."""
    from velobins_net.inference import load_checkpoint

    model = load_checkpoint(checkpoint)
    if unit.uncertainty is not None and not model.cfg.cov_head and "C" in unit.uncertainty:
        raise UserError(f"{checkpoint}: row {unit.row} needs a covariance decoder, the model has none")
    result = UnitResult(unit, {}, {})
    for seq in seqs:
        # The uncertainty source is an inference argument: the model itself is not modified.
        record = flight_record(model, seq, unit.row, ekf_config=ekf_config, uncertainty=unit.uncertainty)
        gt = GroundTruth.of(seq)
        result.flights[seq.name] = score(record, gt)
        result.nees[seq.name] = metrics.nees(record.v_fused - gt.at(record.t).v, record.cov_fused).astype(np.float32)
        if keep_records:
            result.records[seq.name] = record
    return result


def keeps_records(unit: EvalUnit) -> bool:
    """Whether a unit keeps its flight records (seed 0 of the Table I methods: trajectories, IMU-only stamps)."""
    return unit.seed == 0 and unit.row in (HEADLINE, REGRESSION, *BASELINE_ROWS)


def imu_only_unit(seqs: list, headline: UnitResult, ekf_config: Any = None) -> UnitResult:
    """The IMU-only baseline of a split: the same filter without updates, sampled at the seed-0 headline
    model's update stamps (its kept records), scored like every other row."""
    if set(headline.records) != {s.name for s in seqs}:
        raise ValueError(f"IMU-only: the {headline.unit.row} unit keeps no records of every flight")
    result = UnitResult(EvalUnit(IMU_ONLY, ""), {}, {})
    for seq in seqs:
        record = imu_only_flight(seq, headline.records[seq.name].t, ekf_config)
        result.flights[seq.name] = score(record, GroundTruth.of(seq))
        result.records[seq.name] = record
    return result
