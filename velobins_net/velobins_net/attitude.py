"""The attitude channels of a streaming window (baselines that rotate the IMU: TLIO, EqNIO, IMO, AirIO).

Those methods need the body->world attitude R of every window sample. In training it is ground
truth (:func:`velobins_net.data.attitude_columns`); on a stream it is the filter's estimate: the
EKF's odometry in the node, the filter's state after each IMU sample in offline evaluation. The
estimates arrive at their own rate and with latency, so :func:`attitude_window` slerps between them
on the window's grid and, past the newest estimate, carries it forward with the window's own gyro
samples (R ← R Exp(ω Δt), the IMU propagation the filter itself would do). The window is refused
when the newest estimate is older than ``max_age`` or the estimates do not reach back to the
window's start.
"""

from __future__ import annotations

import numpy as np


def attitude_window(
    grid: np.ndarray, t_att: np.ndarray, q_att: np.ndarray, gyro_grid: np.ndarray, max_age: float
) -> np.ndarray | None:
    """(T, 9) body->world rotation, row-major, at every ``grid`` stamp, or None (stale / not covering).

    Args:
        grid: (T,) increasing window stamps [s].
        t_att: (M,) increasing stamps of the attitude estimates [s].
        q_att: (M, 4) their quaternions (x, y, z, w).
        gyro_grid: (T, 3) body angular rate on ``grid`` [rad/s] (carries the newest estimate forward).
        max_age: largest allowed gap [s] between the newest estimate and the window end.
    """
    from scipy.spatial.transform import Rotation, Slerp

    if len(t_att) == 0 or grid[-1] - t_att[-1] > max_age or t_att[0] > grid[0] + 1e-9:
        return None
    inside = grid <= t_att[-1]
    rot = np.empty((len(grid), 3, 3))
    if len(t_att) == 1:
        rot[inside] = Rotation.from_quat(q_att[0]).as_matrix()
    elif inside.any():
        g = np.clip(grid[inside], t_att[0], t_att[-1])
        rot[inside] = Slerp(t_att, Rotation.from_quat(q_att))(g).as_matrix()
    r = Rotation.from_quat(q_att[-1])
    t_prev = float(t_att[-1])
    for k in np.flatnonzero(~inside):  # after the newest estimate: integrate the gyro forward
        r = r * Rotation.from_rotvec(gyro_grid[k] * (grid[k] - t_prev))
        rot[k] = r.as_matrix()
        t_prev = float(grid[k])
    return rot.reshape(-1, 9)
