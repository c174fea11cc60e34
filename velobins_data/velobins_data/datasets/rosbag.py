"""Adapter for bags recorded on the vehicle with ``ros2 bag record`` (``--dataset rosbag``).

The recipe in docs/vehicles.md records the graph's inputs beside its outputs:

* ``<ns>/imu`` — ``sensor_msgs/msg/Imu`` as the network reads it (the IMU bridge's output: SI units,
  the body frame ``frame_id``), or any IMU whose ``frame_id`` a recorded ``/tf_static`` connects to
  the body frame;
* ``<ns>/rotor_speeds`` — ``velobins_msgs/msg/RotorSpeeds`` (the rotor bridge's output; an ``rpm``
  kind is converted to rad/s);
* ``<ns>/ground_truth/odometry`` — ``nav_msgs/msg/Odometry`` of a motion-capture system: the pose
  of the body in a z-up world frame, the twist in the body frame (nav_msgs). A source that leaves
  the twist at zero (a pose-only mocap bridge) gets its velocity from the positions (central
  differences), which ``metadata["ground_truth_velocity"]`` says.

Unlike :func:`velobins_data.bag.read_bag` (bags written by ``velobins convert``, where all topics
share stamps), a recording has streams that start and stop at different times and rates: the
flight is the IMU's stamps inside the span every stream covers (nothing is extrapolated), rotor
and ground truth interpolated onto them (the ground-truth quaternion after flipping its sign to
the previous sample's hemisphere, so a sign change of the source does not interpolate through
zero). Repeated IMU stamps (a restamped duplicate) are dropped and counted in the metadata.

Topics are found by name: the one topic of the right type ending in ``imu``, ``rotor_speeds`` and
``ground_truth/odometry`` (several namespaces in one bag: pass ``namespace``). A bag recorded without
motion capture loads when its ground truth comes from elsewhere (``ground_truth=``, ``velobins evaluate
--ground-truth``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from velobins_common.constants import RPM_TO_RAD_PER_S, STANDARD_GRAVITY
from velobins_common.frames import StaticTransformTree, normalize_frame, quaternion_to_matrix
from velobins_common.interp import interp_columns
from velobins_data.bag import (
    FRAME_BODY,
    KIND_NORMALIZED,
    KIND_RAD_PER_SEC,
    KIND_RPM,
    ROTOR_MSG,
    _bag_dir,
    _describe,
    _open_reader,
    bag_messages,
    rotor_kind_name,
    typestore,
)
from velobins_data.datasets.errors import DatasetError
from velobins_data.flight import Flight

STREAMS = {
    "imu": ("sensor_msgs/msg/Imu", "imu"),
    "rotor": (ROTOR_MSG, "rotor_speeds"),
    "ground_truth": ("nav_msgs/msg/Odometry", "ground_truth/odometry"),
}
"""Stream -> (message type, topic name below the namespace)."""
TF_STATIC = "/tf_static"


def find_topics(
    connections: list[tuple[str, str]], namespace: str | None, source: Path, streams: tuple[str, ...] = tuple(STREAMS)
) -> dict[str, str]:
    """Stream -> topic among the bag's ``(topic, type)`` pairs (module docstring), for the ``streams`` wanted.

    Raises:
        DatasetError: a stream is missing (the message lists the topics of that type) or found
            under several namespaces without ``namespace``.
    """
    out = {}
    for stream in streams:
        msgtype, name = STREAMS[stream]
        typed = sorted(t for t, m in connections if m == msgtype)
        if namespace is not None:
            wanted = f"{namespace.rstrip('/')}/{name}" if namespace.strip("/") else f"/{name}"
            found = [t for t in typed if t == "/" + wanted.lstrip("/")]
        else:
            found = [t for t in typed if t == f"/{name}" or t.endswith(f"/{name}")]
        if not found:
            seen = ", ".join(typed) or "none"
            raise DatasetError(source, name, f"no {msgtype} topic named '{name}' (topics of that type: {seen})")
        if len(found) > 1:
            raise DatasetError(source, name, f"several {msgtype} topics {found}: pass the vehicle's namespace")
        out[stream] = found[0]
    return out


def _stamp(header: Any) -> float:
    return header.stamp.sec + header.stamp.nanosec * 1e-9


def _continuous(q: np.ndarray) -> np.ndarray:
    """Quaternions (N, 4) with each sign flipped to the hemisphere of the previous one."""
    out = q.copy()
    for i in range(1, len(out)):
        if float(out[i] @ out[i - 1]) < 0.0:
            out[i] = -out[i]
    return out


def _imu_rotation(frames: set[str], tree: StaticTransformTree, source: Path, topic: str) -> np.ndarray | None:
    """Rotation IMU frame -> body frame (None: identity) for the IMU messages' ``frame_id``."""
    frames = {normalize_frame(f) for f in frames}
    body = {f for f in frames if f in ("", FRAME_BODY) or f.endswith("/" + FRAME_BODY)}
    if frames == body:
        return None
    if len(frames) != 1:
        raise DatasetError(source, topic, f"IMU messages in several frames {sorted(frames)}")
    frame = frames.pop()
    bodies = [f for f in (FRAME_BODY, frame.rsplit("/", 1)[0] + "/" + FRAME_BODY) if f in tree]
    rot = next((r for b in bodies if (r := tree.rotation(b, frame)) is not None), None)
    if rot is None:
        raise DatasetError(
            source,
            topic,
            f"IMU frame '{frame}' is not the body frame and {TF_STATIC} (recorded: {len(tree) > 0}) does not "
            "connect it to base_link: record the IMU bridge's output or /tf_static",
        )
    return rot


GroundTruthSource = Callable[[str], tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]
"""Ground truth from elsewhere, by flight (bag folder) name: stamps [s] on the bag's clock, world position,
body->world quaternion (x, y, z, w), world velocity; raises a ``UserError`` for a flight it has none for."""
EXTERNAL = "<external ground truth>"


def load_rosbag(
    path: str | Path,
    *,
    namespace: str | None = None,
    gravity: float | None = None,
    ground_truth: GroundTruthSource | None = None,
) -> Flight:
    """Read a recorded bag (the folder, or a file in it) into a :class:`Flight` (module docstring).

    ``ground_truth`` (``velobins evaluate --ground-truth``): the ground truth comes from it instead of
    the bag, which then needs no ``ground_truth/odometry`` topic (a flight recorded without motion
    capture); it is cut and interpolated like the topic's (velocity taken as world frame).

    Raises:
        DatasetError: not a readable bag, a stream missing or ambiguous, too few samples, streams that
            do not overlap, an IMU frame that cannot be put in the body frame.
    """
    try:
        bag = _bag_dir(Path(path))
    except ValueError as exc:
        raise DatasetError(path, "<file>", str(exc).split(": ", 1)[-1]) from None
    store = typestore()
    try:
        reader = _open_reader(bag)
    except ValueError as exc:
        raise DatasetError(bag, "<file>", str(exc).split(": ", 1)[-1]) from None
    imu, rotor, gt, kinds, frames = [], [], [], set(), set()
    tree = StaticTransformTree()
    try:
        wanted_streams = ("imu", "rotor") if ground_truth is not None else tuple(STREAMS)
        topics = find_topics([(c.topic, c.msgtype) for c in reader.connections], namespace, bag, wanted_streams)
        wanted = {*topics.values(), TF_STATIC}
        conns = [c for c in reader.connections if c.topic in wanted]

        def corrupt(exc: BaseException) -> DatasetError:
            return DatasetError(bag, "<file>", f"cannot read: truncated or corrupt bag ({_describe(exc)})")

        for topic, msg in bag_messages(reader, conns, store, corrupt):
            if topic == topics["imu"]:
                a, w = msg.linear_acceleration, msg.angular_velocity
                imu.append((_stamp(msg.header), a.x, a.y, a.z, w.x, w.y, w.z))
                frames.add(msg.header.frame_id)
            elif topic == topics["rotor"]:
                kinds.add(int(msg.kind))
                speeds = np.asarray(msg.speeds, dtype=np.float64)
                rotor.append((_stamp(msg.header), speeds * (RPM_TO_RAD_PER_S if msg.kind == KIND_RPM else 1.0)))
            elif topic == topics.get("ground_truth"):
                p, q, v = msg.pose.pose.position, msg.pose.pose.orientation, msg.twist.twist.linear
                gt.append([_stamp(msg.header), p.x, p.y, p.z, q.x, q.y, q.z, q.w, v.x, v.y, v.z])
            else:
                for tf in msg.transforms:
                    r = tf.transform.rotation
                    try:
                        tree.add(tf.header.frame_id, tf.child_frame_id, (r.x, r.y, r.z, r.w))
                    except ValueError as exc:
                        raise DatasetError(bag, TF_STATIC, str(exc)) from None
    finally:
        reader.close()
    if ground_truth is not None:
        topics["ground_truth"] = EXTERNAL
        gt = np.column_stack(ground_truth(bag.name)).tolist()
    return _flight(bag, topics, imu, rotor, gt, kinds, _imu_rotation(frames, tree, bag, topics["imu"]), gravity)


def _sorted_unique(rows: list, source: Path, topic: str, key: Callable[[Any], float] = lambda r: r[0]) -> tuple:
    """Rows sorted by stamp, repeated stamps dropped (their count returned too); DatasetError below 2 rows."""
    rows = sorted(rows, key=key)
    kept = [r for i, r in enumerate(rows) if i == 0 or key(r) > key(rows[i - 1])]
    if len(kept) < 2:
        raise DatasetError(source, topic, f"{len(kept)} message(s) with distinct stamps; need at least 2")
    return kept, len(rows) - len(kept)


def _flight(
    bag: Path,
    topics: dict[str, str],
    imu_rows: list,
    rotor_rows: list,
    gt_rows: list,
    kinds: set[int],
    imu_rot: np.ndarray | None,
    gravity: float | None,
) -> Flight:
    imu_rows, repeated = _sorted_unique(imu_rows, bag, topics["imu"])
    rotor_rows, _ = _sorted_unique(rotor_rows, bag, topics["rotor"])
    gt_rows, _ = _sorted_unique(gt_rows, bag, topics["ground_truth"])
    if len(kinds) != 1 or len({r[1].shape for r in rotor_rows}) != 1:
        raise DatasetError(bag, topics["rotor"], "the rotor kind or the number of rotors changes within the bag")
    kind = kinds.pop()
    if kind not in (KIND_RAD_PER_SEC, KIND_RPM, KIND_NORMALIZED):
        raise DatasetError(bag, topics["rotor"], f"unknown RotorSpeeds kind {kind}")
    imu = np.asarray(imu_rows, dtype=np.float64)
    rt = np.array([r[0] for r in rotor_rows])
    rv = np.stack([r[1] for r in rotor_rows])
    gt = np.asarray(gt_rows, dtype=np.float64)
    start, end = max(imu[0, 0], rt[0], gt[0, 0]), min(imu[-1, 0], rt[-1], gt[-1, 0])
    inside = (imu[:, 0] >= start) & (imu[:, 0] <= end)
    if inside.sum() < 2 and topics["ground_truth"] == EXTERNAL:
        raise DatasetError(
            bag,
            "<file>",
            f"the ground truth [{gt[0, 0]:.3f}, {gt[-1, 0]:.3f}] s does not overlap the IMU and rotor streams "
            f"[{max(imu[0, 0], rt[0]):.3f}, {min(imu[-1, 0], rt[-1]):.3f}] s; are both on the same clock (seconds)?",
        )
    if inside.sum() < 2:
        raise DatasetError(bag, "<file>", f"the IMU, rotor and ground-truth streams do not overlap in time ({topics})")
    imu = imu[inside]
    t = imu[:, 0]
    # Interpolate in time since the start: epoch stamps (1.7e9 s) keep only ~0.2 µs in a float64.
    tq, rt, t_gt = t - start, rt - start, gt[:, 0] - start
    acc, gyro = imu[:, 1:4], imu[:, 4:7]
    if imu_rot is not None:
        acc, gyro = acc @ imu_rot.T, gyro @ imu_rot.T
    q_src = gt[:, 4:8] / np.linalg.norm(gt[:, 4:8], axis=1, keepdims=True)
    q = interp_columns(tq, t_gt, _continuous(q_src))
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    twist = gt[:, 8:11]
    if topics["ground_truth"] == EXTERNAL:  # world-frame velocity already
        v = interp_columns(tq, t_gt, twist)
        gt_velocity = "external, world frame"
    elif np.any(twist != 0.0):
        v_body = interp_columns(tq, t_gt, twist)
        v = np.einsum("nij,nj->ni", np.stack([quaternion_to_matrix(qi) for qi in q]), v_body)
        gt_velocity = "twist"
    else:  # a pose-only source: differentiate the positions
        v = interp_columns(tq, t_gt, np.gradient(gt[:, 1:4], t_gt, axis=0))
        gt_velocity = "position derivative"
    metadata = {
        "dataset": "rosbag",
        "platform": "recorded",
        "source": str(bag),
        "gravity": float(gravity if gravity is not None else STANDARD_GRAVITY),
        "topics": dict(topics),
        "ground_truth_velocity": gt_velocity,
        "repeated_imu_stamps_dropped": repeated,
        "imu_samples_outside_overlap": int((~inside).sum()),
    }
    return Flight(
        name=bag.name,
        t=t,
        acc=acc,
        gyro=gyro,
        rotor=interp_columns(tq, rt, rv),
        rotor_kind=rotor_kind_name(kind),
        p=interp_columns(tq, t_gt, gt[:, 1:4]),
        q=q,
        v=v,
        metadata=metadata,
    )
