"""`velobins convert` and `velobins simulate` never lose a user's files or leave half an output (issue 13).

convert: a stamp that does not fit a ROS time is a one-line error naming the flight, ``t`` and the
row; an existing ``--output`` is refused without ``--overwrite`` and replaced with it only once
the new bag is complete; a failure or Ctrl-C leaves nothing at ``--output`` and no temporary file.
simulate: a folder holding simulated flights is refused without ``--overwrite``; a locked folder
fails at once; a failed or interrupted run removes the flights it wrote.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
import fixtures_datasets as fx

from velobins_common.outputs import LOCK_NAME, RunLock
from velobins_common.outputs import MANIFEST_NAME as RUN_MANIFEST
from velobins_data import bag
from velobins_data.datasets import read_csv, write_csv
from velobins_data.flight import Flight
from velobins_data.sim import batch
from velobins_data.sim.flight import SimulationError
from velobins_eval.cli import main


def snapshot(root: Path) -> dict[str, tuple[bytes, int]]:
    """Every file under ``root``: bytes and mtime, to prove nothing was modified."""
    return {str(p.relative_to(root)): (p.read_bytes(), p.stat().st_mtime_ns) for p in root.rglob("*") if p.is_file()}


def hidden(root: Path) -> list[str]:
    """Temporary and lock files (hidden names) anywhere under ``root``."""
    return sorted(str(p.relative_to(root)) for p in root.rglob(".*"))


def hover_seq(name: str = "hover", t0: float = 1000.0, n: int = 400) -> Flight:
    return fx.hover_flight(name, t0, n, platform="quad", dataset="unit", source=f"{name}.csv")


def flight_csv(folder: Path, name: str = "hover") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.csv"
    write_csv(hover_seq(name), path)
    return path


def convert(src: Path, out: Path, *extra: str) -> list[str]:
    return ["convert", "--dataset", "csv", "--input", str(src), "--output", str(out), *extra]


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    status = main(argv)
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err + captured.out
    return status, captured.err.strip()


def one_error_line(err: str) -> str:
    lines = err.splitlines()
    assert len(lines) == 1 and "error:" in lines[0], err
    return lines[0]


# ------------------------------------------------------------------------------ convert: stamps
@pytest.mark.parametrize(
    ("t_last", "t0", "row"),
    [(1e30, 1000.0, 399), (2.0**31 + 5.0, 1000.0, 399), (None, -5000.0, 0)],
    ids=["1e30", "past-int32", "negative"],
)
def test_write_bag_refuses_stamps_ros_cannot_hold(tmp_path: Path, t_last: float | None, t0: float, row: int) -> None:
    flight = hover_seq(t0=t0)
    if t_last is not None:
        t = flight.t.copy()
        t[-1] = t_last
        flight = Flight(**{**flight.__dict__, "t": t})
    with pytest.raises(bag.BagError) as err:
        bag.write_bag(flight, tmp_path / "b")
    message = str(err.value)
    assert "hover.csv" in message and "field 't'" in message and f"first bad row {row}" in message
    assert list(tmp_path.iterdir()) == []


def test_convert_of_a_1e30_stamp_is_one_line_and_leaves_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    flight = hover_seq("stamped")
    t = flight.t.copy()
    t[-1] = 1e30
    src = tmp_path / "in" / "stamped.csv"
    src.parent.mkdir()
    write_csv(Flight(**{**flight.__dict__, "t": t}), src)
    out = tmp_path / "new" / "deeper" / "bag"
    before = snapshot(tmp_path)
    status, err = run(convert(src, out), capsys)
    line = one_error_line(err)
    assert status == 2 and "stamped.csv" in line and "'t'" in line
    assert not (tmp_path / "new").exists()  # nor the parent folders it would have made
    assert snapshot(tmp_path) == before


# ------------------------------------------------------------------------------ convert: outputs
def test_convert_writes_a_complete_bag_with_final_names(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = flight_csv(tmp_path / "in")
    out = tmp_path / "bags" / "flight_bag"
    status, err = run(convert(src, out), capsys)
    assert status == 0, err
    assert sorted(p.name for p in out.iterdir()) == ["flight_bag.mcap", "metadata.yaml"]
    assert hidden(tmp_path) == []
    back = bag.read_bag(out)
    np.testing.assert_allclose(back.acc, read_csv(src).acc)


def test_convert_refuses_an_existing_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = flight_csv(tmp_path / "in")
    out = tmp_path / "bag"
    assert main(convert(src, out)) == 0
    capsys.readouterr()
    before = snapshot(tmp_path)
    status, err = run(convert(src, out), capsys)
    line = one_error_line(err)
    assert status == 2 and str(out) in line and "--overwrite" in line
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("what", ["a regular file", "a folder that is not a bag"])
def test_overwrite_never_replaces_what_is_not_a_bag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], what: str
) -> None:
    src = flight_csv(tmp_path / "in")
    out = tmp_path / "precious"
    if what == "a regular file":
        out.write_text("my notes\n")
    else:
        out.mkdir()
        (out / "thesis.tex").write_text("\\documentclass{article}\n")
    before = snapshot(tmp_path)
    status, err = run(convert(src, out, "--overwrite"), capsys)
    assert status == 2 and "precious" in one_error_line(err)
    assert snapshot(tmp_path) == before


def test_overwrite_replaces_the_old_bag_only_once_the_new_one_is_complete(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    old_src, new_src = flight_csv(tmp_path / "in", "old_flight"), flight_csv(tmp_path / "in", "new_flight")
    out = tmp_path / "bag"
    assert main(convert(old_src, out)) == 0
    capsys.readouterr()
    before = snapshot(tmp_path)

    # A damaged input with --overwrite: refused before anything is written; the old bag stays.
    broken = tmp_path / "in" / "broken.csv"
    broken.write_bytes(b"\x1f\x8b\x08 not text")
    status, err = run(convert(broken, out, "--overwrite"), capsys)
    assert status == 2 and "broken.csv" in one_error_line(err)
    broken.unlink()
    assert snapshot(tmp_path) == before

    # Ctrl-C half-way through the new bag: the old bag stays, byte for byte, and no temp is left.
    calls = {"n": 0}
    original = bag.Writer.write

    def interrupted(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 100:
            raise KeyboardInterrupt
        return original(self, *args, **kwargs)

    monkeypatch.setattr(bag.Writer, "write", interrupted)
    status = main(convert(new_src, out, "--overwrite"))
    capsys.readouterr()
    assert status == 130 and calls["n"] == 100
    assert snapshot(tmp_path) == before and hidden(tmp_path) == []
    monkeypatch.undo()

    status, err = run(convert(new_src, out, "--overwrite"), capsys)
    assert status == 0, err
    assert bag.read_bag(out).name == "new_flight"
    assert sorted(p.name for p in out.iterdir()) == ["bag.mcap", "metadata.yaml"] and hidden(tmp_path) == []


def test_ctrl_c_during_convert_leaves_nothing_at_output(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    src = flight_csv(tmp_path / "in")
    out = tmp_path / "bag"
    original = bag.Writer.write
    calls = {"n": 0}

    def interrupted(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 50:
            raise KeyboardInterrupt
        return original(self, *args, **kwargs)

    monkeypatch.setattr(bag.Writer, "write", interrupted)
    with pytest.raises(KeyboardInterrupt):
        bag.write_bag(hover_seq(), out)
    assert not out.exists() and hidden(tmp_path) == []
    calls["n"] = 0
    assert main(convert(src, out)) == 130
    assert not out.exists() and hidden(tmp_path) == []
    monkeypatch.undo()
    # ... so the next convert to the same output just works (no "output bag already exists").
    status, err = run(convert(src, out), capsys)
    assert status == 0, err


def test_convert_output_under_a_regular_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = flight_csv(tmp_path / "in")
    (tmp_path / "afile").write_text("not a folder\n")
    before = snapshot(tmp_path)
    status, err = run(convert(src, tmp_path / "afile" / "sub" / "bag"), capsys)
    assert status == 2 and "afile" in one_error_line(err)
    assert snapshot(tmp_path) == before


def test_convert_directory_as_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    flight_csv(tmp_path / "flights")
    status, err = run(convert(tmp_path / "flights", tmp_path / "bag"), capsys)
    line = one_error_line(err)
    assert status == 2 and "flights" in line and "is a directory; pass one flight file" in line
    assert not (tmp_path / "bag").exists()


def test_read_bag_names_a_damaged_bag(tmp_path: Path) -> None:
    out = tmp_path / "bag"
    bag.write_bag(hover_seq(), out)
    storage = out / "bag.mcap"
    data = storage.read_bytes()
    storage.write_bytes(data[: len(data) // 2])
    with pytest.raises(bag.BagError, match=r"bag.*(not a readable rosbag2|corrupt)"):
        bag.read_bag(out)
    with pytest.raises(bag.BagError, match="no such bag"):
        bag.read_bag(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(bag.BagError, match=r"no metadata\.yaml"):
        bag.read_bag(tmp_path / "empty")


# ------------------------------------------------------------------------------ simulate
SIM = ["--preset", "nano", "--flights", "2", "--seconds", "1", "--seed", "4", "--workers", "1"]


def simulate(out: Path, *extra: str) -> list[str]:
    return ["simulate", *SIM, "--out", str(out), *extra]


@pytest.fixture(scope="module")
def earlier_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding a finished simulate run (2 flights and the manifest)."""
    out = tmp_path_factory.mktemp("earlier") / "sim"
    assert main(simulate(out)) == 0
    return out


def copy_tree(src: Path, dst: Path) -> Path:
    import shutil

    shutil.copytree(src, dst)
    return dst


@pytest.mark.parametrize(
    "held",
    ["earlier flights", "only a gzipped flight", "only the manifest"],
)
def test_simulate_refuses_a_folder_holding_a_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], earlier_run: Path, held: str
) -> None:
    out = tmp_path / "sim"
    if held == "earlier flights":
        copy_tree(earlier_run, out)
        named = "sim_circle_000.csv"
    else:
        out.mkdir()
        named = "sim_star_041.csv.gz" if held == "only a gzipped flight" else batch.MANIFEST_NAME
        (out / named).write_text("an earlier run\n")
    (out / "notes.txt").write_text("mine\n")
    before = snapshot(tmp_path)
    status, err = run(simulate(out), capsys)
    line = one_error_line(err)
    assert status == 2 and str(out) in line and named in line
    # A run with a manifest may be replaced; files no manifest lists are never removed (issue 24).
    assert ("--overwrite" in line) if held == "earlier flights" else ("nothing was changed" in line)
    assert snapshot(tmp_path) == before


def test_simulate_overwrite_replaces_the_whole_earlier_set(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], earlier_run: Path
) -> None:
    out = copy_tree(earlier_run, tmp_path / "sim")
    status, err = run(simulate(out, "--flights", "3", "--overwrite"), capsys)  # an earlier, longer run
    assert status == 0, err
    assert (out / "sim_lemniscate_002.csv").exists()
    (out / "notes.txt").write_text("mine\n")
    notes = (out / "notes.txt").stat().st_mtime_ns
    status, err = run(simulate(out, "--overwrite"), capsys)
    assert status == 0, err
    names = sorted(p.name for p in out.iterdir())
    assert names == [RUN_MANIFEST, "notes.txt", "sim_circle_000.csv", "sim_figure8_001.csv", batch.MANIFEST_NAME]
    assert (out / "notes.txt").stat().st_mtime_ns == notes
    # Same plan, same seed: the flights are byte-identical to the earlier run's.
    assert (out / "sim_circle_000.csv").read_bytes() == (earlier_run / "sim_circle_000.csv").read_bytes()


def test_simulate_into_a_locked_folder_fails_at_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "sim"
    out.mkdir()
    with RunLock(out, "simulate"):
        before = snapshot(tmp_path)
        status, err = run(simulate(out), capsys)
        line = one_error_line(err)
        assert status == 2 and "in use by velobins simulate" in line
        assert snapshot(tmp_path) == before
    assert not (out / LOCK_NAME).exists()


@pytest.mark.parametrize("where", ["a regular file", "under a regular file"])
def test_simulate_out_that_cannot_be_a_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str], where: str) -> None:
    (tmp_path / "afile").write_text("mine\n")
    out = tmp_path / "afile" if where == "a regular file" else tmp_path / "afile" / "sim"
    before = snapshot(tmp_path)
    status, err = run(simulate(out), capsys)
    assert status == 2 and "afile" in one_error_line(err)
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("failure", ["ctrl-c", "diverged"])
def test_a_failed_simulate_removes_what_it_wrote(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, failure: str
) -> None:
    """The second flight fails (Ctrl-C while its CSV is half written, or a diverging flight)."""
    import velobins_data.datasets.csv_format as csv_format

    write_csv_real = csv_format.write_csv
    simulate_real = batch.simulate_flight

    def half_written(flight: Flight, path: Path) -> None:
        if flight.name.endswith("_001"):
            Path(path).write_text("t,acc_x\n0.0,")
            raise KeyboardInterrupt
        write_csv_real(flight, path)

    def diverging(preset, family, seconds, seed, index=0, noise=True):
        if index == 1:
            raise SimulationError(f"flight sim_{family}_{index:03d} diverged")
        return simulate_real(preset, family, seconds, seed, index=index, noise=noise)

    if failure == "ctrl-c":
        monkeypatch.setattr(csv_format, "write_csv", half_written)
    else:
        monkeypatch.setattr(batch, "simulate_flight", diverging)
    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / "notes.txt").write_text("mine\n")
    before = snapshot(tmp_path)
    status = main(simulate(kept))
    err = capsys.readouterr().err
    assert status == (130 if failure == "ctrl-c" else 1), err
    assert "Traceback" not in err
    assert snapshot(tmp_path) == before and hidden(tmp_path) == []
    # A folder the failed run created itself is removed too.
    status = main(simulate(tmp_path / "fresh"))
    capsys.readouterr()
    assert not (tmp_path / "fresh").exists()


def test_simulate_refusal_through_the_real_command_line(earlier_run: Path, tmp_path: Path) -> None:
    out = copy_tree(earlier_run, tmp_path / "sim")
    before = snapshot(tmp_path)
    proc = subprocess.run(
        [sys.executable, "-m", "velobins_eval.cli", *simulate(out)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "sim_circle_000.csv" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert snapshot(tmp_path) == before
