"""What every command writes: atomic files, locked run directories, no lost results.

The rules (issues 13 and 24, README "Command line"):

* a file is written under a temporary name unique to the process and renamed over its target
  (a reader never sees half a file); the temporary file is removed when the write fails or is
  interrupted, and a failed write (full disk, size limit) names the target, not the temporary;
* a run directory (``--out`` of train, evaluate, simulate, demo, reproduce) is recognised by the
  manifest its command wrote (:data:`MANIFEST_NAME`: command, version, the entries it owns), never
  by file names; ``--overwrite`` removes only what a manifest lists, and entries a command would
  write that no manifest lists (the user's own ``config.json``, a run older than manifests) are
  never touched: the folder is refused, naming them (``--resume`` adopts an older run);
* ``--overwrite`` is a promise, not a deletion: the new run is staged inside the directory and
  replaces the old one only once its first output is complete (:meth:`Run.commit`); a failure or
  Ctrl-C before that leaves the old run byte-identical;
* a lock file held for the run's life makes a second writer fail at once, naming the holder; it is
  opened without following links and must be a regular file with one link;
* the output location is checked for writability (and room for a first file) before any work.

It lives in :mod:`velobins_common` because every package that writes files (checkpoints,
reports, flights, bags) uses it. It imports neither torch nor numpy. Output *file* options
(``--json``, ``calibrate --out``, ``export --out``) are :mod:`velobins_common.output_files`.
"""

from __future__ import annotations

import contextlib
import errno
import fnmatch
import json
import os
import secrets
import shutil
import signal
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import OptionError, OutputError, UserError
from .locks import LOCK_NAME, RunLock

MANIFEST_NAME = ".velobins-run.json"
"""The run manifest: the command that made the run, the suite's version and the entries it owns."""

MANIFEST_FORMAT = 1
"""Version of the manifest's layout (``format`` in the file)."""

MAX_MANIFEST_BYTES = 1 << 20
"""A manifest larger than this is not one the suite wrote (it lists names, not data)."""

MODES = ("new", "resume", "overwrite")
"""How a command treats an output directory that already holds a run."""


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


def write_failure(path: str | Path, exc: OSError) -> OutputError:
    """The :class:`OutputError` of a failed write to ``path`` (full disk, size limit, read-only)."""
    reason = "disk full" if exc.errno in (errno.ENOSPC, errno.EDQUOT) else (exc.strerror or str(exc))
    return OutputError(path, f"cannot write it ({reason})")


@contextlib.contextmanager
def atomic_path(path: str | Path, directory: bool = False) -> Iterator[Path]:
    """Yield a unique temporary path beside ``path``; on success rename it onto ``path``.

    On any exception (``KeyboardInterrupt`` included) the temporary file or directory is
    removed and the target is left as it was; an ``OSError`` of the write (disk full, file size
    limit) is raised as :class:`OutputError` naming ``path``. With ``directory=True`` the caller
    creates a directory at the yielded path (e.g. a rosbag2 writer); an existing target directory
    is then replaced only after the new one is complete.
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
    except OSError as exc:
        remove_path(tmp)
        raise write_failure(path, exc) from None
    except BaseException:
        remove_path(tmp)
        raise


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically (new unique temporary file, fsync, rename)."""
    path = Path(path)
    with atomic_path(path) as tmp:
        with open(tmp, "xb") as fh:  # "x": never through a file or link already at the temporary name
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
        with open(probe, "xb") as fh:
            chunk = b"\0" * min(reserve_bytes, 1 << 20)
            left = reserve_bytes
            while left > 0:
                fh.write(chunk[: min(left, len(chunk))])
                left -= len(chunk)
            fh.flush()
            os.fsync(fh.fileno())
    except OSError as exc:
        reason = {errno.ENOSPC: "disk full", errno.EDQUOT: "disk quota exceeded", errno.EFBIG: "file size limit"}
        raise OutputError(directory, f"not writable ({reason.get(exc.errno, exc.strerror or str(exc))})") from None
    finally:
        with contextlib.suppress(OSError):
            probe.unlink()


@dataclass(frozen=True)
class RunLayout:
    """The entries a command writes in its output directory.

    Attributes:
        command: the command's name, for the manifest, messages and the lock file.
        patterns: glob patterns (relative to the directory, top level) of the files and folders the
            command writes. They say what a new run would write over, and which entries a run lists
            in its manifest; they never make a folder "a run" by themselves.
        resumable: whether the command has ``--resume`` (the refusal message offers it).
    """

    command: str
    patterns: tuple[str, ...]
    resumable: bool = True

    def existing(self, directory: Path) -> list[str]:
        """Names of the entries of ``directory`` that match :attr:`patterns` (sorted)."""
        if not directory.is_dir():
            return []
        return sorted(e.name for e in directory.iterdir() if any(fnmatch.fnmatch(e.name, p) for p in self.patterns))

    def owned(self, directory: Path) -> list[str]:
        """What a running command's manifest lists: the matching entries and the fixed names it will write."""
        fixed = {p for p in self.patterns if not any(c in p for c in "*?[")}
        return sorted(fixed | set(self.existing(directory)))


def suite_version() -> str:
    """The installed suite's version (``velobins_common``'s), for manifests; ``unknown`` outside an install."""
    from importlib import metadata

    try:
        return metadata.version("velobins_common")
    except metadata.PackageNotFoundError:
        return "unknown"


def read_manifest(directory: str | Path) -> dict[str, Any] | None:
    """The run manifest of ``directory`` (None when there is none); :class:`OutputError` when it is not one."""
    path = Path(directory) / MANIFEST_NAME
    if not (path.exists() or path.is_symlink()):
        return None
    if path.is_symlink() or not path.is_file() or path.stat().st_size > MAX_MANIFEST_BYTES:
        raise OutputError(path, "is not a run manifest velobins wrote (a link, a folder or too large); remove it")
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError):
        doc = None
    ok = isinstance(doc, dict) and isinstance(doc.get("command"), str) and isinstance(doc.get("files"), list)
    if not ok or not all(isinstance(n, str) and n and "/" not in n and n not in (".", "..") for n in doc["files"]):
        raise OutputError(path, "is not a run manifest velobins wrote (unreadable); remove it or choose another output")
    return doc


def write_manifest(directory: Path, command: str, files: list[str]) -> None:
    """Write ``directory``'s manifest: ``command`` owns ``files`` (names of top-level entries)."""
    doc = {"format": MANIFEST_FORMAT, "command": command, "velobins": suite_version(), "files": sorted(files)}
    atomic_write_text(directory / MANIFEST_NAME, json.dumps(doc, indent=1) + "\n")


def _shown(names: list[str]) -> str:
    return ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")


def _article(word: str) -> str:
    return "an" if word[:1] in "aeiou" else "a"


@contextlib.contextmanager
def _interrupts_deferred() -> Iterator[None]:
    """Hold Ctrl-C (SIGINT) back while the block runs, then raise it: a commit is never half done."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, _frame: caught.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if caught:
        raise KeyboardInterrupt


class Run:
    """A locked run directory: where the command writes now (:attr:`path`) and when its output counts.

    In ``"new"`` and ``"overwrite"`` mode the command writes into a staging folder inside the
    directory (hidden, removed with the lock if the run never commits); :meth:`commit` moves the
    staged entries in, after removing what the earlier run's manifest lists, and writes the
    manifest. In ``"resume"`` mode the command writes in place and the manifest is refreshed.
    Use it as a context manager for the run's life: leaving it uncommitted removes the staging
    folder and the folders this run created, and leaves everything else as it was.
    """

    def __init__(self, directory: Path, layout: RunLayout, lock: RunLock, mode: str, replaced: list[str], created):
        self.directory = directory
        self.layout = layout
        self.lock = lock
        self.replaced = replaced
        self._created: list[Path] = created
        self.committed = mode == "resume"
        self._staging = None if self.committed else temp_path(directory / "velobins-stage")
        if self._staging is not None:
            self._staging.mkdir()
        else:
            self.update_manifest()

    @property
    def path(self) -> Path:
        """Where the command writes its entries now: the staging folder until the commit, then the directory."""
        return self.directory if self._staging is None else self._staging

    def commit(self) -> None:
        """The run's first complete output is written: make it the run of the directory (idempotent).

        Ctrl-C is held back while the entries move, so the directory holds either the old run or
        the new one, never a mix. Later calls only refresh the manifest (entries written since).
        """
        if self._staging is None:
            self.update_manifest()
            return
        staging = self._staging
        with _interrupts_deferred():
            trash = temp_path(self.directory / "velobins-replaced")
            trash.mkdir()
            for name in self.replaced:
                if (self.directory / name).exists() or (self.directory / name).is_symlink():
                    os.replace(self.directory / name, trash / name)
            moved = []
            for entry in sorted(staging.iterdir()):
                os.replace(entry, self.directory / entry.name)
                moved.append(entry.name)
            write_manifest(self.directory, self.layout.command, sorted({*moved, *self.layout.owned(self.directory)}))
            staging.rmdir()
            self._staging = None
            self._created = []
            remove_path(trash)
        self.committed = True

    def update_manifest(self) -> None:
        """List every entry of the run's layout now in the directory in its manifest (after a commit)."""
        if self._staging is None:
            write_manifest(self.directory, self.layout.command, self.layout.owned(self.directory))

    def release(self) -> None:
        """Drop an uncommitted staging folder and the folders this run created, then the lock (idempotent)."""
        try:
            if self._staging is None:
                with contextlib.suppress(OSError, UserError):  # never masks the error that ends the run
                    self.update_manifest()
            else:
                remove_path(self._staging)
                self._staging = None
        finally:
            self.lock.release()
        _remove_created(self._created)  # after the lock file went: only folders left empty
        self._created = []

    def __enter__(self) -> Run:
        return self

    def __exit__(self, kind: object, exc: BaseException | None, tb: object) -> None:
        if isinstance(exc, UserError) and self._staging is not None and exc.args:
            # A message names the file where it will lie (--out/x.csv), never the hidden staging folder.
            exc.args = (str(exc.args[0]).replace(str(self._staging), str(self.directory)), *exc.args[1:])
        self.release()


def open_run_dir(directory: str | Path, layout: RunLayout, mode: str = "new", reserve_bytes: int = 1 << 20) -> Run:
    """Create/lock ``directory`` for a run of ``layout.command`` and return the :class:`Run`.

    ``mode``: ``"new"`` refuses a directory that holds a run (the message names its entries);
    ``"resume"`` continues it in place (and adopts an older run that has no manifest);
    ``"overwrite"`` stages the new run and replaces the old one at :meth:`Run.commit`. Every mode
    refuses entries the run would write that no manifest lists, and a run of another command.
    Raises :class:`OutputError` when the path is a file, a dangling link, lies under a file, is not
    writable, or is locked by another writer. Nothing in the directory is modified on a refusal.
    """
    if mode not in MODES:
        raise ValueError(f"output mode must be one of {MODES}, got {mode!r}")
    directory = Path(directory)
    created = _make_directory(directory)
    try:
        lock = RunLock(directory, layout.command)
    except PermissionError:
        _remove_created(created)
        raise OutputError(directory, "not writable (permission denied)") from None
    except OSError as exc:
        _remove_created(created)
        raise OutputError(directory, f"not writable ({exc.strerror or exc})") from None
    try:
        replaced = _check_existing(directory, layout, mode)
        check_writable(directory, reserve_bytes)  # before any work: a failed start loses nothing
        return Run(directory, layout, lock, mode, replaced, created)
    except BaseException:
        lock.release()
        _remove_created(created)
        raise


def _make_directory(directory: Path) -> list[Path]:
    """Create ``directory`` and its missing parents; the folders created, innermost first."""
    if directory.is_symlink() and not directory.exists():
        raise OutputError(directory, f"is a dangling symbolic link (to {os.readlink(directory)}); remove it or fix it")
    if directory.exists() and not directory.is_dir():
        raise OutputError(directory, "exists and is not a directory")
    missing = [p for p in (directory, *directory.parents) if not (p.exists() or p.is_symlink())]
    for parent in directory.parents:
        if (parent.exists() or parent.is_symlink()) and not parent.is_dir():
            what = "a dangling symbolic link" if parent.is_symlink() else "a file, not a folder"
            raise OutputError(directory, f"cannot create the directory: {parent} is {what}")
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        _remove_created(missing)
        raise OutputError(directory, f"cannot create the directory ({exc.strerror or exc})") from None
    return missing


def _remove_created(created: list[Path]) -> None:
    for folder in created:  # innermost first; only while empty
        with contextlib.suppress(OSError):
            folder.rmdir()


def _check_existing(directory: Path, layout: RunLayout, mode: str) -> list[str]:
    """Refuse what ``mode`` may not touch in ``directory``; the entries a commit replaces."""
    manifest = read_manifest(directory)
    command = layout.command
    found = layout.existing(directory)
    if manifest is None:
        if found and mode != "resume":
            resume = f"; --resume continues it if it is a {command} run of an older version" if layout.resumable else ""
            raise OutputError(
                directory,
                f"holds {_shown(found)}, which velobins {command} writes, but no {MANIFEST_NAME} says a velobins "
                f"run made them (your own files, or a run of a version before manifests); nothing was changed: "
                f"move them away or choose another output{resume}",
            )
        return []
    owner = manifest["command"]
    listed = [n for n in manifest["files"] if (directory / n).exists() or (directory / n).is_symlink()]
    if owner != command:
        raise OutputError(
            directory, f"holds {_article(owner)} {owner} run ({MANIFEST_NAME}); choose another output for {command}"
        )
    unlisted = [n for n in found if n not in listed]
    if not listed and not unlisted:
        return []  # the manifest of a run whose entries are gone: nothing to keep
    if unlisted and mode != "resume":
        raise OutputError(
            directory,
            f"holds {_shown(unlisted)}, which velobins {command} writes but its {MANIFEST_NAME} does not list; "
            "nothing was changed: move them away or choose another output",
        )
    if mode == "new":
        choices = "pass --resume to continue it, --overwrite" if layout.resumable else "pass --overwrite"
        shown = _shown(listed) if listed else "no files yet"
        raise OutputError(
            directory,
            f"already holds {_article(command)} {command} run ({shown}); {choices} to replace it "
            "(kept until the new run's first output is complete), or choose another output",
        )
    return listed if mode == "overwrite" else []


def output_mode(resume: bool = False, overwrite: bool = False) -> str:
    """The :data:`MODES` value of a command's ``--resume`` / ``--overwrite`` flags."""
    if resume and overwrite:
        raise OptionError("--resume and --overwrite", "contradict each other; pass one")
    return "resume" if resume else "overwrite" if overwrite else "new"


def remove_stale_temp_files(directory: str | Path) -> list[str]:
    """Remove temporary files and staging folders of dead writers in ``directory`` (call while holding its lock)."""
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


__all__ = [
    "LOCK_NAME",
    "MANIFEST_NAME",
    "OutputError",
    "Run",
    "RunLayout",
    "RunLock",
    "atomic_path",
    "atomic_write_bytes",
    "atomic_write_text",
    "check_writable",
    "open_run_dir",
    "output_mode",
    "read_manifest",
    "remove_path",
    "remove_stale_temp_files",
    "temp_path",
    "write_failure",
]
