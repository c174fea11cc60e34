"""The filter's parameters from ROS parameter YAML files, without ROS.

The EKF node reads ``velobins_ekf: ros__parameters: filter:`` through rclpy; offline evaluation
must read the very same entries from the very same files, so that "offline numbers are the node's
numbers" holds for a tuned configuration too. The reader is :mod:`velobins_common.params`'s,
shared with the network node's ``predictor`` section.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from velobins_common.params import load_section
from velobins_ekf.config import EkfConfig

NODE_NAME = "velobins_ekf"
"""Top-level key of the EKF node in a ROS parameter file."""
FILTER_PREFIX = "filter"
"""Parameter namespace of :class:`EkfConfig` under the node (``filter.<field>``)."""


def load_filter_config(params_files: Iterable[Path | str] | None = None) -> EkfConfig:
    """:class:`EkfConfig` from its defaults plus the ``velobins_ekf: ros__parameters: filter:``
    overrides of ROS parameter files (the files the EKF node loads), applied in order.

    Errors name the file and the key (:func:`velobins_common.params.load_section`).
    """
    return load_section(params_files, NODE_NAME, FILTER_PREFIX, EkfConfig())
