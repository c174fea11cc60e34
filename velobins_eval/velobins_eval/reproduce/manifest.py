"""``<out>/reproduce.json`` (the plan a resumed run must match) and the checks made before any work.

A run of another plan into the same ``--out`` is refused, naming what differs, unless
``--overwrite`` removes the earlier reproduction; so is an ``--out`` that lies inside a data
directory or would replace one, and a data directory without flights.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from velobins_common.outputs import OutputError, remove_stale_temp_files

from .plan import (
    LAYOUT,
    MANIFEST_NAME,
    MODEL_DIR,
    PARTIAL_SUFFIX,
    SPLITS,
    TABLES,
    UNIT_DIR,
    Schedule,
    schedule_record,
)


def run_manifest(
    schedule_name: str,
    schedule: Schedule,
    dataset: str,
    data: dict[str, Path],
    ekf: Any,
    tables: tuple[str, ...] = TABLES,
) -> dict[str, Any]:
    """What ``reproduce.json`` records: everything a resumed run's models and reports depend on.

    The schedule's values are recorded besides its name, so a schedule changed in the code is
    noticed too; ``ekf`` is the resolved filter configuration (the EKF-fused columns depend on it).
    """
    doc = {
        **schedule_record(schedule_name, schedule, tables),
        "dataset": dataset,
        "data": {k: str(v) for k, v in data.items()},
        "ekf": dataclasses.asdict(ekf) if dataclasses.is_dataclass(ekf) else ekf,
    }
    return json.loads(json.dumps(doc))  # the JSON form, as it compares against the file


def _flatten(doc: Any, prefix: str = "") -> dict[str, Any]:
    """Nested mappings as one mapping of dotted keys (an empty mapping is a value)."""
    if isinstance(doc, dict) and doc:
        return {k: v for key, value in doc.items() for k, v in _flatten(value, f"{prefix}{key}.").items()}
    return {prefix.rstrip("."): doc}


def manifest_differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """``key: old != new`` for every recorded value that differs (nested keys dotted, NaN equal to NaN)."""
    a, b = _flatten(old), _flatten(new)
    same = lambda k: json.dumps(a.get(k), sort_keys=True) == json.dumps(b.get(k), sort_keys=True)  # noqa: E731
    return [f"{k}: {a.get(k)!r} != {b.get(k)!r}" for k in sorted({*a, *b}) if not same(k)]


def check_manifest(out: Path, manifest: dict[str, Any]) -> None:
    """Refuse ``out`` when it holds a reproduction of another plan, or reproduction files of no known plan.

    Raises:
        OutputError: names ``reproduce.json`` (or ``out``) and what differs; nothing is modified.
    """
    path = out / MANIFEST_NAME
    fix = "pass --overwrite to replace it (every model is retrained) or choose another --out"
    if not path.is_file():
        found = [name for name in LAYOUT.existing(out) if name != MANIFEST_NAME]
        if found:
            raise OutputError(
                out, f"holds {', '.join(found)} but no {MANIFEST_NAME} saying which plan made them; {fix}"
            )
        return
    try:
        old = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise OutputError(path, f"unreadable ({exc.__class__.__name__}); {fix}") from None
    if not isinstance(old, dict):
        raise OutputError(path, f"not a reproduction plan (a JSON {type(old).__name__}); {fix}")
    diffs = manifest_differences(old, manifest)
    if diffs:
        shown = "; ".join(diffs[:4]) + (f"; and {len(diffs) - 4} more" if len(diffs) > 4 else "")
        raise OutputError(path, f"{out} holds a reproduction of another plan ({shown}); {fix}")


def check_data_outside(out: Path, data: dict[str, Path]) -> None:
    """Refuse an ``--out`` that is inside a data directory or would hold (and replace) one."""
    for split, directory in data.items():
        flag = "--data" if split == "train" else f"--{split}"
        if out == directory or out.is_relative_to(directory):
            raise OutputError(out, f"lies inside the flights of {flag} {directory}; choose another --out")
        for name in LAYOUT.patterns:
            if directory == out / name or directory.is_relative_to(out / name):
                raise OutputError(
                    out, f"{flag} {directory} is where reproduce writes {out / name}; choose another --out"
                )


def check_flights(dataset: str, data: dict[str, Path]) -> None:
    """Every data directory exists and holds flights of ``dataset`` (before any work)."""
    from velobins_data.datasets import find_files

    for split, directory in data.items():
        flag = "--data" if split == "train" else f"--{split}"
        if not directory.is_dir():
            raise FileNotFoundError(f"{flag} {directory}: not a directory")
        if not find_files(dataset, directory):
            raise FileNotFoundError(f"{flag} {directory}: no {dataset} flights in it")


def remove_stale_temps(out: Path) -> list[str]:
    """Temporary files of dead writers (a killed run) in every directory reproduce writes."""
    dirs = [out, out / MODEL_DIR, *(out / MODEL_DIR).glob(f"*{PARTIAL_SUFFIX}")]
    dirs += [d for split in SPLITS for d in (out / split, out / split / "figures", out / UNIT_DIR / split)]
    return [f"{d / name}" for d in dirs if d.is_dir() for name in remove_stale_temp_files(d)]
