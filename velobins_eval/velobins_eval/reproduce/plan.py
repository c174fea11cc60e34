"""What ``velobins reproduce`` trains and scores: schedules, row names, the plan, and where its outputs live.

Trainings (paper §IV-A "Implementation Details", §V ablations; schedules in :data:`SCHEDULES`),
for the tables asked for (:data:`TABLES`, all by default):

* ``reg`` and the headline ``G+H^B`` (SPE, N = 512) for every seed of the schedule;
* Table I: the baselines ``tlio``, ``eqnio``, ``imo``, ``airio`` with their own networks and losses
  (``velobins train --method``), seed 0; AI-IO's column is ``reg``, VeloBins' the headline;
* ``H^B``, ``G^B``; ``M`` and ``M+H`` trained once with a covariance decoder (``--uncertainty
  B+C``): the loss does not depend on the uncertainty source (``velobins_net.losses``), so one model
  serves its ^B, ^C and ^B+C rows, the source passed to the predictor at evaluation;
* ``G+H^B`` with the ``direct`` and ``pe`` bin encodings (Table III) and with every N of the
  schedule's bin sweep (Fig. bins; N = 512 is the headline seed-0 model).

:func:`plan` turns a schedule into the unique :class:`TrainingJob` list and the :class:`EvalUnit`
of every (row, seed); the rest of the package only executes and reports that plan.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from velobins_common.errors import OptionError
from velobins_common.outputs import RunLayout
from velobins_net.config import BASELINE_METHODS


@dataclass(frozen=True)
class Schedule:
    """Training schedule of a reproduction run.

    Attributes:
        epochs: training epochs per model (paper: 100).
        stride: training window stride [samples] (paper: 1).
        seeds: seeds of the multi-seed rows (``reg`` and the headline ``G+H^B``).
        bins_sweep: N values of the bin-resolution sweep besides the headline N (Fig. bins).
        baseline_width: Table I baselines' channel-width multiplier (``ModelConfig.baseline_width``;
            1 = published widths).
        frame_width: EqNIO's frame-network width multiplier (``ModelConfig.frame_width``).
    """

    epochs: int
    stride: int
    seeds: tuple[int, ...]
    bins_sweep: tuple[int, ...]
    baseline_width: float = 1.0
    frame_width: float = 1.0


HEADLINE_BINS = 512
"""N of the headline model (paper §IV-A); it is also the N = 512 point of the bin sweep."""

SCHEDULES: dict[str, Schedule] = {
    "cpu": Schedule(20, 10, (0, 1, 2), (16, 32, 64, 128, 256, 1024, 2048), baseline_width=0.5, frame_width=0.125),
    "full": Schedule(epochs=100, stride=1, seeds=(0, 1, 2), bins_sweep=(16, 32, 64, 128, 256, 1024, 2048)),
    "smoke": Schedule(1, 50, (0,), (16, 64), baseline_width=0.25, frame_width=0.125),
}
"""``cpu``: a few hours on a laptop-class CPU (the baselines at half their published widths, EqNIO's
frame network at 1/8: its step at full width is tens of times TLIO's); ``full``: the paper's schedule
(GPU); ``smoke``: the test."""

HEADLINE = "G+H^B"
"""Row name of VeloBins' headline variant (paper Table II, bold)."""
REGRESSION = "reg"
"""Row name of the AI-IO regression baseline, Reg. (H+N)^C."""
IMU_ONLY = "imu-only"
"""Row name of IMU integration (the same EKF, no updates)."""

BASELINE_ROWS = BASELINE_METHODS
"""Rows of the Table I baselines with a network of their own: named by their method."""
BASELINE_ORDER = ("eqnio", "imo", "tlio", "airio")
"""Training order of the baselines: slowest first, so two workers finish together."""
TABLE1_COLUMNS = {
    "TLIO": "tlio",
    "EqNIO": "eqnio",
    "IMO": "imo",
    "AirIO": "airio",
    "AI-IO": REGRESSION,
    "VeloBins": HEADLINE,
}
"""Table I (paper: main results) column label -> metrics.json row, in the paper's order."""
TABLES = ("I", "II", "III", "bins")
"""What ``--tables`` can select: Table I (methods), II (supervision), III (encoding), the bin sweep."""

TABLE2_ROWS = ("reg", "H^B", "M^B", "M^C", "M^B+C", "M+H^B", "M+H^C", "M+H^B+C", "G^B", "G+H^B")
"""Rows of Table II (supervision ablation), in the paper's order."""
TABLE3_ROWS = {"Direct": "G+H^B Direct", "PE": "G+H^B PE", "SPE": HEADLINE}
"""Table III (bin encoding) label -> metrics.json row; SPE is the headline model."""


def sweep_bins(schedule: Schedule) -> list[int]:
    """Every N of the bin sweep, the headline N included, ascending."""
    return sorted({*schedule.bins_sweep, HEADLINE_BINS})


def schedule_record(name: str, schedule: Schedule, tables: tuple[str, ...] = TABLES) -> dict[str, Any]:
    """The schedule as ``reproduce.json`` and ``config.json`` record it: its name, its values and the tables.

    ``tables`` is recorded only when it is not all of them, so earlier full reproductions still match.
    """
    record: dict[str, Any] = {
        "schedule": name,
        "epochs": schedule.epochs,
        "stride": schedule.stride,
        "seeds": list(schedule.seeds),
        "bins_sweep": sweep_bins(schedule),
    }
    if "I" in tables:
        record |= {"baseline_width": schedule.baseline_width, "frame_width": schedule.frame_width}
    if tuple(tables) != TABLES:
        record["tables"] = list(tables)
    return record


def parse_tables(text: str) -> tuple[str, ...]:
    """``--tables`` (``I,II``, ``1,3``, ``all``) → the selected :data:`TABLES` in their order; ValueError if unknown."""
    if text.strip().lower() == "all":
        return TABLES
    arabic = {"1": "I", "2": "II", "3": "III"}
    picked = set()
    for item in text.split(","):
        name = arabic.get(item.strip(), item.strip())
        name = name if name == "bins" else name.upper()
        if name not in TABLES:
            raise OptionError("--tables", f"unknown table {item.strip()!r}; choose from {', '.join(TABLES)} or all")
        picked.add(name)
    return tuple(t for t in TABLES if t in picked)


def sweep_row(num_bins: int) -> str:
    """metrics.json row of the bin-sweep point N (the headline model for N = 512)."""
    return HEADLINE if num_bins == HEADLINE_BINS else f"G+H^B N={num_bins}"


# ---------------------------------------------------------------------------------- output layout

LOG_DIR = "logs"
MODEL_DIR = "models"
PARTIAL_SUFFIX = ".partial"
UNIT_DIR = "units"
"""One result file per evaluation unit, ``<out>/units/<split>/<unit>.npz`` (:mod:`.results`)."""
JOB_DIR = "jobs"
"""submitit's folder (pickled jobs, sbatch files, submitit's own logs; :mod:`.engine`)."""
MANIFEST_NAME = "reproduce.json"
"""The plan of the reproduction in ``<out>`` (what a resumed run must match)."""
SPLITS = ("val", "test")
"""Evaluation splits; each gets ``<out>/<split>/``."""
LAYOUT = RunLayout("reproduce", (MANIFEST_NAME, MODEL_DIR, LOG_DIR, UNIT_DIR, JOB_DIR, *SPLITS))
"""Every entry ``velobins reproduce`` writes in ``<out>`` (what ``--overwrite`` removes)."""


def model_dir(out: Path, name: str) -> Path:
    """Finished model directory (``best.pt`` inside means the training completed)."""
    return out / MODEL_DIR / name


def is_trained(out: Path, name: str) -> bool:
    """True when ``<out>/models/<name>/best.pt`` exists (the training finished earlier)."""
    return (model_dir(out, name) / "best.pt").is_file()


def partial_dir(out: Path, name: str) -> Path:
    """Directory a training runs in until it succeeds (``<out>/models/<name>.partial``)."""
    return out / MODEL_DIR / (name + PARTIAL_SUFFIX)


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
        uncertainty: ``B``, ``C`` or ``B+C``: the variance source the predictor reports; None: the model's own.
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


def plan(schedule: Schedule, tables: tuple[str, ...] = TABLES) -> tuple[list[TrainingJob], list[EvalUnit]]:
    """Unique trainings and the evaluation units of every row of ``tables`` for ``schedule``."""
    jobs: list[TrainingJob] = []
    units: list[EvalUnit] = []
    later: list[TrainingJob] = []  # seeds after the first train after Table I's baselines (the longest jobs)
    for seed in schedule.seeds:
        reg = TrainingJob(f"reg-s{seed}", ("--variant", "reg"), seed)
        head = _gh_job("spe", HEADLINE_BINS, seed, headline=True)
        (jobs if seed == schedule.seeds[0] else later).extend([reg, head])
        units += [EvalUnit(REGRESSION, reg.name, None, seed), EvalUnit(HEADLINE, head.name, None, seed)]
    if "I" in tables:
        for method in BASELINE_ORDER:
            widths = ("--baseline-width", str(schedule.baseline_width))
            if method == "eqnio":  # train refuses an option the method ignores
                widths += ("--frame-width", str(schedule.frame_width))
            jobs.append(TrainingJob(method, ("--method", method, *widths), 0))
        units += [EvalUnit(method, method) for method in BASELINE_ROWS]
    jobs += later
    if "II" in tables:
        _table2(jobs, units)
    if "III" in tables:
        for label, encoding in (("Direct", "direct"), ("PE", "pe")):
            job = _gh_job(encoding, HEADLINE_BINS, 0)
            jobs.append(job)
            units.append(EvalUnit(TABLE3_ROWS[label], job.name))
    if "bins" in tables:
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


def _table2(jobs: list[TrainingJob], units: list[EvalUnit]) -> None:
    """Add Table II's single-seed trainings (H, M, M+H, G) and their rows."""
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
