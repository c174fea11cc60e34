"""Small-data recipe study across platforms (issue 28): G+H^B against regression at equal wall-clock budgets.

Four platforms, each with training flights and separate test flights that no run sees:

- ``n8``: 8 NanoBench train flights (the subset of ``bench_recipe.py``, seed 16), tested on the 4 NanoBench
  val flights, EKF-fused with ``velobins_bringup/config/nanobench.yaml``; ``n16`` is the same with 16 flights
  (about 600 s of flights, the size of the issue's own second vehicle);
- ``rpm``: the simulator's ``rpm`` preset (0.75 kg, ESC speeds in rad/s, IMU at 200 Hz: dynamics and rotor
  signals unlike the Crazyflie), ``velobins simulate --preset rpm --flights 13 --seconds 60 --seed 28``;
  flights 0–9 train, 10–12 test, fused with the simulator's own IMU noise (``rpm_imu_noise.yaml`` here);
- ``nano``: the simulator's Crazyflie-like ``nano`` preset, the same 13 × 60 s at seed 28, split the same way: a
  Crazyflie that is not in NanoBench, so fine-tuning the shipped ``crazyflie`` models (``--init-from``) is a clean
  test there. Fused with what ``velobins calibrate`` gives on the training flights (``nano_calibrated_imu.yaml``).

Arms (``ARMS``): the defaults before this study (``--recipe paper``, the last flight held out for selection)
for both methods, and the small-data recipe with checkpoint selection on the tail of every flight
(``--val-split tails``), with and without sensor augmentation (``--aug-*``). Each job is one
``velobins train`` (``--threads 1``, its budget in CPU seconds: ``--budget-clock cpu``, so every run gets the
same compute however loaded the machine is) and one ``velobins evaluate``; finished jobs are skipped, so the study
resumes. ``--jobs 2`` runs two at a time (both cores). After a run, and alone with ``--report``, it writes
``table.md``, ``commands.sh`` and the validation curves (``curves_<budget>min.png``) of the selected jobs into
``<out>/report/``; only ``--docs docs/results/recipe_platforms`` replaces the published ones, so a rerun of a few
jobs cannot shrink the committed table to its own rows.

    python benchmarks/bench_recipe_platforms.py --out runs/recipe28 --budgets 5 2 --jobs 2
    python benchmarks/bench_recipe_platforms.py --out runs/recipe28 --budgets 5 2 10 --seeds 0 1 2 --report \
        --docs docs/results/recipe_platforms
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_recipe import DATA, PARAMS, ROOT, link_once, run_logged, run_row, subset_dir, train_and_evaluate

DOCS = ROOT / "docs" / "results" / "recipe_platforms"
SIM_PARAMS = {"rpm": DOCS / "rpm_imu_noise.yaml", "nano": DOCS / "nano_calibrated_imu.yaml"}
"""The EKF parameters each simulated platform is fused with."""
NANOBENCH_SUBSETS = {"n8": 8, "n16": 16}
"""NanoBench subsets: platform name → number of training flights (``bench_recipe.py``'s fixed draw)."""
SIM = ("--flights", "13", "--seconds", "60", "--seed", "28")
SIM_TEST = 3
"""The last flights of each simulated set are the test flights."""

AUG = ("--aug-acc-noise", "0.1", "--aug-acc-bias", "0.1", "--aug-gyro-noise", "0.01", "--aug-gyro-bias", "0.01")
AUG += ("--aug-rotor-scale", "0.1")
"""Augmentation of the ``aug`` arms: white noise about a small vehicle's in-flight IMU floor at 100 Hz
(0.1 m/s², 0.01 rad/s per sample), biases twice the simulator's turn-on spread, and ±10 % rotor-signal
scale (battery, propellers)."""

AUG_WEAK = ("--aug-acc-noise", "0.03", "--aug-gyro-noise", "0.003", "--aug-rotor-scale", "0.03")
"""Weaker augmentation (round 6, after ``AUG`` cost both methods on ``n8``): white noise a tenth of ``AUG``'s in
variance (about 0.3 of its σ), no bias, ±3 % rotor-signal scale."""

ARMS: dict[str, tuple[str, tuple[str, ...]]] = {
    "reg_paper": ("reg", ("--recipe", "paper", "--val-split", "flights")),
    "gh_paper": ("G+H", ("--recipe", "paper", "--val-split", "flights")),
    "gh_small_tails": ("G+H", ("--recipe", "small-data", "--val-split", "tails", "--val-fraction", "0.2")),
    "gh_small_tails_aug": ("G+H", ("--recipe", "small-data", "--val-split", "tails", "--val-fraction", "0.2", *AUG)),
    "reg_small_tails_aug": ("reg", ("--recipe", "small-data", "--val-split", "tails", "--val-fraction", "0.2", *AUG)),
    "gh_paper_kl": (
        "G+H",
        ("--recipe", "paper", "--val-split", "flights", "--kl-ramp", "0.5", "--kl-ramp-start", "0.1"),
    ),
    "h_paper": ("H", ("--recipe", "paper", "--val-split", "flights")),
    "gh_paper_b64": ("G+H", ("--recipe", "paper", "--val-split", "flights", "--bins", "64")),
    "gh_init": ("G+H", ("--recipe", "paper", "--val-split", "flights", "--init-from", "crazyflie")),
    "reg_init": ("reg", ("--recipe", "paper", "--val-split", "flights", "--init-from", "crazyflie-reg")),
    "gh_kls01": ("G+H", ("--recipe", "paper", "--val-split", "flights", "--kl-scale", "0.1")),
    "gh_kls001": ("G+H", ("--recipe", "paper", "--val-split", "flights", "--kl-scale", "0.01")),
    "gh_kllate": ("G+H", ("--recipe", "paper", "--val-split", "flights", "--kl-ramp", "1", "--kl-ramp-start", "0")),
    "gh_valfloor": ("G+H", ("--recipe", "paper", "--val-split", "flights", "--label-floor", "val")),
    "gh_valfloor_kls01": (
        "G+H",
        ("--recipe", "paper", "--val-split", "flights", "--label-floor", "val", "--kl-scale", "0.1"),
    ),
    "gh_valfloor_kls001": (
        "G+H",
        ("--recipe", "paper", "--val-split", "flights", "--label-floor", "val", "--kl-scale", "0.01"),
    ),
    "gh_init_valfloor": ("G+H", ("--recipe", "own-vehicle", "--val-split", "flights", "--init-from", "crazyflie")),
    "gh_valfloor_aug": ("G+H", ("--recipe", "own-vehicle", "--val-split", "flights", *AUG)),
    "reg_paper_aug": ("reg", ("--recipe", "paper", "--val-split", "flights", *AUG)),
    "gh_valfloor_augweak": ("G+H", ("--recipe", "own-vehicle", "--val-split", "flights", *AUG_WEAK)),
    "reg_paper_augweak": ("reg", ("--recipe", "paper", "--val-split", "flights", *AUG_WEAK)),
    "gh_valfloor_tails": ("G+H", ("--recipe", "own-vehicle", "--val-split", "tails", "--val-fraction", "0.2")),
    "reg_paper_tails": ("reg", ("--recipe", "paper", "--val-split", "tails", "--val-fraction", "0.2")),
    "gh_valfloor_b64": ("G+H", ("--recipe", "own-vehicle", "--val-split", "flights", "--bins", "64")),
    "gh_valfloor_lr1e4": ("G+H", ("--recipe", "own-vehicle", "--val-split", "flights", "--lr", "1e-4")),
    "reg_paper_lr1e4": ("reg", ("--recipe", "paper", "--val-split", "flights", "--lr", "1e-4")),
    "gh_valfloor_bestave": (
        "G+H",
        ("--recipe", "paper", "--val-split", "flights", "--label-floor", "val", "--best-metric", "ave"),
    ),
}
"""Arm → (variant, options). ``paper`` + ``flights`` were ``velobins train``'s defaults before this study.
Round 1: the small-data recipe with tails selection, with and without augmentation, and ``gh_paper_kl`` (λ_KL
ramped from 0.1 to 1 over the first half of the plan). Round 2: ``h_paper`` (Huber through the bins, no KL: what
the KL term costs on small data), ``gh_paper_b64`` (64 bins instead of 512), ``gh_init`` / ``reg_init``
(fine-tuned from the shipped ``crazyflie`` / ``crazyflie-reg``, ``--init-from``). Round 3, after ``h_paper``
won on ``rpm``: λ_KL scaled by 0.1 and 0.01 for the whole run (``--kl-scale``), and λ_KL rising from 0 over the
whole run (``gh_kllate``). Round 4: the KL labels' σ bounded below by the last validation's RMS error
(``gh_valfloor``, ``--label-floor val``: labels never narrower than the error on new flights), alone and with
λ_KL scaled (``gh_valfloor_kls*``). Round 5: the floor on a model fine-tuned from the shipped one
(``gh_init_valfloor``: ``gh_init``'s spread collapsed after epoch 0; does the floor let fine-tuning go on?).
Round 6, against the 5 % network-AVE gap on ``n8`` (both methods over-fit from epoch 3-4): the sensor
augmentation ``AUG`` on the new default and, for a fair comparison, on regression (``gh_valfloor_aug``,
``reg_paper_aug``), then a weaker one (``AUG_WEAK``: ``*_augweak``); and selection on the last 20 % of every
flight with the paper's schedule, which round 1 measured only with the ``small-data`` one (``gh_valfloor_tails``,
whose floor is then the error on those tails, and ``reg_paper_tails``). Round 8, because the floor's validation
AVE is best at epochs 1-3 and rises after, where regression's improves to epoch 4-5: a smaller bins head (64
bins, ``gh_valfloor_b64``; ``gh_paper_b64`` measured it only without the floor), and a third of the learning
rate for both methods (``gh_valfloor_lr1e4``, ``reg_paper_lr1e4``). Item 38, because the floor's members on ``n8``
keep a later epoch by validation NLL than by validation AVE in seven seeds of eight: the floor with best.pt picked
by validation AVE (``gh_valfloor_bestave``; the training is the same, only the kept epoch differs)."""


@dataclass(frozen=True)
class Job:
    """One run: platform, arm, budget [min], training seed (parameter init and shuffling)."""

    platform: str
    arm: str
    budget: float
    seed: int = 0

    @property
    def name(self) -> str:
        return f"{self.platform}_{self.budget:g}min_{self.arm}" + (f"_s{self.seed}" if self.seed else "")


def platform_data(out: Path, platform: str) -> tuple[str, Path, Path, Path]:
    """(dataset kind, training folder, test folder, EKF params) of ``platform``, made on first use."""
    if platform in NANOBENCH_SUBSETS:
        return "nanobench", subset_dir(out, NANOBENCH_SUBSETS[platform]), DATA / "val", PARAMS
    sim = out / "sim" / f"{platform}_all"
    if not (sim / "dataset.json").exists() and not any(sim.glob("*.json")):
        cmd = ["velobins", "simulate", "--preset", platform, *SIM, "--workers", "1", "--out", str(sim)]
        subprocess.run(cmd, check=True, cwd=ROOT)
    flights = sorted(sim.glob("sim_*.csv"), key=lambda p: int(p.stem.rsplit("_", 1)[1]))
    train, test = out / "sim" / f"{platform}_train", out / "sim" / f"{platform}_test"
    for folder, part in ((train, flights[:-SIM_TEST]), (test, flights[-SIM_TEST:])):
        folder.mkdir(parents=True, exist_ok=True)
        for path in part:
            link_once(folder / path.name, path.resolve())
    return "csv", train, test, SIM_PARAMS[platform]


def commands(job: Job, out: Path) -> tuple[list[str], list[str]]:
    """The ``velobins train`` and ``velobins evaluate`` command lines of ``job``."""
    kind, train_dir, test_dir, params = platform_data(out, job.platform)
    variant, options = ARMS[job.arm]
    run = out / job.name
    train = ["velobins", "train", "--dataset", kind, "--data", str(train_dir), "--variant", variant, *options]
    train += ["--time-budget", f"{job.budget:g}", "--budget-clock", "cpu", "--seed", str(job.seed), "--threads", "1"]
    train += ["--no-progress"]
    train += ["--cache-dir", str(out / "cache"), "--overwrite", "--out", str(run)]
    evaluate = ["velobins", "evaluate", "--checkpoint", str(run / "best.pt"), "--dataset", kind]
    evaluate += ["--data", str(test_dir), "--params", str(params), "--threads", "1", "--no-imu-only"]
    evaluate += ["--cache-dir", str(out / "cache"), "--overwrite", "--out", str(run / "eval")]
    return train, evaluate


NICE = ("nice", "-n", "5")
"""Every study process runs niced: the machine is shared."""


def heldout_dir(job: Job, out: Path) -> Path:
    """The folder of links to the flights ``job``'s checkpoint was selected on (:func:`link_heldout`)."""
    return out / job.name / "heldout"


def link_heldout(job: Job, out: Path) -> None:
    """Fill :func:`heldout_dir` with links to the flights the checkpoint was selected on (its ``data['val']``)
    and their sidecar files: the flights the variance scale is calibrated on, which the network never trained on."""
    import torch

    ckpt = torch.load(out / job.name / "best.pt", map_location="cpu", weights_only=False)
    folder = heldout_dir(job, out)
    folder.mkdir(exist_ok=True)
    for flight in ckpt["data"]["val"]:
        source = Path(flight["source"])
        for path in source.parent.glob(flight["name"] + "*"):  # the flight and its sidecars (metadata)
            link_once(folder / path.name, path.resolve())
    return folder


def calibrated_commands(job: Job, out: Path) -> tuple[list[str], list[str]]:
    """The own-vehicle flow's last two steps for ``job``: ``velobins calibrate`` of the network variance scale s
    alone (the IMU noise is the platform's, in its parameter file) on the held-out validation flight, then
    ``velobins evaluate`` on the test flights with that overlay."""
    kind, _, test_dir, params = platform_data(out, job.platform)
    run = out / job.name
    calibrate = ["velobins", "calibrate", "--dataset", kind, "--checkpoint", str(run / "best.pt")]
    calibrate += ["--heldout", str(heldout_dir(job, out)), "--params", str(params), "--fit", "variance_scale"]
    calibrate += ["--workers", "1", "--threads", "1", "--overwrite", "--out", str(run / "overlay.yaml")]
    evaluate = ["velobins", "evaluate", "--checkpoint", str(run / "best.pt"), "--dataset", kind]
    evaluate += ["--data", str(test_dir), "--params", str(params), "--params", str(run / "overlay.yaml")]
    evaluate += ["--threads", "1", "--no-imu-only", "--cache-dir", str(out / "cache"), "--overwrite"]
    evaluate += ["--out", str(run / "eval_cal")]
    return calibrate, evaluate


def run_calibrated(job: Job, out: Path) -> None:
    """Calibrate s on the held-out flight and evaluate with it (skipped when done; ``calibrate.log``)."""
    run = out / job.name
    if (run / "eval_cal" / "metrics.json").exists() or not (run / "done").exists():
        return
    link_heldout(job, out)
    run_logged(run / "calibrate.log", *([*NICE, *cmd] for cmd in calibrated_commands(job, out)))


def run_job(job: Job, out: Path) -> str:
    """Train and evaluate ``job``, niced (skipping what has finished; logs in ``<run>/train.log`` / ``eval.log``)."""
    train, evaluate = commands(job, out)
    train_and_evaluate(out / job.name, [*NICE, *train], [*NICE, *evaluate])
    if "flights" in ARMS[job.arm][1]:  # a whole flight held out: the own-vehicle flow's calibration applies
        run_calibrated(job, out)
    return job.name


COLUMNS = (
    ("net AVE", "net_ave", "{:.3f}"),
    ("net NLL", "net_nll", "{:.2f}"),
    ("fused AVE", "ave", "{:.3f}"),
    ("fused AVE body", "ave_body", "{:.3f}"),
    ("ATE", "ate", "{:.3f}"),
    ("NEES median", "nees_median", "{:.2f}"),
    ("NEES in 95 %", "nees_in_bounds", "{:.1%}"),
)
"""Report columns: header, ``metrics.json`` aggregate key, format."""

CAL_COLUMNS = (
    ("fused AVE, s cal.", "ave", "{:.3f}"),
    ("NEES median, s cal.", "nees_median", "{:.2f}"),
    ("NEES in 95 %, s cal.", "nees_in_bounds", "{:.1%}"),
)
"""Columns of the calibrated evaluation (``eval_cal``: s fitted on the held-out validation flight)."""


def calibrated_row(job: Job, out: Path) -> dict | None:
    """The calibrated evaluation's aggregate and fitted s of ``job`` (None where it did not run)."""
    import json

    import yaml

    run = out / job.name
    metrics = run / "eval_cal" / "metrics.json"
    if not metrics.exists():
        return None
    agg = next(iter(json.loads(metrics.read_text()).values()))["aggregate"]
    overlay = yaml.safe_load((run / "overlay.yaml").read_text())
    scale = float("nan")
    for block in overlay.values():
        predictor = block.get("ros__parameters", {}).get("predictor", {})
        if "variance_scale" in predictor:
            scale = predictor["variance_scale"]
    return {**agg, "s": float(scale)}


def report(out: Path, jobs: list[Job], docs: Path) -> str:
    """``table.md`` and ``commands.sh`` in ``docs`` from the finished jobs; returns the table."""
    head = "| platform | budget [min] | arm | seed | epochs (best) | CPU [s] | "
    head += " | ".join(c[0] for c in (*COLUMNS, ("s", "", ""), *CAL_COLUMNS)) + " |"
    lines = [head, "|" + "---|" * (7 + len(COLUMNS) + len(CAL_COLUMNS))]
    cmds = ["# the study's commands, in its order (bench_recipe_platforms.py runs them)"]
    for job in jobs:
        r = run_row(job, out)  # the same figures as bench_recipe's table
        if r is None:  # not run (yet): neither a row nor its commands
            continue
        train, evaluate = commands(job, out)
        cmds += [shlex.join(_relative(train, out)), shlex.join(_relative(evaluate, out))]
        if (out / job.name / "eval_cal" / "metrics.json").exists():
            cmds += [shlex.join(_relative(c, out)) for c in calibrated_commands(job, out)]
        cells = [fmt.format(r[key]) if isinstance(r.get(key), float) else "—" for _, key, fmt in COLUMNS]
        cal = calibrated_row(job, out) or {}
        cells.append(f"{cal['s']:.3g}" if "s" in cal else "—")
        cells += [fmt.format(cal[key]) if isinstance(cal.get(key), float) else "—" for _, key, fmt in CAL_COLUMNS]
        cpu = f"{r['cpu']:.0f}" if r.get("cpu") else "—"
        lines.append(
            f"| {job.platform} | {job.budget:g} | {job.arm} | {job.seed} | {r['epochs']} ({r['best_epoch']}) | {cpu} | "
            + " | ".join(cells)
            + " |"
        )
    docs.mkdir(parents=True, exist_ok=True)
    table = "\n".join(lines) + "\n"
    (docs / "table.md").write_text(table)
    (docs / "commands.sh").write_text("\n".join(cmds) + "\n")
    return table


CURVE_ARMS = ("reg_paper", "gh_paper", "h_paper", "gh_valfloor", "gh_paper_kl", "gh_kls01")
"""The arms the curves draw (all would be unreadable): the old and new defaults and the findings, all validated on
the same held-out flight (the tails arms validate on other windows, so their curves are not comparable)."""


def curves(out: Path, jobs: list[Job], docs: Path) -> list[Path]:
    """``curves_<budget>min.png`` in ``docs``: validation AVE and NLL per epoch against CPU seconds, per platform.

    One figure per budget, a row per platform, a line per arm (seed 0); the epoch each run kept is marked.
    These are the runs' own validation curves (``history.json``), the figures checkpoint selection saw.
    """
    import json

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    for budget in sorted({j.budget for j in jobs}):
        platforms = sorted({j.platform for j in jobs if j.budget == budget})
        fig, axes = plt.subplots(len(platforms), 2, figsize=(11, 3.6 * len(platforms)), squeeze=False)
        for (ax_ave, ax_nll), platform in zip(axes, platforms, strict=True):
            shown = (j for j in jobs if j.budget == budget and j.platform == platform and j.seed == 0)
            for job in (j for j in shown if j.arm in CURVE_ARMS):
                finished = run_row(job, out)
                if finished is None:
                    continue
                epochs = json.loads((out / job.name / "history.json").read_text())
                cpu = [e.get("cpu_s") or e["elapsed_s"] for e in epochs]
                kept = finished["best_epoch"]
                style = "--" if ARMS[job.arm][0] == "reg" else "-"
                (line,) = ax_ave.plot(cpu, [e["val_ave"] for e in epochs], style, marker=".", label=job.arm)
                ax_nll.plot(cpu, [e["val_nll"] for e in epochs], style, marker=".", color=line.get_color())
                ax_ave.plot(cpu[kept], epochs[kept]["val_ave"], "o", mfc="none", ms=10, color=line.get_color())
                ax_nll.plot(cpu[kept], epochs[kept]["val_nll"], "o", mfc="none", ms=10, color=line.get_color())
            ax_ave.set(title=f"{platform}, {budget:g} min: validation AVE", xlabel="CPU [s]", ylabel="AVE [m/s]")
            ax_nll.set(title=f"{platform}, {budget:g} min: validation NLL", xlabel="CPU [s]", ylabel="NLL [nats/axis]")
            ax_nll.set_yscale("symlog", linthresh=1.0)
            if ax_ave.lines:
                ax_ave.legend(fontsize=7)
        if any(ax.lines for ax in axes[:, 0]):
            fig.suptitle("dashed: regression; circle: the epoch kept (best.pt)")
            fig.tight_layout()
            path = docs / f"curves_{budget:g}min.png"
            fig.savefig(path, dpi=90)
            written.append(path)
        plt.close(fig)
    return written


def _relative(cmd: list[str], out: Path) -> list[str]:
    """``cmd`` with the repository root and the run folder written relative (for the docs)."""
    shared = str(ROOT.parent / "shared")
    return [a.replace(str(out), "runs/recipe28").replace(shared, "../shared").replace(str(ROOT) + "/", "") for a in cmd]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True, help="study folder (runs, subsets, simulated flights)")
    p.add_argument("--budgets", type=float, nargs="+", default=[2.0, 5.0], help="training budgets [min]")
    p.add_argument("--platforms", nargs="+", default=["rpm", "n8"], choices=("rpm", *NANOBENCH_SUBSETS, "nano"))
    p.add_argument("--arms", nargs="+", default=list(ARMS), choices=tuple(ARMS))
    p.add_argument("--seeds", type=int, nargs="+", default=[0], help="training seeds (each a run of every arm)")
    p.add_argument("--jobs", type=int, default=1, help="runs at a time (each uses one thread)")
    p.add_argument("--report", action="store_true", help="write the table from what has finished, run nothing")
    p.add_argument(
        "--docs", type=Path, help=f"where the table, commands and curves go (default <out>/report; published: {DOCS})"
    )
    args = p.parse_args(argv)
    out = args.out.resolve()
    docs = args.docs or out / "report"
    jobs = [Job(pl, arm, b, s) for s in args.seeds for b in args.budgets for pl in args.platforms for arm in args.arms]
    for platform in args.platforms:
        platform_data(out, platform)
    if not args.report:
        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            for name in pool.map(lambda j: run_job(j, out), jobs):
                print(f"done: {name}", flush=True)
    print(report(out, jobs, docs))
    for path in curves(out, jobs, docs):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
