"""What defines a training run: :class:`TrainConfig` (its one source of defaults, checks and help, which
``velobins train``'s options are generated from) and the validation figures that can pick ``best.pt``."""

from __future__ import annotations

from dataclasses import dataclass, field

from velobins_common.fields import param

from .augment import Augmentation
from .config import MAX_MEMBERS, ModelConfig
from .schedule import BUDGET_CLOCKS, LR_SCHEDULES
from .train_precision import PRECISIONS
from .variants import parse_variant

METRICS = ("nll", "ave", "nll+nees")
LABEL_FLOORS = ("none", "val")
"""``TrainConfig.label_floor`` values: no floor on the labels' σ (the paper), or the last validation's RMS error."""


@dataclass(frozen=True)
class TrainConfig:
    """Everything that defines a training run.

    Attributes:
        model: architecture; ``head``, ``cov_head``, ``uncertainty`` are set from ``variant`` and
            ``velocity_range`` from the training set (unless ``velocity_range`` below is given).
        variant: Table II row, e.g. ``"G+H^B"`` (VeloBins) or ``"reg"``.
        epochs: number of epochs (paper: 100); the upper bound when time_budget is set.
        batch_size: windows per optimizer step (paper: 128; per process under DDP).
        lr: Adam learning rate (paper: 3e-4, constant); the peak of lr_schedule.
        lr_schedule: constant (paper) or cosine (half-cosine decay to min_lr_ratio × lr at the end of the plan).
        warmup: share of the planned steps over which the LR rises linearly from 0 (0 = none, the paper).
        min_lr_ratio: cosine schedule: final LR as a share of lr.
        kl_ramp: share of the planned steps over which λ_KL rises linearly from kl_ramp_start to 1
            (0 = none, the paper).
        kl_ramp_start: λ_KL multiplier at the first step of the KL ramp.
        label_floor: lower bound on the KL labels' σ (eq:errcond): ``none`` (the paper), or ``val``, the last
            validation's RMS error per axis, from the second epoch on (labels no narrower than the error on
            flights the network does not train on; :func:`velobins_net.labels.error_conditioned_labels`).
        kl_scale: multiplier of λ_KL for the whole run, on top of the ramp (1 = the paper's λ_KL; 0 trains the
            bins by the Huber term alone, the H^B row of Table II).
        stride: training window stride in samples.
        rotate_windows: each epoch takes every stride-th window from offset epoch mod stride, so stride
            epochs see every window (False: the same windows every epoch).
        val_stride: validation window stride in samples.
        seed: seeds parameters init and shuffling.
        nll_start_epoch: regression baseline: epochs of Huber before switching to Gaussian NLL (under
            time_budget the same share, nll_start_epoch / epochs, of the planned epochs).
        best_metric: validation figure that picks best.pt, lower is better: nll, ave, or nll+nees
            (NLL + log(0.95 / network NEES share in the χ²(3) 95 % bounds): penalises over-confidence).
        patience: stop after this many epochs without a better best_metric (0 = never).
        time_budget: wall-clock budget in minutes (None = run all epochs): the epoch count and the
            schedule's length are chosen to fit it and training stops at it.
        device: ``"auto"`` (CUDA when available), ``"cpu"`` or ``"cuda"``.
        velocity_range: fixed R [m/s]; None = RANGE_MARGIN × training max.
        resume: checkpoint to resume from (model, optimizer, epoch, RNG).
        progress: show a tqdm progress bar (rank 0).
        data_description: free text stored in the checkpoint (dataset, split).
        precision: forward-pass precision: 32 (float32, the paper), bf16 (bfloat16 autocast) or 16 (float16
            autocast with loss scaling); weights, loss and validation stay float32.
        deterministic: deterministic kernels only (torch refuses an op without one), so two runs with the same
            seed, data, threads and device give bit-identical weights (a time budget still makes the epoch
            count depend on the machine's speed).
        init_from: fine-tune: start from this model's weights, a shipped model name (crazyflie) or a checkpoint
            path; rotor count and kind, normalisation and velocity range may differ, the architecture may not.
        freeze: submodules not to train (encoder, bins, cov, or a dotted path such as encoder.layers.0).
        tensorboard: write a TensorBoard event log to <out>/tensorboard beside history.json.
        augment: sensor augmentation of the training windows (:mod:`.augment`; off in the paper).
        budget_clock: what time_budget counts: wall (clock seconds) or cpu (this process's CPU seconds: every run
            gets the same compute on a shared machine).
        members: networks to train, one after another, with seeds seed, seed+1, …, each on time_budget / members
            (or all the epochs without a budget), mixed into one ensemble checkpoint whose disagreement the
            filter can weigh (:mod:`velobins_net.train_ensemble`; 1 = one network).
        member_folds: members validate on their own flights (k-fold by flight): member i holds out the i-th block
            of the run's validation size from the end of its flights and trains on the others, so every flight
            trains a member and checkpoint selection does not hinge on one block (False: every member validates
            on the run's split; no effect with one member).
    """

    model: ModelConfig = field(default_factory=ModelConfig)
    variant: str = "G+H^B"
    epochs: int = 100
    batch_size: int = 128
    lr: float = 3e-4
    lr_schedule: str = "constant"
    warmup: float = 0.0
    min_lr_ratio: float = 1.0
    kl_ramp: float = 0.0
    kl_ramp_start: float = 1.0
    kl_scale: float = 1.0
    label_floor: str = param("none", choices=LABEL_FLOORS)
    stride: int = 1
    rotate_windows: bool = False
    val_stride: int = 5
    seed: int = 0
    nll_start_epoch: int = 10
    best_metric: str = "nll"
    patience: int = 0
    time_budget: float | None = None
    device: str = "auto"
    velocity_range: float | None = None
    resume: str | None = None
    progress: bool = True
    data_description: str = ""
    precision: str = "32"
    deterministic: bool = False
    init_from: str | None = None
    freeze: tuple[str, ...] = ()
    tensorboard: bool = True
    augment: Augmentation = field(default_factory=Augmentation)
    budget_clock: str = param("wall", choices=tuple(BUDGET_CLOCKS))
    members: int = 1
    member_folds: bool = False

    def __post_init__(self) -> None:
        variant = parse_variant(self.variant)
        if isinstance(self.augment, dict):  # from a checkpoint's train_config
            object.__setattr__(self, "augment", Augmentation(**self.augment))
        object.__setattr__(self, "freeze", tuple(self.freeze))
        if self.precision not in PRECISIONS:
            raise ValueError(f"TrainConfig.precision: must be one of {PRECISIONS}, got {self.precision!r}")
        if self.best_metric not in METRICS:
            raise ValueError(f"TrainConfig.best_metric: must be one of {METRICS}, got {self.best_metric!r}")
        for name in ("epochs", "batch_size", "stride", "val_stride"):
            if getattr(self, name) < 1:
                raise ValueError(f"TrainConfig.{name}: must be >= 1, got {getattr(self, name)}")
        if self.lr_schedule not in LR_SCHEDULES:
            raise ValueError(f"TrainConfig.lr_schedule: must be one of {LR_SCHEDULES}, got {self.lr_schedule!r}")
        for name in ("warmup", "min_lr_ratio", "kl_ramp", "kl_ramp_start"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"TrainConfig.{name}: must be in [0, 1], got {getattr(self, name)}")
        if not 0.0 <= self.kl_scale <= 10.0:
            raise ValueError(f"TrainConfig.kl_scale: must be in [0, 10], got {self.kl_scale}")
        if self.label_floor not in LABEL_FLOORS:
            raise ValueError(f"TrainConfig.label_floor: must be one of {LABEL_FLOORS}, got {self.label_floor!r}")
        if self.patience < 0:
            raise ValueError(f"TrainConfig.patience: must be >= 0, got {self.patience}")
        if not 1 <= self.members <= MAX_MEMBERS:
            raise ValueError(f"TrainConfig.members: must be in [1, {MAX_MEMBERS}], got {self.members}")
        if self.members > 1 and variant.is_baseline:  # velobins_net.ensemble mixes VeloBins and regression only
            raise ValueError(
                f"TrainConfig.members: only VeloBins and regression networks make an ensemble, not {self.variant}"
            )
        if self.time_budget is not None and not self.time_budget > 0:
            raise ValueError(f"TrainConfig.time_budget: must be > 0 minutes, got {self.time_budget}")
