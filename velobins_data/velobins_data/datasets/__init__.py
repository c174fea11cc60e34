"""Dataset adapters: every supported source -> :class:`~velobins_data.flight.Flight`.

One module per source (:mod:`.nanobench`, :mod:`.aiio`, :mod:`.tiiratm`, :mod:`.neurobem`,
:mod:`.csv_format`, :mod:`.rosbag` for bags recorded on the vehicle) and this registry. Every
adapter converts to the Flight conventions (SI, world ENU z-up, body FLU, q body->world xyzw)
and sets ``metadata`` keys ``dataset``,
``platform``, ``source`` and ``gravity``. Malformed files raise :class:`DatasetError` (a
:class:`~velobins_data.flight.FlightError`) naming the file and column. See
``docs/data_formats.md`` for every column read.

The adapter boundary is also where physics is checked: :func:`load_flight` runs
:func:`velobins_data.validate.check_flight` on every flight, whatever its source, so a flight in
the wrong units or frames raises :class:`~velobins_data.validate.PlausibilityError` (a
:class:`DatasetError`) before anything trains on or scores it. :func:`load_flights` loads a file
or a folder, skipping and counting flights that are too short.
"""

from __future__ import annotations

import gzip
import warnings
import zlib
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from velobins_common.errors import printable
from velobins_data.dataset_kinds import KINDS
from velobins_data.datasets.aiio import load_aiio
from velobins_data.datasets.csv_format import read_csv, write_csv
from velobins_data.datasets.errors import DatasetError, UnusableFlightError
from velobins_data.datasets.nanobench import load_nanobench, trajectory_shape
from velobins_data.datasets.neurobem import load_neurobem
from velobins_data.datasets.rosbag import load_rosbag
from velobins_data.datasets.tiiratm import FILE_SUFFIX as TIIRATM_SUFFIX
from velobins_data.datasets.tiiratm import load_tiiratm
from velobins_data.flight import Flight

PROGRESS_MIN_FILES = 5
""":func:`load_flights` shows a progress bar (on a terminal only) above this many files."""

_LOADERS: dict[str, Callable[..., Flight]] = {
    "nanobench": load_nanobench,
    "aiio": load_aiio,
    "tiiratm": load_tiiratm,
    "neurobem": load_neurobem,
    "csv": read_csv,
    "rosbag": load_rosbag,
}

_PATTERNS: dict[str, tuple[str, ...]] = {
    "nanobench": ("*.csv", "*.csv.gz"),
    "aiio": ("*.hdf5", "*.h5", "*.mcap"),
    "tiiratm": (f"*{TIIRATM_SUFFIX}",),
    "neurobem": ("*.csv", "*.csv.gz"),
    "csv": ("*.csv", "*.csv.gz"),
    "rosbag": ("metadata.yaml",),  # one per bag folder; the loader reads the folder
}

__all__ = [
    "KINDS",
    "DatasetError",
    "LoadResult",
    "SkippedFlight",
    "UnusableFlightError",
    "find_files",
    "flight_files",
    "guess_kind",
    "load_directory",
    "load_flight",
    "load_flights",
    "read_csv",
    "trajectory_shape",
    "write_csv",
]


def _check_kind(kind: str) -> None:
    if kind not in _LOADERS:
        raise ValueError(f"unknown dataset kind {kind!r}; expected one of {KINDS}")


@dataclass(frozen=True)
class SkippedFlight:
    """A flight file :func:`load_flights` skipped (no usable flight: motors never on, too short).

    Attributes:
        path: the file.
        reason: why, in words (the error message without the path).
    """

    path: Path
    reason: str


@dataclass
class LoadResult:
    """What :func:`load_flights` loaded: the usable flights (sorted by path) and the skipped files."""

    sequences: list[Flight] = field(default_factory=list)
    skipped: list[SkippedFlight] = field(default_factory=list)


def load_flight(
    kind: str, path: str | Path, *, allow: Iterable[str] = (), validate: bool = True, **kwargs: Any
) -> Flight:
    """Load one flight of source ``kind`` (one of :data:`KINDS`) and check its physics.

    Args:
        kind: adapter name.
        path: the flight file (or bag directory for ``aiio``).
        allow: plausibility check names to override (:data:`velobins_data.validate.CHECKS`).
        validate: run :func:`~velobins_data.validate.check_flight` (``velobins check`` turns it
            off to report every finding instead of raising on the first).
        kwargs: adapter options (e.g. ``gravity=``).

    Raises:
        DatasetError: the adapter cannot read the file.
        PlausibilityError: the flight fails a check not in ``allow`` (a :class:`DatasetError`).
        UnusableFlightError: no usable flight in the file (e.g. shorter than 2 s).
        ValueError: unknown ``kind`` or check name in ``allow``.
    """
    from velobins_data.validate import check_flight, parse_allow  # validate imports this package

    _check_kind(kind)
    allowed = parse_allow(allow)
    if not Path(path).exists():
        raise DatasetError(path, "<file>", "no such file or directory")
    flight = _LOADERS[kind](path, **kwargs)
    flight.name = printable(flight.name)  # a file name with a newline must not forge a report row or YAML entry
    if validate:
        check_flight(flight, allowed)
    return flight


def find_files(kind: str, directory: str | Path) -> list[Path]:
    """The flight files of ``kind`` under ``directory`` (recursive), sorted by path."""
    _check_kind(kind)
    root = Path(directory)
    if not root.is_dir():
        raise DatasetError(root, "<file>", "not a directory")
    files = {p for pattern in _PATTERNS[kind] for p in root.rglob(pattern) if p.is_file()}
    return sorted(files)


_HEADER_SIGNATURES = (
    ("nanobench", "imu_acc_x"),
    ("tiiratm", "elapsed_time"),
    ("neurobem", "ang vel x"),
    ("csv", "acc_x"),
)


def guess_kind(path: str | Path) -> str | None:
    """The kind a flight file looks like, from its extension or CSV header; ``None`` if unsure.

    Only reads the first lines, for hints in error messages (never to pick an adapter silently).
    """
    p = Path(path)
    if p.suffix in (".hdf5", ".h5", ".mcap"):
        return "aiio"
    if not p.name.endswith((".csv", ".csv.gz")):
        return None
    try:
        opener = gzip.open if p.suffix == ".gz" else open
        with opener(p, "rb") as fh:  # type: ignore[operator]
            head = fh.read(1 << 16).decode("utf-8-sig", errors="replace")  # bounded: a hint, never a whole file
    except (OSError, EOFError, zlib.error):
        return None
    header = next((line for line in head.splitlines()[:50] if not line.startswith("#")), "")
    columns = {c.strip() for c in header.split(",")}
    return next((kind for kind, column in _HEADER_SIGNATURES if column in columns), None)


def _no_files_message(kind: str, root: Path) -> str:
    """Why a folder holds no ``kind`` flights: the patterns searched and what the files look like."""
    patterns = ", ".join(_PATTERNS[kind])
    msg = f"no {kind} flight files (searched {patterns}, recursively)"
    present = sorted(p for p in root.rglob("*") if p.is_file() and not p.name.startswith("."))
    if not present:
        return msg + "; the folder is empty"
    looks = sorted({k for p in present[:20] if (k := guess_kind(p)) is not None and k != kind})
    if looks:
        return msg + f"; the {len(present)} file(s) here look like --dataset {' or '.join(looks)}"
    suffixes = sorted({"".join(p.suffixes[-2:]) or p.name for p in present})[:8]
    return msg + f"; found only {', '.join(suffixes)} files"


def flight_files(kind: str, path: str | Path) -> list[Path]:
    """The flight files ``path`` names: itself if a file, else every ``kind`` file under it.

    Raises:
        DatasetError: ``path`` does not exist, or a folder holds no file of ``kind`` (the message
            lists the patterns searched and which kind the files present look like).
    """
    _check_kind(kind)
    root = Path(path)
    if root.is_file():
        return [root]
    if not root.exists():
        raise DatasetError(root, "<file>", "no such file or directory")
    files = find_files(kind, root)
    if not files:
        raise DatasetError(root, "<file>", _no_files_message(kind, root))
    return files


def _reason(exc: DatasetError) -> str:
    """The message of ``exc`` without its leading ``source: `` (the path is shown next to it)."""
    text = str(exc)
    prefix = f"{exc.source}: "
    return text[len(prefix) :] if text.startswith(prefix) else text


def load_flights(
    kind: str,
    path: str | Path,
    *,
    allow: Iterable[str] = (),
    progress: bool | None = None,
    cache_dir: str | Path | None = None,
    **kwargs: Any,
) -> LoadResult:
    """Load one flight file or every ``kind`` flight under a folder, each checked for plausibility.

    Files without a usable flight (:class:`UnusableFlightError`: motors never on, shorter than
    the validator's minimum) are skipped with a :class:`UserWarning` and listed in
    :attr:`LoadResult.skipped`; any other error is raised, naming the file.

    Args:
        kind: adapter name (:data:`KINDS`).
        path: a flight file or a folder (searched recursively).
        allow: plausibility check names to override (``--allow``).
        progress: progress bar: ``None`` above :data:`PROGRESS_MIN_FILES` files, ``True``
            always, ``False`` never; drawn only when standard error is a terminal.
        cache_dir: parse each file once into this :mod:`velobins_data.storage` cache and reuse
            it while the file is unchanged (``--cache-dir``); every flight is checked either way.
        kwargs: adapter options.

    Raises:
        DatasetError: ``path`` is missing, holds no ``kind`` files, or no usable flight remains
            (the message lists each skipped file with its reason); or a file is malformed or
            implausible (:class:`~velobins_data.validate.PlausibilityError`).
        ValueError: unknown ``kind`` or check name.
    """
    from velobins_common.progress import progress_bar
    from velobins_data.storage import load_cached
    from velobins_data.validate import check_flight, parse_allow

    allowed = parse_allow(allow)  # unknown names fail before any file is read
    files = flight_files(kind, path)
    enabled = len(files) > PROGRESS_MIN_FILES if progress is None else progress
    result = LoadResult()
    paths: list[Path] = []
    for file in progress_bar(files, enabled=enabled, desc=f"loading {kind}", unit="file"):
        try:
            if cache_dir is None:
                flight = load_flight(kind, file, allow=allowed, **kwargs)
            else:
                flight = load_cached(kind, file, cache_dir, load_flight, validate=False, **kwargs)
                check_flight(flight, allowed)
            result.sequences.append(flight)
            paths.append(file)
        except UnusableFlightError as exc:
            result.skipped.append(SkippedFlight(file, _reason(exc)))
            warnings.warn(f"skipped: {exc}", UserWarning, stacklevel=2)
    if not result.sequences:
        listing = "; ".join(f"{s.path.name}: {s.reason}" for s in result.skipped)
        raise DatasetError(path, "<file>", f"no usable {kind} flight in {len(files)} file(s): {listing}")
    distinct_names(result.sequences, paths, Path(path))
    return result


def distinct_names(flights: list[Flight], paths: list[Path], root: Path) -> None:
    """Name flights that share a name by their path relative to ``root`` (``a/x``, ``b/x``).

    Reports and scores are keyed by flight name, so two ``x.csv`` in different subfolders were
    scored as one flight; now each keeps its folder in its name. Raises :class:`DatasetError` when
    names still collide (two files of one folder that an adapter names alike).
    """
    for flight in flights:
        flight.name = printable(flight.name)  # also a cached flight's
    counts = Counter(f.name for f in flights)
    for flight, file in zip(flights, paths, strict=True):
        if counts[flight.name] > 1 and root.is_dir():
            folder = file.relative_to(root).parent
            flight.name = printable((folder / flight.name).as_posix())
    seen: dict[str, Path] = {}
    for flight, file in zip(flights, paths, strict=True):
        if flight.name in seen:
            raise DatasetError(file, "<file>", f"flight name {flight.name!r} is also the name of {seen[flight.name]}")
        seen[flight.name] = file


def load_directory(kind: str, directory: str | Path, **kwargs: Any) -> list[Flight]:
    """The usable flights of ``kind`` under ``directory``, sorted by path (see :func:`load_flights`).

    Kept for callers that want just the list; ``kwargs`` (``allow``, ``progress``, adapter
    options) go to :func:`load_flights`, which warns about every skipped file.
    """
    return load_flights(kind, directory, **kwargs).sequences
