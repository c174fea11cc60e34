"""``velobins train --members K`` (the default recipe's two): how many members a run trains, and the run of them.

The recipe ``own-vehicle`` sets ``--members 2``; where the command line did not, :func:`settle_members` makes a
bare ``--resume`` continue what ``--out`` holds and trains one network under torchrun and for the baselines.
:func:`settle_member_folds` and :func:`check_member_folds` refuse ``--member-folds`` (each member validating on
flights of its own) where the run's split leaves no blocks for it.
:func:`run_members` trains the members (:mod:`velobins_net.train_ensemble`) and writes their ensemble.
"""

from __future__ import annotations

import argparse
import os
import sys

from velobins_common.errors import OptionError
from velobins_net.config import BASELINE_METHODS

from .train_report import report


def settle_members(args: argparse.Namespace) -> None:
    """``--members`` where the recipe set it rather than the command line (``own-vehicle``: 2): a bare ``--resume``
    continues what ``--out`` holds (one network's ``last.pt``, or the ``member_<i>`` folders of an ensemble), and
    under torchrun, and for a baseline ``--method``, one network is trained. Given explicitly, an ensemble is
    refused under torchrun (and a baseline's by ``TrainConfig``, before the run starts)."""
    from velobins_net.train_ensemble import members_in  # torch: imported once the command runs, not on --help

    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    if "members" in args.given:
        if args.members > 1 and distributed:
            raise OptionError("--members", "trains its members one after another in one process, not under torchrun")
        return
    if args.method in BASELINE_METHODS:
        args.members = 1  # the baselines' networks are not mixed (velobins_net.ensemble)
    elif args.resume is True and (args.out / "last.pt").is_file():
        args.members = 1
    elif args.resume is True and (found := members_in(args.out)) > 0:
        args.members = found
    elif args.resume is not None and args.resume is not True:
        args.members = 1  # resuming one network's checkpoint
    elif args.members > 1 and distributed:
        print(f"velobins train: torchrun trains one network, not the recipe's {args.members} members (--members 1)")
        args.members = 1


def settle_member_folds(args: argparse.Namespace) -> None:
    """``--member-folds`` needs the validation flights held out of ``--data`` (``--val-split flights``): with
    ``--val`` or ``--val-split tails`` it is refused in one line. No recipe sets it (items 36 and 37 of the recipe
    study), so the option is always the user's."""
    if not args.member_folds or args.members < 2 or (args.val is None and args.val_split == "flights"):
        return
    where = "--val" if args.val is not None else "--val-split tails"
    raise OptionError("--member-folds", f"needs its validation flights held out of --data, not {where}")


def check_member_folds(args: argparse.Namespace, train_seqs: list, val_seqs: list) -> None:
    """Refuse ``--member-folds`` where the ``--members`` cannot each validate on a block of flights of their own
    (:func:`~velobins_net.train_ensemble.fold_splits`), before anything is written."""
    from velobins_net.train_ensemble import fold_splits

    if not args.member_folds or args.members < 2:
        return
    try:
        fold_splits(train_seqs, val_seqs, args.members)
    except ValueError as exc:
        raise OptionError("--member-folds", f"{exc} (fewer --members, or a smaller --val-fraction)") from None


def run_members(args: argparse.Namespace, cfg, train_seqs: list, val_seqs: list, run) -> int:
    """``--members K``: K runs in ``--out/member_<i>``, then their ensemble as ``--out/best.pt``.

    A new run's members are written in place from the start, so an interrupted one continues with
    ``--resume``; with ``--overwrite`` everything is staged and the earlier run is replaced only once
    the ensemble is written (:class:`~velobins_common.outputs.Run`).
    """
    import dataclasses

    from velobins_net.train_ensemble import member_dir, train_ensemble

    staged = args.overwrite
    if not staged:
        run.commit()  # nothing to replace: the members' folders are the run's from their first file
    for i in range(cfg.members):
        member_dir(run.path, i).mkdir(exist_ok=True)
    if not staged:
        run.update_manifest()  # every member's folder is the run's before it trains

    def on_start(index: int, member) -> None:
        budget = f", budget {member.time_budget:g} min" if member.time_budget else ""
        print(f"member {index + 1}/{cfg.members}: seed {member.seed}{budget} -> {member_dir(args.out, index)}")

    def on_member(index: int, member, result) -> None:
        final = member_dir(args.out, index)  # where the files lie once a staged run is committed
        report(args, member, dataclasses.replace(result, best_path=final / "best.pt", last_path=final / "last.pt"))

    resume = args.resume is not None
    result = train_ensemble(
        cfg, train_seqs, val_seqs, run.path, resume=resume, final_dir=args.out, on_start=on_start, on_member=on_member
    )
    if result.best_path is None:
        kept = "; the earlier run in --out was kept" if staged else ""
        print(f"velobins train: error: a member scored no epoch, so no ensemble was written{kept}", file=sys.stderr)
        return 1
    run.commit()  # a staged run replaces the earlier one now that the ensemble is complete
    print(f"ensemble of {cfg.members} members -> {args.out / 'best.pt'}")
    return 0
