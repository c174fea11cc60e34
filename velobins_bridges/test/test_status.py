"""A bridge's /diagnostics status: the first cause wins (input missing, stopped, own check, drops)."""

from __future__ import annotations

from velobins_bridges.status import bridge_status
from velobins_common.health import ERROR, OK, WARN, Status


def test_first_cause_first() -> None:
    unit = Status(WARN, "check acc_unit")
    none_yet = bridge_status("IMU input", "/cf/imu", None, 0.5, {"nan": 2}, unit)
    assert none_yet.level == ERROR and none_yet.message == "no IMU input on /cf/imu yet"
    stopped = bridge_status("IMU input", "/cf/imu", 2.0, 0.5, {}, unit)
    assert stopped.level == ERROR and stopped.message == "no IMU input on /cf/imu for 2.0 s"
    assert bridge_status("IMU input", "/cf/imu", 0.01, 0.5, {"nan": 2}, unit) is unit
    dropping = bridge_status("odometry", "/velobins/odometry", 0.01, 0.5, {"invalid": 3, "nan": 0})
    assert dropping.level == WARN and dropping.message == "dropping input: invalid ×3"
    ok = bridge_status("odometry", "/velobins/odometry", 0.01, 0.5, {"nan": 0}, working="sending")
    assert ok.level == OK and ok.message == "sending"
