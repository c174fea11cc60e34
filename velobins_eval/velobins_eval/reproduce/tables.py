"""The Markdown tables of a reproduction report: Table II / III, the bin sweep, the main-table layout.

Cells, the best-per-column rule and the table layout are :mod:`velobins_eval.report`'s (the
``metrics.md`` of ``velobins evaluate``); these tables add ``± std`` over seeds and give the NLL two
decimals (:data:`DIGITS`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from velobins_data.datasets.nanobench import TRAJECTORY_SHAPES, trajectory_shape

from ..report import HEADERS, Cells, best_label, format_value, render_table
from ..scoring import nanmean
from .plan import HEADLINE, IMU_ONLY, REGRESSION
from .summary import RowSummary

DIGITS = {"net_nll": 2}
"""Decimals of a column where not 3 (the NLL, in nats, to 0.01)."""
SHAPE_METHODS = {"IMU-only": IMU_ONLY, "Reg": REGRESSION, "VeloBins": HEADLINE}
"""Columns of the main-table layout (Table I of the paper) -> metrics.json rows."""
SHAPE_KEYS = ("ave", "rte", "ate")


def cell(key: str, value: float, std: float | None = None) -> str:
    """One table cell of these tables (``value ± std``; NaN: ``—``)."""
    return format_value(key, value, std, DIGITS.get(key, 3))


def table(rows: Mapping[str, Cells], keys: Iterable[str]) -> str:
    """Markdown table: label -> (values, std or None); best per column in bold."""
    return render_table(rows, keys, HEADERS, DIGITS)


def row_cells(rows: dict[str, RowSummary], name: str) -> Cells:
    """Table cells of one row: its mean over seeds and its std over seeds (None for one seed)."""
    return rows[name].mean, rows[name].std


def shape_table(rows: dict[str, RowSummary], columns: Mapping[str, str] = SHAPE_METHODS) -> str:
    """The main-table layout (paper Table I): rows per trajectory shape (× count), AVE/RTE/ATE per method.

    ``columns``: column label -> metrics.json row (those present are shown, in this order).

    Per-shape cells are the mean over the shape's flights, averaged over seeds; the AVG row is the
    aggregate (mean ± std over seeds). Best method per row and metric in bold.
    """
    methods = {label: rows[name] for label, name in columns.items() if name in rows}
    flights = list(next(iter(methods.values())).flights)
    shapes = [s for s in TRAJECTORY_SHAPES if any(trajectory_shape(f) == s for f in flights)]
    lines = [
        "| shape | " + " | ".join(f"{m} {k.upper()}" for m in methods for k in SHAPE_KEYS) + " |",
        "|---|" + "---|" * (len(methods) * len(SHAPE_KEYS)),
    ]

    def line(label: str, cells: dict[tuple[str, str], tuple[float, float | None]]) -> str:
        best = {k: best_label({m: cells[m, k][0] for m in methods}, k) for k in SHAPE_KEYS}
        texts = []
        for m in methods:
            for k in SHAPE_KEYS:
                text = cell(k, *cells[m, k])
                texts.append(f"**{text}**" if best[k] == m and text != "—" else text)
        return f"| {label} | " + " | ".join(texts) + " |"

    for shape in shapes:
        names = [f for f in flights if trajectory_shape(f) == shape]
        cells = {
            (m, k): (nanmean(nanmean(getattr(res[f], k) for f in names) for res in row.seed_flights.values()), None)
            for m, row in methods.items()
            for k in SHAPE_KEYS
        }
        lines.append(line(f"{shape} ×{len(names)}", cells))
    avg = {(m, k): (row.mean[k], (row.std or {}).get(k)) for m, row in methods.items() for k in SHAPE_KEYS}
    lines.append(line(f"**AVG** ×{len(flights)}", avg))
    return "\n".join(lines)
