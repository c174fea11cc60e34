"""Parallel flight generation: deterministic plan, worker-count independence and CSV output."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from velobins_common.outputs import MANIFEST_NAME as RUN_MANIFEST
from velobins_common.outputs import OutputError
from velobins_data.datasets.csv_format import read_csv
from velobins_data.sim import FAMILIES, flight_plan, simulate_flight, simulate_many
from velobins_data.sim.batch import MANIFEST_NAME

_FIELDS = ("t", "acc", "gyro", "rotor", "p", "q", "v")


def test_flight_plan_cycles_families_with_distinct_seeds() -> None:
    plan = flight_plan(20, seed=3)
    assert [spec.family for spec in plan] == [FAMILIES[i % len(FAMILIES)] for i in range(20)]
    assert plan[0].name == "sim_circle_000" and plan[12].name == f"sim_{FAMILIES[3]}_012"
    assert len({spec.seed for spec in plan}) == 20
    assert flight_plan(20, seed=3) == plan
    assert flight_plan(20, seed=4)[0].seed != plan[0].seed
    # A longer run extends a shorter one: flight i does not depend on how many flights there are.
    assert flight_plan(5, seed=3) == plan[:5]
    with pytest.raises(ValueError, match="flights"):
        flight_plan(0, seed=3)
    with pytest.raises(ValueError, match="seed"):
        flight_plan(3, seed=-1)


def test_worker_count_does_not_change_the_flights(tmp_path: Path) -> None:
    serial = simulate_many("nano", 3, 2.5, seed=9, out_dir=tmp_path / "one", workers=1, progress=False)
    parallel = simulate_many("nano", 3, 2.5, seed=9, out_dir=tmp_path / "two", workers=2, progress=False)
    assert [p.name for p in serial] == ["sim_circle_000.csv", "sim_figure8_001.csv", "sim_lemniscate_002.csv"]
    assert [p.name for p in parallel] == [p.name for p in serial]
    for a, b in zip(serial, parallel, strict=True):
        assert a.read_bytes() == b.read_bytes()
        sa, sb = read_csv(a), read_csv(b)
        for field in _FIELDS:
            assert np.array_equal(getattr(sa, field), getattr(sb, field)), (a.name, field)
    hidden = [f.name for f in (tmp_path / "two").iterdir() if f.name.startswith(".")]
    assert hidden == [RUN_MANIFEST]  # no temp, staging or lock files
    # The file holds exactly the flight simulate_flight returns for the planned seed.
    spec = flight_plan(3, seed=9)[1]
    direct = simulate_flight("nano", spec.family, 2.5, spec.seed, index=spec.index)
    back = read_csv(serial[1])
    assert back.name == direct.name and back.rotor_kind == "command"
    assert back.gravity == pytest.approx(direct.gravity)
    assert back.metadata["platform"] == "sim_nano"
    for field in _FIELDS:
        assert np.array_equal(getattr(back, field), getattr(direct, field)), field


def test_manifest_and_earlier_runs(tmp_path: Path) -> None:
    out = tmp_path / "sim"
    out.mkdir()
    (out / "sim_star_041.csv").write_text("a file named like a flight, no run manifest\n")
    # Files no manifest lists are never removed, even with overwrite: refused, naming them, nothing touched.
    for overwrite in (False, True):
        with pytest.raises(OutputError, match=r"sim_star_041\.csv.*nothing was changed"):
            simulate_many("nano", 2, 2.0, seed=5, out_dir=out, workers=1, progress=False, overwrite=overwrite)
        assert sorted(p.name for p in out.iterdir()) == ["sim_star_041.csv"]
    (out / "sim_star_041.csv").unlink()
    earlier = simulate_many("nano", 3, 2.0, seed=4, out_dir=out, workers=1, progress=False)
    (out / "notes.csv").write_text("not ours\n")
    # An earlier run is never deleted silently: refused, naming its files and --overwrite.
    with pytest.raises(OutputError, match=r"already holds a simulate run \(sim_circle_000\.csv.*--overwrite"):
        simulate_many("nano", 2, 2.0, seed=5, out_dir=out, workers=1, progress=False)
    # overwrite replaces the whole earlier set (and only it).
    paths = simulate_many("nano", 2, 2.0, seed=5, out_dir=out, workers=1, progress=False, overwrite=True)
    assert not earlier[2].exists()
    assert sorted(p.name for p in out.glob("*.csv")) == sorted([*(p.name for p in paths), "notes.csv"])
    manifest = json.loads((out / MANIFEST_NAME).read_text())
    assert manifest["preset"] == "nano" and manifest["seed"] == 5 and manifest["flights"] == 2
    plan = flight_plan(2, seed=5)
    assert [e["seed"] for e in manifest["sequences"]] == [spec.seed for spec in plan]
    assert [e["file"] for e in manifest["sequences"]] == [p.name for p in paths]
    assert manifest["sequences"][1]["family"] == "figure8"
    assert manifest["sequences"][0]["trajectory"]["speed_target"] > 0.0
    assert [p.name for p in out.iterdir() if p.name.startswith(".")] == [RUN_MANIFEST]  # lock released, no temp files
    assert json.loads((out / RUN_MANIFEST).read_text())["files"] == sorted([*(p.name for p in paths), MANIFEST_NAME])
