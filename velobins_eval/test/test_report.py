"""The report pieces ``velobins evaluate`` and ``velobins reproduce`` share: cells, best rows, tables, metrics.json."""

from __future__ import annotations

import json
import math
from pathlib import Path

from velobins_eval.metrics import FlightMetrics
from velobins_eval.report import (
    KEYS,
    best_label,
    format_value,
    markdown_table,
    metrics_entry,
    render_table,
    write_metrics_json,
)
from velobins_eval.reproduce.tables import table


def test_cells_format_nan_percent_and_spread() -> None:
    assert format_value("ave", math.nan) == "—"
    assert format_value("ave", 0.12345) == "0.123"
    assert format_value("net_nll", -1.234, 0.0567, digits=2) == "-1.23 ± 0.06"
    assert format_value("nees_in_bounds", 0.731, 0.02) == "73.1% ± 2.0%"
    assert format_value("ave", 0.1, math.nan) == "0.100"  # no ± for an undefined spread


def test_best_row_rules() -> None:
    assert best_label({"a": 0.2, "b": 0.1}, "ave") == "b"
    assert best_label({"a": 0.6, "b": 0.7}, "nees_in_bounds") == "b"
    # NEES median: closest to the ideal 2.366 in log ratio; a zero median does not crash.
    assert best_label({"low": 0.0, "near": 2.0, "high": 9.0}, "nees_median") == "near"
    assert best_label({"a": 0.1, "b": math.nan}, "ave") is None  # one finite value: nothing to compare


def test_evaluate_and_reproduce_tables_share_one_renderer() -> None:
    agg = {"reg": dict.fromkeys(KEYS, 0.2) | {"net_nll": -0.5}, "G+H^B": dict.fromkeys(KEYS, 0.1)}
    md = markdown_table(agg, flights=3)
    assert md.startswith(render_table({m: (a, None) for m, a in agg.items()}, KEYS) + "\n\nMean over 3 flight(s).")
    assert "| reg | 0.200 | **-0.500** |" in md and "| G+H^B | **0.100** | 0.100 |" in md
    # reproduce's tables: the same layout, NLL to two decimals, ± std over seeds.
    repro = table({"reg": (agg["reg"], dict.fromkeys(KEYS, 0.01)), "G+H^B": (agg["G+H^B"], None)}, ("ave", "net_nll"))
    assert repro.splitlines()[2] == "| reg | 0.200 ± 0.010 | **-0.50 ± 0.01** |"


def test_metrics_json_entry(tmp_path: Path) -> None:
    fm = FlightMetrics(**dict.fromkeys(KEYS, 0.1234567) | {"nees_median": math.nan})
    entry = metrics_entry({"ave": 0.1234567, "rte": math.nan}, {"f1": fm})
    assert entry["aggregate"] == {"ave": 0.123457, "rte": None}
    assert entry["flights"]["f1"]["nees_median"] is None and entry["flights"]["f1"]["ate"] == 0.123457
    write_metrics_json(tmp_path / "metrics.json", {"m": entry})
    assert json.loads((tmp_path / "metrics.json").read_text()) == {"m": entry}
    assert not list(tmp_path.glob("*.tmp"))
