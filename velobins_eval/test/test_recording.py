"""The MCAP recording of an evaluated flight (velobins_eval.recording), read back by rosbags and evo.

Read with rosbags' ``AnyReader`` and no type store: every message is decoded from the schemas embedded in
the MCAP, so Foxglove and any ROS 2 tool read it without the project's message packages. evo reads the
same folder as a ROS 2 bag and gets the report's ATE.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from velobins_eval.recording import TOPIC_NEES, TOPIC_ODOMETRY, TOPIC_TWIST, TOPIC_UPDATE, TYPES

FLIGHT = "B3_figure8_medium_rep1"


def _folder(report: Path, method: str) -> Path:
    index = json.loads((report / "config.json").read_text())["estimates"]
    return report / index[method][FLIGHT]


def _read(recording: Path) -> tuple[dict, dict[str, list]]:
    from rosbags.highlevel import AnyReader

    with AnyReader([recording]) as reader:  # no default type store: the bag's own definitions decode it
        conns = {c.topic: c for c in reader.connections}
        messages: dict[str, list] = {topic: [] for topic in conns}
        for conn, stamp, raw in reader.messages():
            messages[conn.topic].append((stamp, reader.deserialize(raw, conn.msgtype)))
    return conns, messages


@pytest.mark.parametrize("method", ["G+H^B", "imu-only"])
def test_recording_carries_its_schemas_and_the_reports_samples(demo_evaluation: Path, method: str) -> None:
    from velobins_data.datasets import load_flight
    from velobins_eval.demo import DEMO_DATA
    from velobins_eval.estimates import read_csv_table

    folder = _folder(demo_evaluation, method)
    mcap = folder / "recording" / "recording.mcap"
    assert mcap.is_file() and mcap.read_bytes()[:8] == b"\x89MCAP0\r\n"  # an MCAP file (magic), openable as is
    conns, messages = _read(folder / "recording")
    assert {t: c.msgtype for t, c in conns.items()} == TYPES
    for conn in conns.values():
        assert conn.msgdef.format.name == "MSG" and conn.msgdef.data.strip(), conn.topic  # ros2msg schema embedded

    header, rows = read_csv_table(folder / "updates.csv")
    col = {name: i for i, name in enumerate(header)}
    updates = messages[TOPIC_UPDATE]
    assert len(updates) == rows.shape[0]
    stamps = np.array([m.header.stamp.sec + m.header.stamp.nanosec * 1e-9 for _, m in updates])
    np.testing.assert_allclose(stamps, rows[:, col["t"]], rtol=0, atol=1e-6)
    pos = np.array([[m.pose.pose.position.x, m.pose.pose.position.y, m.pose.pose.position.z] for _, m in updates])
    np.testing.assert_array_equal(pos, rows[:, [col["px"], col["py"], col["pz"]]])
    assert all(m.child_frame_id == m.header.frame_id == "odom" for _, m in updates)  # world-frame twist

    seq = load_flight("nanobench", DEMO_DATA / f"{FLIGHT}.csv.gz")
    assert len(messages["/ground_truth/odometry"]) == len(seq)  # ground truth at its full rate
    assert len(messages[TOPIC_ODOMETRY]) == len(seq)  # the fused state at every IMU sample
    assert all(stamp == round(t * 1e9) for (stamp, _), t in zip(updates, rows[:, 0], strict=True))  # log = header
    if method == "imu-only":  # no network, no covariance: those topics are declared but empty
        assert messages[TOPIC_TWIST] == [] and messages[TOPIC_NEES] == []
    else:
        nees = np.array([m.data for _, m in messages[TOPIC_NEES]])
        np.testing.assert_array_equal(nees, rows[:, col["nees"]])
        twist = messages[TOPIC_TWIST]
        assert len(twist) == rows.shape[0] and twist[0][1].header.frame_id == "base_link"
        var = np.array([np.asarray(m.twist.covariance).reshape(6, 6).diagonal()[:3] for _, m in twist])
        np.testing.assert_array_equal(var, rows[:, [col["net_var_x"], col["net_var_y"], col["net_var_z"]]])


def test_evo_reads_the_recording_as_a_ros2_bag(demo_evaluation: Path) -> None:
    from evo.core import metrics as evo_metrics
    from evo.core import sync
    from evo.tools import file_interface
    from rosbags.rosbag2 import Reader

    with Reader(_folder(demo_evaluation, "G+H^B") / "recording") as reader:
        ref = file_interface.read_bag_trajectory(reader, "/ground_truth/odometry")
        est = file_interface.read_bag_trajectory(reader, TOPIC_UPDATE)
    ref, est = sync.associate_trajectories(ref, est, max_diff=1e-4)  # the updates lie on IMU (= ground-truth) stamps
    ape = evo_metrics.APE(evo_metrics.PoseRelation.translation_part)
    ape.process_data((ref, est))
    ate = json.loads((demo_evaluation / "metrics.json").read_text())["G+H^B"]["flights"][FLIGHT]["ate"]
    assert ape.get_statistic(evo_metrics.StatisticsType.rmse) == pytest.approx(ate, abs=1e-6)
