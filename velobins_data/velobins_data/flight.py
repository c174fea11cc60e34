"""The one in-memory representation of a flight (docs/design.md, "Data flow").

Every adapter (NanoBench, AI-IO, TII-RATM, NeuroBEM, plain CSV, simulator, rosbag2) produces a
:class:`Flight`; training, conversion, replay and evaluation consume it. Conventions at this
boundary are fixed, so nothing downstream has to know where a flight came from:

* time ``t`` in seconds, strictly increasing;
* ``acc``: body-frame specific force [m/s^2] (a hovering vehicle reads about +g on body z);
* ``gyro``: body-frame angular rate [rad/s];
* ``rotor``: K columns, kind ``"speed"`` (rotor speed in rad/s) or ``"command"`` (command
  normalised to [0, 1]); the old names ``"rpm"`` and ``"pwm"`` are accepted and renamed;
* ``p``/``v``: ground-truth world position [m] and velocity [m/s], world ENU (z up, REP-103);
* ``q``: body->world orientation quaternion, scalar last ``(x, y, z, w)`` as scipy uses it;
* body frame FLU.

Construction validates everything and raises :class:`FlightError` naming the source file,
the field and the first bad row.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from velobins_common.constants import (
    ROTOR_COMMAND,
    ROTOR_KINDS,
    STANDARD_GRAVITY,
    UNIT_QUATERNION_TOLERANCE,
    canonical_rotor_kind,
)
from velobins_common.errors import UserError

# ROTOR_KINDS (allowed values of Flight.rotor_kind), STANDARD_GRAVITY (the gravity of a flight whose
# dataset states none) and UNIT_QUATERNION_TOLERANCE come from velobins_common.constants, the one definition.

_MIN_RATE_HZ = 20.0
_MAX_RATE_HZ = 5000.0


class FlightError(UserError):
    """A flight violates the :class:`Flight` contract.

    The message always names the source, the field and (where there is one) the first bad row,
    so a user can open the file and look.
    """

    def __init__(self, source: str, field_name: str, message: str, row: int | None = None):
        where = f" (first bad row {row})" if row is not None else ""
        super().__init__(f"{source}: field '{field_name}': {message}{where}")
        self.source = source
        self.field = field_name
        self.row = row


@dataclass
class Flight:
    """One flight in SI units and REP-103 frames (see module docstring).

    Attributes:
        name: short flight name (file stem), used as the key in reports.
        t: (T,) timestamps [s], strictly increasing.
        acc: (T, 3) body specific force [m/s^2].
        gyro: (T, 3) body angular rate [rad/s].
        rotor: (T, K) rotor signal, see ``rotor_kind``.
        rotor_kind: ``"speed"`` (rad/s) or ``"command"`` (normalised to [0, 1]); an old name
            (``"rpm"``, ``"pwm"``) becomes its new one.
        p: (T, 3) ground-truth world position [m].
        q: (T, 4) ground-truth body->world quaternion, (x, y, z, w).
        v: (T, 3) ground-truth world velocity [m/s].
        metadata: free-form facts: ``platform``, ``source`` (file path), ``gravity`` [m/s^2],
            ``dataset`` and anything adapter-specific.
    """

    name: str
    t: np.ndarray
    acc: np.ndarray
    gyro: np.ndarray
    rotor: np.ndarray
    rotor_kind: str
    p: np.ndarray
    q: np.ndarray
    v: np.ndarray
    metadata: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("t", "acc", "gyro", "rotor", "p", "q", "v"):
            setattr(self, name, np.ascontiguousarray(getattr(self, name), dtype=np.float64))
        try:
            self.rotor_kind = canonical_rotor_kind(self.rotor_kind)
        except ValueError as exc:
            raise FlightError(self.source, "rotor_kind", str(exc)) from None
        self.validate()

    # ------------------------------------------------------------------ properties
    @property
    def source(self) -> str:
        """Where the flight came from (file path or generator), for error messages."""
        return str(self.metadata.get("source", self.name))

    @property
    def gravity(self) -> float:
        """Gravity magnitude [m/s^2] of this flight."""
        return float(self.metadata.get("gravity", STANDARD_GRAVITY))

    @property
    def num_rotors(self) -> int:
        """Number of rotor columns K."""
        return int(self.rotor.shape[1])

    @property
    def rate_hz(self) -> float:
        """Median sample rate [Hz]."""
        return float(1.0 / np.median(np.diff(self.t)))

    @property
    def duration(self) -> float:
        """Flight duration [s]."""
        return float(self.t[-1] - self.t[0])

    def __len__(self) -> int:
        return int(self.t.shape[0])

    def body_velocity(self) -> np.ndarray:
        """Ground-truth body-frame velocity R^T v, (T, 3) [m/s]: the network's target."""
        from scipy.spatial.transform import Rotation

        return Rotation.from_quat(self.q).inv().apply(self.v)

    def slice(self, start: int, stop: int) -> Flight:
        """Rows ``start:stop`` as a new, validated sequence."""
        return Flight(
            name=self.name,
            t=self.t[start:stop],
            acc=self.acc[start:stop],
            gyro=self.gyro[start:stop],
            rotor=self.rotor[start:stop],
            rotor_kind=self.rotor_kind,
            p=self.p[start:stop],
            q=self.q[start:stop],
            v=self.v[start:stop],
            metadata=dict(self.metadata),
        )

    # ------------------------------------------------------------------ validation
    def validate(self) -> None:
        """Check the contract; raise :class:`FlightError` on the first violation."""
        src = self.source
        if self.t.ndim != 1 or self.t.shape[0] < 2:
            raise FlightError(src, "t", f"need a 1-D array of at least 2 stamps, got shape {self.t.shape}")
        n = self.t.shape[0]
        widths = {"acc": 3, "gyro": 3, "p": 3, "q": 4, "v": 3}
        for name, width in widths.items():
            arr = getattr(self, name)
            if arr.shape != (n, width):
                raise FlightError(src, name, f"expected shape ({n}, {width}), got {arr.shape}")
        if self.rotor.ndim != 2 or self.rotor.shape[0] != n or self.rotor.shape[1] < 1:
            raise FlightError(src, "rotor", f"expected shape ({n}, K>=1), got {self.rotor.shape}")
        if self.rotor_kind not in ROTOR_KINDS:
            raise FlightError(src, "rotor_kind", f"must be one of {ROTOR_KINDS}, got {self.rotor_kind!r}")
        for name in ("t", "acc", "gyro", "rotor", "p", "q", "v"):
            arr = getattr(self, name)
            bad = ~np.isfinite(arr)
            if bad.any():
                row = int(np.argmax(bad.reshape(n, -1).any(axis=1)))
                raise FlightError(src, name, "non-finite value (NaN or inf)", row)
        dt = np.diff(self.t)
        if (dt <= 0).any():
            row = int(np.argmax(dt <= 0)) + 1
            raise FlightError(src, "t", "timestamps must be strictly increasing", row)
        rate = 1.0 / float(np.median(dt))
        if not _MIN_RATE_HZ <= rate <= _MAX_RATE_HZ:
            raise FlightError(
                src, "t", f"median rate {rate:.1f} Hz outside [{_MIN_RATE_HZ}, {_MAX_RATE_HZ}] Hz (are stamps in s?)"
            )
        qn = np.linalg.norm(self.q, axis=1)
        badq = np.abs(qn - 1.0) > UNIT_QUATERNION_TOLERANCE
        if badq.any():
            row = int(np.argmax(badq))
            raise FlightError(src, "q", f"quaternion norm {qn[row]:.4f} is not 1", row)
        if self.rotor_kind == ROTOR_COMMAND:
            outside = (self.rotor < -1e-6) | (self.rotor > 1.0 + 1e-6)
            if outside.any():
                row = int(np.argmax(outside.any(axis=1)))
                raise FlightError(src, "rotor", "rotor commands must be normalised to [0, 1]", row)
        elif (self.rotor < 0).any():
            row = int(np.argmax((self.rotor < 0).any(axis=1)))
            raise FlightError(src, "rotor", "rotor speeds [rad/s] must be non-negative", row)
