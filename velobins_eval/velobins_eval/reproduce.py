"""``velobins reproduce``: regenerate the paper's NanoBench evidence (Tables II/III, Fig. bins, Fig. nees).

One command trains every model the ablations need, scores each Table II / III row and the bin sweep
on every flight of each evaluation split (network alone and EKF-fused, through the same code paths
as ``velobins evaluate``: :func:`~velobins_eval.evaluate.predict_flight`,
:func:`~velobins_eval.evaluate.fuse_flight`, :func:`~velobins_eval.evaluate.score`), and writes
``<out>/<split>/{metrics.json, report.md, config.json, figures/*.png}``.

Trainings (paper §IV-A "Implementation Details", §V ablations; schedules in :data:`SCHEDULES`):

* ``reg`` and the headline ``G+H^B`` (SPE, N = 512) for every seed of the schedule;
* ``H^B``, ``G^B``; ``M`` and ``M+H`` trained once with a covariance decoder (``--uncertainty
  B+C``): the loss does not depend on the uncertainty source (``velobins_net.losses``), so one model
  serves its ^B, ^C and ^B+C rows by switching ``model.cfg.uncertainty`` at evaluation;
* ``G+H^B`` with the ``direct`` and ``pe`` bin encodings (Table III) and with every N of the
  schedule's bin sweep (Fig. bins; N = 512 is the headline seed-0 model).

Each training is a ``velobins train`` subprocess (one thread, at most ``--jobs`` at once, log in
``<out>/logs/<model>.log``). It runs in ``<out>/models/<model>.partial`` (resumed from its
``last.pt`` after an interruption) and is renamed to ``<out>/models/<model>`` when it succeeds, so
an existing ``<out>/models/<model>/best.pt`` always is a finished training and is skipped.

Outputs (issue 13): ``<out>`` is locked for the whole command (a second ``reproduce`` into it fails
at once, naming the holder); ``<out>/reproduce.json`` records the plan (schedule, seeds, dataset,
data directories, EKF parameters) and a run of another plan is refused unless ``--overwrite``
removes the earlier reproduction; every report, table and figure is written atomically.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import multiprocessing
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from velobins_net.outputs import (
    OutputError,
    RunLayout,
    atomic_path,
    atomic_write_text,
    open_run_dir,
    output_mode,
    remove_stale_temp_files,
)
from velobins_net.progress import progress_bar

from . import metrics
from .cli import DATASET_KINDS
from .datasets.nanobench import TRAJECTORY_SHAPES, trajectory_shape
from .report import HEADERS, KEYS, aggregate

# ---------------------------------------------------------------------------------- constants


@dataclass(frozen=True)
class Schedule:
    """Training schedule of a reproduction run.

    Attributes:
        epochs: training epochs per model (paper: 100).
        stride: training window stride [samples] (paper: 1).
        seeds: seeds of the multi-seed rows (``reg`` and the headline ``G+H^B``).
        bins_sweep: N values of the bin-resolution sweep besides the headline N (Fig. bins).
    """

    epochs: int
    stride: int
    seeds: tuple[int, ...]
    bins_sweep: tuple[int, ...]


HEADLINE_BINS = 512
"""N of the headline model (paper §IV-A); it is also the N = 512 point of the bin sweep."""

SCHEDULES: dict[str, Schedule] = {
    "cpu": Schedule(epochs=20, stride=10, seeds=(0, 1, 2), bins_sweep=(16, 32, 64, 128, 256, 1024, 2048)),
    "full": Schedule(epochs=100, stride=1, seeds=(0, 1, 2), bins_sweep=(16, 32, 64, 128, 256, 1024, 2048)),
    "smoke": Schedule(epochs=1, stride=50, seeds=(0,), bins_sweep=(16, 64)),
}
"""``cpu``: a few hours on a laptop-class CPU; ``full``: the paper's schedule (GPU); ``smoke``: the test."""

HEADLINE = "G+H^B"
"""Row name of VeloBins' headline variant (paper Table II, bold)."""
REGRESSION = "reg"
"""Row name of the AI-IO regression baseline, Reg. (H+N)^C."""
IMU_ONLY = "imu-only"
"""Row name of IMU integration (the same EKF, no updates)."""

TABLE2_ROWS = ("reg", "H^B", "M^B", "M^C", "M^B+C", "M+H^B", "M+H^C", "M+H^B+C", "G^B", "G+H^B")
"""Rows of Table II (supervision ablation), in the paper's order."""
TABLE3_ROWS = {"Direct": "G+H^B Direct", "PE": "G+H^B PE", "SPE": HEADLINE}
"""Table III (bin encoding) label -> metrics.json row; SPE is the headline model."""


def sweep_row(num_bins: int) -> str:
    """metrics.json row of the bin-sweep point N (the headline model for N = 512)."""
    return HEADLINE if num_bins == HEADLINE_BINS else f"G+H^B N={num_bins}"


PAPER_NANOBENCH: dict[str, dict[str, float]] = {
    REGRESSION: {"ave": 0.196, "rte": 0.538, "ate": 1.243, "net_ave": 0.158, "net_nll": -0.78},
    HEADLINE: {"ave": 0.167, "rte": 0.440, "ate": 0.972, "net_ave": 0.121, "net_nll": -1.30},
}
"""The paper's NanoBench test-split figures (DESIGN.md "Paper figures to reproduce"; Table II)."""
PAPER_NEES = {"nees_median": 3.08, "nees_in_bounds": 0.73}
"""The paper's G+H^B velocity NEES over the test sequences of all four datasets (Fig. nees, §V-C)."""
PAPER_NEES_IN_BOUNDS_OTHERS = {"M+H^B+C": 0.64, REGRESSION: 0.61, "H^B": 0.49}
"""Shares inside the 95 % bounds the paper gives for the other methods (all datasets, §V-C)."""
PAPER_FLIGHTS = 107
"""NanoBench flights the paper used (the public subset here has 80)."""

SHAPE_METHODS = {"IMU-only": IMU_ONLY, "Reg": REGRESSION, "VeloBins": HEADLINE}
"""Columns of the main-table layout (Table I of the paper) -> metrics.json rows."""
SHAPE_KEYS = ("ave", "rte", "ate")

LOG_DIR = "logs"
MODEL_DIR = "models"
PARTIAL_SUFFIX = ".partial"
MANIFEST_NAME = "reproduce.json"
"""The plan of the reproduction in ``<out>`` (what a resumed run must match)."""
SPLITS = ("val", "test")
"""Evaluation splits; each gets ``<out>/<split>/``."""
LAYOUT = RunLayout("reproduce", (MANIFEST_NAME, MODEL_DIR, LOG_DIR, *SPLITS))
"""Every entry ``velobins reproduce`` writes in ``<out>`` (what ``--overwrite`` removes)."""
TRAIN_OUTPUTS = ("best.pt", "last.pt", "history.json")
"""Files of a ``velobins train`` run; ``velobins train`` refuses a directory holding one unless told."""
STOP_GRACE_S = 10.0
"""Seconds an interrupted training gets to clean up after SIGINT before it is terminated."""


class ReproduceError(RuntimeError):
    """A step of the reproduction failed (the message names the model and its log file)."""


# ---------------------------------------------------------------------------------- the plan


@dataclass(frozen=True)
class TrainingJob:
    """One ``velobins train`` run.

    Attributes:
        name: directory name under ``<out>/models`` (file-system safe).
        args: variant arguments of ``velobins train`` (``--variant``, ``--uncertainty``, ...).
        seed: training seed.
    """

    name: str
    args: tuple[str, ...]
    seed: int = 0


@dataclass(frozen=True)
class EvalUnit:
    """One (row, seed) to score: which trained model, and which uncertainty source to report.

    Attributes:
        row: metrics.json row name (``reg``, ``M^C``, ``G+H^B N=16``, ...).
        model: :attr:`TrainingJob.name` of the checkpoint.
        uncertainty: ``B``, ``C`` or ``B+C`` to override ``model.cfg.uncertainty``; None keeps it.
        seed: training seed of the model.
    """

    row: str
    model: str
    uncertainty: str | None = None
    seed: int = 0


def _gh_job(encoding: str, num_bins: int, seed: int, headline: bool = False) -> TrainingJob:
    """A G+H^B training; the headline model's name carries its seed (it is trained for every seed)."""
    name = "GH-B-" + (encoding if encoding != "spe" else f"spe-N{num_bins}") + (f"-s{seed}" if headline else "")
    args = ("--variant", "G+H", "--uncertainty", "B", "--encoding", encoding, "--bins", str(num_bins))
    return TrainingJob(name, args, seed)


def plan(schedule: Schedule) -> tuple[list[TrainingJob], list[EvalUnit]]:
    """Unique trainings and the evaluation units of every row for ``schedule``."""
    jobs: list[TrainingJob] = []
    units: list[EvalUnit] = []
    for seed in schedule.seeds:
        reg = TrainingJob(f"reg-s{seed}", ("--variant", "reg"), seed)
        head = _gh_job("spe", HEADLINE_BINS, seed, headline=True)
        jobs += [reg, head]
        units += [EvalUnit(REGRESSION, reg.name, None, seed), EvalUnit(HEADLINE, head.name, None, seed)]
    single = {
        "H-B": ("--variant", "H", "--uncertainty", "B"),
        "M-BC": ("--variant", "M", "--uncertainty", "B+C"),
        "MH-BC": ("--variant", "M+H", "--uncertainty", "B+C"),
        "G-B": ("--variant", "G", "--uncertainty", "B"),
    }
    jobs += [TrainingJob(name, args, 0) for name, args in single.items()]
    units.append(EvalUnit("H^B", "H-B"))
    for source in ("B", "C", "B+C"):
        units.append(EvalUnit(f"M^{source}", "M-BC", source))
        units.append(EvalUnit(f"M+H^{source}", "MH-BC", source))
    units.append(EvalUnit("G^B", "G-B"))
    for label, encoding in (("Direct", "direct"), ("PE", "pe")):
        job = _gh_job(encoding, HEADLINE_BINS, 0)
        jobs.append(job)
        units.append(EvalUnit(TABLE3_ROWS[label], job.name))
    for n in schedule.bins_sweep:
        if n == HEADLINE_BINS:
            continue
        job = _gh_job("spe", n, 0)
        jobs.append(job)
        units.append(EvalUnit(sweep_row(n), job.name))
    names = [j.name for j in jobs]
    if len(set(names)) != len(names):
        raise ValueError(f"reproduce: duplicate training names in the plan: {names}")
    return jobs, units


# ---------------------------------------------------------------------------------- training


def model_dir(out: Path, name: str) -> Path:
    """Finished model directory (``best.pt`` inside means the training completed)."""
    return out / MODEL_DIR / name


def is_trained(out: Path, name: str) -> bool:
    """True when ``<out>/models/<name>/best.pt`` exists (the training finished earlier)."""
    return (model_dir(out, name) / "best.pt").is_file()


def partial_dir(out: Path, name: str) -> Path:
    """Directory a training runs in until it succeeds (``<out>/models/<name>.partial``)."""
    return out / MODEL_DIR / (name + PARTIAL_SUFFIX)


def train_command(
    job: TrainingJob, schedule: Schedule, dataset: str, train: Path, val: Path, out: Path, device: str
) -> list[str]:
    """The ``velobins train`` command line of ``job``, saying what to do with an earlier partial run.

    ``velobins train`` refuses an output directory that holds a run unless told, so the flag is
    explicit: ``--resume <partial>/last.pt`` when the interrupted training left a ``last.pt`` (the
    plan is the one recorded in ``reproduce.json``, and ``train`` checks the checkpoint's model
    config and restores optimizer and RNG state, so resuming continues exactly the same training);
    ``--overwrite`` when it left training files but no ``last.pt`` to resume from (it restarts);
    no flag when the directory holds no training.
    """
    partial = partial_dir(out, job.name)
    cmd = [sys.executable, "-m", "velobins_eval.train_cli", "--dataset", dataset, "--data", str(train)]
    cmd += ["--val", str(val), *job.args, "--epochs", str(schedule.epochs), "--stride", str(schedule.stride)]
    # No --no-progress: bars draw on a terminal only, so the log gets the per-epoch lines and no bar frames.
    cmd += ["--seed", str(job.seed), "--threads", "1", "--device", device, "--out", str(partial)]
    if (partial / "last.pt").is_file():
        cmd += ["--resume", str(partial / "last.pt")]
    elif any((partial / name).exists() for name in TRAIN_OUTPUTS):
        cmd += ["--overwrite"]
    return cmd


def stop_processes(procs: Iterable[subprocess.Popen], grace_s: float | None = None) -> None:
    """Stop children we started, all at once: SIGINT first (each removes its temporary files and
    lock), SIGTERM to those still running after ``grace_s`` (default :data:`STOP_GRACE_S`), then SIGKILL."""
    waiting = [p for p in procs if p.poll() is None]
    grace = STOP_GRACE_S if grace_s is None else grace_s
    for send, wait_s in (("send_signal", grace), ("terminate", 5.0), ("kill", None)):
        for proc in waiting:
            with contextlib.suppress(ProcessLookupError):  # exited meanwhile
                getattr(proc, send)(*((signal.SIGINT,) if send == "send_signal" else ()))
        deadline = None if wait_s is None else time.monotonic() + wait_s
        for proc in waiting:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
        waiting = [p for p in waiting if p.poll() is None]
        if not waiting:
            return


def run_trainings(
    jobs: list[TrainingJob],
    schedule: Schedule,
    dataset: str,
    train: Path,
    val: Path,
    out: Path,
    max_jobs: int,
    device: str = "auto",
    progress: bool = True,
) -> dict[str, float]:
    """Train every job not yet finished, ``max_jobs`` at once; return {model: seconds (0 if skipped)}.

    A training that fails keeps its ``.partial`` directory (the next run resumes it). When this
    function is interrupted (Ctrl-C included) it stops the trainings it started (SIGINT first, so
    each removes its temporary files) and removes what a stopped one left behind unfinished.

    Raises:
        ReproduceError: a training exited with an error or without a ``best.pt`` (the message names its log).
    """
    (out / LOG_DIR).mkdir(parents=True, exist_ok=True)
    (out / MODEL_DIR).mkdir(parents=True, exist_ok=True)
    seconds = {j.name: 0.0 for j in jobs if is_trained(out, j.name)}
    todo = [j for j in jobs if j.name not in seconds]
    running: dict[str, tuple[subprocess.Popen, float, Any]] = {}
    failed: list[str] = []
    bar = progress_bar(total=len(jobs), initial=len(seconds), desc="trainings", unit="model", enabled=progress)
    shown = ""
    try:
        while todo or running:
            while todo and len(running) < max_jobs:
                job = todo.pop(0)
                log = (out / LOG_DIR / f"{job.name}.log").open("a")
                cmd = train_command(job, schedule, dataset, train, val, out, device)
                log.write(f"$ {shlex.join(cmd)}\n")
                log.flush()
                running[job.name] = (subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT), time.monotonic(), log)
            if ", ".join(running) != shown:
                shown = ", ".join(running)
                bar.set_postfix_str(shown)
            time.sleep(0.2)
            for name, (proc, t0, log) in list(running.items()):
                if proc.poll() is None:
                    continue
                log.close()
                del running[name]
                seconds[name] = time.monotonic() - t0
                partial = partial_dir(out, name)
                if proc.returncode != 0 or not (partial / "best.pt").is_file():
                    # No best.pt after a successful exit: no epoch had a finite validation metric.
                    failed.append(name)
                else:
                    final = model_dir(out, name)
                    if final.exists():  # an earlier, unusable copy (no best.pt): ours, under our lock
                        shutil.rmtree(final)
                    partial.rename(final)
                bar.update(1)
    except BaseException:
        stop_processes(proc for proc, _, _ in running.values())  # only the processes this function started
        for name, (_, _, log) in running.items():
            log.close()
            remove_stale_temp_files(partial_dir(out, name))  # what a SIGTERM/SIGKILL left behind
        raise
    finally:
        bar.close()
    if failed:
        logs = ", ".join(str(out / LOG_DIR / f"{n}.log") for n in failed)
        raise ReproduceError(f"training failed for {', '.join(failed)} (logs: {logs})")
    return seconds


# ---------------------------------------------------------------------------------- evaluation


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

    from .datasets import load_directory

    torch.set_num_threads(1)
    from .evaluate import load_ekf_config

    global _WORKER_SEQS, _WORKER_EKF
    _WORKER_SEQS = load_directory(dataset, directory)
    _WORKER_EKF = load_ekf_config([Path(p) for p in params])


def evaluate_unit(
    unit: EvalUnit, checkpoint: str | Path, seqs: list, keep_records: bool, ekf_config: Any = None
) -> UnitResult:
    """Network-only and EKF-fused scores of one model (with its uncertainty source) on ``seqs``."""
    from velobins_net.inference import load_checkpoint

    from .evaluate import GroundTruth, fuse_flight, predict_flight, score

    model = load_checkpoint(checkpoint)
    if unit.uncertainty is not None and unit.uncertainty != model.cfg.uncertainty:
        if not model.cfg.cov_head and "C" in unit.uncertainty:
            raise ValueError(f"{checkpoint}: row {unit.row} needs a covariance decoder, the model has none")
        # cfg.uncertainty is read at forward time; drop any cache built from the previous source.
        model.cfg = dataclasses.replace(model.cfg, uncertainty=unit.uncertainty)
        if hasattr(model, "invalidate_cache"):
            model.invalidate_cache()
    result = UnitResult(unit, {}, {})
    for seq in seqs:
        t, v, var = predict_flight(model, seq)
        record = fuse_flight(seq, t, v, var, unit.row, ekf_config)
        gt = GroundTruth.of(seq)
        result.flights[seq.name] = score(record, gt)
        result.nees[seq.name] = metrics.nees(record.v_fused - gt.at(record.t).v, record.cov_fused).astype(np.float32)
        if keep_records:
            result.records[seq.name] = record
    return result


def _evaluate_in_worker(unit: EvalUnit, checkpoint: str, keep_records: bool) -> UnitResult:
    return evaluate_unit(unit, checkpoint, _WORKER_SEQS, keep_records, _WORKER_EKF)


def _keep_records(unit: EvalUnit) -> bool:
    return unit.seed == 0 and unit.row in (HEADLINE, REGRESSION)


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

            from .evaluate import load_ekf_config

            torch.set_num_threads(1)
            ekf = load_ekf_config(list(map(Path, params)))
            for u in units:
                results.append(evaluate_unit(u, ckpt[u], seqs, _keep_records(u), ekf))
                bar.update(1)
        else:
            ctx = multiprocessing.get_context("spawn")
            pool = ProcessPoolExecutor(jobs, ctx, initializer=_init_worker, initargs=(dataset, str(directory), params))
            try:
                futures = [pool.submit(_evaluate_in_worker, u, ckpt[u], _keep_records(u)) for u in units]
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


# ---------------------------------------------------------------------------------- tables


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
        return {k: _nanmean([a[k] for a in seeds.values()]) for k in KEYS}

    @property
    def std(self) -> dict[str, float] | None:
        """Sample standard deviation over seeds (ddof = 1) of the aggregates; None for a single seed."""
        if len(self.seed_flights) < 2:
            return None
        seeds = self.seeds
        return {k: _nanstd([a[k] for a in seeds.values()]) for k in KEYS}


def _nanmean(values: Iterable[float]) -> float:
    arr = np.asarray(list(values), dtype=float)
    return float(np.nanmean(arr)) if np.isfinite(arr).any() else math.nan


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


def _json(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else round(float(x), 6)


def metrics_document(rows: dict[str, RowSummary]) -> dict[str, Any]:
    """The ``velobins evaluate`` metrics.json layout, plus ``seeds`` / ``aggregate_std`` for multi-seed rows.

    ``aggregate`` is the mean over seeds of the per-seed aggregates (the seed-0 aggregate when
    there is one seed); ``flights`` are the seed-0 model's.
    """
    doc: dict[str, Any] = {}
    for name, row in rows.items():
        entry: dict[str, Any] = {
            "aggregate": {k: _json(v) for k, v in row.mean.items()},
            "flights": {f: {k: _json(v) for k, v in fm.as_dict().items()} for f, fm in row.flights.items()},
        }
        if len(row.seeds) > 1 or name in (HEADLINE, REGRESSION):
            entry["seeds"] = {str(s): {k: _json(v) for k, v in a.items()} for s, a in sorted(row.seeds.items())}
            std = row.std
            entry["aggregate_std"] = {k: _json(std[k] if std else None) for k in KEYS}
        doc[name] = entry
    return doc


def _fmt(key: str, value: float, std: float | None = None) -> str:
    if not math.isfinite(value):
        return "—"
    if key == "nees_in_bounds":
        text = f"{value:.1%}"
        return text + (f" ± {std:.1%}" if std is not None and math.isfinite(std) else "")
    digits = 2 if key == "net_nll" else 3
    text = f"{value:.{digits}f}"
    return text + (f" ± {std:.{digits}f}" if std is not None and math.isfinite(std) else "")


def _best(values: dict[str, float], key: str) -> str | None:
    """Best row of one column (NEES median: closest to the ideal in log ratio; in-bounds: highest)."""
    scored = {m: v for m, v in values.items() if math.isfinite(v)}
    if len(scored) < 2:
        return None
    if key == "nees_median":
        return min(scored, key=lambda m: abs(math.log(max(scored[m], 1e-12) / metrics.NEES_IDEAL_MEDIAN)))
    if key == "nees_in_bounds":
        return max(scored, key=scored.get)
    return min(scored, key=scored.get)


def table(
    rows: dict[str, tuple[dict[str, float], dict[str, float] | None]], keys: Iterable[str], headers: dict[str, str]
) -> str:
    """Markdown table: label -> (values, std or None); best per column in bold."""
    keys = tuple(keys)
    best = {k: _best({m: v[k] for m, (v, _) in rows.items()}, k) for k in keys}
    lines = ["| method | " + " | ".join(headers[k] for k in keys) + " |", "|---|" + "---|" * len(keys)]
    for label, (values, std) in rows.items():
        cells = []
        for k in keys:
            text = _fmt(k, values[k], std[k] if std else None)
            cells.append(f"**{text}**" if best[k] == label and text != "—" else text)
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _row_cells(rows: dict[str, RowSummary], name: str) -> tuple[dict[str, float], dict[str, float] | None]:
    return rows[name].mean, rows[name].std


def shape_table(rows: dict[str, RowSummary]) -> str:
    """The main-table layout (paper Table I): rows per trajectory shape (× count), AVE/RTE/ATE per method.

    Per-shape cells are the mean over the shape's flights, averaged over seeds; the AVG row is the
    aggregate (mean ± std over seeds). Best method per row and metric in bold.
    """
    methods = {label: rows[name] for label, name in SHAPE_METHODS.items() if name in rows}
    flights = list(next(iter(methods.values())).flights)
    shapes = [s for s in TRAJECTORY_SHAPES if any(trajectory_shape(f) == s for f in flights)]
    lines = [
        "| shape | " + " | ".join(f"{m} {k.upper()}" for m in methods for k in SHAPE_KEYS) + " |",
        "|---|" + "---|" * (len(methods) * len(SHAPE_KEYS)),
    ]

    def line(label: str, cells: dict[tuple[str, str], tuple[float, float | None]]) -> str:
        best = {k: _best({m: cells[m, k][0] for m in methods}, k) for k in SHAPE_KEYS}
        texts = []
        for m in methods:
            for k in SHAPE_KEYS:
                text = _fmt(k, *cells[m, k])
                texts.append(f"**{text}**" if best[k] == m and text != "—" else text)
        return f"| {label} | " + " | ".join(texts) + " |"

    for shape in shapes:
        names = [f for f in flights if trajectory_shape(f) == shape]
        cells = {
            (m, k): (_nanmean(_nanmean(getattr(res[f], k) for f in names) for res in row.seed_flights.values()), None)
            for m, row in methods.items()
            for k in SHAPE_KEYS
        }
        lines.append(line(f"{shape} ×{len(names)}", cells))
    avg = {(m, k): (row.mean[k], (row.std or {}).get(k)) for m, row in methods.items() for k in SHAPE_KEYS}
    lines.append(line(f"**AVG** ×{len(flights)}", avg))
    return "\n".join(lines)


# ---------------------------------------------------------------------------------- paper vs measured

COMPARED = (
    ("ave", "EKF AVE [m/s]"),
    ("rte", "RTE [m]"),
    ("ate", "ATE [m]"),
    ("net_ave", "net AVE [m/s]"),
    ("nees_median", "NEES median"),
    ("net_nll", "net NLL [nats]"),
)
"""Quantities of the "Paper vs measured" section: VeloBins/Reg ratios, and the NLL difference."""


def _relation(key: str, velobins: float, reg: float) -> float:
    """VeloBins/Reg ratio (the NLL, a log quantity: the difference VeloBins − Reg)."""
    return velobins - reg if key == "net_nll" else velobins / reg


def _rel_text(key: str, value: float) -> str:
    if not math.isfinite(value):
        return "—"
    return f"Δ {value:+.2f}" if key == "net_nll" else f"× {value:.3f}"


def direction_sentence(key: str, label: str, rows: dict[str, RowSummary]) -> str:
    """One generated sentence: does the measured VeloBins-vs-Reg direction agree with the paper's?"""
    vb, reg = rows[HEADLINE], rows[REGRESSION]
    m_vb, m_reg = vb.mean[key], reg.mean[key]
    if not (math.isfinite(m_vb) and math.isfinite(m_reg)) or (key != "net_nll" and m_reg == 0):
        return f"- **{label}**: cannot be judged (a value is missing)."
    if key == "nees_median":
        ideal = metrics.NEES_IDEAL_MEDIAN
        gap_vb, gap_reg = abs(math.log(m_vb / ideal)), abs(math.log(m_reg / ideal))
        agrees = gap_vb < gap_reg
        return (
            f"- **{label}**: the paper's G+H^B has the median closest to the ideal {ideal:.3f} "
            f"({PAPER_NEES['nees_median']:.2f}, all datasets; Reg over-confident, NEES above it); measured "
            f"G+H^B {m_vb:.2f} vs Reg {m_reg:.2f} (ratio {m_vb / m_reg:.2f}): G+H^B is "
            f"{'closer to' if agrees else 'farther from'} the ideal — **{'agrees' if agrees else 'disagrees'}**."
        )
    paper = _relation(key, PAPER_NANOBENCH[HEADLINE][key], PAPER_NANOBENCH[REGRESSION][key])
    measured = _relation(key, m_vb, m_reg)
    better = measured < (0.0 if key == "net_nll" else 1.0)
    agrees = better == (paper < (0.0 if key == "net_nll" else 1.0))
    what = "difference VeloBins − Reg" if key == "net_nll" else "VeloBins/Reg"
    text = (
        f"- **{label}**: paper {what} = {_rel_text(key, paper)} (VeloBins lower); measured "
        f"{_rel_text(key, measured)} (VeloBins {'lower' if better else 'higher'}) — "
        f"**{'agrees' if agrees else 'disagrees'}**."
    )
    s_vb, s_reg = vb.std, reg.std
    if s_vb and s_reg and math.isfinite(s_vb[key]) and math.isfinite(s_reg[key]):
        spread = math.hypot(s_vb[key], s_reg[key])
        if abs(m_vb - m_reg) < spread:
            text += (
                f" The gap ({m_vb - m_reg:+.3f}) is smaller than the seed spread (±{spread:.3f}), "
                "so this run does not resolve the direction."
            )
    return text


def paper_vs_measured(rows: dict[str, RowSummary]) -> str:
    """The "Paper vs measured" section: table, generated sentences, and the Discussion placeholder."""
    lines = [
        "| quantity | paper Reg | paper G+H^B | paper rel. | measured Reg | measured G+H^B | measured rel. |",
        "|---|---|---|---|---|---|---|",
    ]
    vb, reg = rows[HEADLINE], rows[REGRESSION]
    for key, label in COMPARED:
        p_reg = PAPER_NANOBENCH[REGRESSION].get(key, math.nan)
        p_vb = PAPER_NANOBENCH[HEADLINE].get(key, PAPER_NEES.get(key, math.nan))
        rel_p = _relation(key, p_vb, p_reg) if math.isfinite(p_reg) else math.nan
        rel_m = _relation(key, vb.mean[key], reg.mean[key]) if reg.mean[key] else math.nan
        cells = [
            _fmt(key, p_reg),
            _fmt(key, p_vb) + (" (all datasets)" if key in PAPER_NEES else ""),
            _rel_text(key, rel_p),
            _fmt(key, reg.mean[key], (reg.std or {}).get(key)),
            _fmt(key, vb.mean[key], (vb.std or {}).get(key)),
            _rel_text(key, rel_m),
        ]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines += ["", "rel.: VeloBins/Reg ratio (×), or for the NLL the difference VeloBins − Reg (Δ, nats).", ""]
    lines += [direction_sentence(key, label, rows) for key, label in COMPARED]
    share = vb.mean["nees_in_bounds"]
    others = ", ".join(
        f"{name} {_fmt('nees_in_bounds', rows[name].mean['nees_in_bounds'])} (paper {p:.0%})"
        for name, p in PAPER_NEES_IN_BOUNDS_OTHERS.items()
        if name in rows
    )
    lines.append(
        f"- **NEES in 95 % bounds**: paper G+H^B {PAPER_NEES['nees_in_bounds']:.0%} (all datasets); measured "
        f"G+H^B {_fmt('nees_in_bounds', share)}; others: {others}."
    )
    lines += [
        "",
        "### Discussion",
        "",
        "> **PLACEHOLDER — to be written by hand by the lead.** Interpret the directions above (which",
        "> agree, which do not, and why), with the caveats of the next section.",
    ]
    return "\n".join(lines)


def differences_paragraph(schedule_name: str, schedule: Schedule, flights: dict[str, int], split: str) -> str:
    """The "How this differs from the paper" paragraph, filled in from the run's configuration."""
    paper = SCHEDULES["full"]
    return (
        f"This run uses the `{schedule_name}` schedule: {schedule.epochs} epoch(s) with a training-window stride "
        f"of {schedule.stride} sample(s) and seeds {list(schedule.seeds)} for the multi-seed rows, where the "
        f"paper trains {paper.epochs} epochs at stride {paper.stride} on a GPU. The data are the public "
        f"NanoBench subset ({sum(flights.values())} flights here: "
        + ", ".join(f"{k} {v}" for k, v in flights.items())
        + f"; 80 distinct flights in the public release) where the paper used {PAPER_FLIGHTS}. This report is "
        f"on the `{split}` split"
        + (
            " — the 4-flight validation split, which also selected each model's best epoch, so its numbers are "
            "optimistic and noisy, not the paper's 22-flight test split"
            if split == "val"
            else ""
        )
        + ". Every filter is started from the ground-truth state with no trajectory alignment (ATE is "
        "unaligned), and every variant shares the encoder, EKF and data; only the supervision, bin "
        "encoding and N differ between rows."
    )


# ---------------------------------------------------------------------------------- figures


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig: Any, path: Path, dpi: int) -> None:
    """Write ``fig`` as PNG to ``path`` atomically and close it (also when the write fails)."""
    import matplotlib.pyplot as plt

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(path) as tmp:
            fig.savefig(tmp, format="png", dpi=dpi)
    finally:
        plt.close(fig)


def nees_figure(nees: dict[str, np.ndarray], path: Path) -> None:
    """Per method: median and inter-quartile band of the per-update NEES (Fig. nees), χ²(3) references."""
    plt = _pyplot()
    names = [n for n, v in nees.items() if v.size and np.isfinite(v).all()]
    lo, hi = metrics.NEES_BOUNDS
    fig, ax = plt.subplots(figsize=(max(6.0, 0.8 * len(names) + 2) + 3.0, 4.5))
    ax.axhspan(lo, hi, color="green", alpha=0.08, label=f"χ²(3) 95 % bounds [{lo:.3f}, {hi:.3f}]")
    ax.axhline(metrics.NEES_IDEAL_MEDIAN, color="green", lw=1.2, label=f"ideal median {metrics.NEES_IDEAL_MEDIAN:.3f}")
    for i, name in enumerate(names):
        q1, med, q3 = np.percentile(nees[name], [25, 50, 75])
        inside = float(np.mean((nees[name] >= lo) & (nees[name] <= hi)))
        color = "C3" if name == HEADLINE else "C0"
        ax.plot([i, i], [q1, q3], color=color, lw=8, alpha=0.35, solid_capstyle="butt")
        ax.plot(i, med, "o", color=color)
        ax.annotate(f"{inside:.0%}", (i, q3), textcoords="offset points", xytext=(0, 4), ha="center", fontsize=8)
    ax.set_yscale("log")
    ax.set_xticks(range(len(names)), names, rotation=30, ha="right")
    ax.set(ylabel="per-update velocity NEES", title="NEES: median (dot), inter-quartile band, share in bounds")
    ax.grid(alpha=0.3, which="both", axis="y")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    save_figure(fig, path, dpi=110)


def bins_figure(rows: dict[str, RowSummary], bins: Iterable[int], path: Path) -> None:
    """Net AVE and NLL against N (log2 axis) with the regression baseline as a line (Fig. bins)."""
    plt = _pyplot()
    ns = sorted(n for n in bins if sweep_row(n) in rows)
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, key in zip(axes, ("net_ave", "net_nll"), strict=True):
        mean = [rows[sweep_row(n)].mean[key] for n in ns]
        std = [(rows[sweep_row(n)].std or {}).get(key, 0.0) for n in ns]
        ax.errorbar(ns, mean, yerr=np.nan_to_num(std), fmt="o-", color="C3", capsize=3, label="VeloBins G+H^B")
        if REGRESSION in rows:
            r_mean, r_std = rows[REGRESSION].mean[key], (rows[REGRESSION].std or {}).get(key, math.nan)
            ax.axhline(r_mean, color="k", ls="--", lw=1.2, label="Reg")
            if math.isfinite(r_std):
                ax.axhspan(r_mean - r_std, r_mean + r_std, color="k", alpha=0.08)
        ax.set_xscale("log", base=2)
        ax.set_xticks(ns, [str(n) for n in ns])
        ax.set(xlabel="bins per axis N", ylabel=HEADERS[key], title=HEADERS[key].split(" [")[0])
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path, dpi=110)


def trajectory_figures(records: dict[str, dict[str, Any]], seqs: list, directory: Path) -> list[Path]:
    """One figure per trajectory shape present: its first flight, GT vs G+H^B, Reg, IMU-only.

    Args:
        records: {method row: {flight: FlightRecord}}.
        seqs: the split's flights (ground truth).
    """
    plt = _pyplot()
    paths = []
    for shape in TRAJECTORY_SHAPES:
        seq = next((s for s in seqs if trajectory_shape(s.name) == shape), None)
        if seq is None:
            continue
        fig, (top, alt) = plt.subplots(1, 2, figsize=(11, 4.5))
        top.plot(seq.p[:, 0], seq.p[:, 1], "k-", lw=2, label="ground truth")
        alt.plot(seq.t - seq.t[0], seq.p[:, 2], "k-", lw=2, label="ground truth")
        for method, color in ((HEADLINE, "C3"), (REGRESSION, "C0"), (IMU_ONLY, "C7")):
            rec = records.get(method, {}).get(seq.name)
            if rec is None:
                continue
            top.plot(rec.p_traj[:, 0], rec.p_traj[:, 1], color=color, lw=1.2, label=method)
            alt.plot(rec.t_traj - seq.t[0], rec.p_traj[:, 2], color=color, lw=1.2, label=method)
        # Axes follow the ground truth with a margin, so a diverging IMU-only track cannot squash the view.
        lo_p, hi_p = seq.p.min(axis=0), seq.p.max(axis=0)
        margin = np.maximum(0.5 * (hi_p - lo_p), 1.0)
        top.set(xlim=(lo_p[0] - margin[0], hi_p[0] + margin[0]), ylim=(lo_p[1] - margin[1], hi_p[1] + margin[1]))
        top.set(title="top view", xlabel="x [m]", ylabel="y [m]", aspect="equal", adjustable="box")
        alt.set(ylim=(lo_p[2] - margin[2], hi_p[2] + margin[2]), title="altitude", xlabel="t [s]", ylabel="z [m]")
        for ax in (top, alt):
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
        fig.suptitle(f"{shape}: {seq.name}")
        fig.tight_layout()
        path = directory / f"trajectory_{shape}.png"
        save_figure(fig, path, dpi=100)
        paths.append(path)
    return paths


# ---------------------------------------------------------------------------------- report


@dataclass
class SplitOutcome:
    """Everything scored on one split, ready for the report."""

    name: str
    rows: dict[str, RowSummary]
    nees: dict[str, np.ndarray]
    records: dict[str, dict[str, Any]]
    seqs: list


def score_split(name: str, results: list[UnitResult], seqs: list, ekf_config: Any = None) -> SplitOutcome:
    """Rows of the unit results plus the IMU-only baseline (sampled at the headline model's update stamps)."""
    from .evaluate import GroundTruth, imu_only_flight, score

    rows = summarise(results)
    nees = {r.unit.row: np.concatenate(list(r.nees.values())) for r in results if r.unit.seed == 0}
    records: dict[str, dict[str, Any]] = {r.unit.row: r.records for r in results if r.records}
    if HEADLINE not in records:
        raise ReproduceError(f"split {name}: no seed-0 {HEADLINE} records (needed for the IMU-only stamps)")
    imu = {s.name: imu_only_flight(s, records[HEADLINE][s.name].t, ekf_config) for s in seqs}
    records[IMU_ONLY] = imu
    rows[IMU_ONLY] = RowSummary({0: {s.name: score(imu[s.name], GroundTruth.of(s)) for s in seqs}})
    return SplitOutcome(name, rows, nees, records, seqs)


def render_report(outcome: SplitOutcome, schedule_name: str, schedule: Schedule, flights: dict[str, int]) -> str:
    """report.md of one split (sections named in the module docstring of the docs, docs/reproduce.md)."""
    rows = outcome.rows
    n = len(outcome.seqs)
    cells = {name: _row_cells(rows, name) for name in (*TABLE2_ROWS, IMU_ONLY) if name in rows}
    t3_keys = ("net_ave", "net_nll", "ave", "rte", "ate")
    t3 = {"Reg.": _row_cells(rows, REGRESSION)} | {
        label: _row_cells(rows, name) for label, name in TABLE3_ROWS.items() if name in rows
    }
    sweep = sorted({*schedule.bins_sweep, HEADLINE_BINS})
    sweep_cells = {f"N = {b}": _row_cells(rows, sweep_row(b)) for b in sweep if sweep_row(b) in rows}
    sweep_cells["Reg."] = _row_cells(rows, REGRESSION)
    seeds = ", ".join(map(str, schedule.seeds))
    parts = [
        f"# VeloBins reproduction — NanoBench, `{outcome.name}` split ({n} flights)",
        "",
        f"Schedule `{schedule_name}`: {schedule.epochs} epoch(s), stride {schedule.stride}, seeds ({seeds}). "
        f"Rows `{REGRESSION}` and `{HEADLINE}` are mean ± std (ddof 1) over the seeds' aggregates (no ± for one "
        "seed); every other row is seed 0. Each aggregate is the mean over flights. Best per column in bold "
        f"(NEES median: closest to the ideal {metrics.NEES_IDEAL_MEDIAN:.3f}; in bounds: highest).",
        "",
        "## Table II — supervision ablation (network and EKF-fused)",
        "",
        table(cells, KEYS, HEADERS),
        "",
        "Net columns: the network alone (body frame); AVE/RTE/ATE: EKF-fused, filter started from ground truth, "
        f"no alignment; NEES: per update, 3 dof, bounds [{metrics.NEES_BOUNDS[0]:.3f}, {metrics.NEES_BOUNDS[1]:.3f}]. "
        "M and M+H rows: one model each (trained with the covariance decoder), evaluated with each source.",
        "",
        "## Table III — bin encoding (G+H^B)",
        "",
        table(t3, t3_keys, HEADERS),
        "",
        "The paper's Table III gives the raw network's RTE; here RTE and ATE are EKF-fused (the evaluation path "
        "of every other table).",
        "",
        "## Bin resolution (G+H^B, seed 0 except N = 512)",
        "",
        table(sweep_cells, ("net_ave", "net_nll", "ave", "rte", "ate"), HEADERS),
        "",
        "![bin sweep](figures/bins.png)",
        "",
        "## Main-table layout by trajectory shape (EKF-fused)",
        "",
        shape_table(rows),
        "",
        "## NEES",
        "",
        "![NEES](figures/nees.png)",
        "",
        "## Paper vs measured (NanoBench; paper: test split)",
        "",
        paper_vs_measured(rows),
        "",
        "## How this differs from the paper",
        "",
        differences_paragraph(schedule_name, schedule, flights, outcome.name),
        "",
        "## Trajectories",
        "",
        *[
            f"![{shape}](figures/trajectory_{shape}.png)"
            for shape in TRAJECTORY_SHAPES
            if any(trajectory_shape(s.name) == shape for s in outcome.seqs)
        ],
        "",
    ]
    return "\n".join(parts)


DISCUSSION_HEADING = "### Discussion\n"
DISCUSSION_PLACEHOLDER = "> **PLACEHOLDER"


def _discussion(report: str) -> tuple[int, int] | None:
    """Start and end offsets of the Discussion text (after its heading, up to the next section)."""
    start = report.find(DISCUSSION_HEADING)
    if start < 0:
        return None
    start += len(DISCUSSION_HEADING)
    end = report.find("\n## ", start)
    return start, len(report) if end < 0 else end + 1


def keep_discussion(new_report: str, old_report: str) -> str:
    """``new_report`` with the hand-written Discussion of ``old_report`` carried over.

    The Discussion is the one part of report.md a person writes; a resumed run re-renders the
    report, and must not lose it. An old report whose Discussion is still the placeholder (or
    that has none) changes nothing.
    """
    new_span, old_span = _discussion(new_report), _discussion(old_report)
    if new_span is None or old_span is None:
        return new_report
    text = old_report[old_span[0] : old_span[1]]
    if DISCUSSION_PLACEHOLDER in text:
        return new_report
    return new_report[: new_span[0]] + text + new_report[new_span[1] :]


def write_split(
    outcome: SplitOutcome, out_dir: Path, schedule_name: str, schedule: Schedule, flights: dict[str, int]
) -> None:
    """``metrics.json``, ``report.md`` and ``figures/`` of one split under ``out_dir`` (each file atomically).

    A hand-written Discussion in an existing report.md is kept (:func:`keep_discussion`).
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    figures = out_dir / "figures"
    nees_figure({n: outcome.nees[n] for n in TABLE2_ROWS if n in outcome.nees}, figures / "nees.png")
    bins_figure(outcome.rows, sorted({*schedule.bins_sweep, HEADLINE_BINS}), figures / "bins.png")
    trajectory_figures(outcome.records, outcome.seqs, figures)
    atomic_write_text(out_dir / "metrics.json", json.dumps(metrics_document(outcome.rows), indent=1))
    report = render_report(outcome, schedule_name, schedule, flights)
    old = out_dir / "report.md"
    if old.is_file():
        kept = keep_discussion(report, old.read_text(encoding="utf-8"))
        if kept != report:
            print(f"{old}: kept its hand-written Discussion")
        report = kept
    atomic_write_text(old, report)


# ---------------------------------------------------------------------------------- command line


def git_commit() -> str:
    """``HEAD`` of the repository holding this file, with ``-dirty`` when the tree has changes."""
    here = Path(__file__).resolve().parent
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=here, capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return sha.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="velobins reproduce",
        description="Train every model of the paper's NanoBench ablations and regenerate Tables II/III, "
        "the bin sweep and the NEES figure (docs/reproduce.md).",
    )
    p.add_argument("--dataset", required=True, choices=DATASET_KINDS, help="adapter of the flight directories")
    p.add_argument("--data", required=True, type=Path, help="training flights")
    p.add_argument(
        "--val",
        type=Path,
        help="validation flights (model selection; evaluated); default: <data>/val when --data "
        "is a dataset root holding train/ and val/ (as ../shared/data/nanobench)",
    )
    p.add_argument("--test", type=Path, help="test flights (evaluated and reported separately)")
    p.add_argument("--schedule", default="cpu", choices=tuple(SCHEDULES), help="training schedule (SCHEDULES)")
    p.add_argument(
        "--out",
        required=True,
        type=Path,
        help="output directory; resumable: finished models of the same plan are kept, another plan is refused",
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="remove the earlier reproduction in --out first (models, logs, reports) and start afresh",
    )
    p.add_argument("--jobs", type=int, default=2, help="trainings / evaluation processes at once")
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"), help="training device")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument(
        "--params",
        action="append",
        type=Path,
        default=[],
        help="ROS parameter file with velobins_ekf filter overrides (e.g. velobins_bringup/config/nanobench.yaml)",
    )
    return p


def run_manifest(
    schedule_name: str, schedule: Schedule, dataset: str, data: dict[str, Path], ekf: Any
) -> dict[str, Any]:
    """What ``reproduce.json`` records: everything a resumed run's models and reports depend on.

    The schedule's values are recorded besides its name, so a schedule changed in the code is
    noticed too; ``ekf`` is the resolved filter configuration (the EKF-fused columns depend on it).
    """
    doc = {
        "schedule": schedule_name,
        "epochs": schedule.epochs,
        "stride": schedule.stride,
        "seeds": list(schedule.seeds),
        "bins_sweep": sorted({*schedule.bins_sweep, HEADLINE_BINS}),
        "dataset": dataset,
        "data": {k: str(v) for k, v in data.items()},
        "ekf": dataclasses.asdict(ekf) if dataclasses.is_dataclass(ekf) else ekf,
    }
    return json.loads(json.dumps(doc))  # the JSON form, as it compares against the file


def _flatten(doc: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(doc, dict) and doc:
        return {k: v for key, value in doc.items() for k, v in _flatten(value, f"{prefix}{key}.").items()}
    return {prefix.rstrip("."): doc}


def manifest_differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """``key: old != new`` for every recorded value that differs (nested keys dotted, NaN equal to NaN)."""
    a, b = _flatten(old), _flatten(new)
    same = lambda k: json.dumps(a.get(k), sort_keys=True) == json.dumps(b.get(k), sort_keys=True)  # noqa: E731
    return [f"{k}: {a.get(k)!r} != {b.get(k)!r}" for k in sorted({*a, *b}) if not same(k)]


def check_manifest(out: Path, manifest: dict[str, Any]) -> None:
    """Refuse ``out`` when it holds a reproduction of another plan, or reproduction files of no known plan.

    Raises:
        OutputError: names ``reproduce.json`` (or ``out``) and what differs; nothing is modified.
    """
    path = out / MANIFEST_NAME
    fix = "pass --overwrite to replace it (every model is retrained) or choose another --out"
    if not path.is_file():
        found = [name for name in LAYOUT.existing(out) if name != MANIFEST_NAME]
        if found:
            raise OutputError(
                out, f"holds {', '.join(found)} but no {MANIFEST_NAME} saying which plan made them; {fix}"
            )
        return
    try:
        old = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise OutputError(path, f"unreadable ({exc.__class__.__name__}); {fix}") from None
    if not isinstance(old, dict):
        raise OutputError(path, f"not a reproduction plan (a JSON {type(old).__name__}); {fix}")
    diffs = manifest_differences(old, manifest)
    if diffs:
        shown = "; ".join(diffs[:4]) + (f"; and {len(diffs) - 4} more" if len(diffs) > 4 else "")
        raise OutputError(path, f"{out} holds a reproduction of another plan ({shown}); {fix}")


def check_data_outside(out: Path, data: dict[str, Path]) -> None:
    """Refuse an ``--out`` that is inside a data directory or would hold (and replace) one."""
    for split, directory in data.items():
        flag = "--data" if split == "train" else f"--{split}"
        if out == directory or out.is_relative_to(directory):
            raise OutputError(out, f"lies inside the flights of {flag} {directory}; choose another --out")
        for name in LAYOUT.patterns:
            if directory == out / name or directory.is_relative_to(out / name):
                raise OutputError(
                    out, f"{flag} {directory} is where reproduce writes {out / name}; choose another --out"
                )


def _check_flights(dataset: str, data: dict[str, Path]) -> None:
    """Every data directory exists and holds flights of ``dataset`` (before any work)."""
    from .datasets import find_files

    for split, directory in data.items():
        flag = "--data" if split == "train" else f"--{split}"
        if not directory.is_dir():
            raise FileNotFoundError(f"{flag} {directory}: not a directory")
        if not find_files(dataset, directory):
            raise FileNotFoundError(f"{flag} {directory}: no {dataset} flights in it")


def _remove_stale_temps(out: Path) -> list[str]:
    """Temporary files of dead writers (a killed run) in every directory reproduce writes."""
    dirs = [out, out / MODEL_DIR, *(out / MODEL_DIR).glob(f"*{PARTIAL_SUFFIX}")]
    dirs += [d for split in SPLITS for d in (out / split, out / split / "figures")]
    return [f"{d / name}" for d in dirs if d.is_dir() for name in remove_stale_temp_files(d)]


def main_reproduce(argv: list[str] | None = None) -> int:
    """``velobins reproduce``; a user's mistake raises ``ValueError``/``FileNotFoundError`` (``velobins``: exit 2)."""
    args = build_parser().parse_args(argv)
    if args.val is None:
        if not ((args.data / "train").is_dir() and (args.data / "val").is_dir()):
            raise ValueError(f"--val not given and {args.data} has no train/ and val/ folders")
        args.data, args.val = args.data / "train", args.data / "val"
    for name in ("data", "val", "test", "out"):
        if getattr(args, name) is not None:
            setattr(args, name, getattr(args, name).resolve())
    if args.jobs < 1:
        raise ValueError(f"--jobs must be >= 1, got {args.jobs}")
    from .evaluate import load_ekf_config

    schedule = SCHEDULES[args.schedule]
    splits = {"val": args.val} | ({"test": args.test} if args.test else {})
    data = {"train": args.data, **splits}
    _check_flights(args.dataset, data)
    check_data_outside(args.out, data)
    ekf = load_ekf_config(args.params)
    manifest = run_manifest(args.schedule, schedule, args.dataset, data, ekf)
    mode = output_mode(resume=not args.overwrite, overwrite=args.overwrite)
    with open_run_dir(args.out, LAYOUT, mode):  # held until the end; removes its lock file on any exit
        check_manifest(args.out, manifest)
        for name in _remove_stale_temps(args.out):
            print(f"reproduce: removed {name} (left by an interrupted run)")
        atomic_write_text(args.out / MANIFEST_NAME, json.dumps(manifest, indent=1))
        return _reproduce(args, schedule, splits, data, ekf, argv)


def _reproduce(
    args: argparse.Namespace,
    schedule: Schedule,
    splits: dict[str, Path],
    data: dict[str, Path],
    ekf: Any,
    argv: list[str] | None,
) -> int:
    """Train, evaluate and report into the locked ``args.out``."""
    from .datasets import find_files, load_directory

    wall0 = time.monotonic()
    jobs, units = plan(schedule)
    print(f"reproduce: {len(jobs)} trainings ({args.schedule}), {len(units)} evaluations per split -> {args.out}")
    try:
        train_s = run_trainings(
            jobs, schedule, args.dataset, args.data, args.val, args.out, args.jobs, args.device, not args.no_progress
        )
    except ReproduceError as exc:
        print(f"velobins reproduce: error: {exc}", file=sys.stderr)
        return 1
    split_seqs = {split: load_directory(args.dataset, directory) for split, directory in splits.items()}
    counts = {"train": len(find_files(args.dataset, args.data))} | {k: len(v) for k, v in split_seqs.items()}
    params = tuple(str(p.resolve()) for p in args.params)
    for split, directory in splits.items():
        seqs = split_seqs[split]
        results = evaluate_split(
            units, args.out, args.dataset, directory, seqs, args.jobs, not args.no_progress, params
        )
        outcome = score_split(split, results, seqs, ekf)
        write_split(outcome, args.out / split, args.schedule, schedule, counts)
        config = {
            "schedule": args.schedule,
            "epochs": schedule.epochs,
            "stride": schedule.stride,
            "seeds": list(schedule.seeds),
            "bins_sweep": sorted({*schedule.bins_sweep, HEADLINE_BINS}),
            "git_commit": git_commit(),
            "wall_time_s": round(time.monotonic() - wall0, 1),
            "command": shlex.join(["velobins", "reproduce", *(sys.argv[2:] if argv is None else argv)]),
            "dataset": args.dataset,
            "data": {k: str(v) for k, v in data.items()},
            "flights": counts,
            "split": split,
            "jobs": args.jobs,
            "device": args.device,
            "ekf_params": [str(p) for p in args.params],
            "ekf": dataclasses.asdict(ekf),
            "training_s": {k: round(v, 1) for k, v in train_s.items()},
            "host_cpus": os.cpu_count(),
        }
        atomic_write_text(args.out / split / "config.json", json.dumps(config, indent=1))
        print(table({n: _row_cells(outcome.rows, n) for n in (REGRESSION, HEADLINE, IMU_ONLY)}, KEYS, HEADERS))
        print(f"{split}: {args.out / split / 'report.md'}")
    print(f"reproduce: done in {time.monotonic() - wall0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main_reproduce())
