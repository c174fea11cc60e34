"""Items 31-38 of README.md: the figures of ``flow.sh`` runs, grouped, with each group's mean and Welch's t.

Reads ``<flows>/<name>/eval_val/metrics.json`` for every flow whose name matches a group's glob, prints network
AVE / fused AVE / NEES share in the 95 % bounds / fused NLL per flow and each group's mean, and for every group
after the first its difference to the first with Welch's t and two-sided p (unequal variances: the groups are
different methods, not paired seeds). Runs whose files an earlier stop lost can join a group by their published
figures (``--prior GROUP=AVE/FUSED/SHARE``, the share in per cent; their fused NLL is then not counted). With
``--paired`` every group is the reference's flows again with one setting changed (item 40: the same checkpoints with
the axis factors), matched in name order: the mean of the differences, the paired t and p, and in how many pairs
the group is ahead (lower AVE and NLL, higher share). Usage:

    python flows_table.py runs/recipe38/flow reg='n8_reg_5min_s*' pair='n8_pair*' \
        --prior reg=0.188/0.207/86.3 --prior pair=0.198/0.214/87.1
    python flows_table.py --paired runs/recipe38/flow pair='n8_pair[0-9]*[0-9]' axes='n8_pair*_axes'
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from scipy import stats

FIGURES = (
    ("network AVE", "net_ave", "{:.3f}"),
    ("fused AVE", "ave", "{:.3f}"),
    ("NEES in 95 %", "nees_in_bounds", "{:.1%}"),
    ("fused NLL", "fused_nll", "{:.3f}"),
)
"""(name, ``metrics.json`` aggregate key, format)."""


def flow_figures(folder: Path) -> list[float] | None:
    """The figures of one flow's evaluation on val, or None where it has not finished."""
    metrics = folder / "eval_val" / "metrics.json"
    if not metrics.exists():
        return None
    aggregate = next(iter(json.loads(metrics.read_text()).values()))["aggregate"]
    return [float(aggregate[key]) if aggregate.get(key) is not None else math.nan for _, key, _ in FIGURES]


def welch(a: list[float], b: list[float]) -> tuple[float, float]:
    """Welch's t of mean(b) − mean(a) and its two-sided p; NaN with fewer than two values in either."""
    if len(a) < 2 or len(b) < 2:
        return math.nan, math.nan
    result = stats.ttest_ind(b, a, equal_var=False)
    return float(result.statistic), float(result.pvalue)


def paired(a: list[float], b: list[float], higher_better: bool) -> str:
    """The differences b − a pair by pair: their mean, paired t and two-sided p, and how many favour b."""
    diffs = [y - x for x, y in zip(a, b, strict=True)]
    ahead = sum(d > 0 if higher_better else d < 0 for d in diffs)
    test = stats.ttest_rel(b, a) if len(diffs) > 1 else None
    t = f", t {test.statistic:+.2f}, p {test.pvalue:.2f}" if test is not None else ""
    return f"Δ {sum(diffs) / len(diffs):+.4f}{t}, ahead in {ahead} of {len(diffs)}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("flows", type=Path, help="the study's flow folder (flow.sh's STUDY/flow)")
    p.add_argument("groups", nargs="+", help="LABEL=GLOB over the flow names; the first is the reference")
    p.add_argument("--prior", action="append", default=[], help="LABEL=AVE/FUSED/SHARE of a run not on disk")
    p.add_argument("--paired", action="store_true", help="groups are the reference's flows, matched in name order")
    args = p.parse_args(argv)
    groups: dict[str, list[list[float]]] = {}
    for spec in args.groups:
        label, pattern = spec.split("=", 1)
        rows = groups.setdefault(label, [])
        for folder in sorted(args.flows.glob(pattern)):
            figures = flow_figures(folder)
            if figures is None:
                print(f"{label} {folder.name}: not finished")
                continue
            rows.append(figures)
            text = " / ".join(fmt.format(x) for x, (_, _, fmt) in zip(figures, FIGURES, strict=True))
            print(f"{label} {folder.name}: {text}")
    for spec in args.prior:
        label, values = spec.split("=", 1)
        ave, fused, share = (float(v) for v in values.split("/"))
        groups.setdefault(label, []).append([ave, fused, share / 100, math.nan])
        print(f"{label} (published): {ave:.3f} / {fused:.3f} / {share:.1f}%")
    reference = next(iter(groups))
    for label, rows in groups.items():
        cells = []
        for i, (name, _, fmt) in enumerate(FIGURES):
            values = [r[i] for r in rows if not math.isnan(r[i])]
            if not values:
                cells.append(f"{name} —")
                continue
            cell = f"{name} {fmt.format(sum(values) / len(values))} (n {len(values)})"
            if label != reference and args.paired:
                if len(rows) != len(groups[reference]):
                    raise SystemExit(f"--paired: {label} has {len(rows)} flows, {reference} {len(groups[reference])}")
                cell += ", " + paired([r[i] for r in groups[reference]], [r[i] for r in rows], name == "NEES in 95 %")
            elif label != reference:
                ref = [r[i] for r in groups[reference] if not math.isnan(r[i])]
                t, pvalue = welch(ref, values)
                cell += f", t {t:+.2f}, p {pvalue:.2f}"
            cells.append(cell)
        print(f"{label}: " + "; ".join(cells))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
