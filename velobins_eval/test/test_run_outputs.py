"""Runs are never lost: `velobins train` / `evaluate` outputs, locks, interrupted saves, checkpoints.

Real flights (the simulator, a few seconds each), real training (one tiny epoch) and real
subprocesses for the concurrency and terminal checks.
"""

from __future__ import annotations

import json
import pickle
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from velobins_common.errors import UserError
from velobins_common.outputs import LOCK_NAME, MANIFEST_NAME, RunLock
from velobins_data.sim.batch import simulate_many
from velobins_eval.cli import main
from velobins_net import checkpoint as checkpoint_module
from velobins_net.checkpoint import read_checkpoint, save_checkpoint

TINY = ("--members", "1", "--epochs", "1", "--stride", "25", "--val-stride", "25", "--bins", "32", "--batch-size", "64")


def velobins(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "velobins_eval.cli", *args], capture_output=True, text=True, timeout=300, **kw
    )


def snapshot(directory: Path) -> dict[str, bytes]:
    """Every file under ``directory`` with its bytes (to prove nothing was modified)."""
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def flights(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("sim") / "flights"
    simulate_many("nano", 3, 6.0, 11, out, workers=1, progress=False)
    return out


@pytest.fixture(scope="module")
def trained(flights: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("run") / "gh"
    assert main(["train", "--dataset", "csv", "--data", str(flights), *TINY, "--no-progress", "--out", str(out)]) == 0
    return out


def train_args(flights: Path, out: Path, *extra: str) -> list[str]:
    return ["train", "--dataset", "csv", "--data", str(flights), *TINY, "--no-progress", "--out", str(out), *extra]


def test_train_refuses_a_directory_holding_a_run(flights, trained, capsys) -> None:
    before = snapshot(trained)
    assert main(train_args(flights, trained)) == 2
    err = capsys.readouterr().err
    assert "best.pt" in err and "last.pt" in err and "--overwrite" in err and "--resume" in err
    assert "Traceback" not in err
    assert snapshot(trained) == before


def test_train_overwrite_replaces_the_whole_run_and_resume_continues(flights, trained, tmp_path) -> None:
    out = shutil.copytree(trained, tmp_path / "copy")  # with its manifest and tensorboard/
    (out / "notes.txt").write_text("mine")  # not the command's: never touched
    (out / "history.json").write_text("[]")
    assert main(train_args(flights, out, "--overwrite", "--epochs", "2")) == 0
    history = json.loads((out / "history.json").read_text())
    assert [h["epoch"] for h in history] == [0, 1]
    assert (out / "notes.txt").read_text() == "mine"
    assert main(train_args(flights, out, "--resume", "--epochs", "3")) == 0
    assert read_checkpoint(out / "last.pt")["epoch"] == 2
    assert [h["epoch"] for h in json.loads((out / "history.json").read_text())] == [0, 1, 2]
    assert not list(out.glob(".*.tmp")) and not (out / LOCK_NAME).exists()


def test_resume_and_overwrite_together_is_a_usage_error(flights, tmp_path, capsys) -> None:
    assert main(train_args(flights, tmp_path / "x", "--resume", "--overwrite")) == 2
    assert "contradict" in capsys.readouterr().err


def test_a_second_writer_fails_at_once(flights, tmp_path) -> None:
    """Two `velobins train` into one --out: the one that finds the lock held exits 2 at once."""
    out = tmp_path / "shared"
    first = subprocess.Popen(
        [sys.executable, "-m", "velobins_eval.cli", *train_args(flights, out, "--epochs", "3")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not (out / LOCK_NAME).exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        second = velobins(*train_args(flights, out))
        assert first.poll() is None, "the first writer should still hold the lock"
    finally:
        _out_first, err_first = first.communicate(timeout=300)
    assert second.returncode == 2, second.stderr
    assert "in use by velobins train (pid" in second.stderr and "Traceback" not in second.stderr
    assert first.returncode == 0, err_first
    assert read_checkpoint(out / "last.pt")["epoch"] == 2


def test_lock_is_exclusive_in_one_process_too(tmp_path) -> None:
    with RunLock(tmp_path, "train"):
        with pytest.raises(ValueError, match="in use by velobins train"):
            RunLock(tmp_path, "evaluate")
    RunLock(tmp_path, "evaluate").release()  # released: the next writer gets it


def test_ctrl_c_during_a_checkpoint_save_leaves_the_last_one_loadable(trained, tmp_path, monkeypatch) -> None:
    path = tmp_path / "last.pt"
    payload = read_checkpoint(trained / "last.pt")
    save_checkpoint(path, payload)
    before = path.read_bytes()

    def interrupted_save(obj, f, *a, **kw):
        f.write(b"half a checkpoint")
        raise KeyboardInterrupt

    monkeypatch.setattr(checkpoint_module.torch, "save", interrupted_save)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(path, payload | {"epoch": 99})
    assert path.read_bytes() == before
    assert read_checkpoint(path)["epoch"] == payload["epoch"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.pt"]


class _CreatesAFile:
    """What a malicious checkpoint would hold: unpickling it runs ``open(target, 'w')``."""

    def __init__(self, target: Path):
        self.target = target

    def __reduce__(self):
        return (open, (str(self.target), "w"))


def test_a_crafted_checkpoint_runs_no_code(flights, tmp_path) -> None:
    target = tmp_path / "pwned"
    evil = tmp_path / "evil.pt"
    torch.save({"format_version": 1, "model_state": _CreatesAFile(target)}, evil)
    with open(tmp_path / "check.pkl", "wb") as fh:  # the payload is live: plain pickle would run it
        pickle.dump(_CreatesAFile(tmp_path / "control"), fh)
    with open(tmp_path / "check.pkl", "rb") as fh:
        pickle.load(fh)
    assert (tmp_path / "control").exists()
    res = velobins(
        "evaluate", "--checkpoint", str(evil), "--dataset", "csv", "--data", str(flights), "--out", str(tmp_path / "r")
    )
    assert res.returncode == 2 and "evil.pt" in res.stderr and "Traceback" not in res.stderr
    assert not target.exists()


def test_non_finite_validation_is_not_reported_as_best(flights, tmp_path, monkeypatch, capsys) -> None:
    import velobins_net.train as train_module
    from velobins_net.train_steps import ValFigures

    nan = ValFigures(ave=float("inf"), nll=float("nan"), nees_median=float("nan"), nees_share=float("nan"))
    monkeypatch.setattr(train_module, "evaluate", lambda *a, **k: nan)
    out = tmp_path / "nan"
    assert main(train_args(flights, out)) == 1
    err = capsys.readouterr().err
    assert "no epoch gave a finite validation nll" in err and "best.pt was not written" in err
    assert not (out / "best.pt").exists() and (out / "last.pt").exists()
    history = json.loads((out / "history.json").read_text())  # strict JSON: no Infinity / NaN tokens
    assert history[0]["val_nll"] is None and history[0]["val_ave"] is None


@pytest.fixture(scope="module")
def old_report(flights: Path, trained: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real evaluate run, then an extra plot and an edited table inside the entries it owns."""
    out = tmp_path_factory.mktemp("old") / "report"
    args = ["evaluate", "--checkpoint", str(trained / "best.pt"), "--dataset", "csv", "--data", str(flights)]
    assert main([*args, "--out", str(out), "--no-imu-only"]) == 0
    (out / "plots" / "old_flight.png").write_bytes(b"old")
    (out / "metrics.md").write_text("old table")
    return out


def copy_of(run: Path, where: Path) -> Path:
    shutil.copytree(run, where)
    return where


def test_evaluate_refuses_an_old_report_and_overwrite_replaces_all_of_it(
    flights, trained, old_report, tmp_path, capsys
) -> None:
    out = copy_of(old_report, tmp_path / "report")
    (out / "notes.txt").write_text("mine")  # not the command's: never touched
    args = ["evaluate", "--checkpoint", str(trained / "best.pt"), "--dataset", "csv", "--data", str(flights)]
    before = snapshot(out)
    assert main([*args, "--out", str(out), "--no-imu-only"]) == 2
    err = capsys.readouterr().err
    assert "already holds an evaluate run" in err and "--overwrite" in err and "--resume" not in err
    assert snapshot(out) == before
    assert main([*args, "--out", str(out), "--no-imu-only", "--overwrite"]) == 0
    assert not (out / "plots" / "old_flight.png").exists()
    assert "old table" not in (out / "metrics.md").read_text()
    assert len(list((out / "plots").glob("*.png"))) == 3
    assert (out / "notes.txt").read_text() == "mine"
    assert [p.name for p in out.iterdir() if p.name.startswith(".")] == [MANIFEST_NAME]


def test_evaluate_checks_the_checkpoint_fits_the_flights(trained, tmp_path, capsys) -> None:
    rpm = tmp_path / "rpm"
    simulate_many("rpm", 1, 4.0, 5, rpm, workers=1, progress=False)
    out = tmp_path / "r"
    args = ["evaluate", "--checkpoint", str(trained / "best.pt"), "--dataset", "csv", "--data", str(rpm)]
    assert main([*args, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "best.pt" in err and "kind 'command'" in err and "kind 'speed'" in err and "sim_" in err
    assert not (out / "metrics.json").exists()


def test_evaluate_refuses_to_score_nothing(trained, tmp_path, capsys) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    out = tmp_path / "r"
    args = ["evaluate", "--checkpoint", str(trained / "best.pt"), "--dataset", "csv", "--data", str(empty)]
    assert main([*args, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "empty" in err and "Traceback" not in err
    assert not (out / "metrics.md").exists()


def test_progress_bars_stay_out_of_logs(flights, tmp_path) -> None:
    """Under a pipe (CI, `> log`) training prints its epoch lines and no bar frames."""
    res = velobins(*[a for a in train_args(flights, tmp_path / "log2", "--epochs", "2") if a != "--no-progress"])
    assert res.returncode == 0, res.stderr
    assert "\r" not in res.stderr and "\r" not in res.stdout
    assert "epoch 1/2:" in res.stdout and "epoch 2/2:" in res.stdout


def test_a_failed_evaluate_overwrite_keeps_the_earlier_report(
    flights, trained, old_report, tmp_path, monkeypatch, capsys
) -> None:
    import velobins_eval.evaluate as evaluate_module

    out = copy_of(old_report, tmp_path / "report")
    before = snapshot(out)
    names = sorted(p.name for p in out.iterdir())

    def fails(*args, **kwargs):
        raise UserError("flight.csv: the filter failed")

    monkeypatch.setattr(evaluate_module, "fuse_flight", fails)
    args = ["evaluate", "--checkpoint", str(trained / "best.pt"), "--dataset", "csv", "--data", str(flights)]
    assert main([*args, "--out", str(out), "--no-imu-only", "--overwrite"]) == 2
    assert "the filter failed" in capsys.readouterr().err
    assert snapshot(out) == before
    assert sorted(p.name for p in out.iterdir()) == names
