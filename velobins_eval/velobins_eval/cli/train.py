"""``velobins train``: load flights with a dataset adapter and train one network variant, or an ensemble of its
members (``--members``; two in the default recipe).

Variant names are the rows of the paper's Table II in :mod:`velobins_net.variants`' grammar: ``H``,
``M``, ``G``, ``G+H``, ``M+H`` (bins, optionally ``^B``, ``^C``, ``^B+C``) and ``reg`` (the AI-IO
regression baseline, Reg (H+N)^C); ``--uncertainty`` replaces the variance source (``B`` bins,
``C`` covariance decoder, ``B+C`` their sum). ``--method`` picks a method of the paper's Table I
instead: ``velobins`` (the variant above), ``ai-io`` (``reg``), or a baseline with its own network
and loss: ``tlio``, ``eqnio``, ``imo``, ``airio`` (:mod:`velobins_net.baselines`). Training and
model options are generated from ``TrainConfig`` / ``ModelConfig``, their one source of defaults
and help. Without ``--val``, the
last flights of ``--data`` (``--val-fraction``) are held out for validation.

Under ``torchrun --nproc_per_node N -m velobins_eval.cli.train ...`` the same command trains with
DistributedDataParallel.

Fine-tuning: ``--init-from crazyflie`` (a shipped model) or ``--init-from PATH`` starts from that
model's weights; the variant, method and architecture options then default to the source model's
(an explicit option that changes the architecture is refused, :mod:`velobins_net.train_init`), and
``--freeze encoder`` keeps a part of it fixed.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from velobins_common.errors import OptionError, OutputError, UserError
from velobins_common.fields import add_config_options, config_values
from velobins_common.outputs import RunLayout, open_run_dir, output_mode, remove_stale_temp_files
from velobins_data.dataset_kinds import KINDS
from velobins_net.config import BASELINE_METHODS

from .options import add_allow_option, given_options
from .train_members import check_member_folds, run_members, settle_member_folds, settle_members
from .train_report import report

TRAIN_FIELDS = (
    "time_budget",
    "budget_clock",
    "epochs",
    "stride",
    "rotate_windows",
    "val_stride",
    "batch_size",
    "lr",
    "lr_schedule",
    "warmup",
    "min_lr_ratio",
    "kl_ramp",
    "kl_ramp_start",
    "kl_scale",
    "label_floor",
    "seed",
    "best_metric",
    "patience",
    "velocity_range",
    "device",
    "precision",
    "deterministic",
    "init_from",
    "tensorboard",
    "members",
    "member_folds",
)
"""TrainConfig fields that are options of ``velobins train`` (defaults and help from the dataclass)."""

AUG_FIELDS = ("acc_noise", "acc_bias", "gyro_noise", "gyro_bias", "rotor_scale")
"""Augmentation fields that are options ``--aug-<field>`` of ``velobins train``."""
VAL_SPLITS = ("flights", "tails")
"""``--val-split``: hold out whole flights, or the tail of every flight (:func:`velobins_net.data.split_tails`)."""
MODEL_FIELDS = ("bin_encoding", "num_bins", "baseline_width", "frame_width")
"""ModelConfig fields that are options (the rest follows from the variant and the flights)."""


METHOD_CHOICES = ("velobins", "ai-io", *BASELINE_METHODS)
"""``--method`` values (Table I columns)."""


def parse_cli_variant(variant: str, uncertainty: str | None, method: str = "velobins"):
    """The :class:`~velobins_net.variants.Variant` of ``--variant`` (any Table II name) and ``--uncertainty``.

    ``--uncertainty`` replaces the variant's uncertainty source (``--variant G+H --uncertainty B``
    is ``G+H^B``); the grammar itself is :func:`velobins_net.variants.parse_variant`'s alone.
    """
    from velobins_net.variants import parse_variant

    if method != "velobins":
        if uncertainty is not None:
            raise OptionError("--uncertainty", f"applies to VeloBins variants, not to --method {method}")
        return parse_variant(method)
    try:
        base = parse_variant(variant)
        return base if uncertainty is None else parse_variant(f"{base.supervision}^{uncertainty}")
    except ValueError as exc:
        raise OptionError("--variant" if uncertainty is None else "--variant/--uncertainty", str(exc)) from None


def check_method_options(variant, method: str, given: set[str]) -> None:
    """Refuse an option given on the command line that the chosen method or variant would ignore.

    ``train --method tlio --bins 64`` trained TLIO and dropped ``--bins`` silently; now it is an
    error naming the option (options a ``--recipe`` sets are not "given").
    """
    applies = {
        "variant": method == "velobins",
        "num_bins": not (variant.is_regression or variant.is_baseline),
        "bin_encoding": not (variant.is_regression or variant.is_baseline),
        "kl_ramp": variant.uses_kl,
        "kl_ramp_start": variant.uses_kl,
        "kl_scale": variant.uses_kl,
        "label_floor": variant.uses_kl,
        "baseline_width": variant.is_baseline,
        "frame_width": variant.method == "eqnio",
    }
    flags = {"variant": "--variant", "num_bins": "--bins", "bin_encoding": "--encoding"}
    for dest, ok in applies.items():
        if dest in given and not ok:
            flag = flags.get(dest, "--" + dest.replace("_", "-"))
            raise OptionError(flag, f"does not apply to --method {method} (variant {variant.name}); drop it")


def build_parser() -> argparse.ArgumentParser:
    """Options of ``velobins train``; the training and model options come from their dataclasses."""
    from velobins_common.fields import field_docs
    from velobins_net.augment import Augmentation
    from velobins_net.config import BIN_ENCODINGS, ModelConfig
    from velobins_net.decoders import UNCERTAINTY_SOURCES
    from velobins_net.schedule import BUDGET_CLOCKS, DEFAULT_RECIPE, LR_SCHEDULES, RECIPES
    from velobins_net.train import METRICS, TrainConfig
    from velobins_net.train_config import LABEL_FLOORS
    from velobins_net.train_precision import PRECISIONS

    p = argparse.ArgumentParser(prog="velobins train", description=__doc__.split("\n\n")[0])
    p.add_argument("--dataset", required=True, choices=KINDS, help="adapter for --data/--val")
    p.add_argument("--data", required=True, type=Path, help="directory of training flights")
    p.add_argument("--val", type=Path, help="directory of validation flights (default: hold out from --data)")
    p.add_argument(
        "--val-fraction",
        type=float,
        default=0.1,
        help="share of --data held out for validation when --val is absent (of the flights, or of every flight)",
    )
    p.add_argument(
        "--val-split",
        choices=VAL_SPLITS,
        default="flights",
        help="without --val: hold out the last flights of --data (flights), or the last --val-fraction of every "
        "flight (tails: checkpoint selection does not hinge on one or two flights)",
    )
    p.add_argument(
        "--variant",
        default="G+H",
        help="Table II row: reg, H, M, G, G+H or M+H, optionally with its uncertainty source (G+H^B, M^B+C)",
    )
    p.add_argument("--uncertainty", choices=UNCERTAINTY_SOURCES, help="replaces the variant's uncertainty source")
    p.add_argument(
        "--method",
        default="velobins",
        choices=METHOD_CHOICES,
        help="Table I method: velobins (--variant), ai-io (= --variant reg), or a baseline network",
    )
    add_config_options(
        p,
        ModelConfig,
        MODEL_FIELDS,
        flags={"bin_encoding": "--encoding", "num_bins": "--bins"},
        choices={"bin_encoding": BIN_ENCODINGS},
    )
    p.add_argument(
        "--recipe",
        choices=tuple(RECIPES),
        default=DEFAULT_RECIPE,
        help="named training settings (velobins_net.schedule.RECIPES; docs/results/recipe_platforms/README.md): "
        "paper = the paper's: constant LR 3e-4, stride 1, best by NLL, one network; own-vehicle = paper with the "
        "KL labels' σ bounded below by the validation error (--label-floor val) and two members of half the budget "
        "each (--members 2), best for G+H^B on minutes of flights; "
        "small-data = LR 1e-3 with 5%% warm-up and cosine decay, rotating stride 4, best by NLL + NEES-share term. "
        f"Options given explicitly override the recipe's values (default: {DEFAULT_RECIPE})",
    )
    add_config_options(
        p,
        TrainConfig,
        TRAIN_FIELDS,
        flags={"time_budget": "--time-budget", "init_from": "--init-from"},
        choices={
            "best_metric": METRICS,
            "budget_clock": tuple(BUDGET_CLOCKS),
            "label_floor": LABEL_FLOORS,
            "device": ("auto", "cpu", "cuda"),
            "lr_schedule": LR_SCHEDULES,
            "precision": PRECISIONS,
        },
    )
    add_config_options(
        p, Augmentation, AUG_FIELDS, flags={name: "--aug-" + name.replace("_", "-") for name in AUG_FIELDS}
    )
    p.add_argument(
        "--freeze",
        action="append",
        default=[],
        metavar="MODULE",
        help=field_docs(TrainConfig)["freeze"] + "; repeat or comma-separate",
    )
    p.add_argument("--threads", type=int, help="torch CPU threads (default: torch's choice)")
    p.add_argument(
        "--resume",
        nargs="?",
        const=True,
        type=Path,
        metavar="CHECKPOINT",
        help="continue the run in --out from its last.pt (or from CHECKPOINT)",
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the run already in --out (best.pt, last.pt, history.json, tensorboard/)",
    )
    add_allow_option(p, "train on flights that fail this plausibility check; recorded in the checkpoint")
    p.add_argument("--no-progress", action="store_true", help="no progress bar or per-epoch lines")
    p.add_argument(
        "--cache-dir", type=Path, help="keep parsed flights here (npz) and reuse them while the files are unchanged"
    )
    p.add_argument(
        "--out", required=True, type=Path, help="output directory (best.pt, last.pt, history.json, tensorboard/)"
    )
    return p


TRAIN_LAYOUT = RunLayout("train", ("best.pt", "last.pt", "history.json", "tensorboard", "member_*"))
"""What ``velobins train`` owns in ``--out``: a directory holding any of these holds a run (``member_<i>``: the
members of ``--members K``, :mod:`velobins_net.train_ensemble`)."""

CHECKPOINT_RESERVE_BYTES = 16 << 20
"""Room checked in ``--out`` before training: more than two checkpoints of the default model."""


def _resume_path(args: argparse.Namespace) -> Path | None:
    """The checkpoint to resume from: ``--out/last.pt`` for a bare ``--resume``."""
    from velobins_net.train_ensemble import members_in  # torch: imported once the command runs, not on --help

    if args.resume is None:
        return None
    if args.members > 1:
        if args.resume is not True:
            raise OptionError("--resume", "with --members, give it bare: each member resumes from its own last.pt")
        if (args.out / "last.pt").is_file():
            raise OptionError("--members", f"{args.out} holds one network's run (last.pt): resume it without --members")
        for entry in sorted(args.out.glob("member_*")):  # a resumed member writes in place: never through a link
            if entry.is_symlink() or not entry.is_dir():
                raise OutputError(entry, "is a link or not a folder, not a member velobins train made; move it away")
        return None  # the members' own last.pt files (velobins_net.train_ensemble)
    path = args.out / "last.pt" if args.resume is True else Path(args.resume)
    if args.resume is True and not path.is_file() and members_in(args.out) > 0:
        raise OptionError("--resume", f"{args.out} holds an ensemble's members: resume with the --members it used")
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no checkpoint to resume from (--resume)")
    return path


def _lock_output(args: argparse.Namespace):
    """The locked :class:`~velobins_common.outputs.Run` of ``--out`` (rank 0 under torchrun), else a no-op context.

    Without ``--resume`` the run is staged: an earlier run (``--overwrite``) is replaced only after
    the first epoch's checkpoint is saved, so a typo, a failed check or Ctrl-C before it loses nothing.
    """
    import contextlib

    if int(os.environ.get("RANK", "0")) != 0:
        return contextlib.nullcontext()
    mode = output_mode(resume=args.resume is not None, overwrite=args.overwrite)
    run = open_run_dir(args.out, TRAIN_LAYOUT, mode, reserve_bytes=CHECKPOINT_RESERVE_BYTES)
    remove_stale_temp_files(args.out)
    return run


def split_validation(seqs: list, fraction: float) -> tuple[list, list]:
    """Hold out the last ``fraction`` of flights (at least one) for validation."""
    if len(seqs) < 2:
        raise OptionError("--data", "need at least 2 flights to hold one out for validation (or pass --val)")
    n_val = max(1, round(len(seqs) * fraction))
    return seqs[:-n_val], seqs[-n_val:]


def parse_train_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse ``velobins train``'s options: the recipe's values replace the dataclass defaults of the
    options not given on the command line, and so do the source model's variant, method and
    architecture with ``--init-from`` (explicit options always win)."""
    from velobins_net.schedule import RECIPES

    parser = build_parser()
    known = parser.parse_known_args(argv)[0]
    parser.set_defaults(**RECIPES[known.recipe])
    if known.init_from:
        parser.set_defaults(**init_defaults(known.init_from))
    args = parser.parse_args(argv)
    args.freeze = tuple(name.strip() for item in args.freeze for name in item.split(",") if name.strip())
    args.given = given_options(parser, argv)
    return args


def init_defaults(init_from: str) -> dict[str, object]:
    """Option defaults of a fine-tuning run: the source model's variant (or method) and architecture options."""
    from velobins_net.train_init import read_init_source

    _, ckpt = read_init_source(init_from)
    model = dict(ckpt["model_config"])
    method = model.get("method", "velobins")
    defaults: dict[str, object] = {name: model[name] for name in MODEL_FIELDS if name in model}
    if method != "velobins":
        defaults["method"] = method
    else:
        defaults["variant"] = ckpt["variant"]
    return defaults


def main_train(argv: list[str] | None = None) -> int:
    """Entry point of ``velobins train``; returns the exit status (1 when no epoch scored)."""
    args = parse_train_args(argv)
    if not 0.0 < args.val_fraction < 1.0:
        raise OptionError("--val-fraction", f"must be in (0, 1), got {args.val_fraction}")
    if args.threads is not None and args.threads < 1:
        raise OptionError("--threads", f"must be >= 1, got {args.threads}")
    check_method_options(parse_cli_variant(args.variant, args.uncertainty, args.method), args.method, args.given)
    settle_members(args)
    settle_member_folds(args)
    with _lock_output(args) as run:
        return _run(args, run)


def _load(args: argparse.Namespace) -> tuple[list, list, list]:
    """(train flights, validation flights, skipped flights) of the command line's data."""
    from velobins_data.datasets import load_flights

    loaded = load_flights(args.dataset, args.data, allow=tuple(args.allow), cache_dir=args.cache_dir)
    skipped = list(loaded.skipped)
    if args.val is not None:
        val = load_flights(args.dataset, args.val, allow=tuple(args.allow), cache_dir=args.cache_dir)
        skipped += val.skipped
        return list(loaded.sequences), list(val.sequences), skipped
    if args.val_split == "tails":
        from velobins_net.config import ModelConfig
        from velobins_net.data import split_tails

        try:
            train_seqs, val_seqs = split_tails(list(loaded.sequences), args.val_fraction, ModelConfig().window_s)
        except ValueError as exc:
            raise OptionError("--val-split tails", str(exc)) from None
        return train_seqs, val_seqs, skipped
    train_seqs, val_seqs = split_validation(list(loaded.sequences), args.val_fraction)
    return train_seqs, val_seqs, skipped


def _run(args: argparse.Namespace, run=None) -> int:
    import torch

    from velobins_net.augment import Augmentation
    from velobins_net.config import ModelConfig
    from velobins_net.train import TrainConfig, train

    if args.threads:
        torch.set_num_threads(args.threads)
    resume = _resume_path(args)
    variant = parse_cli_variant(args.variant, args.uncertainty, args.method)
    train_seqs, val_seqs, skipped = _load(args)
    kinds = {s.rotor_kind for s in train_seqs + val_seqs}
    rotors = {s.num_rotors for s in train_seqs + val_seqs}
    if len(kinds) != 1 or len(rotors) != 1:
        raise OptionError("--data", f"flights mix rotor kinds {sorted(kinds)} or rotor counts {sorted(rotors)}")
    for item in skipped:
        print(f"skipped {item.path}: {item.reason}", file=sys.stderr)
    model = ModelConfig(
        num_rotors=rotors.pop(),
        rotor_kind=kinds.pop(),
        **config_values(args, MODEL_FIELDS),
    )  # head, covariance decoder and uncertainty follow from the variant (train.resolve_model_config)
    notes = (f"; skipped {len(skipped)} unusable flight(s)" if skipped else "") + (
        f"; plausibility checks allowed: {', '.join(args.allow)}" if args.allow else ""
    )
    check_member_folds(args, train_seqs, val_seqs)
    try:  # a value the dataclass refuses came from an option
        cfg = TrainConfig(
            model=model,
            variant=variant.name,
            **config_values(args, TRAIN_FIELDS),
            resume=str(resume) if resume else None,
            freeze=args.freeze,
            augment=Augmentation(**config_values(args, AUG_FIELDS)),
            progress=not args.no_progress,
            data_description=f"{args.dataset}: train {args.data} ({len(train_seqs)} flights), "
            f"val {args.val or 'held out'} ({len(val_seqs)} flights){notes}",
        )
    except ValueError as exc:
        raise UserError(f"velobins train options: {exc}") from None
    budget = f", budget {cfg.time_budget:g} min" if cfg.time_budget else ""
    floor = f", label floor {cfg.label_floor}" if variant.uses_kl and cfg.label_floor != "none" else ""
    members = f", {cfg.members} members" if cfg.members > 1 else ""
    if cfg.members > 1 and cfg.member_folds:
        members += " each validating on flights of its own"
    print(
        f"training {cfg.variant} on {len(train_seqs)} flights, validating on {len(val_seqs)} "
        f"(recipe {args.recipe}{floor}{budget}{members}) -> {args.out}"
    )
    if cfg.members > 1:
        return run_members(args, cfg, train_seqs, val_seqs, run)
    result = train(cfg, train_seqs, val_seqs, run if run is not None else args.out)
    return report(args, cfg, result)


if __name__ == "__main__":
    sys.exit(main_train())
