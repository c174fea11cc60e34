"""Synthetic flights for the net tests (no dataset needed).

Body velocity follows a random smooth planar path; the specific force carries a drag term
f_xy = −k v_xy (rotor drag, as in real multirotors), so the velocity is observable from the
accelerometer alone and a small network can learn it. Orientation is identity, so body
velocity = world velocity. The flights are real :class:`~velobins_data.flight.Flight` objects
(validated on construction), the type the network's data layer takes.
"""

from __future__ import annotations

import numpy as np

from velobins_common.constants import ROTOR_COMMAND, STANDARD_GRAVITY
from velobins_data.flight import Flight

DRAG_K = 0.6
"""Drag coefficient k [1/s] of f_xy = −k v_xy."""


def make_flight(
    seed: int, duration: float = 20.0, rate: float = 100.0, kind: str = ROTOR_COMMAND, rotors: int = 4
) -> Flight:
    """One flight with velocity-dependent drag in the accelerometer."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(duration * rate)) / rate
    v = np.zeros((len(t), 3))
    for axis, amp in ((0, 2.0), (1, 1.5), (2, 0.3)):
        for _ in range(3):
            f, ph = rng.uniform(0.05, 0.4), rng.uniform(0, 2 * np.pi)
            v[:, axis] += amp / 3 * np.sin(2 * np.pi * f * t + ph)
    acc = np.zeros_like(v)
    acc[:, :2] = -DRAG_K * v[:, :2]
    acc[:, 2] = STANDARD_GRAVITY
    acc += rng.normal(0, 0.02, acc.shape)
    gyro = rng.normal(0, 0.01, (len(t), 3))
    base = 0.5 if kind == ROTOR_COMMAND else 1500.0
    rotor = base * (1 + 0.05 * rng.standard_normal((len(t), rotors)))
    if kind == ROTOR_COMMAND:
        rotor = np.clip(rotor, 0.0, 1.0)
    p = np.cumsum(v, axis=0) / rate
    q = np.tile([0.0, 0.0, 0.0, 1.0], (len(t), 1))
    return Flight(f"synthetic_{seed}", t, acc, gyro, rotor, kind, p, q, v, {"source": f"synthetic:{seed}"})
