"""A config dataclass from ROS parameter YAML files, without ROS: what a node reads, offline.

A node reads ``<node>: ros__parameters: <section>:`` through rclpy; offline evaluation must read
the very same entries from the very same files, so that "offline numbers are the node's numbers"
holds for a tuned configuration too. :func:`load_section` is that reader for every such section
(the EKF's ``filter``, the network node's ``predictor``): the dataclass defaults, then each
file's overrides in order, with the node's type rules (a boolean stays a boolean, a number a
number, a string a string).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


def load_section(params_files: Iterable[Path | str] | None, node: str, section: str, config: T) -> T:
    """``config`` (a dataclass instance) with the ``node: ros__parameters: section:`` overrides of
    ROS parameter files, applied in order.

    Raises ``FileNotFoundError`` for a missing file, and ``ValueError`` naming the file (and the
    key) for a file that is not YAML, not a mapping, or that sets an unknown key, a value of the
    wrong type or a value the dataclass refuses.
    """
    for path in params_files or []:
        config = _apply_file(config, Path(path), node, section)
    return config


def _apply_file(config: T, path: Path, node: str, section: str) -> T:
    """``config`` with the overrides of one parameter file."""
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
    entry = doc.get(node) if isinstance(doc, dict) else None
    params = entry.get("ros__parameters") if isinstance(entry, dict) else None
    overrides = params.get(section) if isinstance(params, dict) else None
    if not isinstance(doc, dict) or (overrides is not None and not isinstance(overrides, dict)):
        raise ValueError(f"{path}: expected '{node}: ros__parameters: {section}:' to be a mapping")
    overrides = overrides or {}
    types = {f.name: type(getattr(config, f.name)) for f in dataclasses.fields(config)}
    unknown = set(overrides) - set(types)
    if unknown:
        raise ValueError(f"{path}: unknown {node} {section} parameter(s) {sorted(unknown)}")
    for key, value in overrides.items():
        if not _fits(types[key], value):
            raise ValueError(f"{path}: field '{node}.{section}.{key}': expected a {types[key].__name__}, got {value!r}")
    try:
        return dataclasses.replace(config, **{k: types[k](v) for k, v in overrides.items()})
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None


def _fits(kind: type, value: object) -> bool:
    """Whether a YAML value has the parameter's type (ints are accepted for floats, as ROS does)."""
    if kind is bool or isinstance(value, bool):
        return kind is bool and isinstance(value, bool)
    if kind in (int, float):
        return isinstance(value, int | float) and (kind is float or isinstance(value, int))
    return isinstance(value, kind)
