"""Scoring every evaluation unit of the plan on one split, in worker processes.

Each unit (a row and seed, see :class:`~velobins_eval.reproduce.plan.EvalUnit`) goes through the
code paths of ``velobins evaluate``: :func:`~velobins_eval.evaluate.flight_record` (network then
filter, or both in one loop for the Table I baselines) and :func:`~velobins_eval.scoring.score`. With
``--jobs`` > 1 the units run in a pool of spawned processes (one torch thread each, the split's
flights loaded once per worker); Ctrl-C or an error cancels every queued unit.
"""

from __future__ import annotations

import multiprocessing
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from velobins_common.progress import progress_bar

from .. import metrics
from ..evaluate import flight_record, load_ekf_config
from ..scoring import GroundTruth, score
from .plan import BASELINE_ROWS, HEADLINE, REGRESSION, EvalUnit, model_dir


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


_WORKER_SEQS: list = []
_WORKER_EKF: Any = None


def _init_worker(dataset: str, directory: str, params: tuple[str, ...] = ()) -> None:
    """Pool initialiser: one torch thread, the split's flights loaded once per worker."""
    import torch

    from velobins_data.datasets import load_directory

    torch.set_num_threads(1)
    global _WORKER_SEQS, _WORKER_EKF
    _WORKER_SEQS = load_directory(dataset, directory)
    _WORKER_EKF = load_ekf_config([Path(p) for p in params])


def evaluate_unit(
    unit: EvalUnit, checkpoint: str | Path, seqs: list, keep_records: bool, ekf_config: Any = None
) -> UnitResult:
    """Network-only and EKF-fused scores of one model (with its uncertainty source) on ``seqs``."""
    from velobins_net.inference import load_checkpoint

    model = load_checkpoint(checkpoint)
    if unit.uncertainty is not None and not model.cfg.cov_head and "C" in unit.uncertainty:
        raise ValueError(f"{checkpoint}: row {unit.row} needs a covariance decoder, the model has none")
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


def _evaluate_in_worker(unit: EvalUnit, checkpoint: str, keep_records: bool) -> UnitResult:
    return evaluate_unit(unit, checkpoint, _WORKER_SEQS, keep_records, _WORKER_EKF)


def keeps_records(unit: EvalUnit) -> bool:
    """Whether a unit keeps its flight records (seed 0 of the Table I methods: trajectories, IMU-only stamps)."""
    return unit.seed == 0 and unit.row in (HEADLINE, REGRESSION, *BASELINE_ROWS)


def evaluate_split(
    units: list[EvalUnit],
    out: Path,
    dataset: str,
    directory: Path,
    seqs: list,
    jobs: int,
    progress: bool = True,
    params: tuple[str, ...] = (),
) -> list[UnitResult]:
    """Score every unit on the split's flights (``jobs`` processes; in this process when 1)."""
    ckpt = {u: str(model_dir(out, u.model) / "best.pt") for u in units}
    results: list[UnitResult] = []
    bar = progress_bar(total=len(units), desc=f"evaluating {directory.name}", unit="row", enabled=progress)
    try:
        if jobs <= 1:
            import torch

            torch.set_num_threads(1)
            ekf = load_ekf_config(list(map(Path, params)))
            for u in units:
                results.append(evaluate_unit(u, ckpt[u], seqs, keeps_records(u), ekf))
                bar.update(1)
        else:
            ctx = multiprocessing.get_context("spawn")
            pool = ProcessPoolExecutor(jobs, ctx, initializer=_init_worker, initargs=(dataset, str(directory), params))
            try:
                futures = [pool.submit(_evaluate_in_worker, u, ckpt[u], keeps_records(u)) for u in units]
                for fut in as_completed(futures):
                    results.append(fut.result())
                    bar.update(1)
            except BaseException:
                pool.shutdown(wait=False, cancel_futures=True)  # no queued unit starts after an error or Ctrl-C
                raise
            pool.shutdown()
    finally:
        bar.close()
    order = {u: i for i, u in enumerate(units)}
    return sorted(results, key=lambda r: order[r.unit])
