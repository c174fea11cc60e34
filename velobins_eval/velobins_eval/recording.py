"""The MCAP recording of an evaluated flight: estimate, network output, ground truth and NEES as ROS 2 topics.

Written with `rosbags` as a rosbag2 folder (``metadata.yaml`` + ``<folder>.mcap``, zstd chunks), the
message definitions embedded in the MCAP as ``ros2msg`` schemas, so Foxglove, ``ros2 bag play``,
``rosbags`` and ``evo`` (``evo_ape bag2 <folder> /ground_truth/odometry /velobins/ekf/update``) read it
with no VeloBins install. The topics and frames are the live graph's (docs/ros_interface.md):

* ``/velobins/odometry`` — ``nav_msgs/Odometry``, the fused state at the filter's full rate: pose of
  ``base_link`` in ``odom``, twist in ``base_link`` (no covariance: the offline run keeps none);
* ``/velobins/ekf/update`` — ``nav_msgs/Odometry`` right after each velocity update (the scored
  samples): pose, world-frame twist (``child_frame_id`` = ``odom``) with the velocity covariance;
* ``/velobins/twist`` — ``geometry_msgs/TwistWithCovarianceStamped``, the network's body velocity
  with its variances (absent for methods without one);
* ``/ground_truth/odometry`` — ``nav_msgs/Odometry`` as the flight's bags carry it (twist in the body);
* ``/velobins/nees`` — ``std_msgs/Float64``, the per-update NEES of the fused velocity (3 dof; bounds
  [0.216, 9.348]); a Float64 has no header, so its stamp is the message's log time.

Every message is logged at its header stamp. As in :mod:`velobins_data.bag`, a flight whose clock
starts below 1 s is shifted by :data:`~velobins_data.bag.STAMP_OFFSET` (ROS time zero means "unset");
the shift is stored in the bag's custom metadata (``velobins.recording``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
from rosbags.rosbag2 import CompressionFormat, CompressionMode, StoragePlugin, Writer
from scipy.spatial.transform import Rotation

from velobins_common.outputs import atomic_path
from velobins_data.bag import FRAME_BODY, FRAME_WORLD, MIN_STAMP, STAMP_OFFSET, TOPIC_GT, typestore

from .scoring import FlightRecord, GroundTruth

TOPIC_ODOMETRY = "/velobins/odometry"
TOPIC_UPDATE = "/velobins/ekf/update"
TOPIC_TWIST = "/velobins/twist"
TOPIC_NEES = "/velobins/nees"
META_KEY = "velobins.recording"
TYPES = {
    TOPIC_ODOMETRY: "nav_msgs/msg/Odometry",
    TOPIC_UPDATE: "nav_msgs/msg/Odometry",
    TOPIC_TWIST: "geometry_msgs/msg/TwistWithCovarianceStamped",
    TOPIC_GT: "nav_msgs/msg/Odometry",
    TOPIC_NEES: "std_msgs/msg/Float64",
}
"""Topic -> message type of a recording (every topic is declared, also one without messages)."""


def write_recording(path: str | Path, record: FlightRecord, gt: GroundTruth, nees: np.ndarray) -> int:
    """Write the recording of ``record`` (and its full-rate ground truth ``gt``) as a rosbag2 folder ``path``.

    Written into a temporary folder and renamed into place when complete; an earlier recording at
    ``path`` is replaced only then. Returns the number of messages.
    """
    path = Path(path)
    offset = STAMP_OFFSET if min(record.t[0], record.t_traj[0], gt.t[0]) < MIN_STAMP else 0.0
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path, directory=True) as tmp:
        tmp.mkdir()
        inner = tmp / path.name  # the storage file takes its folder's name: written one level down, moved up
        count = _write(inner, record, gt, nees, offset)
        for entry in inner.iterdir():
            os.replace(entry, tmp / entry.name)
        inner.rmdir()
    return count


class _Msgs:
    """Message constructors of the typestore, shortened."""

    def __init__(self) -> None:
        self.store = typestore()
        t = self.store.types
        self.T = t
        self.Header, self.Time = t["std_msgs/msg/Header"], t["builtin_interfaces/msg/Time"]
        self.Vector3, self.Quaternion, self.Point = (
            t["geometry_msgs/msg/Vector3"],
            t["geometry_msgs/msg/Quaternion"],
            t["geometry_msgs/msg/Point"],
        )

    def header(self, stamp: float, frame: str):
        ns = round(stamp * 1e9)
        return self.Header(stamp=self.Time(sec=ns // 1_000_000_000, nanosec=ns % 1_000_000_000), frame_id=frame)

    def vec(self, v) -> object:
        return self.Vector3(x=float(v[0]), y=float(v[1]), z=float(v[2]))

    def odometry(self, stamp: float, child: str, p, q, twist, twist_cov: np.ndarray):
        t = self.T
        return t["nav_msgs/msg/Odometry"](
            header=self.header(stamp, FRAME_WORLD),
            child_frame_id=child,
            pose=t["geometry_msgs/msg/PoseWithCovariance"](
                pose=t["geometry_msgs/msg/Pose"](
                    position=self.Point(x=float(p[0]), y=float(p[1]), z=float(p[2])),
                    orientation=self.Quaternion(x=float(q[0]), y=float(q[1]), z=float(q[2]), w=float(q[3])),
                ),
                covariance=np.zeros(36),
            ),
            twist=t["geometry_msgs/msg/TwistWithCovariance"](
                twist=t["geometry_msgs/msg/Twist"](linear=self.vec(twist), angular=self.vec((0.0, 0.0, 0.0))),
                covariance=twist_cov,
            ),
        )


def _cov6(cov3: np.ndarray | None) -> np.ndarray:
    out = np.zeros((6, 6))
    if cov3 is not None:
        out[:3, :3] = cov3
    return out.reshape(-1)


def _write(path: Path, record: FlightRecord, gt: GroundTruth, nees: np.ndarray, offset: float) -> int:
    """The messages of the module docstring, written in stamp order; returns their count."""
    m = _Msgs()
    store, types = m.store, m.T
    n_traj, n_upd = record.t_traj.size, record.t.size
    identity = np.tile([0.0, 0.0, 0.0, 1.0], (max(n_traj, n_upd), 1))
    q_traj = record.q_traj if record.q_traj is not None else identity[:n_traj]
    q_upd = record.q_fused if record.q_fused is not None else identity[:n_upd]
    has_v_traj = record.v_traj is not None and bool(np.all(np.isfinite(record.v_traj)))
    v_body_traj = Rotation.from_quat(q_traj).inv().apply(record.v_traj) if has_v_traj else np.zeros((n_traj, 3))
    has_vel = bool(np.all(np.isfinite(record.v_fused)))
    has_cov = has_vel and bool(np.all(np.isfinite(record.cov_fused)))
    has_net = bool(np.all(np.isfinite(record.v_net)) and np.all(np.isfinite(record.var_net)))
    v_gt_body = Rotation.from_quat(gt.q).inv().apply(gt.v)
    zero3 = (0.0, 0.0, 0.0)

    # (stamp, topic, message) of every stream; sorted by stamp (stable: topic order at equal stamps)
    events: list[tuple[float, str, object]] = []
    for i, t in enumerate(gt.t.tolist()):
        events.append((t, TOPIC_GT, m.odometry(t + offset, FRAME_BODY, gt.p[i], gt.q[i], v_gt_body[i], _cov6(None))))
    for i, t in enumerate(record.t_traj.tolist()):
        odom = m.odometry(t + offset, FRAME_BODY, record.p_traj[i], q_traj[i], v_body_traj[i], _cov6(None))
        events.append((t, TOPIC_ODOMETRY, odom))
    for i, t in enumerate(record.t.tolist()):
        vel = record.v_fused[i] if has_vel else zero3
        cov = _cov6(record.cov_fused[i] if has_cov else None)
        events.append((t, TOPIC_UPDATE, m.odometry(t + offset, FRAME_WORLD, record.p_fused[i], q_upd[i], vel, cov)))
        if np.isfinite(nees[i]):
            events.append((t, TOPIC_NEES, types["std_msgs/msg/Float64"](data=float(nees[i]))))
        if has_net:
            twist = types["geometry_msgs/msg/Twist"](linear=m.vec(record.v_net[i]), angular=m.vec(zero3))
            events.append(
                (
                    t,
                    TOPIC_TWIST,
                    types["geometry_msgs/msg/TwistWithCovarianceStamped"](
                        header=m.header(t + offset, FRAME_BODY),
                        twist=types["geometry_msgs/msg/TwistWithCovariance"](
                            twist=twist, covariance=_cov6(np.diag(record.var_net[i]))
                        ),
                    ),
                )
            )
    events.sort(key=lambda e: e[0])

    writer = Writer(path, version=9, storage_plugin=StoragePlugin.MCAP)
    writer.set_compression(CompressionMode.STORAGE, CompressionFormat.ZSTD)  # zstd chunks inside the MCAP
    meta = {"flight": record.flight, "method": record.method, "stamp_offset": offset}
    writer.set_custom_data(META_KEY, json.dumps(meta))
    with writer:
        conns = {topic: writer.add_connection(topic, TYPES[topic], typestore=store) for topic in TYPES}
        for stamp, topic, msg in events:
            conn = conns[topic]
            writer.write(conn, round((stamp + offset) * 1e9), store.serialize_cdr(msg, conn.msgtype))
    return len(events)
