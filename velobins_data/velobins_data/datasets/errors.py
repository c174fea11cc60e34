"""Errors raised by the dataset adapters.

A :class:`DatasetError` always names the file and, where it applies, the column and the first
bad row, so a user can open the file and look. It subclasses
:class:`~velobins_data.flight.FlightError`, so callers that catch the sequence contract's
error also catch adapter errors.
"""

from __future__ import annotations

from pathlib import Path

from velobins_data.flight import FlightError


class DatasetError(FlightError):
    """A dataset file cannot be turned into a :class:`~velobins_data.flight.Flight`.

    Args:
        source: the file (path) that is wrong.
        column: the column, key or topic at fault (``"<file>"`` for whole-file problems).
        message: what is wrong, in words.
        row: first bad data row (0-based, header excluded), when there is one.
    """

    def __init__(self, source: str | Path, column: str, message: str, row: int | None = None):
        super().__init__(str(source), column, message, row)
        self.column = column


class UnusableFlightError(DatasetError):
    """The file is well formed but holds no usable flight (e.g. the motors never turned on).

    :func:`velobins_data.datasets.load_directory` skips such files with a warning instead of
    failing the whole directory; every other :class:`DatasetError` is raised.
    """


def describe(exc: BaseException, limit: int = 200) -> str:
    """``"Type: message"`` of a third-party exception on one line (YAML and HDF5 errors span several).

    Whitespace runs (newlines included) become one space and the text is cut at ``limit``
    characters, so an error that quotes it stays one readable line.
    """
    text = " ".join(str(exc).split())
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    name = type(exc).__name__
    if name == "error":  # zlib.error, struct.error: the bare name says nothing
        name = f"{type(exc).__module__}.{name}"
    return f"{name}: {text}" if text else name
