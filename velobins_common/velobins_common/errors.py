"""The one exception type of a user's mistake, and how such a mistake is shown.

A *user error* is raised where a mistake in the user's input is recognised: an option out of
range, a file that is missing, malformed or too large, an output location that cannot be used.
The ``velobins`` command shows it as one line and exits with status 2. Every other exception is a
bug of the suite and keeps its traceback, so an internal ``ValueError`` never reaches a user as a
short message that looks authoritative (issue 24).

:class:`UserError` subclasses ``ValueError`` so code that validates and catches ``ValueError``
keeps working; the suite's validation errors (``FlightError``/``DatasetError``,
``CheckpointError``, ``OutputError``, ``BagError``) subclass it.
"""

from __future__ import annotations

import unicodedata
from pathlib import Path


class UserError(ValueError):
    """A mistake in the user's input; the message names the file, field or option and what to do."""


class OptionError(UserError):
    """A command-line option has a value the command cannot use; the message names the option."""

    def __init__(self, option: str, message: str):
        super().__init__(f"{option}: {message}")
        self.option = option


class OutputError(UserError):
    """An output location (a file or a run directory) cannot be used: it names the path and says what to do instead."""

    def __init__(self, path: str | Path, message: str):
        super().__init__(f"{path}: {message}")
        self.path = str(path)


def printable(text: object) -> str:
    """``text`` on one line with every control character escaped (``\\n``, ``\\x1b``, ...).

    For names a user controls (file and flight names) that end up in a one-line message, a YAML
    comment or a report table: a newline there could start a new YAML entry or a fake report row.
    """
    out = []
    for ch in str(text):
        if unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp"):
            out.append(ch.encode("unicode_escape").decode("ascii"))
        else:
            out.append(ch)
    return "".join(out)


def one_line(text: object) -> str:
    """A message on one line: whitespace runs (newlines included) become one space, controls escaped."""
    return printable(" ".join(str(text).split()))
