"""``<out>/<split>/``: ``metrics.json``, ``report.md``, ``figures/`` and ``estimates/`` of one evaluation split.

``estimates/<flight>/<method>/`` holds the seed-0 Table I methods' and IMU-only's TUM trajectories,
``updates.csv`` and MCAP recording (:func:`velobins_eval.estimates.write_flight_estimates`).

``report.md`` holds Table II, Table III, the bin sweep, the main-table layout by trajectory
shape, the NEES figure, "Paper vs measured" with its hand-written Discussion (kept across
re-renders by :func:`keep_discussion`), "How this differs from the paper" and the trajectories
(sections described in docs/reproduce.md). Every file is written atomically.
"""

from __future__ import annotations

from pathlib import Path

from velobins_common.outputs import atomic_write_text
from velobins_data.datasets.nanobench import TRAJECTORY_SHAPES, trajectory_shape

from .. import metrics
from ..estimates import write_estimates
from ..report import KEYS, write_metrics_json
from ..scoring import ALL_KEYS, GroundTruth
from .figures import bins_figure, methods_figure, nees_figure, trajectory_figures
from .given import filters_section
from .paper import differences_paragraph, paper_vs_measured, table1_vs_paper
from .plan import (
    BASELINE_ROWS,
    HEADLINE,
    IMU_ONLY,
    REGRESSION,
    TABLE1_COLUMNS,
    TABLE2_ROWS,
    TABLE3_ROWS,
    TABLES,
    Schedule,
    sweep_bins,
    sweep_row,
)
from .summary import SplitOutcome, metrics_document
from .tables import row_cells, shape_table, table

TABLE1_NOTE = (
    "EKF-fused, filter started from ground truth, no alignment; per shape the mean over its flights, AVG the "
    "mean over all (± std over seeds for AI-IO and VeloBins). TLIO, EqNIO, IMO and AirIO read the filter's "
    "attitude, so network and filter run as one loop (velobins_eval.closed_loop); TLIO, EqNIO and IMO are fused "
    "as displacements against a clone of the window start (stochastic cloning), AirIO, AI-IO and VeloBins as "
    "body velocities. How each baseline follows its paper, and where it cannot: docs/design.md, 'Baselines'."
)


def table1_section(outcome: SplitOutcome) -> list[str]:
    """Table I: the six methods by trajectory shape, the paper's AVG beside ours, the per-method figure."""
    rows = outcome.rows
    return [
        "## Table I — methods (EKF-fused AVE / RTE / ATE by trajectory shape)",
        "",
        shape_table(rows, TABLE1_COLUMNS),
        "",
        TABLE1_NOTE,
        "",
        "### Against the paper (NanoBench AVG; paper: test split)",
        "",
        table1_vs_paper(rows, TABLE1_COLUMNS),
        "",
        "![methods](figures/methods.png)",
        "",
    ]


def render_report(
    outcome: SplitOutcome,
    schedule_name: str,
    schedule: Schedule,
    flights: dict[str, int],
    tables: tuple[str, ...] = TABLES,
) -> str:
    """report.md of one split (sections named in the module docstring of the docs, docs/reproduce.md);
    the sections of ``tables`` only (Tables II and III and the bin sweep need their trainings)."""
    rows = outcome.rows
    n = len(outcome.seqs)
    cells = {name: row_cells(rows, name) for name in (*TABLE2_ROWS, IMU_ONLY) if name in rows}
    t3_keys = ("net_ave", "net_nll", "ave", "rte", "ate")
    t3 = {"Reg.": row_cells(rows, REGRESSION)} | {
        label: row_cells(rows, name) for label, name in TABLE3_ROWS.items() if name in rows
    }
    sweep = sweep_bins(schedule)
    sweep_cells = {f"N = {b}": row_cells(rows, sweep_row(b)) for b in sweep if sweep_row(b) in rows}
    sweep_cells["Reg."] = row_cells(rows, REGRESSION)
    seeds = ", ".join(map(str, schedule.seeds))
    head = [
        f"# VeloBins reproduction — NanoBench, `{outcome.name}` split ({n} flights)",
        "",
        f"Schedule `{schedule_name}`: {schedule.epochs} epoch(s), stride {schedule.stride}, seeds ({seeds}). "
        f"Rows `{REGRESSION}` and `{HEADLINE}` are mean ± std (ddof 1) over the seeds' aggregates (no ± for one "
        "seed); every other row is seed 0. Each aggregate is the mean over flights. Best per column in bold "
        f"(NEES median: closest to the ideal {metrics.NEES_IDEAL_MEDIAN:.3f}; in bounds: highest).",
        "",
    ]
    if tuple(tables) != TABLES:
        head += [f"Tables reproduced in this run: {', '.join(tables)}.", ""]
    if "I" in tables:
        head += table1_section(outcome)
    sections: dict[str, list[str]] = {}
    sections["II"] = [
        "## Table II — supervision ablation (network and EKF-fused)",
        "",
        table(cells, KEYS),
        "",
        "Net columns: the network alone (body frame); AVE/RTE/ATE: EKF-fused, filter started from ground truth, "
        f"no alignment; NEES: per update, 3 dof, bounds [{metrics.NEES_BOUNDS[0]:.3f}, {metrics.NEES_BOUNDS[1]:.3f}]. "
        "M and M+H rows: one model each (trained with the covariance decoder), evaluated with each source.",
        "",
    ]
    sections["III"] = [
        "## Table III — bin encoding (G+H^B)",
        "",
        table(t3, t3_keys),
        "",
        "The paper's Table III gives the raw network's RTE; here RTE and ATE are EKF-fused (the evaluation path "
        "of every other table).",
        "",
    ]
    sections["bins"] = [
        "## Bin resolution (G+H^B, seed 0 except N = 512)",
        "",
        table(sweep_cells, ("net_ave", "net_nll", "ave", "rte", "ate")),
        "",
        "![bin sweep](figures/bins.png)",
        "",
    ]
    body = [line for name, lines in sections.items() if name in tables for line in lines]
    if "I" not in tables:
        body += ["## Main-table layout by trajectory shape (EKF-fused)", "", shape_table(rows), ""]
    if outcome.given:
        given = {name: row_cells(rows, name) for name in (REGRESSION, HEADLINE, *outcome.given)}
        body += [
            "## Given checkpoints (--checkpoint) beside the trained rows",
            "",
            table(given, ALL_KEYS),
            "",
            "Each given checkpoint is one model (no seeds), scored by the code path of velobins evaluate with its "
            "filter parameters (below); the trained rows are this run's.",
            "",
        ]
    body += filters_section(outcome.filters)
    tail = [
        "## NEES",
        "",
        "![NEES](figures/nees.png)",
        "",
        "## Paper vs measured (NanoBench; paper: test split)",
        "",
        paper_vs_measured(rows),
        "",
        "## How this differs from the paper",
        "",
        differences_paragraph(schedule_name, schedule, flights, outcome.name),
        "",
        "## Trajectories",
        "",
        *[
            f"![{shape}](figures/trajectory_{shape}.png)"
            for shape in TRAJECTORY_SHAPES
            if any(trajectory_shape(s.name) == shape for s in outcome.seqs)
        ],
        "",
    ]
    return "\n".join(head + body + tail)


DISCUSSION_HEADING = "### Discussion\n"
DISCUSSION_PLACEHOLDER = "> **PLACEHOLDER"


def _discussion(report: str) -> tuple[int, int] | None:
    """Start and end offsets of the Discussion text (after its heading, up to the next section)."""
    start = report.find(DISCUSSION_HEADING)
    if start < 0:
        return None
    start += len(DISCUSSION_HEADING)
    end = report.find("\n## ", start)
    return start, len(report) if end < 0 else end + 1


def keep_discussion(new_report: str, old_report: str) -> str:
    """``new_report`` with the hand-written Discussion of ``old_report`` carried over.

    The Discussion is the one part of report.md a person writes; a resumed run re-renders the
    report, and must not lose it. An old report whose Discussion is still the placeholder (or
    that has none) changes nothing.
    """
    new_span, old_span = _discussion(new_report), _discussion(old_report)
    if new_span is None or old_span is None:
        return new_report
    text = old_report[old_span[0] : old_span[1]]
    if DISCUSSION_PLACEHOLDER in text:
        return new_report
    return new_report[: new_span[0]] + text + new_report[new_span[1] :]


def write_split(
    outcome: SplitOutcome,
    out_dir: Path,
    schedule_name: str,
    schedule: Schedule,
    flights: dict[str, int],
    tables: tuple[str, ...] = TABLES,
) -> None:
    """``metrics.json``, ``report.md``, ``figures/`` and ``estimates/`` of one split under ``out_dir`` (atomically).

    A hand-written Discussion in an existing report.md is kept (:func:`keep_discussion`).
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    figures = out_dir / "figures"
    nees_rows = (*BASELINE_ROWS, *TABLE2_ROWS)
    nees_figure({n: outcome.nees[n] for n in nees_rows if n in outcome.nees}, figures / "nees.png")
    if "bins" in tables:
        bins_figure(outcome.rows, sweep_bins(schedule), figures / "bins.png")
    trajectory_figures(outcome.records, outcome.seqs, figures)
    if "I" in tables and outcome.seqs:
        methods_figure(outcome.records, outcome.seqs[0], figures / "methods.png")
    write_metrics_json(out_dir / "metrics.json", metrics_document(outcome.rows))
    # per flight and method (seed 0 of the Table I methods, IMU-only): TUM, updates.csv, MCAP (docs/metrics.md)
    write_estimates(out_dir, outcome.records, {s.name: GroundTruth.of(s) for s in outcome.seqs})
    report = render_report(outcome, schedule_name, schedule, flights, tables)
    old = out_dir / "report.md"
    if old.is_file():
        kept = keep_discussion(report, old.read_text(encoding="utf-8"))
        if kept != report:
            print(f"{old}: kept its hand-written Discussion")
        report = kept
    atomic_write_text(old, report)
