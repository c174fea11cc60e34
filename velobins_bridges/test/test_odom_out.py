"""Odometry out, against hand-computed frames: a yaw of 90° and a pitched attitude, for PX4 (FRD and
NED pose frames, body and world velocity, variances in PX4's layout, µs stamps) and for mavros (whose
own rotation into odom_ned / base_link_frd must land where the PX4 conversion does)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from velobins_bridges.odom_out import (
    POSE_FRAME_FRD,
    POSE_FRAME_NED,
    VELOCITY_FRAME_BODY_FRD,
    VELOCITY_FRAME_FRD,
    VELOCITY_FRAME_NED,
    Odometry,
    OdomOutConfig,
    Throttle,
    check,
    to_px4,
)
from velobins_common.frames import matrix_to_quaternion, quaternion_to_matrix

S45, C45 = math.sin(math.pi / 4), math.cos(math.pi / 4)
S15, C15 = math.sin(math.pi / 12), math.cos(math.pi / 12)
YAW90 = (0.0, 0.0, S45, C45)  # (x, y, z, w): body x (forward) points to odom +y
# Yaw 90° then nose up 30°: in FLU a nose-up pitch is a rotation about body y (left) by -30°.
YAW90_PITCH_UP30 = (S45 * S15, -C45 * S15, S45 * C15, C45 * C15)


def cov6(diag_pos: tuple, diag_rot: tuple) -> tuple[float, ...]:
    return tuple(np.diag([*diag_pos, *diag_rot]).reshape(-1).tolist())


def odom(q: tuple, linear=(1.0, 0.5, -0.2)) -> Odometry:
    return Odometry(
        stamp=1_700_000_000.25,
        position=(1.0, 2.0, 3.0),
        orientation=q,
        linear=linear,
        angular=(0.1, 0.2, 0.3),
        pose_covariance=cov6((1.0, 4.0, 9.0), (0.01, 0.02, 0.03)),
        twist_covariance=cov6((0.1, 0.2, 0.3), (0.5, 0.5, 0.5)),
    )


def close(a, b, tol=1e-12) -> None:
    assert np.allclose(np.asarray(a, dtype=float), np.asarray(b, dtype=float), atol=tol), (a, b)


def test_the_pitched_input_is_what_its_name_says() -> None:
    forward = quaternion_to_matrix(YAW90_PITCH_UP30) @ np.array([1.0, 0.0, 0.0])
    close(forward, (0.0, math.cos(math.pi / 6), math.sin(math.pi / 6)), 1e-12)  # north and up (ENU)


def test_px4_ned_yaw_90() -> None:
    out = to_px4(odom(YAW90), OdomOutConfig(pose_frame="ned"), now=1_700_000_000.5)
    assert out.pose_frame == POSE_FRAME_NED and out.velocity_frame == VELOCITY_FRAME_BODY_FRD
    close(out.position, (2.0, 1.0, -3.0))  # ENU (x east, y north, z up) -> NED
    close(out.q, (1.0, 0.0, 0.0, 0.0))  # facing north: NED yaw 0 (w, x, y, z)
    close(out.velocity, (1.0, -0.5, 0.2))  # body FLU -> FRD
    close(out.angular_velocity, (0.1, -0.2, -0.3))
    close(out.position_variance, (4.0, 1.0, 9.0))
    close(out.orientation_variance, (0.02, 0.01, 0.03))  # about body x = odom y, body y = odom -x
    close(out.velocity_variance, (0.1, 0.2, 0.3))
    assert (out.timestamp, out.timestamp_sample) == (1_700_000_000_500_000, 1_700_000_000_250_000)
    assert out.quality == 100 and out.reset_counter == 0


def test_px4_frd_yaw_90() -> None:
    out = to_px4(odom(YAW90), OdomOutConfig(), now=0.0)
    assert out.pose_frame == POSE_FRAME_FRD
    close(out.position, (1.0, -2.0, -3.0))  # FLU world -> FRD world
    close(out.q, (C45, 0.0, 0.0, -S45))  # body x along odom +y = FRD -y: yaw -90° about z down
    close(out.velocity, (1.0, -0.5, 0.2))
    close(out.position_variance, (1.0, 4.0, 9.0))
    close(out.orientation_variance, (0.02, 0.01, 0.03))


def test_px4_world_velocity_yaw_90() -> None:
    ned = to_px4(odom(YAW90), OdomOutConfig(pose_frame="ned", velocity_frame="pose_frame"), now=0.0)
    assert ned.velocity_frame == VELOCITY_FRAME_NED
    # facing north: forward 1 = north, left 0.5 = west, up -0.2 = down 0.2
    close(ned.velocity, (1.0, -0.5, 0.2))
    close(ned.velocity_variance, (0.1, 0.2, 0.3))  # north = body x, east = body -y
    frd = to_px4(odom(YAW90), OdomOutConfig(velocity_frame="pose_frame"), now=0.0)
    assert frd.velocity_frame == VELOCITY_FRAME_FRD
    close(frd.velocity, (-0.5, -1.0, 0.2))  # odom ENU velocity (-0.5, 1, -0.2) -> (x, -y, -z)
    close(frd.velocity_variance, (0.2, 0.1, 0.3))


def test_px4_pitched_attitude() -> None:
    ned = to_px4(odom(YAW90_PITCH_UP30, linear=(1.0, 0.0, 0.0)), OdomOutConfig(pose_frame="ned"), now=0.0)
    close(ned.q, (C15, 0.0, S15, 0.0))  # facing north, nose up 30°: pitch +30° about y (right)
    frd = to_px4(odom(YAW90_PITCH_UP30), OdomOutConfig(), now=0.0)
    # yaw -90° about z down, then +30° about the new y: q_z(-90°) ⊗ q_y(30°)
    close(frd.q, (C45 * C15, S45 * S15, C45 * S15, -S45 * C15))
    world = to_px4(
        odom(YAW90_PITCH_UP30, linear=(1.0, 0.0, 0.0)), OdomOutConfig(pose_frame="ned", velocity_frame="pose_frame"), 0
    )
    close(world.velocity, (math.cos(math.pi / 6), 0.0, -math.sin(math.pi / 6)))  # north and up
    body = to_px4(odom(YAW90_PITCH_UP30, linear=(1.0, 0.0, 0.0)), OdomOutConfig(), now=0.0)
    close(body.velocity, (1.0, 0.0, 0.0))  # straight ahead in the body frame, whatever the attitude


def test_px4_velocity_only_and_counters() -> None:
    out = to_px4(odom(YAW90), OdomOutConfig(send_pose=False, quality=40), now=0.0, reset_counter=257)
    assert all(math.isnan(v) for v in (*out.position, *out.q, *out.position_variance, *out.orientation_variance))
    close(out.velocity, (1.0, -0.5, 0.2))
    assert out.reset_counter == 1 and out.quality == 40  # uint8 wraps


def test_mavros_rotation_lands_on_the_px4_ned_numbers() -> None:
    """mavros keeps our ENU/FLU odometry (frame ids odom / base_link) and rotates it itself with its
    static transforms odom -> odom_ned (ENU -> NED) and base_link -> base_link_frd (FLU -> FRD)."""
    ned = np.array([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, -1.0]])
    frd = np.diag([1.0, -1.0, -1.0])
    for q in (YAW90, YAW90_PITCH_UP30):
        o = odom(q)
        px4 = to_px4(o, OdomOutConfig(pose_frame="ned"), now=0.0)
        close(ned @ np.asarray(o.position), px4.position)
        x, y, z, w = matrix_to_quaternion(ned @ quaternion_to_matrix(o.orientation) @ frd.T)
        close((w, x, y, z), px4.q, 1e-12)
        close(frd @ np.asarray(o.linear), px4.velocity)


def test_check_refuses_what_cannot_be_sent() -> None:
    assert check(odom(YAW90)) is None
    nan = odom((0.0, 0.0, 0.0, 1.0), linear=(math.nan, 0.0, 0.0))
    assert check(nan).reason == "non_finite"
    assert check(odom((0.0, 0.0, 0.0, 2.0))).reason == "bad_orientation"


def test_throttle_limits_the_rate_and_counts_restarts() -> None:
    throttle = Throttle(max_rate=10.0)
    stamps = [100.0 + 0.02 * i for i in range(11)]  # 50 Hz
    assert [throttle.accept(t) for t in stamps] == [i % 5 == 0 for i in range(11)]
    assert throttle.accept(5.0) and throttle.resets == 1  # stamps went back: the filter restarted
    every = Throttle(max_rate=0.0)
    assert all(every.accept(t) for t in stamps)


def test_config() -> None:
    assert OdomOutConfig().topic == "fmu/in/vehicle_visual_odometry"
    assert OdomOutConfig(mode="mavros").topic == "mavros/odometry/out"
    assert OdomOutConfig(mode="mavros", output_topic="odom_to_fcu").topic == "odom_to_fcu"
    with pytest.raises(ValueError, match="'px4_type' must look like"):
        OdomOutConfig(px4_type="VehicleOdometry")
