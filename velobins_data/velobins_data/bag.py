"""rosbag2 conversion of flights: :class:`Flight` <-> bag with the VeloBins topics.

Written with `rosbags` (pure Python, byte-identical CDR to rclpy), so conversion needs no ROS
install. A bag holds (docs/design.md, "ROS interface"):

* ``/imu`` — ``sensor_msgs/msg/Imu`` in ``base_link``: specific force and angular rate, orientation
  marked unknown (``orientation_covariance[0] = -1``, REP-145);
* ``/rotor_speeds`` — ``velobins_msgs/msg/RotorSpeeds`` with the rotor kind;
* ``/ground_truth/odometry`` — ``nav_msgs/msg/Odometry``: pose of ``base_link`` in ``odom`` (the
  world frame), twist in ``base_link`` as nav_msgs prescribes.

Header stamps are the data's timestamps. ROS treats time zero as "unset", so a flight whose first
stamp is below :data:`MIN_STAMP` (simulated flights start at 0 s) is shifted by
:data:`STAMP_OFFSET`; the shift is stored in the bag's custom metadata and removed on reading, so
the round trip is exact. Flight metadata travels in the custom metadata too, with a
``format_version`` (:data:`BAG_FORMAT_VERSION`; 2 names the rotor kinds ``speed``/``command``; a bag
without one, written before, says ``rpm``/``pwm``, which are read as the same kinds).

A bag is written whole or not at all: :func:`write_bag` checks every stamp fits a ROS time
(int32 seconds) before it starts, writes into a temporary directory beside the target and renames
it into place only when complete, so a failed or interrupted conversion (Ctrl-C included) leaves
nothing at the output, and ``overwrite=True`` replaces an earlier bag only once the new one is
complete. :func:`read_bag` reports a missing, truncated or corrupt bag as one :class:`BagError`
naming it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from rosbags.rosbag2 import Reader, StoragePlugin, Writer
from rosbags.typesys import Stores, get_types_from_msg, get_typestore
from rosbags.typesys.store import Typestore

from velobins_common.constants import ROTOR_COMMAND, ROTOR_SPEED, RPM_TO_RAD_PER_S, canonical_rotor_kind
from velobins_common.errors import UserError
from velobins_common.interp import interp_columns
from velobins_common.outputs import atomic_path

from .flight import Flight

TOPIC_IMU = "/imu"
TOPIC_ROTOR = "/rotor_speeds"
TOPIC_GT = "/ground_truth/odometry"
FRAME_BODY = "base_link"
FRAME_WORLD = "odom"

MIN_STAMP = 1.0
"""First stamps below this [s] are shifted so that no message carries ROS's "unset" time."""
STAMP_OFFSET = 1000.0
"""Shift [s] applied to flights that start before :data:`MIN_STAMP`."""
MAX_STAMP = float(2**31 - 1)
"""Largest stamp [s] a ROS 2 ``builtin_interfaces/Time`` holds (``sec`` is an int32)."""

ROTOR_MSG = "velobins_msgs/msg/RotorSpeeds"
IMU_MSG = "sensor_msgs/msg/Imu"
ODOMETRY_MSG = "nav_msgs/msg/Odometry"
VELOCITY_MSG = "velobins_msgs/msg/VelocityEstimate"
KIND_RAD_PER_SEC, KIND_RPM, KIND_NORMALIZED = 0, 1, 2
"""Values of RotorSpeeds.kind (one source: velobins_msgs/msg/RotorSpeeds.msg; checked in tests)."""

TOPIC_TYPES = {TOPIC_IMU: IMU_MSG, TOPIC_ROTOR: ROTOR_MSG, TOPIC_GT: ODOMETRY_MSG}
"""The message type of each topic of a VeloBins bag (written so, and checked when read)."""

_META_KEY = "velobins.sequence"
BAG_FORMAT_VERSION = 2
"""Version of the custom metadata :func:`write_bag` stores (2: rotor kinds ``speed``/``command``)."""


class BagError(UserError):
    """A flight cannot be written as a bag, or a bag read as a flight (names the file and what is wrong)."""


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
    """RotorSpeeds.kind for a Flight rotor kind (an old name too)."""
    return {ROTOR_SPEED: KIND_RAD_PER_SEC, ROTOR_COMMAND: KIND_NORMALIZED}[canonical_rotor_kind(rotor_kind)]


def rotor_kind_name(code: int) -> str:
    """Flight rotor kind for a RotorSpeeds.kind (rev/min streams are converted to rad/s by readers)."""
    return {KIND_RAD_PER_SEC: ROTOR_SPEED, KIND_RPM: ROTOR_SPEED, KIND_NORMALIZED: ROTOR_COMMAND}[code]


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


def check_stamps(flight: Flight, offset: float = 0.0) -> None:
    """Raise :class:`BagError` unless every stamp of ``seq`` (plus ``offset``) fits a ROS time.

    The message names the flight's source, the field ``t`` and the first bad row, like a
    :class:`~velobins_data.flight.FlightError`.
    """
    t = flight.t + offset
    bad = ~((t >= 0.0) & (t <= MAX_STAMP))
    if bad.any():
        row = int(np.argmax(bad))
        shift = f" (+{offset:g} s shift)" if offset else ""
        raise BagError(
            f"{flight.source}: field 't': stamp {flight.t[row]:.6g} s{shift} does not fit a ROS 2 time "
            f"(0 to {MAX_STAMP:.0f} s: int32 seconds); are the stamps in seconds? (first bad row {row})"
        )


def check_output(path: str | Path, overwrite: bool = False) -> None:
    """Raise ``FileExistsError`` if ``path`` may not receive a new bag.

    Without ``overwrite`` anything at ``path`` is refused; with it only an earlier bag (a folder
    holding ``metadata.yaml``) may be replaced, never a regular file or another folder.
    """
    path = Path(path)
    if not (path.exists() or path.is_symlink()):
        return
    if not overwrite:
        raise FileExistsError(f"{path}: output bag already exists; pass --overwrite to replace it")
    if path.is_symlink() or not path.is_dir():
        raise FileExistsError(f"{path}: exists and is not a bag folder; not replacing it")
    if not (path / "metadata.yaml").is_file():
        raise FileExistsError(f"{path}: is a folder but not a rosbag2 (no metadata.yaml); not replacing it")


def write_bag(flight: Flight, path: str | Path, storage: str = "mcap", *, overwrite: bool = False) -> BagInfo:
    """Write ``seq`` to a rosbag2 directory ``path``, atomically (module docstring).

    Args:
        seq: the flight.
        path: the bag directory; must not exist unless ``overwrite`` (then it must be a bag).
        storage: ``"mcap"`` or ``"sqlite3"``.
        overwrite: replace an earlier bag at ``path`` once the new one is complete.

    Raises:
        FileExistsError: ``path`` exists (see :func:`check_output`).
        BagError: a stamp does not fit a ROS time (names the source, ``t`` and the row).
    """
    path = Path(path)
    check_output(path, overwrite)
    offset = STAMP_OFFSET if flight.t[0] < MIN_STAMP else 0.0
    check_stamps(flight, offset)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path, directory=True) as tmp:
        # The storage file is named after its folder, so the bag is written one level down under
        # the final name and its files moved up: no temporary name inside a finished bag.
        tmp.mkdir()
        inner = tmp / path.name
        count = _write_messages(flight, inner, storage, offset)
        staged = tmp / ".staged"
        os.replace(inner, staged)
        for entry in staged.iterdir():
            os.replace(entry, tmp / entry.name)
        staged.rmdir()
    return BagInfo(path=path, messages=count, stamp_offset=offset)


def _write_messages(flight: Flight, path: Path, storage: str, offset: float) -> int:
    """Write the flight's messages to a new bag at ``path``; return the message count."""
    plugin = {"mcap": StoragePlugin.MCAP, "sqlite3": StoragePlugin.SQLITE3}[storage]
    store = typestore()
    T = store.types
    cov0 = np.zeros(9)
    imu_ori_cov = np.zeros(9)
    imu_ori_cov[0] = -1.0
    v_body = flight.body_velocity()
    kind = rotor_kind_code(flight.rotor_kind)
    count = 0
    with Writer(path, version=9, storage_plugin=plugin) as writer:
        meta = {
            "format_version": BAG_FORMAT_VERSION,
            "name": flight.name,
            "rotor_kind": flight.rotor_kind,
            "stamp_offset": offset,
            "metadata": flight.metadata,
        }
        writer.set_custom_data(_META_KEY, json.dumps(meta, default=str))
        c_imu = writer.add_connection(TOPIC_IMU, TOPIC_TYPES[TOPIC_IMU], typestore=store)
        c_rot = writer.add_connection(TOPIC_ROTOR, TOPIC_TYPES[TOPIC_ROTOR], typestore=store)
        c_gt = writer.add_connection(TOPIC_GT, TOPIC_TYPES[TOPIC_GT], typestore=store)
        Header, Vector3, Quaternion = (
            T["std_msgs/msg/Header"],
            T["geometry_msgs/msg/Vector3"],
            T["geometry_msgs/msg/Quaternion"],
        )
        Point, Pose, Twist = T["geometry_msgs/msg/Point"], T["geometry_msgs/msg/Pose"], T["geometry_msgs/msg/Twist"]
        PoseCov, TwistCov = T["geometry_msgs/msg/PoseWithCovariance"], T["geometry_msgs/msg/TwistWithCovariance"]
        Imu, Odometry, Rotor = T["sensor_msgs/msg/Imu"], T["nav_msgs/msg/Odometry"], T[ROTOR_MSG]
        zero3 = Vector3(x=0.0, y=0.0, z=0.0)
        for i in range(len(flight)):
            t = float(flight.t[i]) + offset
            ns = round(t * 1e9)
            header = Header(stamp=_stamp(store, t), frame_id=FRAME_BODY)
            imu = Imu(
                header=header,
                orientation=Quaternion(x=0.0, y=0.0, z=0.0, w=1.0),
                orientation_covariance=imu_ori_cov,
                angular_velocity=Vector3(x=flight.gyro[i, 0], y=flight.gyro[i, 1], z=flight.gyro[i, 2]),
                angular_velocity_covariance=cov0,
                linear_acceleration=Vector3(x=flight.acc[i, 0], y=flight.acc[i, 1], z=flight.acc[i, 2]),
                linear_acceleration_covariance=cov0,
            )
            writer.write(c_imu, ns, store.serialize_cdr(imu, c_imu.msgtype))
            rotor = Rotor(header=header, kind=kind, speeds=np.ascontiguousarray(flight.rotor[i]))
            writer.write(c_rot, ns, store.serialize_cdr(rotor, c_rot.msgtype))
            q = flight.q[i]
            odom = Odometry(
                header=Header(stamp=header.stamp, frame_id=FRAME_WORLD),
                child_frame_id=FRAME_BODY,
                pose=PoseCov(
                    pose=Pose(
                        position=Point(x=flight.p[i, 0], y=flight.p[i, 1], z=flight.p[i, 2]),
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
    return count


def _stamp_s(header) -> float:
    return header.stamp.sec + header.stamp.nanosec * 1e-9


def read_bag(path: str | Path) -> Flight:
    """Read a bag written by :func:`write_bag` (or any bag with the three topics) into a Flight.

    IMU stamps define ``t``; rotor and ground truth are linearly interpolated onto them when their
    stamps differ (they coincide for bags made by :func:`write_bag`). ``path`` is the bag folder
    or the storage file inside it.

    Raises:
        BagError: no such bag, not a rosbag2 folder, a truncated or corrupt file, missing topics.
    """
    path = _bag_dir(Path(path))
    store = typestore()
    imu_rows: list[tuple[float, float, float, float, float, float, float]] = []
    rotor_t: list[float] = []
    rotor_v: list[np.ndarray] = []
    rotor_codes: set[int] = set()
    gt_rows: list[list[float]] = []
    meta = _custom_metadata(path)
    version = meta.get("format_version", 1)  # bags written before issue 22 carry none: version 1
    if version not in (1, BAG_FORMAT_VERSION):
        raise BagError(f"{path}: metadata format_version {version!r}; this code reads 1 and {BAG_FORMAT_VERSION}")
    reader = _open_reader(path)
    try:
        topics = {c.topic for c in reader.connections}
        missing = {TOPIC_IMU, TOPIC_ROTOR, TOPIC_GT} - topics
        if missing:
            raise BagError(f"{path}: missing topic(s) {sorted(missing)}; found {sorted(topics)}")
        check_topic_types(reader.connections, TOPIC_TYPES, lambda topic, msg: BagError(f"{path}: {msg}"))
        conns = [c for c in reader.connections if c.topic in (TOPIC_IMU, TOPIC_ROTOR, TOPIC_GT)]

        def corrupt(exc: BaseException) -> BagError:
            return BagError(f"{path}: cannot read: truncated or corrupt bag ({_describe(exc)})")

        for topic, msg in bag_messages(reader, conns, store, corrupt):
            if topic == TOPIC_IMU:
                a, w = msg.linear_acceleration, msg.angular_velocity
                imu_rows.append((_stamp_s(msg.header), a.x, a.y, a.z, w.x, w.y, w.z))
            elif topic == TOPIC_ROTOR:
                if msg.kind not in (KIND_RAD_PER_SEC, KIND_RPM, KIND_NORMALIZED):
                    raise BagError(f"{path}: {TOPIC_ROTOR} has unknown kind {msg.kind}")
                rotor_t.append(_stamp_s(msg.header))
                speeds = np.asarray(msg.speeds, dtype=np.float64)
                rotor_codes.add(int(msg.kind))
                rotor_v.append(speeds * RPM_TO_RAD_PER_S if msg.kind == KIND_RPM else speeds)
            else:
                p, q, v = msg.pose.pose.position, msg.pose.pose.orientation, msg.twist.twist.linear
                gt_rows.append([_stamp_s(msg.header), p.x, p.y, p.z, q.x, q.y, q.z, q.w, v.x, v.y, v.z])
    finally:
        reader.close()
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
    return Flight(
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


def topic_messages(path: str | Path, topic: str, msgtype: str | None = None) -> Iterator[Any]:
    """The deserialised messages of one ``topic`` of a bag (folder or storage file), in log-time order.

    Raises:
        BagError: no such bag, no such topic (the message lists the bag's topics), a topic of
            another type than ``msgtype``, or a truncated or corrupt file.
    """
    path = _bag_dir(Path(path))
    store = typestore()
    reader = _open_reader(path)
    try:
        conns = [c for c in reader.connections if c.topic == topic]
        if not conns:
            found = sorted({f"{c.topic} ({c.msgtype})" for c in reader.connections})
            raise BagError(f"{path}: no topic {topic}; the bag has {', '.join(found) or 'no topics'}")
        if msgtype is not None and any(c.msgtype != msgtype for c in conns):
            raise BagError(f"{path}: topic {topic} is {conns[0].msgtype}, expected {msgtype}")

        def corrupt(exc: BaseException) -> BagError:
            return BagError(f"{path}: cannot read: truncated or corrupt bag ({_describe(exc)})")

        for _topic, msg in bag_messages(reader, conns, store, corrupt):
            yield msg
    finally:
        reader.close()


def _bag_dir(path: Path) -> Path:
    """The rosbag2 folder ``path`` names (itself, or the folder of a storage file in it)."""
    if path.is_file() and (path.parent / "metadata.yaml").is_file():
        return path.parent
    if not path.exists():
        raise BagError(f"{path}: no such bag")
    if not path.is_dir() or not (path / "metadata.yaml").is_file():
        raise BagError(f"{path}: not a rosbag2 folder (no metadata.yaml)")
    return path


def _open_reader(path: Path) -> Reader:
    """An opened rosbags Reader on ``path``; :class:`BagError` when the bag cannot be opened."""
    reader = Reader(path)
    try:
        reader.open()
    except Exception as exc:  # rosbags raises several types for unreadable bags
        raise BagError(f"{path}: not a readable rosbag2 ({_describe(exc)})") from None
    return reader


def check_topic_types(
    connections: Iterable[Any], expected: dict[str, str], fail: Callable[[str, str], Exception]
) -> None:
    """Raise ``fail(topic, message)`` when a topic of ``expected`` carries another message type.

    Checked on the bag's connections before any message is read: a bag whose IMU topic carries,
    say, odometry would otherwise fail deep in the reader with an ``AttributeError``.
    """
    for conn in connections:
        want = expected.get(conn.topic)
        if want is not None and conn.msgtype != want:
            raise fail(conn.topic, f"topic {conn.topic} carries {conn.msgtype}, expected {want}")


def bag_messages(
    reader: Any, conns: list[Any], store: Typestore, corrupt: Callable[[BaseException], Exception]
) -> Iterator[tuple[str, Any]]:
    """(topic, message) pairs of an open bag; an error inside rosbags' reader or deserialiser is a
    corrupt bag, raised as ``corrupt(exc)`` (each caller names the file its own way).

    A truncated or overwritten mcap fails there with whatever the damaged bytes trigger
    (``ReaderError``, ``struct.error``, ``OverflowError``, ``IndexError``, ...).
    """
    messages = reader.messages(connections=conns)
    while True:
        try:
            item = next(messages, None)
            if item is None:
                return
            conn, _ts, raw = item
            msg = store.deserialize_cdr(raw, conn.msgtype)
        except Exception as exc:  # a third-party parser on untrusted bytes
            raise corrupt(exc) from None
        yield conn.topic, msg


def _describe(exc: BaseException) -> str:
    from .datasets.errors import describe

    return describe(exc)


def _custom_metadata(path: Path) -> dict:
    """The VeloBins entry of the bag's ``custom_data`` (rosbag2 metadata.yaml), or {} if absent."""
    import yaml

    from velobins_common.bounded import InputLimitError, read_yaml

    meta_file = path / "metadata.yaml"
    try:
        info = read_yaml(meta_file) or {}  # bounded: size, nesting, no aliases
        custom = (info.get("rosbag2_bagfile_information") or {}).get("custom_data") or {}
        meta = json.loads(custom.get(_META_KEY, "{}"))
    except InputLimitError as exc:
        raise BagError(str(exc)) from None
    except (yaml.YAMLError, UnicodeDecodeError, AttributeError, TypeError, ValueError) as exc:
        raise BagError(f"{meta_file}: not a readable rosbag2 metadata file ({_describe(exc)})") from None
    if not isinstance(meta, dict):
        raise BagError(f"{meta_file}: custom_data {_META_KEY} is not a JSON object")
    return meta
