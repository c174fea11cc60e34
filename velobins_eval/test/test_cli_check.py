"""``velobins check``, the dataset doctor: one table row per flight, verdicts and exit statuses."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from fixtures_datasets import G, circle_flight, write_flight

from velobins_eval.cli import main as velobins_main
from velobins_eval.cli.check import main_check


def _good_folder(root: Path, n: int = 3) -> Path:
    root.mkdir()
    for i in range(n):
        write_flight(root / f"good_{i}.csv", circle_flight(seed=i))
    return root


def _rows(out: str) -> dict[str, list[str]]:
    """Table rows by flight name (first cell), split on runs of two or more spaces."""
    import re

    lines = out.splitlines()
    return {cells[0]: cells for line in lines[1:] if line and (cells := re.split(r"\s{2,}", line.strip()))}


def test_good_folder_exits_0_with_a_row_per_flight(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = _good_folder(tmp_path / "flights")
    assert main_check(["--dataset", "csv", "--data", str(data)]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines()[0].startswith("flight") and "median |f| [m/s²]" in out and "verdict" in out
    rows = _rows(out)
    for i in range(3):
        cells = rows[f"good_{i}.csv"]
        assert cells[1] == "6.0" and cells[2] == "100" and cells[-1] == "ok", cells
    assert "3 flight(s): 3 ok" in out
    assert err == ""  # no progress bar off a terminal


def test_one_bad_flight_fails_the_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = _good_folder(tmp_path / "flights", n=2)
    bad = circle_flight()
    bad["acc"] /= G
    write_flight(data / "bad_in_g.csv", bad)
    write_flight(data / "short.csv", circle_flight(seconds=0.5))
    (data / "broken.csv").write_text("t,acc_x\n1,2\n")
    json_path = tmp_path / "report.json"
    assert main_check(["--dataset", "csv", "--data", str(data), "--json", str(json_path)]) == 1
    out = capsys.readouterr().out
    rows = _rows(out)
    assert rows["bad_in_g.csv"][-2] == "FAIL"
    assert "specific_force (acc): median |f| = 1.0" in rows["bad_in_g.csv"][-1]
    assert "accelerometer in g?" in rows["bad_in_g.csv"][-1] and "gravity_residual" in rows["bad_in_g.csv"][-1]
    assert rows["short.csv"][-2] == "skip" and "too short" in rows["short.csv"][-1]
    assert rows["broken.csv"][-2] == "FAIL" and "rotor columns" in rows["broken.csv"][-1]  # the adapter's message
    assert rows["good_0.csv"][-1] == "ok" and rows["good_1.csv"][-1] == "ok"
    assert "5 flight(s): 2 ok, 1 skip, 2 FAIL" in out and "--allow NAME" in out
    doc = json.loads(json_path.read_text())
    verdicts = {f["flight"]: f["verdict"] for f in doc["flights"]}
    assert verdicts == {
        "bad_in_g.csv": "FAIL",
        "broken.csv": "FAIL",
        "good_0.csv": "ok",
        "good_1.csv": "ok",
        "short.csv": "skip",
    }
    inspected = next(f for f in doc["flights"] if f["flight"] == "bad_in_g.csv")["inspection"]
    assert inspected["findings"][0]["check"] == "specific_force" and doc["summary"]["FAIL"] == 2


def test_allow_turns_a_failure_into_allowed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = circle_flight()
    bad["acc"] /= G
    path = write_flight(tmp_path / "in_g.csv", bad)
    argv = ["--dataset", "csv", "--data", str(path), "--allow", "specific_force", "--allow", "gravity_residual"]
    assert main_check(argv) == 0
    row = _rows(capsys.readouterr().out)["in_g.csv"]
    assert row[-2] == "allowed" and "specific_force" in row[-1]


def _one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    out, err = capsys.readouterr()
    assert out == "" and "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


def test_usage_errors_exit_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "empty").mkdir()
    assert main_check(["--dataset", "csv", "--data", str(tmp_path / "empty")]) == 2
    line = _one_error_line(capsys)
    assert line.startswith("velobins check: error:") and "empty" in line and "no csv flight files" in line
    assert main_check(["--dataset", "csv", "--data", str(tmp_path / "missing")]) == 2
    assert "missing: no such file" in _one_error_line(capsys)
    assert main_check(["--dataset", "euroc", "--data", str(tmp_path)]) == 2
    assert "invalid choice: 'euroc'" in _one_error_line(capsys)
    assert main_check(["--dataset", "csv", "--data", str(tmp_path), "--allow", "bogus"]) == 2
    assert "valid names: stamps" in _one_error_line(capsys)


def test_delegated_from_the_velobins_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_flight(tmp_path / "one.csv")
    assert velobins_main(["check", "--dataset", "csv", "--data", str(path)]) == 0
    assert "1 flight(s): 1 ok" in capsys.readouterr().out
    assert velobins_main(["check", "--dataset", "csv", "--data", str(tmp_path / "nope")]) == 2
