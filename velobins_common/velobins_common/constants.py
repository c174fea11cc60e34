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
