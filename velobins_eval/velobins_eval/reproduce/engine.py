"""The job engine of ``velobins reproduce``: submitit, on this machine or on a Slurm cluster.

``--executor local`` (the default) runs every job in a process of its own through submitit's
``LocalExecutor``: a training that crashes or runs out of memory does not take the driver with it,
Ctrl-C stops the jobs, and the job is the same pickled callable a cluster would run, so the local
path exercises the Slurm one. ``LocalExecutor`` starts whatever is submitted at once; the driver
submits ``--jobs`` at a time and the next one when one ends (what ``sbatch --array=…%N`` does on a
cluster), because trainings on a laptop's cores must not all start together. (submitit's
``DebugExecutor`` runs jobs inside the driver, one after the other: useful under a debugger, not
for a reproduction that should survive a crashed job.)

``--executor slurm`` submits each phase as one job array (``sbatch --array=0-N%P``) with the
resources of :class:`SlurmConfig` and waits for it (submitit polls ``sacct``); a job that reaches its
time limit or is preempted is requeued by submitit and resumes (:mod:`.tasks`). The driver's folder
``<out>/jobs`` holds submitit's pickles, sbatch files and per-job logs; it must be on a filesystem
every node sees (docs/reproduce.md, "On a Slurm cluster").

Either way a job that fails does not stop the others of its phase; the driver lists every failure
with its log after the phase, and a re-run submits only what is still missing.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import submitit

from velobins_common.errors import UserError
from velobins_common.progress import progress_bar

from .errors import ReproduceError

EXECUTORS = ("local", "slurm")
"""``--executor`` values."""

LOCAL_TIMEOUT_MIN = 7 * 24 * 60
"""Time limit of a local job [min]: none in practice (submitit's LocalExecutor default is 2 minutes)."""

POLL_S = 0.5
"""Seconds between two looks at the running jobs."""

CANCEL_WAIT_S = 15.0
"""Seconds the driver waits for cancelled local jobs to end (each removes its temporary files)."""


@dataclass(frozen=True)
class SlurmConfig:
    """Resources of every job of ``velobins reproduce --executor slurm`` (one job array per phase).

    Attributes:
        partition: Slurm partition (None: the cluster's default).
        time: wall-time limit of one job [min]; a training that reaches it is requeued and resumes from its
            last finished epoch (at most 3 times).
        cpus_per_task: CPU cores of each job; its training or evaluation uses as many torch threads.
        gpus: GPUs of each job (0: CPU jobs); with --device auto a training then runs on CUDA.
        array_parallelism: jobs of one array running at once (sbatch --array=0-N%P).
        mem_gb: memory of each job [GB] (None: the partition's default).
    """

    partition: str | None = None
    time: int = 240
    cpus_per_task: int = 2
    gpus: int = 0
    array_parallelism: int = 64
    mem_gb: float | None = None
    setup: tuple[str, ...] = ()
    """Shell lines each job runs before Python starts, e.g. ``source /shared/velobins/scripts/env.sh``."""

    def __post_init__(self) -> None:
        for name in ("time", "cpus_per_task", "array_parallelism"):
            if getattr(self, name) < 1:
                raise UserError(f"--slurm-{name.replace('_', '-')}: must be >= 1, got {getattr(self, name)}")
        if self.gpus < 0:
            raise UserError(f"--slurm-gpus: must be >= 0, got {self.gpus}")
        if self.mem_gb is not None and not self.mem_gb > 0:
            raise UserError(f"--slurm-mem-gb: must be > 0, got {self.mem_gb}")

    def parameters(self) -> dict[str, Any]:
        """submitit ``SlurmExecutor.update_parameters`` keywords (sbatch options)."""
        params: dict[str, Any] = {
            "job_name": "velobins",
            "time": self.time,
            "cpus_per_task": self.cpus_per_task,
            "array_parallelism": self.array_parallelism,
            "setup": list(self.setup),
        }
        if self.partition:
            params["partition"] = self.partition
        if self.gpus:
            params["gpus_per_node"] = self.gpus
        if self.mem_gb is not None:
            # sbatch --mem counts MB without a unit suffix
            gb = self.mem_gb
            params["mem"] = f"{gb:.0f}G" if gb == int(gb) else f"{round(gb * 1024)}M"
        return params


def make_executor(kind: str, folder: Path, slurm: SlurmConfig | None = None) -> submitit.Executor:
    """The submitit executor of ``--executor kind`` writing into ``folder``; ValueError for Slurm without ``srun``."""
    if kind == "local":
        executor = submitit.LocalExecutor(folder)
        executor.update_parameters(timeout_min=LOCAL_TIMEOUT_MIN)
        return executor
    if kind != "slurm":
        raise UserError(f"--executor: must be one of {', '.join(EXECUTORS)}, got {kind!r}")
    try:
        executor = submitit.SlurmExecutor(folder)
    except RuntimeError:
        raise UserError(
            "--executor slurm: no 'srun' on this machine; run velobins reproduce where Slurm is installed "
            "(a login node), or use --executor local"
        ) from None
    executor.update_parameters(**(slurm or SlurmConfig()).parameters())
    return executor


def _reason(job: Any) -> str:
    """One line on why a finished job failed: the last line of the job's traceback (our errors name the log)."""
    exc = job.exception()
    if isinstance(exc, submitit.core.utils.FailedJobError):  # the job raised: its traceback, as text
        lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip() and not set(ln.strip()) <= {"-"}]
        trace = lines[: next((i for i, ln in enumerate(lines) if ln.startswith("You can check full logs")), len(lines))]
        last = next((ln for ln in reversed(trace) if "Error: " in ln), trace[-1] if trace else type(exc).__name__)
        return last.split("Error: ", 1)[-1]
    text = str(exc).strip() if exc is not None else ""
    first = text.splitlines()[0] if text else "ended without a result"  # killed, out of memory, cancelled
    return f"{first} (submitit logs: {job.paths.stdout}, {job.paths.stderr})"


class Engine:
    """Runs phases of jobs through one executor and reports what each took.

    Args:
        kind: ``local`` or ``slurm``.
        folder: submitit's folder (``<out>/jobs``).
        jobs: local jobs at once (``--jobs``; Slurm: ``SlurmConfig.array_parallelism``).
        slurm: Slurm resources.
        progress: draw a progress bar per phase.
        on_done: called with each task as its job ends (after its result was collected).
    """

    def __init__(
        self,
        kind: str,
        folder: Path,
        jobs: int = 2,
        slurm: SlurmConfig | None = None,
        progress: bool = True,
        on_done: Callable[[Any], None] | None = None,
    ) -> None:
        self.kind, self.jobs, self.slurm = kind, jobs, slurm or SlurmConfig()
        self.progress, self.on_done = progress, on_done
        self.executor = make_executor(kind, folder, self.slurm)

    @property
    def threads(self) -> int:
        """torch threads of one job: 1 locally (``--jobs`` share the cores), the job's cores on Slurm."""
        return 1 if self.kind == "local" else self.slurm.cpus_per_task

    def submit(self, tasks: Sequence[Any]) -> list[Any]:
        """Submit ``tasks`` as one job array (Slurm) and return their jobs, without waiting."""
        if not tasks:
            return []
        jobs = self.executor.submit_array(list(tasks))
        array = str(jobs[0].job_id).split("_")[0]
        print(f"reproduce: submitted Slurm array {array} ({len(jobs)} jobs); logs in {self.executor.folder}")
        return jobs

    def run(self, tasks: Sequence[Any], label: str) -> list[tuple[Any, float]]:
        """Run every task (each returns its seconds) and wait for all; return (task, seconds) as they ended.

        Raises:
            ReproduceError: after the phase, naming every task that failed and why (its log).
        """
        pending = list(tasks)
        running: list[tuple[Any, Any]] = []
        done: list[tuple[Any, float]] = []
        failed: list[str] = []
        bar = progress_bar(total=len(pending), desc=label, unit="job", enabled=self.progress)
        try:
            if self.kind == "slurm":
                running, pending = list(zip(self.submit(pending), pending, strict=True)), []
            while pending or running:
                while pending and len(running) < self.jobs:
                    task = pending.pop(0)
                    running.append((self.executor.submit(task), task))
                time.sleep(POLL_S)
                for job, task in [(j, t) for j, t in running if j.done()]:
                    running.remove((job, task))
                    try:
                        seconds = job.result()
                    except Exception:  # the job raised, or ended without a result (killed)
                        failed.append(f"{task.name}: {_reason(job)}")
                    else:
                        done.append((task, float(seconds)))
                    bar.update(1)
                    if self.on_done is not None:
                        self.on_done(task)
        except BaseException:
            self.cancel([job for job, _ in running])
            raise
        finally:
            bar.close()
        if failed:
            raise ReproduceError(f"{len(failed)} of {len(tasks)} {label} failed: " + "; ".join(failed))
        return done

    def cancel(self, jobs: Sequence[Any]) -> None:
        """Stop ``jobs`` (local: SIGINT, each removes its temporary files; Slurm: scancel); wait for local ones."""
        for job in jobs:
            job.cancel(check=False)
        if self.kind != "local":
            return
        deadline = time.monotonic() + CANCEL_WAIT_S
        while any(not job.done() for job in jobs) and time.monotonic() < deadline:
            time.sleep(0.1)
