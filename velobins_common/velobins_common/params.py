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

from .errors import UserError
from .fields import coerce_value

T = TypeVar("T")


def load_section(params_files: Iterable[Path | str] | None, node: str, section: str, config: T) -> T:
    """``config`` (a dataclass instance) with the ``node: ros__parameters: section:`` overrides of
    ROS parameter files, applied in order.

    Raises ``FileNotFoundError`` for a missing file, and ``UserError`` naming the file (and the
    key) for a file that is not YAML, too large or deep, not a mapping, or that sets an unknown
    key, a value of the wrong type or a value the dataclass refuses.
    """
    for path in params_files or []:
        config = _apply_file(config, Path(path), node, section)
    return config


def _apply_file(config: T, path: Path, node: str, section: str) -> T:
    """``config`` with the overrides of one parameter file."""
    import yaml

    from .bounded import read_yaml

    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such parameter file (--params)")
    try:
        doc = read_yaml(path)  # bounded: size, nesting, no aliases
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        where = getattr(exc, "problem_mark", None)
        line = f" (line {where.line + 1})" if where is not None else ""
        raise UserError(f"{path}: not a valid YAML parameter file{line}: {exc.__class__.__name__}") from None
    doc = doc or {}
    if not isinstance(doc, dict):
        raise UserError(f"{path}: expected a mapping of node names at the top level")
    overrides: dict = {}
    keys = node_keys(node)
    for key in (k for k in doc if k in keys):  # in file order, as rcl applies them
        entry = doc.get(key)
        params = entry.get("ros__parameters") if isinstance(entry, dict) else None
        found = params.get(section) if isinstance(params, dict) else None
        if found is not None and not isinstance(found, dict):
            raise UserError(f"{path}: expected '{key}: ros__parameters: {section}:' to be a mapping")
        overrides.update(found or {})
    names = {f.name for f in dataclasses.fields(config)}
    unknown = set(overrides) - names
    if unknown:
        raise UserError(f"{path}: unknown {node} {section} parameter(s) {sorted(unknown)}")
    values = {}
    for key, value in overrides.items():
        try:
            values[key] = coerce_value(type(config), key, value, label=f"{node}.{section}.{key}")
        except ValueError as exc:
            raise UserError(f"{path}: field {exc}") from None
    try:
        return dataclasses.replace(config, **values)
    except ValueError as exc:
        raise UserError(f"{path}: {exc}") from None


def node_keys(node: str) -> tuple[str, ...]:
    """The top-level keys of a ROS parameter file that apply to node ``node`` when it runs in the root
    namespace (offline readers): ``/**``, ``/**/node``, ``node`` and ``/node``. Under a namespace
    only the first two match (that is why the shipped files use ``/**/node:``)."""
    return ("/**", f"/**/{node}", node, f"/{node}")
