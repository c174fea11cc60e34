"""``velobins demo --simulated``: the main job's earlier form, on simulated flights (no real data needed).

Steps 1-3 of that demo live here: simulate nano-quadrotor flights with rotorpy (PWM rotors,
NanoBench-like speeds), split them into train / validation / held-out test flights, and train
VeloBins (G+H^B, SPE bins) and the regression baseline with the same short CPU schedule, both at
once (one process and one thread each). :mod:`velobins_eval.demo` then replays the held-out flights
through the node graph and writes the report, as it does for the shipped models on real flights.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from pathlib import Path

from .processes import stop_processes

MODELS = (("G+H^B", ["--variant", "G+H", "--uncertainty", "B", "--encoding", "spe"]), ("reg", ["--variant", "reg"]))
"""The two trained models: report label and their ``velobins train`` options."""


def _run(cmd: list[str], log: Path) -> subprocess.Popen:
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as fh:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT)


def _step(title: str) -> float:
    print(f"\n\033[1m== {title}\033[0m", flush=True)
    return time.monotonic()


def simulate_and_train(
    args: argparse.Namespace, out: Path, timings: dict[str, float]
) -> tuple[dict[str, Path], list[Path]] | None:
    """Steps 1-3 into ``out``: simulated flights (``flights/{train,val,test}``) and the two trained models.

    Returns ``({label: best.pt}, held-out test flight files)``, or None when a training failed (its log tail printed).
    """
    velobins = [sys.executable, "-m", "velobins_eval.cli"]

    t = _step(f"1/5 simulate {args.flights} nano flights x {args.seconds:g} s (rotorpy, all cores)")
    from velobins_data.sim.batch import simulate_many

    paths = simulate_many("nano", args.flights, args.seconds, args.seed, out / "flights" / "all")
    timings["simulate"] = time.monotonic() - t

    t = _step("2/5 split flights")
    split = {"test": paths[: args.test_flights], "val": paths[args.test_flights : args.test_flights + args.val_flights]}
    split["train"] = paths[args.test_flights + args.val_flights :]
    for name, files in split.items():
        (out / "flights" / name).mkdir(parents=True)
        for f in files:
            shutil.copy2(f, out / "flights" / name / f.name)
        names = ", ".join(f.stem for f in files[:4]) + (", ..." if len(files) > 4 else "")
        print(f"  {name:5s}: {len(files)} flights ({names})")
    timings["split"] = time.monotonic() - t

    t = _step(f"3/5 train G+H^B and reg: {args.epochs} epochs, stride {args.stride}, in parallel (logs in {out}/train)")
    procs = {}
    for label, extra in MODELS:
        cmd = [
            *velobins,
            "train",
            "--dataset",
            "csv",
            "--data",
            str(out / "flights" / "train"),
            "--val",
            str(out / "flights" / "val"),
            *extra,
            "--recipe",  # the paper's training, as the demo's recorded figures were made
            "paper",
            "--epochs",
            str(args.epochs),
            "--stride",
            str(args.stride),
            "--seed",
            str(args.seed),
            "--threads",
            "1",
            "--out",
            str(out / "train" / label),
        ]
        procs[label] = _run(cmd, out / "train" / f"{label}.log")
    try:
        codes = {label: proc.wait() for label, proc in procs.items()}
    except BaseException:  # Ctrl-C: stop the trainings we started (they remove their temporary files)
        stop_processes(procs.values())
        raise
    for label, code in codes.items():
        log = out / "train" / f"{label}.log"
        if code != 0:
            print(log.read_text()[-3000:], file=sys.stderr)
            print(f"velobins demo: error: training {label} failed (log: {log})", file=sys.stderr)
            return None
        print("  " + log.read_text().strip().splitlines()[-1])
    timings["train"] = time.monotonic() - t
    return {label: out / "train" / label / "best.pt" for label, _ in MODELS}, split["test"]
