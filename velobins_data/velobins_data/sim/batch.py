"""Simulate many flights in parallel and write one plain CSV per flight.

Flight ``i`` of a run flies family ``FAMILIES[i % len(FAMILIES)]`` with its own seed derived from
``(seed, i)`` by ``numpy.random.SeedSequence``; nothing else is random, so the files are identical
whatever the number of workers or the order the flights finish in. Workers are separate processes
started with ``spawn`` (safe with threads and on every OS); a flight that diverges stops the run with
an error naming it.

The output folder holds exactly one run (:data:`LAYOUT`: ``sim_*.csv``, ``sim_*.csv.gz`` and
:data:`MANIFEST_NAME`). A folder that already holds one is refused unless ``overwrite=True``
(``velobins simulate --overwrite``), which replaces the whole earlier set; other files there are
left alone. The folder is locked for the run (a second simulate into it fails at once), each CSV
is written under a temporary name unique to its process and renamed when complete, and a run that
fails or is interrupted removes the flights it wrote, so the folder never holds half a run.
:data:`MANIFEST_NAME` records the run arguments and each flight's seed, drawn trajectory
parameters and tracking error (the CSV header keeps only platform, gravity and dataset).
"""

from __future__ import annotations

import json
import multiprocessing
import os
from concurrent.futures import FIRST_EXCEPTION, ProcessPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from velobins_common.errors import OptionError
from velobins_common.outputs import RunLayout, atomic_path, atomic_write_text, open_run_dir, remove_stale_temp_files
from velobins_common.progress import progress_bar
from velobins_data.sim.flight import flight_name, simulate_flight
from velobins_data.sim.presets import Preset, get_preset
from velobins_data.sim.trajectories import FAMILIES

MANIFEST_NAME = "simulation.json"
"""Run manifest written next to the CSV files."""

LAYOUT = RunLayout("simulate", ("sim_*.csv", "sim_*.csv.gz", MANIFEST_NAME), resumable=False)
"""What a simulate run owns in its output folder (refused without, replaced with ``overwrite``)."""
MAX_SECONDS = 3600.0
"""Longest simulated flight [s]: an hour, beyond any multirotor battery; bounds the memory of one flight
(``--seconds 1e9`` asked for terabytes)."""
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
        """Flight name and CSV stem, ``sim_<family>_<index:03d>``."""
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

    The CSV is written under a temporary name unique to this process first (removed if the write
    fails or is interrupted), so a reader never sees a half-written flight.
    """
    from velobins_data.datasets.csv_format import write_csv

    seq = simulate_flight(preset, spec.family, seconds, spec.seed, index=spec.index, noise=noise)
    path = out_dir / f"{spec.name}.csv"
    with atomic_path(path) as tmp:
        write_csv(seq, tmp)
    return path, {"name": seq.name, "file": path.name, **{k: seq.metadata[k] for k in _MANIFEST_KEYS}}


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
    overwrite: bool = False,
) -> list[Path]:
    """Simulate ``flights`` flights of ``seconds`` each and write ``out_dir/sim_<family>_<i>.csv``.

    Args:
        preset: preset name or :class:`~velobins_data.sim.presets.Preset`.
        flights: number of flights (families cycle through :data:`FAMILIES`).
        seconds: duration of each flight [s], at most :data:`MAX_SECONDS`.
        seed: run seed; the output depends only on it (and the other arguments), not on ``workers``.
        out_dir: output folder (created if missing); it must not hold an earlier simulate run
            unless ``overwrite`` (module docstring).
        workers: worker processes; ``None`` uses every core, ``1`` runs in this process.
        noise: simulate IMU and rotor-signal noise (see :func:`~velobins_data.sim.flight.simulate_flight`).
        progress: show a progress bar (drawn on a terminal only).
        overwrite: replace the earlier run's flights and manifest in ``out_dir`` (all of them).

    Returns:
        The CSV paths in flight order.

    Raises:
        OutputError: ``out_dir`` holds an earlier run (without ``overwrite``; the message names its
            files), is locked by another writer, is a file or lies under one, or is not writable.
        SimulationError: a flight diverged (the message names it); flights not yet started are
            cancelled and the flights this run wrote are removed.
    """
    preset = get_preset(preset)
    if not 0 < seconds <= MAX_SECONDS:  # NaN fails too
        raise OptionError("--seconds", f"must be in (0, {MAX_SECONDS:g}] s per flight, got {seconds}")
    plan = flight_plan(flights, seed)
    out = Path(out_dir)
    n_workers = min(len(plan), workers if workers is not None else (os.cpu_count() or 1))
    if n_workers < 1:
        raise ValueError(f"simulate_many: workers must be >= 1, got {workers}")
    # The flights are staged and committed together: a failed or interrupted run leaves no partial
    # set, an earlier run (overwrite) stays until the new one is complete, and a folder this run
    # made is removed again (outputs.Run).
    with open_run_dir(out, LAYOUT, "overwrite" if overwrite else "new") as run:
        remove_stale_temp_files(out)
        results = _run_plan(preset, plan, seconds, run.path, noise, n_workers, progress)
        manifest = {
            "preset": preset.name,
            "flights": len(plan),
            "seconds": seconds,
            "seed": int(seed),
            "noise": bool(noise),
            "sequences": [results[spec.index][1] for spec in plan],
        }
        atomic_write_text(run.path / MANIFEST_NAME, json.dumps(manifest, indent=1) + "\n")
        run.commit()
    return [out / results[spec.index][0].name for spec in plan]


def _run_plan(
    preset: Preset, plan: list[FlightSpec], seconds: float, out: Path, noise: bool, n_workers: int, progress: bool
) -> dict[int, tuple[Path, dict[str, object]]]:
    """Simulate and write every flight of ``plan``; flight index -> (path, manifest entry)."""
    bar = progress_bar(total=len(plan), desc=f"simulate {preset.name}", unit="flight", enabled=progress)
    results: dict[int, tuple[Path, dict[str, object]]] = {}
    try:
        if n_workers == 1:
            for spec in plan:
                results[spec.index] = _simulate_to_csv(preset, spec, seconds, out, noise)
                bar.update(1)
            return results
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=n_workers, mp_context=context) as pool:
            try:
                futures = {pool.submit(_simulate_to_csv, preset, spec, seconds, out, noise): spec for spec in plan}
                pending = set(futures)
                while pending:
                    done, pending = wait(pending, return_when=FIRST_EXCEPTION)
                    for fut in sorted(done, key=lambda f: futures[f].index):
                        exc = fut.exception()
                        if exc is not None:
                            raise exc
                        results[futures[fut].index] = fut.result()
                        bar.update(1)
            except BaseException:
                # Start nothing more; leaving the with-block then waits for the running flights,
                # so the caller's cleanup sees every file this run will ever write.
                pool.shutdown(wait=False, cancel_futures=True)
                raise
        return results
    finally:
        bar.close()
