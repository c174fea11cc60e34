"""The filter's parameters from ROS parameter YAML files, without ROS.

The EKF node reads ``velobins_ekf: ros__parameters: filter:`` through rclpy; offline evaluation
must read the very same entries from the very same files, so that "offline numbers are the node's
numbers" holds for a tuned configuration too. This module is that reader: :class:`EkfConfig`
defaults, then each file's ``filter`` overrides in order, with the node's type rules (a boolean
stays a boolean, a number a number).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from pathlib import Path

from velobins_ekf.config import EkfConfig

NODE_NAME = "velobins_ekf"
"""Top-level key of the EKF node in a ROS parameter file."""
FILTER_PREFIX = "filter"
"""Parameter namespace of :class:`EkfConfig` under the node (``filter.<field>``)."""


def load_filter_config(params_files: Iterable[Path | str] | None = None) -> EkfConfig:
    """:class:`EkfConfig` from its defaults plus the ``velobins_ekf: ros__parameters: filter:``
    overrides of ROS parameter files (the files the EKF node loads), applied in order.

    Raises ``FileNotFoundError`` for a missing file, and ``ValueError`` naming the file (and the
    key) for a file that is not YAML, not a mapping, or that sets an unknown key, a value of the
    wrong type or a value :class:`EkfConfig` refuses.
    """
    config = EkfConfig()
    for path in params_files or []:
        config = _apply_file(config, Path(path))
    return config


def _apply_file(config: EkfConfig, path: Path) -> EkfConfig:
    """``config`` with the filter overrides of one parameter file."""
    import yaml

    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such parameter file (--params)")
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        where = getattr(exc, "problem_mark", None)
        line = f" (line {where.line + 1})" if where is not None else ""
        raise ValueError(f"{path}: not a valid YAML parameter file{line}: {exc.__class__.__name__}") from None
    doc = doc or {}
    node = doc.get(NODE_NAME) if isinstance(doc, dict) else None
    params = node.get("ros__parameters") if isinstance(node, dict) else None
    overrides = params.get(FILTER_PREFIX) if isinstance(params, dict) else None
    if not isinstance(doc, dict) or (overrides is not None and not isinstance(overrides, dict)):
        raise ValueError(f"{path}: expected '{NODE_NAME}: ros__parameters: {FILTER_PREFIX}:' to be a mapping")
    overrides = overrides or {}
    types = {f.name: type(getattr(config, f.name)) for f in dataclasses.fields(EkfConfig)}
    unknown = set(overrides) - set(types)
    if unknown:
        raise ValueError(f"{path}: unknown {NODE_NAME} filter parameter(s) {sorted(unknown)}")
    for key, value in overrides.items():
        numeric = isinstance(value, int | float) and not isinstance(value, bool)
        if (types[key] is bool) != isinstance(value, bool) or (types[key] is not bool and not numeric):
            raise ValueError(
                f"{path}: field '{NODE_NAME}.{FILTER_PREFIX}.{key}': expected a {types[key].__name__}, got {value!r}"
            )
    try:
        return dataclasses.replace(config, **{k: types[k](v) for k, v in overrides.items()})
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None
