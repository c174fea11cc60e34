"""``velobins reproduce --checkpoint``: shipped models by name scored on the split beside the trained rows, each with
its own overlay (or ``--params``), the report saying which filter parameters every row used.

The trainings and the trained rows' evaluations are replaced by small real stand-ins (as in
test_reproduce_outputs.py: a ``best.pt`` per planned model, every unit's result file with fixed
metrics); the given checkpoints are the shipped models, scored for real on a shipped demo flight.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from velobins_data.datasets import load_flight, write_csv
from velobins_eval.cli import main
from velobins_eval.demo import DEMO_DATA
from velobins_eval.metrics import FlightMetrics
from velobins_eval.reproduce import commands, evaluation, plan, results
from velobins_eval.scoring import KEYS, FlightRecord

SPLITS = {"train": "B3_figure8_medium_rep1", "val": "B2_circle_fast_rep1"}
SHIPPED_OVERLAY = "the shipped model's overlay"


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``<tmp>/data/{train,val}/<flight>.csv``: the two demo flights as a dataset root of plain CSV flights."""
    root = tmp_path_factory.mktemp("given") / "data"
    for split, name in SPLITS.items():
        (root / split).mkdir(parents=True)
        write_csv(load_flight("nanobench", DEMO_DATA / f"{name}.csv.gz"), root / split / f"{name}.csv")
    return root


def _stand_in_jobs(opts, schedule, splits, jobs, units, engine) -> dict[str, float]:
    """A ``best.pt`` per planned model and every unit's result file (fixed metrics; records where kept)."""
    for job in jobs:
        plan.model_dir(opts.out, job.name).mkdir(parents=True, exist_ok=True)
        (plan.model_dir(opts.out, job.name) / "best.pt").write_text("stand-in")
    for split, directory in splits.items():
        seqs = [load_flight("csv", p) for p in sorted(directory.glob("*.csv"))]
        for unit in [*units, plan.EvalUnit(plan.IMU_ONLY, "")]:
            flights = {s.name: FlightMetrics(**dict.fromkeys(KEYS, 0.5)) for s in seqs}
            nees = {s.name: np.full(20, 3.0, dtype=np.float32) for s in seqs}
            kept = evaluation.keeps_records(unit) or unit.row == plan.IMU_ONLY
            records = {s.name: _record(s, unit.row) for s in seqs} if kept else {}
            result = evaluation.UnitResult(unit, flights, nees, records)
            results.save_unit(
                results.unit_path(opts.out, split, unit), result, results.checkpoint_stamp(opts.out, unit)
            )
    return {j.name: 1.0 for j in jobs}


def _record(seq, method: str) -> FlightRecord:
    idx = np.arange(20, len(seq.t), 20)
    n = idx.size
    cov = np.tile(np.eye(3) * 0.01, (n, 1, 1))
    return FlightRecord(
        seq.name, method, seq.t[idx], np.zeros((n, 3)), np.ones((n, 3)), seq.p[idx], seq.v[idx], cov, seq.t, seq.p
    )


@pytest.fixture
def stand_ins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(commands, "_run_jobs", _stand_in_jobs)


def _reproduce(data: Path, out: Path, *extra: str) -> int:
    argv = ["reproduce", "--dataset", "csv", "--data", str(data), "--out", str(out), "--schedule", "smoke"]
    return main([*argv, "--tables", "I", "--no-progress", *extra])


def test_shipped_models_by_name_bring_their_overlays_beside_the_trained_rows(
    data: Path, tmp_path: Path, stand_ins: None
) -> None:
    out = tmp_path / "out"
    assert _reproduce(data, out, "--checkpoint", "crazyflie", "--checkpoint", "crazyflie-reg") == 0
    doc = json.loads((out / "val" / "metrics.json").read_text())
    # The same rows as velobins evaluate gives the shipped models by name (with their overlays), to the stored digit.
    report = tmp_path / "evaluate"
    argv = ["evaluate", "--checkpoint", "crazyflie", "--checkpoint", "crazyflie-reg", "--no-imu-only"]
    assert main([*argv, "--dataset", "csv", "--data", str(data / "val"), "--out", str(report)]) == 0
    want = json.loads((report / "metrics.json").read_text())
    for given, variant in (("crazyflie", "G+H^B"), ("crazyflie-reg", "reg")):
        assert doc[given]["flights"] == want[variant]["flights"], given
    assert doc[plan.HEADLINE]["aggregate"]["ave"] == 0.5  # the trained rows are still this run's
    config = json.loads((out / "val" / "config.json").read_text())
    filters = config["filters"]
    assert filters["trained rows"]["source"] == "defaults" and filters["trained rows"]["params"] == []
    for given in ("crazyflie", "crazyflie-reg"):
        assert filters[given]["source"] == SHIPPED_OVERLAY and filters[given]["params"][0].endswith(f"{given}.yaml")
        assert filters[given]["filter"]["acc_noise_density"] == pytest.approx(0.07009)
    assert set(config["checkpoints"]) == {"crazyflie", "crazyflie-reg"}
    text = (out / "val" / "report.md").read_text()
    assert "## Given checkpoints" in text and "| crazyflie-reg |" in text
    assert "## Filter parameters per row" in text and "`crazyflie.yaml` | the shipped model's overlay" in text


def test_params_replace_the_overlay_of_every_given_checkpoint(data: Path, tmp_path: Path, stand_ins: None) -> None:
    params = Path(__file__).resolve().parents[2] / "velobins_bringup" / "config" / "nanobench.yaml"
    out = tmp_path / "out"
    assert _reproduce(data, out, "--checkpoint", "crazyflie-reg", "--params", str(params)) == 0
    filters = json.loads((out / "val" / "config.json").read_text())["filters"]
    for row in ("trained rows", "crazyflie-reg"):
        assert filters[row]["source"] == "--params" and filters[row]["params"] == [str(params)], row
    assert filters["crazyflie-reg"]["filter"] == filters["trained rows"]["filter"] != {}
    assert filters["crazyflie-reg"]["filter"]["acc_noise_density"] != pytest.approx(0.07009)  # not the overlay's


def test_an_unknown_checkpoint_is_one_line_before_any_work(
    data: Path, tmp_path: Path, stand_ins: None, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    assert _reproduce(data, out, "--checkpoint", "no-such-model") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no-such-model" in err and "crazyflie" in err, err
    assert not out.exists()
