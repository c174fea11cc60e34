"""Field documentation of config dataclasses, and command-line options generated from them.

The config dataclasses are the one source of every default and its meaning: the ROS parameter
YAML is rendered from them (``scripts/gen_config.py``), the nodes declare their parameters from
them (``velobins_ros.declare_config``) and the ``velobins`` commands build their options from them
here, so a default or a help text is written once.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import itertools
import math
import re
import textwrap
import typing
from collections.abc import Iterable, Mapping
from typing import Any

_ATTRIBUTE = re.compile(r"^(\w+)(?:\s*\([^)]*\))?:\s*(.*)$")


def _attribute_docstrings(cls: type) -> dict[str, str]:
    """The string literal right after each field of ``cls`` (PEP 257 attribute docstrings)."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    except (OSError, TypeError):
        return {}
    body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
    docs = {}
    for stmt, nxt in itertools.pairwise(body):
        if (
            isinstance(stmt, ast.AnnAssign)
            and isinstance(stmt.target, ast.Name)
            and isinstance(nxt, ast.Expr)
            and isinstance(nxt.value, ast.Constant)
            and isinstance(nxt.value.value, str)
        ):
            docs[stmt.target.id] = " ".join(nxt.value.value.split())
    return docs


def _attributes_section(cls: type) -> dict[str, str]:
    """The ``Attributes:`` section of a Google-style class docstring, name → text."""
    doc = inspect.getdoc(cls) or ""
    lines = doc.splitlines()
    try:
        start = next(i for i, ln in enumerate(lines) if ln.strip() == "Attributes:")
    except StopIteration:
        return {}
    docs: dict[str, str] = {}
    current = None
    indent = None
    for line in lines[start + 1 :]:
        if not line.strip():
            continue
        depth = len(line) - len(line.lstrip())
        if indent is None:
            indent = depth
        if depth < indent:
            break
        match = _ATTRIBUTE.match(line.strip()) if depth == indent else None
        if match:
            current = match.group(1)
            docs[current] = match.group(2).strip()
        elif current is not None:
            docs[current] += " " + line.strip()
    return docs


def field_docs(cls: type) -> dict[str, str]:
    """What each field of the dataclass ``cls`` means: its attribute docstring, else its entry in
    the class docstring's ``Attributes:`` section (both styles occur in this code base)."""
    return _attributes_section(cls) | _attribute_docstrings(cls)


def _plain(text: str) -> str:
    """Help text without reST markup (argparse prints it verbatim; ``%`` must be escaped)."""
    return text.replace("``", "").replace(":class:", "").replace(":data:", "").replace("%", "%%")


def add_config_options(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    cls: type,
    fields: Iterable[str],
    *,
    flags: Mapping[str, str] | None = None,
    choices: Mapping[str, Iterable[Any]] | None = None,
    defaults: Any = None,
) -> None:
    """Add one ``--option`` per named field of the dataclass ``cls``, default and help from it.

    Args:
        parser: where the options go.
        cls: the config dataclass (its defaults and field docs are the source).
        fields: the field names to expose, in order.
        flags: field → option name where it differs from ``--field-name`` (e.g. ``num_bins`` → ``--bins``).
        choices: field → allowed values.
        defaults: an instance whose values replace the class defaults (e.g. a nested config).

    The parsed value lands in ``args.<field>``; an ``Optional`` field accepts its base type and
    keeps ``None`` as default. Booleans become ``--flag`` / ``--no-flag``. A value is checked as it
    is parsed: a float must be finite, and every value within the field's :class:`ParamSpec`, so
    ``--time-budget inf`` or ``--bins 1`` is a usage error naming the option, not a traceback.
    """
    flags = dict(flags or {})
    choices = dict(choices or {})
    docs = field_docs(cls)
    hints = typing.get_type_hints(cls)
    by_name = {f.name: f for f in dataclasses.fields(cls)}
    for name in fields:
        field = by_name[name]
        default = getattr(defaults, name) if defaults is not None else _default(field)
        kind = hints[name]
        args = typing.get_args(kind)
        if type(None) in args:  # Optional[X] / X | None
            kind = next(a for a in args if a is not type(None))
        option = flags.get(name, "--" + name.replace("_", "-"))
        help_text = _plain(docs.get(name, name))
        if kind is bool:
            parser.add_argument(
                option, dest=name, action=argparse.BooleanOptionalAction, default=default, help=help_text
            )
            continue
        shown = "" if default is None else f" (default: {default})"
        parser.add_argument(
            option,
            dest=name,
            type=_option_type(cls, name, kind),
            default=default,
            choices=tuple(choices[name]) if name in choices else None,
            metavar=None if name in choices else name.upper(),
            help=help_text + shown,
        )


def _option_type(cls: type, name: str, kind: type) -> Any:
    """argparse ``type=`` of a config field: ``kind`` from the text, finite, within the field's spec."""

    def convert(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {kind.__name__}, got {text!r}") from None
        if isinstance(value, float) and not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
        try:
            return coerce_value(cls, name, value)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc).split(": ", 1)[-1]) from None

    convert.__name__ = kind.__name__
    return convert


def _default(field: dataclasses.Field) -> Any:
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return None


def config_values(args: argparse.Namespace, fields: Iterable[str]) -> dict[str, Any]:
    """The parsed values of :func:`add_config_options` fields, as keyword arguments of the config."""
    return {name: getattr(args, name) for name in fields}


# ----------------------------------------------------------------------------- parameter specs
PARAM_SPEC = "velobins_param"
"""Key of :class:`ParamSpec` in a dataclass field's ``metadata``."""


@dataclasses.dataclass(frozen=True)
class ParamSpec:
    """What a node (and every other reader) enforces on one config field besides its type.

    Attributes:
        min: smallest allowed value (numbers), inclusive; None for no bound.
        max: largest allowed value (numbers), inclusive; None for no bound.
        choices: the allowed values (strings); None for any.
        live: the node applies a change at run time (``ros2 param set``); otherwise the parameter
            is read-only after start-up (a change needs a restart).
    """

    min: float | None = None
    max: float | None = None
    choices: tuple[Any, ...] | None = None
    live: bool = False

    def describe(self) -> str:
        """Human-readable constraint (parameter descriptors, docs tables), '' if none."""
        parts = []
        if self.min is not None or self.max is not None:
            lo = "-inf" if self.min is None else f"{self.min:g}"
            hi = "inf" if self.max is None else f"{self.max:g}"
            parts.append(f"[{lo}, {hi}]")
        if self.choices is not None:
            parts.append("one of " + ", ".join(repr(c) for c in self.choices))
        return " ".join(parts)


def param(
    default: Any,
    *,
    min: float | None = None,
    max: float | None = None,
    choices: Iterable[Any] | None = None,
    live: bool = False,
) -> Any:
    """A dataclass field with a :class:`ParamSpec`: ``rate: float = param(20.0, min=0.1, live=True)``.

    The spec travels with the one definition of the field, so the node's parameter descriptor
    (range, read-only), its run-time check, the generated YAML and docs, and the offline YAML
    reader all enforce the same limits.
    """
    spec = ParamSpec(min=min, max=max, choices=tuple(choices) if choices is not None else None, live=live)
    if isinstance(default, list | dict | set):
        raise TypeError("param(): use a tuple for a sequence default (dataclass defaults must be immutable)")
    return dataclasses.field(default=default, metadata={PARAM_SPEC: spec})


def param_spec(field: dataclasses.Field) -> ParamSpec:
    """The field's :class:`ParamSpec` (an empty one for a plain field: no bounds, not live)."""
    return field.metadata.get(PARAM_SPEC, ParamSpec())


def coerce_value(cls: type, name: str, value: Any, label: str | None = None) -> Any:
    """``value`` converted to the type of field ``name`` of dataclass ``cls`` and checked against its
    :class:`ParamSpec`; the one place both the nodes and the offline YAML reader check a value.

    Ints are accepted for floats (``odom_rate:=50``); booleans are never numbers; a sequence field
    takes any list/tuple of its element type. Raises ``ValueError`` naming the field, the expected
    type or range, and the value (as ``label``, e.g. the prefixed ROS parameter name, if given).
    """
    try:
        return _coerce(cls, name, value)
    except ValueError as exc:
        if label is None or label == name:
            raise
        raise ValueError(str(exc).replace(f"'{name}'", f"'{label}'", 1)) from None


def _coerce(cls: type, name: str, value: Any) -> Any:
    field = next((f for f in dataclasses.fields(cls) if f.name == name), None)
    if field is None:
        raise ValueError(f"unknown parameter '{name}'")
    kind = typing.get_type_hints(cls)[name]
    args = typing.get_args(kind)
    if type(None) in args:
        if value is None:
            return None
        kind = next(a for a in args if a is not type(None))
    origin = typing.get_origin(kind)
    if origin is tuple or kind is tuple:
        element = (typing.get_args(kind) or (float,))[0]
        if value is None:  # an empty array parameter is "not set" in ROS (rclpy cannot type an empty list)
            return ()
        if isinstance(value, str | bytes) or not isinstance(value, Iterable):
            raise ValueError(f"'{name}': expected a list of {element.__name__}, got {value!r}")
        out = tuple(_scalar(name, element, v) for v in value)
    else:
        out = _scalar(name, kind, value)
    spec = param_spec(field)
    for v in out if isinstance(out, tuple) else (out,):
        if spec.min is not None and isinstance(v, int | float) and not v >= spec.min:
            raise ValueError(f"'{name}': must be >= {spec.min:g}, got {v!r}")
        if spec.max is not None and isinstance(v, int | float) and not v <= spec.max:
            raise ValueError(f"'{name}': must be <= {spec.max:g}, got {v!r}")
        if spec.choices is not None and v not in spec.choices:
            raise ValueError(f"'{name}': must be {spec.describe()}, got {v!r}")
    return out


def _scalar(name: str, kind: type, value: Any) -> Any:
    """One value as ``kind`` (bool, int, float or str) with ROS's rules plus int → float."""
    if kind is bool:
        if isinstance(value, bool):
            return value
    elif kind is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    elif kind is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif kind is str:
        if isinstance(value, str):
            return value
        hint = " (quote it, e.g. name:=\"'001'\", or use value_type=str in a launch file)"
        raise ValueError(f"'{name}': expected a string, got {type(value).__name__} {value!r}{hint}")
    else:
        return value
    raise ValueError(f"'{name}': expected {kind.__name__}, got {type(value).__name__} {value!r}")
