"""Training loop (Implementation Details: Adam 3e-4, batch 128; epochs a parameter).

Public entry: :func:`train`. Runs on CPU, on CUDA when available, and under ``torchrun`` as
DistributedDataParallel (``WORLD_SIZE``/``RANK``/``LOCAL_RANK`` in the environment; gloo on
CPU, nccl on CUDA). Each epoch shuffles the windows with a generator seeded by (seed, epoch),
so runs are reproducible and a resumed run continues exactly where the interrupted one stopped.
Validation every epoch reports the network AVE (mean ‖v̂ − v‖, m/s) and the Gaussian NLL in
nats per axis; the best checkpoint by the chosen metric is kept beside the last one.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import random
from collections.abc import Iterable
from collections.abc import Sequence as Seq
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from tqdm import tqdm

from velobins_common.outputs import atomic_write_text
from velobins_common.progress import progress_bar

from .accel import reuse_freed_memory
from .bins import BinGrid, velocity_range_from
from .checkpoint import CheckpointError, git_commit, read_checkpoint, save_checkpoint
from .config import ModelConfig, config_differences
from .data import SequenceLike, WindowDataset, describe_sources, fit_normalization
from .losses import variant_loss
from .model import VeloBinsNet
from .variants import Variant, parse_variant

METRICS = ("nll", "ave")
_VAL_BATCH = 1024
_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


@dataclass(frozen=True)
class TrainConfig:
    """Everything that defines a training run.

    Attributes:
        model: architecture; ``head``, ``cov_head``, ``uncertainty`` are set from ``variant`` and
            ``velocity_range`` from the training set (unless ``velocity_range`` below is given).
        variant: Table II row, e.g. ``"G+H^B"`` (VeloBins) or ``"reg"``.
        epochs: number of epochs (paper: 100).
        batch_size: windows per optimizer step (paper: 128; per process under DDP).
        lr: Adam learning rate (paper: 3e-4, constant).
        stride: training window stride in samples.
        val_stride: validation window stride in samples.
        seed: seeds parameters init and shuffling.
        nll_start_epoch: regression baseline: epochs of Huber before switching to Gaussian NLL.
        best_metric: ``"nll"`` or ``"ave"`` (validation, lower is better).
        device: ``"auto"`` (CUDA when available), ``"cpu"`` or ``"cuda"``.
        velocity_range: fixed R [m/s]; None = RANGE_MARGIN × training max.
        resume: checkpoint to resume from (model, optimizer, epoch, RNG).
        progress: show a tqdm progress bar (rank 0).
        data_description: free text stored in the checkpoint (dataset, split).
    """

    model: ModelConfig = field(default_factory=ModelConfig)
    variant: str = "G+H^B"
    epochs: int = 100
    batch_size: int = 128
    lr: float = 3e-4
    stride: int = 1
    val_stride: int = 5
    seed: int = 0
    nll_start_epoch: int = 10
    best_metric: str = "nll"
    device: str = "auto"
    velocity_range: float | None = None
    resume: str | None = None
    progress: bool = True
    data_description: str = ""

    def __post_init__(self) -> None:
        parse_variant(self.variant)
        if self.best_metric not in METRICS:
            raise ValueError(f"TrainConfig.best_metric: must be one of {METRICS}, got {self.best_metric!r}")
        for name in ("epochs", "batch_size", "stride", "val_stride"):
            if getattr(self, name) < 1:
                raise ValueError(f"TrainConfig.{name}: must be >= 1, got {getattr(self, name)}")


@dataclass
class EpochRecord:
    """One epoch's figures."""

    epoch: int
    train_loss: float
    val_ave: float
    val_nll: float
    windows_per_s: float


@dataclass
class TrainResult:
    """What :func:`train` produced."""

    best_path: Path
    last_path: Path
    best_epoch: int
    best_value: float
    model_config: ModelConfig
    history: list[EpochRecord]


@dataclass(frozen=True)
class _Dist:
    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def _setup_distributed(device_kind: str) -> _Dist:
    """Initialise the process group when launched by torchrun (WORLD_SIZE > 1)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return _Dist()
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if device_kind == "cuda" else "gloo")
    return _Dist(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", "0")))


def _pick_device(name: str, local_rank: int) -> torch.device:
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda":
        if not torch.cuda.is_available():
            raise ValueError("TrainConfig.device='cuda' but CUDA is not available")
        return torch.device("cuda", local_rank)
    return torch.device(name)


def resolve_model_config(cfg: TrainConfig, variant: Variant, velocity_range: float) -> ModelConfig:
    """The model config implied by the variant and the training set's R."""
    return dataclasses.replace(
        cfg.model,
        head="reg" if variant.is_regression else "bins",
        cov_head=variant.needs_cov_head and not variant.is_regression,
        uncertainty=variant.uncertainty,
        velocity_range=float(velocity_range),
    )


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


def epoch_batches(n: int, batch_size: int, seed: int, epoch: int, rank: int = 0, world: int = 1) -> list[torch.Tensor]:
    """This rank's shuffled mini-batches of window indices; every rank gets the same count."""
    g = torch.Generator().manual_seed(seed * 100003 + epoch)
    perm = torch.randperm(n, generator=g)
    per_rank = n // world
    mine = perm[rank * per_rank : (rank + 1) * per_rank] if world > 1 else perm
    return list(mine.split(batch_size))


def make_optimizer(params: Iterable[nn.Parameter], lr: float) -> torch.optim.Adam:
    """Adam (Implementation Details) with the fused single-kernel update (same maths, ~5× faster step on CPU)."""
    return torch.optim.Adam(params, lr=lr, fused=True)


@torch.inference_mode()
def evaluate(model: VeloBinsNet, ds: WindowDataset, device: torch.device) -> tuple[float, float]:
    """Network AVE (mean ‖v̂ − v‖, m/s) and Gaussian NLL (nats per axis) over all windows of ``ds``."""
    was_training = model.training
    model.eval()
    err_sum, nll_sum, count = 0.0, 0.0, 0
    for idx in torch.arange(len(ds)).split(_VAL_BATCH):
        x, y = ds.gather(idx)
        out = model(x.to(device))
        e = out.v.double() - y.to(device).double()
        var = out.var.double().clamp_min(1e-12)
        err_sum += float(e.norm(dim=-1).sum())
        nll_sum += float((_HALF_LOG_2PI + 0.5 * var.log() + 0.5 * e.square() / var).sum())
        count += len(idx)
    model.train(was_training)
    return err_sum / count, nll_sum / (3 * count)


def train_epoch(
    model: nn.Module,
    core: VeloBinsNet,
    ds: WindowDataset,
    batches: list[torch.Tensor],
    optimizer: torch.optim.Optimizer,
    variant: Variant,
    grid: BinGrid,
    use_nll: bool,
    device: torch.device,
    progress: tqdm | None = None,
) -> float:
    """One pass over ``batches``; returns the mean training loss. ``model`` may be the DDP wrapper of ``core``."""
    model.train()
    centres = core.bins.centres if core.bins is not None else torch.empty(0, device=device)
    total = 0.0
    for idx in batches:
        x, y = ds.gather(idx)
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        out = model(x)
        loss, _ = variant_loss(variant, out, y, grid, centres, use_nll=use_nll)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        total += float(loss.detach())
        if progress is not None:
            progress.update(len(idx))
            progress.set_postfix(loss=f"{float(loss.detach()):.4f}")
    return total / max(len(batches), 1)


def history_json(history: Seq[EpochRecord]) -> str:
    """``history.json`` text: one record per epoch, non-finite figures as ``null`` (strict JSON)."""

    def finite(x: object) -> object:
        return x if not isinstance(x, float) or math.isfinite(x) else None

    rows = [{k: finite(v) for k, v in dataclasses.asdict(h).items()} for h in history]
    return json.dumps(rows, indent=1, allow_nan=False) + "\n"


def train(
    cfg: TrainConfig, train_seqs: Seq[SequenceLike], val_seqs: Seq[SequenceLike], out_dir: str | Path
) -> TrainResult:
    """Train a variant on ``train_seqs``, validate on ``val_seqs``, write ``best.pt`` / ``last.pt`` to ``out_dir``.

    ``history.json`` is rewritten (atomically) after every epoch. ``best.pt`` is written only for
    an epoch whose validation metric is finite; when none is, ``TrainResult.best_epoch`` is -1
    and there is no ``best.pt``. A non-finite training loss (divergence) ends training after that
    epoch. The caller owns the output directory (``velobins train`` locks it).
    """
    import time

    variant = parse_variant(cfg.variant)
    out_dir = Path(out_dir)
    device_kind = "cuda" if (cfg.device == "cuda" or (cfg.device == "auto" and torch.cuda.is_available())) else "cpu"
    dd = _setup_distributed(device_kind)
    device = _pick_device(cfg.device, dd.local_rank)
    if device.type == "cpu":
        reuse_freed_memory()  # activations reuse freed heap blocks instead of page-faulting every step
    seed_everything(cfg.seed)

    base = resolve_model_config(cfg, variant, cfg.model.velocity_range)  # window and rotor layout for the data
    train_ds = WindowDataset(train_seqs, base, cfg.stride)
    val_ds = WindowDataset(val_seqs, base, cfg.val_stride)
    r = cfg.velocity_range or velocity_range_from([train_ds.targets.numpy()])
    mcfg = resolve_model_config(cfg, variant, r)
    grid = BinGrid(mcfg.num_bins, mcfg.velocity_range)
    norm = fit_normalization(train_ds.inputs, mcfg.rotor_kind)

    core = VeloBinsNet(mcfg)
    core.encoder.set_normalization(torch.from_numpy(norm.mean).float(), torch.from_numpy(norm.std).float())
    core.to(device)
    optimizer = make_optimizer(core.parameters(), cfg.lr)
    start_epoch, best_value, best_epoch = 0, math.inf, -1
    history: list[EpochRecord] = []

    if cfg.resume:
        ckpt = read_checkpoint(cfg.resume, map_location=device)
        diffs = config_differences(ckpt["model_config"], mcfg.to_dict())
        if diffs or ckpt["variant"] != variant.name:
            if ckpt["variant"] != variant.name:
                diffs.append(f"variant: {ckpt['variant']!r} != {variant.name!r}")
            raise CheckpointError(cfg.resume, "cannot resume, config differs: " + "; ".join(diffs))
        if "optimizer_state" not in ckpt or "epoch" not in ckpt:
            raise CheckpointError(cfg.resume, "missing fields 'optimizer_state'/'epoch' needed to resume")
        core.load_state_dict(ckpt["model_state"])
        optimizer.load_state_dict(ckpt["optimizer_state"])
        start_epoch = int(ckpt["epoch"]) + 1
        best_value, best_epoch = float(ckpt["best"]["value"]), int(ckpt["best"]["epoch"])
        history = [EpochRecord(**h) for h in ckpt.get("history", [])]
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
    }
    best_path, last_path = out_dir / "best.pt", out_dir / "last.pt"
    for epoch in range(start_epoch, cfg.epochs):
        batches = epoch_batches(len(train_ds), cfg.batch_size, cfg.seed, epoch, dd.rank, dd.world)
        bar = progress_bar(
            total=sum(len(b) for b in batches),
            desc=f"epoch {epoch + 1}/{cfg.epochs}",
            leave=False,
            enabled=cfg.progress and dd.is_main,
        )
        t0 = time.perf_counter()
        use_nll = variant.is_regression and epoch >= cfg.nll_start_epoch
        loss = train_epoch(model, core, train_ds, batches, optimizer, variant, grid, use_nll, device, bar)
        rate = sum(len(b) for b in batches) * dd.world / (time.perf_counter() - t0)
        bar.close()
        ave, nll = evaluate(core, val_ds, device)
        history.append(EpochRecord(epoch, loss, ave, nll, rate))
        value = nll if cfg.best_metric == "nll" else ave
        # A non-finite validation metric is never "best": best.pt holds a model that scored.
        improved = math.isfinite(value) and value < best_value
        if improved:
            best_value, best_epoch = value, epoch
        if dd.is_main:
            payload = static | {
                "model_state": core.state_dict(),
                "optimizer_state": optimizer.state_dict(),
                "epoch": epoch,
                "rng": _rng_state(),
                "best": {"metric": cfg.best_metric, "value": best_value, "epoch": best_epoch},
                "history": [dataclasses.asdict(h) for h in history],
            }
            save_checkpoint(last_path, payload)
            if improved:
                save_checkpoint(best_path, payload)
            atomic_write_text(out_dir / "history.json", history_json(history))
            if cfg.progress:
                msg = f"epoch {epoch + 1}: loss {loss:.4f}  val AVE {ave:.4f} m/s  NLL {nll:.3f}  ({rate:.0f} win/s)"
                if not math.isfinite(value):
                    msg += f"  [val {cfg.best_metric} not finite: not a candidate for best.pt]"
                print(msg, flush=True)  # one line per epoch, in a log as on a terminal
        if dd.world > 1:
            dist.barrier()
        if not math.isfinite(loss):
            break  # diverged: every later epoch would train on NaN weights
    return TrainResult(best_path, last_path, best_epoch, best_value, mcfg, history)
