"""Shared helpers of the node-graph tests (test_graph*.py) and ``benchmarks/bench_graph.py``.

* :func:`tiny_setup` simulates a few short nano flights, trains a tiny G+H^B model on them (one
  epoch, large stride, one torch thread: seconds on a CPU) and writes a held-out flight as a
  rosbag2. The model is deliberately poor: the graph tests check plumbing and agreement with the
  offline pipeline, not accuracy. Cached per process, so both test modules pay for it once.
* :class:`TopicRecorder` subscribes to graph topics from the calling process (its own rclpy
  context and spinning thread) while :func:`velobins_eval.graph.run_graph` runs, recording the
  header stamp, the wall arrival time and whether every number in the message was finite.
* :func:`drop_totals` parses the ``dropped in total: {...}`` line every node logs when it stops.

rclpy is imported lazily: importing this module needs no ROS install.
"""

from __future__ import annotations

import ast
import math
import re
import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from velobins_data.bag import write_bag
from velobins_data.flight import Flight

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


# ----------------------------------------------------------------------------- in-process subscriber
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


@dataclass
class TopicRecorder:
    """Records arrivals on graph topics from this process while a graph runs (use as a context manager).

    Attributes:
        domain_id: ROS domain of the graph.
        topics: topic -> message class.
        sensor_topics: topics published with sensor-data QoS (best effort); others are reliable.
        check_finite: also flatten each message and record whether every number is finite (costs
            CPU: leave off for topics that only serve latency).
        depth: subscription queue depth (deep, so a busy moment loses nothing).
        keep: topics whose messages are also kept, in arrival order, in ``messages``.
    """

    domain_id: int
    topics: dict[str, type]
    sensor_topics: tuple[str, ...] = ()
    check_finite: tuple[str, ...] = ()
    depth: int = 2000
    keep: tuple[str, ...] = ()
    arrivals: dict[str, list[Arrival]] = field(default_factory=dict)
    messages: dict[str, list[Any]] = field(default_factory=dict)

    def __enter__(self) -> TopicRecorder:
        import rclpy
        from rclpy.context import Context
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.qos import QoSProfile, ReliabilityPolicy
        from rclpy.signals import SignalHandlerOptions

        self._ctx = Context()
        rclpy.init(args=[], context=self._ctx, domain_id=self.domain_id, signal_handler_options=SignalHandlerOptions.NO)
        self._node = rclpy.create_node("graph_test_recorder", context=self._ctx)
        for topic, msg_type in self.topics.items():
            reliability = ReliabilityPolicy.BEST_EFFORT if topic in self.sensor_topics else ReliabilityPolicy.RELIABLE
            qos = QoSProfile(depth=self.depth, reliability=reliability)
            self.arrivals[topic] = []
            if topic in self.keep:
                self.messages[topic] = []
            self._node.create_subscription(msg_type, topic, self._callback(topic), qos)
        self._executor = SingleThreadedExecutor(context=self._ctx)
        self._executor.add_node(self._node)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._spin, name="graph-test-recorder", daemon=True)
        self._thread.start()
        return self

    def _callback(self, topic: str):
        rows = self.arrivals[topic]
        check = topic in self.check_finite
        kept = self.messages.get(topic)

        def on_message(msg: Any) -> None:
            wall = time.monotonic()
            stamp = msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9
            finite = all(math.isfinite(x) for x in message_numbers(msg)) if check else True
            rows.append(Arrival(stamp, wall, finite))
            if kept is not None:
                kept.append(msg)

        return on_message

    def _spin(self) -> None:
        while not self._stop.is_set() and self._ctx.ok():
            self._executor.spin_once(timeout_sec=0.05)

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5.0)
        self._executor.shutdown()
        self._node.destroy_node()
        self._ctx.try_shutdown()


def split_passes(rows: list[Arrival], jump: float = 0.5) -> list[list[Arrival]]:
    """Arrivals cut where the header stamp jumps back by more than ``jump`` [s] (a bag loop)."""
    passes: list[list[Arrival]] = [[]]
    for row in rows:
        if passes[-1] and row.stamp < passes[-1][-1].stamp - jump:
            passes.append([])
        passes[-1].append(row)
    return passes
