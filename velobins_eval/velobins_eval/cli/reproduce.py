"""The ``velobins reproduce`` command line: options parsed and checked, then :func:`.commands.reproduce`."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from velobins_common.errors import OptionError
from velobins_common.fields import add_config_options, config_values, field_docs
from velobins_data.datasets import KINDS
from velobins_eval.reproduce.commands import Options, reproduce
from velobins_eval.reproduce.engine import EXECUTORS, SlurmConfig
from velobins_eval.reproduce.given import resolve_given
from velobins_eval.reproduce.plan import IMU_ONLY, SCHEDULES, parse_tables, plan

SLURM_FIELDS = ("partition", "time", "cpus_per_task", "gpus", "array_parallelism", "mem_gb")
"""SlurmConfig fields that are ``--slurm-*`` options (defaults and help from the dataclass)."""


def build_parser() -> argparse.ArgumentParser:
    """Options of ``velobins reproduce``."""
    p = argparse.ArgumentParser(
        prog="velobins reproduce",
        description="Train every model of the paper's NanoBench comparisons and regenerate Table I (methods), "
        "Tables II/III, the bin sweep and the NEES figure (docs/reproduce.md).",
    )
    p.add_argument("--dataset", required=True, choices=KINDS, help="adapter of the flight directories")
    p.add_argument("--data", required=True, type=Path, help="training flights")
    p.add_argument(
        "--val",
        type=Path,
        help="validation flights (model selection; evaluated); default: <data>/val when --data "
        "is a dataset root holding train/ and val/ (as ../shared/data/nanobench)",
    )
    p.add_argument("--test", type=Path, help="test flights (evaluated and reported separately)")
    p.add_argument("--schedule", default="cpu", choices=tuple(SCHEDULES), help="training schedule (SCHEDULES)")
    p.add_argument(
        "--out",
        required=True,
        type=Path,
        help="output directory; resumable: finished models of the same plan are kept, another plan is refused",
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="remove the earlier reproduction in --out first (models, logs, reports) and start afresh",
    )
    p.add_argument(
        "--tables",
        default="all",
        help="which tables to reproduce, comma-separated: I (methods), II (supervision), III (encoding), bins; "
        "default all",
    )
    p.add_argument(
        "--executor",
        default="local",
        choices=EXECUTORS,
        help="job engine (submitit): local = a process per job on this machine, --jobs at once; "
        "slurm = one job array per phase on a Slurm cluster (--slurm-* options; docs/reproduce.md)",
    )
    p.add_argument("--jobs", type=int, default=2, help="local jobs (trainings, evaluations) at once")
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"), help="training device")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument(
        "--params",
        action="append",
        type=Path,
        default=[],
        help="ROS parameter file with velobins_ekf filter overrides (e.g. velobins_bringup/config/nanobench.yaml)",
    )
    p.add_argument(
        "--checkpoint",
        action="append",
        default=[],
        metavar="NAME_OR_PATH",
        help="also score this checkpoint or shipped model (e.g. crazyflie) on each split beside the trained rows "
        "(repeatable); a shipped model brings its EKF overlay unless --params is given; the report lists each "
        "row's filter parameters",
    )
    slurm = p.add_argument_group("Slurm (with --executor slurm)")
    add_config_options(
        slurm,
        SlurmConfig,
        SLURM_FIELDS,
        flags={name: "--slurm-" + name.replace("_", "-") for name in SLURM_FIELDS} | {"cpus_per_task": "--slurm-cpus"},
    )
    slurm.add_argument(
        "--slurm-setup",
        action="append",
        default=[],
        metavar="LINE",
        help=field_docs(SlurmConfig)["setup"].replace("``", "") + " (repeatable)",
    )
    return p


def main_reproduce(argv: list[str] | None = None) -> int:
    """``velobins reproduce``; a user's mistake raises ``ValueError``/``FileNotFoundError`` (``velobins``: exit 2)."""
    return reproduce(parse_options(argv))


def parse_options(argv: list[str] | None = None) -> Options:
    """The :class:`~.commands.Options` of a command line, checked (paths resolved)."""
    args = build_parser().parse_args(argv)
    if args.val is None:
        if not ((args.data / "train").is_dir() and (args.data / "val").is_dir()):
            raise OptionError("--val", f"not given and {args.data} has no train/ and val/ folders")
        args.data, args.val = args.data / "train", args.data / "val"
    for name in ("data", "val", "test", "out"):
        if getattr(args, name) is not None:
            setattr(args, name, getattr(args, name).resolve())
    if args.jobs < 1:
        raise OptionError("--jobs", f"must be >= 1, got {args.jobs}")
    tables = parse_tables(args.tables)
    _, units = plan(SCHEDULES[args.schedule], tables)
    checkpoints = resolve_given(args.checkpoint, reserved=(*sorted({u.row for u in units}), IMU_ONLY))
    command = shlex.join(["velobins", "reproduce", *(sys.argv[2:] if argv is None else argv)])
    opts = Options(
        dataset=args.dataset,
        train=args.data,
        val=args.val,
        test=args.test,
        schedule=args.schedule,
        out=args.out,
        overwrite=args.overwrite,
        jobs=args.jobs,
        device=args.device,
        progress=not args.no_progress,
        params=tuple(args.params),
        command=command,
        tables=tables,
        executor=args.executor,
        slurm=SlurmConfig(**config_values(args, SLURM_FIELDS), setup=tuple(args.slurm_setup)),
        checkpoints=checkpoints,
    )
    return opts


if __name__ == "__main__":
    sys.exit(main_reproduce())
