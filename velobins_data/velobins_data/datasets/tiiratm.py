"""TII-RATM adapter ("Race Against the Machine", TII drone-racing dataset), ``*_500hz_freq_sync.csv``.

Reference: the column table of the dataset's README (github.com/tii-racing/drone-racing-dataset,
"Data Format"). No real file was available here: the adapter is tested on fixtures written in
that schema; what is *unverified* is marked below.

==================================  ==========  ==================================================
columns used                        unit        conversion
==================================  ==========  ==================================================
``elapsed_time``                    s           kept as ``t``
``accel_[x/y/z]``                   m/s^2       body specific force; body axes see below
``gyro_[x/y/z]``                    rad/s       body rate; body axes see below
``thrust[0]`` .. ``thrust[3]``      [0, 1]      motor commands, rotor kind ``pwm``
``drone_[x/y/z]``                   m           world position (mocap, z up; see below)
``drone_velocity_linear_[x/y/z]``   m/s         world velocity (README lists m/s^2: a typo; it is
                                                the low-passed dp/dt of ``drone_[x/y/z]``)
``drone_rot[0]`` .. ``drone_rot[8]``  1         3x3 body->world rotation, **column-major**:
                                                ``drone_rot[3*c + r] = R[r, c]`` -> quaternion
==================================  ==========  ==================================================

Not read: ``timestamp`` (µs, same clock), ``img_filename``, ``channels_*``, ``aux*``, ``vbat``,
``drone_[roll/pitch/yaw]`` (redundant with ``drone_rot``), ``drone_velocity_angular_*``, gates.

Frames. What TII's own scripts show (github.com/tii-racing/drone-racing-dataset):
``scripts/data_interpolation.py`` computes ``drone_velocity_linear_*`` as the low-pass-filtered
finite difference of the mocap position (so world frame) and reads ``drone_rot`` column-major;
``scripts/reference_controller.py`` (the controller of the autonomous flights, fed by the same
mocap) uses gravity (0, 0, -9.8) and thrust along body +z, i.e. a **z-up world** and a z-up
(FLU) body for the mocap attitude. The world is therefore kept as is (no NED->ENU conversion);
a NED file would fail the validator's gravity residual rather than load wrongly. The IMU axes
are not documented (Betaflight logs may be FRD).

Body axes, for the IMU and the attitude separately, so the two always describe one body:

* ``body_frame`` (IMU): ``"auto"`` takes the sign of the median body-z specific force (FLU reads
  +g, FRD -g); FRD acc and gyro become FLU (y, z negated).
* ``attitude_frame`` (``drone_rot``): ``"auto"`` takes the sign of the mean world-z of R · f
  with f already FLU (+g for the right body, about -g for the other:
  :func:`frames.attitude_body_frame`); an FRD attitude becomes
  R_world<-FLU = R_world<-FRD · R_FRD<-FLU (:func:`frames.attitude_to_flu`). Flipping the IMU
  without the attitude would put gravity upside down in the world (gravity residual ≈ 2 g).

The choices are stored in ``metadata["body_frame_in_file"]`` and ``metadata["attitude_frame_in_file"]``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from velobins_common.constants import ROTOR_COMMAND
from velobins_data.datasets.errors import DatasetError
from velobins_data.datasets.frames import (
    FRD_TO_FLU,
    attitude_body_frame,
    attitude_to_flu,
    gravity_axis_sign,
    rotation_from_column_major,
)
from velobins_data.datasets.tabular import monotonic_rows, read_table, require_columns
from velobins_data.flight import STANDARD_GRAVITY, Flight

PLATFORM = "tii-racing-quad"
FILE_SUFFIX = "_500hz_freq_sync.csv"
TIME_COLUMN = "elapsed_time"
ACC_COLUMNS = ("accel_x", "accel_y", "accel_z")
GYRO_COLUMNS = ("gyro_x", "gyro_y", "gyro_z")
THRUST_COLUMNS = tuple(f"thrust[{i}]" for i in range(4))
POS_COLUMNS = ("drone_x", "drone_y", "drone_z")
VEL_COLUMNS = ("drone_velocity_linear_x", "drone_velocity_linear_y", "drone_velocity_linear_z")
ROT_COLUMNS = tuple(f"drone_rot[{i}]" for i in range(9))
REQUIRED_COLUMNS = (TIME_COLUMN, *ACC_COLUMNS, *GYRO_COLUMNS, *THRUST_COLUMNS, *POS_COLUMNS, *VEL_COLUMNS, *ROT_COLUMNS)
STRING_COLUMNS = ("img_filename",)
BodyFrame = Literal["auto", "flu", "frd"]
FRAMES = ("auto", "flu", "frd")


def flight_name(path: str | Path) -> str:
    """``flight-01a-ellipse`` from ``.../flight-01a-ellipse_500hz_freq_sync.csv``."""
    name = Path(path).name
    return name[: -len(FILE_SUFFIX)] if name.endswith(FILE_SUFFIX) else Path(path).stem


def load_tiiratm(path: str | Path, *, body_frame: BodyFrame = "auto", attitude_frame: BodyFrame = "auto") -> Flight:
    """Load one TII-RATM 500 Hz synchronised CSV as a :class:`Flight` (module docstring).

    Args:
        path: the ``*_500hz_freq_sync.csv`` file.
        body_frame: axes of the IMU columns in the file (``auto``: from the gravity sign).
        attitude_frame: body of ``drone_rot`` in the file (``auto``: the one that puts R · f up).

    Raises:
        DatasetError: missing column (all listed), NaN in a used column, unsorted stamps,
            thrust outside [0, 1], an unknown frame name.
    """
    source = str(path)
    for name, value in (("body_frame", body_frame), ("attitude_frame", attitude_frame)):
        if value not in FRAMES:
            raise DatasetError(source, name, f"must be one of {FRAMES}, got {value!r}")
    table = read_table(path, string_columns=STRING_COLUMNS)
    require_columns(source, table.columns, REQUIRED_COLUMNS)
    thrust_like = [c for c in table.columns if c.startswith("thrust[")]
    if len(thrust_like) != len(THRUST_COLUMNS):
        raise DatasetError(source, "thrust[*]", f"expected {len(THRUST_COLUMNS)} rotor columns, found {thrust_like}")
    t_all = table.get([TIME_COLUMN])[:, 0]
    keep = monotonic_rows(source, t_all, TIME_COLUMN)
    acc = table.get(ACC_COLUMNS)[keep]
    gyro = table.get(GYRO_COLUMNS)[keep]
    if body_frame == "auto":
        body_frame = "flu" if gravity_axis_sign(acc) > 0 else "frd"
    if body_frame == "frd":
        acc, gyro = acc @ FRD_TO_FLU.T, gyro @ FRD_TO_FLU.T
    thrust = table.get(THRUST_COLUMNS)[keep]
    outside = (thrust < 0) | (thrust > 1)
    if outside.any():
        row, col = (int(x) for x in next(iter(zip(*outside.nonzero(), strict=True))))
        raise DatasetError(source, THRUST_COLUMNS[col], f"thrust {thrust[row, col]} outside [0, 1]", int(keep[row]))
    rot_in_file = rotation_from_column_major(table.get(ROT_COLUMNS)[keep])
    if attitude_frame == "auto":
        attitude_frame = attitude_body_frame(rot_in_file, acc)
    q = attitude_to_flu(rot_in_file, attitude_frame).as_quat()
    return Flight(
        name=flight_name(path),
        t=t_all[keep],
        acc=acc,
        gyro=gyro,
        rotor=thrust,
        rotor_kind=ROTOR_COMMAND,
        p=table.get(POS_COLUMNS)[keep],
        q=q,
        v=table.get(VEL_COLUMNS)[keep],
        metadata={
            "dataset": "tiiratm",
            "platform": PLATFORM,
            "source": source,
            "gravity": STANDARD_GRAVITY,
            "body_frame_in_file": body_frame,
            "attitude_frame_in_file": attitude_frame,
            "dropped_stamps": len(t_all) - len(keep),
        },
    )
