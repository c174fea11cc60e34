"""``velobins ensemble``: several trained checkpoints into one ensemble checkpoint.

Usage::

    velobins ensemble --checkpoint run_s0/best.pt --checkpoint run_s1/best.pt --out ensemble.pt [--overwrite]

The members must share the input window and, for VeloBins, the bin grid (same data, other seeds or recipes:
:data:`velobins_net.ensemble.SAME_FIELDS`). The result is an ordinary checkpoint that every command and the
network node load (``--checkpoint``, ``model_path``): the members run on each window and their bin
distributions are averaged (:mod:`velobins_net.ensemble`); ``velobins calibrate --fit
variance_scale,disagreement_scale`` then fits how far the filter trusts their disagreement (docs/calibrate.md).
Exit status: 0 written, 2 a user error (one line naming the file: a missing or foreign checkpoint, members that
do not match, an existing ``--out`` without ``--overwrite``).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from velobins_common.errors import OptionError

EPILOG = """\
examples:
  velobins train ... --seed 0 --time-budget 2.5 --out run_s0
  velobins train ... --seed 1 --time-budget 2.5 --out run_s1
  velobins ensemble --checkpoint run_s0/best.pt --checkpoint run_s1/best.pt --out ensemble.pt
  velobins calibrate --checkpoint ensemble.pt --heldout cal/ --fit variance_scale,disagreement_scale --out overlay.yaml

Exit: 0 written, 2 user error."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="velobins ensemble",
        description="Combine trained checkpoints of one configuration into an ensemble checkpoint: the members' "
        "bin distributions are averaged on every window, and their disagreement is reported beside.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--checkpoint",
        action="append",
        required=True,
        type=Path,
        help="a member: a checkpoint written by velobins train, or a shipped model name (give it 2 or more times)",
    )
    parser.add_argument(
        "--out", required=True, type=Path, help="the ensemble checkpoint (must not exist unless --overwrite)"
    )
    parser.add_argument(
        "--overwrite", action="store_true", help="replace an existing --out (once the new one is complete)"
    )
    return parser


def write_ensemble(args: argparse.Namespace) -> int:
    """Read the members, check them, write the ensemble checkpoint atomically; print one line."""
    from velobins_common.output_files import check_output_file
    from velobins_net.checkpoint import read_checkpoint, save_checkpoint
    from velobins_net.ensemble import ensemble_checkpoint
    from velobins_net.pretrained import resolve_checkpoint

    target = check_output_file(args.out, args.overwrite, "--out")
    if target.kind != "file":
        raise OptionError("--out", f"{args.out}: an ensemble checkpoint is written to a file")
    paths = [resolve_checkpoint(c) for c in args.checkpoint]
    checkpoints = [read_checkpoint(p) for p in paths]  # CheckpointError (exit 2) names the file
    try:
        payload = ensemble_checkpoint(checkpoints, paths)
    except ValueError as exc:
        raise OptionError("--checkpoint", str(exc)) from None
    save_checkpoint(args.out, payload)
    print(f"{args.out}: ensemble of {len(paths)} members ({', '.join(map(str, paths))})")
    return 0


def main_ensemble(argv: list[str] | None = None) -> int:
    """Entry point of ``velobins ensemble``: 0 written, 2 usage error (printed by argparse or by the dispatcher)."""
    args = build_parser().parse_args(argv)
    if len(args.checkpoint) < 2:
        raise OptionError("--checkpoint", f"an ensemble needs 2 or more members, got {len(args.checkpoint)}")
    return write_ensemble(args)
