"""``velobins reproduce`` and ``velobins demo`` outputs (issue 13): locks, plans, --overwrite, Ctrl-C.

Every test runs the real command line (``velobins_eval.cli.main``: exit status and one-line
errors) on four-second synthetic flights; the hours-long jobs are replaced by small real ones:
"training" writes a stand-in ``best.pt`` per planned model, "evaluation" writes every unit's result
file (the real format) with fixed metrics and records, and the rest (plan check, lock, reading the
unit files, metrics.json, report.md, the matplotlib figures, config.json) is the production code.
(The real jobs through submitit: test_reproduce_engine.py.)
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
from fixtures_datasets import hover_flight

from velobins_common.outputs import LOCK_NAME, MANIFEST_NAME, open_run_dir
from velobins_data.datasets import write_csv
from velobins_data.flight import Flight
from velobins_eval.cli import main
from velobins_eval.metrics import FlightMetrics
from velobins_eval.reproduce import commands, evaluation, plan, results
from velobins_eval.scoring import KEYS, FlightRecord

FLIGHTS = {"train": ("sim_circle_000", "sim_helix_001"), "val": ("sim_oval_002",)}


def _flight(name: str) -> Flight:
    return hover_flight(name, platform="nano", gravity=9.80665, dataset="sim")


@pytest.fixture
def data(tmp_path: Path) -> Path:
    """``<tmp>/data/{train,val}/*.csv``: a dataset root."""
    for split, names in FLIGHTS.items():
        (tmp_path / "data" / split).mkdir(parents=True)
        for name in names:
            write_csv(_flight(name), tmp_path / "data" / split / f"{name}.csv")
    return tmp_path / "data"


class FakeSteps:
    """Stand-ins for the trainings and the network evaluation; records what ran."""

    def __init__(self, tag: str = "run 1"):
        self.tag = tag
        self.trained: list[str] = []
        self.during_training = None  # called inside the training step (while the lock is held)

    def run_jobs(self, opts, schedule, splits, jobs, units, engine):
        if self.during_training is not None:
            self.during_training()
        out = opts.out
        seconds = {}
        for job in jobs:
            if plan.is_trained(out, job.name):
                seconds[job.name] = 0.0
                continue
            plan.model_dir(out, job.name).mkdir(parents=True, exist_ok=True)
            (plan.model_dir(out, job.name) / "best.pt").write_text(self.tag)
            self.trained.append(job.name)
            seconds[job.name] = 1.0
        for split, directory in splits.items():
            seqs = [_flight(p.stem) for p in sorted(directory.glob("*.csv"))]
            for i, unit in enumerate([*units, plan.EvalUnit(plan.IMU_ONLY, "")]):
                if results.is_done(out, split, unit):
                    continue
                value = 0.1 + 0.01 * i
                flights = {s.name: FlightMetrics(**dict.fromkeys(KEYS, value)) for s in seqs}
                nees = {s.name: np.full(20, 2.0 + i, dtype=np.float32) for s in seqs}
                kept = evaluation.keeps_records(unit) or unit.row == plan.IMU_ONLY
                records = {s.name: _record(s, unit.row) for s in seqs} if kept else {}
                result = evaluation.UnitResult(unit, flights, nees, records)
                results.save_unit(results.unit_path(out, split, unit), result, results.checkpoint_stamp(out, unit))
        return seconds


def _record(seq: Flight, method: str) -> FlightRecord:
    idx = np.arange(20, len(seq.t), 20)
    n = len(idx)
    return FlightRecord(
        seq.name,
        method,
        seq.t[idx],
        np.zeros((n, 3)),
        np.ones((n, 3)),
        seq.p[idx],
        seq.v[idx],
        np.tile(np.eye(3) * 0.01, (n, 1, 1)),
        seq.t,
        seq.p,
    )


@pytest.fixture
def steps(monkeypatch: pytest.MonkeyPatch) -> FakeSteps:
    fake = FakeSteps()
    monkeypatch.setattr(commands, "_run_jobs", fake.run_jobs)
    return fake


def _argv(data: Path, out: Path, *extra: str) -> list[str]:
    return ["reproduce", "--dataset", "csv", "--data", str(data), "--out", str(out), "--no-progress", *extra]


def _snapshot(directory: Path) -> dict[str, bytes | None]:
    """Every entry under ``directory`` (hidden ones too) with its bytes (None for a folder)."""
    return {str(p.relative_to(directory)): None if p.is_dir() else p.read_bytes() for p in directory.rglob("*")}


def _leftovers(directory: Path) -> list[Path]:
    """Temporary files and lock files anywhere under ``directory``."""
    return sorted(p for p in directory.rglob("*") if p.name.endswith(".tmp") or p.name == LOCK_NAME)


def test_reproduce_writes_its_outputs_and_a_second_one_into_the_same_dir_fails_at_once(
    data: Path, tmp_path: Path, steps: FakeSteps, capsys: pytest.CaptureFixture
) -> None:
    out = tmp_path / "out"
    second: dict[str, object] = {}

    def second_reproduce() -> None:  # runs while the first one holds the lock
        capsys.readouterr()
        t0 = time.monotonic()
        second["rc"] = main(_argv(data, out, "--schedule", "smoke"))
        second["seconds"] = time.monotonic() - t0
        second["stderr"] = capsys.readouterr().err

    steps.during_training = second_reproduce
    assert main(_argv(data, out, "--schedule", "smoke")) == 0
    assert second["rc"] == 2 and second["seconds"] < 5.0
    err = str(second["stderr"])
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"{out}: in use by velobins reproduce (pid {os.getpid()})" in err
    # The first run was not disturbed: every planned model trained once, every output present.
    assert len(steps.trained) == len(plan.plan(plan.SCHEDULES["smoke"])[0])
    for name in ("metrics.json", "report.md", "config.json", "figures/nees.png", "figures/bins.png"):
        assert (out / "val" / name).stat().st_size > 0, name
    assert (out / "val" / "figures" / "trajectory_oval.png").stat().st_size > 1000
    assert _leftovers(out) == []


def test_same_plan_resumes_and_keeps_the_hand_written_discussion(data: Path, tmp_path: Path, steps: FakeSteps) -> None:
    out = tmp_path / "out"
    assert main(_argv(data, out, "--schedule", "smoke")) == 0
    report = out / "val" / "report.md"
    text = report.read_text()
    start = text.index("### Discussion\n") + len("### Discussion\n")
    end = text.index("\n## ", start) + 1
    mine = "\nThe lead's interpretation, written by hand.\n\n"
    report.write_text(text[:start] + mine + text[end:])
    first_models = {p: p.read_bytes() for p in (out / "models").rglob("best.pt")}

    steps.tag, steps.trained = "run 2", []
    assert main(_argv(data, out, "--schedule", "smoke")) == 0
    assert steps.trained == []  # every model of the plan was finished: nothing retrained
    assert {p: p.read_bytes() for p in (out / "models").rglob("best.pt")} == first_models
    again = report.read_text()
    assert mine in again and "PLACEHOLDER" not in again and "## Table II" in again
    assert _leftovers(out) == []


@pytest.mark.parametrize(
    "change, differs",
    [
        (("--schedule", "cpu"), "schedule: 'smoke' != 'cpu'"),
        (("--schedule", "smoke", "--test", "{val}"), "data.test: None != "),
        (("--schedule", "smoke", "--params", "{params}"), "init_sigma_vel: 0.1 != 0.123"),
    ],
)
def test_another_plan_is_refused_untouched_and_overwrite_replaces_the_whole_reproduction(
    data: Path,
    tmp_path: Path,
    steps: FakeSteps,
    capsys: pytest.CaptureFixture,
    change: tuple[str, ...],
    differs: str,
) -> None:
    out = tmp_path / "out"
    assert main(_argv(data, out, "--schedule", "smoke")) == 0
    (out / "notes.txt").write_text("mine, not the command's")
    params = tmp_path / "ekf.yaml"
    params.write_text("velobins_ekf:\n  ros__parameters:\n    filter:\n      init_sigma_vel: 0.123\n")
    extra = [a.format(val=data / "val", params=params) for a in change]
    before = _snapshot(out)
    capsys.readouterr()
    steps.trained = []

    assert main(_argv(data, out, *extra)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{out / 'reproduce.json'}: " in err, err
    assert differs in err and "--overwrite" in err
    assert steps.trained == [] and _snapshot(out) == before  # nothing there modified, no lock left

    steps.tag = "run 2"
    assert main(_argv(data, out, *extra, "--overwrite")) == 0
    models = sorted((out / "models").rglob("best.pt"))
    assert models and all(p.read_text() == "run 2" for p in models)  # every model retrained
    assert (out / "notes.txt").read_text() == "mine, not the command's"  # not the command's: kept
    assert main(_argv(data, out, *extra)) == 0  # the new plan now resumes


def test_ctrl_c_while_a_figure_is_written_leaves_no_temporary_file_and_no_lock(
    data: Path, tmp_path: Path, steps: FakeSteps, monkeypatch: pytest.MonkeyPatch
) -> None:
    from matplotlib.figure import Figure

    written: list[Path] = []

    def interrupted_savefig(self, fname, *args, **kwargs):
        Path(fname).write_bytes(b"\x89PNG half a figure")  # the write has begun
        written.append(Path(fname))
        raise KeyboardInterrupt

    monkeypatch.setattr(Figure, "savefig", interrupted_savefig)
    out = tmp_path / "out"
    assert main(_argv(data, out, "--schedule", "smoke")) == 130
    assert written and all(p.name.endswith(".tmp") for p in written)  # figures go through a temporary file
    assert _leftovers(out) == [] and not (out / "val" / "figures" / "nees.png").exists()
    assert (out / "reproduce.json").is_file()  # the plan stays: the next run resumes
    monkeypatch.undo()
    monkeypatch.setattr(commands, "_run_jobs", steps.run_jobs)
    steps.trained = []
    assert main(_argv(data, out, "--schedule", "smoke")) == 0 and steps.trained == []


@pytest.mark.parametrize("where", ["root", "val"])
def test_out_that_would_hold_or_lie_inside_the_data_is_refused(
    data: Path, steps: FakeSteps, capsys: pytest.CaptureFixture, where: str
) -> None:
    out = data if where == "root" else data / "val" / "out"
    before = _snapshot(data)
    assert main(_argv(data, out, "--schedule", "smoke")) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "choose another --out" in err
    assert _snapshot(data) == before and steps.trained == []


def test_missing_or_empty_data_directories_are_one_line_errors(
    data: Path, tmp_path: Path, steps: FakeSteps, capsys: pytest.CaptureFixture
) -> None:
    (tmp_path / "empty").mkdir()
    for extra, says in (
        (["--test", str(tmp_path / "nope")], "not a directory"),
        (["--test", str(tmp_path / "empty")], "no csv flights"),
    ):
        assert main(_argv(data, tmp_path / "out", *extra)) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and says in err and "--test" in err
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------------------------- demo


def test_demo_refuses_an_earlier_run_and_overwrite_replaces_only_its_own_entries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    import velobins_data.sim.batch as batch
    from velobins_eval.demo import LAYOUT

    out = tmp_path / "main_job"
    with open_run_dir(out, LAYOUT) as run:  # an earlier demo run, with its manifest
        (run.path / "flights" / "all").mkdir(parents=True)
        (run.path / "flights" / "all" / "sim_circle_000.csv").write_text("an earlier flight")
        (run.path / "report.md").write_text("# an earlier report")
        run.commit()
    (out / "notes.txt").write_text("mine")
    before = _snapshot(out)

    def simulate_many(*args, **kwargs):
        pytest.fail("the demo must not start before its output is settled")

    monkeypatch.setattr(batch, "simulate_many", simulate_many)
    assert main(["demo", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{out}: already holds a demo run (flights, report.md)" in err
    assert "--overwrite" in err and "--resume" not in err
    assert _snapshot(out) == before

    seen: dict[str, object] = {}

    def interrupted_simulate_many(preset, flights, seconds, seed, out_dir, *args, **kwargs):
        seen["entries"] = sorted(p.name for p in out.iterdir())
        raise KeyboardInterrupt

    monkeypatch.setattr(batch, "simulate_many", interrupted_simulate_many)
    assert main(["demo", "--simulated", "--out", str(out), "--overwrite"]) == 130
    staged = [n for n in seen["entries"] if n.startswith(".velobins-stage.")]
    assert len(staged) == 1  # the new run is staged beside the earlier one, which stays until it is complete
    assert seen["entries"] == sorted([MANIFEST_NAME, LOCK_NAME, *staged, "flights", "notes.txt", "report.md"])
    assert _snapshot(out) == before  # Ctrl-C: the earlier run byte-identical, staging and lock gone


def test_main_job_script_passes_overwrite() -> None:
    """The README promises `bash scripts/main_job.sh` can be run again and again."""
    script = Path(__file__).resolve().parents[2] / "scripts" / "main_job.sh"
    assert 'exec velobins demo --overwrite "$@"' in script.read_text()
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
