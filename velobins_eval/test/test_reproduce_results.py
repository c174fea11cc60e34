"""The evaluation units' result files: a lossless round trip without pickle, one file name per unit of the
plan, and a unit counted as missing when its file is unreadable or its model was retrained."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from velobins_eval.metrics import FlightMetrics
from velobins_eval.reproduce.evaluation import UnitResult
from velobins_eval.reproduce.plan import IMU_ONLY, SCHEDULES, TABLES, EvalUnit, model_dir, plan
from velobins_eval.reproduce.results import checkpoint_stamp, is_done, load_unit, save_unit, unit_key, unit_path
from velobins_eval.scoring import KEYS, FlightRecord


def _result(unit: EvalUnit, records: bool) -> UnitResult:
    rng = np.random.default_rng(0)
    flights = {"B5_helix/odd name": FlightMetrics(*rng.random(len(KEYS))), "b": FlightMetrics(*([np.nan] * 7))}
    nees = {name: rng.random(11).astype(np.float32) for name in flights}
    kept = {}
    if records:
        for name in flights:
            n = 5
            kept[name] = FlightRecord(
                name,
                unit.row,
                *(rng.random(s) for s in ((n,), (n, 3), (n, 3), (n, 3), (n, 3), (n, 3, 3), (9,), (9, 3))),
            )
    return UnitResult(unit, flights, nees, kept)


@pytest.mark.parametrize("records", [False, True])
def test_round_trip_is_lossless(tmp_path: Path, records: bool) -> None:
    unit = EvalUnit("M^B+C", "M-BC", "B+C", 0)
    result = _result(unit, records)
    path = save_unit(unit_path(tmp_path, "val", unit), result, [1, 2])
    assert path == tmp_path / "units" / "val" / "M-BC-uBC.npz" and not list(path.parent.glob("*.tmp"))
    back = load_unit(path)
    assert back.unit == unit and list(back.flights) == list(result.flights)
    for name in result.flights:
        np.testing.assert_array_equal(
            list(vars(back.flights[name]).values()), list(vars(result.flights[name]).values())
        )
        np.testing.assert_array_equal(back.nees[name], result.nees[name])
    assert set(back.records) == set(result.records)
    for name, record in result.records.items():
        assert back.records[name].method == "M^B+C" and back.records[name].flight == name
        for field in ("t", "v_net", "var_net", "p_fused", "v_fused", "cov_fused", "t_traj", "p_traj"):
            np.testing.assert_array_equal(getattr(back.records[name], field), getattr(record, field))
    with np.load(path, allow_pickle=False) as data:  # plain arrays: loading never unpickles
        assert all(data[k].dtype != object for k in data.files)


def test_every_unit_of_the_plan_has_its_own_file() -> None:
    _, units = plan(SCHEDULES["cpu"], TABLES)
    keys = [unit_key(u) for u in units] + [unit_key(EvalUnit(IMU_ONLY, ""))]
    assert len(set(keys)) == len(keys)
    assert all(k.replace("-", "").replace("_", "").isalnum() or "." in k for k in keys), keys


def test_a_unit_is_missing_when_its_file_is_unreadable_or_its_model_was_retrained(tmp_path: Path) -> None:
    unit = EvalUnit("G^B", "G-B")
    best = model_dir(tmp_path, "G-B") / "best.pt"
    assert not is_done(tmp_path, "val", unit) and checkpoint_stamp(tmp_path, unit) is None
    best.parent.mkdir(parents=True)
    best.write_bytes(b"model 1")
    save_unit(unit_path(tmp_path, "val", unit), _result(unit, False), checkpoint_stamp(tmp_path, unit))
    assert is_done(tmp_path, "val", unit)
    assert not is_done(tmp_path, "val", EvalUnit("G^B", "G-B", seed=1))  # another unit's name: never its file
    stat = best.stat()
    best.write_bytes(b"model 2, retrained")
    os.utime(best, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    assert not is_done(tmp_path, "val", unit)  # computed from the earlier model: recomputed
    save_unit(unit_path(tmp_path, "val", unit), _result(unit, False), checkpoint_stamp(tmp_path, unit))
    assert is_done(tmp_path, "val", unit)
    unit_path(tmp_path, "val", unit).write_bytes(b"PK\x03\x04 half a file")
    assert not is_done(tmp_path, "val", unit)
    # The IMU-only baseline has no model of its own.
    imu = EvalUnit(IMU_ONLY, "")
    save_unit(unit_path(tmp_path, "val", imu), _result(imu, True), None)
    assert is_done(tmp_path, "val", imu) and unit_key(imu) == "imu-only"
