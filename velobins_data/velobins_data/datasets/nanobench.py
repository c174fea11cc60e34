"""NanoBench adapter (Crazyflie 2.1, Vicon ground truth, 100 Hz, per-motor PWM).

Reference: the NanoBench column reference summarised in ``data/nanobench/README.md``, checked
against the 60 public files (see ``docs/data_formats.md``). Columns read:

========================  ==========================  ===========================================
column                    unit in file                conversion
========================  ==========================  ===========================================
``t``                     s (Unix)                    kept
``px py pz``              m, world z-up               kept
``qx qy qz qw``           body->world, scalar last    kept (verified: R f - g matches dv/dt)
``vx vy vz``              m/s, world (Savitzky-Golay) kept
``imu_acc_[xyz]``         g, body specific force      x gravity (metadata ``gravity`` or standard)
``imu_gyro_[xyz]``        rad/s, body                 kept
``motor_motor_m[1-4]``    PWM 0..65535                / 65535 -> [0, 1], rotor kind ``pwm``
========================  ==========================  ===========================================

The body frame is FLU (a resting Crazyflie reads +1 g on ``imu_acc_z``), world is z-up.

Row policy, in order (each count lands in ``metadata``):

1. Duplicate / backward stamps are dropped (:func:`~velobins_data.datasets.tabular.monotonic_rows`).
2. **Sensor log ends**: the CSV is resampled onto the Vicon stamps, and where the IMU or motor
   log ended early the authors' resampler extrapolated it *linearly* (in some files for > 60 % of
   the flight, with PWM far outside 0..65535). A trailing run of at least
   :data:`EXTRAPOLATION_MIN_ROWS` exactly-collinear rows is such an extrapolation and is cut.
3. **Motors off**: rows before the first and after the last row with any motor > 0 (on the
   ground before take-off, after landing) are cut.
4. A file left with less than ``min_flight_s`` of flight raises :class:`UnusableFlightError`
   (one public file, ``B7_oval_slow_rep1``, never spins its motors); PWM still outside
   0..65535 after trimming raises :class:`DatasetError`.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from velobins_common.bounded import InputLimitError, read_yaml
from velobins_common.constants import ROTOR_COMMAND
from velobins_data.datasets.errors import DatasetError, UnusableFlightError, describe
from velobins_data.datasets.tabular import monotonic_rows, read_table, require_columns
from velobins_data.flight import STANDARD_GRAVITY, Flight

PWM_MAX = 65535.0
"""Full-scale Crazyflie motor PWM command."""

EXTRAPOLATION_MIN_ROWS = 5
"""Shortest trailing run of collinear rows treated as extrapolation (50 ms at 100 Hz)."""

PLATFORM = "crazyflie-2.1"

TIME_COLUMN = "t"
POS_COLUMNS = ("px", "py", "pz")
QUAT_COLUMNS = ("qx", "qy", "qz", "qw")
VEL_COLUMNS = ("vx", "vy", "vz")
ACC_COLUMNS = ("imu_acc_x", "imu_acc_y", "imu_acc_z")
GYRO_COLUMNS = ("imu_gyro_x", "imu_gyro_y", "imu_gyro_z")
MOTOR_COLUMNS = ("motor_motor_m1", "motor_motor_m2", "motor_motor_m3", "motor_motor_m4")
REQUIRED_COLUMNS = (TIME_COLUMN, *POS_COLUMNS, *QUAT_COLUMNS, *VEL_COLUMNS, *ACC_COLUMNS, *GYRO_COLUMNS, *MOTOR_COLUMNS)

TRAJECTORY_SHAPES = ("circle", "figure8", "helix", "oval", "star", "trefoil", "other")
"""Values returned by :func:`trajectory_shape`."""

# Keyword -> shape, first match wins (checked on the lower-cased name split at '_', '-', ' ').
_SHAPE_KEYWORDS: tuple[tuple[str, str], ...] = (
    (r"trefoil|knot", "trefoil"),
    (r"figure_?8|figure_?eight|fig_?8|eight|lemniscate|infinity", "figure8"),
    (r"helix|helical|spiral|corkscrew", "helix"),
    (r"circle|circular", "circle"),
    (r"oval|ellipse|elliptic|stadium", "oval"),
    (r"star|pentagram", "star"),
)


def flight_name(path: str | Path) -> str:
    """Flight name of a NanoBench CSV: the file name without ``.csv`` / ``.csv.gz``."""
    name = Path(path).name
    for suffix in (".csv.gz", ".csv"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return Path(path).stem


def trajectory_shape(name: str) -> str:
    """Map a flight name (``B2_circle_fast_rep1``) to one of :data:`TRAJECTORY_SHAPES`.

    Mapping (keywords anywhere in the name, case-insensitive): trefoil/knot -> trefoil;
    figure8/figure_eight/eight/lemniscate/infinity -> figure8 (a lemniscate *is* a figure eight);
    helix/spiral -> helix; circle -> circle; oval/ellipse/stadium -> oval; star/pentagram -> star.
    Everything else is ``other``: in particular ``lissajous`` (NanoBench's is a 3:2 curve, not a
    figure eight; only the 1:2 Lissajous would be) and ``linear_ramp``.
    """
    lowered = name.lower()
    for pattern, shape in _SHAPE_KEYWORDS:
        if re.search(rf"(^|[_\-\s\d])({pattern})($|[_\-\s\d])", lowered):
            return shape
    return "other"


def metadata_path(csv_path: str | Path) -> Path:
    """The ``<flight>_metadata.yaml`` file next to a NanoBench CSV."""
    p = Path(csv_path)
    return p.with_name(f"{flight_name(p)}_metadata.yaml")


def read_metadata(csv_path: str | Path) -> dict[str, Any]:
    """The flight's metadata YAML as a dict (empty when the file is absent).

    Loaded with :func:`velobins_common.bounded.read_yaml` (safe, no aliases, bounded size and
    nesting). Invalid YAML, too large or deep a file, bytes that are not UTF-8, a
    document that is not a mapping and a used key of the wrong type (:func:`metadata_gravity`)
    raise :class:`DatasetError` naming the YAML file and the key.
    """
    path = metadata_path(csv_path)
    if not path.is_file():
        return {}
    try:
        data = read_yaml(path)  # bounded: size, nesting, no aliases (a YAML bomb is one line, not a MemoryError)
    except InputLimitError as exc:
        raise DatasetError(path, "<file>", str(exc).removeprefix(f"{path}: ")) from None
    except yaml.YAMLError as exc:
        raise DatasetError(path, "<file>", f"invalid YAML ({describe(exc)})") from None
    except UnicodeDecodeError as exc:
        raise DatasetError(path, "<file>", f"not UTF-8 text ({describe(exc)})") from None
    except PermissionError:
        raise DatasetError(path, "<file>", "cannot read: permission denied") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise DatasetError(path, "<file>", f"metadata YAML is not a mapping (got a {type(data).__name__})")
    kind = data.get("trajectory_type")
    if kind is not None and not isinstance(kind, str | int | float):
        raise DatasetError(path, "trajectory_type", f"must be a string, got {type(kind).__name__} {kind!r}")
    return data


def metadata_gravity(csv_path: str | Path, meta: dict[str, Any]) -> float | None:
    """The metadata's ``gravity`` [m/s^2] checked (a number in (0, 100)); None when absent.

    Raises:
        DatasetError: names the YAML file and the key ``gravity``.
    """
    if "gravity" not in meta or meta["gravity"] is None:
        return None
    value = meta["gravity"]
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise DatasetError(
            metadata_path(csv_path), "gravity", f"must be a number [m/s^2], got {type(value).__name__} {value!r}"
        )
    if not (np.isfinite(value) and 0.0 < value < 100.0):
        raise DatasetError(metadata_path(csv_path), "gravity", f"must be a number in (0, 100) m/s^2, got {value!r}")
    return float(value)


def extrapolated_tail_start(t: np.ndarray, x: np.ndarray, min_rows: int = EXTRAPOLATION_MIN_ROWS) -> int:
    """First row of a trailing linear-in-time extrapolation of ``x`` (T, C); ``T`` when none.

    Consecutive slopes ``dx/dt`` that agree to 1e-4 (relative) are "linear"; a trailing run of
    ``L`` such agreements means the last ``L + 2`` rows lie on one line. The first of them is
    the last real sample, so rows from the next one on are cut. Real sensor noise never gives
    ``min_rows`` equal slopes in a row, while a held constant (slope 0) does, as it should.
    """
    n = x.shape[0]
    if n < min_rows + 2:
        return n
    slope = np.diff(x, axis=0) / np.diff(t)[:, None]
    tol = 1e-4 * np.maximum(np.abs(slope[1:]), np.abs(slope[:-1])) + 1e-6
    linear = (np.abs(np.diff(slope, axis=0)) <= tol).all(axis=1)
    nonlinear = np.flatnonzero(~linear)
    run = linear.shape[0] if nonlinear.size == 0 else linear.shape[0] - 1 - int(nonlinear[-1])
    if run < min_rows:
        return n
    return n - run - 1


def load_nanobench(path: str | Path, *, gravity: float | None = None, min_flight_s: float = 1.0) -> Flight:
    """Load one NanoBench flight (``*.csv`` or ``*.csv.gz``) as a :class:`Flight`.

    Args:
        path: the CSV file; its ``*_metadata.yaml`` is read when present.
        gravity: gravity [m/s^2] for the g -> m/s^2 conversion; default: the metadata's
            ``gravity`` key, else :data:`~velobins_data.flight.STANDARD_GRAVITY`.
        min_flight_s: shortest flight kept after trimming [s].

    Raises:
        DatasetError: missing column, NaN in a used column, unsorted stamps, PWM out of range;
            an unreadable CSV (truncated gzip, a directory, ...) or metadata YAML (invalid,
            not a mapping, ``gravity`` not a number), naming the file and key.
        UnusableFlightError: no (long enough) motors-on segment.
    """
    source = str(path)
    table = read_table(path)
    require_columns(source, table.columns, REQUIRED_COLUMNS)
    meta = read_metadata(path)
    meta_g = metadata_gravity(path, meta)
    g = float(gravity if gravity is not None else meta_g if meta_g is not None else STANDARD_GRAVITY)

    t_all = table.get([TIME_COLUMN])[:, 0]
    keep = monotonic_rows(source, t_all)
    dropped = len(t_all) - len(keep)
    t = t_all[keep]
    acc_g = table.get(ACC_COLUMNS)[keep]
    gyro = table.get(GYRO_COLUMNS)[keep]
    pwm = table.get(MOTOR_COLUMNS)[keep]

    imu_end = extrapolated_tail_start(t, np.hstack([acc_g, gyro]))
    motor_end = extrapolated_tail_start(t, pwm)
    end = min(imu_end, motor_end)
    on = np.flatnonzero((pwm[:end] > 0).any(axis=1))
    if on.size == 0:
        raise UnusableFlightError(source, "motor_motor_m1..m4", "motors never turn on: no flight in this file")
    start, stop = int(on[0]), int(on[-1]) + 1
    if t[stop - 1] - t[start] < min_flight_s:
        raise UnusableFlightError(
            source, "motor_motor_m1..m4", f"motors-on segment {t[stop - 1] - t[start]:.2f} s < {min_flight_s} s"
        )
    sl = slice(start, stop)
    outside = (pwm[sl] < 0) | (pwm[sl] > PWM_MAX)
    if outside.any():
        row, col = np.argwhere(outside)[0]
        value = pwm[start + row, col]
        msg = f"PWM {value:.1f} outside [0, {PWM_MAX:.0f}]"
        raise DatasetError(source, MOTOR_COLUMNS[int(col)], msg, int(keep[start + row]))

    name = flight_name(path)
    metadata: dict[str, Any] = {
        "dataset": "nanobench",
        "platform": PLATFORM,
        "source": source,
        "gravity": g,
        "trajectory_type": meta.get("trajectory_type", "unknown"),
        "trajectory_shape": trajectory_shape(name),
        "dropped_stamps": dropped,
        "trimmed_head_rows": start,
        "trimmed_tail_rows": len(t) - stop,
        "imu_extrapolated_rows": len(t) - imu_end,
        "motor_extrapolated_rows": len(t) - motor_end,
    }
    for key in ("crazyflie_id", "firmware_version", "repetition", "trajectory_id", "params"):
        if key in meta:
            metadata[key] = meta[key]
    return Flight(
        name=name,
        t=t[sl],
        acc=acc_g[sl] * g,
        gyro=gyro[sl],
        rotor=pwm[sl] / PWM_MAX,
        rotor_kind=ROTOR_COMMAND,
        p=table.get(POS_COLUMNS)[keep][sl],
        q=table.get(QUAT_COLUMNS)[keep][sl],
        v=table.get(VEL_COLUMNS)[keep][sl],
        metadata=metadata,
    )
