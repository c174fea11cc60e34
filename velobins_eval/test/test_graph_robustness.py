"""The node graph on a faulted bag: it keeps running, counts what it drops, and never publishes NaN.

The faulted bag is a clean held-out flight (written by ``bag.write_bag``, so the messages are the
ones the graph normally sees) with, in its first pass: NaN IMU samples, a stretch where
/rotor_speeds stops and resumes, two IMU samples published in swapped order, one IMU sample
published twice, and one rotor message with the wrong rotor count; then the whole clean flight
again with its original header stamps (a bag loop: header time jumps back while log time, and so
/clock, keeps increasing). One graph run serves all tests of this module.
"""

from __future__ import annotations

import itertools
import json
import math
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import graph_fixtures as gf
import numpy as np
import pytest
from rosbags.rosbag2 import Reader, Writer

from velobins_data import bag
from velobins_eval.scoring import ALL_KEYS

RATE = 2.0
"""Replay speed factor of the faulted run."""
FLIGHT_SECONDS = 12.0
"""Length of the flight that is faulted and looped (the bag holds twice this) [s]."""
UPDATE_RATE = 20.0
"""Network estimates per second of IMU time (paper §III-A; velobins.yaml update_rate)."""
MAX_ROTOR_AGE = 0.1
"""velobins.yaml max_rotor_age [s]: the network stops this long after the last rotor sample."""
WINDOW_S = 1.0
"""Network input window [s]: the first estimate of a pass needs this much IMU."""
DELIVERY = 0.9
"""Share of the expected estimates / odometry that must arrive (sensor topics are best effort)."""
DUPLICATE_DELAY_NS = 1_000
"""Log-time offset of the duplicated IMU message (log time stays strictly increasing)."""


@dataclass(frozen=True)
class FaultPlan:
    """Faults of the first pass, by sample index of the clean 100 Hz flight (or seconds from its start)."""

    nan_imu: tuple[int, ...] = (300, 301, 302)
    """IMU samples whose specific force / rate is NaN (one field each: acc x, gyro y, both)."""
    rotor_gap: tuple[float, float] = (5.0, 6.0)
    """[start, end) [s from the flight start] with no /rotor_speeds message."""
    swap_imu: int = 700
    """IMU samples i and i + 1 are published in swapped order (i + 1's stamp first)."""
    duplicate_imu: int = 750
    """This IMU sample is published twice."""
    bad_rotor: int = 800
    """This rotor message carries one rotor too few."""

    @property
    def imu_rejections(self) -> int:
        """IMU samples a correct node rejects in the first pass: NaN, the late one of the swap, the copy."""
        return len(self.nan_imu) + 2


PLAN = FaultPlan()


def write_faulted_bag(clean: Path, out: Path, plan: FaultPlan = PLAN) -> None:
    """Copy the bag ``clean`` (from ``bag.write_bag``) to ``out`` with ``plan``'s faults, then loop it once."""
    store = bag.typestore()
    samples: dict[int, dict[str, bytes]] = defaultdict(dict)
    with Reader(clean) as reader:
        msgtypes = {c.topic: c.msgtype for c in reader.connections}
        for conn, log_ns, raw in reader.messages():
            samples[log_ns][conn.topic] = bytes(raw)
    stamps = sorted(samples)
    imu_type, rotor_type = msgtypes[bag.TOPIC_IMU], msgtypes[bag.TOPIC_ROTOR]

    def imu_at(i: int) -> bytes:
        raw = samples[stamps[i]][bag.TOPIC_IMU]
        if i not in plan.nan_imu:
            return raw
        msg = store.deserialize_cdr(raw, imu_type)
        k = plan.nan_imu.index(i) % 3
        if k in (0, 2):
            msg.linear_acceleration.x = math.nan
        if k in (1, 2):
            msg.angular_velocity.y = math.nan
        return bytes(store.serialize_cdr(msg, imu_type))

    events: list[tuple[int, str, bytes]] = []
    for i, ns in enumerate(stamps):
        src = {plan.swap_imu: i + 1, plan.swap_imu + 1: i - 1}.get(i, i)
        events.append((ns, bag.TOPIC_IMU, imu_at(src)))
        since_start = (ns - stamps[0]) * 1e-9
        if not plan.rotor_gap[0] <= since_start < plan.rotor_gap[1]:
            rotor = samples[ns][bag.TOPIC_ROTOR]
            if i == plan.bad_rotor:
                msg = store.deserialize_cdr(rotor, rotor_type)
                msg.speeds = np.ascontiguousarray(msg.speeds[:-1])
                rotor = bytes(store.serialize_cdr(msg, rotor_type))
            events.append((ns, bag.TOPIC_ROTOR, rotor))
        events.append((ns, bag.TOPIC_GT, samples[ns][bag.TOPIC_GT]))
        if i == plan.duplicate_imu:
            events.append((ns + DUPLICATE_DELAY_NS, bag.TOPIC_IMU, imu_at(i)))
    # the loop: the clean flight again, same header stamps, log time continuing one sample later
    shift = stamps[-1] - stamps[0] + (stamps[1] - stamps[0])
    events += [(ns + shift, topic, samples[ns][topic]) for ns in stamps for topic in msgtypes]
    log_times = [e[0] for e in events]
    assert all(a <= b for a, b in itertools.pairwise(log_times)), "log time must not go back"
    with Writer(out, version=9, storage_plugin=bag.StoragePlugin.MCAP) as writer:
        conns = {t: writer.add_connection(t, m, typestore=store) for t, m in msgtypes.items()}
        for log_ns, topic, raw in events:
            writer.write(conns[topic], log_ns, raw)


@dataclass
class FaultedRun:
    """One graph run on the faulted bag, with what this process received meanwhile."""

    run: object
    """The :class:`velobins_eval.graph.GraphRun`."""
    velocity: list[gf.Arrival]
    odometry: list[gf.Arrival]
    t0: float
    """Header stamp of the flight's first sample [s]."""
    imu_rate: float
    """IMU rate of the bag [Hz] (odometry follows it)."""


_RUNS: dict[str, FaultedRun] = {}


def faulted_run(setup: gf.GraphSetup, root: Path, domain: int) -> FaultedRun:
    """Build the faulted bag and run the graph on it once per module (later calls reuse the run)."""
    if "run" in _RUNS:
        return _RUNS["run"]
    from nav_msgs.msg import Odometry

    from velobins_eval.graph import run_graph
    from velobins_msgs.msg import VelocityEstimate

    clean = setup.flight.slice(0, round(FLIGHT_SECONDS * setup.flight.rate_hz))
    info = bag.write_bag(clean, root / "clean")
    write_faulted_bag(root / "clean", root / "faulted")
    topics = {"/velobins/velocity": VelocityEstimate, "/velobins/odometry": Odometry}
    with gf.TopicRecorder(domain, topics, check_finite=tuple(topics)) as recorder:
        run = run_graph(
            root / "faulted",
            setup.checkpoint,
            root / "report",
            rate=RATE,
            flight=clean.name,
            extra_params={"velobins_eval_node": {"plots": False}},
            timeout=60 + 2 * 2 * FLIGHT_SECONDS / RATE,
            domain_id=domain,
        )
    rec = recorder.arrivals
    _RUNS["run"] = FaultedRun(
        run, rec["/velobins/velocity"], rec["/velobins/odometry"], clean.t[0] + info.stamp_offset, clean.rate_hz
    )
    return _RUNS["run"]


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> gf.GraphSetup:
    return gf.tiny_setup(tmp_path_factory.mktemp("graph"))


@pytest.fixture
def faulted(setup: gf.GraphSetup, tmp_path_factory: pytest.TempPathFactory, ros_domain: int) -> FaultedRun:
    return faulted_run(setup, tmp_path_factory.mktemp("faulted"), ros_domain)


def _logs(run) -> str:
    return "\n".join(f"--- {exe}\n{text[-2500:]}" for exe, text in run.logs.items())


def test_faulted_bag_layout(setup: gf.GraphSetup, tmp_path: Path) -> None:
    """The builder injects exactly the planned faults (so the graph assertions below mean something)."""
    clean = setup.flight.slice(0, round(FLIGHT_SECONDS * setup.flight.rate_hz))
    bag.write_bag(clean, tmp_path / "clean")
    write_faulted_bag(tmp_path / "clean", tmp_path / "faulted")
    store = bag.typestore()
    imu_t, rotor_t, rotor_n, nan_rows = [], [], [], 0
    with Reader(tmp_path / "faulted") as reader:
        for conn, _, raw in reader.messages():
            msg = store.deserialize_cdr(raw, conn.msgtype)
            t = msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9
            if conn.topic == bag.TOPIC_IMU:
                imu_t.append(t)
                a, w = msg.linear_acceleration, msg.angular_velocity
                nan_rows += not np.all(np.isfinite([a.x, a.y, a.z, w.x, w.y, w.z]))
            elif conn.topic == bag.TOPIC_ROTOR:
                rotor_t.append(t)
                rotor_n.append(len(msg.speeds))
    n = len(clean)
    dt = np.diff(imu_t)
    assert len(imu_t) == 2 * n + 1 and nan_rows == len(PLAN.nan_imu)
    assert (dt == 0).sum() == 1  # the duplicate
    assert (dt < 0).sum() == 2 and dt.min() < -(FLIGHT_SECONDS - 1)  # the swap, and the loop
    assert rotor_n.count(clean.num_rotors - 1) == 1
    gap = np.diff(rotor_t[:n])
    assert gap.max() == pytest.approx(PLAN.rotor_gap[1] - PLAN.rotor_gap[0] + 1 / clean.rate_hz, abs=1e-6)


@pytest.mark.ros
def test_graph_survives_faults(faulted: FaultedRun) -> None:
    """Every node runs to the end, exits 0, and the report is complete and finite."""
    run = faulted.run
    logs = _logs(run)
    assert len(run.return_codes) == 4 and all(rc == 0 for rc in run.return_codes.values()), (run.return_codes, logs)
    assert "report written" in run.logs["velobins_eval_node"], logs
    assert "finished:" in run.logs["velobins_replay_node"], logs
    flight = next(iter(run.metrics.values()))["flights"]
    values = next(iter(flight.values()))
    assert set(values) == set(ALL_KEYS)
    assert all(v is not None and math.isfinite(v) for v in values.values()), values  # NaN is written as null
    graph = json.loads((run.report_dir / "config.json").read_text())["graph"]
    assert graph["dropped"] == {}, graph  # no non-finite estimate reached the eval node


@pytest.mark.ros
def test_drops_are_counted_and_logged(faulted: FaultedRun) -> None:
    """The network and EKF nodes count each fault under its reason, log it, and restart on the loop."""
    run = faulted.run
    logs = _logs(run)
    net, ekf = run.logs["velobins_net_node"], run.logs["velobins_ekf_node"]
    net_drops, ekf_drops = gf.drop_totals(net), gf.drop_totals(ekf)
    # exact counts: each injected fault once (a loaded machine could lose one on best-effort /imu)
    assert net_drops.get("imu_rejected") == PLAN.imu_rejections, net_drops
    assert ekf_drops.get("imu_rejected") == PLAN.imu_rejections, ekf_drops
    assert ekf_drops.get("imu_before_init", 0) >= 2, ekf_drops  # waits for ground truth at start and after the loop
    assert net_drops.get("rotor_count") == 1, net_drops
    assert net_drops.get("time_jump_reset") == 1 and ekf_drops.get("time_jump_reset") == 1, (net_drops, ekf_drops)
    assert "dropping input: imu_rejected" in net and "dropping input: rotor_count" in net, logs
    assert "dropping input: imu_rejected" in ekf, logs
    assert "resetting the window" in net, logs
    assert "filter restarted: IMU time jumped back" in ekf and ekf.count("initialised from ground truth") == 2, logs


@pytest.mark.ros
def test_no_nan_published_and_streams_resume(faulted: FaultedRun) -> None:
    """Subscribed from this process: no NaN on the outputs; estimates resume after the rotor gap and the loop."""
    assert faulted.velocity and faulted.odometry
    assert all(a.finite for a in faulted.velocity), "NaN/inf on /velobins/velocity"
    assert all(a.finite for a in faulted.odometry), "NaN/inf on /velobins/odometry"
    vel_passes = gf.split_passes(faulted.velocity)
    odom_passes = gf.split_passes(faulted.odometry)
    assert len(vel_passes) == 2 and len(odom_passes) == 2, "no second pass after the bag loop"
    first = np.array([a.stamp for a in vel_passes[0]]) - faulted.t0
    # no estimate on stale rotor data inside the gap, and the network resumes when rotors do
    gap0, gap1 = PLAN.rotor_gap
    stale = first[(first > gap0 + MAX_ROTOR_AGE + 0.02) & (first < gap1)]
    assert stale.size == 0, f"estimates published during the rotor gap at {stale}"
    after = first[first >= gap1]
    assert after.size >= DELIVERY * UPDATE_RATE * (FLIGHT_SECONDS - gap1), first[-20:]
    assert after.min() < gap1 + 0.2, "network did not resume right after the rotor gap"
    # after the loop (header time back to the start) the network and the EKF run again
    expected = UPDATE_RATE * (FLIGHT_SECONDS - WINDOW_S)
    assert len(vel_passes[1]) >= DELIVERY * expected, (len(vel_passes[1]), expected)
    assert len(odom_passes[1]) >= DELIVERY * faulted.imu_rate * (FLIGHT_SECONDS - 1.0), len(odom_passes[1])
