"""Small-data training-recipe study: VeloBins G+H^B against the regression baseline at equal wall-clock budgets.

Trains on fixed seeded subsets of NanoBench train (8 and 16 flights), validates and evaluates
(EKF-fused, ``--params velobins_bringup/config/nanobench.yaml``) on NanoBench val, with
``velobins train --time-budget`` for every run, one run at a time (``--threads 1``). Each job is
one ``velobins train`` and one ``velobins evaluate`` subprocess; a job whose evaluation exists is
skipped, so the study resumes where it stopped. ``--report`` writes the table (``table.md``), the
learning-curve figure (``learning_curves.png``) and the exact commands (``commands.sh``) from what has
finished, into ``<out>/report/``; ``--docs docs/results/recipe`` replaces the published ones.

    python benchmarks/bench_recipe.py --out runs/recipe              # run (or resume) the study
    python benchmarks/bench_recipe.py --out runs/recipe --report     # table + figure + commands
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "nanobench"
PARAMS = ROOT / "velobins_bringup" / "config" / "nanobench.yaml"
DOCS = ROOT / "docs" / "results" / "recipe"
SUBSET_SEED = 16
UNUSABLE = ("B7_oval_slow_rep1",)
"""Flights the NanoBench adapter skips (never takes off): not drawn into a subset."""


@dataclass(frozen=True)
class Job:
    """One training run of the study: method, recipe, training-subset size and budget [min]."""

    method: str
    recipe: str
    flights: int
    budget: float
    tag: str = ""

    @property
    def name(self) -> str:
        """Directory name of the run (``tag``: an earlier try of the same job, kept beside it)."""
        method = "gh" if self.method == "G+H" else "reg"
        return f"n{self.flights}_{self.budget:g}min_{method}_{self.recipe}{self.tag}"


PLAN = (
    Job("G+H", "small-data", 16, 5),
    Job("reg", "small-data", 16, 5),
    Job("G+H", "paper", 16, 5),
    Job("G+H", "small-data", 8, 5),
    Job("reg", "small-data", 8, 5),
    Job("G+H", "paper", 8, 5),
    Job("G+H", "small-data", 8, 2),
    Job("reg", "small-data", 8, 2),
    Job("G+H", "paper", 8, 2),
    Job("reg", "paper", 16, 5),
    Job("reg", "paper", 8, 5),
    Job("reg", "paper", 8, 2),
    Job("G+H", "small-data", 16, 2),
    Job("reg", "small-data", 16, 2),
    Job("G+H", "small-data", 16, 10),
    Job("reg", "small-data", 16, 10),
    Job("G+H", "paper", 8, 10),
    Job("reg", "paper", 8, 10),
    Job("G+H", "paper", 16, 10),
    Job("reg", "paper", 16, 10),
)
"""The study's jobs in priority order (the first nine answer the issue's question at 2 and 5 minutes;
the last four check the default, paper, recipe at 10 minutes)."""


def link_once(link: Path, target: Path) -> None:
    """Make ``link`` point to ``target`` unless it exists: two studies started at once may both make it, so the
    loser's ``FileExistsError`` is the expected outcome, not a failure."""
    try:
        link.symlink_to(target)
    except FileExistsError:
        pass


def subset_dir(out: Path, flights: int) -> Path:
    """A folder of links to ``flights`` training flights drawn with a fixed seed (the same for every run)."""
    names = sorted(p.name.removesuffix(".csv.gz") for p in (DATA / "train").glob("*.csv.gz"))
    pool = [n for n in names if n not in UNUSABLE]
    chosen = sorted(random.Random(SUBSET_SEED * 1000 + flights).sample(pool, flights))
    folder = out / "subsets" / f"n{flights}"
    folder.mkdir(parents=True, exist_ok=True)
    for name in chosen:
        for suffix in (".csv.gz", "_metadata.yaml"):
            link_once(folder / f"{name}{suffix}", DATA / "train" / f"{name}{suffix}")
    (folder / "flights.txt").write_text("\n".join(chosen) + "\n")
    return folder


def commands(job: Job, out: Path) -> tuple[list[str], list[str]]:
    """The ``velobins train`` and ``velobins evaluate`` command lines of ``job``."""
    run = out / job.name
    train = ["velobins", "train", "--dataset", "nanobench", "--data", str(out / "subsets" / f"n{job.flights}")]
    train += ["--val", str(DATA / "val"), "--variant", job.method, "--recipe", job.recipe]
    train += ["--time-budget", f"{job.budget:g}", "--seed", "0", "--threads", "1", "--no-progress"]
    train += ["--cache-dir", str(out / "cache"), "--overwrite", "--out", str(run)]
    evaluate = ["velobins", "evaluate", "--checkpoint", str(run / "best.pt"), "--dataset", "nanobench"]
    evaluate += ["--data", str(DATA / "val"), "--params", str(PARAMS), "--threads", "1", "--no-imu-only"]
    evaluate += ["--cache-dir", str(out / "cache"), "--overwrite", "--out", str(run / "eval")]
    return train, evaluate


def run_job(job: Job, out: Path) -> None:
    """Train and evaluate ``job`` (skipping what has finished), logging to ``<run>/train.log`` / ``eval.log``."""
    subset_dir(out, job.flights)
    train_and_evaluate(out / job.name, *commands(job, out))


def run_logged(log: Path, *commands: list[str]) -> None:
    """Run ``commands`` in order from the repository root, their output into ``log``; the first failure raises."""
    with open(log, "w") as out:
        for cmd in commands:
            subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, check=True, cwd=ROOT)


def train_and_evaluate(run: Path, train: list[str], evaluate: list[str]) -> None:
    """Run ``train`` then ``evaluate`` for the run folder ``run``, skipping what has finished (a ``done`` marker,
    ``eval/metrics.json``), logging to ``<run>/train.log`` / ``eval.log``."""
    run.mkdir(parents=True, exist_ok=True)
    if not (run / "done").exists():
        run_logged(run / "train.log", train)
        (run / "done").write_text("trained\n")
    if not (run / "eval" / "metrics.json").exists():
        run_logged(run / "eval.log", evaluate)


def run_row(job: Job, out: Path) -> dict | None:
    """The table row of a finished job (None while it has no evaluation)."""
    run = out / job.name
    metrics = run / "eval" / "metrics.json"
    if not metrics.exists():
        return None
    agg = next(iter(json.loads(metrics.read_text()).values()))["aggregate"]
    hist = json.loads((run / "history.json").read_text())
    import torch

    best = torch.load(run / "best.pt", map_location="cpu", weights_only=False)["best"]
    return {
        "job": job,
        "epochs": len(hist),
        "best_epoch": best["epoch"],
        "elapsed": hist[-1].get("elapsed_s") or float("nan"),
        "cpu": hist[-1].get("cpu_s"),
        "rate": sum(h["windows_per_s"] for h in hist) / len(hist),
        **agg,
    }


def report(out: Path, docs: Path) -> None:
    """Write the table, the learning-curve figure and the commands of every finished job into ``docs``."""
    docs.mkdir(parents=True, exist_ok=True)
    tries = [dataclasses.replace(j, tag=d.name.removeprefix(j.name)) for j in PLAN for d in out.glob(j.name + "_try*")]
    rows = [r for r in (run_row(j, out) for j in (*PLAN, *tries)) if r is not None]
    lines = [
        "| train flights | budget [min] | method | recipe | epochs (best) | CPU [s] | win/s | net AVE [m/s] | "
        "net NLL | fused AVE [m/s] | RTE [m] | ATE [m] | NEES median | NEES in bounds |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in sorted(rows, key=lambda r: (r["job"].flights, r["job"].budget, r["job"].recipe, r["job"].method)):
        j = r["job"]
        lines.append(
            f"| {j.flights} | {j.budget:g} | {'G+H^B' if j.method == 'G+H' else 'reg'} | {j.recipe}{j.tag} | "
            f"{r['epochs']} ({r['best_epoch']}) | {_cpu(r['cpu'])} | {r['rate']:.0f} | "
            f"{r['net_ave']:.3f} | {r['net_nll']:.2f} | {r['ave']:.3f} | "
            f"{r['rte']:.3f} | {r['ate']:.3f} | {r['nees_median']:.2f} | {100 * r['nees_in_bounds']:.1f}% |"
        )
    (docs / "table.md").write_text("\n".join(lines) + "\n")
    script = [
        "#!/usr/bin/env bash",
        "# The study's runs, in its priority order (bench_recipe.py --report writes this file).",
        "",
    ]
    script += ["source scripts/env.sh", f"python benchmarks/bench_recipe.py --out {out.relative_to(ROOT)}", ""]
    for r in rows:
        for cmd in commands(r["job"], out):
            script.append(shlex.join(_relative(cmd)))
    (docs / "commands.sh").write_text("\n".join(script) + "\n")
    _figure(out, [r["job"] for r in rows], docs / "learning_curves.png")
    print((docs / "table.md").read_text())


def _cpu(seconds: float | None) -> str:
    """CPU seconds of a run ("—" for a run that predates the record)."""
    return "—" if seconds is None else f"{seconds:.0f}"


def _relative(cmd: list[str]) -> list[str]:
    """Paths in ``cmd`` relative to the repository root (``../shared`` for the data)."""
    return [
        str(Path(c).relative_to(ROOT)) if c.startswith(str(ROOT)) else c.replace(str(ROOT.parent), "..") for c in cmd
    ]


def _figure(out: Path, jobs: list[Job], path: Path) -> None:
    """Validation NLL and network AVE against wall time, one column per (subset, budget)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = sorted({(j.flights, j.budget) for j in jobs})
    if not panels:
        return
    fig, axes = plt.subplots(2, len(panels), figsize=(4.2 * len(panels), 6.5), squeeze=False)
    style = {
        ("G+H", "small-data"): "C0-",
        ("reg", "small-data"): "C3-",
        ("G+H", "paper"): "C0--",
        ("reg", "paper"): "C3--",
    }
    for col, (flights, budget) in enumerate(panels):
        for j in (j for j in jobs if (j.flights, j.budget) == (flights, budget)):
            hist = json.loads((out / j.name / "history.json").read_text())
            t = [h["elapsed_s"] / 60.0 for h in hist]
            label = f"{'G+H^B' if j.method == 'G+H' else 'reg'} {j.recipe}{j.tag}"
            fmt = style[(j.method, j.recipe)].replace("-", ":") if j.tag else style[(j.method, j.recipe)]
            axes[0, col].plot(t, [h["val_nll"] for h in hist], fmt, label=label)
            axes[1, col].plot(t, [h["val_ave"] for h in hist], fmt, label=label)
        axes[0, col].set_title(f"{flights} flights, {budget:g} min")
        axes[0, col].set_ylim(top=2.0)
        axes[1, col].set_xlabel("wall time [min]")
    axes[0, 0].set_ylabel("val network NLL [nats/axis]")
    axes[1, 0].set_ylabel("val network AVE [m/s]")
    axes[0, 0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    """Run the study's jobs (``--only`` a subset of their names) or, with ``--report``, write the results."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=ROOT / "runs" / "recipe", help="runs, logs and the flight cache")
    p.add_argument("--only", nargs="*", help="job names to run (default: all, in priority order)")
    p.add_argument("--report", action="store_true", help="write the table, figure and commands, run nothing")
    p.add_argument("--docs", type=Path, help=f"where --report writes (default <out>/report; published: {DOCS})")
    args = p.parse_args(argv)
    out = args.out.resolve()
    if args.report:
        report(out, args.docs or out / "report")
        return 0
    for job in PLAN:
        if args.only and job.name not in args.only:
            continue
        print(f"{job.name}", flush=True)
        run_job(job, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
