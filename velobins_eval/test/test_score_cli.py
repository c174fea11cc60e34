"""``velobins score``: files written by ``velobins evaluate`` scored again give evaluate's row; bags and TUM
ground truth are read; ``evaluate --dataset rosbag`` reads the project's own bags; user errors are one line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from velobins_eval.cli import main
from velobins_eval.demo import DEMO_DATA
from velobins_eval.metrics import EXTRA_KEYS, PAPER_KEYS

FLIGHT = "B2_circle_fast_rep1"
FLIGHT_FILE = DEMO_DATA / f"{FLIGHT}.csv.gz"
POSE_KEYS = ("rte", "ate", "ate_yaw", "ate_se3", "rot_rms", "yaw_final")
"""The columns a TUM trajectory (poses only) carries."""


def _row(report: Path, method: str) -> dict:
    return json.loads((report / "metrics.json").read_text())[method]["flights"][FLIGHT]


def _estimates(report: Path, method: str) -> Path:
    return report / json.loads((report / "config.json").read_text())["estimates"][method][FLIGHT]


def test_score_on_evaluates_files_reproduces_its_row(demo_evaluation: Path, tmp_path: Path) -> None:
    """The acceptance of issue 25: the TUM gives evaluate's pose columns exactly, updates.csv the whole row."""
    files = _estimates(demo_evaluation, "G+H^B")
    out = tmp_path / "score"
    argv = ["score", "--estimate", str(files / "estimate.tum"), "--estimate", str(files / "updates.csv")]
    argv += ["--label", "from TUM", "--label", "from CSV", "--gt", str(FLIGHT_FILE), "--gt-format", "nanobench"]
    assert main([*argv, "--out", str(out)]) == 0
    want = _row(demo_evaluation, "G+H^B")
    assert _row(out, "from CSV") == want  # every key, to the stored digit
    tum = _row(out, "from TUM")
    assert {k: tum[k] for k in POSE_KEYS} == {k: want[k] for k in POSE_KEYS}
    assert all(tum[k] is None for k in PAPER_KEYS + EXTRA_KEYS if k not in POSE_KEYS)  # no velocity in a TUM
    for name in ("report.md", "report.html", "metrics.md"):
        assert (out / name).is_file(), name
    config = json.loads((out / "config.json").read_text())
    assert config["inputs"]["from TUM"]["format"] == "tum" and config["inputs"]["from CSV"]["dropped"] == 0
    assert (out / "estimates" / FLIGHT / "from_TUM" / "estimate.tum").is_file()
    assert main([*argv, "--out", str(out)]) == 2  # an earlier report is kept unless --overwrite


def test_ground_truth_from_a_bag_and_from_tum(demo_evaluation: Path, tmp_path: Path) -> None:
    from velobins_data.bag import write_bag
    from velobins_data.datasets import load_flight
    from velobins_eval.estimates import write_tum

    seq = load_flight("nanobench", FLIGHT_FILE)
    write_bag(seq, tmp_path / "bag")
    write_tum(tmp_path / "gt.tum", seq.t, seq.p, seq.q)
    estimate = _estimates(demo_evaluation, "reg") / "estimate.tum"
    want = _row(demo_evaluation, "reg")
    for gt, fmt in ((tmp_path / "bag", "rosbag"), (tmp_path / "gt.tum", "tum")):
        out = tmp_path / f"score-{fmt}"
        argv = ["score", "--estimate", str(estimate), "--label", "reg", "--gt", str(gt), "--gt-format", fmt]
        assert main([*argv, "--flight", FLIGHT, "--out", str(out), "--no-mcap"]) == 0
        got = _row(out, "reg")
        for key in POSE_KEYS:  # the bag stores stamps in ns: the ground truth moves by < 1 µs
            assert got[key] == pytest.approx(want[key], rel=1e-5, abs=2e-6), (fmt, key)
        assert not (out / "estimates" / FLIGHT / "reg" / "recording").exists()


def test_evaluate_reads_the_projects_own_bags(tmp_path: Path) -> None:
    from velobins_data.bag import write_bag
    from velobins_data.datasets import load_flight

    write_bag(load_flight("nanobench", FLIGHT_FILE), tmp_path / "bags" / FLIGHT)
    rows = {}
    for kind, data in (("nanobench", FLIGHT_FILE), ("rosbag", tmp_path / "bags")):
        out = tmp_path / kind
        argv = ["evaluate", "--checkpoint", "crazyflie-reg", "--dataset", kind, "--data", str(data), "--no-imu-only"]
        assert main([*argv, "--out", str(out)]) == 0
        rows[kind] = _row(out, "reg")
    for key in PAPER_KEYS + EXTRA_KEYS:
        assert rows["rosbag"][key] == pytest.approx(rows["nanobench"][key], rel=1e-4), key


def test_user_errors_are_one_line_and_touch_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    t = np.arange(0.0, 3.0, 0.05)  # a clock of seconds since start; the flight is on epoch seconds
    lines = [f"{x!r} 0 0 0 0 0 0 1" for x in t.tolist()]
    (tmp_path / "other.tum").write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    base = ["score", "--gt", str(FLIGHT_FILE), "--gt-format", "nanobench", "--out", str(out)]
    cases = [
        (["--estimate", str(tmp_path / "other.tum")], "same clock"),
        (["--estimate", str(tmp_path / "missing.tum")], "missing.tum: field '<file>': no such file"),
        (["--estimate", str(tmp_path / "other.tum"), "--label", "a", "--label", "b"], "--label given 2 time(s)"),
    ]
    for extra, expect in cases:
        assert main([*base, *extra]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and expect in err, err
    assert not out.exists()
