"""velobins_common.health: rate meters, χ² bounds, NIS summaries and the nodes' state decisions."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from velobins_common.health import (
    ERROR,
    OK,
    STALE,
    WARN,
    CountDelta,
    EkfLimits,
    EkfView,
    LatencyMeter,
    NisMonitor,
    RateMeter,
    SampleLoss,
    SilenceAlarm,
    Status,
    Stream,
    ekf_status,
    net_status,
)
from velobins_common.stats import chi2_quantile


def test_rate_meter_rate_and_age() -> None:
    m = RateMeter(window=2.0)
    assert m.rate(0.0) == 0.0 and m.age(0.0) is None
    for i in range(500):
        m.tick(10.0 + i * 0.01, stamp=100.0 + i * 0.01)
    assert m.rate(15.0) == pytest.approx(100.0, rel=0.02)
    assert m.age(15.5) == pytest.approx(0.51)
    assert m.last_stamp == pytest.approx(104.99)
    assert m.rate(30.0) == 0.0  # nothing in the window any more
    assert m.count == 500


def test_nis_test_quiet_when_consistent_or_conservative_raised_when_overconfident_with_hysteresis() -> None:
    rng = np.random.default_rng(1)
    consistent = NisMonitor(window=40)
    for x in (rng.normal(size=(4000, 3)) ** 2).sum(axis=1):
        consistent.add(float(x))
    # white χ²₃ NIS: at most a rare raise (probability 1e-3 per window), 100 windows here
    assert consistent.raises <= 1 and consistent.share_inside() == pytest.approx(0.95, abs=0.05)
    assert consistent.raise_sum == pytest.approx(chi2_quantile(0.999, 120))
    conservative = NisMonitor(window=40)  # a covariance 3x too large: NIS around 1
    for x in (rng.normal(size=(400, 3)) ** 2).sum(axis=1):
        conservative.add(float(x) / 3.0)
    assert conservative.raises == 0 and not conservative.raised
    mon = NisMonitor(window=10)
    for _ in range(9):
        mon.add(50.0)
    assert not mon.raised  # not a full window yet
    mon.add(50.0)
    mon.add(math.nan)  # ignored
    assert mon.raised and mon.raises == 1 and mon.total == 10 and "filter inconsistent" in mon.message()
    for _ in range(5):  # window mean 26.5 -> well below the alarm of a window of 50s, above the median: stays
        mon.add(3.0)
    assert mon.raised
    for _ in range(10):
        mon.add(1.0)
    assert not mon.raised and mon.raises == 1  # cleared below the median (mean ≈ 3)
    assert "NIS alarms" in mon.values() and mon.values()["NIS mean"] == "1.000"


def test_nis_test_names_a_marked_hold_while_the_updates_after_it_are_in_the_window() -> None:
    """After a hold the filter's kept attitude and velocity are off by what the gap hid: the alarm that
    follows names the gap, not the IMU and the network, until the window has moved past it."""
    mon = NisMonitor(window=10)
    for _ in range(10):
        mon.add(3.0)
    mon.mark("IMU gap of 1.500 s")
    assert mon.marked() is None  # nothing after it yet
    for _ in range(10):
        mon.add(60.0)
    assert mon.raised and mon.marked() == "IMU gap of 1.500 s"
    assert "after the IMU gap of 1.500 s (filter held)" in mon.message() and "network disagree" not in mon.message()
    mon.add(60.0)  # the first update after the gap has left the window: the cause is open again
    assert mon.raised and mon.marked() is None and "the IMU and the network disagree" in mon.message()
    mon.mark("IMU gap of 0.400 s")
    mon.add(60.0)
    mon.reset()  # a restart forgets the window and the mark
    for _ in range(10):
        mon.add(60.0)
    assert mon.raised and mon.marked() is None


def test_sample_loss_and_latency() -> None:
    loss = SampleLoss(window=2.0)
    stamps = np.arange(0.0, 3.0, 0.001)
    keep = np.ones(stamps.size, bool)
    keep[::10] = False  # 10 % lost
    for t in stamps[keep]:
        loss.add(float(t))
    assert loss.loss() == pytest.approx(0.1, abs=0.01) and loss.period() == pytest.approx(0.001)
    loss.add(0.5)  # stamps back (a bag loop): starts again
    assert loss.loss() is None
    lat = LatencyMeter()
    for x in range(1, 101):
        lat.add(x / 1000.0)
    assert lat.percentile(0.5) == pytest.approx(0.051) and lat.percentile(0.95) == pytest.approx(0.096)


def test_count_delta_reports_new_counts_and_survives_a_replaced_counter() -> None:
    d = CountDelta()
    assert d.since({"no_rotor": 3}) == {"no_rotor": 3}
    assert d.since({"no_rotor": 3}) == {}
    assert d.since({"no_rotor": 5, "ok": 1}) == {"no_rotor": 2, "ok": 1}
    assert d.since({"ok": 2}) == {"ok": 2}  # a new counter (predictor rebuilt): all of it is new


def _net(imu_age=0.01, rotor_age=0.01, lag=0.01, silence=0.1, reasons=None, drops=None):
    return net_status(
        Stream("IMU", "/imu", imu_age),
        Stream("rotor speeds", "/rotor_speeds", rotor_age),
        0.5,
        lag,
        0.1,
        silence,
        2.0,
        reasons or {},
        drops or {},
    )


def test_net_status_states() -> None:
    assert _net().level == OK
    never = _net(imu_age=None, rotor_age=None, lag=None)
    assert never.level == STALE and "no IMU on /imu" in never.message
    gap = _net(imu_age=3.2)
    assert gap.level == WARN and gap.message == "no IMU on /imu for 3.2 s"
    missing = _net(rotor_age=None, lag=None, silence=5.0, reasons={"no_rotor": 200})
    assert missing.level == ERROR and missing.message.startswith("no rotor speeds on /rotor_speeds")
    stopped = _net(rotor_age=1.5)
    assert stopped.level == ERROR and "for 1.5 s" in stopped.message
    stale = _net(lag=0.35, silence=5.0, reasons={"rotor_stale": 300})
    assert stale.level == WARN and stale.message.startswith("rotor stream stale") and "0.350 s" in stale.message
    silent = _net(silence=3.0, reasons={"rate_limited": 900, "non_finite": 50})
    assert silent.level == WARN and silent.message == "no estimate for 3.0 s: non_finite"
    frame = _net(silence=3.0, reasons={"rate_limited": 5}, drops={"imu_frame_unknown": 300})
    assert frame.message == "no estimate for 3.0 s: imu_frame_unknown"
    dropping = _net(drops={"rotor_count": 2})
    assert dropping.level == WARN and "rotor_count ×2" in dropping.message


LIMITS = EkfLimits(0.5, 2.0, 0.5, 2.0, 5.0, 20.0, 0.5, 2.0, 0.05, 0.1)


def _ekf(**changes):
    view = EkfView(
        imu=Stream("IMU", "/imu", 0.01),
        measurements=Stream("velocity estimates", "/velobins/velocity", 0.02),
        initialised=True,
        waiting_for="the first velocity estimate",
        imu_fault=None,
        since_update=0.05,
        pos_sigma=0.2,
        vel_sigma=0.1,
        nis=NisMonitor(window=10),
        event=None,
        imu_loss=0.0,
        latency_p95=0.01,
        drops={},
    )
    return ekf_status(dataclasses.replace(view, **changes), LIMITS)


def test_ekf_status_states() -> None:
    assert _ekf() == Status(OK, "tracking")
    assert _ekf(imu=Stream("IMU", "/imu", None)).level == STALE
    assert _ekf(imu=Stream("IMU", "/imu", 1.0)) == Status(WARN, "no IMU on /imu for 1.0 s")
    stopped = _ekf(imu=Stream("IMU", "/imu", 2.5))
    assert stopped.level == ERROR and stopped.message.startswith("no IMU on /imu for 2.5 s")
    fault = _ekf(imu_fault="IMU in g", initialised=False)
    assert fault == Status(ERROR, "IMU in g")  # before "not initialised": it is why
    waiting = _ekf(initialised=False)
    assert waiting.level == WARN and waiting.message.startswith("not initialised")
    silent = Stream("velocity estimates", "/velobins/velocity", 4.0)
    no_vel = _ekf(measurements=silent, since_update=1.0)
    assert no_vel.level == WARN and "no velocity estimates on /velobins/velocity for 4.0 s" in no_vel.message
    assert _ekf(measurements=silent, since_update=3.0).level == ERROR
    assert _ekf(since_update=0.7).message == "no fused update for 0.7 s: IMU-only dead reckoning"
    assert _ekf(pos_sigma=11.0).level == WARN and _ekf(pos_sigma=30.0).level == ERROR
    assert _ekf(pos_sigma=30.0).message.startswith("position uncertain: σ 30.00 m > 20 m")
    assert _ekf(vel_sigma=0.7).level == WARN and _ekf(vel_sigma=3.0).message.startswith("velocity uncertain")
    bad = NisMonitor(window=10)
    for _ in range(10):
        bad.add(50.0)
    assert _ekf(nis=bad).level == ERROR and _ekf(nis=bad).message.startswith("filter inconsistent")
    assert _ekf(event="IMU gap of 2.0 s") == Status(WARN, "IMU gap of 2.0 s")
    held = _ekf(event="IMU gap of 9.0 s", pos_sigma=30.0)  # the event first, what it caused after it
    assert held.level == ERROR and held.message.startswith("IMU gap of 9.0 s; position uncertain")
    assert _ekf(imu_loss=0.2).message.startswith("losing 20% of the IMU samples")
    assert _ekf(latency_p95=0.3).message.startswith("odometry late")
    assert _ekf(drops={"x": 2}).level == WARN


def test_silence_alarm_is_throttled_and_needs_fresh_input() -> None:
    alarm = SilenceAlarm(after=2.0, every=5.0)
    assert SilenceAlarm.silence(10.0, None, None) is None
    assert SilenceAlarm.silence(10.0, None, 7.0) == 3.0  # since the first input
    assert SilenceAlarm.silence(10.0, 9.5, 7.0) == 0.5
    assert not alarm.due(10.0, 1.0, 0.0, 0.5)
    assert not alarm.due(10.0, 3.0, 2.0, 0.5)  # input stopped: that is the IMU gap, not silence
    assert alarm.due(10.0, 3.0, 0.0, 0.5)
    assert not alarm.due(12.0, 5.0, 0.0, 0.5)  # throttled
    assert alarm.due(15.0, 8.0, 0.0, 0.5)
