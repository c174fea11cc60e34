"""Training schedules beyond the paper's constant learning rate: LR warm-up and decay, the KL ramp,
the per-epoch window offsets, the checkpoint-selection score and the wall-clock budget planner.

Every schedule is a function of the *progress* p ∈ [0, 1] of the planned optimiser steps, so the
same recipe works for a fixed number of epochs and for a run whose length a time budget chooses
(:class:`BudgetPlanner` re-plans the epoch count after every epoch; p follows the latest plan). The one
discrete switch, the regression baseline's Huber → NLL epoch, is fixed by the first plan instead
(:func:`nll_start_epoch`).

The paper's setting (constant 3e-4, KL weight 1 from the first step, fixed windows, best epoch by
validation NLL) is the identity of every function here; :data:`RECIPES` names it and the
small-data recipe of ``docs/results/recipe/README.md``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from velobins_common.stats import NEES_CONFIDENCE, chi2_bounds

LR_SCHEDULES = ("constant", "cosine")
"""``constant``: the paper's fixed LR (after the optional warm-up); ``cosine``: half-cosine decay to
``min_lr_ratio`` × LR over the rest of the planned steps."""

_PAPER: dict[str, Any] = {
    "lr": 3e-4,
    "lr_schedule": "constant",
    "warmup": 0.0,
    "min_lr_ratio": 1.0,
    "kl_ramp": 0.0,
    "kl_ramp_start": 1.0,
    "kl_scale": 1.0,
    "label_floor": "none",
    "batch_size": 128,
    "stride": 1,
    "rotate_windows": False,
    "best_metric": "nll",
    "members": 1,
    "member_folds": False,
}

RECIPES: dict[str, dict[str, Any]] = {
    "paper": _PAPER,
    "small-data": _PAPER
    | {
        "lr": 1e-3,
        "lr_schedule": "cosine",
        "warmup": 0.05,
        "min_lr_ratio": 0.02,
        "stride": 4,
        "rotate_windows": True,
        "best_metric": "nll+nees",
    },
    "own-vehicle": _PAPER | {"label_floor": "val", "members": 2},
}
"""Named TrainConfig settings (``velobins train --recipe``); options given explicitly override them. ``paper`` is
the paper's schedule (and TrainConfig's defaults); ``own-vehicle`` is ``paper`` with the KL labels' σ bounded by
the validation error (``label_floor``) and two members of half the time budget each, their ensemble the model
(``members``; the filter weighs their disagreement), what the small-data study of issue 28 found best for G+H^B
(``docs/results/recipe_platforms/``, items 27 and 28). Members that each validate on flights of their own
(``member_folds``) are an option, not the recipe's: they won on 8 NanoBench flights and cost NEES share or network
AVE on the other platforms (items 36 and 37). ``small-data`` is the earlier NanoBench-only study's
(``docs/results/recipe/``)."""

DEFAULT_RECIPE = "own-vehicle"
"""The recipe of ``velobins train`` without ``--recipe``, and of ``velobins calibrate --cross-fit``'s fold models: a
new vehicle has minutes of flights, where the paper's labels over-fit (reproducing the paper: ``--recipe paper``)."""


def lr_factor(progress: float, schedule: str, warmup: float, min_ratio: float) -> float:
    """Multiplier of the base LR at ``progress`` of the planned steps.

    Linear warm-up from 0 over the first ``warmup`` share (a large LR on a fresh transformer and a
    fresh Adam second-moment estimate diverges or wastes the first steps), then ``constant`` or a
    half-cosine from 1 to ``min_ratio`` at the end of the plan (a decayed LR settles the weights,
    which a short budget cannot wait for at a constant LR). Past the plan the factor stays at its end value.
    """
    if schedule not in LR_SCHEDULES:
        raise ValueError(f"lr_schedule: must be one of {LR_SCHEDULES}, got {schedule!r}")
    p = min(max(progress, 0.0), 1.0)
    if warmup > 0.0 and p < warmup:
        return p / warmup
    if schedule == "constant" or warmup >= 1.0:
        return 1.0
    q = (p - warmup) / (1.0 - warmup)
    return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * q))


def kl_weight_factor(progress: float, ramp: float, start: float) -> float:
    """Multiplier of λ_KL at ``progress``: linear from ``start`` to 1 over the first ``ramp`` share, then 1.

    Early in training the error-conditioned labels are as wide as the (large) errors; the ramp
    shifts the early balance between the KL and the Huber term (eq:total_loss) without changing
    the objective the run ends on.
    """
    if ramp <= 0.0 or progress >= ramp:
        return 1.0
    return start + (1.0 - start) * max(progress, 0.0) / ramp


def epoch_window_indices(n: int, stride: int, epoch: int, rotate: bool) -> torch.Tensor:
    """Indices of the windows an epoch draws from a stride-1 set of ``n`` windows.

    ``rotate``: every ``stride``-th window starting at offset ``epoch mod stride``, so each epoch
    is ``stride`` times shorter (more validations, a finer best-epoch choice at the same budget)
    while ``stride`` consecutive epochs still see every window once. Without it: all ``n``.
    """
    if not rotate or stride <= 1:
        return torch.arange(n)
    return torch.arange(epoch % stride, n, stride)


def nll_start_epoch(nll_start: int, epochs: int, first_plan: int | None) -> int:
    """The first epoch of the regression baseline's Gaussian NLL phase (Huber loss before it).

    Without a time budget (``first_plan`` None) it is ``nll_start``. Under a budget the Huber phase keeps the
    paper's share of the training, ``nll_start / epochs``, of the epochs planned before the first one, rounded up:
    a short run still gets at least one Huber epoch when the share is not zero. It is decided once, from that
    first plan, because the plan is re-made after every epoch from measured times: a switch that followed it
    would move with the machine's load, and on small data the epochs before the switch are the ones validation
    picks (the NLL phase over-fits σ within an epoch), so one epoch more or less of Huber changed the model that
    a seed gave from one machine to the next. The first plan still follows the machine (plans of 11–20 epochs
    all give two Huber epochs, 10 gives one): the checkpoint and ``history.json`` record the switch, so a run can
    be replayed without a budget.
    """
    if first_plan is None:
        return nll_start
    share = nll_start / max(epochs, 1)
    return min(first_plan, math.ceil(share * first_plan - 1e-9))


def nees_bounds(dof: int = 3, confidence: float = NEES_CONFIDENCE) -> tuple[float, float]:
    """The network NEES bounds of checkpoint selection, (3, 0.95) → (0.216, 9.348) (the χ² bounds of
    :func:`velobins_common.stats.chi2_bounds`, the one definition)."""
    return chi2_bounds(dof, confidence)


def selection_score(nll: float, nees_share: float) -> float:
    """Checkpoint-selection score ``nll+nees``: validation NLL + log(0.95 / network NEES share in bounds).

    The NLL rewards a sharp variance that is right on most windows and forgives the
    over-confident tail that makes a filter inconsistent; the second term (nats, like the NLL;
    zero for a consistent predictor) charges the share of windows whose NEES e·Σ⁻¹·e falls outside
    the χ²(3) 95 % bounds, both the over- and the under-confident side. It is the filter's NEES
    share measured on the network alone, so it needs no EKF pass per epoch.
    """
    share = max(nees_share, 1e-6)
    return nll + max(0.0, math.log(NEES_CONFIDENCE / share))


BUDGET_CLOCKS: dict[str, Callable[[], float]] = {"wall": time.perf_counter, "cpu": time.process_time}
"""What a time budget counts: ``wall`` clock seconds, or ``cpu`` seconds of the training process (all its
threads). A CPU budget gives every run the same compute on a shared machine, where a wall budget gives each
what the other jobs leave it: the fair clock for comparing recipes."""


@dataclass
class BudgetPlanner:
    """Chooses how many epochs fit a time budget, and says when to stop.

    Attributes:
        budget_s: the budget [s], counted from ``start`` (the call of ``train``).
        max_epochs: the plan never exceeds this many epochs.
        start: the budget clock's reading at the start of the run (minus the time spent before a resume).
        epoch_s: measured time of each finished epoch on the budget clock (training, validation, checkpoints).
        planned: the current plan (epochs in total); 0 before the first estimate.
        clock: a key of :data:`BUDGET_CLOCKS`.
    """

    budget_s: float
    max_epochs: int
    start: float = field(default_factory=time.perf_counter)
    epoch_s: list[float] = field(default_factory=list)
    planned: int = 0
    clock: str = "wall"
    _epoch_start: float = 0.0

    def now(self) -> float:
        """The budget clock's reading."""
        return BUDGET_CLOCKS[self.clock]()

    def elapsed(self) -> float:
        """Seconds spent so far."""
        return self.now() - self.start

    def deadline(self) -> float:
        """The budget clock's reading at which the budget ends (a running epoch stops there)."""
        return self.start + self.budget_s

    def over(self) -> bool:
        """Whether the budget is spent."""
        return self.now() > self.deadline()

    def epoch_started(self) -> None:
        """Mark the start of an epoch (its time is taken on the budget clock by :meth:`epoch_ended`)."""
        self._epoch_start = self.now()

    def epoch_ended(self) -> None:
        """Record the time of the epoch started by :meth:`epoch_started`."""
        self.epoch_s.append(self.now() - self._epoch_start)

    def epoch_estimate(self) -> float:
        """Expected wall time of the next epoch: the mean of the last three (contention drifts)."""
        recent = self.epoch_s[-3:]
        return sum(recent) / len(recent)

    def plan(self, epochs_done: int, estimate_s: float | None = None) -> int:
        """Total epochs that fit: those done plus as many more as the remaining time holds.

        ``estimate_s`` replaces the measured estimate (the timing pass before the first epoch).
        At least one epoch is always planned, so a run never ends without a validated checkpoint.
        """
        est = estimate_s if estimate_s is not None else self.epoch_estimate()
        remaining = self.budget_s - self.elapsed()
        more = int(remaining // est) if est > 0 and remaining > 0 else 0
        self.planned = max(1, min(self.max_epochs, epochs_done + more))
        return self.planned


def time_steps(step: Any, count: int, clock: Callable[[], float] = time.perf_counter) -> float:
    """Mean seconds (on ``clock``) per call of ``step()`` over ``count`` calls, after one untimed call."""
    step()
    t0 = clock()
    for _ in range(count):
        step()
    return (clock() - t0) / max(count, 1)
