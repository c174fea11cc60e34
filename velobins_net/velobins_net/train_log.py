"""The TensorBoard event log of a training run, beside ``history.json`` (``<out>/tensorboard/``).

One step per epoch (the epoch index, as in ``history.json``): the training loss, the validation
figures (network AVE, NLL, NEES median and share in the χ²(3) bounds), the learning rate and λ_KL
multiplier the schedule ran at, the throughput and the run's wall and CPU time; and histograms of
the predicted σ per axis and of the normalised error e/σ on the validation windows, which show an
over- or under-confident model long before the NEES summary does (e/σ of a consistent predictor is
a unit normal).

A resumed run appends to the same folder and first drops what the interrupted run logged after its
last checkpointed epoch (``purge_step``), so every step is logged once. ``history.json`` stays the
record the code reads back; this log is for people (``tensorboard --logdir <out>``).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch

LOG_DIR = "tensorboard"
"""Folder of the event files inside a run's output directory."""

AXES = ("x", "y", "z")

SCALARS = {
    "train/loss": "train_loss",
    "train/lr": "lr",
    "train/kl_weight": "kl_weight",
    "train/windows_per_s": "windows_per_s",
    "val/ave": "val_ave",
    "val/nll": "val_nll",
    "val/nees_median": "val_nees_median",
    "val/nees_share": "val_nees_share",
    "time/elapsed_s": "elapsed_s",
    "time/cpu_s": "cpu_s",
}
"""TensorBoard tag → field of :class:`~velobins_net.train.EpochRecord`."""


class TrainLog:
    """Writes one run's event file (rank 0 only; the caller decides)."""

    def __init__(self, out_dir: str | Path, start_epoch: int = 0) -> None:
        from torch.utils.tensorboard import SummaryWriter  # needs the tensorboard package (requirements.lock)

        self.path = Path(out_dir) / LOG_DIR
        self._writer = SummaryWriter(str(self.path), purge_step=start_epoch if start_epoch > 0 else None)

    def epoch(self, record: Any, sigma: torch.Tensor | None = None, z: torch.Tensor | None = None) -> None:
        """Log one epoch: the scalars of ``record`` (an EpochRecord), σ (N, 3) and e/σ (N, 3) histograms."""
        step = int(record.epoch)
        for tag, name in SCALARS.items():
            value = getattr(record, name)
            if value is not None and math.isfinite(float(value)):
                self._writer.add_scalar(tag, float(value), step)
        for name, values in (("sigma", sigma), ("z", z)):
            if values is None:
                continue
            for i, axis in enumerate(AXES):
                column = values[:, i].double()
                column = column[torch.isfinite(column)]
                if column.numel():
                    self._writer.add_histogram(f"val/{name}_{axis}", column.numpy(), step)
        self._writer.flush()

    def close(self) -> None:
        """Flush and close the event file."""
        self._writer.close()
