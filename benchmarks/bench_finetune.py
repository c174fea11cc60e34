"""Fine-tuning study: ``velobins train --init-from crazyflie`` against training from scratch at equal budgets.

Three training sets: 4 and 8 NanoBench training flights (the fixed seeded subsets of
``bench_recipe.py``: the 8-flight set is the recipe study's) and 8 simulated flights of the ``rpm``
preset (``velobins simulate``: a 0.75 kg quadrotor with rotor speeds in rad/s, up to ~14 m/s; the
shipped ``crazyflie`` model is a 27 g vehicle with PWM commands below 2 m/s). Each is trained as G+H^B
with the ``small-data`` recipe from scratch and fine-tuned from ``crazyflie``, with ``--time-budget``
2 and 5 minutes, one run at a time (``--threads 1``), and evaluated EKF-fused on its validation
flights (NanoBench val with ``--params velobins_bringup/config/nanobench.yaml``; 4 simulated ``rpm``
flights of another seed with the default filter parameters). ``crazyflie`` as shipped is scored on
NanoBench val too (it cannot read rotor speeds in rad/s, so not on the simulated flights).

Each job is one ``velobins train`` and one ``velobins evaluate`` subprocess; a job whose
evaluation exists is skipped, so the study resumes where it stopped. ``--budgets 2`` runs the
2-minute half only. ``--report`` writes the table, the learning curves and the exact commands of what
has finished into ``<out>/report/``; ``--docs docs/results/finetune`` replaces the published ones.

    python benchmarks/bench_finetune.py --out runs/finetune             # run (or resume) the study
    python benchmarks/bench_finetune.py --out runs/finetune --report    # table + figure + commands
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from bench_recipe import DATA, PARAMS, ROOT, _cpu, _relative, subset_dir

DOCS = ROOT / "docs" / "results" / "finetune"
SOURCE = "crazyflie"
SIM_PRESET = "rpm"
SIM = {"train": (8, 1), "val": (4, 2)}
"""Simulated split → (flights, seed) of ``velobins simulate --preset rpm --seconds 60``."""
SIM_SECONDS = 60
RECIPE = "small-data"


@dataclass(frozen=True)
class Job:
    """One run: training set (``nb4``, ``nb8``, ``sim8``), start (``scratch`` or the source model), budget [min]."""

    data: str
    init: str
    budget: float

    @property
    def name(self) -> str:
        """Directory name of the run."""
        return f"{self.data}_{self.budget:g}min_{self.init}"

    @property
    def simulated(self) -> bool:
        """Whether the run trains on the simulated ``rpm`` flights."""
        return self.data.startswith("sim")


DATASETS = ("nb4", "nb8", "sim8")
PLAN = tuple(Job(d, init, b) for b in (2.0, 5.0) for d in DATASETS for init in ("scratch", SOURCE))
"""The study's jobs in priority order: the 2-minute half first."""


def sim_dir(out: Path, split: str) -> Path:
    """The simulated ``rpm`` flights of ``split`` (simulated once, then reused)."""
    folder = out / "sim" / split
    if not (folder / "simulation.json").exists():
        flights, seed = SIM[split]
        cmd = ["velobins", "simulate", "--preset", SIM_PRESET, "--flights", str(flights), "--seconds"]
        cmd += [str(SIM_SECONDS), "--seed", str(seed), "--workers", "1", "--overwrite", "--out", str(folder)]
        subprocess.run(cmd, check=True, cwd=ROOT)
    return folder


def data_of(job: Job, out: Path) -> tuple[str, Path, Path]:
    """(dataset adapter, training directory, validation directory) of ``job``."""
    if job.simulated:
        return "csv", out / "sim" / "train", out / "sim" / "val"
    return "nanobench", out / "subsets" / f"n{job.data.removeprefix('nb')}", DATA / "val"


def evaluate_command(job: Job, out: Path, checkpoint: str, target: Path) -> list[str]:
    """``velobins evaluate`` of ``checkpoint`` on the job's validation flights into ``target``."""
    dataset, _, val = data_of(job, out)
    cmd = ["velobins", "evaluate", "--checkpoint", checkpoint, "--dataset", dataset, "--data", str(val)]
    cmd += [] if job.simulated else ["--params", str(PARAMS)]
    cmd += ["--threads", "1", "--no-imu-only", "--cache-dir", str(out / "cache")]
    return [*cmd, "--overwrite", "--out", str(target)]


def commands(job: Job, out: Path) -> tuple[list[str], list[str]]:
    """The ``velobins train`` and ``velobins evaluate`` command lines of ``job``."""
    run = out / job.name
    dataset, train_dir, val = data_of(job, out)
    train = ["velobins", "train", "--dataset", dataset, "--data", str(train_dir), "--val", str(val)]
    train += ["--variant", "G+H^B"] + (["--init-from", job.init] if job.init != "scratch" else [])
    train += ["--recipe", RECIPE, "--time-budget", f"{job.budget:g}", "--seed", "0", "--threads", "1"]
    train += ["--no-progress", "--cache-dir", str(out / "cache"), "--overwrite", "--out", str(run)]
    return train, evaluate_command(job, out, str(run / "best.pt"), run / "eval")


def prepare(job: Job, out: Path) -> None:
    """The job's flights: a NanoBench subset of links, or the simulated flights."""
    if job.simulated:
        sim_dir(out, "train")
        sim_dir(out, "val")
    else:
        subset_dir(out, int(job.data.removeprefix("nb")))


def run_job(job: Job, out: Path) -> None:
    """Train and evaluate ``job`` (skipping what has finished), logging to ``<run>/train.log`` / ``eval.log``."""
    run = out / job.name
    prepare(job, out)
    train, evaluate = commands(job, out)
    run.mkdir(parents=True, exist_ok=True)
    if not (run / "done").exists():
        with open(run / "train.log", "w") as log:
            subprocess.run(train, stdout=log, stderr=subprocess.STDOUT, check=True, cwd=ROOT)
        (run / "done").write_text("trained\n")
    if not (run / "eval" / "metrics.json").exists():
        with open(run / "eval.log", "w") as log:
            subprocess.run(evaluate, stdout=log, stderr=subprocess.STDOUT, check=True, cwd=ROOT)


def zero_shot(out: Path) -> list[str]:
    """``crazyflie`` as shipped, scored on NanoBench val (the reference a fine-tuned run starts from)."""
    job = Job("nb8", SOURCE, 0.0)
    target = out / "zero_shot_nanobench"
    cmd = evaluate_command(job, out, SOURCE, target)
    if not (target / "metrics.json").exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(out / "zero_shot_nanobench.log", "w") as log:
            subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, check=True, cwd=ROOT)
    return cmd


def _aggregate(path: Path) -> dict:
    return next(iter(json.loads(path.read_text()).values()))["aggregate"]


def _row(job: Job, out: Path) -> dict | None:
    """The table row of a finished job (None while it has no evaluation)."""
    run = out / job.name
    metrics = run / "eval" / "metrics.json"
    if not metrics.exists():
        return None
    hist = json.loads((run / "history.json").read_text())
    import torch

    best = torch.load(run / "best.pt", map_location="cpu", weights_only=False)["best"]
    return {
        "job": job,
        "epochs": len(hist),
        "best_epoch": best["epoch"],
        "cpu": hist[-1].get("cpu_s"),
        "rate": sum(h["windows_per_s"] for h in hist) / len(hist),
        **_aggregate(metrics),
    }


TRAIN_SETS = {"nb4": "NanoBench, 4 flights", "nb8": "NanoBench, 8 flights", "sim8": "sim `rpm`, 8 flights"}


def _cells(r: dict) -> str:
    return (
        f"{r['net_ave']:.3f} | {r['net_nll']:.2f} | {r['ave']:.3f} | {r['rte']:.3f} | {r['ate']:.3f} | "
        f"{r['nees_median']:.2f} | {100 * r['nees_in_bounds']:.1f}% |"
    )


def report(out: Path, docs: Path) -> None:
    """Write the table, the learning-curve figure and the commands of every finished job into ``docs``."""
    docs.mkdir(parents=True, exist_ok=True)
    rows = [r for r in (_row(j, out) for j in PLAN) if r is not None]
    lines = [
        "| training set | budget [min] | start | epochs (best) | CPU [s] | win/s | net AVE [m/s] | net NLL | "
        "fused AVE [m/s] | RTE [m] | ATE [m] | NEES median | NEES in bounds |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    shipped = out / "zero_shot_nanobench" / "metrics.json"
    if shipped.exists():
        lines.append(f"| (none: NanoBench val) | 0 | `{SOURCE}` as shipped | — | — | — | {_cells(_aggregate(shipped))}")
    for r in sorted(rows, key=lambda r: (DATASETS.index(r["job"].data), r["job"].budget, r["job"].init != "scratch")):
        j = r["job"]
        start = "scratch" if j.init == "scratch" else f"fine-tuned from `{j.init}`"
        lines.append(
            f"| {TRAIN_SETS[j.data]} | {j.budget:g} | {start} | {r['epochs']} ({r['best_epoch']}) | {_cpu(r['cpu'])} | "
            f"{r['rate']:.0f} | {_cells(r)}"
        )
    (docs / "table.md").write_text("\n".join(lines) + "\n")
    script = ["#!/usr/bin/env bash", "# The study's runs (bench_finetune.py --report writes this file).", ""]
    script += ["source scripts/env.sh", f"python benchmarks/bench_finetune.py --out {out.relative_to(ROOT)}", ""]
    if shipped.exists():
        script.append(shlex.join(_relative(evaluate_command(Job("nb8", SOURCE, 0.0), out, SOURCE, shipped.parent))))
    for split, (flights, seed) in SIM.items():
        sim = ["velobins", "simulate", "--preset", SIM_PRESET, "--flights", str(flights), "--seconds", str(SIM_SECONDS)]
        sim += ["--seed", str(seed), "--workers", "1", "--out", str(out / "sim" / split)]
        script.append(shlex.join(_relative(sim)))
    for r in rows:
        for cmd in commands(r["job"], out):
            script.append(shlex.join(_relative(cmd)))
    (docs / "commands.sh").write_text("\n".join(script) + "\n")
    _figure(out, [r["job"] for r in rows], docs / "learning_curves.png")
    print((docs / "table.md").read_text())


def _figure(out: Path, jobs: list[Job], path: Path) -> None:
    """Validation network NLL and AVE against the CPU time each run got: one column per (training set, budget).

    CPU time, not wall time: the budgets are wall-clock on a shared machine, and the two runs of a pair
    got different shares of it; along the CPU axis they compare at equal work.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = sorted({(j.data, j.budget) for j in jobs}, key=lambda p: (DATASETS.index(p[0]), p[1]))
    if not panels:
        return
    fig, axes = plt.subplots(2, len(panels), figsize=(3.6 * len(panels), 6.0), squeeze=False)
    for col, (data, budget) in enumerate(panels):
        for j in (j for j in jobs if (j.data, j.budget) == (data, budget)):
            hist = json.loads((out / j.name / "history.json").read_text())
            t = [h["cpu_s"] / 60.0 for h in hist]
            fmt, label = ("C7-", "scratch") if j.init == "scratch" else ("C0-", f"from {j.init}")
            axes[0, col].plot(t, [h["val_nll"] for h in hist], fmt, marker=".", label=label)
            axes[1, col].plot(t, [h["val_ave"] for h in hist], fmt, marker=".", label=label)
        axes[0, col].set_title(f"{TRAIN_SETS[data].replace('`', '')}, {budget:g} min", fontsize=9)
        if not data.startswith("sim"):
            axes[0, col].set_ylim(top=2.0)  # the first epochs from scratch are far off the NanoBench scale
        axes[1, col].set_xlabel("CPU time of the run [min]")
    axes[0, 0].set_ylabel("val network NLL [nats/axis]")
    axes[1, 0].set_ylabel("val network AVE [m/s]")
    axes[0, 0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    """Run the study's jobs (``--budgets``, ``--only`` to select) or, with ``--report``, write the results."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=ROOT / "runs" / "finetune", help="runs, logs and the flight cache")
    p.add_argument("--budgets", type=float, nargs="*", default=[2.0, 5.0], help="budgets [min] to run")
    p.add_argument("--only", nargs="*", help="job names to run (default: all, in priority order)")
    p.add_argument("--report", action="store_true", help="write the table, figure and commands, run nothing")
    p.add_argument("--docs", type=Path, help=f"where --report writes (default <out>/report; published: {DOCS})")
    args = p.parse_args(argv)
    out = args.out.resolve()
    if args.report:
        report(out, args.docs or out / "report")
        return 0
    zero_shot(out)
    for job in PLAN:
        if job.budget not in args.budgets or (args.only and job.name not in args.only):
            continue
        print(job.name, flush=True)
        run_job(job, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
