"""velobins_common.health: rate meters, χ² bounds, NIS summaries and the nodes' state decisions."""

from __future__ import annotations

import math

import numpy as np
import pytest

from velobins_common.health import (
    ERROR,
    OK,
    STALE,
    WARN,
    CountDelta,
    NisMonitor,
    RateMeter,
    SilenceAlarm,
    Stream,
    chi2_cdf,
    chi2_quantile,
    ekf_status,
    net_status,
)


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


def test_chi2_quantiles_match_tables() -> None:
    # χ²₃: 2.5 %, 97.5 %, 99.9 % (the gate default); χ²₁ 95 % = 1.96²
    assert chi2_quantile(0.025, 3) == pytest.approx(0.2158, abs=1e-4)
    assert chi2_quantile(0.975, 3) == pytest.approx(9.3484, abs=1e-4)
    assert chi2_quantile(0.999, 3) == pytest.approx(16.266, abs=1e-3)
    assert chi2_quantile(0.95, 1) == pytest.approx(1.95996**2, rel=1e-5)
    assert chi2_cdf(3.0, 3) == pytest.approx(math.erf(math.sqrt(1.5)) - math.sqrt(6 / math.pi) * math.exp(-1.5))
    assert chi2_quantile(0.5, 300) == pytest.approx(299.33, abs=0.01)


def test_nis_monitor_consistent_and_inconsistent() -> None:
    rng = np.random.default_rng(1)
    consistent = NisMonitor(window=400)
    for x in (rng.normal(size=(400, 3)) ** 2).sum(axis=1):
        consistent.add(float(x))
    assert consistent.share_inside() == pytest.approx(0.95, abs=0.03)
    lo, hi = consistent.mean_bounds()
    assert lo < consistent.mean() < hi and lo < 3.0 < hi
    overconfident = NisMonitor(window=50)
    for x in (rng.normal(size=(80, 3)) ** 2).sum(axis=1):
        overconfident.add(10.0 * float(x))
    overconfident.add(math.nan)  # ignored
    assert len(overconfident) == 50 and overconfident.total == 80
    assert overconfident.share_inside() < 0.5
    assert overconfident.mean() > overconfident.mean_bounds()[1]
    assert "NIS share inside" in overconfident.values()


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


def _ekf(imu_age=0.01, vel_age=0.02, initialised=True, nis=None, min_share=0.5, drops=None):
    return ekf_status(
        Stream("IMU", "/imu", imu_age),
        Stream("velocity estimates", "/velobins/velocity", vel_age),
        0.5,
        initialised,
        "the first velocity estimate",
        nis or NisMonitor(window=10),
        min_share,
        drops or {},
    )


def test_ekf_status_states() -> None:
    assert _ekf().level == OK
    assert _ekf(imu_age=None).level == STALE
    assert _ekf(imu_age=2.0).message == "no IMU on /imu for 2.0 s"
    waiting = _ekf(initialised=False)
    assert waiting.level == WARN and waiting.message.startswith("not initialised")
    no_vel = _ekf(vel_age=4.0)
    assert no_vel.level == WARN and "no velocity estimates on /velobins/velocity for 4.0 s" in no_vel.message
    bad = NisMonitor(window=10)
    for _ in range(10):
        bad.add(50.0)
    assert _ekf(nis=bad).message.startswith("filter inconsistent: 0% of the last 10 NIS")
    assert _ekf(nis=bad, min_share=0.0).level == OK  # check disabled


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
