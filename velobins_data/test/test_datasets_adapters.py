"""Adapters on fixtures written in each dataset's schema: units, frames, malformed inputs."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
import fixtures_datasets as fx

from velobins_data.datasets import DatasetError, load_directory, load_flight
from velobins_data.flight import FlightError


def _write(kind: str, tmp_path: Path, tr: fx.Truth) -> Path:
    if kind == "nanobench":
        return fx.write_nanobench(tmp_path / "B2_circle_fast_rep1.csv.gz", tr)
    if kind == "tiiratm":
        return fx.write_tiiratm(tmp_path / "flight-01a-ellipse_500hz_freq_sync.csv", tr)
    if kind == "neurobem":
        return fx.write_neurobem(tmp_path / "merged_2021-02-03.csv", tr)
    if kind == "aiio_hdf5":
        return fx.write_aiio_hdf5(tmp_path / "data.hdf5", tr)
    if kind == "aiio_mcap":
        return fx.write_aiio_mcap(tmp_path / "bag", tr)
    raise AssertionError(kind)


ADAPTERS = ["nanobench", "tiiratm", "neurobem", "aiio_hdf5", "aiio_mcap"]


def _kind(name: str) -> str:
    return "aiio" if name.startswith("aiio") else name


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_hover_gives_plus_g_on_body_z(adapter: str, tmp_path: Path) -> None:
    flight = load_flight(_kind(adapter), _write(adapter, tmp_path, fx.hover()))
    assert np.allclose(flight.acc.mean(axis=0), [0.0, 0.0, fx.G], atol=0.02)
    assert np.allclose(flight.body_velocity(), 0.0, atol=1e-9)
    for key in ("dataset", "platform", "source", "gravity"):
        assert key in flight.metadata
    assert flight.metadata["dataset"] == _kind(adapter)


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_flight_along_world_x_with_yaw_90_is_body_minus_y(adapter: str, tmp_path: Path) -> None:
    flight = load_flight(_kind(adapter), _write(adapter, tmp_path, fx.yaw90_forward_x()))
    assert np.allclose(flight.v.mean(axis=0), [1.0, 0.0, 0.0], atol=1e-6)
    assert np.allclose(flight.body_velocity().mean(axis=0), [0.0, -1.0, 0.0], atol=1e-6)


def test_rotor_units(tmp_path: Path) -> None:
    tr = fx.hover()
    nb = load_flight("nanobench", _write("nanobench", tmp_path, tr))
    assert nb.rotor_kind == "command" and np.allclose(nb.rotor, 0.6, atol=1e-6)
    neuro = load_flight("neurobem", _write("neurobem", tmp_path, tr))
    assert neuro.rotor_kind == "speed" and np.allclose(neuro.rotor, 0.6 * fx.NEUROBEM_MAX_RAD_S, atol=1e-6)
    aiio = load_flight("aiio", _write("aiio_hdf5", tmp_path, tr))
    assert aiio.rotor_kind == "speed" and np.allclose(aiio.rotor, 0.6 * fx.AIIO_MAX_RPM * 2 * np.pi / 60, rtol=1e-9)


def test_nanobench_trims_motors_off_and_extrapolated_tail(tmp_path: Path) -> None:
    tr = fx.hover(n=300)
    rows = fx.nanobench_rows(tr, off_rows=20)
    # the IMU log ends 30 rows early: the resampler extrapolated it linearly (as in real files)
    k = 300 - 50
    slope = rows[k - 1, 11:17] - rows[k - 2, 11:17]
    rows[k:, 11:17] = rows[k - 1, 11:17] + slope * np.arange(1, 51)[:, None]
    flight = load_flight("nanobench", fx.write_nanobench(tmp_path / "x.csv", tr, rows=rows))
    assert flight.metadata["trimmed_head_rows"] == 20
    # rows k-2, k-1 define the extrapolated line; the cut keeps up to k-2 (one row conservative)
    assert len(flight) == k - 1 - 20
    assert flight.metadata["imu_extrapolated_rows"] == 300 - (k - 1)
    assert (flight.rotor > 0).all()


def test_nanobench_motors_never_on_is_unusable_and_skipped_by_directory(tmp_path: Path) -> None:
    from velobins_data.datasets import UnusableFlightError

    fx.write_nanobench(tmp_path / "good.csv", fx.hover())
    bad = fx.write_nanobench(tmp_path / "bad.csv", fx.hover(), off_rows=200)
    with pytest.raises(UnusableFlightError, match=r"bad\.csv"):
        load_flight("nanobench", bad)
    with pytest.warns(UserWarning, match=r"bad\.csv"):
        flights = load_directory("nanobench", tmp_path)
    assert [s.name for s in flights] == ["good"]


def test_tiiratm_column_major_rotation(tmp_path: Path) -> None:
    """A non-symmetric rotation read row-major would be transposed (= inverted): check it is not."""
    from scipy.spatial.transform import Rotation

    tr = fx.hover()
    rot = Rotation.from_euler("zyx", [70, 10, -5], degrees=True)
    tr.q = np.tile(rot.as_quat(), (len(tr.t), 1))
    tr.acc = fx.imu_noise(rot.inv().apply(np.tile([0, 0, fx.G], (len(tr.t), 1))), tr.gyro)[0]
    flight = load_flight("tiiratm", _write("tiiratm", tmp_path, tr))
    assert np.allclose(Rotation.from_quat(flight.q[0]).as_matrix(), rot.as_matrix(), atol=1e-6)


def test_tiiratm_frd_imu_is_converted_to_flu(tmp_path: Path) -> None:
    tr = fx.hover()
    tr.gyro[:, 2] = 0.5  # yaw rate left (FLU)
    flight = load_flight("tiiratm", fx.write_tiiratm(tmp_path / "f_500hz_freq_sync.csv", tr, frd=True))
    assert flight.metadata["body_frame_in_file"] == "frd"
    assert np.allclose(flight.acc.mean(0), [0, 0, fx.G], atol=1e-5)  # fx.imu_noise: 1e-5 m/s² per sample
    assert np.allclose(flight.gyro[:, 2], 0.5)


def test_aiio_mcap_time_aligned_on_imu_stamps(tmp_path: Path) -> None:
    tr = fx.yaw90_forward_x(n=200)
    flight = load_flight("aiio", fx.write_aiio_mcap(tmp_path / "bag", tr, odom_rate_div=3, esc_rate_div=5))
    assert np.all(np.isin(flight.t, tr.t))  # output rows are IMU stamps
    assert flight.t[-1] <= tr.t[195] + 1e-9  # clipped to the last ESC stamp (every 5th)
    i = np.searchsorted(tr.t, flight.t)
    assert np.allclose(flight.p, tr.p[i], atol=1e-6)  # positions interpolated between odometry msgs
    assert flight.metadata["velocity_frame"] == "body"


# ------------------------------------------------------------------ malformed inputs, every adapter
def _malform_csv(path: Path, how: str, column: str) -> None:
    import gzip

    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as fh:
        lines = fh.read().splitlines()
    header = lines[0].split(",")
    j = header.index(column)
    if how == "missing":
        lines = [",".join(c for k, c in enumerate(line.split(",")) if k != j) for line in lines]
    elif how == "nan":
        cells = lines[50].split(",")
        cells[j] = "nan"
        lines[50] = ",".join(cells)
    elif how == "unsorted":
        lines = [lines[0], *reversed(lines[1:])]
    elif how == "empty":
        lines = []
    with opener(path, "wt") as fh:
        fh.write("\n".join(lines) + ("\n" if lines else ""))


CSV_ADAPTERS = {"nanobench": "imu_acc_z", "tiiratm": "accel_z", "neurobem": "acc z"}
ROTOR_COLUMN = {"nanobench": "motor_motor_m4", "tiiratm": "thrust[3]", "neurobem": "mot 4"}


@pytest.mark.parametrize("adapter", list(CSV_ADAPTERS))
@pytest.mark.parametrize("how", ["missing", "nan", "unsorted", "empty", "rotor_count"])
def test_malformed_csv_inputs_raise_naming_file_and_column(adapter: str, how: str, tmp_path: Path) -> None:
    path = _write(adapter, tmp_path, fx.hover())
    column = ROTOR_COLUMN[adapter] if how == "rotor_count" else CSV_ADAPTERS[adapter]
    _malform_csv(path, "missing" if how == "rotor_count" else how, column)
    with pytest.raises(DatasetError) as err:
        load_flight(adapter, path)
    msg = str(err.value)
    assert path.name in msg
    expected = {"missing": column, "nan": column, "unsorted": "not sorted", "empty": "empty", "rotor_count": column}
    assert expected[how] in msg
    if how == "nan":
        assert err.value.row == 49


def test_aiio_hdf5_malformed(tmp_path: Path) -> None:
    import h5py

    good = fx.write_aiio_hdf5(tmp_path / "data.hdf5", fx.hover())
    cases = {
        "missing": lambda f: f.__delitem__("traj_target"),
        "rotor_spd": lambda f: (f.__delitem__("rotor_spd"), f.create_dataset("rotor_spd", data=np.ones((400, 3)))),
        "nan": lambda f: f["accel_calib"].__setitem__((10, 2), np.nan),
        "unsorted": lambda f: f["ts"].__setitem__(slice(None), f["ts"][:][::-1]),
        "empty": lambda f: [f.__delitem__(k) for k in list(f.keys())],
    }
    expected = {"missing": "traj_target", "rotor_spd": "rotor count", "nan": "accel_calib", "unsorted": "not sorted"}
    expected["empty"] = "missing HDF5"
    for how, edit in cases.items():
        path = tmp_path / f"{how}.hdf5"
        path.write_bytes(good.read_bytes())
        with h5py.File(path, "r+") as f:
            edit(f)
        with pytest.raises(DatasetError, match=expected[how]) as err:
            load_flight("aiio", path)
        assert path.name in str(err.value)
    (tmp_path / "zero.hdf5").write_bytes(b"")
    with pytest.raises(DatasetError, match=r"zero\.hdf5"):
        load_flight("aiio", tmp_path / "zero.hdf5")


def test_aiio_mcap_wrong_rotor_count_and_missing_topic(tmp_path: Path) -> None:
    bag = fx.write_aiio_mcap(tmp_path / "bag3", fx.hover(n=50), n_esc=3)
    with pytest.raises(DatasetError, match="wrong rotor count"):
        load_flight("aiio", bag)
    with pytest.raises(DatasetError, match="is a directory but not a ROS 2 bag"):
        (tmp_path / "empty").mkdir()
        load_flight("aiio", tmp_path / "empty")


def test_dataset_error_is_a_sequence_error(tmp_path: Path) -> None:
    with pytest.raises(FlightError):
        load_flight("csv", tmp_path / "nope.csv")
    with pytest.raises(ValueError, match="unknown dataset kind"):
        load_flight("euroc", tmp_path / "x")
