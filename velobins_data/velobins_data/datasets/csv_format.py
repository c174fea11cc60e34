"""The VeloBins plain-CSV flight format: a documented file for a user's own flights.

One row per IMU sample, comma separated, one header line, optional leading ``# key: value``
comment lines (kept as metadata; ``gravity`` [m/s^2] and ``platform`` are understood).
Quantities, units and frames are those of :class:`~velobins_data.flight.Flight`:

==================================  =======  ============================================
columns                             unit     meaning
==================================  =======  ============================================
``t``                               s        stamp, strictly increasing
``acc_x acc_y acc_z``               m/s^2    body (FLU) specific force; hover reads +g on z
``gyro_x gyro_y gyro_z``            rad/s    body (FLU) angular rate
``speed_1 .. speed_K`` *or*         rad/s    rotor speeds, K >= 1
``command_1 .. command_K``          1        rotor commands normalised to [0, 1]
``p_x p_y p_z``                     m        ground-truth position, world ENU (z up)
``q_x q_y q_z q_w``                 1        ground-truth orientation body->world
``v_x v_y v_z``                     m/s      ground-truth velocity, world ENU
==================================  =======  ============================================

The rotor kind is the rotor columns' prefix (``speed_`` or ``command_``) and K is their count,
numbered from 1 without gaps. Version 1 files (``# velobins-csv: 1``) named them ``rpm_`` (rad/s,
despite the name) and ``pwm_``; those prefixes are still read, as the same kinds. An optional
``# rotors: K`` comment is checked against the columns. Column order is free; unknown columns are
an error (so a typo cannot silently drop data). Example::

    # velobins-csv: 2
    # platform: my-quad
    # gravity: 9.80665
    t,acc_x,acc_y,acc_z,gyro_x,gyro_y,gyro_z,speed_1,speed_2,speed_3,speed_4,p_x,p_y,p_z,q_x,q_y,q_z,q_w,v_x,v_y,v_z
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np

from velobins_common.constants import LEGACY_ROTOR_KINDS, ROTOR_KINDS, ROTOR_SPEED, canonical_rotor_kind
from velobins_data.datasets.errors import DatasetError
from velobins_data.datasets.tabular import read_table
from velobins_data.flight import Flight

FORMAT_VERSION = "2"
"""Value of the ``# velobins-csv:`` comment written by :func:`write_csv` (2: rotor columns ``speed_``/``command_``)."""
READ_VERSIONS = ("1", FORMAT_VERSION)
"""Versions :func:`read_csv` reads (1: rotor columns ``rpm_``/``pwm_``)."""

FIXED_COLUMNS: dict[str, tuple[str, ...]] = {
    "t": ("t",),
    "acc": ("acc_x", "acc_y", "acc_z"),
    "gyro": ("gyro_x", "gyro_y", "gyro_z"),
    "p": ("p_x", "p_y", "p_z"),
    "q": ("q_x", "q_y", "q_z", "q_w"),
    "v": ("v_x", "v_y", "v_z"),
}
"""Flight field -> its CSV columns (rotor columns are added per K and kind)."""

_ROTOR_RE = re.compile(rf"^({'|'.join((*ROTOR_KINDS, *LEGACY_ROTOR_KINDS))})_(\d+)$")
_WRITTEN_METADATA = ("platform", "gravity", "dataset")


def expected_header(rotor_kind: str = ROTOR_SPEED, num_rotors: int = 4) -> str:
    """The canonical header line for ``num_rotors`` rotors of ``rotor_kind``."""
    rotor = [f"{rotor_kind}_{i}" for i in range(1, num_rotors + 1)]
    cols = [*FIXED_COLUMNS["t"], *FIXED_COLUMNS["acc"], *FIXED_COLUMNS["gyro"], *rotor]
    cols += [*FIXED_COLUMNS["p"], *FIXED_COLUMNS["q"], *FIXED_COLUMNS["v"]]
    return ",".join(cols)


def write_csv(flight: Flight, path: str | Path) -> None:
    """Write ``seq`` in the plain-CSV format (full float64 precision, round-trips exactly)."""
    path = Path(path)
    header = expected_header(flight.rotor_kind, flight.num_rotors)
    data = np.hstack([flight.t[:, None], flight.acc, flight.gyro, flight.rotor, flight.p, flight.q, flight.v])
    lines = [f"# velobins-csv: {FORMAT_VERSION}", f"# rotors: {flight.num_rotors}"]
    for key in _WRITTEN_METADATA:
        if key == "gravity":
            lines.append(f"# gravity: {flight.gravity!r}")
        elif key in flight.metadata:
            value = str(flight.metadata[key]).replace("\n", " ")
            lines.append(f"# {key}: {value}")
    with open(path, "w", encoding="utf-8", newline="\n") as fh:
        fh.write("\n".join(lines) + "\n" + header + "\n")
        np.savetxt(fh, data, delimiter=",", fmt="%.17g")


def _rotor_columns(source: str, columns: list[str]) -> tuple[str, list[str]]:
    """(kind, rotor column names in order 1..K); :class:`DatasetError` if inconsistent."""
    found = [(m.group(1), int(m.group(2)), c) for c in columns if (m := _ROTOR_RE.match(c))]
    if not found:
        raise DatasetError(
            source,
            "speed_1",
            f"no rotor columns (speed_1..speed_K or command_1..command_K); expected header: {expected_header()}",
        )
    prefixes = {k for k, _, _ in found}
    if len(prefixes) > 1:
        mixed = " and ".join(f"{k}_" for k in sorted(prefixes))
        raise DatasetError(source, found[0][2], f"rotor columns mix {mixed}; use one kind")
    prefix = prefixes.pop()
    numbers = sorted(n for _, n, _ in found)
    if numbers != list(range(1, len(numbers) + 1)):
        raise DatasetError(source, f"{prefix}_*", f"rotor columns must be numbered 1..K without gaps, got {numbers}")
    return prefix, [f"{prefix}_{n}" for n in numbers]


def read_csv(path: str | Path) -> Flight:
    """Read a plain-CSV flight written by :func:`write_csv` or by hand (module docstring).

    Raises:
        DatasetError: missing or unknown columns (the message lists them and shows the expected
            header), rotor count not matching ``# rotors:``, NaN, unsorted stamps, empty file.
    """
    source = str(path)
    table = read_table(path)
    version = table.comments.get("velobins-csv", FORMAT_VERSION).strip()
    if version not in READ_VERSIONS:
        raise DatasetError(source, "# velobins-csv", f"format version {version!r}; this code reads {READ_VERSIONS}")
    prefix, rotor_cols = _rotor_columns(source, table.columns)
    kind = canonical_rotor_kind(prefix)
    header = expected_header(prefix, len(rotor_cols))
    required = [c for cols in FIXED_COLUMNS.values() for c in cols]
    missing = [c for c in required if c not in table.columns]
    unknown = [c for c in table.columns if c not in required and c not in rotor_cols]
    if missing or unknown:
        raise DatasetError(
            source,
            (missing or unknown)[0],
            f"header mismatch: missing columns {missing}, unknown columns {unknown}; expected header: {header}",
        )
    declared = table.comments.get("rotors")
    if declared is not None and declared.strip() != str(len(rotor_cols)):
        raise DatasetError(
            source, f"{prefix}_*", f"'# rotors: {declared}' but the header has {len(rotor_cols)} rotor columns"
        )
    t = table.get(FIXED_COLUMNS["t"])[:, 0]
    dt = np.diff(t)
    if (dt <= 0).any():
        row = int(np.argmax(dt <= 0)) + 1
        raise DatasetError(source, "t", "timestamps must be strictly increasing (sorted, no duplicates)", row)
    metadata: dict[str, Any] = {"dataset": table.comments.get("dataset", "csv"), "source": source}
    for key, value in table.comments.items():
        if key not in ("velobins-csv", "rotors", "dataset"):
            metadata[key] = value
    if "gravity" in metadata:
        try:
            metadata["gravity"] = float(metadata["gravity"])
        except ValueError:
            raise DatasetError(source, "# gravity", f"not a number: {metadata['gravity']!r}") from None
        if not (np.isfinite(metadata["gravity"]) and 0.0 < metadata["gravity"] < 100.0):
            raise DatasetError(source, "# gravity", f"must be in (0, 100) m/s^2, got {metadata['gravity']!r}")
    metadata.setdefault("platform", "unknown")
    name = Path(path).name
    for suffix in (".csv.gz", ".csv"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    return Flight(
        name=name,
        t=t,
        acc=table.get(FIXED_COLUMNS["acc"]),
        gyro=table.get(FIXED_COLUMNS["gyro"]),
        rotor=table.get(rotor_cols),
        rotor_kind=kind,
        p=table.get(FIXED_COLUMNS["p"]),
        q=table.get(FIXED_COLUMNS["q"]),
        v=table.get(FIXED_COLUMNS["v"]),
        metadata=metadata,
    )
