"""The lock of a run directory: one writer at a time, never through a planted link.

:class:`RunLock` holds ``flock`` on :data:`LOCK_NAME` inside the directory for a run's life (the
kernel drops it when the process dies, so a crash leaves no stale lock). Anyone who can write to a
shared output folder could plant a symbolic or hard link there, so the file is opened with
``O_NOFOLLOW`` and used only when it is a regular file with one link (issue 24): the suite never
writes its "velobins evaluate (pid N)" line into a file outside the folder.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import Path

from .errors import OutputError

LOCK_NAME = ".velobins.lock"
"""Lock file inside a run directory; holds the writer's pid and command while it runs."""


class RunLock:
    """An exclusive, non-blocking lock on a run directory, held until :meth:`release`.

    Uses ``flock`` on :data:`LOCK_NAME`, which the kernel releases when the process dies, so a
    crashed run never leaves a stale lock that blocks the next one. The file is opened with
    ``O_NOFOLLOW`` and must be a regular file with one link: a symbolic or hard link planted there
    is refused, never written through.
    """

    def __init__(self, directory: str | Path, command: str):
        import fcntl

        self.directory = Path(directory)
        self.path = self.directory / LOCK_NAME
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | getattr(os, "O_NONBLOCK", 0)
        try:
            fd = os.open(self.path, flags, 0o644)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise OutputError(self.path, "is a symbolic link; refusing to follow it (remove it)") from None
            if exc.errno == errno.EISDIR:
                raise OutputError(self.path, "is not a regular file; not used as a lock (remove it)") from None
            raise
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
            os.close(fd)
            what = "has other hard links" if stat.S_ISREG(info.st_mode) else "is not a regular file"
            raise OutputError(self.path, f"{what}; refusing to use it as a lock (remove it)")
        self._fh = os.fdopen(fd, "r+")  # held for the run's life
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = self._fh.read(200).strip() or "another process"
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
