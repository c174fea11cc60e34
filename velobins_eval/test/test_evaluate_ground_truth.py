"""``velobins evaluate --ground-truth``: a flight scored against its own ground truth exported to TUM and to EuRoC
gives the row it gets with the ground truth it carries; ground truth on another clock or malformed is one line."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import numpy as np
import pytest

from velobins_eval.cli import main
from velobins_eval.demo import DEMO_DATA
from velobins_eval.metrics import EXTRA_KEYS, PAPER_KEYS

FLIGHT = "B2_circle_fast_rep1"
EUROC_HEADER = (
    "#timestamp,p_RS_R_x [m],p_RS_R_y [m],p_RS_R_z [m],q_RS_w [],q_RS_x [],q_RS_y [],q_RS_z [],"
    "v_RS_R_x [m s^-1],v_RS_R_y [m s^-1],v_RS_R_z [m s^-1]"
)


@pytest.fixture(scope="module")
def flight_and_exports(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """A demo flight as a plain CSV flight whose velocity is the positions' central difference (what a TUM file,
    poses only, gives back), and its ground truth exported as ``<flight>.tum`` and as a EuRoC sequence folder."""
    from velobins_data.datasets import load_flight, write_csv
    from velobins_eval.estimates import write_tum

    root = tmp_path_factory.mktemp("gt_exports")
    seq = load_flight("nanobench", DEMO_DATA / f"{FLIGHT}.csv.gz")
    seq.v = np.gradient(seq.p, seq.t, axis=0)
    (root / "flights").mkdir()
    write_csv(seq, root / "flights" / f"{FLIGHT}.csv")
    write_tum(root / f"{FLIGHT}.tum", seq.t, seq.p, seq.q)
    euroc = root / "euroc" / FLIGHT / "mav0" / "state_groundtruth_estimate0" / "data.csv"
    euroc.parent.mkdir(parents=True)
    ns = [int(Decimal(repr(t)) * 10**9) for t in seq.t.tolist()]  # EuRoC: integer nanoseconds, q with w first
    rows = [
        [n, *p, q[3], q[0], q[1], q[2], *v]
        for n, p, q, v in zip(ns, *(a.tolist() for a in (seq.p, seq.q, seq.v)), strict=True)
    ]
    euroc.write_text(EUROC_HEADER + "\n" + "\n".join(",".join(repr(x) for x in r) for r in rows) + "\n")
    return root / "flights", root / f"{FLIGHT}.tum", root / "euroc"


def _evaluate(data: Path, out: Path, *extra: str) -> dict:
    argv = ["evaluate", "--checkpoint", "crazyflie-reg", "--dataset", "csv", "--data", str(data), "--no-imu-only"]
    assert main([*argv, "--out", str(out), *extra]) == 0
    return json.loads((out / "metrics.json").read_text())["reg"]["flights"][FLIGHT]


def test_tum_and_euroc_ground_truth_give_the_flights_own_row(flight_and_exports, tmp_path: Path) -> None:
    flights, tum, euroc = flight_and_exports
    own = _evaluate(flights, tmp_path / "own")
    from_tum = _evaluate(flights, tmp_path / "tum", "--ground-truth", str(tum))
    # EuRoC: the folder of sequences, the format told by the file's header
    from_euroc = _evaluate(flights, tmp_path / "euroc", "--ground-truth", str(euroc))
    for key in PAPER_KEYS + EXTRA_KEYS:
        # TUM: the same stamps, so the resampling is the identity and the velocity the same central difference:
        # the row to the stored digit
        assert from_tum[key] == own[key], key
        # EuRoC: integer ns read back move a stamp by up to one float64 step (0.24 µs at epoch times)
        assert from_euroc[key] == pytest.approx(own[key], rel=1e-5, abs=1e-6), key
    config = json.loads((tmp_path / "euroc" / "config.json").read_text())
    assert config["ground_truth"] == {"path": str(euroc), "format": "euroc"}
    assert json.loads((tmp_path / "own" / "config.json").read_text())["ground_truth"] == "the flights' own"


def _bag_without_ground_truth(flight_csv: Path, bag: Path) -> None:
    """The flight as a bag of its IMU and rotor topics only: a flight recorded without motion capture."""
    from rosbags.rosbag2 import Reader, StoragePlugin, Writer

    from velobins_data.bag import TOPIC_GT, typestore, write_bag
    from velobins_data.datasets import load_flight

    full = bag.parent / "with_gt"
    write_bag(load_flight("csv", flight_csv), full)
    with Reader(full) as reader, Writer(bag, version=9, storage_plugin=StoragePlugin.MCAP) as writer:
        kept = [c for c in reader.connections if c.topic != TOPIC_GT]
        out = {c.id: writer.add_connection(c.topic, c.msgtype, typestore=typestore()) for c in kept}
        for conn, stamp, raw in reader.messages(connections=kept):
            writer.write(out[conn.id], stamp, raw)


def test_a_bag_recorded_without_motion_capture_is_scored_against_the_export(flight_and_exports, tmp_path: Path) -> None:
    flights, tum, _ = flight_and_exports
    bags = tmp_path / "bags"
    bags.mkdir()
    _bag_without_ground_truth(flights / f"{FLIGHT}.csv", bags / FLIGHT)
    own = _evaluate(flights, tmp_path / "own")
    argv = ["evaluate", "--checkpoint", "crazyflie-reg", "--dataset", "rosbag", "--data", str(bags), "--no-imu-only"]
    assert main([*argv, "--ground-truth", str(tum), "--out", str(tmp_path / "bag")]) == 0
    got = json.loads((tmp_path / "bag" / "metrics.json").read_text())["reg"]["flights"][FLIGHT]
    for key in PAPER_KEYS + EXTRA_KEYS:  # the bag stores stamps in ns: the flight's clock moves by < 1 µs
        assert got[key] == pytest.approx(own[key], rel=1e-4), key
    assert main([*argv, "--out", str(tmp_path / "no_gt")]) == 2  # without --ground-truth the bag has none


def test_a_clipped_ground_truth_drops_the_flights_samples_outside_it(flight_and_exports, tmp_path: Path) -> None:
    """A ground truth covering only the flight's second half: the filter starts there, from that ground truth."""
    from velobins_eval.estimates import read_tum, write_tum

    flights, tum, _ = flight_and_exports
    traj = read_tum(tum)
    half = traj.t.size // 2
    write_tum(tmp_path / "late.tum", traj.t[half:], traj.p[half:], traj.q[half:])
    row = _evaluate(flights, tmp_path / "late", "--ground-truth", str(tmp_path / "late.tum"))
    estimate = tmp_path / "late" / "estimates" / FLIGHT / "reg" / "estimate.tum"
    assert read_tum(estimate).t[0] > traj.t[half]  # nothing scored before the ground truth starts
    assert np.isfinite(row["ate"])


def test_bad_ground_truth_is_one_line_and_touches_nothing(
    flight_and_exports, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    flights, _, _ = flight_and_exports
    other_clock = tmp_path / "clock.tum"  # seconds since start; the flight is on epoch seconds
    other_clock.write_text("".join(f"{t!r} 0 0 0 0 0 0 1\n" for t in np.arange(0.0, 3.0, 0.05).tolist()))
    short_line = tmp_path / "short.tum"
    short_line.write_text("1772421800.0 0 0 0 0 0 0 1\n1772421800.1 0 0 0\n")
    bad_euroc = tmp_path / "bad.csv"
    bad_euroc.write_text("#timestamp,p_RS_R_x,p_RS_R_y\n1,2,3\n")
    named = tmp_path / "named"
    named.mkdir()
    (named / "another_flight.tum").write_text(other_clock.read_text())
    out = tmp_path / "out"
    cases = [
        (other_clock, "same clock"),
        (short_line, "short.tum: field '<line>': line 2: expected 8 numbers"),
        (bad_euroc, "bad.csv: field 'p_RS_R_z': missing column"),
        (tmp_path / "missing.tum", "missing.tum: field '<file>': no such file"),
        (named, f"no ground truth for flight '{FLIGHT}'"),
    ]
    argv = ["evaluate", "--checkpoint", "crazyflie-reg", "--dataset", "csv", "--data", str(flights)]
    for gt, expect in cases:
        assert main([*argv, "--out", str(out), "--ground-truth", str(gt)]) == 2, gt
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and expect in err, err
    assert not out.exists()
