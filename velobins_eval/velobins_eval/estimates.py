"""Estimates on disk: TUM trajectories and the per-update record (CSV), written by every evaluation, read by
``velobins score`` (docs/metrics.md "Files").

* **TUM** (``estimate.tum``, ``ground_truth.tum``): one pose per line, ``timestamp tx ty tz qx qy qz qw``
  (stamp [s], position [m] in the world frame, body->world quaternion), space separated, ``#`` comments:
  the format of the TUM RGB-D benchmark that ``evo`` reads (``evo_ape tum ground_truth.tum estimate.tum``).
  The estimate holds the fused pose right after each velocity update (the samples every metric uses),
  the ground truth is interpolated at the same stamps (linear position, slerp orientation).
* **Per-update record** (``updates.csv``): one row per update, the columns of :data:`RECORD_COLUMNS`.

Numbers are written with Python's shortest round-trip ``repr``, so a file read back gives the
arrays bit for bit and re-scoring it gives the report's numbers exactly. Readers check every
value and name the file, the column and the first bad row (:class:`EstimateError`).
"""

from __future__ import annotations

import gzip
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from velobins_common.errors import UserError
from velobins_common.outputs import atomic_write_text
from velobins_data.datasets.errors import DatasetError

from . import metrics
from .scoring import FlightRecord

TUM_COLUMNS = ("timestamp", "tx", "ty", "tz", "qx", "qy", "qz", "qw")
"""Columns of a TUM trajectory line."""

RECORD_COLUMNS: dict[str, str] = {
    "t": "update stamp [s] (the flight's clock)",
    "px,py,pz": "fused position right after the update, world frame [m]",
    "qx,qy,qz,qw": "fused orientation, body->world quaternion",
    "vx,vy,vz": "fused velocity, world frame [m/s]",
    "v_cov_xx,v_cov_xy,v_cov_xz,v_cov_yx,v_cov_yy,v_cov_yz,v_cov_zx,v_cov_zy,v_cov_zz": "covariance of the fused "
    "world velocity, row-major [m²/s²]",
    "net_vx,net_vy,net_vz": "network velocity, body frame [m/s] (empty: the method has none)",
    "net_var_x,net_var_y,net_var_z": "network variance per body axis [m²/s²]",
    "gt_px,gt_py,gt_pz": "ground-truth position at t, world frame [m] (linear interpolation)",
    "gt_qx,gt_qy,gt_qz,gt_qw": "ground-truth orientation at t, body->world (slerp)",
    "gt_vx,gt_vy,gt_vz": "ground-truth velocity at t, world frame [m/s]",
    "nees": "NEES of the fused velocity, (v - v_gt)ᵀ Σ⁻¹ (v - v_gt), 3 dof (empty without a covariance)",
}
"""Column groups of ``updates.csv`` and their meaning; the header lists them in this order."""

GROUPS: dict[str, tuple[str, ...]] = {group: tuple(group.split(",")) for group in RECORD_COLUMNS}
REQUIRED = ("t", "px,py,pz")
"""Column groups a CSV estimate must have for ``velobins score``; every other group is optional, whole or absent."""


class EstimateError(DatasetError):
    """An estimate or ground-truth file cannot be read: names the file, the column and the first bad row."""


@dataclass
class Trajectory:
    """Stamped poses: (N,) stamps [s], (N, 3) world positions [m], (N, 4) body->world quaternions (x, y, z, w)."""

    t: np.ndarray
    p: np.ndarray
    q: np.ndarray


def _text(rows: np.ndarray) -> str:
    """Rows of floats as lines of space-separated shortest round-trip ``repr`` s ('' for NaN)."""
    return "\n".join(" ".join("" if math.isnan(x) else repr(x) for x in row) for row in rows.tolist())


# ---------------------------------------------------------------------------------- TUM
def write_tum(path: str | Path, t: np.ndarray, p: np.ndarray, q: np.ndarray, comment: str = "") -> None:
    """Write a TUM trajectory file atomically (module docstring); ``comment`` lines go first, prefixed ``#``."""
    rows = np.column_stack([np.asarray(t, dtype=np.float64), p, q])
    if not np.all(np.isfinite(rows)):
        raise UserError(f"{path}: a TUM trajectory holds finite poses only")
    head = "".join(f"# {line}\n" for line in comment.splitlines()) + "# " + " ".join(TUM_COLUMNS) + "\n"
    atomic_write_text(path, head + _text(rows) + "\n")


def _lines(path: Path) -> list[str]:
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt", encoding="utf-8") as fh:  # type: ignore[operator]
            return fh.read().splitlines()
    except UnicodeDecodeError:
        raise EstimateError(path, "<file>", "not a text file") from None


def check_stamps(path: Path, t: np.ndarray) -> None:
    """Raise :class:`EstimateError` unless the stamps are finite and strictly increasing (naming the row)."""
    bad = ~np.isfinite(t)
    if bad.any():
        raise EstimateError(path, "t", "stamp is not a finite number", int(np.argmax(bad)))
    if t.size < 2:
        raise EstimateError(path, "t", f"need at least 2 poses, found {t.size}")
    step = np.diff(t) <= 0
    if step.any():
        row = int(np.argmax(step)) + 1
        raise EstimateError(path, "t", f"stamps must increase strictly ({t[row - 1]!r} then {t[row]!r})", row)


def read_tum(path: str | Path) -> Trajectory:
    """Read a TUM trajectory (space or comma separated, ``#`` comments, blank lines skipped).

    The quaternions are normalised; a zero or non-finite one, a line without 8 numbers or stamps
    that do not increase raise :class:`EstimateError` naming the line.
    """
    path = Path(path)
    rows: list[list[float]] = []
    for number, line in enumerate(_lines(path), start=1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        parts = text.replace(",", " ").split()
        if len(parts) != 8:
            raise EstimateError(
                path,
                "<line>",
                f"line {number}: expected 8 numbers ({' '.join(TUM_COLUMNS)}), found {len(parts)}",
                len(rows),
            )
        try:
            rows.append([float(x) for x in parts])
        except ValueError:
            raise EstimateError(path, "<line>", f"line {number}: not a number in {text[:60]!r}", len(rows)) from None
    if not rows:
        raise EstimateError(path, "<file>", "no pose lines (TUM: timestamp tx ty tz qx qy qz qw)")
    arr = np.array(rows)
    t = arr[:, 0]
    check_stamps(path, t)
    return Trajectory(t, _finite_block(path, arr[:, 1:4], "tx"), _unit_quaternions(path, arr[:, 4:8], "qx"))


def _finite_block(path: Path, block: np.ndarray, column: str) -> np.ndarray:
    bad = ~np.all(np.isfinite(block), axis=1)
    if bad.any():
        raise EstimateError(path, column, "value is not a finite number", int(np.argmax(bad)))
    return block


def _unit_quaternions(path: Path, q: np.ndarray, column: str) -> np.ndarray:
    norm = np.linalg.norm(_finite_block(path, q, column), axis=1)
    bad = norm < 1e-9
    if bad.any():
        raise EstimateError(path, column, "quaternion of zero length", int(np.argmax(bad)))
    if np.allclose(norm, 1.0, rtol=0.0, atol=1e-15):
        return q  # already unit: kept bit for bit (a file written here reads back unchanged)
    return q / norm[:, None]


# ---------------------------------------------------------------------------------- per-update record
def write_record_csv(path: str | Path, record: FlightRecord, at: metrics.GroundTruthAt, nees: np.ndarray) -> None:
    """Write ``updates.csv`` (:data:`RECORD_COLUMNS`) of one record with its ground truth ``at`` the update stamps."""
    u = record.t.size
    q = record.q_fused if record.q_fused is not None else np.full((u, 4), np.nan)
    rows = np.column_stack(
        [
            record.t,
            record.p_fused,
            q,
            record.v_fused,
            np.asarray(record.cov_fused).reshape(u, 9),
            record.v_net,
            record.var_net,
            at.p,
            at.q,
            at.v,
            nees,
        ]
    )
    header = ",".join(c for group in RECORD_COLUMNS for c in GROUPS[group])
    atomic_write_text(path, header + "\n" + _text(rows).replace(" ", ",") + "\n")


def read_csv_table(path: str | Path) -> tuple[list[str], np.ndarray]:
    """Header and (N, C) float array of a comma-separated file (``#`` lines skipped, empty cells NaN)."""
    path = Path(path)
    lines = [line for line in _lines(path) if line.strip() and not line.lstrip().startswith("#")]
    if not lines:
        raise EstimateError(path, "<file>", "empty file (a header line then one row per sample)")
    header = [c.strip() for c in lines[0].split(",")]
    data = np.empty((len(lines) - 1, len(header)))
    for row, line in enumerate(lines[1:]):
        cells = line.split(",")
        if len(cells) != len(header):
            raise EstimateError(path, "<row>", f"{len(cells)} cells, the header has {len(header)}", row)
        for col, cell in enumerate(cells):
            cell = cell.strip()
            try:
                data[row, col] = float(cell) if cell else math.nan
            except ValueError:
                raise EstimateError(path, header[col], f"not a number: {cell[:30]!r}", row) from None
    return header, data


def read_record_csv(path: str | Path, flight: str, method: str) -> FlightRecord:
    """A :class:`FlightRecord` from an ``updates.csv`` (or a user's CSV with the same column names).

    ``t`` and ``px,py,pz`` are required; each other group of :data:`RECORD_COLUMNS` is read when all
    its columns are present (NaN otherwise); ``gt_*`` and ``nees`` are ignored (ground truth comes
    from the flight). Raises :class:`EstimateError` for a missing required column, a partial group,
    a non-finite stamp, position or orientation, or stamps that do not increase.
    """
    path = Path(path)
    header, data = read_csv_table(path)
    index = {name: i for i, name in enumerate(header)}
    n = data.shape[0]

    def group(name: str, required: bool = False) -> np.ndarray | None:
        cols = GROUPS[name]
        have = [c for c in cols if c in index]
        if not have and not required:
            return None
        if len(have) != len(cols):
            missing = next(c for c in cols if c not in index)
            raise EstimateError(path, missing, f"missing column (the group {name} is read whole; header: {header})")
        return data[:, [index[c] for c in cols]]

    t = group("t", True)[:, 0]
    check_stamps(path, t)
    p = _finite_block(path, group("px,py,pz", True), "px")
    q = group("qx,qy,qz,qw")
    nan3 = np.full((n, 3), np.nan)
    v = group("vx,vy,vz")
    cov = group(next(g for g in GROUPS if g.startswith("v_cov")))
    v_net, var_net = group("net_vx,net_vy,net_vz"), group("net_var_x,net_var_y,net_var_z")
    q = _unit_quaternions(path, q, "qx") if q is not None else None
    return FlightRecord(
        flight=flight,
        method=method,
        t=t,
        v_net=v_net if v_net is not None else nan3,
        var_net=var_net if var_net is not None else nan3,
        p_fused=p,
        v_fused=v if v is not None else nan3,
        cov_fused=cov.reshape(n, 3, 3) if cov is not None else np.full((n, 3, 3), np.nan),
        t_traj=t,
        p_traj=p,
        q_fused=q,
        q_traj=q,
        v_traj=v,
    )


def record_of_trajectory(traj: Trajectory, flight: str, method: str) -> FlightRecord:
    """A pose-only :class:`FlightRecord` (a TUM file): no velocity, covariance or network columns."""
    n = traj.t.size
    nan3 = np.full((n, 3), np.nan)
    return FlightRecord(
        flight,
        method,
        traj.t,
        nan3,
        nan3,
        traj.p,
        nan3,
        np.full((n, 3, 3), np.nan),
        traj.t,
        traj.p,
        q_fused=traj.q,
        q_traj=traj.q,
    )


# ---------------------------------------------------------------------------------- per flight and method
ESTIMATES_DIR = "estimates"
"""Folder of a report holding ``<flight>/<method>/`` with the files of :func:`write_flight_estimates`."""


def slug(label: str) -> str:
    """A method label as a folder name: letters, digits and ``.+-`` kept, else ``_`` (``G+H^B`` -> ``G+H_B``)."""
    text = "".join(c if c.isalnum() or c in ".+-" else "_" for c in label).strip("._")
    return text or "method"


def write_flight_estimates(directory: Path, record: FlightRecord, gt, write_mcap: bool = True) -> list[str]:
    """Write one record's files into ``directory``: ``estimate.tum``, ``ground_truth.tum``, ``updates.csv`` and the
    MCAP recording ``recording/`` (:mod:`velobins_eval.recording`); return their names.

    ``gt`` is the flight's :class:`~velobins_eval.scoring.GroundTruth` (full rate, for the recording);
    the TUM ground truth and the CSV's ``gt_*`` columns are it interpolated at the update stamps.
    """
    from .recording import write_recording
    from .scoring import nees_series

    directory.mkdir(parents=True, exist_ok=True)
    at = gt.at(record.t)
    nees = nees_series(record, at)
    names = ["ground_truth.tum", "updates.csv"]
    label = f"flight {record.flight}, method {record.method}"
    write_tum(directory / "ground_truth.tum", record.t, at.p, at.q, f"ground truth of {label} at the update stamps")
    if record.q_fused is not None and np.all(np.isfinite(record.q_fused)):
        write_tum(directory / "estimate.tum", record.t, record.p_fused, record.q_fused, f"estimate of {label}")
        names.insert(0, "estimate.tum")
    write_record_csv(directory / "updates.csv", record, at, nees)
    if write_mcap:
        write_recording(directory / "recording", record, gt, nees)
        names.append("recording")
    return names


def write_estimates(out_dir: Path, records: dict[str, dict[str, FlightRecord]], gts: dict, write_mcap: bool = True):
    """:func:`write_flight_estimates` for every method and flight under ``out_dir/estimates/<flight>/<method>``.

    Returns the index ``{method: {flight: folder relative to out_dir}}`` (method folders are :func:`slug` s,
    made unique with a numeric suffix when two labels give the same one).
    """
    folders: dict[str, str] = {}
    for method in records:
        name, k = slug(method), 2
        while name in folders.values():
            name, k = f"{slug(method)}-{k}", k + 1
        folders[method] = name
    index: dict[str, dict[str, str]] = {}
    for method, recs in records.items():
        for flight, record in recs.items():
            rel = Path(ESTIMATES_DIR) / slug(flight) / folders[method]
            write_flight_estimates(out_dir / rel, record, gts[flight], write_mcap)
            index.setdefault(method, {})[flight] = str(rel)
    return index
