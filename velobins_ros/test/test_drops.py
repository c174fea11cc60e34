"""velobins_ros.DropCounter on a real rclpy node: every drop counted, quiet drops at INFO, the rest at WARN.

The quiet switch exists so a node's start-up drops (the network's first velocity predating the
filter's start) do not print a WARN on a healthy start. rclpy refuses a change of severity at one
call site (ValueError, which killed the EKF node in a callback when a start-up drop at INFO was
followed by one at WARN), so the test switches back and forth.
"""

from __future__ import annotations

import re

import pytest


@pytest.mark.ros
def test_quiet_drops_are_info_and_counted_and_the_level_can_change_back_and_forth(
    ros_domain: int, capfd: pytest.CaptureFixture[str]
) -> None:
    import rclpy
    from rclpy.context import Context
    from rclpy.node import Node

    from velobins_ros import DropCounter

    ctx = Context()
    rclpy.init(args=[], context=ctx)
    node = Node("drops_test", context=ctx)
    try:
        quiet = [True]
        drops = DropCounter(node, period=0.0, quiet=lambda: quiet[0])
        drops.drop("meas_too_old", "first velocity before the filter's start")  # first of its reason + summary
        quiet[0] = False
        drops.drop("imu_rejected", "late")  # WARN at the same call sites: rclpy must not raise
        drops.drop("meas_too_old")  # not the first: only the summary, WARN
        quiet[0] = True
        drops.drop("imu_malformed")  # back to INFO
        assert drops.counts == {"meas_too_old": 2, "imu_rejected": 1, "imu_malformed": 1}
        lines = [line for line in capfd.readouterr().err.splitlines() if "drops_test" in line]
        levels = [(re.search(r"\[(INFO|WARN)\]", line).group(1), line.split("]: ", 1)[1]) for line in lines]
        assert levels == [
            ("INFO", "dropping input: meas_too_old: first velocity before the filter's start"),
            ("INFO", "dropped since last report: {'meas_too_old': 1}; total 1"),
            ("WARN", "dropping input: imu_rejected: late"),
            ("WARN", "dropped since last report: {'imu_rejected': 1}; total 2"),
            ("WARN", "dropped since last report: {'meas_too_old': 1}; total 3"),
            ("INFO", "dropping input: imu_malformed"),
            ("INFO", "dropped since last report: {'imu_malformed': 1}; total 4"),
        ]
    finally:
        node.destroy_node()
        rclpy.shutdown(context=ctx)


@pytest.mark.ros
def test_without_quiet_every_drop_report_is_a_warn(ros_domain: int, capfd: pytest.CaptureFixture[str]) -> None:
    import rclpy
    from rclpy.context import Context
    from rclpy.node import Node

    from velobins_ros import DropCounter

    ctx = Context()
    rclpy.init(args=[], context=ctx)
    node = Node("drops_test_loud", context=ctx)
    try:
        drops = DropCounter(node, period=3600.0)
        drops.drop("imu_rejected")
        drops.drop("imu_rejected")  # counted, not said again
        assert drops.counts == {"imu_rejected": 2}
        lines = [line for line in capfd.readouterr().err.splitlines() if "drops_test_loud" in line]
        assert lines and all("[WARN]" in line for line in lines), lines
        assert sum("dropping input: imu_rejected" in line for line in lines) == 1  # the first of its reason
        assert drops.summary() == "dropped in total: {'imu_rejected': 2}"
        drops.extra = lambda: {"filter_disp_too_old": 3, "filter_meas_gated": 0}  # counts kept elsewhere
        assert drops.summary() == "dropped in total: {'filter_disp_too_old': 3, 'imu_rejected': 2}"
    finally:
        node.destroy_node()
        rclpy.shutdown(context=ctx)
