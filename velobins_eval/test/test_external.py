"""What ``velobins score`` reads (velobins_eval.external): ground truth from TUM / EuRoC, odometry topics of bags."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scipy.spatial.transform import Rotation

from velobins_eval.estimates import EstimateError, write_tum
from velobins_eval.external import clip_to_ground_truth, read_estimate, read_ground_truth, read_odometry_topic
from velobins_eval.recording import write_recording
from velobins_eval.scoring import FlightRecord, GroundTruth


def _truth(n: int = 200) -> GroundTruth:
    t = 100.0 + 0.01 * np.arange(n)
    p = np.stack([np.sin(t), np.cos(t), 0.5 * t], axis=1)
    v = np.stack([np.cos(t), -np.sin(t), 0.5 + 0 * t], axis=1)
    q = Rotation.from_euler("zyx", np.stack([t, 0.1 * np.sin(t), 0 * t], axis=1)).as_quat()
    return GroundTruth(t, p, q, v)


def test_tum_ground_truth_takes_its_velocity_from_the_positions(tmp_path: Path) -> None:
    t = np.arange(0.0, 2.0, 0.01)
    p = np.stack([3.0 * t, -t, 0.2 * t], axis=1)  # constant velocity (3, -1, 0.2): central differences are exact
    write_tum(tmp_path / "gt.tum", t, p, np.tile([0.0, 0.0, 0.0, 1.0], (t.size, 1)))
    gt = read_ground_truth(tmp_path / "gt.tum", "tum")
    assert gt.name == "gt"
    np.testing.assert_allclose(gt.truth.v, np.tile([3.0, -1.0, 0.2], (t.size, 1)), atol=1e-9)


def test_euroc_ground_truth_stamps_in_ns_quaternion_w_first(tmp_path: Path) -> None:
    truth = _truth()
    folder = tmp_path / "MH_01_easy" / "mav0" / "state_groundtruth_estimate0"
    folder.mkdir(parents=True)
    head = "#timestamp, p_RS_R_x [m], p_RS_R_y [m], p_RS_R_z [m], q_RS_w [], q_RS_x [], q_RS_y [], q_RS_z [], "
    head += "v_RS_R_x [m s^-1], v_RS_R_y [m s^-1], v_RS_R_z [m s^-1], b_w_RS_S_x [rad s^-1]"
    lines = [head]
    for i in range(truth.t.size):
        q = truth.q[i]
        row = [round(float(truth.t[i]) * 1e9), *truth.p[i], q[3], q[0], q[1], q[2], *truth.v[i], 0.0]
        lines.append(",".join(str(x) for x in row))
    (folder / "data.csv").write_text("\n".join(lines) + "\n")
    gt = read_ground_truth(tmp_path / "MH_01_easy", "euroc")  # the sequence folder: the file is found in it
    assert gt.name == "MH_01_easy"
    np.testing.assert_allclose(gt.truth.t, truth.t, atol=1e-6)
    np.testing.assert_allclose(gt.truth.q, truth.q, atol=1e-12)
    np.testing.assert_allclose(gt.truth.v, truth.v)
    np.testing.assert_allclose(gt.truth.p, truth.p)
    (folder / "data.csv").write_text(head.replace("q_RS_w []", "qw") + "\n")
    with pytest.raises(EstimateError, match="field 'q_RS_w': missing column"):
        read_ground_truth(folder / "data.csv", "euroc")


def test_odometry_topics_of_a_bag_body_and_world_twist(tmp_path: Path) -> None:
    """The recording's full-rate odometry (twist in base_link) and its updates (twist in odom, with covariance)."""
    truth = _truth()
    n = truth.t.size
    rng = np.random.default_rng(0)
    a = rng.normal(size=(n, 3, 3))
    rec = FlightRecord(
        "f", "m", truth.t, rng.normal(size=(n, 3)), rng.uniform(0.1, 1, (n, 3)), truth.p + 0.1, truth.v + 0.2,
        a @ a.transpose(0, 2, 1), truth.t, truth.p + 0.1, q_fused=truth.q, q_traj=truth.q, v_traj=truth.v + 0.2,
    )  # fmt: skip
    write_recording(tmp_path / "rec", rec, truth, np.ones(n))
    full = read_odometry_topic(tmp_path / "rec", "/velobins/odometry", "f", "full")
    np.testing.assert_allclose(full.v_fused, rec.v_traj, atol=1e-12)  # body twist rotated back to the world
    assert np.isnan(full.cov_fused).all()  # all-zero covariance: none given
    upd = read_estimate(tmp_path / "rec", "bag", "f", "upd", topic="/velobins/ekf/update")
    np.testing.assert_allclose(upd.t, rec.t, atol=1e-6)
    np.testing.assert_array_equal(upd.p_fused, rec.p_fused)
    np.testing.assert_array_equal(upd.v_fused, rec.v_fused)
    np.testing.assert_array_equal(upd.cov_fused, rec.cov_fused)
    with pytest.raises(
        ValueError, match=r"no topic /odom; the bag has .*/velobins/ekf/update \(nav_msgs/msg/Odometry\)"
    ):
        read_odometry_topic(tmp_path / "rec", "/odom", "f", "m")
    with pytest.raises(
        ValueError, match="topic /velobins/nees is std_msgs/msg/Float64, expected nav_msgs/msg/Odometry"
    ):
        read_odometry_topic(tmp_path / "rec", "/velobins/nees", "f", "m")


def test_samples_outside_the_ground_truth_are_dropped_and_counted() -> None:
    truth = _truth()
    t = truth.t[0] - 0.5 + 0.01 * np.arange(150)  # starts 0.5 s early
    n = t.size
    nan3 = np.full((n, 3), np.nan)
    p = np.zeros((n, 3))
    rec = FlightRecord("f", "m", t, nan3, nan3, p, nan3, np.full((n, 3, 3), np.nan), t, p)
    clipped, dropped = clip_to_ground_truth(rec, truth)
    assert dropped == int((t < truth.t[0]).sum()) > 0 and clipped.t[0] >= truth.t[0] and clipped.t.size == n - dropped
    rec.t = rec.t_traj = t + 1e6  # another clock
    with pytest.raises(ValueError, match="same clock"):
        clip_to_ground_truth(rec, truth)
