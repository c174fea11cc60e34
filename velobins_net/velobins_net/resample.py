"""Input signal onto the network's time grid: anti-alias low-pass, then linear interpolation.

The one path from raw sensor samples to the network's input rate (paper: 100 Hz), used by the
training windows (:func:`velobins_net.data.resample`) and by the streaming predictor
(:meth:`velobins_net.inference.StreamingPredictor.window`), so the network sees the same signal
in training, offline evaluation and on the vehicle (:func:`to_model_grid`).

Anti-alias filter. Decimating a 400 / 500 / 1000 Hz IMU to 100 Hz by interpolation alone folds
everything above 50 Hz (rotor vibration above all) into the band the network uses. When the input
rate exceeds the model rate by more than :data:`ANTIALIAS_MIN_RATIO`, the raw samples first pass
a causal windowed-sinc FIR (Hamming window; cutoff :data:`ANTIALIAS_CUTOFF` × the model rate,
i.e. 40 Hz at 100 Hz; about :data:`ANTIALIAS_SPAN_S` long, an odd number of taps, unit DC gain).
At or near the model rate (NanoBench, 100 Hz) nothing is filtered: the values are the plain
interpolation, bit for bit.

Group delay. The FIR is linear-phase and causal, so every filtered channel lags the raw one by
(L − 1) / (2 f_in) ≈ :data:`ANTIALIAS_SPAN_S` / 2 = 25 ms (± half an input sample, from rounding
L to an odd count). Training windows and streaming windows carry the same delay, so the network
learns with it; the regression target stays the velocity at the window's last grid stamp.

Causality and streaming. An output sample depends only on itself and the L − 1 raw samples before
it. Before a stream's first sample the filter holds that first value (its steady state), which is
what the offline filter does at a flight's start; once a buffer holds :data:`ANTIALIAS_SPAN_S` of
samples before the first one a window uses, the streaming values equal the offline ones.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from velobins_common.interp import interp_columns

ANTIALIAS_CUTOFF = 0.4
"""Cut-off (−6 dB) of the anti-alias low-pass as a fraction of the model rate (0.5 = its Nyquist)."""

ANTIALIAS_SPAN_S = 0.05
"""Length of the anti-alias FIR [s]: sets its transition width (≈ 3.3 / span for a Hamming
window, so stop-band from ≈ 73 Hz at a 100 Hz model rate) and its group delay (span / 2)."""

ANTIALIAS_MIN_RATIO = 1.05
"""The filter runs only when the input rate exceeds the model rate by more than this factor."""


def nominal_rate(t: np.ndarray) -> float:
    """Sample rate of stamps ``t`` [Hz]: 1 / median interval, rounded to a whole Hz.

    Rounding makes a flight (offline) and the stretch of the same stream in a ring buffer
    (streaming) give the same rate, hence the same filter, despite timestamp jitter.
    0 when fewer than two stamps.
    """
    if len(t) < 2:
        return 0.0
    dt = float(np.median(np.diff(np.asarray(t, dtype=np.float64))))
    return float(np.round(1.0 / dt)) if dt > 0 else 0.0


@lru_cache(maxsize=32)
def antialias_taps(rate_in: float, rate_out: float) -> np.ndarray | None:
    """Causal windowed-sinc low-pass taps (L,) for decimating ``rate_in`` to ``rate_out`` [Hz].

    None when no filter is needed (``rate_in`` ≤ :data:`ANTIALIAS_MIN_RATIO` × ``rate_out``).
    Taps sum to 1 (DC passes unchanged); tap 0 weighs the newest sample.
    """
    if not rate_in > ANTIALIAS_MIN_RATIO * rate_out:
        return None
    half = max(1, int(np.floor(ANTIALIAS_SPAN_S * rate_in / 2.0 + 0.5)))
    k = np.arange(2 * half + 1) - half
    fc = ANTIALIAS_CUTOFF * rate_out / rate_in  # cycles per input sample
    taps = 2.0 * fc * np.sinc(2.0 * fc * k) * np.hamming(2 * half + 1)
    taps = taps / taps.sum()
    taps.setflags(write=False)
    return taps


def _fir(values: np.ndarray, taps: np.ndarray) -> np.ndarray:
    """Causal FIR of every column of (S, C) ``values``, holding the first row before the start."""
    x = np.asarray(values, dtype=np.float64)
    padded = np.concatenate([np.repeat(x[:1], len(taps) - 1, axis=0), x], axis=0)
    out = np.empty_like(x)
    for c in range(x.shape[1]):
        out[:, c] = np.convolve(padded[:, c], taps, mode="valid")
    return out


def antialias(t: np.ndarray, values: np.ndarray, rate_out: float) -> np.ndarray:
    """(S, C) ``values`` stamped by ``t`` after the causal anti-alias FIR for ``rate_out``.

    Returned as given when the stamps' :func:`nominal_rate` needs no filter. Before the first
    sample the filter holds the first value, so outputs within the first L − 1 samples depend
    on where the data start (see the module docstring).
    """
    taps = antialias_taps(nominal_rate(t), float(rate_out))
    return values if taps is None else _fir(values, taps)


def antialias_warmup(t: np.ndarray, rate_out: float) -> float:
    """Seconds of samples the filter needs before a stamp for its value there not to depend on
    what came earlier ((L − 1) input intervals; 0 when no filter runs)."""
    rate_in = nominal_rate(t)
    taps = antialias_taps(rate_in, float(rate_out))
    return 0.0 if taps is None else (len(taps) - 1) / rate_in


def to_model_grid(grid: np.ndarray, t: np.ndarray, values: np.ndarray, rate_out: float) -> np.ndarray:
    """(len(grid), C): raw ``values`` stamped by ``t`` → anti-alias FIR → linear interpolation at ``grid``.

    The one resampling of network inputs (training and streaming): :func:`antialias` on the
    samples the interpolation reads (those from the one at or before ``grid[0]`` on) with the
    filter's L − 1 samples of history before them, so a streaming buffer filters only about one
    window. Outside [t_0, t_end] values are held (as :func:`velobins_common.interp.interp_columns`).
    """
    taps = antialias_taps(nominal_rate(t), float(rate_out))
    if taps is None:
        return interp_columns(grid, t, values)
    first = max(int(np.searchsorted(t, grid[0], side="right")) - 1 - (len(taps) - 1), 0)
    return interp_columns(grid, t[first:], _fir(values[first:], taps))
