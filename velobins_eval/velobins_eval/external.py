"""What ``velobins score`` reads: any method's estimate, and ground truth from a flight, a TUM or a EuRoC file.

Estimates (:func:`read_estimate`), each becoming a :class:`~velobins_eval.scoring.FlightRecord` scored with
the same metrics as the project's own runs (the columns a format cannot carry are NaN):

* ``tum`` — a TUM trajectory (``timestamp tx ty tz qx qy qz qw``): pose columns only;
* ``csv`` — a CSV with the column names of ``updates.csv`` (:data:`velobins_eval.estimates.RECORD_COLUMNS`):
  ``t, px, py, pz`` required, orientation, fused velocity and covariance, network velocity and variance
  optional; an ``updates.csv`` written by ``velobins evaluate`` gives back its whole row;
* ``bag`` — a ``nav_msgs/Odometry`` topic of a rosbag2 (mcap or sqlite3): pose, and the twist as the
  fused velocity (rotated to the world frame unless ``child_frame_id`` is the world frame, as on
  ``/velobins/ekf/update``) with its covariance when one is set (all zero means none).

Ground truth (:func:`read_ground_truth`): a flight in any ``--dataset`` format (its ground truth
fields; ``rosbag`` for the bags ``velobins convert`` writes or the vehicle records), ``tum`` (velocity
by central differences of the positions, :func:`numpy.gradient`), or ``euroc``
(``state_groundtruth_estimate0/data.csv``: stamps in ns, ``p_RS_R``, ``q_RS`` w first, ``v_RS_R``).

``velobins evaluate --ground-truth`` uses the same readers (:func:`read_ground_truths`: a file or a
folder of them, format from the header or the name) and puts the ground truth on the flight's clock
by the rules ``score`` applies to an estimate (:func:`on_flight_clock`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.spatial.transform import Rotation

from velobins_common.errors import UserError
from velobins_data.flight import Flight

from .estimates import EstimateError, check_stamps, read_record_csv, read_tum, record_of_trajectory
from .scoring import FlightRecord, GroundTruth

ESTIMATE_FORMATS = ("tum", "csv", "bag")
"""Formats of :func:`read_estimate`."""
GROUND_TRUTH_FORMATS = ("tum", "euroc")
"""Ground-truth file formats beside the dataset kinds (:data:`velobins_data.dataset_kinds.KINDS`)."""


def guess_estimate_format(path: Path) -> str:
    """``bag`` for a rosbag2 folder or an .mcap/.db3 file, ``csv`` for .csv(.gz), else ``tum``."""
    if path.is_dir() or path.suffix in (".mcap", ".db3"):
        return "bag"
    return "csv" if path.name.endswith((".csv", ".csv.gz")) else "tum"


def read_estimate(path: str | Path, fmt: str, flight: str, method: str, topic: str = "/velobins/odometry"):
    """The estimate in ``path`` as a :class:`FlightRecord` (module docstring); ``topic`` for a bag."""
    path = Path(path)
    if not path.exists():
        raise EstimateError(path, "<file>", "no such file or directory")
    if fmt == "tum":
        return record_of_trajectory(read_tum(path), flight, method)
    if fmt == "csv":
        return read_record_csv(path, flight, method)
    if fmt == "bag":
        return read_odometry_topic(path, topic, flight, method)
    raise ValueError(f"unknown estimate format {fmt!r}; expected one of {ESTIMATE_FORMATS}")


def read_odometry_topic(path: Path, topic: str, flight: str, method: str) -> FlightRecord:
    """The ``nav_msgs/Odometry`` messages of ``topic`` in a bag as a record (stamps from the headers)."""
    from velobins_data.bag import BagError, topic_messages

    rows: list[tuple] = []
    for msg in topic_messages(path, topic, "nav_msgs/msg/Odometry"):
        s = msg.header.stamp
        p, q = msg.pose.pose.position, msg.pose.pose.orientation
        v = msg.twist.twist.linear
        world = msg.child_frame_id == msg.header.frame_id
        cov = np.asarray(msg.twist.covariance, dtype=np.float64).reshape(6, 6)[:3, :3]
        rows.append((s.sec + s.nanosec * 1e-9, (p.x, p.y, p.z), (q.x, q.y, q.z, q.w), (v.x, v.y, v.z), world, cov))
    if len(rows) < 2:
        raise BagError(f"{path}: topic {topic} has {len(rows)} message(s); need at least 2")
    rows.sort(key=lambda r: r[0])
    t = np.array([r[0] for r in rows])
    check_stamps(path, t)
    p = np.array([r[1] for r in rows])
    q = np.array([r[2] for r in rows])
    norm = np.linalg.norm(q, axis=1)
    if np.any(norm < 1e-9) or not np.all(np.isfinite(p)):
        row = int(np.argmax((norm < 1e-9) | ~np.all(np.isfinite(p), axis=1)))
        raise BagError(f"{path}: topic {topic}: message {row} has a zero quaternion or a non-finite position")
    q = q / norm[:, None]
    rot = Rotation.from_quat(q)
    v = np.array([r[3] for r in rows])
    body = np.array([not r[4] for r in rows])
    v[body] = rot[body].apply(v[body])
    cov = np.array([r[5] for r in rows])
    if np.all(cov == 0.0):
        cov = np.full_like(cov, np.nan)
    else:
        mats = rot.as_matrix()
        cov[body] = mats[body] @ cov[body] @ mats[body].transpose(0, 2, 1)
    nan3 = np.full((t.size, 3), np.nan)
    return FlightRecord(flight, method, t, nan3, nan3, p, v, cov, t, p, q_fused=q, q_traj=q, v_traj=v)


# ---------------------------------------------------------------------------------- ground truth
@dataclass
class NamedGroundTruth:
    """Ground truth and the flight name it goes by in the report."""

    name: str
    truth: GroundTruth


def read_ground_truth(path: str | Path, fmt: str, allow: tuple[str, ...] = ()) -> NamedGroundTruth:
    """Ground truth from a flight file of dataset kind ``fmt`` (checked like every flight), or a TUM / EuRoC file."""
    path = Path(path)
    if fmt == "tum":
        traj = read_tum(path)
        v = np.gradient(traj.p, traj.t, axis=0)
        return NamedGroundTruth(_stem(path), GroundTruth(traj.t, traj.p, traj.q, v))
    if fmt == "euroc":
        return read_euroc(path)
    from velobins_data.datasets import load_flight

    flight = load_flight(fmt, path, allow=allow)
    return NamedGroundTruth(flight.name, GroundTruth.of(flight))


def _stem(path: Path) -> str:
    name = path.name
    for suffix in (".gz", ".tum", ".txt", ".csv"):
        name = name.removesuffix(suffix)
    return name


EUROC_FILE = "state_groundtruth_estimate0/data.csv"


def read_euroc(path: Path) -> NamedGroundTruth:
    """EuRoC MAV ground truth: ``data.csv`` of ``state_groundtruth_estimate0`` (or a folder holding it)."""
    if path.is_dir():
        found = sorted(path.rglob(EUROC_FILE))
        if not found:
            raise EstimateError(path, "<file>", f"no {EUROC_FILE} under this folder")
        path = found[0]
    lines = [line for line in path.read_text(encoding="utf-8", errors="replace").splitlines() if line.strip()]
    if not lines:
        raise EstimateError(path, "<file>", "empty file")
    header = [c.strip().lstrip("#").strip().split(" ")[0] for c in lines[0].split(",")]
    want = ["timestamp", "p_RS_R_x", "p_RS_R_y", "p_RS_R_z", "q_RS_w", "q_RS_x", "q_RS_y", "q_RS_z"]
    want += ["v_RS_R_x", "v_RS_R_y", "v_RS_R_z"]
    missing = [c for c in want if c not in header]
    if missing:
        raise EstimateError(path, missing[0], f"missing column (EuRoC ground truth; header: {header[:12]})")
    cols = [header.index(c) for c in want]
    data = np.empty((len(lines) - 1, len(want)))
    for row, line in enumerate(lines[1:]):
        cells = line.split(",")
        try:
            data[row] = [float(cells[c]) for c in cols]
        except (ValueError, IndexError):
            raise EstimateError(path, "<row>", f"not {len(header)} numbers: {line[:60]!r}", row) from None
    t = data[:, 0] * 1e-9
    check_stamps(path, t)
    q = data[:, [5, 6, 7, 4]]
    norm = np.linalg.norm(q, axis=1)
    if np.any(~np.isfinite(norm) | (norm < 1e-9)) or not np.all(np.isfinite(data)):
        row = int(np.argmax(~np.all(np.isfinite(data), axis=1) | ~(norm >= 1e-9)))
        raise EstimateError(path, "q_RS_w", "non-finite value or zero quaternion", row)
    name = _stem(path)
    if path.parent.name == "state_groundtruth_estimate0":  # <sequence>/mav0/state_groundtruth_estimate0/data.csv
        name = next((p.name for p in path.parents[1:] if p.name and p.name != "mav0"), name)
    return NamedGroundTruth(name, GroundTruth(t, data[:, 1:4], q / norm[:, None], data[:, 8:11]))


GROUND_TRUTH_SUFFIXES = {"tum": (".tum", ".txt", ".tum.gz", ".txt.gz"), "euroc": (".csv",)}
"""Name endings searched for in a ground-truth folder, per format (and EuRoC's sequence layout)."""


def guess_ground_truth_format(path: Path) -> str:
    """``euroc`` or ``tum`` for a ground-truth file or folder: a EuRoC header (``p_RS_R_x``) or a
    ``state_groundtruth_estimate0`` folder is EuRoC, a ``.csv`` file without a TUM line is EuRoC, anything else TUM."""
    if path.is_dir():
        return "euroc" if any(path.rglob(EUROC_FILE)) else "tum"
    if not path.is_file():
        raise EstimateError(path, "<file>", "no such file or directory")
    try:
        with open(path, "rb") as fh:
            head = fh.read(4096).decode("utf-8", errors="replace")
    except OSError as exc:
        raise EstimateError(path, "<file>", f"cannot read ({exc.strerror})") from None
    first = next((line for line in head.splitlines() if line.strip()), "")
    return "euroc" if "p_RS_R_x" in first or path.suffix == ".csv" else "tum"


def read_ground_truths(path: str | Path, fmt: str = "auto") -> dict[str, NamedGroundTruth]:
    """Every ground truth under ``path`` by flight name: a TUM or EuRoC file (one), or a folder of them.

    ``fmt`` is ``tum``, ``euroc`` or ``auto`` (:func:`guess_ground_truth_format`). A folder's files are
    named by the flight they belong to (``<flight>.tum``, ``<flight>.csv``, or EuRoC's
    ``<flight>/mav0/state_groundtruth_estimate0/data.csv``); every file is read, and checked, now.
    """
    path = Path(path)
    if not path.exists():
        raise EstimateError(path, "<file>", "no such file or directory")
    fmt = guess_ground_truth_format(path) if fmt == "auto" else fmt
    if fmt not in GROUND_TRUTH_FORMATS:
        raise ValueError(f"unknown ground-truth format {fmt!r}; expected one of {GROUND_TRUTH_FORMATS}")
    if path.is_file():
        files = [path]
    elif fmt == "euroc" and any(path.rglob(EUROC_FILE)):
        files = sorted(path.rglob(EUROC_FILE))
    else:
        files = sorted(p for p in path.rglob("*") if p.is_file() and p.name.endswith(GROUND_TRUTH_SUFFIXES[fmt]))
    if not files:
        wanted = ", ".join(GROUND_TRUTH_SUFFIXES[fmt])
        raise EstimateError(path, "<file>", f"no {fmt} ground-truth file in this folder (searched {wanted})")
    found: dict[str, NamedGroundTruth] = {}
    for file in files:
        gt = read_ground_truth(file, fmt)
        if gt.name in found:
            raise EstimateError(file, "<file>", f"a second ground truth for flight {gt.name!r}")
        found[gt.name] = gt
    return found


def ground_truth_for(flight: str, found: dict[str, NamedGroundTruth], given: Path) -> GroundTruth:
    """The ground truth of the flight named ``flight`` among ``found``: the one of its name, or the one file given."""
    if flight in found:
        return found[flight].truth
    if len(found) == 1 and given.is_file():
        return next(iter(found.values())).truth
    names = ", ".join(sorted(found)[:8])
    raise UserError(f"{given}: no ground truth for flight {flight!r} (ground truths found: {names})")


STAMP_TOLERANCE = 1e-6
"""[s] How far outside the ground truth's span a flight stamp may lie and still be kept (at the end sample): a
float64 second near an epoch time (1.7e9 s) is 0.24 µs wide, so a flight's own clock exported in EuRoC's integer
nanoseconds and read back can land a step outside the flight's first or last stamp."""


def on_flight_clock(flight: Flight, gt: GroundTruth, given: Path) -> tuple[Flight, int]:
    """``flight`` with the ground truth ``gt`` in place of its own, and how many of its samples were dropped.

    The rules of ``velobins score`` (:func:`clip_to_ground_truth`, :meth:`GroundTruth.at`): the flight
    keeps its samples inside the ground truth's time span, and ``gt`` is interpolated at their stamps
    (linear position and velocity, slerp orientation); a flight stamp within :data:`STAMP_TOLERANCE` of
    the span counts as inside, since one clock written in ns and read back moves by a float64 step.
    Fewer than 2 samples in common raises one :class:`UserError` naming both spans (the clocks differ).
    """
    keep = np.flatnonzero((flight.t >= gt.t[0] - STAMP_TOLERANCE) & (flight.t <= gt.t[-1] + STAMP_TOLERANCE))
    if keep.size < 2:
        raise UserError(
            f"{given}: ground truth spans [{gt.t[0]:.3f}, {gt.t[-1]:.3f}] s, flight {flight.source} "
            f"[{flight.t[0]:.3f}, {flight.t[-1]:.3f}] s: fewer than 2 samples in common; are both on the same clock "
            "(seconds)?"
        )
    part = flight.slice(int(keep[0]), int(keep[-1]) + 1)
    at = gt.at(np.clip(part.t, gt.t[0], gt.t[-1]))  # a stamp within STAMP_TOLERANCE outside takes the end sample
    metadata = dict(flight.metadata, ground_truth=str(given))
    resampled = dataclasses.replace(part, p=at.p, q=at.q, v=at.v, metadata=metadata)
    return resampled, len(flight) - len(part)


def clip_to_ground_truth(record: FlightRecord, gt: GroundTruth) -> tuple[FlightRecord, int]:
    """The samples of ``record`` inside the ground truth's time span, and how many were dropped.

    Raises ``ValueError`` (naming both spans) when fewer than 2 samples remain: the clocks differ.
    """
    keep = (record.t >= gt.t[0]) & (record.t <= gt.t[-1])
    if keep.sum() < 2:
        raise UserError(
            f"estimate spans [{record.t[0]:.3f}, {record.t[-1]:.3f}] s, ground truth [{gt.t[0]:.3f}, "
            f"{gt.t[-1]:.3f}] s: fewer than 2 samples in common; are both on the same clock (seconds)?"
        )
    if keep.all():
        return record, 0
    keep_t = (record.t_traj >= gt.t[0]) & (record.t_traj <= gt.t[-1])

    def cut(a, mask):
        return None if a is None else a[mask]

    clipped = FlightRecord(
        record.flight,
        record.method,
        record.t[keep],
        record.v_net[keep],
        record.var_net[keep],
        record.p_fused[keep],
        record.v_fused[keep],
        record.cov_fused[keep],
        record.t_traj[keep_t],
        record.p_traj[keep_t],
        q_fused=cut(record.q_fused, keep),
        q_traj=cut(record.q_traj, keep_t),
        v_traj=cut(record.v_traj, keep_t),
    )
    return clipped, int((~keep).sum())
