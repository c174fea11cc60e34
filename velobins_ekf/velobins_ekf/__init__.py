"""Error-state EKF fusing IMU propagation with the learned body-frame velocity, and its node.

The core (no ROS): :class:`EkfConfig` (all tunables), :class:`ErrorStateEkf` (state, propagation,
velocity update; IMU intervals between reads are applied in batches by
:mod:`velobins_ekf.propagation`), :class:`VelocityEkf` (timestamped streams, late measurements,
rejection counters; displacement measurements against cloned past poses), :func:`run_offline` and
:func:`run_offline_displacement` (a whole recorded flight) and :func:`load_filter_config`
(the filter's parameters from the node's ROS parameter YAML files).
"""

from velobins_ekf.config import EkfConfig
from velobins_ekf.ekf import ErrorStateEkf, NavState, UpdateResult
from velobins_ekf.offline import OfflineResult, run_offline, run_offline_displacement
from velobins_ekf.params import load_filter_config
from velobins_ekf.runner import FilterStats, VelocityEkf

__all__ = [
    "EkfConfig",
    "ErrorStateEkf",
    "FilterStats",
    "NavState",
    "OfflineResult",
    "UpdateResult",
    "VelocityEkf",
    "load_filter_config",
    "run_offline",
    "run_offline_displacement",
]
