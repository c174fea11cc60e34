"""Two vehicles on one ROS domain: each graph in its own namespace, with a parameter overlay.

Both graphs (replay, network, EKF, eval) run at once in ``/drone1`` and ``/drone2`` with the same
shipped parameter files plus an overlay, as ``drone.launch.py namespace:=/droneN params_file:=...``
would start them. The second vehicle's flight is moved 40 m east and 500 s later, so an EKF that
heard the other vehicle's IMU or ground truth could not follow its own flight. The overlay sets a
filter noise that differs from the default: the test reads it back from each EKF's start-up line,
which prints the densities the node declared (the bug was that bare ``velobins_ekf:`` keys were
ignored in a namespace). The line is in the node's own log, so the check does not depend on catching
the node alive through its parameter service before a short flight ends.
"""

from __future__ import annotations

import dataclasses
import json
import re
import threading
from pathlib import Path

import graph_fixtures as gf
import numpy as np
import pytest

from velobins_data.bag import write_bag
from velobins_eval.graph import GraphRun, run_graph

TEST_SECONDS = 8.0
"""Length of each replayed flight [s] (short: two graphs share the CPU)."""
RATE = 1.0
"""Replay speed factor."""
SHIFT_M = np.array([40.0, 0.0, 0.0])
"""Where the second vehicle flies, relative to the first flight [m]."""
SHIFT_S = 500.0
"""Time offset of the second flight's stamps [s]."""
OVERLAY_NOISE = 0.0731
"""acc_noise_density set by the overlay (the default is 0.02)."""
NAMESPACES = ("/drone1", "/drone2")


def _shifted(flight, name: str):
    return dataclasses.replace(flight, name=name, t=flight.t + SHIFT_S, p=flight.p + SHIFT_M)


def _logged_noise(log: str) -> float | None:
    """``filter.acc_noise_density`` as the EKF's "EKF ready" line prints it (None when the line is missing)."""
    match = re.search(r"EKF ready: .*filter\.acc_noise_density=([0-9.eE+-]+)", log)
    return float(match.group(1)) if match else None


@pytest.mark.ros
def test_two_vehicles_in_namespaces(tmp_path: Path, ros_domain: int) -> None:
    setup = gf.tiny_setup(tmp_path / "setup", test_seconds=TEST_SECONDS)
    flights = {"/drone1": setup.flight, "/drone2": _shifted(setup.flight, "shifted")}
    bags = {"/drone1": setup.bag, "/drone2": tmp_path / "shifted_bag"}
    write_bag(flights["/drone2"], bags["/drone2"])
    overlay = tmp_path / "overlay.yaml"
    overlay.write_text(
        "/**/velobins_ekf:\n  ros__parameters:\n    filter:\n"
        f"      acc_noise_density: {OVERLAY_NOISE}\n"
        # One domain, one clock: the graphs follow the message stamps, not /clock.
        "/**:\n  ros__parameters:\n    use_sim_time: false\n"
        "/**/velobins_replay:\n  ros__parameters:\n    publish_clock: false\n"
    )
    runs: dict[str, GraphRun] = {}

    def run(ns: str) -> None:
        runs[ns] = run_graph(
            bags[ns],
            setup.checkpoint,
            tmp_path / ns.strip("/"),
            rate=RATE,
            flight=flights[ns].name,
            timeout=90 + TEST_SECONDS / RATE,
            domain_id=ros_domain,
            namespace=ns,
            params_files=[overlay],
        )

    threads = [threading.Thread(target=run, args=(ns,)) for ns in NAMESPACES]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    params = {ns: _logged_noise(runs[ns].logs.get("velobins_ekf_node", "")) for ns in NAMESPACES}
    assert params == {ns: pytest.approx(OVERLAY_NOISE) for ns in NAMESPACES}, params
    for ns in NAMESPACES:
        r = runs[ns]
        logs = "\n".join(f"--- {exe}\n{text[-1500:]}" for exe, text in r.logs.items())
        assert r.return_codes == {exe: 0 for exe in r.return_codes} and len(r.return_codes) == 4, logs
        assert r.metrics, f"{ns}: no report\n{logs}"
        flight = flights[ns]
        metrics = r.metrics["velobins"]["flights"][flight.name]
        # The EKF followed its own vehicle: its trajectory error is far below the 40 m between the
        # two flights, and the report's estimates cover this flight's own stamps.
        assert metrics["ate"] < 0.25 * np.linalg.norm(SHIFT_M), (ns, metrics)
        graph = json.loads((r.report_dir / "config.json").read_text())["graph"]
        assert graph["estimates"] > 0.8 * 20.0 * (TEST_SECONDS - 1.0), (ns, graph)
