"""``velobins reproduce``: the training plan, resume logic, generated sentences, and a smoke run end to end."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from velobins_eval.cli.reproduce import parse_options
from velobins_eval.metrics import FlightMetrics
from velobins_eval.reproduce.commands import reproduce
from velobins_eval.reproduce.manifest import check_manifest
from velobins_eval.reproduce.paper import direction_sentence
from velobins_eval.reproduce.plan import (
    BASELINE_ROWS,
    HEADLINE,
    HEADLINE_BINS,
    IMU_ONLY,
    REGRESSION,
    SCHEDULES,
    TABLE1_COLUMNS,
    TABLE2_ROWS,
    TABLE3_ROWS,
    TABLES,
    TrainingJob,
    is_trained,
    model_dir,
    parse_tables,
    partial_dir,
    plan,
    schedule_record,
    sweep_row,
)
from velobins_eval.reproduce.summary import RowSummary
from velobins_eval.reproduce.tasks import Data, TrainingTask, train_argv
from velobins_eval.scoring import ALL_KEYS, KEYS

METRIC_NAMES = set(ALL_KEYS)


def _fm(**values: float) -> FlightMetrics:
    base = dict.fromkeys(KEYS, 1.0)
    return FlightMetrics(**(base | values))


def test_plan_trains_each_model_once_and_scores_every_row() -> None:
    cpu = SCHEDULES["cpu"]
    jobs, units = plan(cpu)
    # 3 seeds x (reg, headline) + 4 Table I baselines + H, M, M+H, G + Direct, PE + 7 sweep points = 23.
    assert len(jobs) == 23 and len({j.name for j in jobs}) == 23
    assert {u.row for u in units} >= set(TABLE1_COLUMNS.values())
    baseline = next(j for j in jobs if j.name == "eqnio")
    assert baseline.args[:2] == ("--method", "eqnio")
    assert baseline.args[baseline.args.index("--frame-width") + 1] == str(cpu.frame_width)
    rows = {u.row for u in units}
    assert set(TABLE2_ROWS) <= rows and set(TABLE3_ROWS.values()) <= rows
    assert {sweep_row(n) for n in cpu.bins_sweep} <= rows and sweep_row(HEADLINE_BINS) == HEADLINE
    # One M model (trained with the covariance head) serves its three uncertainty rows.
    m_units = [u for u in units if u.row.startswith("M^")]
    assert {u.model for u in m_units} == {"M-BC"} and {u.uncertainty for u in m_units} == {"B", "C", "B+C"}
    m_job = next(j for j in jobs if j.name == "M-BC")
    assert m_job.args[m_job.args.index("--uncertainty") + 1] == "B+C"
    assert sorted(u.seed for u in units if u.row == REGRESSION) == [0, 1, 2]
    assert sorted(u.seed for u in units if u.row == HEADLINE) == [0, 1, 2]
    smoke_jobs, _ = plan(SCHEDULES["smoke"])
    assert len(smoke_jobs) == 14


def test_tables_select_the_trainings_they_need() -> None:
    cpu = SCHEDULES["cpu"]
    jobs, units = plan(cpu, parse_tables("1"))
    assert sorted(j.name for j in jobs if not j.name.startswith(("reg-", "GH-B-"))) == sorted(BASELINE_ROWS)
    assert len(jobs) == 2 * len(cpu.seeds) + 4 and {u.row for u in units} == set(TABLE1_COLUMNS.values())
    assert parse_tables("III, i") == ("I", "III") and parse_tables("all") == TABLES
    assert "tables" not in schedule_record("cpu", cpu) and schedule_record("cpu", cpu, ("I",))["tables"] == ["I"]
    with pytest.raises(ValueError, match="unknown table 'IV'"):
        parse_tables("I,IV")


def test_train_argv_resumes_a_partial_run_and_finished_models_are_detected(tmp_path: Path) -> None:
    job = TrainingJob("G-B", ("--variant", "G", "--uncertainty", "B"), 0)
    smoke = SCHEDULES["smoke"]
    data = Data("csv", tmp_path / "train", tmp_path / "val")
    argv = train_argv(job, smoke, data, tmp_path, "cpu", 1)
    assert "--resume" not in argv and argv[argv.index("--epochs") + 1] == str(smoke.epochs)
    assert argv[argv.index("--recipe") + 1] == "paper"  # reproduce trains the paper's recipe, not the CLI default
    # Per-epoch lines go to the log (bars draw on a terminal only, never into a log file).
    assert argv[argv.index("--threads") + 1] == "1" and "--no-progress" not in argv
    four = train_argv(job, smoke, data, tmp_path, "cpu", 4)  # a Slurm job's cores
    assert four[four.index("--threads") + 1] == "4"
    partial = partial_dir(tmp_path, "G-B")
    assert partial == tmp_path / "models" / "G-B.partial"
    partial.mkdir(parents=True)
    # A partial run that cannot be resumed (no last.pt: a lock file of a killed run, a best.pt whose
    # last.pt save was interrupted) gets no flag: the task removes the folder (reproduce's own) and
    # the training restarts afresh.
    (partial / ".velobins.lock").write_text("")
    (partial / "history.json").write_text("[]")
    argv = train_argv(job, smoke, data, tmp_path, "cpu", 1)
    assert "--resume" not in argv and "--overwrite" not in argv
    # One that left last.pt is resumed from it: what a requeued job (the same task) does when it starts again.
    (partial / "last.pt").write_bytes(b"")
    task = TrainingTask(job, smoke, data, tmp_path, "cpu", 1)
    argv = task.argv()
    assert argv[argv.index("--resume") + 1] == str(partial / "last.pt") and "--overwrite" not in argv
    assert not is_trained(tmp_path, "G-B")
    model_dir(tmp_path, "G-B").mkdir()
    (model_dir(tmp_path, "G-B") / "best.pt").write_bytes(b"")
    assert is_trained(tmp_path, "G-B")
    # A finished model is never trained again, even by a job that was already queued: it returns at once.
    assert task() == 0.0 and not task.log.exists()


def test_out_dir_of_another_plan_is_refused_naming_what_differs(tmp_path: Path) -> None:
    manifest = {"schedule": "smoke", "seeds": [0], "data": {"train": "/a", "val": "/b"}, "ekf": {"q": math.nan}}
    check_manifest(tmp_path, manifest)  # an empty directory holds no plan
    (tmp_path / "reproduce.json").write_text(json.dumps(manifest))
    check_manifest(tmp_path, json.loads(json.dumps(manifest)))  # the same plan (NaN equals NaN)
    other = manifest | {"seeds": [0, 1], "data": {"train": "/a", "val": "/b", "test": "/c"}}
    with pytest.raises(ValueError, match=r"reproduce\.json") as info:
        check_manifest(tmp_path, other)
    assert "seeds: [0] != [0, 1]" in str(info.value) and "data.test: None != '/c'" in str(info.value)
    assert "--overwrite" in str(info.value)
    (tmp_path / "reproduce.json").write_text("{not json")
    with pytest.raises(ValueError, match="unreadable"):
        check_manifest(tmp_path, manifest)
    # Reproduction files without a plan: nobody can say what they were made with.
    (tmp_path / "reproduce.json").unlink()
    (tmp_path / "models").mkdir()
    with pytest.raises(ValueError, match=r"models but no reproduce\.json"):
        check_manifest(tmp_path, manifest)


def test_direction_sentences_follow_the_measured_numbers() -> None:
    better = {
        HEADLINE: RowSummary({0: {"f": _fm(ave=0.1, net_nll=-1.0, nees_median=2.5)}}),
        REGRESSION: RowSummary({0: {"f": _fm(ave=0.2, net_nll=-0.5, nees_median=20.0)}}),
    }
    assert "measured × 0.500" in direction_sentence("ave", "AVE", better)
    assert "**agrees**" in direction_sentence("ave", "AVE", better)
    assert "**agrees**" in direction_sentence("net_nll", "NLL", better)
    assert "closer to" in direction_sentence("nees_median", "NEES", better)
    worse = {HEADLINE: better[REGRESSION], REGRESSION: better[HEADLINE]}
    for key in ("ave", "net_nll", "nees_median"):
        assert "**disagrees**" in direction_sentence(key, key, worse)
    # With seeds, a gap inside the seed spread is called unresolved.
    noisy = {
        HEADLINE: RowSummary({0: {"f": _fm(ave=0.10)}, 1: {"f": _fm(ave=0.30)}}),
        REGRESSION: RowSummary({0: {"f": _fm(ave=0.21)}, 1: {"f": _fm(ave=0.23)}}),
    }
    assert "does not resolve" in direction_sentence("ave", "AVE", noisy)


@pytest.mark.slow
def test_smoke_schedule_end_to_end(tmp_path: Path) -> None:
    from velobins_data.datasets import write_csv
    from velobins_data.sim import simulate_flight
    from velobins_eval.cli.reproduce import main_reproduce

    families = {"train": ("circle", "figure8", "helix"), "val": ("oval", "star")}
    for i, (split, family) in enumerate((s, f) for s, fams in families.items() for f in fams):
        (tmp_path / split).mkdir(exist_ok=True)
        seq = simulate_flight("nano", family, 8.0, 100 + i, index=i)
        write_csv(seq, tmp_path / split / f"{seq.name}.csv")
    out = tmp_path / "out"
    argv = ["--dataset", "csv", "--data", str(tmp_path / "train"), "--val", str(tmp_path / "val")]
    argv += ["--schedule", "smoke", "--out", str(out), "--jobs", "2", "--no-progress"]
    assert main_reproduce(argv) == 0

    split = out / "val"
    doc = json.loads((split / "metrics.json").read_text())
    smoke = SCHEDULES["smoke"]
    expected = {*TABLE2_ROWS, *TABLE3_ROWS.values(), *(sweep_row(n) for n in smoke.bins_sweep), IMU_ONLY}
    assert set(doc) == expected | set(BASELINE_ROWS)
    flights = {"sim_oval_003", "sim_star_004"}
    for row, entry in doc.items():
        assert set(entry["aggregate"]) == METRIC_NAMES and set(entry["flights"]) == flights
        # IMU-only has no updates; the displacement methods no network velocity (fused metrics only).
        finite = ("ave", "rte", "ate") if row == IMU_ONLY else KEYS
        if row in ("tlio", "eqnio", "imo"):
            finite = ("ave", "rte", "ate", "nees_median", "nees_in_bounds")
            assert entry["aggregate"]["net_ave"] is None
        for key in finite:
            assert entry["aggregate"][key] is not None and math.isfinite(entry["aggregate"][key]), (row, key)
    assert all(doc[IMU_ONLY]["aggregate"][k] is None for k in ("net_ave", "net_nll", "nees_median"))
    for row in (HEADLINE, REGRESSION):
        assert set(doc[row]["seeds"]) == {"0"} and set(doc[row]["aggregate_std"]) == METRIC_NAMES
        assert doc[row]["seeds"]["0"] == doc[row]["aggregate"]
    # The M rows share one network: same velocity, different reported variance.
    m_rows = [doc[r]["aggregate"] for r in ("M^B", "M^C", "M^B+C")]
    assert len({round(a["net_ave"], 6) for a in m_rows}) == 1
    assert len({round(a["net_nll"], 4) for a in m_rows}) == 3

    report = (split / "report.md").read_text()
    for section in (
        "## Table II",
        "## Table III",
        "## Bin resolution",
        "## Table I — methods",
        "### Against the paper",
        "## Paper vs measured",
        "### Discussion",
        "PLACEHOLDER",
        "## How this differs from the paper",
    ):
        assert section in report, section
    assert "| oval ×1 |" in report and "| star ×1 |" in report
    assert report.count("**agrees**") + report.count("**disagrees**") == 6
    assert "| AirIO |" in report and "TLIO AVE" in report and "VeloBins ATE" in report
    for name in ("nees.png", "bins.png", "trajectory_oval.png", "trajectory_star.png", "methods.png"):
        assert (split / "figures" / name).stat().st_size > 1000, name
    config = json.loads((split / "config.json").read_text())
    assert (config["schedule"], config["epochs"], config["stride"], config["seeds"]) == ("smoke", 1, 50, [0])
    assert config["git_commit"] and config["wall_time_s"] > 0 and "--schedule smoke" in config["command"]
    assert config["data"]["val"] == str(tmp_path / "val")

    # Every job of the plan has its file: a second run (submitit's local executor again) submits nothing.
    ran: list[str] = []
    jobs, units = plan(smoke)
    mtimes = {p: p.stat().st_mtime_ns for p in (*out.glob("models/*/best.pt"), *out.glob("units/val/*.npz"))}
    assert len(mtimes) == len(jobs) + len(units) + 1  # the trainings, the units, the IMU-only baseline
    assert reproduce(parse_options(argv), on_done=lambda task: ran.append(task.name)) == 0
    assert ran == [] and {p: p.stat().st_mtime_ns for p in mtimes} == mtimes

    # Partial runs go to the real `velobins train`: one with last.pt is resumed (its one epoch is
    # done: nothing retrained), one without last.pt is removed and restarted afresh.
    resumed, restarted = model_dir(out, "G-B"), model_dir(out, "H-B")
    resumed.rename(partial_dir(out, "G-B"))
    restarted.rename(partial_dir(out, "H-B"))
    (partial_dir(out, "H-B") / "last.pt").unlink()
    data = Data("csv", tmp_path / "train", tmp_path / "val")
    for name in ("G-B", "H-B"):
        job = next(j for j in jobs if j.name == name)
        assert TrainingTask(job, smoke, data, out, "cpu", 1)() > 0
    assert (resumed / "best.pt").stat().st_mtime_ns == mtimes[resumed / "best.pt"]  # resumed: no epoch redone
    assert (restarted / "best.pt").stat().st_mtime_ns > mtimes[restarted / "best.pt"] and (
        restarted / "last.pt"
    ).is_file()
    log = (out / "logs" / "H-B.log").read_text()
    assert "--overwrite" not in log and "--resume" not in log.split("$ ")[-1].splitlines()[0]
    assert "epoch 1/" in log  # per-epoch lines reach the log
    assert not list(out.rglob("*.tmp")) and not list(out.glob("models/*.partial"))
    # The retrained H-B has a new best.pt: its unit is stale and only it is recomputed.
    ran.clear()
    assert reproduce(parse_options(argv), on_done=lambda task: ran.append(task.name)) == 0
    assert ran == ["evaluate val/H-B"]
