"""Fast on-disk form of a :class:`~velobins_data.flight.Flight`, and a directory cache.

Format: one uncompressed ``.npz`` per flight (``numpy.savez``): the float64 arrays ``t, acc,
gyro, rotor, p, q, v`` plus 0-d string arrays ``name``, ``rotor_kind``, ``metadata`` (JSON) and
``format_version``. Version 2 names the rotor kinds ``speed``/``command``; a version 1 file
(``rpm``/``pwm``, the same data) is read too. No pickle: files are safe to load from anywhere. Uncompressed because
training reads them many times and ``benchmarks/bench_storage.py`` shows loading is dominated by
decompression otherwise; flights are small (a 40 s NanoBench flight is ~0.7 MB).

:func:`load_cached` parses a dataset file once and reuses the cache file while the source's
mtime and size are unchanged (and the format version and adapter arguments match). A loaded
sequence is re-validated, and its ``metadata["source"]`` still names the original dataset file,
so validation errors point at the file a user can open. A cache file that cannot be read (torn,
truncated, corrupt, another format) is never an error: it is ignored and rebuilt from the source;
one that cannot be written only costs a warning.
"""

from __future__ import annotations

import hashlib
import json
import warnings
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from velobins_common.outputs import atomic_path
from velobins_data.flight import Flight, FlightError

FORMAT_VERSION = 2
"""Bumped whenever the npz layout or an adapter's conversion changes (invalidates caches).
2: rotor kinds ``speed``/``command`` (version 1 wrote ``rpm``/``pwm``)."""
READ_VERSIONS = (1, FORMAT_VERSION)
"""Versions :func:`load_flight_file` reads (a version 1 rotor kind is an old name :class:`Flight` renames)."""

ARRAY_FIELDS = ("t", "acc", "gyro", "rotor", "p", "q", "v")
CACHE_SUFFIX = ".npz"

_UNREADABLE_NPZ = (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile, zlib.error)
"""What ``np.load`` of a damaged npz raises: short or torn zip, bad CRC, pickled or garbled member."""


@dataclass(frozen=True)
class SourceStamp:
    """What identifies a version of a source file: modification time [ns] and size [bytes]."""

    mtime_ns: int
    size: int


def save_flight(flight: Flight, path: str | Path, extra: dict[str, Any] | None = None) -> None:
    """Write ``seq`` as an uncompressed npz at ``path`` (atomically: unique temp file + rename)."""
    path = Path(path)
    payload: dict[str, Any] = {name: getattr(flight, name) for name in ARRAY_FIELDS}
    payload["name"] = np.array(flight.name)
    payload["rotor_kind"] = np.array(flight.rotor_kind)
    payload["metadata"] = np.array(json.dumps(flight.metadata, default=str))
    payload["format_version"] = np.array(FORMAT_VERSION)
    for key, value in (extra or {}).items():
        payload[f"extra_{key}"] = np.array(json.dumps(value))
    with atomic_path(path) as tmp, open(tmp, "wb") as fh:
        np.savez(fh, **payload)


def load_flight_file(path: str | Path) -> Flight:
    """Read a file written by :func:`save_flight` (validated on construction).

    Raises:
        FlightError: unreadable (truncated, corrupt, pickled) file, other format version, or a
            missing array; the message names the file.
    """
    try:
        with np.load(path, allow_pickle=False) as npz:
            version = int(npz["format_version"]) if "format_version" in npz else -1
            if version not in READ_VERSIONS:
                raise FlightError(str(path), "format_version", f"is {version}, this code reads {READ_VERSIONS}")
            missing = [k for k in (*ARRAY_FIELDS, "name", "rotor_kind", "metadata") if k not in npz]
            if missing:
                raise FlightError(str(path), missing[0], f"missing arrays {missing}")
            arrays = {k: npz[k] for k in ARRAY_FIELDS}
            name, kind, meta = str(npz["name"]), str(npz["rotor_kind"]), json.loads(str(npz["metadata"]))
    except FlightError:
        raise
    except _UNREADABLE_NPZ as exc:
        reason = " ".join(f"{type(exc).__name__}: {exc}".split())
        raise FlightError(str(path), "<file>", f"not a readable sequence npz ({reason})") from None
    return Flight(name=name, rotor_kind=kind, metadata=meta, **arrays)


def source_stamp(path: str | Path) -> SourceStamp:
    """mtime/size of a file; for a directory (a ROS 2 bag) the newest mtime and total size."""
    p = Path(path)
    if p.is_dir():
        stats = [f.stat() for f in sorted(p.rglob("*")) if f.is_file()]
        return SourceStamp(max((s.st_mtime_ns for s in stats), default=0), sum(s.st_size for s in stats))
    st = p.stat()
    return SourceStamp(st.st_mtime_ns, st.st_size)


def cache_path(kind: str, path: str | Path, cache_dir: str | Path, options: dict[str, Any] | None = None) -> Path:
    """Cache file for source ``path``: readable name plus a hash of the absolute path and options."""
    key = json.dumps([kind, str(Path(path).resolve()), options or {}], sort_keys=True, default=str)
    digest = hashlib.sha1(key.encode()).hexdigest()[:12]
    stem = Path(path).name.split(".")[0] or "flight"
    return Path(cache_dir) / f"{kind}__{stem}__{digest}{CACHE_SUFFIX}"


def _cache_is_fresh(cache_file: Path, kind: str, stamp: SourceStamp) -> bool:
    try:
        with np.load(cache_file, allow_pickle=False) as npz:
            if int(npz["format_version"]) != FORMAT_VERSION:
                return False
            info = json.loads(str(npz["extra_cache"]))
    except _UNREADABLE_NPZ:
        return False
    return info == {"kind": kind, "mtime_ns": stamp.mtime_ns, "size": stamp.size}


def load_cached(
    kind: str, path: str | Path, cache_dir: str | Path, parse: Callable[..., Flight], **options: Any
) -> Flight:
    """Load a dataset flight through the cache in ``cache_dir`` (created when absent).

    The source is parsed with ``parse(kind, path, **options)`` (e.g.
    :func:`velobins_data.datasets.load_flight`, which passes itself, so this module needs no
    import of the adapters; ``options`` are part of the cache key) unless a cache file exists whose recorded kind,
    source mtime and size and format version all match; then the npz is read instead. A cache
    file that cannot be read is rebuilt; one that cannot be written gives a ``UserWarning``.
    """
    cache_dir = Path(cache_dir)
    stamp = source_stamp(path)
    cache_file = cache_path(kind, path, cache_dir, options)
    if cache_file.is_file() and _cache_is_fresh(cache_file, kind, stamp):
        try:
            return load_flight_file(cache_file)
        except FlightError:
            pass  # torn or damaged cache file: rebuild it from the source below
    flight = parse(kind, path, **options)
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        save_flight(flight, cache_file, extra={"cache": {"kind": kind, "mtime_ns": stamp.mtime_ns, "size": stamp.size}})
    except OSError as exc:
        warnings.warn(f"{cache_file}: cache not written ({exc.strerror or exc})", UserWarning, stacklevel=2)
    return flight
