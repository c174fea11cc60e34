"""Plausibility validator (velobins_data.validate) and its integration in the dataset loaders.

Flights are synthetic but physically consistent (a banked circle: specific force from the
trajectory's acceleration, q from the thrust direction), written with ``write_csv`` and loaded
through the real adapter path; each bad case corrupts one thing the way real data goes wrong.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
import fixtures_datasets as fx
from fixtures_datasets import G, circle_flight, make_flight, write_flight

from velobins_data.datasets import (
    DatasetError,
    UnusableFlightError,
    load_directory,
    load_flight,
    load_flights,
)
from velobins_data.flight import FlightError
from velobins_data.validate import CHECKS, PlausibilityError, PlausibilityLimits, check_flight, inspect_flight


def _set(key: str, row: int, col: int, value: float) -> Callable[[dict], None]:
    def edit(a: dict) -> None:
        a[key][row, col] = value

    return edit


def _swap_acc_gyro_z(a: dict) -> None:
    a["acc"][:, 2], a["gyro"][:, 2] = a["gyro"][:, 2].copy(), a["acc"][:, 2].copy()


def _shift_p(a: dict) -> None:
    a["p"][300:, 0] += 2.0


def _last_stamp(a: dict) -> None:
    a["t"][-1] = 1e30


# name -> (corruption, kind, check, field, row, also_found)
BAD_CASES: dict[str, tuple[Callable[[dict], None], str, str, str, int | None, tuple[str, ...]]] = {
    "acc_in_g": (lambda a: a.update(acc=a["acc"] / G), "command", "specific_force", "acc", None, ("gravity_residual",)),
    "acc_z_gyro_z_swapped": (_swap_acc_gyro_z, "command", "specific_force", "acc", None, ("gyro", "gravity_residual")),
    "acc_x_spike": (_set("acc", 57, 0, 1e30), "command", "input_limits", "acc", 57, ()),
    "gyro_in_deg_s": (lambda a: a.update(gyro=np.degrees(a["gyro"])), "command", "gyro", "gyro", None, ()),
    "frd_body": (lambda a: a.update(acc=a["acc"] * [1, -1, -1]), "command", "gravity_residual", "acc/q/v", None, ()),
    "v_spike": (_set("v", 80, 1, 1e30), "command", "ground_truth_limits", "v", 80, ()),
    "p_spike": (_set("p", 90, 2, -1e30), "command", "ground_truth_limits", "p", 90, ("position_jump",)),
    "position_jump": (_shift_p, "command", "position_jump", "p", 300, ()),
    "p_in_mm": (lambda a: a.update(p=a["p"] * 1000.0), "command", "position_jump", "p", 1, ()),
    "stamp_1e30": (_last_stamp, "command", "stamps", "t", 600, ()),
    "pwm_all_zero": (lambda a: a["rotor"].fill(0.0), "command", "rotor_range", "rotor", None, ()),
    "rpm_given_in_rpm": (lambda a: a.update(rotor=a["rotor"] * 9.55), "speed", "rotor_range", "rotor", 0, ()),
    "rpm_given_pwm": (lambda a: a.update(rotor=a["rotor"] / 2400.0), "speed", "rotor_range", "rotor", None, ()),
}  # fmt: skip


@pytest.mark.parametrize("case", list(BAD_CASES))
def test_bad_flight_fails_naming_check_field_row_and_file(case: str, tmp_path: Path) -> None:
    edit, kind, check, fld, row, also = BAD_CASES[case]
    arrays = circle_flight(kind=kind)
    edit(arrays)
    path = write_flight(tmp_path / f"{case}.csv", arrays)
    with pytest.raises(PlausibilityError) as err:
        load_flight("csv", path)
    exc = err.value
    assert isinstance(exc, DatasetError) and isinstance(exc, ValueError)  # the CLI's one-line handling
    assert exc.check == check, str(exc)
    assert exc.field == fld and exc.row == row, str(exc)
    assert path.name in str(exc) and f"--allow {check}" in str(exc)
    if row is not None:
        assert f"first bad row {row}" in str(exc)
    found = {f.check for f in inspect_flight(load_flight("csv", path, validate=False)).findings}
    assert {check, *also} <= found


def test_messages_name_the_likely_cause(tmp_path: Path) -> None:
    arrays = circle_flight()
    arrays["acc"] /= G
    with pytest.raises(PlausibilityError, match=r"median \|f\| = 1\.0\d m/s².*accelerometer in g\?"):
        load_flight("csv", write_flight(tmp_path / "g.csv", arrays))
    nb = fx.hover()
    nb.acc = nb.acc * G  # m/s² in a NanoBench file, which the adapter reads as g
    with pytest.raises(PlausibilityError, match="multiplied by g twice"):
        load_flight("nanobench", fx.write_nanobench(tmp_path / "B1_twice.csv", nb))


def test_pwm_kind_given_rpm_values_is_caught_by_the_contract(tmp_path: Path) -> None:
    """Out-of-range PWM never reaches the validator: Flight's own contract names file, field, row."""
    path = write_flight(tmp_path / "pwm_as_rpm.csv")
    lines = path.read_text().splitlines()
    header = next(i for i, line in enumerate(lines) if not line.startswith("#"))
    cells = lines[header + 5].split(",")
    cells[7] = "1200"  # pwm_1 in rad/s
    lines[header + 5] = ",".join(cells)
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(FlightError) as err:
        load_flight("csv", path)
    assert err.value.field == "rotor" and err.value.row == 4 and path.name in str(err.value)


def test_allow_overrides_and_unknown_names_are_rejected(tmp_path: Path) -> None:
    arrays = circle_flight()
    arrays["acc"] /= G
    path = write_flight(tmp_path / "g.csv", arrays)
    with pytest.raises(PlausibilityError) as err:  # the next finding shows once the first is allowed
        load_flight("csv", path, allow=["specific_force"])
    assert err.value.check == "gravity_residual"
    flight = load_flight("csv", path, allow=["specific_force", "gravity_residual"])
    assert len(flight) == 601
    assert len(load_flight("csv", path, allow=["specific_force,gravity_residual"])) == 601
    with pytest.raises(ValueError, match=r"unknown check name.*'gravity'.*specific_force, gyro"):
        load_flight("csv", path, allow=["gravity"])
    with pytest.raises(ValueError, match="valid names"):
        check_flight(make_flight(circle_flight()), allow=("nope",))


def test_good_flights_pass_and_inspection_reports_statistics() -> None:
    for kind in ("command", "speed"):
        arrays = circle_flight(kind=kind)
        arrays["t"][200:] += 0.02  # one 30 ms step: a gap (> 2x median) but no dropout
        flight = make_flight(arrays)
        flight.metadata["dropped_stamps"] = 3
        insp = check_flight(flight)
        assert insp.findings == [] and insp.rows == 601
        assert insp.gaps == 1 and insp.max_gap_s == pytest.approx(0.03) and insp.dropped_stamps == 3
        assert insp.imu_rate_hz == pytest.approx(100.0) and insp.rotor_rate_hz == pytest.approx(100, rel=0.02)
        assert abs(insp.median_specific_force - math.hypot(G, (math.pi / 2) ** 2)) < 0.1
        assert insp.gravity_residual < 0.3
        assert insp.speed_range[1] == pytest.approx(math.pi / 2, abs=0.05)
        assert insp.to_dict()["rotor_kind"] == kind


def test_long_gap_is_a_stamps_finding() -> None:
    arrays = circle_flight()
    arrays["t"][400:] += 2.0
    with pytest.raises(PlausibilityError, match=r"gap of 2\.01 s") as err:
        check_flight(make_flight(arrays))
    assert err.value.check == "stamps" and err.value.row == 400


def test_too_short_flight_is_unusable_and_skipped(tmp_path: Path) -> None:
    short = write_flight(tmp_path / "a_short.csv", circle_flight(seconds=0.8))
    good = write_flight(tmp_path / "b_good.csv")
    with pytest.raises(UnusableFlightError, match=r"a_short\.csv.*0\.8 s < 1\.0 s") as err:
        load_flight("csv", short)
    assert not isinstance(err.value, PlausibilityError)
    assert len(load_flight("csv", short, allow=["duration"])) == 81
    short_in_g = circle_flight(seconds=0.8)
    short_in_g["acc"] /= G
    flight = make_flight(short_in_g)
    with pytest.raises(UnusableFlightError):  # skipped whatever else is wrong: it is never used
        check_flight(flight)
    assert inspect_flight(flight).blocking().check == "duration"
    with pytest.raises(PlausibilityError, match="specific_force"):
        check_flight(flight, allow=["duration"])
    with pytest.warns(UserWarning, match=r"a_short\.csv"):
        result = load_flights("csv", tmp_path)
    assert [s.name for s in result.sequences] == ["b_good"]
    assert [s.path.name for s in result.skipped] == ["a_short.csv"]
    assert "too short" in result.skipped[0].reason and str(short) not in result.skipped[0].reason
    with pytest.warns(UserWarning):
        assert [s.name for s in load_directory("csv", tmp_path)] == ["b_good"]
    good.unlink()
    with pytest.warns(UserWarning), pytest.raises(DatasetError, match=r"no usable csv flight.*a_short\.csv: .*short"):
        load_flights("csv", tmp_path)


def test_load_flights_file_folder_and_errors(tmp_path: Path) -> None:
    one = write_flight(tmp_path / "one.csv")
    assert [s.name for s in load_flights("csv", one).sequences] == ["one"]
    bad = circle_flight()
    bad["acc"][10, 1] = 1e30
    (tmp_path / "sub").mkdir()
    write_flight(tmp_path / "sub" / "two.csv", bad)
    with pytest.raises(PlausibilityError, match=r"two\.csv"):
        load_flights("csv", tmp_path)
    assert len(load_flights("csv", tmp_path, allow=["input_limits", "gravity_residual"]).sequences) == 2
    with pytest.raises(ValueError, match="valid names"):
        load_flights("csv", tmp_path, allow=["bogus"])
    with pytest.raises(DatasetError, match="no such file"):
        load_flights("csv", tmp_path / "missing")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(DatasetError, match=r"empty.*no csv flight files \(searched \*\.csv, \*\.csv\.gz"):
        load_flights("csv", empty)
    nb = tmp_path / "nb"
    nb.mkdir()
    fx.write_nanobench(nb / "B1_x.csv", fx.hover())
    with pytest.raises(DatasetError, match=r"no tiiratm flight files.*look like --dataset nanobench"):
        load_flights("tiiratm", nb)


def test_every_adapter_output_is_validated(tmp_path: Path) -> None:
    """The check sits at the adapter boundary: a NanoBench file with a spike fails like a CSV one."""
    tr = fx.hover()
    rows = fx.nanobench_rows(tr)
    rows[100, 11] = 1e29  # imu_acc_x, in g
    path = fx.write_nanobench(tmp_path / "B1_spike.csv", tr, rows=rows)
    with pytest.raises(PlausibilityError) as err:
        load_flight("nanobench", path)
    assert err.value.check == "input_limits" and err.value.field == "acc" and err.value.row == 80  # 20 rows trimmed


def test_limits_are_documented_and_names_stable() -> None:
    assert list(CHECKS) == [
        "stamps", "specific_force", "gyro", "input_limits", "ground_truth_limits", "imu_frozen",
        "position_jump", "rotor_range", "gravity_residual", "duration",
    ]  # fmt: skip
    import dataclasses

    for f in dataclasses.fields(PlausibilityLimits):
        assert f.name in Path(__file__).parents[1].joinpath("velobins_data", "validate.py").read_text()
    with pytest.raises(dataclasses.FrozenInstanceError):
        PlausibilityLimits().max_gap_s = 1.0  # type: ignore[misc]
