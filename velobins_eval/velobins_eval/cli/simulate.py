"""``velobins simulate``: generate simulated flights as plain CSV files.

The lead's ``velobins`` command wires its ``simulate`` sub-command to :func:`main_simulate`
(or attaches :func:`add_simulate_arguments` to its own sub-parser and calls :func:`run_simulate`).

``--out`` holds one run: a folder that already holds simulated flights (``sim_*.csv``) or a
manifest is refused (exit 2, naming them) unless ``--overwrite`` replaces the whole earlier set.
A run that fails or is interrupted removes the flights it wrote (they are staged and committed
together), and an earlier run stays until the new one is complete.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from velobins_common.errors import OptionError, UserError, one_line
from velobins_data.sim.batch import MAX_SECONDS, simulate_many
from velobins_data.sim.flight import SimulationError
from velobins_data.sim.presets import PRESETS


def add_simulate_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add ``--preset --flights --seconds --seed --out --workers --overwrite`` to ``parser`` and return it."""
    parser.add_argument("--preset", choices=sorted(PRESETS), default="nano", help="simulated platform (default: nano)")
    parser.add_argument("--flights", type=int, default=40, help="number of flights (default: 40)")
    parser.add_argument(
        "--seconds",
        type=float,
        default=60.0,
        help=f"duration of each flight in s, at most {MAX_SECONDS:g} (default: 60)",
    )
    parser.add_argument("--seed", type=int, default=0, help="run seed; output depends only on it (default: 0)")
    parser.add_argument("--out", type=Path, required=True, help="output folder for sim_<family>_<i>.csv")
    parser.add_argument("--workers", type=int, default=None, help="worker processes (default: all cores)")
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the simulated flights and manifest of an earlier run in --out (all of them)",
    )
    return parser


def check_simulate_args(args: argparse.Namespace) -> None:
    """Refuse an option value before any work, naming the option (``--seconds nan`` included)."""
    if args.flights < 1:
        raise OptionError("--flights", f"must be >= 1, got {args.flights}")
    if not 0 < args.seconds <= MAX_SECONDS:
        raise OptionError("--seconds", f"must be in (0, {MAX_SECONDS:g}] s per flight, got {args.seconds}")
    if args.seed < 0:
        raise OptionError("--seed", f"must be >= 0, got {args.seed}")
    if args.workers is not None and args.workers < 1:
        raise OptionError("--workers", f"must be >= 1, got {args.workers}")


def run_simulate(args: argparse.Namespace) -> int:
    """Run a parsed ``simulate`` command; return the process exit status."""
    start = time.perf_counter()
    try:
        check_simulate_args(args)
        paths = simulate_many(
            args.preset, args.flights, args.seconds, args.seed, args.out, workers=args.workers, overwrite=args.overwrite
        )
    except UserError as exc:  # OutputError too
        print(f"velobins simulate: error: {one_line(exc)}", file=sys.stderr)
        return 2
    except SimulationError as exc:
        print(f"velobins simulate: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"velobins simulate: interrupted; {args.out} is as it was before", file=sys.stderr)
        return 130
    wall = time.perf_counter() - start
    simulated = args.flights * args.seconds
    print(
        f"wrote {len(paths)} {args.preset} flights ({simulated:.0f} s simulated) to {args.out} "
        f"in {wall:.1f} s ({simulated / wall:.1f} simulated s per wall s)"
    )
    return 0


def main_simulate(argv: list[str] | None = None) -> int:
    """Entry point: parse ``argv`` (default ``sys.argv[1:]``) and simulate; return the exit status."""
    parser = add_simulate_arguments(
        argparse.ArgumentParser(prog="velobins simulate", description="Simulate flights with rotorpy (plain CSV out).")
    )
    return run_simulate(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main_simulate())
