"""``velobins reproduce`` orchestrated: check, lock, train, evaluate, report (the work is in the other modules).

:func:`reproduce` checks every input before any work, locks ``<out>`` for the whole command,
refuses another plan (:mod:`.manifest`), then for the plan of :mod:`.plan` runs, through the job
engine (:mod:`.engine`, submitit), the trainings still missing, then the evaluation units still
missing (each writes its own result file, :mod:`.results`), then each split's IMU-only baseline; and
only aggregates: the unit files of each split become ``<out>/<split>/`` (:mod:`.summary`,
:mod:`.render`) with its ``config.json``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from velobins_common.outputs import atomic_write_text, open_run_dir, output_mode
from velobins_net.checkpoint import git_commit

from ..evaluate import load_ekf_config
from ..report import KEYS
from .engine import Engine, SlurmConfig
from .errors import ReproduceError
from .evaluation import keeps_records
from .given import GivenCheckpoint, score_given, trained_filter
from .manifest import check_data_outside, check_flights, check_manifest, remove_stale_temps, run_manifest
from .plan import (
    HEADLINE,
    IMU_ONLY,
    JOB_DIR,
    LAYOUT,
    MANIFEST_NAME,
    REGRESSION,
    SCHEDULES,
    TABLES,
    EvalUnit,
    Schedule,
    is_trained,
    plan,
    schedule_record,
)
from .render import write_split
from .results import is_done, load_unit, unit_path
from .summary import score_split
from .tables import row_cells, table
from .tasks import Data, EvaluationTask, ImuOnlyTask, TrainingTask


@dataclass(frozen=True)
class Options:
    """What ``velobins reproduce`` was asked to do (the parsed command line, paths resolved).

    Attributes:
        dataset: adapter of the flight directories.
        train, val: training and validation flights; test: test flights or None.
        schedule: name of the training schedule (:data:`~velobins_eval.reproduce.plan.SCHEDULES`).
        out: output directory.
        overwrite: remove an earlier reproduction in ``out`` first.
        jobs: local jobs (trainings, evaluations) at once.
        device: training device (``auto``, ``cpu``, ``cuda``).
        progress: draw progress bars.
        params: ROS parameter files with EKF filter overrides, as given.
        command: the command line, for ``config.json``.
        tables: the tables to reproduce (:data:`~velobins_eval.reproduce.plan.TABLES`).
        executor: the job engine, ``local`` or ``slurm`` (:mod:`.engine`).
        slurm: resources of each job with ``--executor slurm``.
        checkpoints: checkpoints given to be scored on each split beside the trained rows (:mod:`.given`).
    """

    dataset: str
    train: Path
    val: Path
    test: Path | None
    schedule: str
    out: Path
    overwrite: bool
    jobs: int
    device: str
    progress: bool
    params: tuple[Path, ...]
    command: str
    tables: tuple[str, ...] = TABLES
    executor: str = "local"
    slurm: SlurmConfig = field(default_factory=SlurmConfig)
    checkpoints: tuple[GivenCheckpoint, ...] = ()


def reproduce(opts: Options, on_done: Callable[[Any], None] | None = None) -> int:
    """Check every input, lock ``opts.out``, check its plan, then train, evaluate and report.

    A user's mistake raises ``ValueError`` / ``FileNotFoundError`` (``OutputError`` is one) before
    anything in ``out`` is modified; a failed job returns 1 (after its phase). ``on_done`` is
    called with each job's task as it ends.
    """
    schedule = SCHEDULES[opts.schedule]
    splits = {"val": opts.val} | ({"test": opts.test} if opts.test else {})
    data = {"train": opts.train, **splits}
    check_flights(opts.dataset, data)
    check_data_outside(opts.out, data)
    ekf = load_ekf_config(list(opts.params))
    manifest = run_manifest(opts.schedule, schedule, opts.dataset, data, ekf, opts.tables)
    mode = output_mode(resume=not opts.overwrite, overwrite=opts.overwrite)
    # Held until the end; removes its lock file on any exit. With --overwrite the new reproduction is
    # staged and replaces the earlier one only once it is complete (an interrupted one is discarded).
    with open_run_dir(opts.out, LAYOUT, mode) as run:
        for name in remove_stale_temps(opts.out):
            print(f"reproduce: removed {name} (left by an interrupted run)")
        staged = dataclasses.replace(opts, out=run.path)
        check_manifest(staged.out, manifest)
        atomic_write_text(staged.out / MANIFEST_NAME, json.dumps(manifest, indent=1))
        engine = Engine(opts.executor, staged.out / JOB_DIR, opts.jobs, opts.slurm, opts.progress, on_done)
        status = _run(staged, schedule, splits, data, ekf, engine)
        if status == 0:
            run.commit()
        return status


def _run(
    opts: Options, schedule: Schedule, splits: dict[str, Path], data: dict[str, Path], ekf: Any, engine: Engine
) -> int:
    """Run the missing jobs, then aggregate the unit files into the reports of the locked ``opts.out``."""
    from velobins_data.datasets import find_files, load_directory

    wall0 = time.monotonic()
    jobs, units = plan(schedule, opts.tables)
    print(f"reproduce: {len(jobs)} trainings ({opts.schedule}), {len(units)} evaluations per split -> {opts.out}")
    try:
        train_s = _run_jobs(opts, schedule, splits, jobs, units, engine)
    except ReproduceError as exc:
        print(f"velobins reproduce: error: {exc}", file=sys.stderr)
        return 1
    split_seqs = {split: load_directory(opts.dataset, directory) for split, directory in splits.items()}
    counts = {"train": len(find_files(opts.dataset, opts.train))} | {k: len(v) for k, v in split_seqs.items()}
    for split in splits:
        seqs = split_seqs[split]
        results = [load_unit(unit_path(opts.out, split, u)) for u in [*units, EvalUnit(IMU_ONLY, "")]]
        outcome = score_split(split, results, seqs)
        given_rows, given_filters = score_given(opts.checkpoints, seqs, opts.params)
        outcome.rows.update(given_rows)
        outcome.given = tuple(given_rows)
        outcome.filters = {"trained rows": trained_filter(opts.params, ekf)} | given_filters
        write_split(outcome, opts.out / split, opts.schedule, schedule, counts, opts.tables)
        config = run_config(opts, schedule, data, counts, split, ekf, train_s, time.monotonic() - wall0)
        config["filters"] = outcome.filters
        atomic_write_text(opts.out / split / "config.json", json.dumps(config, indent=1))
        shown = (REGRESSION, HEADLINE, *outcome.given, IMU_ONLY)
        print(table({n: row_cells(outcome.rows, n) for n in shown}, KEYS))
        print(f"{split}: {opts.out / split / 'report.md'}")
    print(f"reproduce: done in {time.monotonic() - wall0:.0f} s")
    return 0


def _run_jobs(
    opts: Options, schedule: Schedule, splits: dict[str, Path], jobs: list, units: list[EvalUnit], engine: Engine
) -> dict[str, float]:
    """The three phases, each only what is missing: trainings, evaluation units, IMU-only baselines.

    Returns {model: training seconds} (0 for a model trained earlier).
    """
    data = Data(opts.dataset, opts.train, opts.val)
    trainings = [
        TrainingTask(j, schedule, data, opts.out, opts.device, engine.threads)
        for j in jobs
        if not is_trained(opts.out, j.name)
    ]
    seconds = {task.job.name: s for task, s in engine.run(trainings, "trainings")}
    params = tuple(str(p.resolve()) for p in opts.params)
    common = {"data": data, "out": opts.out, "params": params, "threads": engine.threads}
    evaluations = [
        EvaluationTask(u, keeps_records(u), split=split, directory=directory, **common)
        for split, directory in splits.items()
        for u in units
        if not is_done(opts.out, split, u)
    ]
    engine.run(evaluations, "evaluations")
    headline = next(u for u in units if u.row == HEADLINE and keeps_records(u))
    baselines = [
        ImuOnlyTask(headline, split=split, directory=directory, **common)
        for split, directory in splits.items()
        if not is_done(opts.out, split, EvalUnit(IMU_ONLY, ""))
    ]
    engine.run(baselines, "IMU-only baselines")
    return {j.name: seconds.get(j.name, 0.0) for j in jobs}


def run_config(
    opts: Options,
    schedule: Schedule,
    data: dict[str, Path],
    counts: dict[str, int],
    split: str,
    ekf: Any,
    train_s: dict[str, float],
    wall_s: float,
) -> dict[str, Any]:
    """``<out>/<split>/config.json``: how the split's report was made (schedule, data, EKF, code, times)."""
    return {
        **schedule_record(opts.schedule, schedule, opts.tables),
        "git_commit": git_commit() or "unknown",
        "wall_time_s": round(wall_s, 1),
        "command": opts.command,
        "dataset": opts.dataset,
        "data": {k: str(v) for k, v in data.items()},
        "flights": counts,
        "split": split,
        "executor": opts.executor,
        "jobs": opts.jobs,
        "slurm": dataclasses.asdict(opts.slurm) if opts.executor == "slurm" else None,
        "device": opts.device,
        "ekf_params": [str(p) for p in opts.params],
        "checkpoints": {g.label: str(g.checkpoint) for g in opts.checkpoints},
        "ekf": dataclasses.asdict(ekf),
        "training_s": {k: round(v, 1) for k, v in train_s.items()},
        "host_cpus": os.cpu_count(),
    }
