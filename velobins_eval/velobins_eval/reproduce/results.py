"""One result file per evaluation unit: ``<out>/units/<split>/<unit>.npz``, what makes a re-run compute only
what is missing.

An evaluation job writes its unit's file atomically when it has scored every flight of the split, so
a file that exists is a finished unit; the driver reads the files and only aggregates. A file also
records the size and modification time of the ``best.pt`` it was computed from: a unit whose model
was retrained since (its ``best.pt`` changed) counts as missing and is recomputed.

The format is plain arrays (``numpy.savez``, read with ``allow_pickle=False``: loading a result never
runs code from the file): ``meta`` (a JSON string: the unit, the flight names, the metric keys, the
checkpoint stamp), ``metrics`` (flights × :data:`~velobins_eval.scoring.ALL_KEYS`, the keys listed in
``meta``), ``nees/<i>`` (the per-update NEES of flight i) and, for the units that keep them,
``record/<i>/<field>`` (the :class:`~velobins_eval.scoring.FlightRecord` arrays of flight i; an optional
field that is None is left out).
"""

from __future__ import annotations

import dataclasses
import json
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from velobins_common.outputs import atomic_path

from ..metrics import FlightMetrics
from ..scoring import ALL_KEYS, FlightRecord
from .evaluation import UnitResult
from .plan import IMU_ONLY, UNIT_DIR, EvalUnit, model_dir

RECORD_ARRAYS = tuple(f.name for f in dataclasses.fields(FlightRecord) if f.name not in ("flight", "method"))


def unit_key(unit: EvalUnit) -> str:
    """File-system-safe name of a unit: its model (seed included), and the uncertainty source when it is set."""
    if unit.row == IMU_ONLY:
        return IMU_ONLY
    return unit.model + (f"-u{unit.uncertainty.replace('+', '')}" if unit.uncertainty else "")


def unit_path(out: Path, split: str, unit: EvalUnit) -> Path:
    """``<out>/units/<split>/<unit key>.npz``."""
    return out / UNIT_DIR / split / f"{unit_key(unit)}.npz"


def checkpoint_stamp(out: Path, unit: EvalUnit) -> list[int] | None:
    """(size, mtime in ns) of the unit's ``best.pt``; None for IMU-only (no model) or a missing model."""
    if unit.row == IMU_ONLY:
        return None
    path = model_dir(out, unit.model) / "best.pt"
    if not path.is_file():
        return None
    stat = path.stat()
    return [stat.st_size, stat.st_mtime_ns]


def save_unit(path: Path, result: UnitResult, stamp: list[int] | None) -> Path:
    """Write ``result`` to ``path`` atomically (a reader never sees half a file)."""
    names = list(result.flights)
    meta = {
        "unit": dataclasses.asdict(result.unit),
        "flights": names,
        "keys": list(ALL_KEYS),
        "checkpoint": stamp,
        "records": sorted(result.records),
    }
    arrays: dict[str, Any] = {"meta": np.array(json.dumps(meta))}
    arrays["metrics"] = np.array([[getattr(result.flights[n], k) for k in ALL_KEYS] for n in names], dtype=float)
    for i, name in enumerate(names):
        if name in result.nees:
            arrays[f"nees/{i}"] = result.nees[name]
        if name in result.records:
            record = result.records[name]
            for field in RECORD_ARRAYS:
                if getattr(record, field) is not None:
                    arrays[f"record/{i}/{field}"] = getattr(record, field)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp, open(tmp, "wb") as fh:
        np.savez(fh, **arrays)
    return path


def _meta(path: Path) -> dict[str, Any] | None:
    try:
        with np.load(path, allow_pickle=False) as data:
            return json.loads(str(data["meta"]))
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):  # a half-written or foreign file
        return None


def is_done(out: Path, split: str, unit: EvalUnit) -> bool:
    """Whether the unit's file exists, is readable and was computed from the current ``best.pt``."""
    path = unit_path(out, split, unit)
    if not path.is_file():
        return False
    meta = _meta(path)
    return (
        meta is not None
        and meta["unit"] == dataclasses.asdict(unit)
        and meta["checkpoint"] == checkpoint_stamp(out, unit)
    )


def load_unit(path: Path) -> UnitResult:
    """The :class:`UnitResult` stored in ``path``."""
    with np.load(path, allow_pickle=False) as data:
        meta = json.loads(str(data["meta"]))
        unit = EvalUnit(**meta["unit"])
        keys = meta["keys"]
        flights, nees, records = {}, {}, {}
        for i, name in enumerate(meta["flights"]):
            values = dict(zip(keys, data["metrics"][i].tolist(), strict=True))
            flights[name] = FlightMetrics(**{k: values[k] for k in ALL_KEYS if k in values})  # older files: fewer
            if f"nees/{i}" in data:
                nees[name] = data[f"nees/{i}"]
            if name in meta["records"]:
                arrays = {f: data[f"record/{i}/{f}"] for f in RECORD_ARRAYS if f"record/{i}/{f}" in data}
                records[name] = FlightRecord(flight=name, method=unit.row, **arrays)
    return UnitResult(unit, flights, nees, records)
