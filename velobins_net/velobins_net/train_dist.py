"""Where a training run runs: the device, and the process group under ``torchrun`` (DDP).

Under ``torchrun --nproc_per_node N`` every process trains a replica on its share of each epoch's
batches (:func:`velobins_net.train_steps.epoch_batches`) and DDP averages the gradients, so the
replicas stay identical. Everything that decides *how many* steps run must therefore be the same on
every rank, while clocks differ between processes: rank 0 decides the time budget's epoch plan
(:func:`agree`) and whether to stop inside an epoch (:func:`budget_stop`), and broadcasts it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.distributed as dist

from velobins_common.errors import OptionError

from .schedule import BudgetPlanner


@dataclass(frozen=True)
class DistInfo:
    """This process's place in the run: rank, world size, local rank (1 process: 0, 1, 0)."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        """Rank 0 writes the checkpoints, ``history.json`` and the event log."""
        return self.rank == 0


def setup_distributed(device_kind: str) -> DistInfo:
    """Initialise the process group when launched by torchrun (WORLD_SIZE > 1): gloo on CPU, nccl on CUDA."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return DistInfo()
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if device_kind == "cuda" else "gloo")
    return DistInfo(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", "0")))


def pick_device(name: str, local_rank: int) -> torch.device:
    """``auto`` (CUDA when available), ``cpu`` or ``cuda`` (this rank's GPU); ValueError when CUDA is missing."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda":
        if not torch.cuda.is_available():
            raise OptionError("--device", "cuda, but CUDA is not available on this machine")
        return torch.device("cuda", local_rank)
    return torch.device(name)


def agree(value: int, dd: DistInfo, device: torch.device) -> int:
    """Rank 0's ``value`` on every rank (the epoch plan: timings differ between processes, the count must not)."""
    if dd.world <= 1:
        return value
    t = torch.tensor([value], device=device)
    dist.broadcast(t, src=0)
    return int(t.item())


def budget_stop(planner: BudgetPlanner | None, dd: DistInfo, device: torch.device) -> Callable[[], bool] | None:
    """The in-epoch stop test of a time budget: rank 0's budget clock against its deadline, the same answer on
    every rank.

    None without a budget. Under DDP each call is one broadcast of one integer (asked once per
    optimiser step, beside the step's gradient all-reduce), so no rank runs a step the others skip.
    """
    if planner is None:
        return None

    def stop() -> bool:
        return bool(agree(int(planner.over()), dd, device))

    return stop
