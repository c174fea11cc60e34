"""``velobins demo``: the README's main job — its options and checks (the work is :mod:`velobins_eval.demo`).

The shipped models replay real held-out NanoBench flights through the ROS graph and are scored
against IMU-only integration; ``--simulated`` simulates flights and trains both models on them first.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from velobins_common.errors import OptionError
from velobins_data.dataset_kinds import KINDS
from velobins_eval.demo import DEMO_DATA, SHIPPED, open_demo_dir, run_demo


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="velobins demo", description="the main job: shipped models on real held-out flights through the ROS graph"
    )
    p.add_argument("--out", type=Path, default=Path("runs/main_job"), help="output directory (locked while it runs)")
    p.add_argument(
        "--overwrite", action="store_true", help="replace the demo run already in --out (scripts/main_job.sh passes it)"
    )
    p.add_argument(
        "--model",
        action="append",
        help=f"shipped model name or checkpoint to replay (repeatable; default: {', '.join(SHIPPED)})",
    )
    p.add_argument("--dataset", default="nanobench", choices=KINDS, help="adapter of --data (default: nanobench)")
    p.add_argument("--data", type=Path, default=DEMO_DATA, help="flights to replay (default: the shipped demo flights)")
    p.add_argument("--rate", type=float, default=2.0, help="replay speed factor of the graph runs")
    p.add_argument("--skip-graph", action="store_true", help="score the flights offline only")
    sim = p.add_argument_group("--simulated: simulate flights and train both models on them first")
    sim.add_argument("--simulated", action="store_true", help="the simulated main job instead of the shipped models")
    sim.add_argument("--flights", type=int, default=24, help="simulated flights in total")
    sim.add_argument("--seconds", type=float, default=60.0, help="duration of each flight [s]")
    sim.add_argument("--test-flights", type=int, default=4, help="held-out flights replayed through the graph")
    sim.add_argument("--val-flights", type=int, default=3, help="validation flights (best checkpoint)")
    sim.add_argument("--epochs", type=int, default=12, help="training epochs (paper: 100)")
    sim.add_argument("--stride", type=int, default=10, help="training window stride [samples] (paper: 1)")
    sim.add_argument("--seed", type=int, default=0, help="seed of simulation and training")
    return p


def main_demo(argv: list[str] | None = None) -> int:
    """Entry point of ``velobins demo``: every input is checked before ``--out`` is touched."""
    args = build_parser().parse_args(argv)
    if args.simulated:
        if args.test_flights + args.val_flights + 2 > args.flights:
            raise OptionError("--flights", "must leave at least 2 training flights after validation and test flights")
        if args.model or args.data != DEMO_DATA:
            raise OptionError("--simulated", "trains its own models on simulated flights: drop --model and --data")
    if not args.rate > 0:  # NaN too
        raise OptionError("--rate", f"must be > 0, got {args.rate}")
    if args.simulated:
        models = {}
    else:
        from velobins_eval.report import method_label
        from velobins_net.pretrained import resolve_model

        models = {}
        for name in args.model or SHIPPED:
            resolved = resolve_model(name)  # an unknown name fails here, before --out is touched
            label = method_label(resolved.checkpoint)
            if label in models:  # two models of one variant: tell them apart by name
                label = f"{label} ({Path(name).stem if Path(name).suffix else name})"
            if label in models:
                raise OptionError("--model", f"{name} is given twice")
            models[label] = resolved
    with open_demo_dir(args.out, args.overwrite) as run:  # staged; lock and staging removed on any exit
        status = run_demo(args, run.path, models)
        if status == 0:
            run.commit()  # the complete demo replaces an earlier one (--overwrite)
        return status


if __name__ == "__main__":
    import sys

    sys.exit(main_demo())
