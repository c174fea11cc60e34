"""The node graph on a held-out simulated flight: clean exit, stream rates, and the offline figures.

Four processes over DDS (replay, network, EKF, eval; :func:`velobins_eval.graph.run_graph`) replay
a bag at twice real time. The eval node's report must match the offline pipeline on the same bag
(``read_bag`` -> ``predict_flight`` -> ``fuse_flight`` -> ``score``), which shares the network and
filter code with the nodes: what may differ is only what the graph changes (message timing).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import graph_fixtures as gf
import numpy as np
import pytest

from velobins_data.bag import read_bag
from velobins_eval.evaluate import fuse_flight, predict_flight
from velobins_eval.graph import run_graph
from velobins_eval.scoring import ALL_KEYS, GroundTruth, score

RATE = 2.0
"""Replay speed factor (wall seconds per bag second = 1 / RATE)."""
STREAM_RATE_TOL = 0.05
"""Relative tolerance of the measured odometry and estimate rates (±5 %)."""
COUNT_TOL = 0.02
"""Relative tolerance of the estimate count against the offline schedule (a message lost or late)."""
METRIC_REL_TOL = 0.02
"""Graph vs offline, relative, for the velocity and uncertainty metrics (net AVE/NLL, AVE, NEES).
The network sees the same windows and the filter the same inputs; what differs is that a velocity
estimate reaches the EKF after the IMU sample of its own stamp, so it is applied by
re-propagation instead of in stream order, and the filter starts from the ground-truth message
instead of the array: measured 0.0 % on the AVEs and NLL, up to 0.2 % on the NEES median."""
POSITION_REL_TOL = METRIC_REL_TOL
"""Graph vs offline, relative, for ATE and RTE: the same bound. Both score the position the EKF
reports right after each update (the update record carries it), so re-propagation order is the
only difference, as for the velocity metrics."""
ABS_FLOOR = {"net_nll": 0.01, "nees_in_bounds": 0.01, "yaw_final": 0.05, "rot_rms": 0.05}
"""Absolute tolerance for metrics that can be near zero (NLL in nats; NEES-in-bounds fraction; the attitude
errors in degrees, small on a simulated flight)."""


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> gf.GraphSetup:
    return gf.tiny_setup(tmp_path_factory.mktemp("graph"))


def offline_metrics(setup: gf.GraphSetup) -> tuple[dict[str, float], np.ndarray, np.ndarray]:
    """The offline pipeline on the same bag: (the seven metrics, the network estimates' stamps and velocities)."""
    from velobins_net.inference import load_checkpoint

    seq = read_bag(setup.bag)
    t, v, var = predict_flight(load_checkpoint(setup.checkpoint), seq)
    record = fuse_flight(seq, t, v, var, "offline")
    scored = score(record, GroundTruth.of(seq))
    return {k: float(getattr(scored, k)) for k in ALL_KEYS}, t, v


@pytest.mark.ros
def test_graph_matches_offline(setup: gf.GraphSetup, tmp_path: Path, ros_domain: int) -> None:
    label, flight = "G+H^B", setup.flight.name
    run = run_graph(
        setup.bag,
        setup.checkpoint,
        tmp_path / "report",
        rate=RATE,
        label=label,
        flight=flight,
        timeout=60 + 2 * setup.flight.duration / RATE,
        domain_id=ros_domain,
    )
    logs = "\n".join(f"--- {exe}\n{text[-1500:]}" for exe, text in run.logs.items())
    assert run.return_codes == {exe: 0 for exe in run.return_codes} and len(run.return_codes) == 4, logs
    assert run.metrics, f"no metrics.json written\n{logs}"

    # stream rates: odometry at the bag's IMU rate, estimates at the network's 20 Hz schedule
    graph = json.loads((run.report_dir / "config.json").read_text())["graph"]
    imu_rate = setup.flight.rate_hz
    assert graph["odometry_rate_hz"] == pytest.approx(imu_rate, rel=STREAM_RATE_TOL), graph
    assert graph["odometry"] >= (1 - COUNT_TOL) * len(setup.flight), graph
    assert graph["dropped"] == {}, graph  # the eval node saw no non-finite estimate
    offline, t_net, v_net = offline_metrics(setup)
    n_estimates = len(t_net)
    assert graph["estimates"] == pytest.approx(n_estimates, rel=COUNT_TOL), (graph, n_estimates)
    update_rate = 20.0  # paper §III-A: network estimates at 20 Hz of IMU time
    span = setup.flight.duration - 1.0  # the first estimate needs a full 1 s window
    assert graph["estimates"] / span == pytest.approx(update_rate, rel=STREAM_RATE_TOL), graph

    # every metric, the paper's seven and the labelled additions: graph vs offline
    got = run.metrics[label]["flights"][flight]
    assert set(got) == set(ALL_KEYS)
    for key in ALL_KEYS:
        assert got[key] is not None and math.isfinite(got[key]), (key, got)
        rel = POSITION_REL_TOL if key in ("ate", "rte", "ate_yaw", "ate_se3") else METRIC_REL_TOL
        tol = max(rel * abs(offline[key]), ABS_FLOOR.get(key, 0.0))
        if abs(got[key] - offline[key]) > tol:
            windows = gf.window_diff(run.report_dir, label, flight, t_net, v_net)
            raise AssertionError(f"{key}: graph {got[key]:.6g} vs offline {offline[key]:.6g}; {windows}\n{logs}")
    assert (run.report_dir / "metrics.md").is_file() and any((run.report_dir / "plots").glob("*.png"))
    # what the graph produced, on disk: TUM, per-update record and the MCAP recording of its odometry
    config = json.loads((run.report_dir / "config.json").read_text())
    files = run.report_dir / config["estimates"][label][flight]
    assert {p.name for p in files.iterdir()} == {"estimate.tum", "ground_truth.tum", "updates.csv", "recording"}
    rows = len((files / "updates.csv").read_text().splitlines()) - 1
    assert rows == len([ln for ln in (files / "estimate.tum").read_text().splitlines() if not ln.startswith("#")])
    assert (files / "recording" / "recording.mcap").is_file() and (run.report_dir / "report.html").is_file()
