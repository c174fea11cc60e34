"""Frames of the AI-IO (velocity) and TII-RATM (IMU axes vs attitude) adapters (issue 16 audit).

Each test writes a manoeuvring flight (:func:`fixtures_datasets.banked_circle`: banked, yawing,
so body and world velocities differ and frame errors show in the gravity residual) the way the
dataset stores it, loads it, and checks the Flight against the truth and the validator.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from scipy.spatial.transform import Rotation

sys.path.insert(0, str(Path(__file__).parent))
import fixtures_datasets as fx

from velobins_data.datasets import DatasetError, load_flight
from velobins_data.datasets.aiio import load_aiio_hdf5
from velobins_data.datasets.tiiratm import load_tiiratm
from velobins_data.validate import PlausibilityError, check_flight

TII_NAME = "flight-01a-ellipse_500hz_freq_sync.csv"


def _same_rotation(q1: np.ndarray, q2: np.ndarray) -> bool:
    return bool(np.allclose((Rotation.from_quat(q1).inv() * Rotation.from_quat(q2)).magnitude(), 0.0, atol=1e-6))


# ------------------------------------------------------------------------------------ AI-IO
def test_aiio_hdf5_velocity_is_body_by_default(tmp_path: Path) -> None:
    """traj_target[7:10] is body velocity (AI-IO datasets.py: vb0): world v = R · v_body."""
    tr = fx.banked_circle()
    v_body = Rotation.from_quat(tr.q).inv().apply(tr.v)
    assert np.abs(v_body - tr.v).max() > 1.0  # the flight tells the frames apart
    path = fx.write_aiio_hdf5(tmp_path / "data.hdf5", tr)  # AI-IO layout: body velocity
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        flight = load_flight("aiio", path)
    np.testing.assert_allclose(flight.v, Rotation.from_quat(flight.q).apply(v_body), atol=1e-9)
    np.testing.assert_allclose(flight.v, tr.v, atol=1e-9)
    assert flight.metadata["velocity_frame"] == "body"
    check_flight(flight)  # the validator sees a consistent flight


def test_aiio_hdf5_reading_body_as_world_is_caught(tmp_path: Path) -> None:
    """The old default (world) would hand body velocity on as world: the validator rejects it."""
    path = fx.write_aiio_hdf5(tmp_path / "data.hdf5", fx.banked_circle())
    flight = load_aiio_hdf5(path, velocity="world")
    with pytest.raises(PlausibilityError, match=r"‖R·f"):
        check_flight(flight)


def test_aiio_hdf5_explicit_world_and_auto(tmp_path: Path) -> None:
    tr = fx.banked_circle()
    world = fx.write_aiio_hdf5(tmp_path / "world.hdf5", tr, velocity_in_body=False)
    flight = load_aiio_hdf5(world, velocity="world")
    np.testing.assert_allclose(flight.v, tr.v, atol=1e-9)
    assert flight.metadata["velocity_frame"] == "world"
    assert load_aiio_hdf5(world, velocity="auto").metadata["velocity_frame"] == "world"
    with pytest.warns(UserWarning, match=r"world\.hdf5.*world velocity"):
        load_aiio_hdf5(world)  # default body, but the data plainly says world
    body = fx.write_aiio_hdf5(tmp_path / "body.hdf5", tr)
    assert load_aiio_hdf5(body, velocity="auto").metadata["velocity_frame"] == "body"
    hover = fx.write_aiio_hdf5(tmp_path / "hover.hdf5", fx.hover())  # cannot tell: body
    assert load_aiio_hdf5(hover, velocity="auto").metadata["velocity_frame"] == "body"
    with pytest.raises(DatasetError, match="velocity_frame"):
        load_aiio_hdf5(body, velocity="ned")  # type: ignore[arg-type]


def test_aiio_mcap_twist_is_body(tmp_path: Path) -> None:
    tr = fx.banked_circle(n=300)
    flight = load_flight("aiio", fx.write_aiio_mcap(tmp_path / "bag", tr, odom_rate_div=1, esc_rate_div=1))
    i = np.searchsorted(tr.t, flight.t)
    np.testing.assert_allclose(flight.v, tr.v[i], atol=1e-6)
    assert flight.metadata["velocity_frame"] == "body"


# --------------------------------------------------------------------------------- TII-RATM
@pytest.mark.parametrize(("frd_imu", "frd_att"), [(False, False), (True, False), (True, True), (False, True)])
def test_tiiratm_imu_and_attitude_describe_one_body(tmp_path: Path, frd_imu: bool, frd_att: bool) -> None:
    """Any mix of FRD/FLU IMU axes and attitude body loads as the same FLU flight."""
    tr = fx.banked_circle(n=1500, rate=500.0)
    path = fx.write_tiiratm(tmp_path / TII_NAME, tr, frd=frd_imu, frd_attitude=frd_att)
    flight = load_flight("tiiratm", path)
    assert flight.metadata["body_frame_in_file"] == ("frd" if frd_imu else "flu")
    assert flight.metadata["attitude_frame_in_file"] == ("frd" if frd_att else "flu")
    np.testing.assert_allclose(flight.acc, tr.acc, atol=1e-6)
    np.testing.assert_allclose(flight.gyro, tr.gyro, atol=1e-6)
    assert _same_rotation(flight.q, tr.q)
    world_acc = Rotation.from_quat(flight.q).apply(flight.acc)  # R · f = a + g e_z
    dv_dt = np.gradient(flight.v, flight.t, axis=0)
    np.testing.assert_allclose(world_acc[5:-5], dv_dt[5:-5] + np.array([0.0, 0.0, fx.G]), atol=1e-3)
    assert check_flight(flight).gravity_residual < 0.05


def test_tiiratm_flipping_imu_but_not_attitude_fails_the_validator(tmp_path: Path) -> None:
    """The old conversion (IMU FRD->FLU, drone_rot kept) puts gravity upside down: rejected."""
    tr = fx.banked_circle(n=1500, rate=500.0)
    path = fx.write_tiiratm(tmp_path / TII_NAME, tr, frd=True, frd_attitude=True)
    old = load_tiiratm(path, body_frame="frd", attitude_frame="flu")
    with pytest.raises(PlausibilityError, match="‖R·f"):
        check_flight(old)
    fixed = load_tiiratm(path, body_frame="frd", attitude_frame="frd")
    assert check_flight(fixed).gravity_residual < 0.05


def test_tiiratm_unknown_frame_name(tmp_path: Path) -> None:
    path = fx.write_tiiratm(tmp_path / TII_NAME, fx.hover())
    with pytest.raises(DatasetError, match=r"ellipse_500hz_freq_sync\.csv.*attitude_frame"):
        load_tiiratm(path, attitude_frame="ned")  # type: ignore[arg-type]
