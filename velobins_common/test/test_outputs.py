"""velobins_common.outputs: atomic writes, the run lock, run directories recognised by their manifest and
replaced only once the new run is complete (issue 24), stale temp files."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from velobins_common.outputs import (
    LOCK_NAME,
    MANIFEST_NAME,
    OutputError,
    RunLayout,
    RunLock,
    atomic_path,
    atomic_write_text,
    open_run_dir,
    output_mode,
    read_manifest,
    remove_stale_temp_files,
    temp_path,
)

LAYOUT = RunLayout("evaluate", ("metrics.json", "config.json", "plots"), resumable=False)
TRAIN = RunLayout("train", ("best.pt", "last.pt"))


def snapshot(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def make_run(directory: Path, layout: RunLayout = LAYOUT, text: str = "old") -> None:
    with open_run_dir(directory, layout) as run:
        for name in layout.patterns:
            if name == "plots":
                (run.path / name).mkdir()
                (run.path / name / "a.png").write_text(text)
            else:
                (run.path / name).write_text(text)
        run.commit()


def test_a_run_is_recognised_by_its_manifest_not_by_file_names(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "config.json").write_text("the user's own")
    (out / "plots").mkdir()
    (out / "plots" / "figure1.png").write_bytes(b"the user's figure")
    before = snapshot(out)
    for mode in ("new", "overwrite"):  # never treated as a run: refused, nothing removed
        with pytest.raises(
            OutputError, match=r"config\.json, plots, which velobins evaluate writes.*nothing was changed"
        ):
            open_run_dir(out, LAYOUT, mode)
        assert snapshot(out) == before and not (out / LOCK_NAME).exists()


def test_overwrite_is_staged_and_replaces_only_what_the_manifest_lists(tmp_path: Path) -> None:
    out = tmp_path / "out"
    make_run(out)
    (out / "notes.txt").write_text("mine")
    with pytest.raises(OutputError, match=r"already holds an evaluate run .*--overwrite") as err:
        open_run_dir(out, LAYOUT)
    assert "--resume" not in str(err.value)
    before = snapshot(out)
    with open_run_dir(out, LAYOUT, "overwrite") as run:
        assert run.path != out and run.path.parent == out  # staged beside the old run, inside the folder
        (run.path / "metrics.json").write_text("new")
        during = {k: v for k, v in snapshot(out).items() if k != LOCK_NAME}
        assert during == before | {f"{run.path.name}/metrics.json": b"new"}
        run.commit()
    assert (out / "metrics.json").read_text() == "new"
    assert not (out / "config.json").exists() and not (out / "plots").exists()  # the old run went whole
    assert (out / "notes.txt").read_text() == "mine"
    assert sorted(p.name for p in out.iterdir()) == [MANIFEST_NAME, "metrics.json", "notes.txt"]
    assert read_manifest(out)["files"] == ["config.json", "metrics.json", "plots"]  # fixed names it will write


def test_a_failed_or_interrupted_overwrite_leaves_the_old_run_byte_identical(tmp_path: Path) -> None:
    out = tmp_path / "out"
    make_run(out)
    before = snapshot(out)
    for error in (OSError("disk full"), KeyboardInterrupt()):
        with pytest.raises(type(error)), open_run_dir(out, LAYOUT, "overwrite") as run:
            (run.path / "metrics.json").write_text("half")
            raise error
        assert snapshot(out) == before
        assert sorted(p.name for p in out.iterdir()) == sorted([MANIFEST_NAME, "config.json", "metrics.json", "plots"])


def test_ctrl_c_during_a_commit_waits_for_the_commit(tmp_path: Path) -> None:
    out = tmp_path / "out"
    make_run(out)
    with pytest.raises(KeyboardInterrupt), open_run_dir(out, LAYOUT, "overwrite") as run:
        (run.path / "metrics.json").write_text("new")
        os.kill(os.getpid(), signal.SIGINT)  # delivered in the middle of nothing: raised now
    assert (out / "metrics.json").read_text() == "old"
    with open_run_dir(out, LAYOUT, "overwrite") as run:
        (run.path / "metrics.json").write_text("new")
        real_replace = os.replace
        calls = []

        def replace_then_interrupt(src, dst):
            real_replace(src, dst)
            if not calls:
                calls.append(dst)
                os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C after the first entry moved

        os.replace = replace_then_interrupt
        try:
            with pytest.raises(KeyboardInterrupt):
                run.commit()
        finally:
            os.replace = real_replace
    assert (out / "metrics.json").read_text() == "new" and not (out / "plots").exists()  # all of the commit
    assert read_manifest(out)["command"] == "evaluate"


def test_resume_adopts_an_older_run_and_other_commands_runs_are_refused(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "last.pt").write_text("a run of a version before manifests")
    with pytest.raises(OutputError, match="--resume continues it"):
        open_run_dir(out, TRAIN, "overwrite")
    with open_run_dir(out, TRAIN, "resume") as run:
        assert run.path == out
    assert read_manifest(out)["files"] == ["best.pt", "last.pt"] and read_manifest(out)["command"] == "train"
    for mode in ("new", "resume", "overwrite"):
        with pytest.raises(OutputError, match=r"holds a train run .* choose another output for evaluate"):
            open_run_dir(out, LAYOUT, mode)
    (out / MANIFEST_NAME).write_text("[1, 2]")
    with pytest.raises(OutputError, match="not a run manifest"):
        open_run_dir(out, TRAIN, "resume")


def test_a_new_run_leaves_nothing_when_it_fails_and_its_manifest_when_it_commits(tmp_path: Path) -> None:
    out = tmp_path / "a" / "b"
    with pytest.raises(RuntimeError), open_run_dir(out, LAYOUT) as run:
        (run.path / "metrics.json").write_text("x")
        raise RuntimeError("a bug")
    assert not (tmp_path / "a").exists()  # the folders this run made went too
    with open_run_dir(out, LAYOUT) as run:
        atomic_write_text(run.path / "metrics.json", "{}")
        run.commit()
    doc = json.loads((out / MANIFEST_NAME).read_text())
    assert doc["command"] == "evaluate" and doc["format"] == 1 and "metrics.json" in doc["files"]


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda p: p.symlink_to(p.parent / "gone"), "dangling symbolic link"),
        (lambda p: p.write_text("x"), "exists and is not a directory"),
        (lambda p: (p.parent / "file").write_text("x"), "is a file, not a folder"),
    ],
)
def test_unusable_output_folders_are_named(tmp_path: Path, make, expected: str) -> None:
    out = tmp_path / "out"
    make(out)
    target = tmp_path / "file" / "out" if "file, not" in expected else out
    with pytest.raises(OutputError, match=expected):
        open_run_dir(target, LAYOUT)


def test_resume_and_overwrite_contradict() -> None:
    with pytest.raises(ValueError, match="--resume and --overwrite: contradict"):
        output_mode(resume=True, overwrite=True)


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


def test_modes_are_checked() -> None:
    with pytest.raises(ValueError, match="output mode"):
        open_run_dir(Path("/nonexistent/o"), RunLayout("evaluate", ("metrics.json",)), "append")
    assert (output_mode(), output_mode(resume=True), output_mode(overwrite=True)) == ("new", "resume", "overwrite")
