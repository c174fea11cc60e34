"""rosbag2 conversion of flights: :class:`Sequence` <-> bag with the VeloBins topics.

Written with `rosbags` (pure Python, byte-identical CDR to rclpy), so conversion needs no ROS
install. A bag holds (DESIGN.md, "ROS interface"):

* ``/imu`` — ``sensor_msgs/msg/Imu`` in ``base_link``: specific force and angular rate, orientation
  marked unknown (``orientation_covariance[0] = -1``, REP-145);
* ``/rotor_speeds`` — ``velobins_msgs/msg/RotorSpeeds`` with the rotor kind;
* ``/ground_truth/odometry`` — ``nav_msgs/msg/Odometry``: pose of ``base_link`` in ``odom`` (the
  world frame), twist in ``base_link`` as nav_msgs prescribes.

Header stamps are the data's timestamps. ROS treats time zero as "unset", so a flight whose first
stamp is below :data:`MIN_STAMP` (simulated flights start at 0 s) is shifted by
:data:`STAMP_OFFSET`; the shift is stored in the bag's custom metadata and removed on reading, so
the round trip is exact. Sequence metadata travels in the custom metadata too.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from rosbags.rosbag2 import Reader, StoragePlugin, Writer
from rosbags.typesys import Stores, get_types_from_msg, get_typestore
from rosbags.typesys.store import Typestore

from .metrics import interp_columns
from .sequence import Sequence

TOPIC_IMU = "/imu"
TOPIC_ROTOR = "/rotor_speeds"
TOPIC_GT = "/ground_truth/odometry"
FRAME_BODY = "base_link"
FRAME_WORLD = "odom"

MIN_STAMP = 1.0
"""First stamps below this [s] are shifted so that no message carries ROS's "unset" time."""
STAMP_OFFSET = 1000.0
"""Shift [s] applied to flights that start before :data:`MIN_STAMP`."""

ROTOR_MSG = "velobins_msgs/msg/RotorSpeeds"
VELOCITY_MSG = "velobins_msgs/msg/VelocityEstimate"
KIND_RAD_PER_SEC, KIND_RPM, KIND_NORMALIZED = 0, 1, 2
"""Values of RotorSpeeds.kind (one source: velobins_msgs/msg/RotorSpeeds.msg; checked in tests)."""

_META_KEY = "velobins.sequence"


class BagError(ValueError):
    """A bag cannot be read as a VeloBins flight (names the bag and what is missing)."""


def _msg_dir() -> Path:
    """Directory holding the velobins_msgs .msg files (installed share dir, else the source tree)."""
    try:
        from ament_index_python.packages import PackageNotFoundError, get_package_share_directory

        try:
            share = Path(get_package_share_directory("velobins_msgs")) / "msg"
            if share.is_dir():
                return share
        except PackageNotFoundError:
            pass
    except ImportError:
        pass
    src = Path(__file__).resolve().parents[2] / "velobins_msgs" / "msg"
    if not src.is_dir():
        raise FileNotFoundError(
            "velobins_msgs message definitions not found (neither installed nor in the source tree)"
        )
    return src


_TYPESTORE: Typestore | None = None


def typestore() -> Typestore:
    """The ROS 2 Kilted typestore extended with the velobins_msgs types (built once)."""
    global _TYPESTORE
    if _TYPESTORE is None:
        store = get_typestore(Stores.ROS2_KILTED)
        types = {}
        for msg in sorted(_msg_dir().glob("*.msg")):
            types.update(get_types_from_msg(msg.read_text(), f"velobins_msgs/msg/{msg.stem}"))
        store.register(types)
        _TYPESTORE = store
    return _TYPESTORE


def rotor_kind_code(rotor_kind: str) -> int:
    """RotorSpeeds.kind for a Sequence rotor kind."""
    return {"rpm": KIND_RAD_PER_SEC, "pwm": KIND_NORMALIZED}[rotor_kind]


def rotor_kind_name(code: int) -> str:
    """Sequence rotor kind for a RotorSpeeds.kind (RPM streams are converted to rad/s by readers)."""
    return {KIND_RAD_PER_SEC: "rpm", KIND_RPM: "rpm", KIND_NORMALIZED: "pwm"}[code]


def _stamp(store: Typestore, t: float):
    Time = store.types["builtin_interfaces/msg/Time"]
    ns = round(t * 1e9)
    return Time(sec=ns // 1_000_000_000, nanosec=ns % 1_000_000_000)


@dataclass
class BagInfo:
    """What :func:`write_bag` wrote."""

    path: Path
    messages: int
    stamp_offset: float


def write_bag(seq: Sequence, path: str | Path, storage: str = "mcap") -> BagInfo:
    """Write ``seq`` to a new rosbag2 directory ``path`` (must not exist)."""
    path = Path(path)
    if path.exists():
        raise FileExistsError(f"{path}: output bag already exists")
    plugin = {"mcap": StoragePlugin.MCAP, "sqlite3": StoragePlugin.SQLITE3}[storage]
    store = typestore()
    T = store.types
    offset = STAMP_OFFSET if seq.t[0] < MIN_STAMP else 0.0
    cov0 = np.zeros(9)
    imu_ori_cov = np.zeros(9)
    imu_ori_cov[0] = -1.0
    v_body = seq.body_velocity()
    kind = rotor_kind_code(seq.rotor_kind)
    count = 0
    with Writer(path, version=9, storage_plugin=plugin) as writer:
        meta = {"name": seq.name, "rotor_kind": seq.rotor_kind, "stamp_offset": offset, "metadata": seq.metadata}
        writer.set_custom_data(_META_KEY, json.dumps(meta, default=str))
        c_imu = writer.add_connection(TOPIC_IMU, "sensor_msgs/msg/Imu", typestore=store)
        c_rot = writer.add_connection(TOPIC_ROTOR, ROTOR_MSG, typestore=store)
        c_gt = writer.add_connection(TOPIC_GT, "nav_msgs/msg/Odometry", typestore=store)
        Header, Vector3, Quaternion = (
            T["std_msgs/msg/Header"],
            T["geometry_msgs/msg/Vector3"],
            T["geometry_msgs/msg/Quaternion"],
        )
        Point, Pose, Twist = T["geometry_msgs/msg/Point"], T["geometry_msgs/msg/Pose"], T["geometry_msgs/msg/Twist"]
        PoseCov, TwistCov = T["geometry_msgs/msg/PoseWithCovariance"], T["geometry_msgs/msg/TwistWithCovariance"]
        Imu, Odometry, Rotor = T["sensor_msgs/msg/Imu"], T["nav_msgs/msg/Odometry"], T[ROTOR_MSG]
        zero3 = Vector3(x=0.0, y=0.0, z=0.0)
        for i in range(len(seq)):
            t = float(seq.t[i]) + offset
            ns = round(t * 1e9)
            header = Header(stamp=_stamp(store, t), frame_id=FRAME_BODY)
            imu = Imu(
                header=header,
                orientation=Quaternion(x=0.0, y=0.0, z=0.0, w=1.0),
                orientation_covariance=imu_ori_cov,
                angular_velocity=Vector3(x=seq.gyro[i, 0], y=seq.gyro[i, 1], z=seq.gyro[i, 2]),
                angular_velocity_covariance=cov0,
                linear_acceleration=Vector3(x=seq.acc[i, 0], y=seq.acc[i, 1], z=seq.acc[i, 2]),
                linear_acceleration_covariance=cov0,
            )
            writer.write(c_imu, ns, store.serialize_cdr(imu, c_imu.msgtype))
            rotor = Rotor(header=header, kind=kind, speeds=np.ascontiguousarray(seq.rotor[i]))
            writer.write(c_rot, ns, store.serialize_cdr(rotor, c_rot.msgtype))
            q = seq.q[i]
            odom = Odometry(
                header=Header(stamp=header.stamp, frame_id=FRAME_WORLD),
                child_frame_id=FRAME_BODY,
                pose=PoseCov(
                    pose=Pose(
                        position=Point(x=seq.p[i, 0], y=seq.p[i, 1], z=seq.p[i, 2]),
                        orientation=Quaternion(x=q[0], y=q[1], z=q[2], w=q[3]),
                    ),
                    covariance=np.zeros(36),
                ),
                twist=TwistCov(
                    twist=Twist(linear=Vector3(x=v_body[i, 0], y=v_body[i, 1], z=v_body[i, 2]), angular=zero3),
                    covariance=np.zeros(36),
                ),
            )
            writer.write(c_gt, ns, store.serialize_cdr(odom, c_gt.msgtype))
            count += 3
    return BagInfo(path=path, messages=count, stamp_offset=offset)


def _stamp_s(header) -> float:
    return header.stamp.sec + header.stamp.nanosec * 1e-9


def read_bag(path: str | Path) -> Sequence:
    """Read a bag written by :func:`write_bag` (or any bag with the three topics) into a Sequence.

    IMU stamps define ``t``; rotor and ground truth are linearly interpolated onto them when their
    stamps differ (they coincide for bags made by :func:`write_bag`).
    """
    path = Path(path)
    store = typestore()
    imu_rows: list[tuple[float, float, float, float, float, float, float]] = []
    rotor_t: list[float] = []
    rotor_v: list[np.ndarray] = []
    rotor_codes: set[int] = set()
    gt_rows: list[list[float]] = []
    with Reader(path) as reader:
        meta = _custom_metadata(path)
        topics = {c.topic for c in reader.connections}
        missing = {TOPIC_IMU, TOPIC_ROTOR, TOPIC_GT} - topics
        if missing:
            raise BagError(f"{path}: missing topic(s) {sorted(missing)}; found {sorted(topics)}")
        conns = [c for c in reader.connections if c.topic in (TOPIC_IMU, TOPIC_ROTOR, TOPIC_GT)]
        for conn, _, raw in reader.messages(connections=conns):
            msg = store.deserialize_cdr(raw, conn.msgtype)
            if conn.topic == TOPIC_IMU:
                a, w = msg.linear_acceleration, msg.angular_velocity
                imu_rows.append((_stamp_s(msg.header), a.x, a.y, a.z, w.x, w.y, w.z))
            elif conn.topic == TOPIC_ROTOR:
                rotor_t.append(_stamp_s(msg.header))
                speeds = np.asarray(msg.speeds, dtype=np.float64)
                rotor_codes.add(int(msg.kind))
                rotor_v.append(speeds * (2 * np.pi / 60.0) if msg.kind == KIND_RPM else speeds)
            else:
                p, q, v = msg.pose.pose.position, msg.pose.pose.orientation, msg.twist.twist.linear
                gt_rows.append([_stamp_s(msg.header), p.x, p.y, p.z, q.x, q.y, q.z, q.w, v.x, v.y, v.z])
    for topic, rows in ((TOPIC_IMU, imu_rows), (TOPIC_ROTOR, rotor_t), (TOPIC_GT, gt_rows)):
        if len(rows) < 2:
            raise BagError(f"{path}: topic {topic} has {len(rows)} message(s); need at least 2")
    if len(rotor_codes) != 1 or len({r.shape for r in rotor_v}) != 1:
        raise BagError(f"{path}: {TOPIC_ROTOR} changes kind or rotor count within the bag")
    imu = np.array(sorted(imu_rows))
    offset = float(meta.get("stamp_offset", 0.0))
    t = imu[:, 0]
    rt = np.asarray(rotor_t)
    rv = np.stack(rotor_v)
    order = np.argsort(rt, kind="stable")
    rotor = interp_columns(t, rt[order], rv[order])
    gt = np.array(sorted(gt_rows))
    gt_i = interp_columns(t, gt[:, 0], gt[:, 1:])
    q = gt_i[:, 3:7]
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    from scipy.spatial.transform import Rotation

    v_world = Rotation.from_quat(q).apply(gt_i[:, 7:10])
    metadata = dict(meta.get("metadata", {}))
    metadata.setdefault("source", str(path))
    metadata["bag"] = str(path)
    return Sequence(
        name=str(meta.get("name", path.name)),
        t=t - offset,
        acc=imu[:, 1:4],
        gyro=imu[:, 4:7],
        rotor=rotor,
        rotor_kind=str(meta.get("rotor_kind", rotor_kind_name(rotor_codes.pop()))),
        p=gt_i[:, 0:3],
        q=q,
        v=v_world,
        metadata=metadata,
    )


def _custom_metadata(path: Path) -> dict:
    """The VeloBins entry of the bag's ``custom_data`` (rosbag2 metadata.yaml), or {} if absent."""
    import yaml

    info = yaml.safe_load((path / "metadata.yaml").read_text()) or {}
    custom = (info.get("rosbag2_bagfile_information") or {}).get("custom_data") or {}
    return json.loads(custom.get(_META_KEY, "{}"))
