"""AI-IO adapter (SJTU-ViSYS-team/AI-IO): processed HDF5 and raw ROS 2 mcap bags.

Reference: the AI-IO repository's preparation script
``src/learning/data_management/prepare_datasets/our2.py`` and loader ``datasets.py``, and the
mavros message definitions ``mavros_msgs/ESCStatus.msg`` / ``ESCStatusItem.msg``. No real file
was available here: both readers are tested on fixtures written in that layout.

**HDF5** (``data.hdf5``): ``ts`` (N,) s; ``accel_calib``/``accel_raw`` (N, 3) m/s^2 and
``gyro_calib``/``gyro_raw`` (N, 3) rad/s (body, mavros = FLU); ``traj_target`` (N, 10) =
position (3, world), quaternion x y z w (4, body->world), velocity (3); ``rotor_spd`` (N, 4)
ESC speed in RPM -> rad/s (x 2π/60). ``*_calib`` (bias-corrected) is used unless ``imu="raw"``.

**mcap** (ROS 2 bag directory, or the ``.mcap`` file inside one): ``/mavros/imu/data``
(sensor_msgs/Imu: linear_acceleration, angular_velocity; header stamps), ``/odom/global``
(nav_msgs/Odometry: pose -> p, q; twist.linear -> v), ``/mavros/esc``
(mavros_msgs/ESCStatus, ``esc_status[i].rpm`` int32 RPM -> rad/s; the item definitions are
registered with the rosbags typestore from the msg text below). Odometry and ESC are
interpolated onto the IMU stamps (linear; slerp for orientation) inside the interval all three
cover, as AI-IO does.

Velocity frame (unverified): REP-147 puts nav_msgs/Odometry twist in the child (body) frame,
while AI-IO stores it next to world positions. With ``velocity_frame="auto"`` the frame whose
velocity agrees with dp/dt wins (``frames.velocity_frame``); when the data cannot tell, the
default is ``body`` for mcap odometry and ``world`` for HDF5. ``metadata["velocity_frame"]``
records the choice.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import numpy as np
from scipy.spatial.transform import Rotation, Slerp

from velobins_eval.datasets.errors import DatasetError
from velobins_eval.datasets.frames import velocity_frame
from velobins_eval.datasets.tabular import check_finite, monotonic_rows
from velobins_eval.metrics import interp_columns
from velobins_eval.sequence import STANDARD_GRAVITY, Sequence

RPM_TO_RAD_S = 2.0 * np.pi / 60.0
"""Revolutions per minute -> rad/s."""

NUM_ROTORS = 4
PLATFORM = "aiio-quad"
IMU_TOPIC = "/mavros/imu/data"
ODOM_TOPIC = "/odom/global"
ESC_TOPIC = "/mavros/esc"

ESC_STATUS_ITEM_MSG = """std_msgs/Header header
int32 rpm
float32 voltage
float32 current
"""
"""mavros_msgs/msg/ESCStatusItem (mavros, ESC_STATUS)."""

ESC_STATUS_MSG = """std_msgs/Header header
mavros_msgs/ESCStatusItem[] esc_status
"""
"""mavros_msgs/msg/ESCStatus."""

HDF5_KEYS = ("ts", "traj_target", "rotor_spd")
VelocityFrame = Literal["auto", "world", "body"]


def _world_velocity(
    source: str, t: np.ndarray, p: np.ndarray, q: np.ndarray, v_raw: np.ndarray, mode: VelocityFrame, default: str
) -> tuple[np.ndarray, str]:
    frame = mode if mode != "auto" else (velocity_frame(t, p, q, v_raw) or default)
    if frame == "body":
        return Rotation.from_quat(q).apply(v_raw), "body"
    if frame == "world":
        return v_raw, "world"
    raise DatasetError(source, "velocity_frame", f"must be auto, world or body, got {mode!r}")


def _normalised(source: str, column: str, q: np.ndarray) -> np.ndarray:
    norm = np.linalg.norm(q, axis=1, keepdims=True)
    if (norm < 0.5).any():
        raise DatasetError(source, column, "degenerate quaternion (norm < 0.5)", int(np.argmax(norm[:, 0] < 0.5)))
    return q / norm


def load_aiio_hdf5(
    path: str | Path, *, imu: Literal["calib", "raw"] = "calib", velocity: VelocityFrame = "auto"
) -> Sequence:
    """Load an AI-IO processed ``data.hdf5`` (module docstring)."""
    import h5py

    source = str(path)
    try:
        fh = h5py.File(path, "r")
    except OSError as exc:
        raise DatasetError(source, "<file>", f"not a readable HDF5 file: {exc}") from None
    with fh:
        keys = (*HDF5_KEYS, f"accel_{imu}", f"gyro_{imu}")
        missing = [k for k in keys if k not in fh]
        if missing:
            raise DatasetError(source, missing[0], f"missing HDF5 datasets {missing}")
        arrays = {k: np.asarray(fh[k], dtype=np.float64) for k in keys}
    t_all = arrays["ts"].reshape(-1)
    n = t_all.shape[0]
    if n == 0:
        raise DatasetError(source, "ts", "empty")
    shapes = {f"accel_{imu}": 3, f"gyro_{imu}": 3, "traj_target": 10, "rotor_spd": NUM_ROTORS}
    for key, width in shapes.items():
        if arrays[key].shape != (n, width):
            what = "rotor count" if key == "rotor_spd" else "shape"
            raise DatasetError(source, key, f"wrong {what}: expected ({n}, {width}), got {arrays[key].shape}")
        check_finite(source, [f"{key}[{i}]" for i in range(width)], arrays[key])
    check_finite(source, ["ts"], t_all[:, None])
    keep = monotonic_rows(source, t_all, "ts")
    t = t_all[keep]
    traj = arrays["traj_target"][keep]
    p, q = traj[:, 0:3], _normalised(source, "traj_target[3:7]", traj[:, 3:7])
    v, frame = _world_velocity(source, t, p, q, traj[:, 7:10], velocity, default="world")
    return Sequence(
        name=Path(path).parent.name if Path(path).stem == "data" else Path(path).stem,
        t=t,
        acc=arrays[f"accel_{imu}"][keep],
        gyro=arrays[f"gyro_{imu}"][keep],
        rotor=np.abs(arrays["rotor_spd"][keep]) * RPM_TO_RAD_S,
        rotor_kind="rpm",
        p=p,
        q=q,
        v=v,
        metadata={
            "dataset": "aiio",
            "platform": PLATFORM,
            "source": source,
            "gravity": STANDARD_GRAVITY,
            "imu": imu,
            "velocity_frame": frame,
            "dropped_stamps": n - len(keep),
        },
    )


def esc_typestore() -> Any:
    """A ROS 2 Humble rosbags typestore with mavros_msgs/ESCStatus(Item) registered."""
    from rosbags.typesys import Stores, get_types_from_msg, get_typestore

    store = get_typestore(Stores.ROS2_HUMBLE)
    types: dict[str, Any] = {}
    types.update(get_types_from_msg(ESC_STATUS_ITEM_MSG, "mavros_msgs/msg/ESCStatusItem"))
    types.update(get_types_from_msg(ESC_STATUS_MSG, "mavros_msgs/msg/ESCStatus"))
    store.register(types)
    return store


def _stamp(header: Any) -> float:
    return float(header.stamp.sec) + 1e-9 * float(header.stamp.nanosec)


def _read_topics(source: str, bag_dir: Path) -> dict[str, list[np.ndarray]]:
    from rosbags.rosbag2 import Reader

    store = esc_typestore()
    out: dict[str, list[np.ndarray]] = {IMU_TOPIC: [], ODOM_TOPIC: [], ESC_TOPIC: []}
    try:
        reader = Reader(bag_dir)
        reader.open()
    except Exception as exc:  # rosbags raises several types for unreadable bags
        raise DatasetError(source, "<file>", f"not a readable ROS 2 bag: {exc}") from None
    try:
        conns = [c for c in reader.connections if c.topic in out]
        for conn, _ts, raw in reader.messages(connections=conns):
            msg = store.deserialize_cdr(raw, conn.msgtype)
            if conn.topic == IMU_TOPIC:
                a, w = msg.linear_acceleration, msg.angular_velocity
                out[IMU_TOPIC].append(np.array([_stamp(msg.header), a.x, a.y, a.z, w.x, w.y, w.z]))
            elif conn.topic == ODOM_TOPIC:
                pp, oo, vv = msg.pose.pose.position, msg.pose.pose.orientation, msg.twist.twist.linear
                row = [_stamp(msg.header), pp.x, pp.y, pp.z, oo.x, oo.y, oo.z, oo.w, vv.x, vv.y, vv.z]
                out[ODOM_TOPIC].append(np.array(row))
            else:
                items = msg.esc_status
                if len(items) != NUM_ROTORS:
                    msg_text = f"wrong rotor count: {len(items)} ESCs, expected {NUM_ROTORS}"
                    raise DatasetError(source, ESC_TOPIC, msg_text)
                stamp = _stamp(items[0].header) if _stamp(items[0].header) > 0 else _stamp(msg.header)
                out[ESC_TOPIC].append(np.array([stamp, *(float(it.rpm) for it in items)]))
    finally:
        reader.close()
    return out


def _sorted_unique(source: str, topic: str, rows: list[np.ndarray], min_rows: int = 2) -> np.ndarray:
    if len(rows) < min_rows:
        raise DatasetError(source, topic, f"topic has {len(rows)} messages, need at least {min_rows}")
    arr = np.vstack(rows)
    check_finite(source, [f"{topic}[{i}]" for i in range(arr.shape[1])], arr)
    return arr[monotonic_rows(source, arr[:, 0], topic)]


def load_aiio_mcap(path: str | Path, *, velocity: VelocityFrame = "auto") -> Sequence:
    """Load an AI-IO ROS 2 mcap bag (directory or its ``.mcap`` file), aligned to IMU stamps."""
    source = str(path)
    bag_dir = Path(path).parent if Path(path).is_file() else Path(path)
    topics = _read_topics(source, bag_dir)
    imu = _sorted_unique(source, IMU_TOPIC, topics[IMU_TOPIC])
    odom = _sorted_unique(source, ODOM_TOPIC, topics[ODOM_TOPIC])
    esc = _sorted_unique(source, ESC_TOPIC, topics[ESC_TOPIC])
    t0 = max(imu[0, 0], odom[0, 0], esc[0, 0])
    t1 = min(imu[-1, 0], odom[-1, 0], esc[-1, 0])
    inside = (imu[:, 0] >= t0) & (imu[:, 0] <= t1)
    if inside.sum() < 2:
        raise DatasetError(source, IMU_TOPIC, "IMU, odometry and ESC streams do not overlap in time")
    imu = imu[inside]
    t = imu[:, 0]

    quats = _normalised(source, f"{ODOM_TOPIC}.pose.orientation", odom[:, 4:8])
    q = Slerp(odom[:, 0], Rotation.from_quat(quats))(t).as_quat()
    p = interp_columns(t, odom[:, 0], odom[:, 1:4])
    v_raw = interp_columns(t, odom[:, 0], odom[:, 8:11])
    v, frame = _world_velocity(source, t, p, q, v_raw, velocity, default="body")
    rotor = np.abs(interp_columns(t, esc[:, 0], esc[:, 1:])) * RPM_TO_RAD_S
    return Sequence(
        name=bag_dir.name,
        t=t,
        acc=imu[:, 1:4],
        gyro=imu[:, 4:7],
        rotor=rotor,
        rotor_kind="rpm",
        p=p,
        q=q,
        v=v,
        metadata={
            "dataset": "aiio",
            "platform": PLATFORM,
            "source": source,
            "gravity": STANDARD_GRAVITY,
            "velocity_frame": frame,
            "imu_rows_outside_overlap": int((~inside).sum()),
        },
    )


def load_aiio(path: str | Path, **kwargs: Any) -> Sequence:
    """Dispatch on the path: ``*.hdf5``/``*.h5`` -> HDF5, else a ROS 2 mcap bag."""
    if Path(path).suffix in (".hdf5", ".h5"):
        return load_aiio_hdf5(path, **kwargs)
    return load_aiio_mcap(path, **kwargs)
