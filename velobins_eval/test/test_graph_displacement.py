"""A displacement method through the node graph: TLIO's network in the loop with the EKF over DDS.

A tiny TLIO model (``velobins train --variant tlio``: one short epoch on the simulated flights of the
other graph tests) runs in the network node of the four-process graph (replay, network, EKF, eval;
:func:`velobins_eval.graph.run_graph`). The graph is a loop: the network reads the attitude of every
window sample from the EKF's odometry, and the EKF fuses the network's displacements against clones
of its past pose. The test records the ``velobins/displacement`` and ``velobins/ekf/update`` streams
and checks

* the network published displacements once its 1 s window was full and the filter ran, each finite,
  stamped with its window's start and end, with an SPD covariance. How many of the 20 Hz slots get one
  is not asserted beyond a floor: a slot is published only when the filter's attitude has come back
  around the loop in time (``predictor.max_attitude_age``, raised here to :data:`MAX_ATTITUDE_AGE` so a
  loaded machine's lag still yields slots) and the replay kept its pace, which is the machine's timing,
  not the code's; the floor :data:`MIN_DISPLACEMENTS` only makes the checks below mean something (a
  fresh-clone run under load published 71 of 140 with the old 0.1 s age);
* the EKF fused them: an update record per displacement, except those it counted as not fused
  (``filter_disp_too_old``: later than its clones and history reach, which a loaded machine can cause;
  its stop line names the filter's counts), the two adding up to what the network published;
* the fused positions are the filter's answer to exactly the displacements it fused: an offline filter
  (:func:`velobins_ekf.offline.run_offline`, started from the same ground truth) fed the same IMU
  and the recorded displacements, each once the IMU has passed its end as in the node, lands on the
  same positions at the update stamps, while the IMU-only filter does not — a graph that ignored or
  mis-fused them fails here;
* the fused trajectory is scored against the ground truth (ATE finite).

The model is deliberately poor (seconds of training: its displacements are off by metres, so the
fused trajectory is far worse than IMU alone); the test checks the plumbing and the agreement with
the offline filter, not accuracy. Measured on a quiet machine: 140 of 140 slots published, graph vs
offline 0.01 m, offline vs IMU-only 217 m, about 32 s for the test (18 s of graph).
"""

from __future__ import annotations

import json
import math
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import graph_fixtures as gf
import numpy as np
import pytest

from velobins_data.bag import read_bag, write_bag
from velobins_eval.graph import run_graph

TEST_SECONDS = 8.0
"""Length of the replayed flight [s]."""
RATE = 1.0
"""Replay speed factor: the EKF re-propagates about 1 s of IMU per displacement (its clone at the window
start), so real time leaves the loop's attitude fresh on a loaded machine."""
TRAIN_EPOCHS = 1
MAX_ATTITUDE_AGE = 1.0
"""predictor.max_attitude_age of the network node here [s] (velobins.yaml: 0.1): the loop's lag (IMU at the
network -> EKF odometry back at the network) it tolerates before refusing a slot (no_attitude)."""
HISTORY_LENGTH = 3.0
"""filter.history_length [s]: the displacement window (1 s) + the attitude lag the network accepts
(:data:`MAX_ATTITUDE_AGE`) + 1 s for the displacement's own way to the EKF: no displacement the network
publishes is too old for the filter's history (filter_disp_too_old, asserted absent)."""
MAX_CLONES = 60
"""filter.max_clones: a clone per 20 Hz displacement over the same 3 s (velobins.yaml: 25, for 0.25 s of lag)."""
MIN_DISPLACEMENTS = 10
"""The fewest displacements for the checks to mean something (of 140 slots; not a rate: see the docstring)."""
AGREE_TOL = 0.2
"""Graph vs offline fused position at the update stamps [m], max over updates: the same inputs applied in
another order (the graph's latency varies, so which displacements each re-propagation re-applies does too),
on a filter that this poor model drives far off (hundreds of metres): measured 0.01-0.03 m"""


@dataclass(frozen=True)
class Setup:
    checkpoint: Path
    bag: Path
    stamp_offset: float
    """What the bag adds to the flight's stamps (read_bag takes it off again) [s]."""


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Setup:
    import torch

    from velobins_data.sim import simulate_flight
    from velobins_net.config import ModelConfig
    from velobins_net.train import TrainConfig, train

    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("graph_displacement")
    families = (*gf.TRAIN_FAMILIES, gf.VAL_FAMILY)
    seqs = [simulate_flight(gf.PRESET, fam, gf.TRAIN_SECONDS, gf.SEED + i, index=i) for i, fam in enumerate(families)]
    i_test = len(families)
    test = simulate_flight(gf.PRESET, gf.TEST_FAMILY, TEST_SECONDS, gf.SEED + i_test, index=i_test)
    cfg = TrainConfig(
        model=ModelConfig(num_rotors=test.num_rotors, rotor_kind=test.rotor_kind),
        variant="tlio",
        epochs=TRAIN_EPOCHS,
        stride=gf.TRAIN_STRIDE,
        lr=gf.TRAIN_LR,
        seed=gf.SEED,
        device="cpu",
        progress=False,
        data_description="graph test: simulated nano flights",
    )
    shutil.rmtree(root / "model", ignore_errors=True)
    result = train(cfg, seqs[:-1], seqs[-1:], root / "model")
    info = write_bag(test, root / "bag")
    return Setup(result.best_path, root / "bag", info.stamp_offset)


@pytest.mark.ros
def test_tlio_displacements_through_the_graph(
    setup: Setup, tmp_path: Path, ros_domain: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    from nav_msgs.msg import Odometry

    from velobins_ekf.config import EkfConfig
    from velobins_ekf.offline import run_offline
    from velobins_eval.evaluate import ground_truth_state
    from velobins_eval.metrics import ate
    from velobins_eval.scoring import GroundTruth
    from velobins_msgs.msg import Displacement
    from velobins_ros import stamp_to_sec

    # the filter's cloned-state covariance: a threaded BLAS on busy cores is 10x slower (scripts/run_tests.sh)
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "1")
    disp_topic, upd_topic = "/velobins/displacement", "/velobins/ekf/update"
    topics = {disp_topic: Displacement, upd_topic: Odometry}
    start = time.monotonic()
    with gf.TopicRecorder(ros_domain, topics, check_finite=tuple(topics), keep=tuple(topics)) as rec:
        run = run_graph(
            setup.bag,
            setup.checkpoint,
            tmp_path / "report",
            rate=RATE,
            label="tlio",
            flight="helix",
            extra_params={
                "velobins_ekf_node": {"filter.history_length": HISTORY_LENGTH, "filter.max_clones": MAX_CLONES},
                "velobins_net_node": {"predictor.max_attitude_age": MAX_ATTITUDE_AGE},
            },
            timeout=60 + 2 * TEST_SECONDS / RATE,
            domain_id=ros_domain,
        )
        time.sleep(0.5)  # the last messages reach the recorder
    wall = time.monotonic() - start
    logs = "\n".join(f"--- {exe}\n{text[-2000:]}" for exe, text in run.logs.items())
    assert run.return_codes == {exe: 0 for exe in run.return_codes} and len(run.return_codes) == 4, logs
    net_log, ekf_log = run.logs["velobins_net_node"], run.logs["velobins_ekf_node"]
    assert "method=tlio (displacement)" in net_log and "velobins/displacement" in net_log, net_log[-2000:]

    # the network: displacements once the window is full, finite, SPD, stamped with their window
    seq = read_bag(setup.bag)
    disps = rec.messages[disp_topic]
    slots = (seq.t[-1] - seq.t[0] - 1.0) * 20.0
    assert len(disps) >= MIN_DISPLACEMENTS, (len(disps), slots, net_log[-2000:])
    assert all(a.finite for a in rec.arrivals[disp_topic])
    t_end = np.array([stamp_to_sec(m.header.stamp) for m in disps]) - setup.stamp_offset  # read_bag's time
    t_start = np.array([stamp_to_sec(m.start) for m in disps]) - setup.stamp_offset
    dz = np.array([[m.displacement.x, m.displacement.y, m.displacement.z] for m in disps])
    cov = np.array([np.asarray(m.covariance).reshape(3, 3) for m in disps])
    assert np.all(np.diff(t_end) > 0) and np.allclose(t_end - t_start, 0.99, atol=2e-3), (t_end - t_start)[:5]
    assert all(m.header.frame_id == "odom" for m in disps)
    assert np.allclose(cov, cov.transpose(0, 2, 1)) and np.all(np.linalg.eigvalsh(cov) > 0)
    net_drops = gf.drop_totals(net_log)
    assert not net_drops, net_drops

    # the EKF: an update record for each displacement it fused (a gated one too), and each one it did not
    # fuse counted under its reason (filter_disp_too_old when it came later than the filter's clones and
    # history reach): every displacement accounted for, however late the machine delivered it
    ekf_drops = gf.drop_totals(ekf_log)
    ups = {round(stamp_to_sec(m.header.stamp) - setup.stamp_offset, 6): m for m in rec.messages[upd_topic]}
    assert all(a.finite for a in rec.arrivals[upd_topic])
    keys = [round(t, 6) for t in t_end]
    assert set(ups) <= set(keys), sorted(set(ups) - set(keys))[:5]
    not_fused = ekf_drops.get("displacement_before_init", 0) + sum(
        v for k, v in ekf_drops.items() if k.startswith("filter_disp_") and k != "filter_disp_gated"
    )
    assert len(ups) + not_fused == len(t_end), (len(ups), len(t_end), ekf_drops)
    fused = np.array([k in ups for k in keys])
    assert fused.sum() >= MIN_DISPLACEMENTS, (int(fused.sum()), ekf_drops)
    t_start, t_end, dz, cov = t_start[fused], t_end[fused], dz[fused], cov[fused]
    p_graph = np.array([[ups[round(t, 6)].pose.pose.position.x, ups[round(t, 6)].pose.pose.position.y,
                         ups[round(t, 6)].pose.pose.position.z] for t in t_end])  # fmt: skip

    # the displacements the graph fused, offline (same IMU, same ground-truth start), and IMU alone
    ekf = EkfConfig(history_length=HISTORY_LENGTH, max_clones=MAX_CLONES)
    init = ground_truth_state(seq)
    fed = [0]

    def late(i: int, filt) -> None:  # as in the node: each displacement once the IMU has passed its end
        while fed[0] < len(t_end) and t_end[fed[0]] < seq.t[i]:
            k = fed[0]
            filt.add_displacement(t_start[k], t_end[k], dz[k], cov[k])
            fed[0] += 1

    none = np.zeros((0, 3))
    args = (seq.t, seq.acc, seq.gyro, none[:, 0], none, np.zeros((0, 3, 3)))
    offline = run_offline(*args, init_state=init, config=ekf, on_imu=late)
    off = {round(u.stamp, 6): u.pos for u in offline.displacement_updates}
    inside = t_end < seq.t[-1]  # one ending at the last IMU sample: the offline loop has no later sample
    t_end, p_graph = t_end[inside], p_graph[inside]
    p_off = np.array([off[round(t, 6)] for t in t_end])
    imu_only = run_offline(*args, init_state=init, config=ekf)
    p_imu = np.array([imu_only.pos[np.searchsorted(imu_only.t, t)] for t in t_end])
    graph_vs_offline = float(np.max(np.linalg.norm(p_graph - p_off, axis=1)))
    offline_vs_imu = float(np.max(np.linalg.norm(p_off - p_imu, axis=1)))
    truth = GroundTruth.of(seq).at(t_end)
    figures = {
        "displacements": len(disps),
        "fused": int(fused.sum()),
        "slots": round(slots),
        "graph_vs_offline_m": graph_vs_offline,
        "offline_vs_imu_only_m": offline_vs_imu,
        "ate_graph": ate(p_graph, truth.p),
        "ate_offline": ate(p_off, truth.p),
        "ate_imu_only": ate(p_imu, truth.p),
        "wall_s": wall,
    }
    print("graph displacement figures:", figures)
    assert graph_vs_offline <= AGREE_TOL, figures
    assert offline_vs_imu >= 10 * AGREE_TOL, figures  # the displacements moved the filter: the check bites
    assert math.isfinite(figures["ate_graph"]), figures

    # the eval node scored the run: the fused columns from the displacement updates, no network velocity
    report = json.loads((tmp_path / "report" / "metrics.json").read_text())
    entry = report["tlio"]["aggregate"]
    assert entry["net_ave"] is None and entry["ate"] is not None, entry
    assert abs(entry["ate"] - figures["ate_graph"]) <= 0.05 * figures["ate_graph"] + 0.05, (entry, figures)
