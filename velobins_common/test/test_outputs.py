"""velobins_common.outputs: atomic writes, the run lock, run directories and their modes, stale temp files."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from velobins_common.outputs import (
    LOCK_NAME,
    OutputError,
    RunLayout,
    RunLock,
    atomic_path,
    atomic_write_text,
    open_run_dir,
    output_mode,
    remove_stale_temp_files,
    temp_path,
)

LAYOUT = RunLayout("evaluate", ("metrics.json", "plots"))


def test_an_interrupted_write_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    target = atomic_write_text(tmp_path / "metrics.json", "old")
    with pytest.raises(KeyboardInterrupt), atomic_path(target) as tmp:
        tmp.write_text("half of the new")
        raise KeyboardInterrupt
    assert target.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["metrics.json"]
    atomic_write_text(target, "new")
    assert target.read_text() == "new" and len(list(tmp_path.iterdir())) == 1


def test_a_directory_is_replaced_only_once_the_new_one_is_complete(tmp_path: Path) -> None:
    bag = tmp_path / "bag"
    bag.mkdir()
    (bag / "old.mcap").write_text("old")
    with pytest.raises(RuntimeError), atomic_path(bag, directory=True) as tmp:
        tmp.mkdir()
        (tmp / "new.mcap").write_text("partial")
        raise RuntimeError("writer failed")
    assert [p.name for p in bag.iterdir()] == ["old.mcap"] and [p.name for p in tmp_path.iterdir()] == ["bag"]
    with atomic_path(bag, directory=True) as tmp:
        tmp.mkdir()
        (tmp / "new.mcap").write_text("complete")
    assert [p.name for p in bag.iterdir()] == ["new.mcap"] and [p.name for p in tmp_path.iterdir()] == ["bag"]


def test_temporary_names_are_hidden_and_unique_per_call(tmp_path: Path) -> None:
    a, b = temp_path(tmp_path / "x.pt"), temp_path(tmp_path / "x.pt")
    assert a != b and a.name.startswith(".x.pt.") and a.name.endswith(".tmp") and f".{os.getpid()}." in a.name


def test_a_second_writer_is_refused_naming_the_holder(tmp_path: Path) -> None:
    with RunLock(tmp_path, "train"):
        assert (tmp_path / LOCK_NAME).read_text() == f"velobins train (pid {os.getpid()})\n"
        with pytest.raises(OutputError, match=rf"in use by velobins train \(pid {os.getpid()}\)"):
            RunLock(tmp_path, "evaluate")
    assert not (tmp_path / LOCK_NAME).exists()
    RunLock(tmp_path, "evaluate").release()  # free again once released


def test_new_refuses_a_run_resume_keeps_it_overwrite_replaces_only_what_the_command_owns(tmp_path: Path) -> None:
    out = tmp_path / "out"
    open_run_dir(out, LAYOUT).release()  # created on the way
    (out / "metrics.json").write_text("{}")
    (out / "plots").mkdir()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(OutputError, match=r"already holds a evaluate run \(metrics.json, plots\); pass --resume"):
        open_run_dir(out, LAYOUT, "new")
    assert not (out / LOCK_NAME).exists(), "a refused start holds no lock"
    open_run_dir(out, LAYOUT, "resume").release()
    assert (out / "metrics.json").exists()
    open_run_dir(out, LAYOUT, "overwrite").release()
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]
    once = RunLayout("simulate", ("*.csv",), resumable=False)
    (out / "f.csv").write_text("t\n")
    with pytest.raises(OutputError, match=r"pass --overwrite to replace it") as err:
        open_run_dir(out, once)
    assert "--resume" not in str(err.value)


def test_unusable_output_paths_are_one_error_naming_them(tmp_path: Path) -> None:
    afile = tmp_path / "file"
    afile.write_text("x")
    with pytest.raises(OutputError, match="exists and is not a directory"):
        open_run_dir(afile, LAYOUT)
    with pytest.raises(OutputError, match="a parent is a regular file"):
        open_run_dir(afile / "out", LAYOUT)
    with pytest.raises(ValueError, match="output mode"):
        open_run_dir(tmp_path / "o", LAYOUT, "append")
    assert (output_mode(), output_mode(resume=True), output_mode(overwrite=True)) == ("new", "resume", "overwrite")
    with pytest.raises(ValueError, match="contradict"):
        output_mode(resume=True, overwrite=True)


def test_only_the_temporary_files_of_dead_writers_are_removed(tmp_path: Path) -> None:
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = int(child.stdout)
    stale = tmp_path / f".best.pt.{dead}.0badc0de.tmp"
    mine = temp_path(tmp_path / "best.pt")
    other = tmp_path / ".hidden.tmp"  # not a VeloBins temporary name: not ours to remove
    for p in (stale, mine, other):
        p.write_text("x")
    assert remove_stale_temp_files(tmp_path) == [stale.name]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([mine.name, other.name])
