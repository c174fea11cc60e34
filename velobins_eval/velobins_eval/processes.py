"""Stopping child processes we started, politely first: SIGINT (each removes its temporary files and lock),
then SIGTERM, then SIGKILL to one that does not exit (``velobins demo``'s trainings)."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import time
from collections.abc import Iterable

STOP_GRACE_S = 10.0
"""Seconds an interrupted child gets to clean up after SIGINT before it is terminated."""


def stop_processes(procs: Iterable[subprocess.Popen], grace_s: float | None = None) -> None:
    """Stop children we started, all at once: SIGINT first (each removes its temporary files and
    lock), SIGTERM to those still running after ``grace_s`` (default :data:`STOP_GRACE_S`), then SIGKILL."""
    waiting = [p for p in procs if p.poll() is None]
    grace = STOP_GRACE_S if grace_s is None else grace_s
    for send, wait_s in (("send_signal", grace), ("terminate", 5.0), ("kill", None)):
        for proc in waiting:
            with contextlib.suppress(ProcessLookupError):  # exited meanwhile
                getattr(proc, send)(*((signal.SIGINT,) if send == "send_signal" else ()))
        deadline = None if wait_s is None else time.monotonic() + wait_s
        for proc in waiting:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
        waiting = [p for p in waiting if p.poll() is None]
        if not waiting:
            return
