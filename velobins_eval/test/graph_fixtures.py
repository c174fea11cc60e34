"""Shared helpers of the node-graph tests (test_graph*.py) and ``benchmarks/bench_graph.py``.

* :func:`tiny_setup` simulates a few short nano flights, trains a tiny G+H^B model on them (one
  epoch, large stride, one torch thread: seconds on a CPU) and writes a held-out flight as a
  rosbag2. The model is deliberately poor: the graph tests check plumbing and agreement with the
  offline pipeline, not accuracy. Cached per process, so both test modules pay for it once.
* :class:`ProbeNode` is the calling process's side of a live graph: its own rclpy context (on the
  test's ROS domain), one node spun on a daemon thread, and a ``/diagnostics`` recorder
  (:class:`Diag` per status, kept by status name). A test's probe subclasses it and adds only its
  own publishers and subscriptions (:meth:`ProbeNode.add_endpoints`) and behaviour.
* :class:`TopicRecorder` is such a probe: it subscribes to graph topics while
  :func:`velobins_eval.graph.run_graph` runs, recording the header stamp, the wall arrival time
  and whether every number in the message was finite.
* :func:`set_stamp` and :func:`stamp_seconds` write and read a message's ``header.stamp``.
* :class:`RealTime` paces a test's simulated sensor: which flight sample to publish, stamped when it is due.
* :func:`drop_totals` parses the ``dropped in total: {...}`` line every node logs when it stops.
* :func:`stop_nodes` stops a test's node processes as Ctrl-C would and says how each one ended.
* :func:`window_diff` says, window by window, where a graph run's network estimates left the offline ones.

rclpy is imported lazily: importing this module needs no ROS install.
"""

from __future__ import annotations

import ast
import csv
import json
import math
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

import numpy as np

from velobins_data.bag import STAMP_OFFSET, write_bag
from velobins_data.flight import Flight
from velobins_eval.graph import NODE_STOP_GRACE_S
from velobins_eval.processes import stop_processes

PRESET = "nano"
"""Simulated platform (PWM rotors, NanoBench-like speeds)."""
TRAIN_FAMILIES = ("circle", "figure8", "lemniscate")
"""Trajectory families of the training flights (one flight each)."""
VAL_FAMILY = "oval"
"""Family of the validation flight (best-checkpoint selection)."""
TEST_FAMILY = "helix"
"""Family of the held-out flight replayed through the graph (not seen in training)."""
TRAIN_SECONDS = 20.0
"""Length of each training / validation flight [s]."""
SEED = 11
"""Seed of the simulated flights (flight i uses SEED + i) and of training."""
TINY_BINS = 32
"""Bins per axis of the tiny model (paper: 512; fewer bins train and run faster)."""
TRAIN_EPOCHS = 1
TRAIN_STRIDE = 20
"""Training window stride [samples]: one epoch over 3 x 20 s flights takes about a second."""
TRAIN_LR = 3e-3
"""Larger than the paper's 3e-4 so that one short epoch gives a model that is not constant."""


@dataclass(frozen=True)
class GraphSetup:
    """A trained tiny checkpoint and a held-out flight, as a Flight and as a bag."""

    checkpoint: Path
    flight: Flight
    bag: Path


_SETUPS: dict[float, GraphSetup] = {}


def tiny_setup(root: Path, test_seconds: float = TRAIN_SECONDS) -> GraphSetup:
    """Simulate, train and convert into ``root`` (once per process and ``test_seconds``; then cached)."""
    if test_seconds in _SETUPS:
        return _SETUPS[test_seconds]
    import torch

    from velobins_data.sim import simulate_flight
    from velobins_net.config import ModelConfig
    from velobins_net.train import TrainConfig, train

    torch.set_num_threads(1)
    families = (*TRAIN_FAMILIES, VAL_FAMILY)
    seqs = [simulate_flight(PRESET, fam, TRAIN_SECONDS, SEED + i, index=i) for i, fam in enumerate(families)]
    i_test = len(families)
    test = simulate_flight(PRESET, TEST_FAMILY, test_seconds, SEED + i_test, index=i_test)
    model = ModelConfig(num_rotors=test.num_rotors, rotor_kind=test.rotor_kind, num_bins=TINY_BINS)
    cfg = TrainConfig(
        model=model,
        variant="G+H^B",
        epochs=TRAIN_EPOCHS,
        stride=TRAIN_STRIDE,
        lr=TRAIN_LR,
        seed=SEED,
        device="cpu",
        progress=False,
        data_description="graph tests: simulated nano flights",
    )
    out = Path(root) / f"setup_{test_seconds:g}s"
    if out.exists():
        shutil.rmtree(out)  # a previous process's setup (write_bag refuses to overwrite)
    result = train(cfg, seqs[:-1], seqs[-1:], out / "model")
    write_bag(test, out / "bag")
    _SETUPS[test_seconds] = GraphSetup(checkpoint=result.best_path, flight=test, bag=out / "bag")
    return _SETUPS[test_seconds]


# ----------------------------------------------------------------------------- node processes
STOP_TIMEOUT = NODE_STOP_GRACE_S
"""Wall seconds the stopped nodes get, together, after SIGINT: the same grace :func:`velobins_eval.graph.run_graph`
gives them."""


def stop_nodes(procs: Mapping[str, subprocess.Popen], timeout: float = STOP_TIMEOUT) -> dict[str, int | None]:
    """Stop a test's nodes as Ctrl-C and ``ros2 launch`` do (:func:`velobins_eval.processes.stop_processes`:
    SIGINT to all, ``timeout`` s together, then SIGTERM and SIGKILL) and return each one's exit status by name,
    so a failed assertion says which node ended how. How long they took is printed (pytest shows it with a
    failure): ``timeout`` s or more means one outlived SIGINT and was terminated.
    """
    start = time.monotonic()
    stop_processes(procs.values(), grace_s=timeout)
    codes = {name: proc.returncode for name, proc in procs.items()}
    print(f"stop_nodes: exit {codes}, {time.monotonic() - start:.1f} s after SIGINT")
    return codes


def window_diff(
    report_dir: Path, label: str, flight: str, t: np.ndarray, v: np.ndarray, offset: float = STAMP_OFFSET
) -> str:
    """Where a graph run's network estimates (``updates.csv`` of ``label``/``flight``) left the offline
    ``(t, v)``: windows only one side has, and windows whose velocity differs by more than 1e-4 m/s.

    The graph tests compare whole-flight figures; when one is off, this line says whether windows went
    missing (and where: at the start is a start-up race) or differ (inputs lost or late), so a failure
    seen once is evidence instead of a number. ``offset`` is the bag's stamp shift (:func:`write_bag`'s).
    """
    config = json.loads((Path(report_dir) / "config.json").read_text())
    updates = Path(report_dir) / config["estimates"][label][flight] / "updates.csv"
    with updates.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    graph = {round(float(r["t"]) - offset, 4): [float(r[k]) for k in ("net_vx", "net_vy", "net_vz")] for r in rows}
    offline = {round(float(s), 4): row for s, row in zip(t, v, strict=True)}
    common = sorted(set(graph) & set(offline))
    differ = [s for s in common if float(np.max(np.abs(np.subtract(graph[s], offline[s])))) > 1e-4]
    missing, extra = sorted(set(offline) - set(graph)), sorted(set(graph) - set(offline))
    return (
        f"windows: graph {len(graph)}, offline {len(offline)}; only offline {len(missing)} {missing[:6]}; "
        f"only graph {len(extra)} {extra[:6]}; differing by > 1e-4 m/s {len(differ)} of {len(common)} {differ[:6]}"
    )


# ----------------------------------------------------------------------------- node logs
_DROP_TOTAL = re.compile(r"dropped in total: (\{.*\}|nothing)")


def drop_totals(log: str) -> dict[str, int]:
    """Counts of the last ``dropped in total: {...}`` line of a node log ({} for 'nothing').

    Raises:
        ValueError: the log has no such line (the node did not stop cleanly).
    """
    found = _DROP_TOTAL.findall(log)
    if not found:
        raise ValueError(f"no 'dropped in total' line in the node log:\n{log[-2000:]}")
    return {} if found[-1] == "nothing" else dict(ast.literal_eval(found[-1]))


# ----------------------------------------------------------------------------- this process's ROS side
def message_numbers(msg: Any) -> list[float]:
    """Every float of a ROS message, nested messages and arrays included (strings and ints skipped)."""
    out: list[float] = []
    for name in msg.get_fields_and_field_types():
        value = getattr(msg, name)
        if isinstance(value, float):
            out.append(value)
        elif hasattr(value, "get_fields_and_field_types"):
            out.extend(message_numbers(value))
        elif not isinstance(value, str | bytes | int):
            try:
                items = list(value)
            except TypeError:
                continue
            for item in items:
                if hasattr(item, "get_fields_and_field_types"):
                    out.extend(message_numbers(item))
                elif isinstance(item, float):
                    out.append(item)
                elif not isinstance(item, int | bool):
                    out.append(float(item))  # numpy float arrays
    return out


@dataclass
class Arrival:
    """One received message: header stamp [s], wall arrival (time.monotonic) [s], all numbers finite."""

    stamp: float
    wall: float
    finite: bool


def set_stamp(msg: Any, t: float) -> None:
    """Set ``msg.header.stamp`` to ``t`` [s] (nearest nanosecond: :func:`velobins_ros.sec_to_stamp`)."""
    from velobins_ros import sec_to_stamp  # imports rclpy: lazily, as the rest of this module

    sec_to_stamp(t, msg.header.stamp)


def stamp_seconds(msg: Any) -> float:
    """``msg.header.stamp`` in seconds (:func:`velobins_ros.stamp_to_sec`)."""
    from velobins_ros import stamp_to_sec

    return stamp_to_sec(msg.header.stamp)


class RealTime:
    """A simulated sensor played in real time at ``rate`` Hz by a test's publisher, over calls of :meth:`play`.

    Each sample is stamped with the wall time it is due, as a driver stamps a sample when it takes it: a
    stall of the publishing thread (a loaded machine) delays samples and sends them in a burst, but never
    squeezes the flight into fewer seconds of stamps. The flight also goes on between two calls (a
    phase's set-up, a pause), so stamps and samples agree across calls too. Stamped on sending instead,
    one 0.2 s stall made test_graph_faults' filter fall behind the flight and fail its NIS test.
    """

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self.k = 0
        """Flight sample of the next message (not wrapped to the flight's length)."""
        self._due: float | None = None  # wall time the next sample is due (None before the first call)

    def play(self, seconds: float, stop: threading.Event | None = None) -> Iterator[tuple[int, float]]:
        """(flight sample, stamp [s]) of each sample due in the next ``seconds`` of wall time, each yielded
        once it is due; the flight first catches up with the wall time since the last call. ``stop``, when
        given, ends the play early and interrupts the wait for the next sample (a publisher thread's stop)."""
        start, wall = time.monotonic(), time.time()
        if self._due is not None and wall > self._due:
            self.k += round((wall - self._due) * self.rate)
        n = 0
        try:
            while time.monotonic() - start < seconds and not (stop is not None and stop.is_set()):
                yield self.k, wall + n / self.rate
                self.k += 1
                n += 1
                wait = max(0.0, start + n / self.rate - time.monotonic())
                if stop is None:
                    time.sleep(wait)
                else:
                    stop.wait(wait)
        finally:
            self._due = wall + n / self.rate


@dataclass
class Diag:
    """One received status: wall arrival (time.monotonic) [s], level, message, key-values, and the node's publish
    time (the array's header stamp, wall clock [s]): when the node decided the status, free of delivery delay."""

    wall: float
    level: int
    message: str
    values: dict[str, str]
    stamp: float = math.nan


class ProbeNode:
    """This process's side of a live graph: own rclpy context and node, spun on a daemon thread.

    The context is private (not rclpy's default one), on the test's ``domain_id``, and installs no
    signal handlers (Ctrl-C stays pytest's); the node's relative topics resolve under ``namespace``.
    Every ``/diagnostics`` status is kept in ``diags[status name]`` in arrival order (unless
    ``diagnostics`` is False). A subclass
    creates its publishers and subscriptions in :meth:`add_endpoints`, which runs before the
    executor starts, so nothing arrives before its subscription exists; state its callbacks use
    is set before ``super().__init__``. Call :meth:`close` when done (or use it as a context manager).

    Attributes:
        ctx, node, executor: the rclpy context, node and executor.
        reliable: reliable QoS of depth ``depth``, for ``/diagnostics`` and the subclass's own endpoints.
        diags: status name -> the statuses received under that name.
    """

    SPIN_TIMEOUT = 0.05
    """Longest wait of one executor spin [s]: how soon the spinning thread notices :meth:`close`."""

    def __init__(
        self, domain_id: int, name: str, *, namespace: str = "", depth: int = 100, diagnostics: bool = True
    ) -> None:
        import rclpy
        from rclpy.context import Context
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.qos import QoSProfile, ReliabilityPolicy
        from rclpy.signals import SignalHandlerOptions

        self.ctx = Context()
        rclpy.init(args=[], context=self.ctx, domain_id=domain_id, signal_handler_options=SignalHandlerOptions.NO)
        self.node = rclpy.create_node(name, namespace=namespace or "/", context=self.ctx)
        self.reliable = QoSProfile(depth=depth, reliability=ReliabilityPolicy.RELIABLE)
        self.diags: dict[str, list[Diag]] = {}
        try:
            if diagnostics:
                from diagnostic_msgs.msg import DiagnosticArray

                self.node.create_subscription(DiagnosticArray, "/diagnostics", self._on_diag, self.reliable)
            self.add_endpoints()
        except BaseException:
            self.node.destroy_node()
            self.ctx.try_shutdown()
            raise
        self.executor = SingleThreadedExecutor(context=self.ctx)
        self.executor.add_node(self.node)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._spin, name=f"{name}-spin", daemon=True)
        self._thread.start()

    def add_endpoints(self) -> None:
        """Create this probe's publishers, subscriptions and clients on ``self.node`` (none here)."""

    def _on_diag(self, msg: Any) -> None:
        now, published = time.monotonic(), stamp_seconds(msg)
        for s in msg.status:
            level = s.level[0] if isinstance(s.level, bytes) else int(s.level)
            values = {kv.key: kv.value for kv in s.values}
            self.diags.setdefault(s.name, []).append(Diag(now, level, s.message, values, published))

    def _spin(self) -> None:
        while not self._stop.is_set() and self.ctx.ok():
            self.executor.spin_once(timeout_sec=self.SPIN_TIMEOUT)

    def wait_for(self, what: Callable[[], Any], timeout: float, label: str) -> None:
        """Return once ``what()`` is true (polled every 50 ms, callbacks run on the spinning thread).

        Raises:
            AssertionError: ``timeout`` [s] passed first ("timed out waiting for <label>").
        """
        end = time.monotonic() + timeout
        while not what():
            if time.monotonic() > end:
                raise AssertionError(f"timed out waiting for {label}")
            time.sleep(0.05)

    def close(self) -> None:
        """Stop spinning, destroy the node and shut the context down."""
        self._stop.set()
        self._thread.join(timeout=5.0)
        self.executor.shutdown()
        self.node.destroy_node()
        self.ctx.try_shutdown()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class TopicRecorder(ProbeNode):
    """Records arrivals on graph topics from this process while a graph runs (use as a context manager).

    Listening starts on construction; leaving the ``with`` block stops it.

    Attributes:
        domain_id: ROS domain of the graph.
        topics: topic -> message class.
        sensor_topics: topics published with sensor-data QoS (best effort); others are reliable.
        check_finite: also flatten each message and record whether every number is finite (costs
            CPU: leave off for topics that only serve latency).
        depth: subscription queue depth (deep, so a busy moment loses nothing).
        keep: topics whose messages are also kept, in arrival order, in ``messages``.
        arrivals: topic -> its arrivals, in arrival order.
    """

    def __init__(
        self,
        domain_id: int,
        topics: dict[str, type],
        sensor_topics: tuple[str, ...] = (),
        check_finite: tuple[str, ...] = (),
        depth: int = 2000,
        keep: tuple[str, ...] = (),
    ) -> None:
        self.domain_id, self.topics, self.sensor_topics = domain_id, topics, sensor_topics
        self.check_finite, self.depth, self.keep = check_finite, depth, keep
        self.arrivals: dict[str, list[Arrival]] = {}
        self.messages: dict[str, list[Any]] = {}
        super().__init__(domain_id, "graph_test_recorder", depth=depth, diagnostics=False)

    def add_endpoints(self) -> None:
        from rclpy.qos import QoSProfile, ReliabilityPolicy

        for topic, msg_type in self.topics.items():
            reliability = ReliabilityPolicy.BEST_EFFORT if topic in self.sensor_topics else ReliabilityPolicy.RELIABLE
            qos = QoSProfile(depth=self.depth, reliability=reliability)
            self.arrivals[topic] = []
            if topic in self.keep:
                self.messages[topic] = []
            self.node.create_subscription(msg_type, topic, self._callback(topic), qos)

    def _callback(self, topic: str) -> Callable[[Any], None]:
        rows = self.arrivals[topic]
        check = topic in self.check_finite
        kept = self.messages.get(topic)

        def on_message(msg: Any) -> None:
            wall = time.monotonic()
            stamp = stamp_seconds(msg)
            finite = all(math.isfinite(x) for x in message_numbers(msg)) if check else True
            rows.append(Arrival(stamp, wall, finite))
            if kept is not None:
                kept.append(msg)

        return on_message


def split_passes(rows: list[Arrival], jump: float = 0.5) -> list[list[Arrival]]:
    """Arrivals cut where the header stamp jumps back by more than ``jump`` [s] (a bag loop)."""
    passes: list[list[Arrival]] = [[]]
    for row in rows:
        if passes[-1] and row.stamp < passes[-1][-1].stamp - jump:
            passes.append([])
        passes[-1].append(row)
    return passes
