"""Dataset adapters: every supported source -> :class:`~velobins_eval.sequence.Sequence`.

One module per source (:mod:`.nanobench`, :mod:`.aiio`, :mod:`.tiiratm`, :mod:`.neurobem`,
:mod:`.csv_format`) and this registry. Every adapter converts to the Sequence conventions (SI,
world ENU z-up, body FLU, q body->world xyzw) and sets ``metadata`` keys ``dataset``,
``platform``, ``source`` and ``gravity``. Malformed files raise :class:`DatasetError` (a
:class:`~velobins_eval.sequence.SequenceError`) naming the file and column. See
``docs/data_formats.md`` for every column read.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tqdm import tqdm

from velobins_eval.datasets.aiio import load_aiio
from velobins_eval.datasets.csv_format import read_csv, write_csv
from velobins_eval.datasets.errors import DatasetError, UnusableFlightError
from velobins_eval.datasets.nanobench import load_nanobench, trajectory_shape
from velobins_eval.datasets.neurobem import load_neurobem
from velobins_eval.datasets.tiiratm import FILE_SUFFIX as TIIRATM_SUFFIX
from velobins_eval.datasets.tiiratm import load_tiiratm
from velobins_eval.sequence import Sequence

KINDS = ("nanobench", "aiio", "tiiratm", "neurobem", "csv")
"""Source kinds understood by :func:`load_sequence` / :func:`load_directory`."""

PROGRESS_MIN_FILES = 5
""":func:`load_directory` shows a progress bar above this many files."""

_LOADERS: dict[str, Callable[..., Sequence]] = {
    "nanobench": load_nanobench,
    "aiio": load_aiio,
    "tiiratm": load_tiiratm,
    "neurobem": load_neurobem,
    "csv": read_csv,
}

_PATTERNS: dict[str, tuple[str, ...]] = {
    "nanobench": ("*.csv", "*.csv.gz"),
    "aiio": ("*.hdf5", "*.h5", "*.mcap"),
    "tiiratm": (f"*{TIIRATM_SUFFIX}",),
    "neurobem": ("*.csv", "*.csv.gz"),
    "csv": ("*.csv", "*.csv.gz"),
}

__all__ = [
    "KINDS",
    "DatasetError",
    "UnusableFlightError",
    "find_files",
    "load_directory",
    "load_sequence",
    "read_csv",
    "trajectory_shape",
    "write_csv",
]


def _check_kind(kind: str) -> None:
    if kind not in _LOADERS:
        raise ValueError(f"unknown dataset kind {kind!r}; expected one of {KINDS}")


def load_sequence(kind: str, path: str | Path, **kwargs: Any) -> Sequence:
    """Load one flight of source ``kind`` (one of :data:`KINDS`); ``kwargs`` go to the adapter."""
    _check_kind(kind)
    if not Path(path).exists():
        raise DatasetError(path, "<file>", "no such file or directory")
    return _LOADERS[kind](path, **kwargs)


def find_files(kind: str, directory: str | Path) -> list[Path]:
    """The flight files of ``kind`` under ``directory`` (recursive), sorted by path."""
    _check_kind(kind)
    root = Path(directory)
    if not root.is_dir():
        raise DatasetError(root, "<file>", "not a directory")
    files = {p for pattern in _PATTERNS[kind] for p in root.rglob(pattern) if p.is_file()}
    return sorted(files)


def load_directory(kind: str, directory: str | Path, **kwargs: Any) -> list[Sequence]:
    """Load every flight of ``kind`` under ``directory``, sorted by path.

    Files holding no usable flight (:class:`UnusableFlightError`, e.g. motors never on) are
    skipped with a :class:`UserWarning` that names them; any other error is raised. A tqdm
    progress bar is shown for more than :data:`PROGRESS_MIN_FILES` files.
    """
    files = find_files(kind, directory)
    sequences: list[Sequence] = []
    for path in tqdm(files, desc=f"loading {kind}", unit="file", disable=len(files) <= PROGRESS_MIN_FILES):
        try:
            sequences.append(load_sequence(kind, path, **kwargs))
        except UnusableFlightError as exc:
            warnings.warn(f"skipped: {exc}", UserWarning, stacklevel=2)
    return sequences
