"""Smooth time warps with derivatives up to 4th order (snap), for flat-output references.

A quadrotor reference must be smooth up to snap for a differential-flatness controller such as
rotorpy's SE3 (position → attitude needs the 2nd derivative, body rates the 3rd). Every reference
of :mod:`velobins_data.sim.trajectories` is a chain ``t → u (ramped clock) → s (phase) → x (curve)``;
this module holds the chain rule for such compositions (Faà di Bruno up to order 4) and the ramped
clock that makes each flight start in hover and blend smoothly into motion.
"""

from __future__ import annotations

from collections.abc import Sequence as Seq

import numpy as np

ORDER = 4
"""Highest derivative carried (snap)."""


def compose(outer: Seq[np.ndarray], inner: Seq[float]) -> list[np.ndarray]:
    """Derivatives 0..4 of ``f(g(t))`` from those of ``f`` (at ``g(t)``) and of ``g`` (at ``t``).

    Faà di Bruno's formula up to the 4th order::

        (f∘g)'    = f1 g1
        (f∘g)''   = f2 g1² + f1 g2
        (f∘g)'''  = f3 g1³ + 3 f2 g1 g2 + f1 g3
        (f∘g)'''' = f4 g1⁴ + 6 f3 g1² g2 + f2 (4 g1 g3 + 3 g2²) + f1 g4

    Args:
        outer: ``[f, f', f'', f''', f'''']`` evaluated at ``g(t)``; scalars or arrays (e.g. 3-vectors).
        inner: ``[g, g', g'', g''', g'''']`` at ``t`` (scalars).

    Returns:
        ``[h, h', h'', h''', h'''']`` with ``h = f∘g``.
    """
    f0, f1, f2, f3, f4 = (np.asarray(x, dtype=np.float64) for x in outer)
    _, g1, g2, g3, g4 = (float(x) for x in inner)
    return [
        f0,
        f1 * g1,
        f2 * g1**2 + f1 * g2,
        f3 * g1**3 + 3.0 * f2 * g1 * g2 + f1 * g3,
        f4 * g1**4 + 6.0 * f3 * g1**2 * g2 + f2 * (4.0 * g1 * g3 + 3.0 * g2**2) + f1 * g4,
    ]


def smoothstep7(x: float) -> list[float]:
    """Septic smoothstep σ(x) = 35x⁴ − 84x⁵ + 70x⁶ − 20x⁷ on [0, 1] and its derivatives 0..3.

    σ rises from 0 to 1 with zero 1st..3rd derivatives at both ends, so a speed profile built on it
    has continuous acceleration, jerk and snap. Clamped to 0 / 1 outside [0, 1].
    """
    if x <= 0.0:
        return [0.0, 0.0, 0.0, 0.0]
    if x >= 1.0:
        return [1.0, 0.0, 0.0, 0.0]
    x2, x3 = x * x, x * x * x
    return [
        x3 * x * (35.0 - 84.0 * x + 70.0 * x2 - 20.0 * x3),
        x3 * (140.0 - 420.0 * x + 420.0 * x2 - 140.0 * x3),
        x2 * (420.0 - 1680.0 * x + 2100.0 * x2 - 840.0 * x3),
        x * (840.0 - 5040.0 * x + 8400.0 * x2 - 4200.0 * x3),
    ]


def _smoothstep7_integral(x: float) -> float:
    """∫₀ˣ σ = 7x⁵ − 14x⁶ + 10x⁷ − 2.5x⁸ (equals 1/2 at x = 1)."""
    return x**5 * (7.0 - 14.0 * x + 10.0 * x * x - 2.5 * x**3)


class RampedClock:
    """A clock u(t) that stands still during a hover, then accelerates smoothly to real time.

    ``u = 0`` for ``t <= hover``; ``u' = σ((t - hover)/ramp)`` during the ramp; afterwards
    ``u = t - hover - ramp/2`` with ``u' = 1``. Any reference written as a function of ``u`` therefore
    starts at rest (all derivatives zero) and is C⁴ in ``t``.
    """

    def __init__(self, hover: float, ramp: float) -> None:
        if hover < 0.0 or ramp <= 0.0:
            raise ValueError(f"RampedClock: need hover >= 0 and ramp > 0, got hover={hover}, ramp={ramp}")
        self.hover = float(hover)
        self.ramp = float(ramp)

    def __call__(self, t: float) -> list[float]:
        """``[u, u', u'', u''', u'''']`` at time ``t`` [s]."""
        tau = t - self.hover
        if tau <= 0.0:
            return [0.0, 0.0, 0.0, 0.0, 0.0]
        if tau >= self.ramp:
            return [tau - 0.5 * self.ramp, 1.0, 0.0, 0.0, 0.0]
        x = tau / self.ramp
        s0, s1, s2, s3 = smoothstep7(x)
        r = self.ramp
        return [r * _smoothstep7_integral(x), s0, s1 / r, s2 / r**2, s3 / r**3]


def sine_warp(u: float, omega: float, depth: float, nu: float) -> list[float]:
    """Phase ``s(u) = ω (u + (m/ν) sin(ν u))`` and its derivatives 0..4 in ``u``.

    The phase rate ``ω (1 + m cos(ν u))`` swings the speed by ±m around its mean with period 2π/ν,
    so one flight covers a range of speeds instead of a single cruise speed.
    """
    c, s = np.cos(nu * u), np.sin(nu * u)
    return [
        omega * (u + depth / nu * s),
        omega * (1.0 + depth * c),
        -omega * depth * nu * s,
        -omega * depth * nu**2 * c,
        omega * depth * nu**3 * s,
    ]
