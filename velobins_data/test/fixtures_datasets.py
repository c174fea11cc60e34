"""Shared test fixtures (imported by the tests of velobins_data and velobins_eval; the root conftest.py puts
this folder on sys.path): synthetic flights written in each dataset's published on-disk schema.

Each writer takes a :class:`Truth` (ground truth in VeloBins conventions) and writes it the way
the dataset stores it (NanoBench acc in g and PWM 0..65535, TII-RATM column-major rotation,
NeuroBEM body velocity, AI-IO RPM), so an adapter that converts correctly gets the truth back.
"""

from __future__ import annotations

import gzip
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.spatial.transform import Rotation

from velobins_common.constants import STANDARD_GRAVITY
from velobins_data.datasets.csv_format import write_csv
from velobins_data.flight import Flight

G = STANDARD_GRAVITY


@dataclass
class Truth:
    """A flight in Flight conventions (world ENU, body FLU, q body->world xyzw, rotor 0..1)."""

    t: np.ndarray
    p: np.ndarray
    q: np.ndarray
    v: np.ndarray
    acc: np.ndarray
    gyro: np.ndarray
    rotor: np.ndarray  # normalised [0, 1]; writers scale it to the dataset's unit


def imu_noise(acc: np.ndarray, gyro: np.ndarray, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``acc`` and ``gyro`` with a tiny seeded white noise (1e-5 m/s², 1e-6 rad/s): a real IMU never
    repeats a reading, and the validator's ``imu_frozen`` check refuses one that does."""
    rng = np.random.default_rng(seed)
    return acc + 1e-5 * rng.standard_normal(acc.shape), gyro + 1e-6 * rng.standard_normal(gyro.shape)


def hover(n: int = 400, rate: float = 100.0) -> Truth:
    """Hovering, level, yaw 0 at 1 m: specific force +g on body z."""
    t = 1000.0 + np.arange(n) / rate
    q = np.tile([0.0, 0.0, 0.0, 1.0], (n, 1))
    acc = np.tile([0.0, 0.0, G], (n, 1))
    return Truth(
        t,
        np.tile([0.0, 0.0, 1.0], (n, 1)),
        q,
        np.zeros((n, 3)),
        *imu_noise(acc, np.zeros((n, 3))),
        np.full((n, 4), 0.6),
    )


def hover_flight(name: str = "hover", t0: float = 1000.0, n: int = 400, **metadata):
    """:func:`hover` as a plausible PWM :class:`~velobins_data.flight.Flight` starting at ``t0``."""
    from velobins_data.flight import Flight

    tr = hover(n=n)
    return Flight(
        name=name,
        t=tr.t - tr.t[0] + t0,
        acc=tr.acc,
        gyro=tr.gyro,
        rotor=tr.rotor,
        rotor_kind="command",
        p=tr.p,
        q=tr.q,
        v=tr.v,
        metadata=metadata,
    )


def yaw90_forward_x(n: int = 400, rate: float = 100.0, speed: float = 1.0) -> Truth:
    """Level flight along world +x at ``speed`` with yaw 90° (nose along +y): body v = (0, -speed, 0)."""
    t = 1000.0 + np.arange(n) / rate
    q = np.tile(Rotation.from_euler("z", 90, degrees=True).as_quat(), (n, 1))
    p = np.stack([speed * (t - t[0]), np.zeros(n), np.ones(n)], axis=1)
    v = np.tile([speed, 0.0, 0.0], (n, 1))
    acc = np.tile([0.0, 0.0, G], (n, 1))
    return Truth(t, p, q, v, *imu_noise(acc, np.zeros((n, 3))), np.full((n, 4), 0.6))


def banked_circle(n: int = 1000, rate: float = 100.0, radius: float = 2.0, speed: float = 3.0) -> Truth:
    """A consistent manoeuvring flight: level circle at ``speed``, banked into the turn, yawing.

    The attitude is tilted so body z lies along the specific force ``a + g e_z`` and the nose
    yaws at a different rate from the heading, so body and world velocities differ everywhere
    and a frame error shows in the validator's gravity residual (centripetal ``speed²/radius``).
    """
    t = 1000.0 + np.arange(n) / rate
    w = speed / radius
    phase = w * (t - t[0])
    p = np.stack([radius * np.cos(phase), radius * np.sin(phase), np.full(n, 1.5)], axis=1)
    v = np.stack([-speed * np.sin(phase), speed * np.cos(phase), np.zeros(n)], axis=1)
    a = np.stack([-speed * w * np.cos(phase), -speed * w * np.sin(phase), np.zeros(n)], axis=1)
    f_world = a + np.array([0.0, 0.0, G])
    z_b = f_world / np.linalg.norm(f_world, axis=1, keepdims=True)
    yaw = 0.3 + 0.5 * phase  # nose turns at half the heading rate
    heading = np.stack([np.cos(yaw), np.sin(yaw), np.zeros(n)], axis=1)
    y_b = np.cross(z_b, heading)
    y_b /= np.linalg.norm(y_b, axis=1, keepdims=True)
    x_b = np.cross(y_b, z_b)
    rot = Rotation.from_matrix(np.stack([x_b, y_b, z_b], axis=2))  # columns: body axes in world
    acc = rot.inv().apply(f_world)
    step = (rot[:-1].inv() * rot[1:]).as_rotvec() * rate  # body rate between samples
    gyro = np.vstack([step, step[-1:]])
    return Truth(t, p, rot.as_quat(), v, *imu_noise(acc, gyro), np.full((n, 4), 0.6))


def _write_table(path: Path, header: list[str], data: np.ndarray) -> None:
    text = ",".join(header) + "\n" + "\n".join(",".join(f"{x:.9f}" for x in row) for row in data) + "\n"
    if path.suffix == ".gz":
        with gzip.open(path, "wt") as fh:
            fh.write(text)
    else:
        path.write_text(text)


# ---------------------------------------------------------------------------------- NanoBench
NANOBENCH_HEADER = [
    "t", "px", "py", "pz", "qx", "qy", "qz", "qw", "vx", "vy", "vz",
    "imu_acc_x", "imu_acc_y", "imu_acc_z", "imu_gyro_x", "imu_gyro_y", "imu_gyro_z",
    "motor_motor_m1", "motor_motor_m2", "motor_motor_m3", "motor_motor_m4", "pwr_pm_vbat",
]  # fmt: skip


def nanobench_rows(tr: Truth, off_rows: int = 20) -> np.ndarray:
    """NanoBench table (acc in g, PWM 0..65535) with ``off_rows`` motors-off rows at each end."""
    n = tr.t.shape[0]
    noise = np.random.default_rng(0).normal(0, 1e-3, (n, 6))  # real sensors are never collinear
    pwm = tr.rotor * 65535.0
    pwm[:off_rows] = 0.0
    pwm[n - off_rows :] = 0.0
    imu = np.hstack([tr.acc / G, tr.gyro]) + noise
    return np.hstack([tr.t[:, None], tr.p, tr.q, tr.v, imu, pwm, np.full((n, 1), 4.0)])


def write_nanobench(path: Path, tr: Truth, off_rows: int = 20, rows: np.ndarray | None = None) -> Path:
    """Write a NanoBench CSV (``.csv`` or ``.csv.gz``) and its metadata YAML."""
    _write_table(path, NANOBENCH_HEADER, nanobench_rows(tr, off_rows) if rows is None else rows)
    stem = path.name.removesuffix(".gz").removesuffix(".csv")
    path.with_name(f"{stem}_metadata.yaml").write_text("trajectory_type: circle\ncrazyflie_id: CF_test\n")
    return path


# ---------------------------------------------------------------------------------- TII-RATM
TIIRATM_HEADER = [
    "elapsed_time", "timestamp", "img_filename", "accel_x", "accel_y", "accel_z", "gyro_x", "gyro_y", "gyro_z",
    *[f"thrust[{i}]" for i in range(4)], "vbat", "drone_x", "drone_y", "drone_z",
    "drone_velocity_linear_x", "drone_velocity_linear_y", "drone_velocity_linear_z",
    *[f"drone_rot[{i}]" for i in range(9)],
]  # fmt: skip


def write_tiiratm(path: Path, tr: Truth, frd: bool = False, frd_attitude: bool = False) -> Path:
    """Write a TII-RATM 500 Hz CSV; ``drone_rot`` column-major.

    ``frd`` stores the IMU in body FRD axes; ``frd_attitude`` stores ``drone_rot`` as the
    attitude of the FRD body, R_world<-FRD = R_world<-FLU · R_FLU<-FRD (world z-up either way).
    """
    n = tr.t.shape[0]
    flip = np.diag([1.0, -1.0, -1.0]) if frd else np.eye(3)
    mats = Rotation.from_quat(tr.q).as_matrix()
    if frd_attitude:
        mats = mats @ np.diag([1.0, -1.0, -1.0])
    rot_cm = mats.transpose(0, 2, 1).reshape(n, 9)
    cols = [
        (tr.t - tr.t[0])[:, None], (tr.t * 1e6)[:, None], np.zeros((n, 1)), tr.acc @ flip, tr.gyro @ flip,
        tr.rotor, np.full((n, 1), 16.0), tr.p, tr.v, rot_cm,
    ]  # fmt: skip
    data = np.hstack(cols)
    header = ",".join(TIIRATM_HEADER)
    lines = [
        ",".join(f"{x:.9f}" if j != 2 else f"img_{i:05d}.jpg" for j, x in enumerate(r)) for i, r in enumerate(data)
    ]
    path.write_text(header + "\n" + "\n".join(lines) + "\n")
    return path


# ---------------------------------------------------------------------------------- NeuroBEM
NEUROBEM_HEADER = [
    "t", "ang acc x", "ang acc y", "ang acc z", "ang vel x", "ang vel y", "ang vel z",
    "quat x", "quat y", "quat z", "quat w", "acc x", "acc y", "acc z", "vel x", "vel y", "vel z",
    "pos x", "pos y", "pos z", "mot 1", "mot 2", "mot 3", "mot 4", "dmot 1", "dmot 2", "dmot 3", "dmot 4", "vbat",
]  # fmt: skip

NEUROBEM_MAX_RAD_S = 3000.0


def write_neurobem(path: Path, tr: Truth) -> Path:
    """Write a NeuroBEM processed CSV (body velocity, motor speeds in rad/s)."""
    n = tr.t.shape[0]
    v_body = Rotation.from_quat(tr.q).inv().apply(tr.v)
    data = np.hstack([
        tr.t[:, None], np.zeros((n, 3)), tr.gyro, tr.q, tr.acc, v_body, tr.p,
        tr.rotor * NEUROBEM_MAX_RAD_S, np.zeros((n, 4)), np.full((n, 1), 16.0),
    ])  # fmt: skip
    _write_table(path, NEUROBEM_HEADER, data)
    return path


# ---------------------------------------------------------------------------------- AI-IO
AIIO_MAX_RPM = 20000.0


def write_aiio_hdf5(path: Path, tr: Truth, velocity_in_body: bool = True) -> Path:
    """Write an AI-IO ``data.hdf5`` (traj_target = p, q xyzw, v; rotor_spd in RPM).

    AI-IO stores body velocity in ``traj_target[7:10]`` (its ``datasets.py`` reads it as ``vb0``);
    ``velocity_in_body=False`` writes world velocity instead (a file from another tool).
    """
    import h5py

    v = Rotation.from_quat(tr.q).inv().apply(tr.v) if velocity_in_body else tr.v
    with h5py.File(path, "w") as f:
        f.create_dataset("ts", data=tr.t)
        for kind in ("raw", "calib"):
            f.create_dataset(f"gyro_{kind}", data=tr.gyro)
            f.create_dataset(f"accel_{kind}", data=tr.acc)
        f.create_dataset("traj_target", data=np.hstack([tr.p, tr.q, v]))
        f.create_dataset("rotor_spd", data=tr.rotor * AIIO_MAX_RPM)
        f.create_dataset("gyro_bias", data=np.zeros(3))
        f.create_dataset("accel_bias", data=np.zeros(3))
    return path


def write_aiio_mcap(bag_dir: Path, tr: Truth, odom_rate_div: int = 2, esc_rate_div: int = 4, n_esc: int = 4) -> Path:
    """Write an AI-IO-style ROS 2 mcap bag: IMU at every stamp, odometry (body twist) and ESC slower."""
    from rosbags.rosbag2 import StoragePlugin, Writer
    from rosbags.typesys.stores.ros2_humble import (
        builtin_interfaces__msg__Time as Time,
    )

    from velobins_data.datasets.aiio import ESC_STATUS_ITEM_MSG, ESC_STATUS_MSG, esc_typestore

    store = esc_typestore()
    types = store.types
    Header, Imu, Odometry = types["std_msgs/msg/Header"], types["sensor_msgs/msg/Imu"], types["nav_msgs/msg/Odometry"]
    Vector3, Quaternion = types["geometry_msgs/msg/Vector3"], types["geometry_msgs/msg/Quaternion"]
    Point, Pose, Twist = (
        types["geometry_msgs/msg/Point"],
        types["geometry_msgs/msg/Pose"],
        types["geometry_msgs/msg/Twist"],
    )
    PoseCov, TwistCov = types["geometry_msgs/msg/PoseWithCovariance"], types["geometry_msgs/msg/TwistWithCovariance"]
    EscItem, Esc = types["mavros_msgs/msg/ESCStatusItem"], types["mavros_msgs/msg/ESCStatus"]

    def header(ts: float, frame: str = "") -> object:
        ts = float(ts)
        sec = int(ts)
        return Header(stamp=Time(sec=sec, nanosec=round((ts - sec) * 1e9)), frame_id=frame)

    v_body = Rotation.from_quat(tr.q).inv().apply(tr.v)
    with Writer(bag_dir, version=8, storage_plugin=StoragePlugin.MCAP) as w:
        c_imu = w.add_connection("/mavros/imu/data", "sensor_msgs/msg/Imu", typestore=store)
        c_odom = w.add_connection("/odom/global", "nav_msgs/msg/Odometry", typestore=store)
        c_esc = w.add_connection(
            "/mavros/esc",
            "mavros_msgs/msg/ESCStatus",
            typestore=store,
            msgdef=ESC_STATUS_MSG + "\n" + ESC_STATUS_ITEM_MSG,
        )
        cov9, cov36 = np.zeros(9), np.zeros(36)
        for i, ts in enumerate(tr.t):
            stamp_ns = round(float(ts) * 1e9)
            imu = Imu(
                header=header(ts, "base_link"),
                orientation=Quaternion(x=0.0, y=0.0, z=0.0, w=1.0),
                orientation_covariance=cov9,
                angular_velocity=Vector3(x=tr.gyro[i, 0], y=tr.gyro[i, 1], z=tr.gyro[i, 2]),
                angular_velocity_covariance=cov9,
                linear_acceleration=Vector3(x=tr.acc[i, 0], y=tr.acc[i, 1], z=tr.acc[i, 2]),
                linear_acceleration_covariance=cov9,
            )
            w.write(c_imu, stamp_ns, store.serialize_cdr(imu, "sensor_msgs/msg/Imu"))
            if i % odom_rate_div == 0:
                pose = Pose(
                    position=Point(x=tr.p[i, 0], y=tr.p[i, 1], z=tr.p[i, 2]),
                    orientation=Quaternion(x=tr.q[i, 0], y=tr.q[i, 1], z=tr.q[i, 2], w=tr.q[i, 3]),
                )
                lin = Vector3(x=v_body[i, 0], y=v_body[i, 1], z=v_body[i, 2])
                twist = Twist(linear=lin, angular=Vector3(x=0.0, y=0.0, z=0.0))
                odom = Odometry(
                    header=header(ts, "world"),
                    child_frame_id="base_link",
                    pose=PoseCov(pose=pose, covariance=cov36),
                    twist=TwistCov(twist=twist, covariance=cov36),
                )
                w.write(c_odom, stamp_ns, store.serialize_cdr(odom, "nav_msgs/msg/Odometry"))
            if i % esc_rate_div == 0:
                rpm = tr.rotor[i] * AIIO_MAX_RPM
                items = [
                    EscItem(header=header(ts), rpm=int(rpm[k % 4]), voltage=16.0, current=1.0) for k in range(n_esc)
                ]
                w.write(
                    c_esc,
                    stamp_ns,
                    store.serialize_cdr(Esc(header=header(ts), esc_status=items), "mavros_msgs/msg/ESCStatus"),
                )
    return bag_dir


def circle_flight(seconds: float = 6.0, rate: float = 100.0, kind: str = "command", seed: int = 0) -> dict:
    """Arrays of a banked 1 m circle at 1 m altitude (yaw 0), with sensor noise."""
    rng = np.random.default_rng(seed)
    n = round(seconds * rate) + 1
    t = 100.0 + np.arange(n) / rate
    w, s = 2 * math.pi / 4.0, t - t[0]
    p = np.stack([np.cos(w * s), np.sin(w * s), 1.0 + 0.1 * np.sin(0.5 * s)], axis=1)
    v = np.stack([-w * np.sin(w * s), w * np.cos(w * s), 0.05 * np.cos(0.5 * s)], axis=1)
    a = np.stack([-(w**2) * np.cos(w * s), -(w**2) * np.sin(w * s), -0.025 * np.sin(0.5 * s)], axis=1)
    thrust = a + np.array([0.0, 0.0, G])
    z_b = thrust / np.linalg.norm(thrust, axis=1, keepdims=True)
    y_b = np.cross(z_b, [1.0, 0.0, 0.0])
    y_b /= np.linalg.norm(y_b, axis=1, keepdims=True)
    rot = Rotation.from_matrix(np.stack([np.cross(y_b, z_b), y_b, z_b], axis=2))
    gyro = np.vstack([(rot[:-1].inv() * rot[1:]).as_rotvec() * rate, np.zeros((1, 3))])
    acc = np.zeros((n, 3))
    acc[:, 2] = np.linalg.norm(thrust, axis=1)
    base = 0.55 if kind == "command" else 1200.0
    rotor = base * (1.0 + 0.05 * np.sin(3.0 * s)[:, None] + 0.01 * rng.normal(size=(n, 4)))
    return {
        "t": t,
        "acc": acc + rng.normal(0, 0.05, (n, 3)),
        "gyro": gyro + rng.normal(0, 0.01, (n, 3)),
        "rotor": rotor,
        "rotor_kind": kind,
        "p": p + rng.normal(0, 1e-4, (n, 3)),
        "q": rot.as_quat(),
        "v": v + rng.normal(0, 0.01, (n, 3)),
    }


def make_flight(arrays: dict, name: str = "flight") -> Flight:
    return Flight(name=name, metadata={"platform": "test", "gravity": G}, **arrays)


def write_flight(path: Path, arrays: dict | None = None) -> Path:
    """Write ``arrays`` (default: a good circle) as a plain-CSV flight; the Flight contract applies."""
    write_csv(make_flight(arrays if arrays is not None else circle_flight(), path.stem), path)
    return path
