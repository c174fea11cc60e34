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
    keeps ``None`` as default. Booleans become ``--flag`` / ``--no-flag``.
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
            type=kind,
            default=default,
            choices=tuple(choices[name]) if name in choices else None,
            metavar=None if name in choices else name.upper(),
            help=help_text + shown,
        )


def _default(field: dataclasses.Field) -> Any:
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return None


def config_values(args: argparse.Namespace, fields: Iterable[str]) -> dict[str, Any]:
    """The parsed values of :func:`add_config_options` fields, as keyword arguments of the config."""
    return {name: getattr(args, name) for name in fields}
