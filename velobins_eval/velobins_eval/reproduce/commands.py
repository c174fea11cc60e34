"""``velobins reproduce`` orchestrated: check, lock, train, evaluate, report (the work is in the other modules).

:func:`reproduce` checks every input before any work, locks ``<out>`` for the whole command,
refuses another plan (:mod:`.manifest`), then for the plan of :mod:`.plan` runs the trainings
(:mod:`.jobs`), scores every unit on each split (:mod:`.evaluation`, :mod:`.summary`) and writes
``<out>/<split>/`` (:mod:`.render`) with its ``config.json``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from velobins_common.outputs import atomic_write_text, open_run_dir, output_mode
from velobins_net.checkpoint import git_commit

from ..evaluate import load_ekf_config
from ..report import KEYS
from .errors import ReproduceError
from .evaluation import evaluate_split
from .jobs import run_trainings
from .manifest import check_data_outside, check_flights, check_manifest, remove_stale_temps, run_manifest
from .plan import (
    HEADLINE,
    IMU_ONLY,
    LAYOUT,
    MANIFEST_NAME,
    REGRESSION,
    SCHEDULES,
    TABLES,
    Schedule,
    plan,
    schedule_record,
)
from .render import write_split
from .summary import score_split
from .tables import row_cells, table


@dataclass(frozen=True)
class Options:
    """What ``velobins reproduce`` was asked to do (the parsed command line, paths resolved).

    Attributes:
        dataset: adapter of the flight directories.
        train, val: training and validation flights; test: test flights or None.
        schedule: name of the training schedule (:data:`~velobins_eval.reproduce.plan.SCHEDULES`).
        out: output directory.
        overwrite: remove an earlier reproduction in ``out`` first.
        jobs: trainings / evaluation processes at once.
        device: training device (``auto``, ``cpu``, ``cuda``).
        progress: draw progress bars.
        params: ROS parameter files with EKF filter overrides, as given.
        command: the command line, for ``config.json``.
        tables: the tables to reproduce (:data:`~velobins_eval.reproduce.plan.TABLES`).
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


def reproduce(opts: Options) -> int:
    """Check every input, lock ``opts.out``, check its plan, then train, evaluate and report.

    A user's mistake raises ``ValueError`` / ``FileNotFoundError`` (``OutputError`` is one) before
    anything in ``out`` is modified; a failed training returns 1.
    """
    schedule = SCHEDULES[opts.schedule]
    splits = {"val": opts.val} | ({"test": opts.test} if opts.test else {})
    data = {"train": opts.train, **splits}
    check_flights(opts.dataset, data)
    check_data_outside(opts.out, data)
    ekf = load_ekf_config(list(opts.params))
    manifest = run_manifest(opts.schedule, schedule, opts.dataset, data, ekf, opts.tables)
    mode = output_mode(resume=not opts.overwrite, overwrite=opts.overwrite)
    with open_run_dir(opts.out, LAYOUT, mode):  # held until the end; removes its lock file on any exit
        check_manifest(opts.out, manifest)
        for name in remove_stale_temps(opts.out):
            print(f"reproduce: removed {name} (left by an interrupted run)")
        atomic_write_text(opts.out / MANIFEST_NAME, json.dumps(manifest, indent=1))
        return _run(opts, schedule, splits, data, ekf)


def _run(opts: Options, schedule: Schedule, splits: dict[str, Path], data: dict[str, Path], ekf: Any) -> int:
    """Train, evaluate and report into the locked ``opts.out``."""
    from velobins_data.datasets import find_files, load_directory

    wall0 = time.monotonic()
    jobs, units = plan(schedule, opts.tables)
    print(f"reproduce: {len(jobs)} trainings ({opts.schedule}), {len(units)} evaluations per split -> {opts.out}")
    try:
        train_s = run_trainings(
            jobs, schedule, opts.dataset, opts.train, opts.val, opts.out, opts.jobs, opts.device, opts.progress
        )
    except ReproduceError as exc:
        print(f"velobins reproduce: error: {exc}", file=sys.stderr)
        return 1
    split_seqs = {split: load_directory(opts.dataset, directory) for split, directory in splits.items()}
    counts = {"train": len(find_files(opts.dataset, opts.train))} | {k: len(v) for k, v in split_seqs.items()}
    params = tuple(str(p.resolve()) for p in opts.params)
    for split, directory in splits.items():
        seqs = split_seqs[split]
        results = evaluate_split(units, opts.out, opts.dataset, directory, seqs, opts.jobs, opts.progress, params)
        outcome = score_split(split, results, seqs, ekf)
        write_split(outcome, opts.out / split, opts.schedule, schedule, counts, opts.tables)
        config = run_config(opts, schedule, data, counts, split, ekf, train_s, time.monotonic() - wall0)
        atomic_write_text(opts.out / split / "config.json", json.dumps(config, indent=1))
        print(table({n: row_cells(outcome.rows, n) for n in (REGRESSION, HEADLINE, IMU_ONLY)}, KEYS))
        print(f"{split}: {opts.out / split / 'report.md'}")
    print(f"reproduce: done in {time.monotonic() - wall0:.0f} s")
    return 0


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
        "jobs": opts.jobs,
        "device": opts.device,
        "ekf_params": [str(p) for p in opts.params],
        "ekf": dataclasses.asdict(ekf),
        "training_s": {k: round(v, 1) for k, v in train_s.items()},
        "host_cpus": os.cpu_count(),
    }
