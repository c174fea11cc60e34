"""Stopping the child processes we started: SIGINT first, so each can clean up."""

from __future__ import annotations

import subprocess
import sys
import time

from velobins_eval.processes import stop_processes


def test_stop_processes_interrupts_first() -> None:
    # The child takes SIGINT as Python's default even when the test runs in the background of a
    # non-interactive shell (nohup ... &), which starts children with SIGINT ignored.
    child = "import signal, time\nsignal.signal(signal.SIGINT, signal.default_int_handler)\n"
    child += "try:\n    print('ready', flush=True)\n    time.sleep(60)\nexcept KeyboardInterrupt:\n"
    child += "    print('cleaned up')\n"
    procs = [subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE, text=True) for _ in range(2)]
    assert [p.stdout.readline().strip() for p in procs] == ["ready", "ready"]
    t0 = time.monotonic()
    stop_processes(procs, grace_s=20.0)
    assert time.monotonic() - t0 < 10
    assert [(p.returncode, p.stdout.read().strip()) for p in procs] == [(0, "cleaned up")] * 2
