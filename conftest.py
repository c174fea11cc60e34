"""Workspace-wide pytest fixtures.

ROS-dependent tests use the ``ros_domain`` fixture: it gives each test its own ROS_DOMAIN_ID so
concurrent test runs on one machine never hear each other, and it skips the test when the
workspace is not sourced — unless VELOBINS_REQUIRE_ROS=1 (set by scripts/run_tests.sh and so in
CI), where a missing ROS stack is a failure, not a skip.
"""

from __future__ import annotations

import os
import random
import signal
import sys
from pathlib import Path

import pytest

# The dataset fixture writers (velobins_data/test/fixtures_datasets.py) serve the tests of velobins_data
# and of velobins_eval, whose commands read the same files.
SHARED_FIXTURES = Path(__file__).resolve().parent / "velobins_data" / "test"
# The live-graph probe (velobins_eval/test/graph_fixtures.py: ProbeNode) serves velobins_eval's graph tests and the
# launch tests' vehicle (velobins_bringup/test/vehicle_probe.py).
GRAPH_FIXTURES = Path(__file__).resolve().parent / "velobins_eval" / "test"
for _folder in (SHARED_FIXTURES, GRAPH_FIXTURES):
    if str(_folder) not in sys.path:
        sys.path.insert(0, str(_folder))

# A suite started in the background without job control (nohup, `cmd &` in a script, some CI runners) inherits
# SIGINT ignored, and so would every node, launch and job it starts: Ctrl-C would never reach them, and the tests
# of what Ctrl-C and a launch's shutdown do would fail for a reason that is not the product's. A handler set here
# is reset to the default in every process the tests start (ignored signals stay ignored across exec, handled
# ones do not).
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def _ros_available() -> str | None:
    """Return None when rclpy and velobins_msgs import, else the reason they do not."""
    try:
        import rclpy  # noqa: F401

        from velobins_msgs.msg import RotorSpeeds  # noqa: F401
    except ImportError as exc:  # pragma: no cover - depends on the environment
        return f"ROS 2 workspace not sourced ({exc}); run: source scripts/env.sh"
    return None


@pytest.fixture
def ros_domain(monkeypatch: pytest.MonkeyPatch) -> int:
    """A private ROS_DOMAIN_ID for this test (also exported to child processes)."""
    reason = _ros_available()
    if reason is not None:
        if os.environ.get("VELOBINS_REQUIRE_ROS") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    domain = random.SystemRandom().randint(1, 100)
    monkeypatch.setenv("ROS_DOMAIN_ID", str(domain))
    monkeypatch.setenv("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    return domain
