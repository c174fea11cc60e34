"""What the network's own errors on the calibration flights say, for ``velobins calibrate``.

The errors e = z − v_true of the estimates being calibrated, against ground truth: how large (the RMS, the s that
fits them alone), how long they stay correlated, and so where the fit of the filter's network-error model starts
(s, the noise floor, the slow error's σ_b and τ) and what the report says about them (:func:`network_lines`).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from velobins_common.stats import correlation_time, gaussian_nll

from .calibrate_fit import FLOOR, UNIT_AXES, CalibrationFlight, Point


def network_errors(flights: list[CalibrationFlight]) -> tuple[np.ndarray, np.ndarray]:
    """(errors e = z − v_body_true, variances σ̂²), (U, 3) each, over all calibration flights."""
    err = np.concatenate([cf.z - cf.v_body_true for cf in flights])
    return err, np.concatenate([cf.var for cf in flights])


def error_rms(flights: list[CalibrationFlight]) -> float:
    """RMS of the network's errors per axis [m/s] (where the fits of σ_b and of the noise floor start)."""
    err, _ = network_errors(flights)
    return float(np.sqrt(np.mean(err**2)))


def variance_scale(err: np.ndarray, var: np.ndarray) -> float:
    """Maximum-likelihood s of N(0, s·σ²) for errors ``err`` with variances ``var``: s = mean(e² / σ²)."""
    e2 = np.asarray(err, dtype=np.float64) ** 2
    v = np.asarray(var, dtype=np.float64)
    if e2.shape != v.shape or e2.size == 0 or np.any(v <= 0) or not np.all(np.isfinite(e2 / v)):
        raise ValueError("calibrate: network errors and variances must be non-empty, finite, same shape, var > 0")
    return float(np.mean(e2 / v))


def own_scale(flights: list[CalibrationFlight]) -> float:
    """The s that fits the network's own errors best, mean e²/σ̂² (where the search for the filter's s starts)."""
    return variance_scale(*network_errors(flights))


def network_lines(flights: list[CalibrationFlight], start_scale: float, fit: Point) -> list[str]:
    """The network alone on the calibration flights: AVE, and its NLL per axis at s = 1, at the s that fits its own
    errors best (mean e²/σ̂²) and at the fitted s (the filter's: larger when the errors are correlated in time); with
    axis factors, the own best s and the fitted s·k per axis beside each other."""
    err, var = network_errors(flights)
    s_net = variance_scale(err, var)

    def nll(s: float) -> float:
        return gaussian_nll(err, s * var, np.zeros_like(err))

    ave = float(np.mean(np.linalg.norm(err, axis=1)))
    speed = float(np.mean(np.concatenate([np.linalg.norm(cf.v_true, axis=1) for cf in flights])))
    lines = [
        f"network alone on these flights ({len(err)} estimates): AVE {ave:.3f} m/s (mean speed {speed:.3f} m/s); "
        f"NLL per axis {nll(1.0):.3f} nats at s = 1, {nll(s_net):.3f} at s = {s_net:.3g} (its own errors' best), "
        f"{nll(fit.scale):.3f} at the fitted s = {fit.scale:.3g}"
        + (f" (start s = {start_scale:.3g})" if start_scale != 1 else "")
    ]
    if fit.axes != UNIT_AXES:
        own = np.mean(err**2 / var, axis=0)
        lines.append(
            "per axis (x, y, z): its own errors' best s "
            + ", ".join(f"{x:.3g}" for x in own)
            + "; the filter's fitted s·k "
            + ", ".join(f"{x:.3g}" for x in fit.factors)
        )
        lines.append(motion_line(flights))
    dt, per_axis = error_times(flights)
    lines.append(persistence_line(dt, per_axis))
    if fit.config.velocity_error_sigma > 0 and fit.config.velocity_error_tau < dt:
        lines.append(
            f"the fitted velocity error decorrelates faster (tau {fit.config.velocity_error_tau:.3g} s) than the "
            f"estimates come ({dt * 1e3:.0f} ms apart): it acts as white noise of sigma_b "
            f"{fit.config.velocity_error_sigma:.3g} m/s added to s·σ̂², a floor under the network's variance, "
            "not as a slow error"
        )
    if ave >= speed:
        lines.append(
            "WARNING: the network's estimates are no better than 0 m/s (AVE >= mean speed): this calibrates a "
            "network that has not learned; train longer (--fold-minutes, or a better --checkpoint) before using it"
        )
    return lines


def axis_motion(flights: list[CalibrationFlight]) -> tuple[np.ndarray, np.ndarray]:
    """RMS true body velocity per axis [m/s]: (3,) over all estimates of the flights and (F, 3) per flight."""
    per_flight = np.array([np.sqrt(np.mean(cf.v_body_true**2, axis=0)) for cf in flights])
    pooled = np.sqrt(np.mean(np.concatenate([cf.v_body_true for cf in flights]) ** 2, axis=0))
    return pooled, per_flight


def motion_line(flights: list[CalibrationFlight]) -> str:
    """How these flights move along each body axis, for the per-axis factors: a network's own scale on an axis
    follows the flights' speed along it (recipe item 41: on z it spanned ×52 across simulated flights), so
    factors fitted here carry over to flights that move alike, and the user compares these speeds with theirs."""
    pooled, per_flight = axis_motion(flights)
    low, high = per_flight.min(axis=0), per_flight.max(axis=0)
    spans = ", ".join(f"{lo:.2f}–{hi:.2f}" for lo, hi in zip(low, high, strict=True))
    return (
        "per axis (x, y, z): these flights' RMS body speed "
        + ", ".join(f"{x:.2f}" for x in pooled)
        + f" m/s (per flight {spans}); the factors follow how flights move along each axis, the vertical most: "
        "they carry over to flights that move alike (docs/calibrate.md §2)"
    )


def error_persistence_line(flights: list[CalibrationFlight]) -> str:
    """How long the network's errors (each divided by its σ̂) stay correlated, per body axis (:func:`correlation_time`).

    The filter takes the estimates as independent; errors that last longer than the interval between two estimates
    (consecutive windows share most of their samples) carry less information than the filter counts, and the fitted
    s grows past the network's own best to make up for it.
    """
    return persistence_line(*error_times(flights))


def persistence_line(dt: float, per_axis: np.ndarray) -> str:
    """:func:`error_persistence_line` from :func:`error_times`' figures."""
    if not per_axis.size:
        return "network errors: too few estimates per flight to say how long they stay correlated"
    times = ", ".join("longer than the flights" if not np.isfinite(x) else f"{x:.2f} s" for x in per_axis)
    return (
        f"network errors stay correlated for {times} (x, y, z; autocorrelation of e/σ̂ above 1/e); the filter takes "
        f"its estimates, {dt * 1e3:.0f} ms apart, as independent: errors that last longer make the fitted s larger "
        "than their own best"
    )


def error_times(flights: list[CalibrationFlight]) -> tuple[float, np.ndarray]:
    """(the estimates' median spacing [s], per body axis the time their errors divided by σ̂ stay correlated
    (:func:`correlation_time`; empty when no flight has two estimates))."""
    steps = [np.diff(cf.t) for cf in flights if cf.t.size > 1]
    if not steps:
        return float("nan"), np.empty(0)
    dt = float(np.median(np.concatenate(steps)))
    return dt, correlation_time([(cf.z - cf.v_body_true) / np.sqrt(cf.var) for cf in flights], dt)


FLOOR_START = 0.3
"""Where the fit of ``velocity_noise_floor`` starts when ``--params`` leaves it at 0: this share of the RMS of the
network's errors (the search box spans ±1.5 decades around it)."""


def floor_start(start: Point, flights: list[CalibrationFlight], names, log) -> Point:
    """``start`` with ``velocity_noise_floor`` at :data:`FLOOR_START` × the RMS of the network's errors per axis when
    it is fitted from 0 (the search is in log space); a floor from ``--params`` is kept."""
    if FLOOR not in names or start.config.velocity_noise_floor > 0:
        return start
    floor = FLOOR_START * error_rms(flights)
    log(f"velocity noise floor starts at {floor:.3g} m/s ({FLOOR_START:g} × the RMS of the network's errors)")
    return dataclasses.replace(start, config=dataclasses.replace(start.config, velocity_noise_floor=floor))


def velocity_error_start(start: Point, flights: list[CalibrationFlight], names, log) -> Point:
    """``start`` with a slow-error model to fit from where ``--params`` left it white (σ_b = 0; the search is in
    log space): σ_b the RMS of the network's errors per axis, τ the mean of their correlation times
    (:func:`error_times`) within [0.05, 5] s. τ is a property of the errors that ground truth shows directly, so it
    stays there unless ``names`` has it too. A model from ``--params`` (σ_b > 0) is kept as it is."""
    if "velocity_error_sigma" not in names or start.config.velocity_error_sigma > 0:
        return start
    times = [x for x in error_times(flights)[1] if np.isfinite(x)]
    values = {"velocity_error_sigma": error_rms(flights)}
    if times:
        values["velocity_error_tau"] = float(np.clip(np.mean(times), 0.05, 5.0))
    config = dataclasses.replace(start.config, **values)
    how = "the mean time the errors stay correlated" if times else "from --params: the errors never decorrelate"
    kept = "" if "velocity_error_tau" in names else ", kept"
    log(
        f"velocity error starts at sigma_b {config.velocity_error_sigma:.3g} m/s (RMS of the network's errors), "
        f"tau {config.velocity_error_tau:.3g} s ({how}{kept})"
    )
    return dataclasses.replace(start, config=config)
