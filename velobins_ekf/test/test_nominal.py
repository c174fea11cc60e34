"""The one nominal step against closed forms; one interval and a block of independent intervals agree."""

from __future__ import annotations

import numpy as np
from scipy.spatial.transform import Rotation

from velobins_common.constants import STANDARD_GRAVITY as G
from velobins_ekf.nominal import nominal_step, rotation_series
from velobins_ekf.so3 import so3_exp


def test_constant_rate_and_force_match_the_closed_form() -> None:
    """Rate ω and a specific force f held over dt: R⁺ = R Exp(ω dt); with R_m = R Exp(ω dt / 2),
    v⁺ = v + (R_m f − g e_z) dt and p⁺ = p + v dt + ½ (R_m f − g e_z) dt²."""
    rot = Rotation.from_rotvec([0.3, -0.4, 1.2]).as_matrix()
    vel, pos = np.array([1.0, -2.0, 0.5]), np.array([3.0, 4.0, -5.0])
    omega, force, dt = np.array([0.7, -1.1, 2.3]), np.array([0.4, -0.3, 9.9]), 0.01
    series = rotation_series(dt, omega, np.zeros(3))
    step = nominal_step(rot, vel, pos, force, series, dt, G)
    r_mid = rot @ so3_exp(omega * dt / 2)
    a_w = r_mid @ force - np.array([0.0, 0.0, G])
    np.testing.assert_allclose(step.rot, rot @ so3_exp(omega * dt), atol=1e-14)
    np.testing.assert_allclose(step.r_mid, r_mid, atol=1e-14)
    np.testing.assert_allclose(step.vel, vel + a_w * dt, atol=1e-13)
    np.testing.assert_allclose(step.pos, pos + vel * dt + 0.5 * a_w * dt * dt, atol=1e-13)


def test_a_block_of_independent_intervals_equals_each_interval() -> None:
    rng = np.random.default_rng(4)
    n = 9
    rot = Rotation.random(n, random_state=5).as_matrix()
    vel, pos, acc = rng.normal(size=(n, 3)), rng.normal(size=(n, 3)), rng.normal(size=(n, 3))
    acc[:, 2] += G
    gyro, bias, dt = rng.normal(size=(n, 3)), np.array([0.01, -0.02, 0.03]), 1e-3 * (1 + rng.random(n))
    block = nominal_step(rot, vel, pos, acc, rotation_series(dt, gyro, bias), dt, G)
    for k in range(n):
        dt_k = float(dt[k])
        one = nominal_step(rot[k], vel[k], pos[k], acc[k], rotation_series(dt_k, gyro[k], bias), dt_k, G)
        for a, b in zip(one, block, strict=True):
            np.testing.assert_allclose(a, b[k], rtol=1e-13, atol=1e-14)
