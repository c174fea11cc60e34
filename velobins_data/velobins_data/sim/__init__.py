"""Simulated flights on rotorpy: the suite's built-in data (presets, trajectories, parallel generation).

Public entry points:

* :func:`simulate_flight` — one flight as a :class:`~velobins_data.flight.Flight`;
* :func:`simulate_many` — many flights in parallel, one plain CSV each;
* :data:`PRESETS` / :func:`get_preset` — the ``nano``, ``racer`` and ``rpm`` platforms;
* :data:`FAMILIES` — the trajectory families.

Nothing here imports ROS.
"""

from velobins_data.sim.batch import flight_plan, simulate_many
from velobins_data.sim.flight import FlightLog, SimulationError, fly, simulate_flight
from velobins_data.sim.presets import PRESETS, Preset, get_preset
from velobins_data.sim.trajectories import FAMILIES, make_trajectory

__all__ = [
    "FAMILIES",
    "PRESETS",
    "FlightLog",
    "Preset",
    "SimulationError",
    "flight_plan",
    "fly",
    "get_preset",
    "make_trajectory",
    "simulate_flight",
    "simulate_many",
]
