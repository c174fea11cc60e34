"""``velobins demo``: the README's main job, the shipped models on real held-out flights through the ROS graph.

By default (no downloads, no training):

1. resolve the shipped Crazyflie 2.1 models by name (``crazyflie``: VeloBins G+H^B, SPE bins;
   ``crazyflie-reg``: the regression baseline; :mod:`velobins_net.pretrained`), each with the EKF
   overlay it was evaluated with, and load the two shipped NanoBench demo flights
   (``demo_data/nanobench``, kept out of the models' training, selection and calibration);
2. convert each flight to rosbag2 and replay it through the real node graph once per model
   (network, EKF and eval nodes as separate processes over Fast DDS, sim time; the shipped
   ``velobins.yaml`` and ``evaluation.yaml`` plus the model's overlay, as ``params_file:=``);
3. write the comparison of VeloBins, regression and IMU-only integration (the same EKF with the
   same overlay and no updates, offline): ``report.md`` with the aggregate and a per-flight table,
   ``report.html`` (interactive, :mod:`velobins_eval.report_html`), ``metrics.json``; under ``offline/``
   and each graph run's folder the full report of :mod:`velobins_eval.report`: plots, and per flight
   and method the TUM trajectories, ``updates.csv`` and the MCAP recording (``estimates/``).

``--simulated`` runs the earlier main job instead: simulate flights, train both models on them
(:mod:`velobins_eval.demo_sim`), then steps 2-3 on the held-out simulated flights.

``--out`` (default ``runs/main_job``) is locked while the demo runs; one that holds an earlier demo
run is refused unless ``--overwrite`` replaces it (``scripts/main_job.sh`` passes it, so the main
job stays re-runnable). Files there that the demo does not write are left alone.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

from velobins_common.outputs import Run, RunLayout, atomic_write_text, open_run_dir, output_mode

from . import metrics, report

LAYOUT = RunLayout(
    "demo",
    ("flights", "train", "bags", "graph", "offline", "metrics.json", "config.json", "report.md", "report.html"),
    resumable=False,
)
"""Every entry ``velobins demo`` writes in ``--out`` (what ``--overwrite`` removes)."""

DEMO_DATA = Path(__file__).resolve().parent / "demo_data" / "nanobench"
"""The shipped held-out NanoBench flights (BSD-3, attribution in its LICENSE)."""

SHIPPED = ("crazyflie", "crazyflie-reg")
"""Models the default demo replays (names of :func:`velobins_net.pretrained.resolve_model`)."""


def _step(title: str) -> float:
    print(f"\n\033[1m== {title}\033[0m", flush=True)
    return time.monotonic()


def open_demo_dir(out: Path, overwrite: bool) -> Run:
    """Lock ``out`` for the demo; refuse one holding an earlier demo run unless ``overwrite``.

    Returns the staged :class:`~velobins_common.outputs.Run` (a context manager): the demo writes into
    ``run.path`` and an earlier run is replaced only when the new one is complete (``run.commit()``).
    Raises :class:`OutputError` naming ``out``.
    """
    return open_run_dir(out, LAYOUT, output_mode(overwrite=overwrite))


def run_demo(args: argparse.Namespace, out: Path, models: dict) -> int:
    """The demo's steps into the locked, empty demo entries of ``out``."""
    from velobins_data.datasets import load_flight, load_flights
    from velobins_net.pretrained import ResolvedModel

    wall0 = time.monotonic()
    timings: dict[str, float] = {}
    if args.simulated:
        from .demo_sim import simulate_and_train

        trained = simulate_and_train(args, out, timings)
        if trained is None:
            return 1
        checkpoints, test_files = trained
        models = {label: ResolvedModel(path, None) for label, path in checkpoints.items()}
        seqs = [load_flight("csv", p) for p in test_files]
        what = f"{len(seqs)} held-out simulated flights"
    else:
        t = _step(f"1/3 shipped models and the flights of {args.data}")
        seqs = list(load_flights(args.dataset, args.data).sequences)
        for label, m in models.items():
            print(f"  {label:6s} {m.checkpoint}  (EKF overlay: {m.overlay or 'none'})")
        print("  flights: " + ", ".join(f"{s.name} ({s.duration:.0f} s)" for s in seqs))
        timings["load"] = time.monotonic() - t
        what = f"{len(seqs)} held-out real flights ({args.dataset}: {', '.join(s.name for s in seqs)})"
    step = "4/5" if args.simulated else "2/3"
    t = _step(f"{step} flights -> rosbag2 -> node graph at {args.rate:g}x (network, EKF, eval nodes)")
    graph_metrics, offline_records, imu_config, filters = replay(seqs, models, out, args.rate, args.skip_graph)
    timings["graph"] = time.monotonic() - t
    t = _step("5/5 report" if args.simulated else "3/3 report")
    text = finish(args, out, seqs, graph_metrics, offline_records, imu_config, timings, what, filters)
    timings["report"] = time.monotonic() - t
    timings["total"] = time.monotonic() - wall0

    def final(path: Path | None) -> str:  # where a file written here lies once the run is committed into --out
        inside = path is not None and Path(path).is_relative_to(out)
        return str(args.out / Path(path).relative_to(out) if inside else path)

    config = {
        "args": {k: str(v) for k, v in vars(args).items()},
        "models": {
            label: {"checkpoint": final(m.checkpoint), "overlay": final(m.overlay)} for label, m in models.items()
        },
        "timings_s": timings,
    }
    atomic_write_text(out / "config.json", json.dumps(config, indent=1))
    print(f"\n{text}\n")
    print("timings [s]: " + ", ".join(f"{k} {v:.0f}" for k, v in timings.items()))
    print(f"report: {args.out / 'report.md'}, plots: {args.out / 'offline' / 'plots'} and {args.out / 'graph'}")
    return 0


def replay(seqs: list, models: dict, out: Path, rate: float, skip_graph: bool) -> tuple[dict, dict, object, dict]:
    """Each flight as a bag through the node graph once per model, and offline with the same files.

    ``models`` maps a report label to a :class:`~velobins_net.pretrained.ResolvedModel`; its overlay
    (if any) is loaded after the shipped parameter files by the nodes and by the offline scoring.
    Returns (graph metrics ``{label: {flight: metrics}}``, offline records ``{label: {flight:
    record}}``, the EKF config of the first model for the IMU-only baseline, the filter parameters of
    each row for the report).
    """
    from velobins_data.bag import write_bag
    from velobins_net.inference import load_predictor_config

    from .evaluate import evaluate_checkpoint, filter_summary, load_ekf_config, model_params
    from .graph import run_graph

    graph_metrics: dict[str, dict[str, dict[str, float]]] = {label: {} for label in models}
    offline_records: dict[str, dict] = {}
    configs = {}
    filters = {}
    for label, m in models.items():
        files, why = model_params(m.overlay, [])
        configs[label] = load_ekf_config(files)
        predictor = load_predictor_config(files)
        filters[label] = filter_summary(files, why, configs[label], predictor)
        _, offline_records[label] = evaluate_checkpoint(
            m.checkpoint, seqs, configs[label], progress=False, predictor_config=predictor
        )
    for seq in seqs:
        bag_path = out / "bags" / seq.name
        write_bag(seq, bag_path)
        for label, m in models.items():
            if skip_graph:
                continue
            run = run_graph(
                bag_path,
                m.checkpoint,
                out / "graph" / label / seq.name,
                rate=rate,
                label=label,
                flight=seq.name,
                timeout=60 + 3 * seq.duration / rate,
                params_files=[m.overlay] if m.overlay else None,
            )
            if not run.metrics:
                raise RuntimeError(f"graph run {label}/{seq.name} wrote no report; logs in {run.report_dir}")
            graph_metrics[label][seq.name] = run.metrics[label]["flights"][seq.name]
            stats = json.loads((run.report_dir / "config.json").read_text())["graph"]
            print(
                f"  {seq.name:22s} {label:6s} graph {run.wall_s:5.1f} s wall, {stats['estimates']} estimates, "
                f"odometry {stats['odometry_rate_hz']:.1f} Hz, ATE {graph_metrics[label][seq.name]['ate']:.3f} m"
            )
    first = next(iter(filters))
    filters["imu-only"] = filter_summary(
        filters[first]["params"], f"{filters[first]['source']} of {first}; no updates", configs[first]
    )
    return graph_metrics, offline_records, configs[first], filters


def finish(
    args: argparse.Namespace,
    out: Path,
    seqs: list,
    graph_metrics: dict,
    offline_records: dict,
    imu_config: object,
    timings: dict[str, float],
    what: str,
    filters: dict | None = None,
) -> str:
    """Write ``offline/``, ``metrics.json``, ``report.md`` and ``report.html``; return the tables printed at the end.

    The model rows come from the graph runs (offline when ``--skip-graph``); IMU-only is offline,
    with the EKF config of the first model's overlay.
    """
    from .evaluate import imu_only_flight
    from .report_html import write_html
    from .scoring import GroundTruth, score

    first = next(iter(offline_records.values()))
    offline_records = {
        **offline_records,
        "imu-only": {s.name: imu_only_flight(s, first[s.name].t, imu_config) for s in seqs},
    }
    gts = {s.name: GroundTruth.of(s) for s in seqs}
    offline_table = report.write_report(
        offline_records, gts, out / "offline", {"source": "offline"}, filters=filters, title="VeloBins demo, offline"
    )
    doc = json.loads((out / "offline" / "metrics.json").read_text())
    for d in doc.values():
        d["source"] = "offline"
    if not args.skip_graph:
        for label, flights in graph_metrics.items():
            per_flight = {f: metrics.FlightMetrics(**{k: _nan(v) for k, v in m.items()}) for f, m in flights.items()}
            doc[label] = {"aggregate": report.aggregate(per_flight), "flights": flights, "source": "ros graph"}
    rows = {m: {k: _nan(v) for k, v in d["aggregate"].items()} for m, d in doc.items()}
    table = report.markdown_table(rows, len(seqs))
    flights_table = report.per_flight_table(doc, [s.name for s in seqs])
    source = "offline (--skip-graph)" if args.skip_graph else f"the ROS graph (replay at {args.rate:g}x)"
    atomic_write_text(out / "metrics.json", json.dumps(doc, indent=1))
    head = f"{what}; VeloBins and reg rows from {source}, imu-only offline (same EKF, no updates)."
    graph_files = "" if args.skip_graph else " and `graph/<model>/<flight>/` (the eval node's recording of each run)"
    params = f"\n\n## Filter parameters per row\n\n{report.filters_markdown(filters)}" if filters else ""
    atomic_write_text(
        out / "report.md",
        f"# VeloBins main job\n\n{head}\n\n{table}\n\n## Per flight\n\n{flights_table}{params}\n\n"
        f"## Offline (same flights, same code paths)\n\n{offline_table}\n\n"
        f"Interactive report: `report.html`. Trajectories (TUM), per-update records (CSV) and MCAP recordings: "
        f"`offline/estimates/<flight>/<method>/`{graph_files}.\n",
    )
    scored = {m: {f: score(r, gts[f]) for f, r in recs.items()} for m, recs in offline_records.items()}
    figures_note = "Figures and per-flight tables: offline (same flights, same code paths)."
    write_html(out / "report.html", offline_records, gts, scored, rows, "VeloBins main job", [head, figures_note])
    return f"{table}\n\n{flights_table}"


def _nan(x: float | None) -> float:
    return math.nan if x is None else float(x)
