"""The jobs of a reproduction, as the callables submitit pickles and runs: one training, one evaluation unit,
the IMU-only baseline of a split.

Each job finds out what to do when it *starts*, from the files in ``<out>``, so a job that a
scheduler requeues (preemption, time limit: :class:`submitit.helpers.Checkpointable` resubmits the
same callable) or a reproduction that is run again continues where the files say:

* :class:`TrainingTask` runs ``velobins train`` (in the job's process) in ``<out>/models/<model>.partial``:
  ``--resume`` from its ``last.pt`` when an interrupted run left one (a partial folder without one is
  removed: it restarts); it appends to ``<out>/logs/<model>.log`` and renames the folder to
  ``<out>/models/<model>`` when training ends with a ``best.pt``, so a finished model is never redone;
* :class:`EvaluationTask` scores one unit on one split and writes ``<out>/units/<split>/<unit>.npz``
  (:mod:`.results`); :class:`ImuOnlyTask` does the same for the split's IMU-only baseline, at the
  update stamps of the headline model's unit.

A failure raises :class:`~.errors.ReproduceError` naming the model or unit and its log; submitit
hands it to the driver (:mod:`.engine`).
"""

from __future__ import annotations

import contextlib
import shlex
import shutil
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

import submitit

from velobins_common.outputs import remove_path

from .errors import ReproduceError
from .plan import HEADLINE, LOG_DIR, EvalUnit, Schedule, TrainingJob, is_trained, model_dir, partial_dir

"""Files of a ``velobins train`` run; ``velobins train`` refuses a directory holding one unless told."""


@dataclass(frozen=True)
class Data:
    """Where the flights are: the dataset adapter and the training / validation directories."""

    dataset: str
    train: Path
    val: Path


def train_argv(job: TrainingJob, schedule: Schedule, data: Data, out: Path, device: str, threads: int) -> list[str]:
    """``velobins train``'s arguments for ``job``, saying what to do with an earlier partial run.

    ``--resume <partial>/last.pt`` when an interrupted training left a ``last.pt`` (the plan is the one
    recorded in ``reproduce.json``; ``train`` checks the checkpoint's model config and restores the
    optimiser and RNG state, and repairs a ``best.pt`` an interrupted save left out of step, so the
    resumed run is the interrupted one); no flag otherwise (:meth:`TrainingTask.__call__` first removes
    a partial folder without a ``last.pt``: reproduce's own, killed before its first checkpoint).
    """
    partial = partial_dir(out, job.name)
    argv = ["--dataset", data.dataset, "--data", str(data.train), "--val", str(data.val), *job.args]
    argv += ["--epochs", str(schedule.epochs), "--stride", str(schedule.stride), "--seed", str(job.seed)]
    argv += ["--recipe", "paper"]  # the paper's training, whatever velobins train's default recipe is
    # No --no-progress: bars draw on a terminal only, so the log gets the per-epoch lines and no bar frames.
    argv += ["--threads", str(threads), "--device", device, "--out", str(partial)]
    if (partial / "last.pt").is_file():
        argv += ["--resume", str(partial / "last.pt")]
    return argv


@contextlib.contextmanager
def _logged(log: Path):
    """stdout and stderr of the block appended to ``log`` (an exception's traceback too)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a", encoding="utf-8") as fh, contextlib.redirect_stdout(fh), contextlib.redirect_stderr(fh):
        try:
            yield fh
        except BaseException:
            traceback.print_exc(file=fh)
            raise
        finally:
            fh.flush()


class TrainingTask(submitit.helpers.Checkpointable):
    """One model of the plan trained (or resumed) in the job's process; returns the wall seconds spent."""

    def __init__(self, job: TrainingJob, schedule: Schedule, data: Data, out: Path, device: str, threads: int):
        self.job, self.schedule, self.data, self.out = job, schedule, data, Path(out)
        self.device, self.threads = device, threads

    @property
    def name(self) -> str:
        """What the driver reports: ``train <model>``."""
        return f"train {self.job.name}"

    @property
    def log(self) -> Path:
        """``<out>/logs/<model>.log`` (appended to by every try)."""
        return self.out / LOG_DIR / f"{self.job.name}.log"

    def argv(self) -> list[str]:
        """The ``velobins train`` arguments this task would run now (they depend on the partial run)."""
        return train_argv(self.job, self.schedule, self.data, self.out, self.device, self.threads)

    def __call__(self) -> float:
        from ..cli.train import main_train

        if is_trained(self.out, self.job.name):
            return 0.0  # finished by an earlier try of this job
        t0 = time.monotonic()
        partial = partial_dir(self.out, self.job.name)
        if partial.exists() and not (partial / "last.pt").is_file():
            remove_path(partial)  # nothing to resume (killed before its first checkpoint): start afresh
        argv = self.argv()
        with _logged(self.log):
            print(f"$ {shlex.join(['velobins', 'train', *argv])}", flush=True)
            try:
                status = main_train(argv)
            except ValueError as exc:  # a user's error (the data, the options): one line, as velobins train says it
                raise ReproduceError(f"training {self.job.name} failed: {exc} (log: {self.log})") from None
        partial, final = partial_dir(self.out, self.job.name), model_dir(self.out, self.job.name)
        if status != 0 or not (partial / "best.pt").is_file():
            # No best.pt after a clean exit: no epoch had a finite validation metric.
            raise ReproduceError(f"training {self.job.name} failed (exit status {status}; log: {self.log})")
        if final.exists():  # an earlier, unusable copy (no best.pt), under the driver's lock
            shutil.rmtree(final)
        partial.rename(final)
        return time.monotonic() - t0


class _UnitTask(submitit.helpers.Checkpointable):
    """Common part of the evaluation jobs: the split's flights, the filter, the log, the result file."""

    def __init__(self, split: str, data: Data, directory: Path, out: Path, params: tuple[str, ...], threads: int):
        self.split, self.data, self.directory, self.out = split, data, Path(directory), Path(out)
        self.params, self.threads = params, threads

    @property
    def log(self) -> Path:
        """``<out>/logs/eval-<split>.log`` (shared by the split's units, appended to)."""
        return self.out / LOG_DIR / f"eval-{self.split}.log"

    def _inputs(self) -> tuple[list, object]:
        import torch

        from velobins_data.datasets import load_directory

        from ..evaluate import load_ekf_config

        torch.set_num_threads(self.threads)
        return load_directory(self.data.dataset, self.directory), load_ekf_config([Path(p) for p in self.params])


class EvaluationTask(_UnitTask):
    """One evaluation unit (model × split × seed) scored and written to its result file; returns the seconds."""

    def __init__(self, unit: EvalUnit, keep_records: bool, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.unit, self.keep_records = unit, keep_records

    @property
    def name(self) -> str:
        """What the driver reports: ``evaluate <split>/<unit>``."""
        from .results import unit_key

        return f"evaluate {self.split}/{unit_key(self.unit)}"

    def __call__(self) -> float:
        from .evaluation import evaluate_unit
        from .results import checkpoint_stamp, is_done, save_unit, unit_path

        if is_done(self.out, self.split, self.unit):
            return 0.0
        t0 = time.monotonic()
        checkpoint = model_dir(self.out, self.unit.model) / "best.pt"
        with _logged(self.log):
            print(f"{self.name}: {checkpoint}", flush=True)
            seqs, ekf = self._inputs()
            stamp = checkpoint_stamp(self.out, self.unit)
            result = evaluate_unit(self.unit, checkpoint, seqs, self.keep_records, ekf)
            save_unit(unit_path(self.out, self.split, self.unit), result, stamp)
        return time.monotonic() - t0


class ImuOnlyTask(_UnitTask):
    """The split's IMU-only baseline, at the update stamps of the seed-0 headline unit; returns the seconds."""

    def __init__(self, headline: EvalUnit, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.headline = headline

    @property
    def name(self) -> str:
        """What the driver reports: ``evaluate <split>/imu-only``."""
        return f"evaluate {self.split}/imu-only"

    def __call__(self) -> float:
        from .evaluation import imu_only_unit
        from .plan import IMU_ONLY
        from .results import is_done, load_unit, save_unit, unit_path

        unit = EvalUnit(IMU_ONLY, "")
        if is_done(self.out, self.split, unit):
            return 0.0
        if self.headline.row != HEADLINE or self.headline.seed != 0:
            raise ReproduceError(f"IMU-only needs the seed-0 {HEADLINE} unit, got {self.headline}")
        t0 = time.monotonic()
        with _logged(self.log):
            print(f"{self.name}", flush=True)
            seqs, ekf = self._inputs()
            headline = load_unit(unit_path(self.out, self.split, self.headline))
            save_unit(unit_path(self.out, self.split, unit), imu_only_unit(seqs, headline, ekf), None)
        return time.monotonic() - t0
