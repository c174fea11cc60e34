"""Closed 3-D curves as truncated Fourier series, with exact derivatives of any order.

Every periodic trajectory family (circle, figure-8, lemniscate, helix, oval, star, trefoil, racing loop)
is a closed curve c(s), s ∈ [0, 2π). Sampling it once and keeping the first harmonics gives a
representation whose derivatives up to snap are exact and cheap, whatever the original formula (the
Bernoulli lemniscate is rational, the racing loop is built from straights and arcs). A Gaussian taper
on the harmonics smooths curves whose curvature jumps (straight → arc) so the reference acceleration
has no steps the controller could not follow.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

_FIT_SAMPLES = 1024
_DENSE_SAMPLES = 2048


@dataclass(frozen=True)
class FourierCurve:
    """c(s) = a₀ + Σₖ aₖ cos(ks) + bₖ sin(ks), k = 1..K, s ∈ [0, 2π).

    Attributes:
        a0: (3,) mean point [m].
        a: (K, 3) cosine coefficients [m].
        b: (K, 3) sine coefficients [m].
    """

    a0: np.ndarray
    a: np.ndarray
    b: np.ndarray

    @classmethod
    def fit(cls, fn, harmonics: int = 32, taper: float | None = None) -> FourierCurve:
        """Fit ``fn`` (maps an (M,) array of s to (M, 3) points) with ``harmonics`` harmonics.

        Args:
            fn: the closed curve, periodic in s with period 2π.
            harmonics: number K of harmonics kept.
            taper: if given, multiply harmonic k by exp(-(k/taper)²) to smooth corners of the curvature.
        """
        s = np.arange(_FIT_SAMPLES) * (2.0 * math.pi / _FIT_SAMPLES)
        pts = np.asarray(fn(s), dtype=np.float64)
        if pts.shape != (_FIT_SAMPLES, 3):
            raise ValueError(f"FourierCurve.fit: curve must return ({_FIT_SAMPLES}, 3) points, got {pts.shape}")
        spec = np.fft.rfft(pts, axis=0) / _FIT_SAMPLES
        k = np.arange(1, harmonics + 1)
        weight = np.ones(harmonics) if taper is None else np.exp(-((k / taper) ** 2))
        a = 2.0 * spec[1 : harmonics + 1].real * weight[:, None]
        b = -2.0 * spec[1 : harmonics + 1].imag * weight[:, None]
        return cls(a0=spec[0].real.copy(), a=a, b=b)

    @property
    def harmonics(self) -> int:
        """Number of harmonics K."""
        return int(self.a.shape[0])

    def derivatives(self, s: float) -> np.ndarray:
        """(5, 3) array: c(s) and its derivatives d^n c/ds^n for n = 1..4."""
        k = np.arange(1, self.harmonics + 1, dtype=np.float64)
        n = np.arange(5, dtype=np.float64)[:, None]
        ang = k[None, :] * s + n * (0.5 * math.pi)  # d^n/ds^n cos(ks) = k^n cos(ks + nπ/2)
        kn = k[None, :] ** n
        out = (kn * np.cos(ang)) @ self.a + (kn * np.sin(ang)) @ self.b
        out[0] += self.a0
        return out

    def sample(self, s: np.ndarray, order: int = 0) -> np.ndarray:
        """(M, 3) values of the ``order``-th derivative at the phases ``s``."""
        k = np.arange(1, self.harmonics + 1, dtype=np.float64)
        ang = np.outer(s, k) + order * 0.5 * math.pi
        kn = k**order
        out = (kn * np.cos(ang)) @ self.a + (kn * np.sin(ang)) @ self.b
        if order == 0:
            out = out + self.a0
        return out

    def max_norm(self, order: int) -> float:
        """max over s of ‖d^order c/ds^order‖ (dense sampling)."""
        s = np.arange(_DENSE_SAMPLES) * (2.0 * math.pi / _DENSE_SAMPLES)
        return float(np.linalg.norm(self.sample(s, order), axis=1).max())


# ---------------------------------------------------------------------------------------- unit curves
# Each maps s (M,) → (M, 3) with horizontal extent about 1 and z around 0; the trajectory factory scales,
# rotates and lifts them.


def circle(s: np.ndarray) -> np.ndarray:
    """Unit circle in the horizontal plane."""
    return np.stack([np.cos(s), np.sin(s), np.zeros_like(s)], axis=1)


def figure8(s: np.ndarray) -> np.ndarray:
    """Figure-8 (1:2 Lissajous): x = sin s, y = ½ sin 2s."""
    return np.stack([np.sin(s), 0.5 * np.sin(2.0 * s), np.zeros_like(s)], axis=1)


def lemniscate(s: np.ndarray) -> np.ndarray:
    """Lemniscate of Bernoulli: x = cos s/(1+sin²s), y = sin s cos s/(1+sin²s)."""
    d = 1.0 + np.sin(s) ** 2
    return np.stack([np.cos(s) / d, np.sin(s) * np.cos(s) / d, np.zeros_like(s)], axis=1)


def helix(turns: int, height: float):
    """Helix of ``turns`` turns that climbs ``height`` and comes back down within one period."""

    def fn(s: np.ndarray) -> np.ndarray:
        return np.stack([np.cos(turns * s), np.sin(turns * s), -0.5 * height * np.cos(s)], axis=1)

    return fn


def oval(aspect: float):
    """Ellipse with semi-axes 1 and ``aspect``."""

    def fn(s: np.ndarray) -> np.ndarray:
        return np.stack([np.cos(s), aspect * np.sin(s), np.zeros_like(s)], axis=1)

    return fn


def star(points: int, depth: float):
    """Smooth star: polar radius (1 + depth·cos(points·s))/(1 + depth)."""

    def fn(s: np.ndarray) -> np.ndarray:
        r = (1.0 + depth * np.cos(points * s)) / (1.0 + depth)
        return np.stack([r * np.cos(s), r * np.sin(s), np.zeros_like(s)], axis=1)

    return fn


def trefoil(s: np.ndarray) -> np.ndarray:
    """Trefoil knot (sin s + 2 sin 2s, cos s − 2 cos 2s, −sin 3s)/3."""
    x = np.sin(s) + 2.0 * np.sin(2.0 * s)
    y = np.cos(s) - 2.0 * np.cos(2.0 * s)
    return np.stack([x, y, -np.sin(3.0 * s)], axis=1) / 3.0


def racing_loop(straight: float):
    """Stadium track: two straights of length ``2·straight`` joined by unit half-circles, at constant arc speed.

    The curvature jumps where a straight meets an arc; fit it with a taper (see :meth:`FourierCurve.fit`).
    """
    half = straight
    perimeter = 4.0 * half + 2.0 * math.pi

    def fn(s: np.ndarray) -> np.ndarray:
        d = (s / (2.0 * math.pi)) * perimeter
        out = np.zeros((s.shape[0], 3))
        # segment 1: straight along +x at y = -1, from x = -half to +half
        seg = d < 2.0 * half
        out[seg, 0] = -half + d[seg]
        out[seg, 1] = -1.0
        # segment 2: arc around (+half, 0) from angle -π/2 to +π/2
        d2 = d - 2.0 * half
        seg = (d2 >= 0.0) & (d2 < math.pi)
        ang = -0.5 * math.pi + d2[seg]
        out[seg, 0] = half + np.cos(ang)
        out[seg, 1] = np.sin(ang)
        # segment 3: straight along -x at y = +1
        d3 = d2 - math.pi
        seg = (d3 >= 0.0) & (d3 < 2.0 * half)
        out[seg, 0] = half - d3[seg]
        out[seg, 1] = 1.0
        # segment 4: arc around (-half, 0) from +π/2 to 3π/2
        d4 = d3 - 2.0 * half
        seg = d4 >= 0.0
        ang = 0.5 * math.pi + d4[seg]
        out[seg, 0] = -half + np.cos(ang)
        out[seg, 1] = np.sin(ang)
        return out / (half + 1.0)

    return fn
