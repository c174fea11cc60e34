"""Physical constants, rotor kinds and unit conversions: one definition each for every package.

The data layer (:mod:`velobins_data.flight`), the filter (:mod:`velobins_ekf.config`), the
network's input contract (:mod:`velobins_net.config`) and the ROS messages
(``velobins_msgs/msg/RotorSpeeds.msg``) all read them from here. The statistics constants
(½ log 2π, the χ² bounds) live beside their formulas in :mod:`velobins_common.stats`.
"""

from __future__ import annotations

import math

STANDARD_GRAVITY = 9.80665
"""Standard gravity [m/s²]: the default gravity magnitude of flights and of the filter."""

ROTOR_SPEED = "speed"
"""Rotor kind: measured rotor speed [rad/s] (ESC telemetry; the network is fed its square, ∝ thrust)."""
ROTOR_COMMAND = "command"
"""Rotor kind: commanded signal (PWM / throttle) normalised to [0, 1] (fed to the network as is)."""
ROTOR_KINDS = (ROTOR_SPEED, ROTOR_COMMAND)
"""Rotor signal kinds of a flight and a model."""
LEGACY_ROTOR_KINDS = {"rpm": ROTOR_SPEED, "pwm": ROTOR_COMMAND}
"""The names before issue 22 (``"rpm"`` held rad/s, not rev/min; ``"pwm"`` a normalised command), read as
aliases from flights (CSV, npz), bags and checkpoints written with them."""


def canonical_rotor_kind(kind: str) -> str:
    """``kind`` as one of :data:`ROTOR_KINDS` (an old name becomes its new one).

    Raises:
        ValueError: not a rotor kind; the message lists the kinds.
    """
    if kind in ROTOR_KINDS:
        return kind
    if kind in LEGACY_ROTOR_KINDS:
        return LEGACY_ROTOR_KINDS[kind]
    raise ValueError(
        f"must be one of {ROTOR_KINDS} ('{ROTOR_SPEED}' in rad/s, '{ROTOR_COMMAND}' normalised to [0, 1]; "
        f"the old names {tuple(LEGACY_ROTOR_KINDS)} are read too), got {kind!r}"
    )


RPM_TO_RAD_PER_S = 2.0 * math.pi / 60.0
"""Revolutions per minute → rad/s."""

UNIT_QUATERNION_TOLERANCE = 1e-3
"""Allowed deviation of a quaternion's norm from 1 (and of ``RᵀR`` from the identity, per entry) where a
rotation enters from outside: a flight's ground truth, an odometry message, a parameter. Loose enough
for values typed with 4–6 decimals (``0.7071``) or stored as float32, tight enough to reject a vector
that is not a rotation at all; accepted values are re-normalised exactly."""

DEG_TO_RAD = math.pi / 180.0
"""Degrees → radians (Crazyflie gyro logs are in deg/s)."""

MICROSECONDS_TO_S = 1.0e-6
"""Microseconds → seconds (PX4 timestamps and integration periods)."""
