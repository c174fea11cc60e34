"""Training an ensemble in one run: ``TrainConfig.members`` networks of one configuration, mixed into one checkpoint.

Member ``i`` is an ordinary :func:`~velobins_net.train.train` run in ``<out>/member_<i>`` with seed ``seed + i``
and ``time_budget / members`` minutes (all the epochs without a budget), on the run's flights (split per member
with ``member_folds``, below). Once every member has a ``best.pt``, their best checkpoints are combined by
:func:`~velobins_net.ensemble.ensemble_checkpoint` into ``<out>/best.pt``, which every command and the network
node load as one model. The small-data study of issue 28
found two half-budget G+H^B members, with the filter weighing their disagreement, ahead of one network of the
whole budget on accuracy and consistency (``docs/results/recipe_platforms/README.md``, item 27).

With ``TrainConfig.member_folds`` each member validates on its own block of flights (:func:`fold_splits`): the
ensemble then trains on every flight, and its members' checkpoints are picked on different flights. The study
found it ahead of members that share one validation flight on 8 NanoBench flights and behind them on the other
platforms, so no recipe sets it (``docs/results/recipe_platforms/README.md``, items 36 and 37). The members then
share a velocity range measured on all the flights, as bins of one grid must.

The members run one after another in this process: each gets the whole machine, and a budget on the CPU clock
stays a budget on this process's CPU seconds. A resumed ensemble continues each member from its ``last.pt``
(a finished member returns at once) and starts the members that never began.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from .checkpoint import CheckpointError, read_checkpoint, save_checkpoint
from .ensemble import ensemble_checkpoint
from .train import TrainConfig, TrainResult, run_velocity_range, train

MEMBER_DIR = "member_{}"
"""Folder of member ``i`` inside the ensemble's output directory."""


@dataclass
class EnsembleResult:
    """What :func:`train_ensemble` produced: each member's :class:`~velobins_net.train.TrainResult`, and the
    ensemble checkpoint (None when a member scored no epoch, so no ensemble was written)."""

    members: list[TrainResult]
    best_path: Path | None


def member_dir(out_dir: str | Path, index: int) -> Path:
    """Where member ``index`` of the ensemble in ``out_dir`` trains."""
    return Path(out_dir) / MEMBER_DIR.format(index)


def members_in(out_dir: str | Path) -> int:
    """How many members the ensemble in ``out_dir`` has: its ``member_<i>`` folders numbered 0, 1, … without a gap
    (``velobins train`` makes them all before the first trains, so an interrupted run has every one)."""
    count = 0
    while member_dir(out_dir, count).is_dir():
        count += 1
    return count


def member_config(cfg: TrainConfig, index: int, resume: str | None = None) -> TrainConfig:
    """The one-network run of member ``index``: seed ``seed + index``, an equal share of the time budget."""
    if not 0 <= index < cfg.members:
        raise ValueError(f"member index {index} outside the ensemble's {cfg.members} members")
    budget = cfg.time_budget / cfg.members if cfg.time_budget is not None else None
    return dataclasses.replace(cfg, members=1, seed=cfg.seed + index, time_budget=budget, resume=resume)


def fold_splits(train_seqs: Sequence, val_seqs: Sequence, members: int) -> list[tuple[list, list]]:
    """Each member's (train, validation) flights when each validates on its own block (``TrainConfig.member_folds``).

    The run's split holds out its last ``len(val_seqs)`` flights. Member ``i`` holds out the ``i``-th block of that
    many from the end of ``train_seqs + val_seqs`` and trains on the rest: member 0 keeps the run's split, the
    blocks do not overlap, and every flight trains every member but the one that validates on it.

    Raises:
        ValueError: no validation flight, or fewer flights than ``members`` blocks.
    """
    flights = [*train_seqs, *val_seqs]
    size = len(val_seqs)
    if size == 0:
        raise ValueError("members that validate on flights of their own need the run's validation flights, got none")
    if members * size > len(flights) or size >= len(flights):
        raise ValueError(
            f"{members} members that each validate on {size} flight(s) of their own need at least "
            f"{max(members * size, size + 1)} flights, got {len(flights)}"
        )
    end = len(flights)
    return [
        (flights[: end - (i + 1) * size] + flights[end - i * size :], flights[end - (i + 1) * size : end - i * size])
        for i in range(members)
    ]


def _member_resume(cfg: TrainConfig, path: Path) -> str:
    """``path`` (a member's ``last.pt``) as the member's resume point, refused when it was planned otherwise."""
    before = dict(read_checkpoint(path).get("train_config", {}))
    before.setdefault("member_folds", False)  # written before members could validate on flights of their own
    for name in ("seed", "time_budget", "member_folds"):
        if name in before and before[name] != getattr(cfg, name):
            raise CheckpointError(
                path,
                f"cannot resume this member: its {name} is {before[name]!r}, this run's would be "
                f"{getattr(cfg, name)!r} (resume with the --seed, --time-budget, --members and --member-folds "
                "or --no-member-folds the ensemble started with)",
            )
    return str(path)


def train_ensemble(
    cfg: TrainConfig,
    train_seqs: Sequence,
    val_seqs: Sequence,
    out_dir: str | Path,
    *,
    resume: bool = False,
    final_dir: str | Path | None = None,
    on_start: Callable[[int, TrainConfig], None] | None = None,
    on_member: Callable[[int, TrainConfig, TrainResult], None] | None = None,
) -> EnsembleResult:
    """Train ``cfg.members`` (≥ 2) members in ``out_dir/member_<i>`` and write their ensemble to ``out_dir/best.pt``.

    Args:
        resume: continue each member from its ``last.pt`` where it has one (others start fresh).
        final_dir: where ``out_dir``'s entries will lie once the caller moves them (a staged run): the
            members' paths the ensemble checkpoint records. Default ``out_dir``.
        on_start: called before each member trains, with its index and its config (progress lines).
        on_member: called after each member with its index, its config and its result.

    Raises:
        ValueError: ``cfg.members`` below 2, ``cfg.resume`` set (an ensemble resumes by member), or too few flights
            for ``cfg.member_folds`` (:func:`fold_splits`).
        CheckpointError: a member's ``last.pt`` planned with another seed or budget.
    """
    if cfg.members < 2:
        raise ValueError(f"an ensemble needs TrainConfig.members >= 2, got {cfg.members}; train() trains one network")
    if cfg.resume is not None:
        raise ValueError("TrainConfig.resume names one network's checkpoint; resume an ensemble with resume=True")
    splits = [(list(train_seqs), list(val_seqs))] * cfg.members
    if cfg.member_folds:
        splits = fold_splits(train_seqs, val_seqs, cfg.members)
        cfg = dataclasses.replace(cfg, velocity_range=run_velocity_range(cfg, [*train_seqs, *val_seqs]))
    out_dir = Path(out_dir)
    final = Path(final_dir) if final_dir is not None else out_dir
    results: list[TrainResult] = []
    for i, (member_train, member_val) in enumerate(splits):
        where = member_dir(out_dir, i)
        last = where / "last.pt"
        member = member_config(cfg, i)
        if resume and last.is_file():
            member = dataclasses.replace(member, resume=_member_resume(member, last))
        if on_start is not None:
            on_start(i, member)
        result = train(member, member_train, member_val, where)
        results.append(result)
        if on_member is not None:
            on_member(i, member, result)
        if result.best_epoch < 0:
            return EnsembleResult(results, None)  # no ensemble of a member that has no best.pt
    sources = [member_dir(final, i) / "best.pt" for i in range(cfg.members)]
    payload = ensemble_checkpoint([read_checkpoint(r.best_path) for r in results], sources)
    payload["train_config"] = dict(payload.get("train_config", {})) | {
        "members": cfg.members,
        "seed": cfg.seed,
        "time_budget": cfg.time_budget,
    }  # the ensemble's own run, not member 0's
    best = save_checkpoint(out_dir / "best.pt", payload)
    return EnsembleResult(results, best)
