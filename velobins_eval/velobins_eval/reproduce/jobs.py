"""The trainings of a reproduction: one ``velobins train`` subprocess per model, ``--jobs`` at once.

Each training runs in ``<out>/models/<model>.partial`` (resumed from its ``last.pt`` after an
interruption) with its log in ``<out>/logs/<model>.log``, and is renamed to ``<out>/models/<model>``
when it succeeds, so an existing ``<out>/models/<model>/best.pt`` always is a finished training and
is skipped. Ctrl-C stops every training this process started (SIGINT first, so each removes its
temporary files and lock; SIGTERM, then SIGKILL, to one that does not exit).
"""

from __future__ import annotations

import contextlib
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from velobins_common.outputs import remove_stale_temp_files
from velobins_common.progress import progress_bar

from .errors import ReproduceError
from .plan import LOG_DIR, MODEL_DIR, Schedule, TrainingJob, is_trained, model_dir, partial_dir

TRAIN_OUTPUTS = ("best.pt", "last.pt", "history.json")
"""Files of a ``velobins train`` run; ``velobins train`` refuses a directory holding one unless told."""
STOP_GRACE_S = 10.0
"""Seconds an interrupted training gets to clean up after SIGINT before it is terminated."""


def train_command(
    job: TrainingJob, schedule: Schedule, dataset: str, train: Path, val: Path, out: Path, device: str
) -> list[str]:
    """The ``velobins train`` command line of ``job``, saying what to do with an earlier partial run.

    ``velobins train`` refuses an output directory that holds a run unless told, so the flag is
    explicit: ``--resume <partial>/last.pt`` when the interrupted training left a ``last.pt`` (the
    plan is the one recorded in ``reproduce.json``, and ``train`` checks the checkpoint's model
    config and restores optimizer and RNG state, so resuming continues exactly the same training);
    ``--overwrite`` when it left training files but no ``last.pt`` to resume from (it restarts);
    no flag when the directory holds no training.
    """
    partial = partial_dir(out, job.name)
    cmd = [sys.executable, "-m", "velobins_eval.cli.train", "--dataset", dataset, "--data", str(train)]
    cmd += ["--val", str(val), *job.args, "--epochs", str(schedule.epochs), "--stride", str(schedule.stride)]
    # No --no-progress: bars draw on a terminal only, so the log gets the per-epoch lines and no bar frames.
    cmd += ["--seed", str(job.seed), "--threads", "1", "--device", device, "--out", str(partial)]
    if (partial / "last.pt").is_file():
        cmd += ["--resume", str(partial / "last.pt")]
    elif any((partial / name).exists() for name in TRAIN_OUTPUTS):
        cmd += ["--overwrite"]
    return cmd


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


def run_trainings(
    jobs: list[TrainingJob],
    schedule: Schedule,
    dataset: str,
    train: Path,
    val: Path,
    out: Path,
    max_jobs: int,
    device: str = "auto",
    progress: bool = True,
) -> dict[str, float]:
    """Train every job not yet finished, ``max_jobs`` at once; return {model: seconds (0 if skipped)}.

    A training that fails keeps its ``.partial`` directory (the next run resumes it). When this
    function is interrupted (Ctrl-C included) it stops the trainings it started (SIGINT first, so
    each removes its temporary files) and removes what a stopped one left behind unfinished.

    Raises:
        ReproduceError: a training exited with an error or without a ``best.pt`` (the message names its log).
    """
    (out / LOG_DIR).mkdir(parents=True, exist_ok=True)
    (out / MODEL_DIR).mkdir(parents=True, exist_ok=True)
    seconds = {j.name: 0.0 for j in jobs if is_trained(out, j.name)}
    todo = [j for j in jobs if j.name not in seconds]
    running: dict[str, tuple[subprocess.Popen, float, Any]] = {}
    failed: list[str] = []
    bar = progress_bar(total=len(jobs), initial=len(seconds), desc="trainings", unit="model", enabled=progress)
    shown = ""
    try:
        while todo or running:
            while todo and len(running) < max_jobs:
                job = todo.pop(0)
                log = (out / LOG_DIR / f"{job.name}.log").open("a")
                cmd = train_command(job, schedule, dataset, train, val, out, device)
                log.write(f"$ {shlex.join(cmd)}\n")
                log.flush()
                running[job.name] = (subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT), time.monotonic(), log)
            if ", ".join(running) != shown:
                shown = ", ".join(running)
                bar.set_postfix_str(shown)
            time.sleep(0.2)
            for name, (proc, t0, log) in list(running.items()):
                if proc.poll() is None:
                    continue
                log.close()
                del running[name]
                seconds[name] = time.monotonic() - t0
                partial = partial_dir(out, name)
                if proc.returncode != 0 or not (partial / "best.pt").is_file():
                    # No best.pt after a successful exit: no epoch had a finite validation metric.
                    failed.append(name)
                else:
                    final = model_dir(out, name)
                    if final.exists():  # an earlier, unusable copy (no best.pt): ours, under our lock
                        shutil.rmtree(final)
                    partial.rename(final)
                bar.update(1)
    except BaseException:
        stop_processes(proc for proc, _, _ in running.values())  # only the processes this function started
        for name, (_, _, log) in running.items():
            log.close()
            remove_stale_temp_files(partial_dir(out, name))  # what a SIGTERM/SIGKILL left behind
        raise
    finally:
        bar.close()
    if failed:
        logs = ", ".join(str(out / LOG_DIR / f"{n}.log") for n in failed)
        raise ReproduceError(f"training failed for {', '.join(failed)} (logs: {logs})")
    return seconds
