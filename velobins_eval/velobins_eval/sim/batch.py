"""Simulate many flights in parallel and write one plain CSV per flight.

Flight ``i`` of a run flies family ``FAMILIES[i % len(FAMILIES)]`` with its own seed derived from
``(seed, i)`` by ``numpy.random.SeedSequence``; nothing else is random, so the files are identical
whatever the number of workers or the order the flights finish in. Workers are separate processes
started with ``spawn`` (safe with threads and on every OS); a flight that diverges stops the run with
an error naming it.

The output folder holds exactly one run: flights of an earlier run there (files named like
``sim_<family>_<NNN>.csv`` that this run does not write) are removed, and :data:`MANIFEST_NAME`
records the run arguments and each flight's seed, drawn trajectory parameters and tracking error
(the CSV header keeps only platform, gravity and dataset).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import re
from concurrent.futures import FIRST_EXCEPTION, ProcessPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm import tqdm

from velobins_eval.sim.flight import flight_name, simulate_flight
from velobins_eval.sim.presets import Preset, get_preset
from velobins_eval.sim.trajectories import FAMILIES

MANIFEST_NAME = "simulation.json"
"""Run manifest written next to the CSV files."""

_FLIGHT_FILE = re.compile(r"^sim_[a-z0-9]+_\d{3,}\.csv$")
_MANIFEST_KEYS = ("family", "seed", "index", "trajectory", "tracking_rms", "max_speed", "platform", "rate_hz")


@dataclass(frozen=True)
class FlightSpec:
    """One planned flight.

    Attributes:
        index: position in the run (also in the name).
        family: trajectory family.
        seed: the flight's own seed (from the run seed and ``index``).
    """

    index: int
    family: str
    seed: int

    @property
    def name(self) -> str:
        """Sequence name and CSV stem, ``sim_<family>_<index:03d>``."""
        return flight_name(self.family, self.index)


def flight_plan(flights: int, seed: int) -> list[FlightSpec]:
    """The ``flights`` flights of a run with run seed ``seed`` (families cycle in :data:`FAMILIES` order)."""
    if flights < 1 or seed < 0:
        raise ValueError(f"flight_plan: need flights >= 1 and seed >= 0, got flights={flights}, seed={seed}")
    plan = []
    for i in range(flights):
        flight_seed = int(np.random.SeedSequence([int(seed), i]).generate_state(1)[0])
        plan.append(FlightSpec(index=i, family=FAMILIES[i % len(FAMILIES)], seed=flight_seed))
    return plan


def _simulate_to_csv(
    preset: Preset, spec: FlightSpec, seconds: float, out_dir: Path, noise: bool
) -> tuple[Path, dict[str, object]]:
    """Worker job: simulate one flight, write it, return its path and manifest entry.

    The CSV is written under a temporary name first, so an interrupted run leaves no half-written flight.
    """
    from velobins_eval.datasets.csv_format import write_csv

    seq = simulate_flight(preset, spec.family, seconds, spec.seed, index=spec.index, noise=noise)
    path = out_dir / f"{spec.name}.csv"
    tmp = out_dir / f".{spec.name}.csv.part"
    write_csv(seq, tmp)
    os.replace(tmp, path)
    return path, {"name": seq.name, "file": path.name, **{k: seq.metadata[k] for k in _MANIFEST_KEYS}}


def _remove_stale_flights(out_dir: Path, plan: list[FlightSpec]) -> None:
    """Delete ``sim_<family>_<NNN>.csv`` files of an earlier run that this run will not overwrite."""
    keep = {f"{spec.name}.csv" for spec in plan}
    for path in out_dir.iterdir():
        if path.is_file() and _FLIGHT_FILE.match(path.name) and path.name not in keep:
            path.unlink()


def simulate_many(
    preset: str | Preset,
    flights: int,
    seconds: float,
    seed: int,
    out_dir: str | Path,
    workers: int | None = None,
    *,
    noise: bool = True,
    progress: bool = True,
) -> list[Path]:
    """Simulate ``flights`` flights of ``seconds`` each and write ``out_dir/sim_<family>_<i>.csv``.

    Args:
        preset: preset name or :class:`~velobins_eval.sim.presets.Preset`.
        flights: number of flights (families cycle through :data:`FAMILIES`).
        seconds: duration of each flight [s].
        seed: run seed; the output depends only on it (and the other arguments), not on ``workers``.
        out_dir: output folder (created if missing; simulated flights of an earlier run are replaced or removed).
        workers: worker processes; ``None`` uses every core, ``1`` runs in this process.
        noise: simulate IMU and rotor-signal noise (see :func:`~velobins_eval.sim.flight.simulate_flight`).
        progress: show a tqdm progress bar.

    Returns:
        The CSV paths in flight order.

    Raises:
        SimulationError: a flight diverged (the message names it); flights not yet started are cancelled.
    """
    preset = get_preset(preset)
    if seconds <= 0:
        raise ValueError(f"simulate_many: seconds must be positive, got {seconds}")
    plan = flight_plan(flights, seed)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    n_workers = min(len(plan), workers if workers is not None else (os.cpu_count() or 1))
    if n_workers < 1:
        raise ValueError(f"simulate_many: workers must be >= 1, got {workers}")
    _remove_stale_flights(out, plan)
    bar = tqdm(total=len(plan), desc=f"simulate {preset.name}", unit="flight", disable=not progress)
    results: dict[int, tuple[Path, dict[str, object]]] = {}
    try:
        if n_workers == 1:
            for spec in plan:
                results[spec.index] = _simulate_to_csv(preset, spec, seconds, out, noise)
                bar.update(1)
        else:
            context = multiprocessing.get_context("spawn")
            with ProcessPoolExecutor(max_workers=n_workers, mp_context=context) as pool:
                futures = {pool.submit(_simulate_to_csv, preset, spec, seconds, out, noise): spec for spec in plan}
                pending = set(futures)
                while pending:
                    done, pending = wait(pending, return_when=FIRST_EXCEPTION)
                    for fut in sorted(done, key=lambda f: futures[f].index):
                        exc = fut.exception()
                        if exc is not None:
                            pool.shutdown(wait=False, cancel_futures=True)
                            raise exc
                        results[futures[fut].index] = fut.result()
                        bar.update(1)
    finally:
        bar.close()
    manifest = {
        "preset": preset.name,
        "flights": len(plan),
        "seconds": seconds,
        "seed": int(seed),
        "noise": bool(noise),
        "sequences": [results[spec.index][1] for spec in plan],
    }
    (out / MANIFEST_NAME).write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    return [results[spec.index][0] for spec in plan]
