"""Reading files a user (or an attacker) hands the suite, within bounds.

A flight, a parameter file or a bag's metadata is untrusted input: a 2 GB sparse CSV, a 3 MB gzip
that inflates to 3 GB, or a YAML "billion laughs" of nested aliases ended in ``MemoryError``
tracebacks after tens of seconds (issue 24). Everything here refuses such a file early, in one
line naming the file and the limit:

* :func:`check_file_size` — the size on disk, before a byte is read;
* :func:`read_text` — text, decompressed or not, read in chunks and refused as soon as it passes
  its limit (a gzip bomb never inflates in memory); a UTF-8 byte-order mark is dropped;
* :func:`load_yaml` — ``yaml.safe_load`` semantics without aliases (none of the suite's files
  needs one) and with a bounded nesting depth and size.

The limits of each kind of file live with its reader (``velobins_data.datasets.tabular`` for
flights); the YAML limits are here, shared by every YAML file the suite reads.
"""

from __future__ import annotations

import gzip
import io
from pathlib import Path
from typing import IO, Any

import yaml

from .errors import UserError

MAX_YAML_BYTES = 4 << 20
"""Largest YAML file read (parameter files and metadata are a few kB)."""

MAX_YAML_DEPTH = 32
"""Deepest nesting of mappings and sequences in a YAML file (ROS parameter files use 4-5 levels)."""

_CHUNK = 1 << 20


class InputLimitError(UserError):
    """A file is larger, deeper or more nested than its reader allows (names the file and the limit)."""


def _mib(n: int) -> str:
    return f"{n / 2**20:.0f} MiB" if n >= 2**20 else f"{n} bytes"


def check_file_size(path: str | Path, limit: int, what: str = "file") -> None:
    """Refuse ``path`` when it is larger than ``limit`` bytes on disk (a sparse file counts its length)."""
    size = Path(path).stat().st_size
    if size > limit:
        raise InputLimitError(f"{path}: {what} is {_mib(size)}, more than the {_mib(limit)} limit")


def read_limited(fh: IO[bytes], limit: int, path: str | Path, what: str) -> bytes:
    """At most ``limit`` bytes of the binary stream ``fh``; :class:`InputLimitError` when there are more."""
    out = io.BytesIO()
    while True:
        chunk = fh.read(min(_CHUNK, limit + 1 - out.tell()))
        if not chunk:
            return out.getvalue()
        out.write(chunk)
        if out.tell() > limit:
            raise InputLimitError(f"{path}: {what} holds more than {_mib(limit)} (the limit); is it a flight log?")


def read_text(path: str | Path, limit: int, what: str = "text") -> str:
    """UTF-8 text of ``path`` (gunzipped for ``*.gz``), at most ``limit`` bytes of it; a BOM is dropped.

    Raises:
        InputLimitError: the file, or what it inflates to, exceeds ``limit``.
        UnicodeDecodeError, EOFError, OSError, zlib.error: as reading the file raises them (callers
            name the file).
    """
    path = Path(path)
    check_file_size(path, limit, "file")
    if path.suffix == ".gz":
        with gzip.open(path, "rb") as fh:
            data = read_limited(fh, limit, path, f"{what} (decompressed)")
    else:
        with open(path, "rb") as fh:
            data = read_limited(fh, limit, path, what)
    return data.decode("utf-8-sig")


class _BoundedLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses aliases and nesting deeper than :data:`MAX_YAML_DEPTH`."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(
                None, None, "aliases (*name) are not allowed in this file", event.start_mark
            )
        self._depth = getattr(self, "_depth", 0) + 1
        try:
            if self._depth > MAX_YAML_DEPTH:
                event = self.peek_event()
                raise yaml.composer.ComposerError(
                    None, None, f"nested deeper than {MAX_YAML_DEPTH} levels", event.start_mark
                )
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def load_yaml(text: str, source: str | Path) -> Any:
    """``yaml.safe_load`` of ``text`` without aliases, nesting bounded; errors name ``source``.

    Raises:
        InputLimitError: ``text`` larger than :data:`MAX_YAML_BYTES`, an alias, or too deep.
        yaml.YAMLError: any other invalid YAML (callers name the file).
    """
    if len(text) > MAX_YAML_BYTES:
        raise InputLimitError(f"{source}: YAML of {_mib(len(text))} exceeds the {_mib(MAX_YAML_BYTES)} limit")
    try:
        return yaml.load(text, Loader=_BoundedLoader)  # a SafeLoader subclass: no Python tags
    except yaml.composer.ComposerError as exc:
        if exc.problem and ("aliases" in exc.problem or "nested deeper" in exc.problem):
            line = f" (line {exc.problem_mark.line + 1})" if exc.problem_mark is not None else ""
            raise InputLimitError(f"{source}: {exc.problem}{line}") from None
        raise


def read_yaml(path: str | Path) -> Any:
    """:func:`load_yaml` of the UTF-8 file ``path`` (at most :data:`MAX_YAML_BYTES`)."""
    return load_yaml(read_text(path, MAX_YAML_BYTES, "YAML"), path)
