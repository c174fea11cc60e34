"""``velobins reproduce`` through submitit: a tiny plan end to end on the local executor, interrupted and
resumed (only the missing jobs run again); the Slurm array it would submit (sbatch file, resources, the
pickled jobs) without a cluster; failures reported after the phase; Ctrl-C stops the local jobs."""

from __future__ import annotations

import dataclasses
import json
import os
import pickle
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import cloudpickle
import pytest

from velobins_eval.cli.reproduce import parse_options
from velobins_eval.reproduce import engine as engine_module
from velobins_eval.reproduce.commands import reproduce
from velobins_eval.reproduce.engine import Engine, SlurmConfig, make_executor
from velobins_eval.reproduce.errors import ReproduceError
from velobins_eval.reproduce.plan import HEADLINE, IMU_ONLY, REGRESSION, SCHEDULES, model_dir, plan
from velobins_eval.reproduce.tasks import Data, TrainingTask

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the stand-in tasks below run in job processes


@pytest.fixture(scope="module")
def flights(tmp_path_factory) -> Path:
    """Three short simulated flights: two to train on, one to validate and evaluate on."""
    from velobins_data.datasets import write_csv
    from velobins_data.sim import simulate_flight

    root = tmp_path_factory.mktemp("flights")
    for i, (split, family) in enumerate((("train", "circle"), ("train", "figure8"), ("val", "oval"))):
        (root / split).mkdir(exist_ok=True)
        seq = simulate_flight("nano", family, 8.0, 200 + i, index=i)
        write_csv(seq, root / split / f"{seq.name}.csv")
    return root


class Interrupt:
    """``on_done``: records every finished job; Ctrl-C (KeyboardInterrupt) after the first whose name starts so."""

    def __init__(self, after: str | None = None):
        self.after, self.ran = after, []

    def __call__(self, task) -> None:
        self.ran.append(task.name)
        if self.after is not None and task.name.startswith(self.after):
            raise KeyboardInterrupt


def _mtimes(out: Path) -> dict[Path, int]:
    return {p: p.stat().st_mtime_ns for p in (*out.glob("models/*/best.pt"), *out.glob("units/*/*.npz"))}


@pytest.mark.slow
def test_local_executor_runs_a_tiny_plan_interrupted_and_resumed(flights: Path, tmp_path: Path) -> None:
    """Two trainings, their evaluations, the IMU-only baseline and the tables, through submitit's LocalExecutor
    (a process per job), stopped twice by Ctrl-C: each run submits only the jobs whose files are missing."""
    out = tmp_path / "out"
    argv = ["--dataset", "csv", "--data", str(flights), "--schedule", "smoke", "--out", str(out)]
    opts = dataclasses.replace(parse_options([*argv, "--jobs", "1", "--no-progress"]), tables=())
    assert [j.name for j in plan(SCHEDULES["smoke"], ())[0]] == ["reg-s0", "GH-B-spe-N512-s0"]

    first = Interrupt(after="train")
    with pytest.raises(KeyboardInterrupt):
        reproduce(opts, on_done=first)
    assert first.ran == ["train reg-s0"] and not (out / "units").exists()
    trained = _mtimes(out)
    assert list(trained) == [model_dir(out, "reg-s0") / "best.pt"] and not (out / ".velobins.lock").exists()

    second = Interrupt(after="evaluate")
    with pytest.raises(KeyboardInterrupt):
        reproduce(opts, on_done=second)
    assert second.ran == ["train GH-B-spe-N512-s0", "evaluate val/reg-s0"]
    done = _mtimes(out)
    assert {p: done[p] for p in trained} == trained  # the finished training was not redone

    third = Interrupt()
    assert reproduce(opts, on_done=third) == 0
    assert third.ran == ["evaluate val/GH-B-spe-N512-s0", "evaluate val/imu-only"]
    assert {p: t for p, t in _mtimes(out).items() if p in done} == done  # nothing finished was recomputed
    doc = json.loads((out / "val" / "metrics.json").read_text())
    assert set(doc) == {REGRESSION, HEADLINE, IMU_ONLY}
    assert all(doc[row]["aggregate"]["ave"] > 0 for row in doc)
    assert "## Paper vs measured" in (out / "val" / "report.md").read_text()
    config = json.loads((out / "val" / "config.json").read_text())
    assert config["executor"] == "local" and config["slurm"] is None
    logs = {p.name for p in (out / "logs").iterdir()}
    assert logs == {"reg-s0.log", "GH-B-spe-N512-s0.log", "eval-val.log"}
    assert list((out / "jobs").glob("*_0_log.out"))  # submitit's own per-job logs

    # Everything is there: a fourth run submits nothing and only re-renders the report.
    fourth = Interrupt()
    assert reproduce(opts, on_done=fourth) == 0 and fourth.ran == []


def _fake_slurm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``srun`` and ``sbatch`` stand-ins on PATH: sbatch keeps a copy of the script it is given and answers
    like Slurm; nothing runs."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "sbatch").write_text(f'#!/bin/sh\ncp "$1" {tmp_path}/sbatch_seen.sh\necho "Submitted batch job 4242"\n')
    for name in ("srun", "sbatch"):
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return tmp_path / "sbatch_seen.sh"


def test_slurm_array_submission_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What ``--executor slurm`` submits for a phase: one sbatch array with the requested resources, each
    element a pickled job that runs ``velobins train`` for one model with the job's cores as threads."""
    seen = _fake_slurm(tmp_path, monkeypatch)
    out = tmp_path / "out"
    slurm = SlurmConfig(partition="gpu", time=90, cpus_per_task=4, gpus=1, array_parallelism=3, mem_gb=16)
    slurm = dataclasses.replace(slurm, setup=("source /shared/velobins/scripts/env.sh",))
    engine = Engine("slurm", out / "jobs", slurm=slurm, progress=False)
    assert engine.threads == 4
    schedule = SCHEDULES["cpu"]
    jobs, _ = plan(schedule, ("I",))
    data = Data("nanobench", Path("/shared/nanobench/train"), Path("/shared/nanobench/val"))
    tasks = [TrainingTask(j, schedule, data, out, "auto", engine.threads) for j in jobs]
    submitted = engine.submit(tasks)

    assert [j.job_id for j in submitted] == [f"4242_{i}" for i in range(len(jobs))]
    script = seen.read_text()
    assert script == (out / "jobs" / "4242_submission.sh").read_text()  # submitit keeps the file it submitted
    flags = {line for line in script.splitlines() if line.startswith("#SBATCH")}
    for flag in (
        f"#SBATCH --array=0-{len(jobs) - 1}%3",  # one element per training, 3 at once
        "#SBATCH --partition=gpu",
        "#SBATCH --time=90",
        "#SBATCH --cpus-per-task=4",
        "#SBATCH --gpus-per-node=1",
        "#SBATCH --mem=16G",  # not --mem=16: sbatch reads that as MB
        "#SBATCH --job-name=velobins",
        "#SBATCH --signal=USR2@90",  # submitit's requeue signal before the time limit
    ):
        assert flag in flags, (flag, sorted(flags))
    assert f"#SBATCH --output={out / 'jobs'}/%A_%a_0_log.out" in flags
    lines = script.splitlines()
    assert lines.index("source /shared/velobins/scripts/env.sh") < next(
        i for i, ln in enumerate(lines) if ln.startswith("srun ")
    )
    command = next(ln for ln in lines if ln.startswith("srun "))
    assert command.endswith(f"{sys.executable} -u -m submitit.core._submit {out / 'jobs'}")

    # The array's elements: the pickled training jobs, in the plan's order, each a `velobins train` command.
    for i, job in enumerate(jobs):
        with open(out / "jobs" / f"4242_{i}_submitted.pkl", "rb") as fh:
            delayed = pickle.load(fh)
        task = delayed.function
        assert isinstance(task, TrainingTask) and task.job == job
        argv = task.argv()
        assert argv[:6] == [
            "--dataset",
            "nanobench",
            "--data",
            "/shared/nanobench/train",
            "--val",
            "/shared/nanobench/val",
        ]
        assert argv[argv.index("--threads") + 1] == "4" and argv[argv.index("--out") + 1] == str(
            out / "models" / f"{job.name}.partial"
        )
        assert [argv[argv.index(k) + 1] for k in ("--epochs", "--stride", "--seed")] == ["20", "10", str(job.seed)]
        assert set(job.args) <= set(argv)


def test_slurm_without_srun_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ValueError, match=r"--executor slurm: no 'srun' on this machine"):
        make_executor("slurm", tmp_path / "jobs")
    with pytest.raises(ValueError, match="--slurm-cpus-per-task: must be >= 1"):
        SlurmConfig(cpus_per_task=0)


@dataclasses.dataclass
class Touch:
    """A stand-in job: writes its name into a folder (or fails, saying why)."""

    name: str
    folder: Path
    fail: bool = False

    def __call__(self) -> float:
        if self.fail:
            raise ReproduceError(f"{self.name} went wrong (log: {self.folder / self.name}.log)")
        (self.folder / self.name).write_text("done")
        return 1.5


def test_a_failed_job_is_reported_after_its_phase_and_the_others_finish(tmp_path: Path) -> None:
    engine = Engine("local", tmp_path / "jobs", jobs=2, progress=False)
    tasks = [Touch("a", tmp_path), Touch("b", tmp_path, fail=True), Touch("c", tmp_path)]
    with pytest.raises(ReproduceError) as info:
        engine.run(tasks, "stand-ins")
    assert str(info.value) == f"1 of 3 stand-ins failed: b: b went wrong (log: {tmp_path / 'b'}.log)"
    assert (tmp_path / "a").read_text() == (tmp_path / "c").read_text() == "done"
    assert engine.run([Touch("d", tmp_path)], "stand-ins") == [(Touch("d", tmp_path), 1.5)]


@dataclasses.dataclass
class Sleeper:
    """A stand-in job that holds a temporary file while it runs and removes it when interrupted."""

    name: str
    folder: Path

    def __call__(self) -> float:
        tmp = self.folder / f".{self.name}.tmp"
        tmp.write_text("half a file")
        try:
            (self.folder / f"{self.name}.ready").write_text("")
            time.sleep(120)
        finally:
            tmp.unlink()
        return 0.0


def test_ctrl_c_stops_the_running_local_jobs_and_each_cleans_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pressed = []

    def interrupt_when_started(seconds: float) -> None:  # the driver's wait: Ctrl-C once two jobs have started
        if not pressed and len(list(tmp_path.glob("*.ready"))) == 2:
            pressed.append(True)
            raise KeyboardInterrupt
        time.sleep(0.05)

    monkeypatch.setattr(engine_module, "time", SimpleNamespace(monotonic=time.monotonic, sleep=interrupt_when_started))
    engine = Engine("local", tmp_path / "jobs", jobs=2, progress=False)
    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        engine.run([Sleeper("a", tmp_path), Sleeper("b", tmp_path), Sleeper("c", tmp_path)], "sleepers")
    assert time.monotonic() - t0 < 60  # not the sleepers' 120 s: they were stopped
    assert not list(tmp_path.glob(".*.tmp"))  # each removed its temporary file (SIGINT, then its finally)
    assert sorted(p.stem for p in tmp_path.glob("*.ready")) == ["a", "b"]  # the third never started
