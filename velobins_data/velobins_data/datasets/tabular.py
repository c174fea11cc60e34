"""Shared reading and cleaning of column-oriented flight logs (CSV, CSV.gz).

One job: get a named float table out of a file and apply the row policies every adapter shares:

* **Columns** -- :func:`require_columns` raises :class:`DatasetError` listing every missing
  column (and optionally the expected header) instead of failing on the first one.
* **Non-finite values** -- a NaN/inf in a column an adapter *uses* raises, naming the column and
  the first bad row (:func:`check_finite`); unused columns may hold anything.
* **Unreadable files** -- a missing file, a directory, a truncated or corrupt ``.gz`` and bytes
  that are not UTF-8 text raise :class:`DatasetError` naming the file (:func:`require_file`,
  :func:`read_table`), never a bare ``EOFError``/``zlib.error``, so a folder of 60 flights says
  which one is damaged. A UTF-8 byte-order mark (spreadsheet exports) is dropped.
* **Bounded size** -- a file larger than :data:`MAX_FLIGHT_BYTES`, on disk or decompressed, is
  refused before it is read whole (a sparse 2 GB CSV, a gzip bomb): one line, not a MemoryError.
* **Timestamps** (:func:`monotonic_rows`) -- rows whose stamp is not strictly greater than every
  earlier stamp (exact duplicates and backward jumps) are dropped and counted. If more than
  :data:`MAX_DROPPED_STAMP_FRACTION` of the rows would be dropped the file is treated as
  unsorted and rejected: silently re-sorting a scrambled log would hide a broken export.
"""

from __future__ import annotations

import gzip
import io
import zlib
from collections.abc import Sequence as SequenceABC
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from velobins_common.bounded import InputLimitError, read_text
from velobins_data.datasets.errors import DatasetError, describe

MAX_FLIGHT_BYTES = 512 << 20
"""Largest flight file [bytes], on disk and decompressed: two hours of NanoBench's 100 Hz CSV (2.9 MB per
42 s flight); the parsed table takes about as much memory again."""

MAX_DROPPED_STAMP_FRACTION = 0.01
"""Largest share of rows that may be dropped for duplicate/non-increasing stamps (1 %)."""


@dataclass
class Table:
    """A float table read from a delimited text file.

    Attributes:
        source: file path, for error messages.
        columns: header names in file order.
        data: (rows, columns) float64 array.
        comments: ``key: value`` pairs from leading ``#`` comment lines.
    """

    source: str
    columns: list[str]
    data: np.ndarray
    comments: dict[str, str]

    def index(self, name: str) -> int:
        """Column index of ``name``; :class:`DatasetError` if absent."""
        try:
            return self.columns.index(name)
        except ValueError:
            raise DatasetError(self.source, name, "column missing") from None

    def get(self, names: SequenceABC[str]) -> np.ndarray:
        """Columns ``names`` as a (rows, len(names)) float64 array (checked finite)."""
        idx = [self.index(n) for n in names]
        arr = np.ascontiguousarray(self.data[:, idx])
        check_finite(self.source, list(names), arr)
        return arr

    def __len__(self) -> int:
        return int(self.data.shape[0])


FOLDER_HINT = "is a directory; pass one flight file (or use `velobins check` / `--data` for folders)"
"""Message for a directory given where one flight file is expected."""

CORRUPT_FILE_ERRORS: tuple[type[BaseException], ...] = (
    EOFError,
    gzip.BadGzipFile,
    zlib.error,
    UnicodeDecodeError,
)
"""What decompressing/decoding a damaged text file raises (a truncated ``.gz`` gives EOFError)."""


def require_file(path: str | Path) -> None:
    """Raise :class:`DatasetError` unless ``path`` is an existing regular file (or a link to one).

    A directory gets :data:`FOLDER_HINT`; a missing path "no such file".
    """
    p = Path(path)
    if p.is_dir():
        raise DatasetError(p, "<file>", FOLDER_HINT)
    if not p.exists():
        raise DatasetError(p, "<file>", "no such file")
    if not p.is_file():
        raise DatasetError(p, "<file>", "not a regular file")


def unreadable(path: str | Path, exc: BaseException) -> DatasetError:
    """The :class:`DatasetError` for a file whose bytes cannot be read, naming the cause."""
    if isinstance(exc, PermissionError):
        return DatasetError(path, "<file>", "cannot read: permission denied")
    gz = Path(path).suffix == ".gz"
    if isinstance(exc, UnicodeDecodeError):
        what = "the gzip does not hold UTF-8 text" if gz else "not UTF-8 text (a binary or compressed file?)"
    else:
        what = "truncated or corrupt gzip" if gz else "corrupt file"
    return DatasetError(path, "<file>", f"cannot read: {what} ({describe(exc)})")


def _read_text(path: str | Path) -> tuple[dict[str, str], str, str]:
    """(``# key: value`` comments, header line, body text) of a delimited text file (bounded, gunzipped)."""
    comments: dict[str, str] = {}
    with io.StringIO(read_text(path, MAX_FLIGHT_BYTES, "flight file")) as fh:
        header_line = ""
        for line in fh:
            stripped = line.strip()
            if not stripped:
                continue
            if stripped.startswith("#"):
                key, sep, value = stripped.lstrip("#").partition(":")
                if sep:
                    comments[key.strip()] = value.strip()
                continue
            header_line = stripped
            break
        body = fh.read() if header_line else ""
    return comments, header_line, body


def read_table(path: str | Path, delimiter: str = ",", string_columns: SequenceABC[str] = ()) -> Table:
    """Read a headed, delimited numeric file into a :class:`Table`.

    Leading lines starting with ``#`` are comments; ``# key: value`` pairs are kept. Columns
    listed in ``string_columns`` (e.g. an image file name) are read as NaN and must not be used.

    Raises:
        DatasetError: missing file, a directory, a truncated/corrupt ``.gz`` or non-UTF-8 bytes,
            empty file, no header, ragged rows or a non-numeric cell.
    """
    source = str(path)
    require_file(path)
    try:
        comments, header_line, body = _read_text(path)
    except InputLimitError as exc:
        raise DatasetError(source, "<file>", str(exc).removeprefix(f"{source}: ")) from None
    except (*CORRUPT_FILE_ERRORS, PermissionError) as exc:
        raise unreadable(source, exc) from None
    if not header_line:
        raise DatasetError(source, "<file>", "empty file: no header line")
    columns = [c.strip() for c in header_line.split(delimiter)]
    if not body.strip():
        raise DatasetError(source, "<file>", "no data rows after the header")
    skip = {i for i, c in enumerate(columns) if c in set(string_columns)}
    converters = dict.fromkeys(skip, lambda _s: np.nan) if skip else None
    try:
        data = np.loadtxt(
            io.StringIO(body), delimiter=delimiter, dtype=np.float64, ndmin=2, converters=converters, comments="#"
        )
    except ValueError as exc:
        raise DatasetError(source, "<file>", f"malformed data row: {exc}") from None
    if data.shape[1] != len(columns):
        raise DatasetError(source, "<file>", f"header has {len(columns)} columns but rows have {data.shape[1]}")
    return Table(source=source, columns=columns, data=data, comments=comments)


def require_columns(
    source: str, present: SequenceABC[str], required: SequenceABC[str], expected_header: str | None = None
) -> None:
    """Raise one :class:`DatasetError` listing every column of ``required`` not in ``present``."""
    have = set(present)
    missing = [c for c in required if c not in have]
    if missing:
        msg = f"missing columns {missing}"
        if expected_header is not None:
            msg += f"; expected header: {expected_header}"
        raise DatasetError(source, missing[0], msg)


def check_finite(source: str, names: SequenceABC[str], arr: np.ndarray) -> None:
    """Raise :class:`DatasetError` naming the column and first row holding NaN/inf."""
    bad = ~np.isfinite(arr)
    if bad.any():
        row, col = np.argwhere(bad)[0]
        raise DatasetError(source, names[int(col)], "non-finite value (NaN or inf)", int(row))


def monotonic_rows(source: str, t: np.ndarray, column: str = "t") -> np.ndarray:
    """Indices of rows to keep so stamps are strictly increasing (module policy).

    Returns:
        Integer indices into ``t``. ``len(t) - len(result)`` rows were dropped.

    Raises:
        DatasetError: fewer than 2 rows, or more than :data:`MAX_DROPPED_STAMP_FRACTION` dropped.
    """
    n = t.shape[0]
    if n < 2:
        raise DatasetError(source, column, f"need at least 2 rows, got {n}")
    running_max = np.maximum.accumulate(t)
    keep = np.ones(n, dtype=bool)
    keep[1:] = t[1:] > running_max[:-1]
    dropped = int(n - keep.sum())
    if dropped > MAX_DROPPED_STAMP_FRACTION * n:
        first = int(np.argmin(keep))
        raise DatasetError(
            source,
            column,
            f"timestamps not sorted: {dropped} of {n} rows are duplicate or go backwards "
            f"(limit {MAX_DROPPED_STAMP_FRACTION:.0%})",
            first,
        )
    return np.flatnonzero(keep)
