"""AI-IO adapter (SJTU-ViSYS-team/AI-IO): processed HDF5 and raw ROS 2 mcap bags.

Reference: the AI-IO repository's preparation script
``src/learning/data_management/prepare_datasets/our2.py`` and loader ``datasets.py``, and the
mavros message definitions ``mavros_msgs/ESCStatus.msg`` / ``ESCStatusItem.msg``. No real file
was available here: both readers are tested on fixtures written in that layout.

**HDF5** (``data.hdf5``): ``ts`` (N,) s; ``accel_calib``/``accel_raw`` (N, 3) m/s^2 and
``gyro_calib``/``gyro_raw`` (N, 3) rad/s (body, mavros = FLU); ``traj_target`` (N, 10) =
position (3, world), quaternion x y z w (4, body->world), velocity (3, **body**, below); ``rotor_spd`` (N, 4)
ESC speed in RPM -> rad/s (x 2π/60). ``*_calib`` (bias-corrected) is used unless ``imu="raw"``.

**mcap** (ROS 2 bag directory, or the ``.mcap`` file inside one): ``/mavros/imu/data``
(sensor_msgs/Imu: linear_acceleration, angular_velocity; header stamps), ``/odom/global``
(nav_msgs/Odometry: pose -> p, q; twist.linear -> v), ``/mavros/esc``
(mavros_msgs/ESCStatus, ``esc_status[i].rpm`` int32 RPM -> rad/s; the item definitions are
registered with the rosbags typestore from the msg text below). Odometry and ESC are
interpolated onto the IMU stamps (linear; slerp for orientation) inside the interval all three
cover, as AI-IO does.

Velocity frame: **body** (FLU), for both sources. Verified in AI-IO's code:
``src/learning/data_management/datasets.py`` (``ModelDataset.__getitem__``) takes the network's
velocity target as ``vb0 = traj_target[idx, 7:10]`` -- a *body* velocity, beside a separately
computed world velocity ``vw0`` from finite differences of ``traj_target[:, 0:3]``; its commented
DIDO branch rotates the world velocity into the body (``R^T v``) before storing it in
``traj_target``; and ``prepare_datasets/our2.py`` fills ``traj_target[7:10]`` with
``/odom/global`` ``twist.twist.linear``, which REP-147 puts in the child (body) frame. The
Flight's world velocity is therefore ``R v_body`` (``R`` from ``traj_target[3:7]``). The
``velocity`` option keeps ``"world"`` (a file written by another tool) and ``"auto"`` (the frame
whose velocity agrees with dp/dt, :func:`frames.velocity_frame`, falling back to body when the
data cannot tell). With the default, a flight whose stored velocity plainly agrees with dp/dt
as a *world* velocity raises a warning naming the file. ``metadata["velocity_frame"]`` records
the frame used.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, Literal

import numpy as np
from scipy.spatial.transform import Rotation, Slerp

from velobins_common.constants import ROTOR_SPEED, RPM_TO_RAD_PER_S
from velobins_common.interp import interp_columns
from velobins_data.bag import bag_messages, check_topic_types
from velobins_data.datasets.errors import DatasetError, describe
from velobins_data.datasets.frames import velocity_frame
from velobins_data.datasets.tabular import MAX_FLIGHT_BYTES, check_finite, monotonic_rows, require_file
from velobins_data.flight import STANDARD_GRAVITY, Flight

"""Revolutions per minute -> rad/s."""

NUM_ROTORS = 4
PLATFORM = "aiio-quad"
IMU_TOPIC = "/mavros/imu/data"
ODOM_TOPIC = "/odom/global"
ESC_TOPIC = "/mavros/esc"
TOPIC_TYPES = {
    IMU_TOPIC: "sensor_msgs/msg/Imu",
    ODOM_TOPIC: "nav_msgs/msg/Odometry",
    ESC_TOPIC: "mavros_msgs/msg/ESCStatus",
}
"""The message type each topic of an AI-IO bag must carry (checked before any message is read)."""

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


DEFAULT_VELOCITY_FRAME: VelocityFrame = "body"
"""AI-IO stores body velocity in ``traj_target[7:10]`` (module docstring: where this was verified)."""


def _world_velocity(
    source: str, t: np.ndarray, p: np.ndarray, q: np.ndarray, v_raw: np.ndarray, mode: VelocityFrame
) -> tuple[np.ndarray, str]:
    """World velocity from the stored one in frame ``mode``, and the frame used.

    ``auto`` asks the data (dp/dt) and falls back to body; an explicit ``body`` whose data
    clearly says world warns (naming the file) rather than silently training on rotated labels.
    """
    evidence = velocity_frame(t, p, q, v_raw)
    frame = mode if mode != "auto" else (evidence or "body")
    if mode == "body" and evidence == "world":
        warnings.warn(
            f"{source}: traj_target[7:10] agrees with dp/dt as a world velocity, but AI-IO stores body "
            "velocity there; read as body (pass velocity='world' or 'auto' if this file was written otherwise)",
            stacklevel=3,
        )
    if frame == "body":
        return Rotation.from_quat(q).apply(v_raw), "body"
    if frame == "world":
        return v_raw, "world"
    raise DatasetError(source, "velocity_frame", f"must be auto, world or body, got {mode!r}")


def _normalised(source: str, column: str, q: np.ndarray) -> np.ndarray:
    """``q`` scaled to unit norm; a norm outside [0.5, 2] (or one that overflows) is garbage, not noise."""
    with np.errstate(over="ignore"):
        norm = np.linalg.norm(q, axis=1, keepdims=True)
    bad = ~((norm >= 0.5) & (norm <= 2.0))[:, 0]
    if bad.any():
        row = int(np.argmax(bad))
        raise DatasetError(source, column, f"degenerate quaternion (norm {norm[row, 0]:.3g}, expected about 1)", row)
    return q / norm


def _read_hdf5(source: str, keys: tuple[str, ...]) -> dict[str, np.ndarray]:
    """Datasets ``keys`` of an HDF5 file as float64 arrays; :class:`DatasetError` if unreadable.

    h5py reports damaged files as ``OSError``/``RuntimeError``/``KeyError`` (at open or only when
    a damaged object is read); every one becomes "truncated or corrupt HDF5" naming the file.
    """
    import h5py

    corrupt = (OSError, RuntimeError, KeyError)
    try:
        fh = h5py.File(source, "r")
    except corrupt as exc:
        what = f"cannot read: not an HDF5 file, or truncated/corrupt ({describe(exc)})"
        raise DatasetError(source, "<file>", what) from None
    arrays: dict[str, np.ndarray] = {}
    try:
        with fh:
            missing = [k for k in keys if k not in fh]
            if missing:
                raise DatasetError(source, missing[0], f"missing HDF5 datasets {missing}")
            for key in keys:
                node = fh[key]
                if not isinstance(node, h5py.Dataset):
                    raise DatasetError(source, key, f"is an HDF5 {type(node).__name__}, expected a dataset")
                if node.dtype.kind not in "biuf":
                    raise DatasetError(source, key, f"not numeric (HDF5 type {node.dtype})")
                if node.size * 8 > MAX_FLIGHT_BYTES:  # before it is read: a compressed dataset can claim any shape
                    what = f"holds {node.size} values, more than a flight ({MAX_FLIGHT_BYTES >> 20} MiB as float64)"
                    raise DatasetError(source, key, what)
                try:
                    arrays[key] = np.asarray(node, dtype=np.float64)
                except corrupt as exc:
                    what = f"cannot read: truncated or corrupt HDF5 ({describe(exc)})"
                    raise DatasetError(source, key, what) from None
    except corrupt as exc:
        raise DatasetError(source, "<file>", f"cannot read: truncated or corrupt HDF5 ({describe(exc)})") from None
    return arrays


def load_aiio_hdf5(
    path: str | Path, *, imu: Literal["calib", "raw"] = "calib", velocity: VelocityFrame = DEFAULT_VELOCITY_FRAME
) -> Flight:
    """Load an AI-IO processed ``data.hdf5`` (module docstring); ``traj_target[7:10]`` is body velocity.

    Raises:
        DatasetError: a directory or missing file, a truncated or corrupt HDF5 file, a missing
            or non-numeric dataset, wrong shapes, NaN, unsorted stamps (naming file and key).
    """
    source = str(path)
    require_file(path)
    arrays = _read_hdf5(source, (*HDF5_KEYS, f"accel_{imu}", f"gyro_{imu}"))
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
    v, frame = _world_velocity(source, t, p, q, traj[:, 7:10], velocity)
    return Flight(
        name=Path(path).parent.name if Path(path).stem == "data" else Path(path).stem,
        t=t,
        acc=arrays[f"accel_{imu}"][keep],
        gyro=arrays[f"gyro_{imu}"][keep],
        rotor=np.abs(arrays["rotor_spd"][keep]) * RPM_TO_RAD_PER_S,
        rotor_kind=ROTOR_SPEED,
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


def _open_bag(source: str, bag_dir: Path) -> Any:
    """An opened rosbags Reader on ``bag_dir``; :class:`DatasetError` when it is not a bag."""
    from rosbags.rosbag2 import Reader

    if not bag_dir.exists():
        raise DatasetError(source, "<file>", "no such file or directory")
    if bag_dir.is_dir() and not (bag_dir / "metadata.yaml").is_file():
        raise DatasetError(
            source,
            "<file>",
            "is a directory but not a ROS 2 bag (no metadata.yaml); pass one bag directory, "
            "its .mcap file or a data.hdf5 (or use `velobins check` / `--data` for folders)",
        )
    try:
        reader = Reader(bag_dir)
        reader.open()
    except Exception as exc:  # rosbags raises several types for unreadable bags
        raise DatasetError(source, "<file>", f"not a readable ROS 2 bag ({describe(exc)})") from None
    return reader


def _read_topics(source: str, bag_dir: Path) -> dict[str, list[np.ndarray]]:
    store = esc_typestore()
    out: dict[str, list[np.ndarray]] = {IMU_TOPIC: [], ODOM_TOPIC: [], ESC_TOPIC: []}
    reader = _open_bag(source, bag_dir)
    try:
        check_topic_types(reader.connections, TOPIC_TYPES, lambda topic, msg: DatasetError(source, topic, msg))
        conns = [c for c in reader.connections if c.topic in out]

        def corrupt(exc: BaseException) -> DatasetError:
            return DatasetError(source, "<file>", f"cannot read: truncated or corrupt bag ({describe(exc)})")

        for topic, msg in bag_messages(reader, conns, store, corrupt):
            if topic == IMU_TOPIC:
                a, w = msg.linear_acceleration, msg.angular_velocity
                out[IMU_TOPIC].append(np.array([_stamp(msg.header), a.x, a.y, a.z, w.x, w.y, w.z]))
            elif topic == ODOM_TOPIC:
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


def load_aiio_mcap(path: str | Path, *, velocity: VelocityFrame = DEFAULT_VELOCITY_FRAME) -> Flight:
    """Load an AI-IO ROS 2 mcap bag (directory or its ``.mcap`` file), aligned to IMU stamps.

    The odometry twist is body velocity (REP-147 child frame; AI-IO copies it to ``traj_target[7:10]``).
    """
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
    v, frame = _world_velocity(source, t, p, q, v_raw, velocity)
    rotor = np.abs(interp_columns(t, esc[:, 0], esc[:, 1:])) * RPM_TO_RAD_PER_S
    return Flight(
        name=bag_dir.name,
        t=t,
        acc=imu[:, 1:4],
        gyro=imu[:, 4:7],
        rotor=rotor,
        rotor_kind=ROTOR_SPEED,
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


def load_aiio(path: str | Path, **kwargs: Any) -> Flight:
    """Dispatch on the path: ``*.hdf5``/``*.h5`` -> HDF5, else a ROS 2 mcap bag."""
    if Path(path).suffix in (".hdf5", ".h5"):
        return load_aiio_hdf5(path, **kwargs)
    return load_aiio_mcap(path, **kwargs)
