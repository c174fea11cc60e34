"""The public API callers use: VelocityEkf outputs and the filter parameters from ROS YAML files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from velobins_ekf.config import EkfConfig
from velobins_ekf.ekf import BG, NavState
from velobins_ekf.params import load_filter_config
from velobins_ekf.runner import VelocityEkf


def _filter() -> VelocityEkf:
    f = VelocityEkf(EkfConfig())
    state = NavState.from_pose(np.array([0.1, 0.2, 0.3, 0.9]), [1.0, 0.5, 0.0], [0.0, 0.0, 1.0])
    state.gyro_bias[:] = (0.01, -0.02, 0.03)
    f.initialize(0.0, state)
    for k in range(1, 40):
        f.add_imu(k * 1e-3, [0.1, 0.2, 9.8], [0.3, -0.1, 0.2])
    return f


def test_angular_rate_and_twist_covariance() -> None:
    f = _filter()
    gyro = np.array([0.3, -0.1, 0.2])
    np.testing.assert_allclose(f.angular_rate(gyro), gyro - f.state.gyro_bias)
    dt = 2e-3
    tw = f.twist_covariance(dt)
    np.testing.assert_allclose(tw[0:3, 0:3], f.twist_covariance_body())
    expected = f.covariance[BG, BG] + np.eye(3) * EkfConfig().gyro_noise_density ** 2 / dt
    np.testing.assert_allclose(tw[3:6, 3:6], expected, rtol=1e-12)
    assert not np.any(tw[0:3, 3:6]) and not np.any(tw[3:6, 0:3])


def _params(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "filter.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_filter_config_from_ros_parameter_files(tmp_path: Path) -> None:
    a = _params(tmp_path, "velobins_ekf:\n  ros__parameters:\n    filter:\n      init_sigma_vel: 0.2\n")
    b = tmp_path / "b.yaml"
    b.write_text("velobins_ekf:\n  ros__parameters:\n    filter:\n      gate_enabled: true\n", encoding="utf-8")
    cfg = load_filter_config([a, b])
    assert cfg.init_sigma_vel == 0.2 and cfg.gate_enabled is True
    assert load_filter_config(None) == EkfConfig()


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("velobins_ekf: [unclosed\n", ("filter.yaml", "YAML")),
        ("velobins_ekf:\n  ros__parameters:\n    filter:\n      acc_noise_density: high\n", ("acc_noise_density",)),
        ("velobins_ekf:\n  ros__parameters:\n    filter:\n      gate_enabled: 1\n", ("gate_enabled", "bool")),
        ("velobins_ekf:\n  ros__parameters:\n    filter:\n      no_such: 1\n", ("no_such",)),
        ("velobins_ekf:\n  ros__parameters:\n    filter:\n      init_sigma_vel: -1\n", ("init_sigma_vel",)),
        ("velobins_ekf:\n  ros__parameters:\n    filter: 3\n", ("mapping",)),
    ],
)
def test_bad_parameter_files_name_file_and_key(tmp_path: Path, text: str, words: tuple[str, ...]) -> None:
    path = _params(tmp_path, text)
    with pytest.raises(ValueError) as info:
        load_filter_config([path])
    assert all(w in str(info.value) for w in (str(path), *words)), info.value


def test_missing_parameter_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"nope\.yaml"):
        load_filter_config([tmp_path / "nope.yaml"])


def test_write_pose_copies_the_state() -> None:
    f = _filter()
    pos, rot, vel = np.empty(3), np.empty((3, 3)), np.empty(3)
    f.write_pose(pos, rot, vel)
    st = f.state
    np.testing.assert_array_equal(pos, st.pos)
    np.testing.assert_array_equal(rot, st.rot)
    np.testing.assert_array_equal(vel, st.vel)
    pos[:] = 0.0
    assert np.all(f.state.pos == st.pos)  # the filter's own arrays are untouched


def test_marked_poses_equal_the_state_read_after_each_sample() -> None:
    """``mark_pose`` rows (written later, from the block scan) equal ``write_pose`` right after each
    sample, across updates, short queues and a late measurement (which resets the core)."""
    rng = np.random.default_rng(5)
    n = 300
    t = 0.04 + np.arange(1, n + 1) * 1e-3
    acc = rng.normal((0.0, 0.0, 9.81), 0.5, (n, 3))
    gyro = rng.normal(0.0, 0.5, (n, 3))
    meas = {i: t[i] - 4e-4 for i in (37, 40, 45, 200)} | {260: 0.19}  # sample -> stamp (260: late)
    marked, read = _filter(), _filter()
    pos, rot, vel = np.zeros((n, 3)), np.zeros((n, 3, 3)), np.zeros((n, 3))
    ref_pos, ref_rot, ref_vel = np.zeros((n, 3)), np.zeros((n, 3, 3)), np.zeros((n, 3))
    marked.record_poses(pos, rot, vel)
    for i in range(n):
        for f in (marked, read):
            if i in meas:
                f.add_velocity(meas[i], [1.0, 0.5, 0.0], np.eye(3) * 0.01)
            f.add_imu(t[i], acc[i], gyro[i])
        marked.mark_pose(i)
        read.write_pose(ref_pos[i], ref_rot[i], ref_vel[i])
        if i % 97 == 0:
            _ = marked.state  # an occasional read: a short queue takes the one-interval path
    _ = marked.state
    np.testing.assert_allclose(pos, ref_pos, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(rot, ref_rot, atol=1e-12)
    np.testing.assert_allclose(vel, ref_vel, rtol=1e-12, atol=1e-12)
    assert marked.stats.meas_late == read.stats.meas_late == 1
