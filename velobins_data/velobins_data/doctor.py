"""``velobins check``: the dataset doctor, the first step for your own data.

For one flight file or a folder, every flight is loaded with its adapter *without* raising on
plausibility, inspected (:func:`velobins_data.validate.inspect_flight`) and shown as one table row:
duration, IMU and rotor rates, stamp gaps, dropped stamps, median |f|, gravity residual, speed and
rotor ranges, and a verdict:

* ``ok``      — every check passes;
* ``allowed`` — only checks named in ``--allow`` fail (the reason lists them);
* ``skip``    — no usable flight (too short, motors never on): training and evaluation skip it;
* ``FAIL``    — a check fails, or the adapter rejects the file (its message is the reason).

Exit status: 0 when no flight fails, 1 when one does (or none is usable), 2 for usage errors (bad
kind, missing path, a folder without flight files, unknown ``--allow`` name) with a one-line message.

The table is plain aligned text, not ``rich``: it stays the same in a terminal, a pipe and a CI log
(rich wraps or truncates wide tables to the console width when not on a terminal).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

from velobins_common.constants import ROTOR_COMMAND
from velobins_common.errors import printable
from velobins_common.outputs import atomic_write_text
from velobins_data.datasets import flight_files, guess_kind, load_flight
from velobins_data.datasets.errors import UnusableFlightError
from velobins_data.flight import FlightError
from velobins_data.validate import (
    DEFAULT_LIMITS,
    Finding,
    FlightInspection,
    PlausibilityLimits,
    inspect_flight,
    parse_allow,
)

VERDICTS = ("ok", "allowed", "skip", "FAIL")
"""Possible verdicts of a flight."""


@dataclass
class FlightReport:
    """One row of the doctor's table.

    Attributes:
        path: the flight file.
        label: how the row names it (path relative to the folder checked).
        verdict: one of :data:`VERDICTS`.
        reason: why (empty for ``ok``).
        inspection: the statistics, ``None`` when the adapter could not load the file.
    """

    path: Path
    label: str
    verdict: str
    reason: str
    inspection: FlightInspection | None = None


def _describe(f: Finding) -> str:
    row = f" row {f.row}" if f.row is not None else ""
    return f"{f.check} ({f.field}{row}): {f.message}"


def _error_text(exc: BaseException) -> str:
    """An adapter error on one line, without the repeated file path."""
    if isinstance(exc, FlightError):
        text = str(exc).removeprefix(f"{exc.source}: ").replace("field '<file>': ", "")
    else:
        text = f"{type(exc).__name__}: {exc}"
    return " ".join(text.split())


def check_file(
    kind: str, path: Path, label: str, allowed: frozenset[str], limits: PlausibilityLimits = DEFAULT_LIMITS
) -> FlightReport:
    """Load and inspect one flight; never raises for a bad file (the verdict says it)."""
    try:
        seq = load_flight(kind, path, validate=False)
    except UnusableFlightError as exc:
        return FlightReport(path, label, "skip", _error_text(exc))
    except Exception as exc:  # the doctor reports every file, whatever broke in its adapter
        reason = _error_text(exc)
        looks = guess_kind(path)
        if looks is not None and looks != kind:
            reason += f" (the file looks like --dataset {looks})"
        return FlightReport(path, label, "FAIL", reason)
    inspection = inspect_flight(seq, limits)
    blocking = inspection.blocking(allowed)
    if blocking is not None:
        others = [f.check for f in inspection.findings if f is not blocking and f.check not in allowed]
        more = f" (+{len(others)} more: {', '.join(others)})" if others else ""
        verdict = "FAIL" if blocking.fatal else "skip"
        return FlightReport(path, label, verdict, _describe(blocking) + more, inspection)
    if inspection.findings:
        reason = "; ".join(_describe(f) for f in inspection.findings)
        return FlightReport(path, label, "allowed", reason, inspection)
    return FlightReport(path, label, "ok", "", inspection)


def check_path(
    kind: str,
    path: str | Path,
    allow: tuple[str, ...] | list[str] = (),
    limits: PlausibilityLimits = DEFAULT_LIMITS,
    progress: bool = True,
) -> list[FlightReport]:
    """One :class:`FlightReport` per flight file of ``path`` (a file or a folder).

    Raises:
        DatasetError: ``path`` is missing or a folder holds no ``kind`` flight files.
        ValueError: unknown ``kind`` or check name.
    """
    from velobins_common.progress import progress_bar

    allowed = parse_allow(allow)
    root = Path(path)
    files = flight_files(kind, root)
    bar = progress_bar(files, enabled=progress and root.is_dir(), desc=f"checking {kind}", unit="file")
    return [
        check_file(kind, f, printable(f.relative_to(root) if root.is_dir() else f.name), allowed, limits) for f in bar
    ]


# ------------------------------------------------------------------------------------- output
_COLUMNS = (
    "flight", "duration [s]", "IMU [Hz]", "rotor [Hz]", "gaps (max)", "dropped",
    "median |f| [m/s²]", "g residual [m/s²]", "speed [m/s]", "rotor range", "verdict", "reason",
)  # fmt: skip


def _rotor_range(i: FlightInspection) -> str:
    lo, hi = i.rotor_range
    return f"{lo:.2f}-{hi:.2f} command" if i.rotor_kind == ROTOR_COMMAND else f"{lo:.0f}-{hi:.0f} rad/s"


def _cells(r: FlightReport) -> list[str]:
    i = r.inspection
    if i is None:
        return [r.label, *["-"] * 9, r.verdict, r.reason]
    residual = "n/a" if math.isnan(i.gravity_residual) else f"{i.gravity_residual:.2f}"
    return [
        r.label,
        f"{i.duration_s:.1f}",
        f"{i.imu_rate_hz:.0f}",
        f"{i.rotor_rate_hz:.0f}",
        f"{i.gaps} ({i.max_gap_s * 1e3:.0f} ms)",
        str(i.dropped_stamps),
        f"{i.median_specific_force:.2f}",
        residual,
        f"{i.speed_range[0]:.2f}-{i.speed_range[1]:.2f}",
        _rotor_range(i),
        r.verdict,
        r.reason,
    ]


def format_table(reports: list[FlightReport]) -> str:
    """The reports as a plain aligned text table (numbers right-aligned, reason last and unpadded)."""
    rows = [list(_COLUMNS), *(_cells(r) for r in reports)]
    widths = [max(len(row[c]) for row in rows) for c in range(len(_COLUMNS) - 1)]
    lines = []
    for n, row in enumerate(rows):
        cells = [
            cell.ljust(w) if c in (0, 10) or n == 0 else cell.rjust(w)
            for c, (cell, w) in enumerate(zip(row[:-1], widths, strict=True))
        ]
        lines.append("  ".join([*cells, row[-1]]).rstrip())
    return "\n".join(lines)


def summary(reports: list[FlightReport]) -> dict[str, int]:
    """Count of flights per verdict."""
    return {v: sum(r.verdict == v for r in reports) for v in VERDICTS}


def _jsonable(value: object) -> object:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


def json_report(kind: str, root: Path, allow: list[str], reports: list[FlightReport]) -> str:
    """Every statistic and finding of every flight as JSON text (NaN written as null)."""
    flights = [
        {"path": str(r.path), "flight": r.label, "verdict": r.verdict, "reason": r.reason}
        | ({"inspection": r.inspection.to_dict()} if r.inspection is not None else {})
        for r in reports
    ]
    doc = {
        "dataset": kind,
        "data": str(root),
        "allow": sorted(allow),
        "limits": asdict(DEFAULT_LIMITS),
        "summary": summary(reports),
        "flights": flights,
    }
    return json.dumps(_jsonable(doc), indent=1) + "\n"


def write_json(path: Path, kind: str, root: Path, allow: list[str], reports: list[FlightReport]) -> None:
    """:func:`json_report` written to the file ``path`` atomically."""
    atomic_write_text(path, json_report(kind, root, allow, reports))


# ------------------------------------------------------------------------------------- command
