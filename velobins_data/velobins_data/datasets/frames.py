"""Frame and unit conversions shared by the adapters, and the frame tests that choose between them.

Target conventions are those of :mod:`velobins_data.flight` (REP-103: world ENU z-up, body FLU,
quaternion body->world scalar-last). The checks use the rigid-body kinematics every inertial
odometry method relies on (paper §III, the EKF propagation of §III-E):

    world acceleration  a_w = R f - g e_z,     f = body specific force,
    world velocity      v_w = dp/dt,

so a quantity in the wrong frame or with the wrong sign shows up as a large residual (the
gravity residual itself is :func:`velobins_data.validate.gravity_residual`, checked on every flight).
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from scipy.spatial.transform import Rotation

FRD_TO_FLU = np.diag([1.0, -1.0, -1.0])
"""Body FRD (aerospace, PX4/Betaflight) -> body FLU (REP-103): negate y and z.

It is a proper rotation (180° about x) and its own inverse, so it is also R_FRD<-FLU: an
attitude given for an FRD body becomes R_world<-FLU = R_world<-FRD · FRD_TO_FLU
(:func:`attitude_to_flu`)."""


def rotation_from_column_major(flat: np.ndarray) -> Rotation:
    """Rotations from (T, 9) matrices stored column-major (``m[:, 3*c + r] = R[r, c]``)."""
    mats = flat.reshape(-1, 3, 3).transpose(0, 2, 1)
    return Rotation.from_matrix(mats)


def velocity_frame(
    t: np.ndarray, p: np.ndarray, q: np.ndarray, v_raw: np.ndarray, min_speed: float = 0.2
) -> Literal["world", "body"] | None:
    """Decide whether ``v_raw`` is world- or body-frame by comparing with dp/dt.

    Returns ``None`` when the flight is too slow or both hypotheses fit equally (e.g. yaw ≈ 0
    and level), i.e. the data cannot tell.
    """
    dp = np.gradient(p, t, axis=0)
    if float(np.sqrt(np.mean(np.sum(dp**2, axis=1)))) < min_speed:
        return None
    err_world = float(np.sqrt(np.mean((v_raw - dp) ** 2)))
    err_body = float(np.sqrt(np.mean((Rotation.from_quat(q).apply(v_raw) - dp) ** 2)))
    if err_world < 0.5 * err_body:
        return "world"
    if err_body < 0.5 * err_world:
        return "body"
    return None


def gravity_axis_sign(acc: np.ndarray) -> float:
    """Sign of the median body-z specific force: +1 for FLU (hover reads +g), -1 for FRD."""
    return 1.0 if float(np.median(acc[:, 2])) >= 0.0 else -1.0


def attitude_to_flu(rot: Rotation, frame: Literal["flu", "frd"]) -> Rotation:
    """Body->world rotations of an FLU body, from rotations given for a ``frame`` body.

    Converting the IMU axes alone (f_FLU = FRD_TO_FLU · f_FRD) is not enough when the attitude
    also describes the FRD body: R_world<-FLU = R_world<-FRD · R_FRD<-FLU keeps R · f unchanged.
    """
    if frame == "flu":
        return rot
    if frame == "frd":
        return rot * Rotation.from_matrix(FRD_TO_FLU)
    raise ValueError(f"attitude frame must be 'flu' or 'frd', got {frame!r}")


def attitude_body_frame(rot: Rotation, acc_flu: np.ndarray) -> Literal["flu", "frd"]:
    """Which body (FLU or FRD) the attitude ``rot`` describes, given FLU specific force ``acc_flu``.

    In a z-up world, R · f averages to +g e_z over a flight (its acceleration averages out); the
    attitude of the other body convention turns body y and z over, so the same average reads about
    -g. The sign of the mean world-z of R · f therefore decides (robust to tilt below 90°).
    """
    up = float(np.mean(rot.apply(acc_flu)[:, 2]))
    return "flu" if up >= 0.0 else "frd"
