"""Damaged and mistaken inputs, as a new user would feed them to the `velobins` command line.

One table: each case builds its input from a good simulated flight (or a tiny trained
checkpoint), runs the real command line in-process, and asserts the exit status, that the
one-line error names the file (and field/row where it applies), that no traceback was printed,
and that nothing that existed before the command was modified (issue 13).
"""

from __future__ import annotations

import gzip
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch

from velobins_data.sim.batch import simulate_many
from velobins_eval.cli import main

TINY = ("--members", "1", "--epochs", "1", "--stride", "25", "--val-stride", "25", "--bins", "32", "--batch-size", "64")


@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Three good simulated flights, one RPM-kind flight, and a tiny checkpoint trained on the first."""
    root = tmp_path_factory.mktemp("good")
    simulate_many("nano", 3, 6.0, 21, root / "flights", workers=1, progress=False)
    simulate_many("rpm", 1, 5.0, 22, root / "rpm", workers=1, progress=False)
    run = root / "run"
    args = ["train", "--dataset", "csv", "--data", str(root / "flights"), *TINY, "--no-progress", "--out", str(run)]
    assert main(args) == 0
    flights = sorted((root / "flights").glob("*.csv"))
    return {"flights": root / "flights", "flight": flights[0], "rpm": root / "rpm", "ckpt": run / "best.pt"}


def read_flight_csv(path: Path) -> tuple[list[str], list[str], np.ndarray]:
    lines = path.read_text().splitlines()
    comments = [ln for ln in lines if ln.startswith("#")]
    header_index = len(comments)
    header = lines[header_index].split(",")
    data = np.array([[float(x) for x in ln.split(",")] for ln in lines[header_index + 1 :]])
    return comments, header, data


def write_flight_csv(path: Path, comments: list[str], header: list[str], data: np.ndarray) -> Path:
    body = "\n".join(",".join(repr(float(x)) for x in row) for row in data)
    path.write_text("\n".join([*comments, ",".join(header)]) + "\n" + body + "\n")
    return path


def mutated(src: Path, dst: Path, change: Callable[[list[str], np.ndarray], tuple[list[str], np.ndarray]]) -> Path:
    comments, header, data = read_flight_csv(src)
    header, data = change(list(header), data.copy())
    dst.parent.mkdir(parents=True, exist_ok=True)
    return write_flight_csv(dst, comments, header, data)


def scale_acc(header: list[str], data: np.ndarray) -> tuple[list[str], np.ndarray]:
    for axis in "xyz":
        data[:, header.index(f"acc_{axis}")] /= 9.80665
    return header, data


def swap_headers(a: str, b: str):
    def change(header: list[str], data: np.ndarray):
        i, j = header.index(a), header.index(b)
        header[i], header[j] = header[j], header[i]
        return header, data

    return change


def set_value(column: str, row: int, value: float):
    def change(header: list[str], data: np.ndarray):
        data[row, header.index(column)] = value
        return header, data

    return change


@dataclass
class Case:
    """A bad input: ``build(tmp, good)`` returns the argv; the error must name ``names`` (all of them)."""

    name: str
    build: Callable[[Path, dict[str, Path]], list[str]]
    names: tuple[str, ...]
    status: int = 2


def evaluate_on(data: Path, tmp: Path, good: dict[str, Path], *extra: str) -> list[str]:
    out = tmp / "report"
    return ["evaluate", "--checkpoint", str(good["ckpt"]), "--dataset", "csv", "--data", str(data), "--out", str(out)]


def one_flight(tmp: Path, good: dict[str, Path], change) -> Path:
    folder = tmp / "data"
    mutated(good["flight"], folder / "bad_flight.csv", change)
    return folder


def truncated_gz(tmp: Path, good: dict[str, Path]) -> list[str]:
    folder = tmp / "data"
    folder.mkdir()
    for flight in sorted(good["flights"].glob("*.csv"))[1:]:
        shutil.copy(flight, folder / flight.name)
    data = gzip.compress(good["flight"].read_bytes())
    (folder / "broken_flight.csv.gz").write_bytes(data[: len(data) // 2])
    return evaluate_on(folder, tmp, good)


def crafted_checkpoint(tmp: Path, good: dict[str, Path]) -> list[str]:
    class Payload:
        def __reduce__(self):
            return (shutil.rmtree, (str(good["flights"]),))

    torch.save({"format_version": 1, "model_state": Payload()}, tmp / "crafted.pt")
    return ["evaluate", "--checkpoint", str(tmp / "crafted.pt"), "--dataset", "csv", "--data", str(good["flights"]),
            "--out", str(tmp / "report")]  # fmt: skip


def params_file(text: str):
    def build(tmp: Path, good: dict[str, Path]) -> list[str]:
        (tmp / "filter.yaml").write_text(text)
        return [*evaluate_on(good["flights"], tmp, good), "--params", str(tmp / "filter.yaml")]

    return build


def existing(kind: str):
    """An output that already holds a run of ``kind``."""

    def build(tmp: Path, good: dict[str, Path]) -> list[str]:
        out = tmp / "out"
        out.mkdir()
        if kind == "train":
            (out / "last.pt").write_bytes(b"an earlier run")
            return ["train", "--dataset", "csv", "--data", str(good["flights"]), *TINY, "--out", str(out)]
        if kind == "simulate":
            shutil.copy(good["flight"], out / good["flight"].name)
            return ["simulate", "--flights", "1", "--seconds", "3", "--workers", "1", "--out", str(out)]
        if kind == "convert":
            (out / "metadata.yaml").write_text("an earlier bag")
            return ["convert", "--dataset", "csv", "--input", str(good["flight"]), "--output", str(out)]
        (out / "metrics.md").write_text("an earlier report")
        return [*evaluate_on(good["flights"], tmp, good)[:-1], str(out)]

    return build


CASES = [
    # 1. a finished run is lost
    Case("train into an earlier run", existing("train"), ("out", "last.pt", "--resume")),
    Case("evaluate into an earlier report", existing("evaluate"), ("out", "metrics.md")),
    Case("simulate into earlier flights", existing("simulate"), ("out", "sim_")),
    Case("convert onto an earlier bag", existing("convert"), ("out",)),
    # 2. silent wrong results
    Case("accelerometer in g", lambda t, g: evaluate_on(one_flight(t, g, scale_acc), t, g), ("bad_flight.csv", "in g")),
    Case(
        "acc_z and gyro_z headers swapped",
        lambda t, g: evaluate_on(one_flight(t, g, swap_headers("acc_z", "gyro_z")), t, g),
        ("bad_flight.csv",),
    ),
    Case(
        "one acc_x row of 1e30",
        lambda t, g: evaluate_on(one_flight(t, g, set_value("acc_x", 123, 1e30)), t, g),
        ("bad_flight.csv", "acc", "123"),
    ),
    Case(
        "ground-truth v of 1e30",
        lambda t, g: evaluate_on(one_flight(t, g, set_value("v_y", 77, 1e30)), t, g),
        ("bad_flight.csv", "'v'", "77"),
    ),
    Case(
        "ground-truth p of 1e30",
        lambda t, g: evaluate_on(one_flight(t, g, set_value("p_z", 50, 1e30)), t, g),
        ("bad_flight.csv", "'p'", "50"),
    ),
    Case("command model, speed flights", lambda t, g: evaluate_on(g["rpm"], t, g), ("best.pt", "'command'", "'speed'")),
    # 4. empty reports
    Case("evaluate an empty directory", lambda t, g: evaluate_on((t / "empty").resolve(), t, g), ("empty",)),
    Case(
        "evaluate flights too short to score",
        lambda t, g: evaluate_on(one_flight(t, g, lambda h, d: (h, d[:80])), t, g),
        ("data", "bad_flight.csv"),
    ),
    Case(
        "wrong --dataset kind",
        lambda t, g: [*evaluate_on(g["flights"], t, g)[:4], "nanobench", *evaluate_on(g["flights"], t, g)[5:]],
        ("flights",),
    ),
    # 5. errors that name no file
    Case("truncated .csv.gz in a folder", truncated_gz, ("broken_flight.csv.gz",)),
    Case("broken --params YAML", params_file("velobins_ekf: [unclosed\n"), ("filter.yaml",)),
    Case(
        "--params value of the wrong type",
        params_file("velobins_ekf:\n  ros__parameters:\n    filter:\n      acc_noise_density: high\n"),
        ("filter.yaml", "acc_noise_density"),
    ),
    Case(
        "output path under a regular file",
        lambda t, g: [*evaluate_on(g["flights"], t, g)[:-1], str(t / "afile" / "report")],
        ("afile",),
    ),
    Case(
        "a directory as --input",
        lambda t, g: ["convert", "--dataset", "csv", "--input", str(g["flights"]), "--output", str(t / "bag")],
        ("flights",),
    ),
    Case(
        "a stamp of 1e30 in convert",
        lambda t, g: [
            "convert",
            "--dataset",
            "csv",
            "--input",
            str(one_flight(t, g, set_value("t", 200, 1e30)) / "bad_flight.csv"),
            "--output",
            str(t / "bag"),
        ],
        ("bad_flight.csv", "'t'"),
    ),
    Case(
        "missing checkpoint",
        lambda t, g: ["evaluate", "--checkpoint", str(t / "nope.pt"), *evaluate_on(g["flights"], t, g)[3:]],
        ("nope.pt",),
    ),
    Case(
        "garbage checkpoint",
        lambda t, g: [
            (t / "junk.pt").write_bytes(b"not a checkpoint") and "evaluate",
            "--checkpoint",
            str(t / "junk.pt"),
            *evaluate_on(g["flights"], t, g)[3:],
        ],
        ("junk.pt",),
    ),
    # 7. security
    Case("crafted checkpoint", crafted_checkpoint, ("crafted.pt",)),
    # more
    Case(
        "--val-fraction outside (0, 1)",
        lambda t, g: [
            "train",
            "--dataset",
            "csv",
            "--data",
            str(g["flights"]),
            "--val-fraction",
            "1.5",
            "--out",
            str(t / "run"),
        ],
        ("--val-fraction",),
    ),
    Case(
        "--data that does not exist",
        lambda t, g: evaluate_on(t / "no_such_dir", t, g),
        ("no_such_dir",),
    ),
]


def _prepare(tmp: Path) -> None:
    (tmp / "empty").mkdir()
    (tmp / "afile").write_text("a regular file")


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input_fails_with_one_line_naming_the_file(case: Case, good, tmp_path, capsys) -> None:
    _prepare(tmp_path)
    argv = case.build(tmp_path, good)
    before_tmp = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    before_good = {p: p.read_bytes() for p in good["flights"].parent.rglob("*") if p.is_file()}
    status = main(argv)
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert status == case.status, f"{case.name}: exit {status}, stderr: {err}"
    assert "Traceback" not in captured.err and "Traceback" not in captured.out
    error_lines = [ln for ln in err.splitlines() if "error:" in ln]
    assert len(error_lines) == 1, f"{case.name}: expected one error line, got: {err}"
    for name in case.names:
        assert name in error_lines[0], f"{case.name}: {name!r} not in {error_lines[0]!r}"
    after_tmp = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file() and p in before_tmp}
    assert after_tmp == {p: b for p, b in before_tmp.items() if p in after_tmp}
    assert set(before_tmp) <= {p for p in tmp_path.rglob("*") if p.is_file()}, "a pre-existing file was removed"
    assert before_good == {p: p.read_bytes() for p in good["flights"].parent.rglob("*") if p.is_file()}
    leftovers = [p for p in tmp_path.rglob("*") if p.name.endswith(".tmp") or p.name == ".velobins.lock"]
    assert not leftovers, f"{case.name}: left behind {leftovers}"
