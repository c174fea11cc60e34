"""Training loop (Implementation Details: Adam 3e-4, batch 128; epochs a parameter).

Public entry: :func:`train`. Runs on CPU, on CUDA when available, and under ``torchrun`` as
DistributedDataParallel (``WORLD_SIZE``/``RANK``/``LOCAL_RANK`` in the environment; gloo on
CPU, nccl on CUDA; :mod:`.train_dist`), in float32 or mixed precision and optionally with
deterministic kernels only (:mod:`.train_precision`), from scratch or from another model's weights
(:mod:`.train_init`). Each epoch shuffles the windows with a generator seeded by (seed, epoch),
so runs are reproducible and a resumed run continues exactly where the interrupted one stopped.
Validation every epoch reports the network AVE (mean ‖v̂ − v‖, m/s) and the Gaussian NLL in
nats per axis, and the network NEES (e·Σ⁻¹·e) median and share inside the χ²(3) 95 % bounds;
the best checkpoint by the chosen metric is kept beside the last one; ``history.json`` and a
TensorBoard event log (:mod:`.train_log`) record every epoch.

Beyond the paper's constant LR: a warm-up and decay schedule, a KL-weight ramp, per-epoch window
offsets and a time budget (``time_budget`` on the wall or the CPU clock: the epoch count and the schedule's
length are chosen to fit, re-planned after every epoch), sensor augmentation (:mod:`.augment`). Their formulas
live in :mod:`.schedule`; the configuration in :mod:`.train_config`.
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
from collections.abc import Sequence as Seq
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from velobins_common.outputs import Run, atomic_write_text
from velobins_common.progress import progress_bar
from velobins_data.flight import Flight

from .accel import reuse_freed_memory
from .bins import BinGrid, velocity_range_from
from .checkpoint import CheckpointError, git_commit, read_checkpoint, resumed_best, save_checkpoint
from .config import ModelConfig, config_differences
from .data import WindowDataset, describe_sources, fit_normalization
from .networks import build_model
from .schedule import (
    BudgetPlanner,
    epoch_window_indices,
    kl_weight_factor,
    lr_factor,
    nll_start_epoch,
    selection_score,
)
from .train_config import METRICS, TrainConfig  # noqa: F401  (public here as before)
from .train_dist import DistInfo, agree, budget_stop, pick_device, setup_distributed
from .train_init import initialise
from .train_precision import deterministic_algorithms, resolve_precision
from .train_steps import (  # noqa: F401  (evaluate, make_optimizer, weighted_loss: public here as before)
    ValFigures,
    epoch_batches,
    estimate_epoch_seconds,
    evaluate,
    make_optimizer,
    train_epoch,
    weighted_loss,
)
from .variants import Variant, parse_variant


@dataclass
class EpochRecord:
    """One epoch's figures, and the schedule it ran under (lr and λ_KL multiplier at its last step).

    ``elapsed_s`` is wall time since the start of the run (the budget's clock unless ``budget_clock`` is cpu);
    ``cpu_s`` is this process's CPU time since the start of this call, which says how much of a shared machine it
    got.
    """

    epoch: int
    train_loss: float
    val_ave: float
    val_nll: float
    windows_per_s: float
    val_nees_median: float = math.nan
    val_nees_share: float = math.nan
    lr: float = math.nan
    kl_weight: float = 1.0
    elapsed_s: float = math.nan
    planned_epochs: int = 0
    budget_s: float | None = None
    cpu_s: float = math.nan
    loss_kind: str = ""
    """``huber`` or ``nll`` for the regression baseline and Table I baselines (which phase the epoch trained in),
    empty for the bin variants."""


@dataclass
class TrainResult:
    """What :func:`train` produced.

    ``model`` is the trained network in its final state (this rank's replica under DDP); ``init``
    says how a fine-tuned run started (source, parameters kept fresh, frozen), None from scratch.
    """

    best_path: Path
    last_path: Path
    best_epoch: int
    best_value: float
    model_config: ModelConfig
    history: list[EpochRecord]
    model: nn.Module | None = None
    init: dict[str, Any] | None = None


def resolve_model_config(cfg: TrainConfig, variant: Variant, velocity_range: float) -> ModelConfig:
    """The model config implied by the variant and the training set's R."""
    own_head = variant.is_regression or variant.is_baseline
    return dataclasses.replace(
        cfg.model,
        head="reg" if own_head else "bins",
        cov_head=variant.needs_cov_head and not own_head,
        uncertainty=variant.uncertainty,
        velocity_range=float(velocity_range),
        method=variant.method,
    )


def run_velocity_range(cfg: TrainConfig, flights: Seq[Flight], data: WindowDataset | None = None) -> float:
    """The velocity range R of a run on ``flights``: ``cfg.velocity_range`` where set (None or 0: measured), else
    RANGE_MARGIN × the fastest body velocity of their samples (:func:`~velobins_net.bins.velocity_range_from`).
    ``data`` is their :class:`~velobins_net.data.WindowDataset` where the caller has one; ensemble members on
    different flights share the range of all of them (:mod:`velobins_net.train_ensemble`)."""
    if cfg.velocity_range:
        return cfg.velocity_range
    if data is None:
        data = WindowDataset(flights, resolve_model_config(cfg, parse_variant(cfg.variant), cfg.model.velocity_range))
    return velocity_range_from([data.targets.numpy()])


def seed_everything(seed: int) -> None:
    """Seed the python and torch RNGs (the package draws no numpy random numbers)."""
    random.seed(seed)
    torch.manual_seed(seed)


def _rng_state() -> dict[str, Any]:
    state = {"python": random.getstate(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def history_json(history: Seq[EpochRecord]) -> str:
    """``history.json`` text: one record per epoch, non-finite figures as ``null`` (strict JSON)."""

    def finite(x: object) -> object:
        return x if not isinstance(x, float) or math.isfinite(x) else None

    rows = [{k: finite(v) for k, v in dataclasses.asdict(h).items()} for h in history]
    return json.dumps(rows, indent=1, allow_nan=False) + "\n"


def train(cfg: TrainConfig, train_seqs: Seq[Flight], val_seqs: Seq[Flight], out_dir: str | Path | Run) -> TrainResult:
    """Train a variant on ``train_seqs``, validate on ``val_seqs``, write ``best.pt`` / ``last.pt`` to ``out_dir``.

    ``history.json`` is rewritten (atomically) after every epoch, and the TensorBoard log gets the
    epoch. ``best.pt`` is written only for an epoch whose validation metric is finite; when none
    is, ``TrainResult.best_epoch`` is -1 and there is no ``best.pt``. A non-finite training loss
    (divergence) ends training after that epoch. The caller owns the output directory (``velobins
    train`` locks it); given a :class:`~velobins_common.outputs.Run`, the files go to its current path
    and the run is committed after each epoch's saves (the first one replaces an earlier run:
    ``--overwrite``; the TensorBoard log opens after it). ``best.pt`` is saved before the ``last.pt``
    that records it, and a resumed run repairs a ``best.pt`` that an interrupted save left out of step
    (:func:`~velobins_net.checkpoint.resumed_best`). With ``cfg.time_budget`` the epoch count is
    planned from a timing pass, re-planned after every epoch and a running epoch stops at the budget
    (rank 0's clock under DDP); each history record carries the plan.
    """
    import time

    if cfg.members != 1:
        raise ValueError(f"train() trains one network; TrainConfig.members {cfg.members}: use train_ensemble")
    t_start, cpu_start = time.perf_counter(), time.process_time()
    device_kind = "cuda" if (cfg.device == "cuda" or (cfg.device == "auto" and torch.cuda.is_available())) else "cpu"
    dd = setup_distributed(device_kind)
    device = pick_device(cfg.device, dd.local_rank)
    with deterministic_algorithms(cfg.deterministic):
        run = out_dir if isinstance(out_dir, Run) else None
        where = run.directory if run is not None else Path(out_dir)
        return _train(cfg, train_seqs, val_seqs, where, dd, device, t_start, cpu_start, run=run)


def _train(
    cfg: TrainConfig,
    train_seqs: Seq[Flight],
    val_seqs: Seq[Flight],
    out_dir: Path,
    dd: DistInfo,
    device: torch.device,
    t_start: float,
    cpu_start: float,
    run: Run | None = None,
) -> TrainResult:
    """:func:`train` on its device, inside its determinism setting."""
    import time

    variant = parse_variant(cfg.variant)
    precision = resolve_precision(cfg.precision, device)
    if device.type == "cpu":
        reuse_freed_memory()  # activations reuse freed heap blocks instead of page-faulting every step
    seed_everything(cfg.seed)

    base = resolve_model_config(cfg, variant, cfg.model.velocity_range)  # window and rotor layout for the data
    train_ds = WindowDataset(train_seqs, base, 1 if cfg.rotate_windows else cfg.stride)
    val_ds = WindowDataset(val_seqs, base, cfg.val_stride)
    mcfg = resolve_model_config(cfg, variant, run_velocity_range(cfg, train_seqs, train_ds))
    grid = BinGrid(mcfg.num_bins, mcfg.velocity_range)
    norm = fit_normalization(train_ds.inputs, mcfg.rotor_kind, mcfg.sensor_channels)

    core = build_model(mcfg)
    resume_ckpt = read_checkpoint(cfg.resume, map_location=device) if cfg.resume else None
    init = initialise(core, mcfg, cfg.init_from, cfg.freeze, resume_ckpt)
    core.set_normalization(torch.from_numpy(norm.mean).float(), torch.from_numpy(norm.std).float())
    core.to(device)
    optimizer = make_optimizer([p for p in core.parameters() if p.requires_grad], cfg.lr)
    scaler = precision.grad_scaler()
    start_epoch, best_value, best_epoch, spent_before = 0, math.inf, -1, 0.0
    history: list[EpochRecord] = []

    if resume_ckpt is not None:
        ckpt = resume_ckpt
        _check_resumable(cfg, ckpt, mcfg, variant.name)
        core.load_state_dict(ckpt["model_state"])
        optimizer.load_state_dict(ckpt["optimizer_state"])
        if scaler is not None and "scaler_state" in ckpt:
            scaler.load_state_dict(ckpt["scaler_state"])
        start_epoch = int(ckpt["epoch"]) + 1
        best_value, best_epoch = resumed_best(cfg.resume, ckpt, out_dir / "best.pt", write=dd.is_main)
        history = [EpochRecord(**h) for h in ckpt.get("history", [])]
        spent_before = float(ckpt.get("budget", {}).get("elapsed_s", 0.0))
        _set_rng_state(ckpt["rng"])

    model: nn.Module = core
    if dd.world > 1:
        ids = [device.index] if device.type == "cuda" else None
        model = nn.parallel.DistributedDataParallel(core, device_ids=ids)

    static = {
        "model_config": mcfg.to_dict(),
        "variant": variant.name,
        "bins": {"num_bins": grid.num_bins, "velocity_range": grid.velocity_range, "centres": grid.centres()},
        "normalization": {
            "mean": torch.from_numpy(norm.mean),
            "std": torch.from_numpy(norm.std),
            "rotor_kind": mcfg.rotor_kind,
        },
        "train_config": dataclasses.asdict(cfg) | {"model": cfg.model.to_dict()},
        "data": {
            "description": cfg.data_description,
            "train": describe_sources(train_seqs),
            "val": describe_sources(val_seqs),
        },
        "git_commit": git_commit() if dd.is_main else None,
        "world_size": dd.world,
    } | ({"init": init} if init is not None else {})
    best_path, last_path = out_dir / "best.pt", out_dir / "last.pt"
    n_first = len(epoch_window_indices(len(train_ds), cfg.stride, 0, cfg.rotate_windows)) // dd.world
    steps_per_epoch = max(1, math.ceil(n_first / cfg.batch_size))
    planner, planned = None, cfg.epochs
    if cfg.time_budget is not None:
        start = (cpu_start if cfg.budget_clock == "cpu" else t_start) - spent_before
        planner = BudgetPlanner(cfg.time_budget * 60.0, cfg.epochs, start=start, clock=cfg.budget_clock)
        est = estimate_epoch_seconds(
            core, train_ds, val_ds, cfg.lr, cfg.batch_size, variant, grid, device, steps_per_epoch, precision,
            planner.now,
        )  # fmt: skip
        planned = agree(planner.plan(start_epoch, est), dd, device)
    nll_start = nll_start_epoch(cfg.nll_start_epoch, cfg.epochs, planned if planner is not None else None)
    if resume_ckpt is not None and "nll_start_epoch" in resume_ckpt.get("budget", {}):
        nll_start = int(resume_ckpt["budget"]["nll_start_epoch"])  # the switch the run was planned with
    two_phase = variant.is_regression or variant.is_baseline
    log = _open_log(cfg, out_dir, start_epoch, dd) if run is None else None  # a staged run: after its commit
    epoch = start_epoch
    label_floor: torch.Tensor | None = None  # --label-floor val: the last validation's RMS error per axis
    try:
        while epoch < planned:
            indices = epoch_window_indices(len(train_ds), cfg.stride, epoch, cfg.rotate_windows)
            batches = epoch_batches(len(train_ds), cfg.batch_size, cfg.seed, epoch, dd.rank, dd.world, indices)
            bar = progress_bar(
                total=sum(len(b) for b in batches),
                desc=f"epoch {epoch + 1}/{planned}",
                leave=False,
                enabled=cfg.progress and dd.is_main,
            )
            t0 = time.perf_counter()
            if planner is not None:
                planner.epoch_started()
            use_nll = two_phase and epoch >= nll_start
            total_steps = planned * steps_per_epoch

            def schedule(i: int, first: int = epoch * steps_per_epoch, total: int = total_steps) -> tuple[float, float]:
                p = (first + i) / total
                lr = cfg.lr * lr_factor(p, cfg.lr_schedule, cfg.warmup, cfg.min_lr_ratio)
                return lr, cfg.kl_scale * kl_weight_factor(p, cfg.kl_ramp, cfg.kl_ramp_start)

            stop = budget_stop(planner, dd, device)
            loss, done = train_epoch(
                model, core, train_ds, batches, optimizer, variant, grid, use_nll, device, bar, schedule, stop,
                precision, scaler, cfg.augment, label_floor,
            )  # fmt: skip
            rate = sum(len(b) for b in batches[:done]) * dd.world / max(time.perf_counter() - t0, 1e-9)
            bar.close()
            val = evaluate(core, val_ds, device, keep_samples=log is not None)
            if cfg.label_floor == "val" and val.rms_axis is not None:
                label_floor = val.rms_axis.to(device)
            lr_now, kl_now = schedule(max(done - 1, 0))
            score = {"nll": val.nll, "ave": val.ave, "nll+nees": selection_score(val.nll, val.nees_share)}
            value = score[cfg.best_metric]
            # A non-finite validation metric is never "best": best.pt holds a model that scored.
            improved = math.isfinite(value) and value < best_value
            if improved:
                best_value, best_epoch = value, epoch
            if planner is not None:
                planner.epoch_ended()
            budget_s = planner.budget_s if planner is not None else None
            elapsed = time.perf_counter() - t_start + spent_before
            rec = EpochRecord(
                epoch,
                loss,
                val.ave,
                val.nll,
                rate,
                val.nees_median,
                val.nees_share,
                lr_now,
                kl_now,
                elapsed,
                planned,
                budget_s,
                time.process_time() - cpu_start,  # this process's CPU time: what it got of a shared machine
                ("nll" if use_nll else "huber") if two_phase else "",
            )
            history.append(rec)
            if dd.is_main:
                payload = (
                    static
                    | {
                        "model_state": core.state_dict(),
                        "optimizer_state": optimizer.state_dict(),
                        "epoch": epoch,
                        "rng": _rng_state(),
                        "best": {"metric": cfg.best_metric, "value": best_value, "epoch": best_epoch},
                        "history": [dataclasses.asdict(h) for h in history],
                        "budget": {
                            "budget_s": budget_s,
                            "elapsed_s": planner.elapsed() if planner else elapsed,
                            "planned_epochs": planned,
                            "nll_start_epoch": nll_start,
                        },
                    }
                    | ({"scaler_state": scaler.state_dict()} if scaler is not None else {})
                )
                where = run.path if run is not None else out_dir  # a staging folder until the first commit
                if improved:  # best.pt first: a last.pt never records a best epoch that best.pt lacks
                    save_checkpoint(where / best_path.name, payload)
                save_checkpoint(where / last_path.name, payload)
                atomic_write_text(where / "history.json", history_json(history))
                if run is not None:
                    run.commit()
                    log = log or _open_log(cfg, out_dir, start_epoch, dd)
                if log is not None:
                    log.epoch(rec, val.sigma, val.z)
                if cfg.progress:
                    _print_epoch(rec, cfg.best_metric, value)
            if dd.world > 1:
                dist.barrier()
            if not math.isfinite(loss):
                break  # diverged: every later epoch would train on NaN weights
            epoch += 1
            if cfg.patience and epoch - 1 - best_epoch >= cfg.patience:
                break  # early stopping: no better validation figure for `patience` epochs
            if planner is not None:
                planned = agree(planner.plan(epoch), dd, device)
    finally:
        if log is not None:
            log.close()
    return TrainResult(best_path, last_path, best_epoch, best_value, mcfg, history, core, init)


def _check_resumable(cfg: TrainConfig, ckpt: dict[str, Any], mcfg: ModelConfig, variant: str) -> None:
    """Refuse a checkpoint of another model config, variant, fine-tuning source or frozen set."""
    diffs = config_differences(ckpt["model_config"], mcfg.to_dict())
    if ckpt["variant"] != variant:
        diffs.append(f"variant: {ckpt['variant']!r} != {variant!r}")
    before = ckpt.get("train_config", {})
    if list(before.get("freeze", ())) != list(cfg.freeze):
        diffs.append(f"freeze: {list(before.get('freeze', ()))} != {list(cfg.freeze)}")
    if before.get("init_from") != cfg.init_from:
        diffs.append(f"init_from: {before.get('init_from')!r} != {cfg.init_from!r}")
    if diffs:
        raise CheckpointError(cfg.resume, "cannot resume, config differs: " + "; ".join(diffs))
    if "optimizer_state" not in ckpt or "epoch" not in ckpt:
        raise CheckpointError(cfg.resume, "missing fields 'optimizer_state'/'epoch' needed to resume")


def _open_log(cfg: TrainConfig, out_dir: Path, start_epoch: int, dd: DistInfo) -> Any:
    """The TensorBoard log of rank 0 (None when disabled or on another rank)."""
    if not (cfg.tensorboard and dd.is_main):
        return None
    from .train_log import TrainLog

    return TrainLog(out_dir, start_epoch)


def _print_epoch(rec: EpochRecord, metric: str, value: float) -> None:
    """One line per epoch, in a log as on a terminal."""
    phase = f" ({rec.loss_kind})" if rec.loss_kind else ""
    msg = (
        f"epoch {rec.epoch + 1}/{rec.planned_epochs}: loss {rec.train_loss:.4f}{phase}  val AVE {rec.val_ave:.4f} m/s  "
        f"NLL {rec.val_nll:.3f}  NEES med {rec.val_nees_median:.2f} in-bounds {100 * rec.val_nees_share:.0f}%  "
        f"({rec.windows_per_s:.0f} win/s)"
    )
    if not math.isfinite(value):
        msg += f"  [val {metric} not finite: not a candidate for best.pt]"
    print(msg, flush=True)
