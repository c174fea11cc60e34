"""What every command writes: atomic files, locked run directories, no lost results.

The rules (issue 13, README "Command line"):

* a file is written under a temporary name unique to the process and renamed over its target,
  so a reader never sees half a file and two writers never share a temporary file; the temporary
  file is removed when the write fails or is interrupted (Ctrl-C included);
* a run directory (``train --out``, ``evaluate --out``, ``simulate --out``, ``reproduce --out``)
  that already holds a run is refused unless the user says ``--resume`` (continue it) or
  ``--overwrite`` (replace the whole run: every file the command owns goes, not some of them);
* a lock file held for the run's life makes a second writer fail at once, naming the holder;
* the output location is checked for writability (and room for a first file) before any work.

It lives in :mod:`velobins_common` because every package that writes files (checkpoints,
reports, flights, bags) uses it. It imports neither torch nor numpy.
"""

from __future__ import annotations

import contextlib
import errno
import fnmatch
import os
import secrets
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

LOCK_NAME = ".velobins.lock"
"""Lock file inside a run directory; holds the writer's pid and command while it runs."""

MODES = ("new", "resume", "overwrite")
"""How a command treats an output directory that already holds a run."""


class OutputError(ValueError):
    """An output location cannot be used: it names the path and says what to do instead."""

    def __init__(self, path: str | Path, message: str):
        super().__init__(f"{path}: {message}")
        self.path = str(path)


def temp_path(path: str | Path) -> Path:
    """A temporary name beside ``path``, unique to this process and call (hidden, ``.tmp``)."""
    path = Path(path)
    return path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")


def remove_path(path: Path) -> None:
    """Remove a file or directory tree if it exists (best effort, for cleanup paths)."""
    with contextlib.suppress(FileNotFoundError):
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink()


@contextlib.contextmanager
def atomic_path(path: str | Path, directory: bool = False) -> Iterator[Path]:
    """Yield a unique temporary path beside ``path``; on success rename it onto ``path``.

    On any exception (``KeyboardInterrupt`` included) the temporary file or directory is
    removed and the target is left as it was. With ``directory=True`` the caller creates a
    directory at the yielded path (e.g. a rosbag2 writer); an existing target directory is then
    replaced only after the new one is complete.
    """
    path = Path(path)
    tmp = temp_path(path)
    try:
        yield tmp
        if directory and path.is_dir():
            old = temp_path(path)
            os.replace(path, old)
            os.replace(tmp, path)
            remove_path(old)
        else:
            os.replace(tmp, path)
    except BaseException:
        remove_path(tmp)
        raise


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically (unique temporary file, fsync, rename)."""
    path = Path(path)
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
    return path


def atomic_write_text(path: str | Path, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    return atomic_write_bytes(path, text.encode("utf-8"))


def check_writable(directory: str | Path, reserve_bytes: int = 1 << 20) -> None:
    """Raise :class:`OutputError` unless ``directory`` takes a file of ``reserve_bytes``.

    Writes and removes a probe file, so a read-only mount, a missing permission or a disk
    without room for a first output fails here, before the work, not after it.
    """
    directory = Path(directory)
    probe = temp_path(directory / "write-probe")
    try:
        with open(probe, "wb") as fh:
            chunk = b"\0" * min(reserve_bytes, 1 << 20)
            left = reserve_bytes
            while left > 0:
                fh.write(chunk[: min(left, len(chunk))])
                left -= len(chunk)
            fh.flush()
            os.fsync(fh.fileno())
    except OSError as exc:
        reason = "disk full" if exc.errno == errno.ENOSPC else (exc.strerror or str(exc))
        raise OutputError(directory, f"not writable ({reason})") from None
    finally:
        with contextlib.suppress(OSError):
            probe.unlink()


class RunLock:
    """An exclusive, non-blocking lock on a run directory, held until :meth:`release`.

    Uses ``flock`` on :data:`LOCK_NAME`, which the kernel releases when the process dies, so a
    crashed run never leaves a stale lock that blocks the next one.
    """

    def __init__(self, directory: str | Path, command: str):
        import fcntl

        self.directory = Path(directory)
        self.path = self.directory / LOCK_NAME
        self._fh = open(self.path, "a+")  # held for the run's life
        try:
            fcntl.flock(self._fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._fh.seek(0)
            holder = self._fh.read().strip() or "another process"
            self._fh.close()
            raise OutputError(
                self.directory, f"in use by {holder}; wait for it to finish or choose another output"
            ) from None
        self._fh.seek(0)
        self._fh.truncate()
        self._fh.write(f"velobins {command} (pid {os.getpid()})\n")
        self._fh.flush()

    def release(self) -> None:
        """Drop the lock and remove the lock file (idempotent)."""
        if self._fh.closed:
            return
        with contextlib.suppress(OSError):
            self.path.unlink()
        self._fh.close()

    def __enter__(self) -> RunLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


@dataclass(frozen=True)
class RunLayout:
    """The entries a command owns in its output directory.

    Attributes:
        command: the command's name, for messages and the lock file.
        patterns: glob patterns (relative to the directory, top level) of the files and
            folders the command writes; any match means the directory "holds a run", and
            ``--overwrite`` removes every match (and nothing else the user keeps there).
        resumable: whether the command has ``--resume`` (the refusal message offers it).
    """

    command: str
    patterns: tuple[str, ...]
    resumable: bool = True

    def existing(self, directory: Path) -> list[str]:
        """Names of the entries of ``directory`` that belong to a run of this command."""
        if not directory.is_dir():
            return []
        return sorted(e.name for e in directory.iterdir() if any(fnmatch.fnmatch(e.name, p) for p in self.patterns))


def open_run_dir(directory: str | Path, layout: RunLayout, mode: str = "new", reserve_bytes: int = 1 << 20) -> RunLock:
    """Create/lock ``directory`` for a run of ``layout.command`` and return the held lock.

    ``mode``: ``"new"`` refuses a directory that holds a run (the message names its files);
    ``"resume"`` keeps it; ``"overwrite"`` removes the whole earlier run first. Raises
    :class:`OutputError` when the path is a file, lies under a file, is not writable, or is
    locked by another writer. Use the lock as a context manager for the run's life.
    """
    if mode not in MODES:
        raise ValueError(f"output mode must be one of {MODES}, got {mode!r}")
    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        raise OutputError(directory, "exists and is not a directory")
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except (NotADirectoryError, FileExistsError):
        raise OutputError(directory, "cannot create the directory: a parent is a regular file") from None
    except OSError as exc:
        raise OutputError(directory, f"cannot create the directory ({exc.strerror or exc})") from None
    try:
        lock = RunLock(directory, layout.command)
    except PermissionError:
        raise OutputError(directory, "not writable (permission denied)") from None
    except OSError as exc:
        raise OutputError(directory, f"not writable ({exc.strerror or exc})") from None
    try:
        found = layout.existing(directory)
        if found and mode == "new":
            shown = ", ".join(found[:6]) + (f" and {len(found) - 6} more" if len(found) > 6 else "")
            choices = "pass --resume to continue it, --overwrite" if layout.resumable else "pass --overwrite"
            raise OutputError(
                directory,
                f"already holds a {layout.command} run ({shown}); {choices} to replace it, or choose another output",
            )
        check_writable(directory, reserve_bytes)  # before removing anything: a failed start loses nothing
        if found and mode == "overwrite":
            for name in found:
                remove_path(directory / name)
    except BaseException:
        lock.release()
        raise
    return lock


def output_mode(resume: bool = False, overwrite: bool = False) -> str:
    """The :data:`MODES` value of a command's ``--resume`` / ``--overwrite`` flags."""
    if resume and overwrite:
        raise ValueError("--resume and --overwrite contradict each other; pass one")
    return "resume" if resume else "overwrite" if overwrite else "new"


def remove_stale_temp_files(directory: str | Path) -> list[str]:
    """Remove temporary files of dead writers in ``directory`` (call while holding its lock)."""
    removed = []
    directory = Path(directory)
    for entry in directory.glob(".*.tmp"):
        parts = entry.name.rsplit(".", 3)
        pid = int(parts[1]) if len(parts) == 4 and parts[1].isdigit() else None
        if pid is not None and pid != os.getpid() and not _alive(pid):
            remove_path(entry)
            removed.append(entry.name)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
