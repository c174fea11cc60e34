"""Physical constants, rotor kinds and unit conversions: one definition each for every package.

The data layer (:mod:`velobins_data.flight`), the filter (:mod:`velobins_ekf.config`), the
network's input contract (:mod:`velobins_net.config`) and the ROS messages
(``velobins_msgs/msg/RotorSpeeds.msg``) all read them from here.
"""

from __future__ import annotations

import math

STANDARD_GRAVITY = 9.80665
"""Standard gravity [m/s²]: the default gravity magnitude of flights and of the filter."""

ROTOR_KINDS = ("rpm", "pwm")
"""Rotor signal kinds of a flight and a model: ``"rpm"`` holds rotor speed in rad/s (the name is
kept from the design notes and every stored flight and checkpoint), ``"pwm"`` a command
normalised to [0, 1]."""

RPM_TO_RAD_PER_S = 2.0 * math.pi / 60.0
"""Revolutions per minute → rad/s."""

UNIT_QUATERNION_TOLERANCE = 1e-3
"""Allowed deviation of a quaternion's norm from 1 (and of ``RᵀR`` from the identity, per entry) where a
rotation enters from outside: a flight's ground truth, an odometry message, a parameter. Loose enough
for values typed with 4–6 decimals (``0.7071``) or stored as float32, tight enough to reject a vector
that is not a rotation at all; accepted values are re-normalised exactly."""
