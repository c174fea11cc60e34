"""Output *file* options (``check --json``, ``calibrate --out``, ``export --out``): what they may write to.

The rules (issue 24), checked by :func:`check_output_file` before any work and applied by
:func:`write_output_file` / :func:`staged_output` after it:

* ``-``, ``/dev/stdout``, ``/dev/stderr``, ``/dev/fd/N`` and ``/proc/self/fd/N`` name this
  process's open descriptors: the content is written to the descriptor, so ``--json /dev/stdout |
  cat`` reaches the pipe and ``/dev/stdout`` stays what it is;
* a named pipe, a terminal or a null device (``/dev/null``) is opened and written directly, never
  renamed over (renaming a temporary file onto ``/dev/null`` as root would replace the device);
  any other device is refused;
* an existing regular file is refused unless ``--overwrite``; it is then replaced atomically once
  the new content is complete (:mod:`velobins_common.outputs`), so a failure leaves it as it was;
* a symbolic link to a regular file is refused (name the file itself): replacing it would either
  write outside the folder the user looked at or silently turn the link into a file; a folder, a
  dangling link or a parent that is a file is refused too, each naming the path and the option.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import stat
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from .errors import OutputError
from .outputs import atomic_path, atomic_write_bytes, check_writable, write_failure

STDOUT = "-"
"""The output file name that means standard output."""

_DESCRIPTOR_NAMES = {"/dev/stdout": 1, "/dev/stderr": 2}
_DESCRIPTOR_PATTERN = re.compile(r"^/(?:dev/fd|proc/self/fd)/(\d+)$")
_NULL_DEVICE = (1, 3)
"""(major, minor) of Linux's ``/dev/null``."""


@dataclass(frozen=True)
class OutputTarget:
    """Where an output file option writes, as checked by :func:`check_output_file`.

    Attributes:
        path: the path as given.
        kind: ``"file"`` (a regular file, written atomically), ``"special"`` (a pipe, terminal or
            null device, written directly) or ``"descriptor"`` (one of this process's descriptors).
        descriptor: the descriptor number of a ``"descriptor"`` target.
        create: parent folders to create before a ``"file"`` is written (outermost last).
    """

    path: Path
    kind: str
    descriptor: int | None = None
    create: tuple[Path, ...] = field(default=())


def _descriptor(path: Path) -> int | None:
    text = str(path)
    if text == STDOUT:
        return 1
    if text in _DESCRIPTOR_NAMES:
        return _DESCRIPTOR_NAMES[text]
    match = _DESCRIPTOR_PATTERN.match(text)
    return int(match.group(1)) if match else None


def _writable_special(path: Path, option: str) -> None:
    """Refuse a device that is not a pipe, a terminal or a null device (``--json /dev/sda``)."""
    info = path.stat()
    if stat.S_ISFIFO(info.st_mode):
        return
    if stat.S_ISCHR(info.st_mode):
        if (os.major(info.st_rdev), os.minor(info.st_rdev)) == _NULL_DEVICE:
            return
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NOCTTY | os.O_NONBLOCK)
        except OSError as exc:
            raise OutputError(path, f"{option}: cannot open the device ({exc.strerror or exc})") from None
        try:
            if os.isatty(fd):
                return
        finally:
            os.close(fd)
    raise OutputError(path, f"{option}: is a device or socket, not a file, pipe or terminal; refusing to write to it")


def check_output_file(path: str | Path, overwrite: bool, option: str) -> OutputTarget:
    """Check an output file option before any work; raise :class:`OutputError` naming it and ``option``."""
    path = Path(path)
    fd = _descriptor(path)
    if fd is not None:
        try:
            os.fstat(fd)
        except OSError:
            raise OutputError(path, f"{option}: descriptor {fd} is not open") from None
        return OutputTarget(path, "descriptor", fd)
    if path.is_symlink():
        if not path.exists():
            raise OutputError(path, f"{option}: is a dangling symbolic link (to {os.readlink(path)})")
        if path.is_dir() or path.is_file():
            raise OutputError(
                path, f"{option}: is a symbolic link (to {path.resolve()}); name the file itself, not a link to it"
            )
        _writable_special(path, option)
        return OutputTarget(path, "special")
    if path.is_dir():
        raise OutputError(path, f"{option}: is a folder; name a file")
    if path.exists() and not path.is_file():
        _writable_special(path, option)
        return OutputTarget(path, "special")
    if path.exists() and not overwrite:
        raise OutputError(path, f"{option}: already exists; pass --overwrite to replace it")
    missing = [p for p in (path.parent, *path.parent.parents) if not (p.exists() or p.is_symlink())]
    existing = next(p for p in (path.parent, *path.parent.parents) if p.exists() or p.is_symlink())
    if not existing.is_dir():
        what = "a dangling symbolic link" if existing.is_symlink() and not existing.exists() else "a file, not a folder"
        raise OutputError(path, f"{option}: cannot create it: {existing} is {what}")
    check_writable(existing, reserve_bytes=4096)
    return OutputTarget(path, "file", create=tuple(missing))


def _make_parents(target: OutputTarget) -> None:
    for folder in reversed(target.create):
        folder.mkdir(exist_ok=True)


def _remove_parents(target: OutputTarget) -> None:
    for folder in target.create:  # innermost first, only while empty
        with contextlib.suppress(OSError):
            folder.rmdir()


def _write_special(target: OutputTarget, data: bytes) -> None:
    """Write ``data`` straight to a descriptor, pipe, terminal or null device (never renamed over)."""
    try:
        if target.kind == "descriptor":
            assert target.descriptor is not None
            if target.descriptor in (1, 2):
                (sys.stdout if target.descriptor == 1 else sys.stderr).flush()  # keep the printed order
            view = memoryview(data)
            while view:
                view = view[os.write(target.descriptor, view) :]
        else:
            with open(target.path, "wb") as fh:  # no O_CREAT race: the path is a special file
                fh.write(data)
    except OSError as exc:
        raise write_failure(target.path, exc) from None


def write_output_file(target: OutputTarget, data: bytes | str) -> None:
    """Write ``data`` (text as UTF-8) to a checked target: atomically for a file, directly otherwise."""
    data = data.encode("utf-8") if isinstance(data, str) else data
    if target.kind != "file":
        _write_special(target, data)
        return
    try:
        _make_parents(target)
        atomic_write_bytes(target.path, data)
    except BaseException:
        _remove_parents(target)
        raise


@contextlib.contextmanager
def staged_output(target: OutputTarget) -> Iterator[Path]:
    """Yield a path to write the output to; on success it becomes the target.

    For a file the path is a unique temporary name beside it, renamed over it at the end (a
    failure or Ctrl-C leaves the target as it was and removes the parents this call made); for a
    special target it is a file in a private temporary folder whose bytes are then written to it.
    For writers that need a path (an ONNX or TorchScript export).
    """
    if target.kind == "file":
        try:
            _make_parents(target)
            with atomic_path(target.path) as tmp:
                yield tmp
        except BaseException:
            _remove_parents(target)
            raise
        return
    folder = Path(tempfile.mkdtemp(prefix="velobins-output-"))
    try:
        tmp = folder / target.path.name.replace(os.sep, "_")
        yield tmp
        _write_special(target, tmp.read_bytes())
    finally:
        shutil.rmtree(folder, ignore_errors=True)
