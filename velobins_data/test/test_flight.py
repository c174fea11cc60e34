"""The Flight contract: conversions and the validation that names source, field and row."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.spatial.transform import Rotation

from velobins_data.flight import Flight, FlightError


def _arrays(n: int = 50) -> dict:
    t = np.arange(n) * 0.01
    return dict(
        t=t,
        acc=np.tile([0.0, 0.0, 9.81], (n, 1)),
        gyro=np.zeros((n, 3)),
        rotor=np.full((n, 4), 0.5),
        p=np.zeros((n, 3)),
        q=np.tile(Rotation.from_euler("z", 90, degrees=True).as_quat(), (n, 1)),
        v=np.tile([1.0, 0.0, 0.0], (n, 1)),
    )


def test_body_velocity_rotates_world_into_body() -> None:
    flight = Flight(name="s", rotor_kind="command", metadata={"source": "x.csv"}, **_arrays())
    assert np.allclose(flight.body_velocity(), [0.0, -1.0, 0.0])
    assert flight.rate_hz == pytest.approx(100.0) and flight.num_rotors == 4 and len(flight.slice(5, 15)) == 10


@pytest.mark.parametrize(
    ("field", "edit", "message"),
    [
        ("t", lambda a: a["t"].__setitem__(7, a["t"][6]), "strictly increasing"),
        ("acc", lambda a: a["acc"].__setitem__((3, 1), np.nan), "non-finite"),
        ("q", lambda a: a["q"].__setitem__(4, [0, 0, 0, 2.0]), "norm"),
        ("rotor", lambda a: a["rotor"].__setitem__((2, 0), 1.5), "normalised"),
    ],
)
def test_validation_names_source_field_and_row(field: str, edit, message: str) -> None:
    arrays = _arrays()
    edit(arrays)
    with pytest.raises(FlightError, match=message) as err:
        Flight(name="s", rotor_kind="command", metadata={"source": "flight.csv"}, **arrays)
    assert err.value.field == field and err.value.source == "flight.csv" and err.value.row is not None


def test_rotor_kinds_say_what_they_hold_and_the_old_names_are_read() -> None:
    assert Flight(name="s", rotor_kind="pwm", metadata={}, **_arrays()).rotor_kind == "command"
    speeds = _arrays() | {"rotor": np.full((50, 4), 1800.0)}
    assert Flight(name="s", rotor_kind="rpm", metadata={}, **speeds).rotor_kind == "speed"
    with pytest.raises(FlightError, match=r"must be one of \('speed', 'command'\)") as err:
        Flight(name="s", rotor_kind="rad/s", metadata={"source": "f.csv"}, **speeds)
    assert err.value.field == "rotor_kind" and err.value.source == "f.csv"
    with pytest.raises(FlightError, match="non-negative"):  # a speed is checked as a speed, whatever its name
        Flight(name="s", rotor_kind="rpm", metadata={}, **(speeds | {"rotor": np.full((50, 4), -1.0)}))
