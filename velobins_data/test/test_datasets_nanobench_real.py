"""NanoBench adapter on the real public files (skipped when /work/shared/data is absent)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from scipy.spatial.transform import Rotation

from velobins_data.datasets import load_directory, load_flight, trajectory_shape
from velobins_data.datasets.nanobench import TRAJECTORY_SHAPES

ROOT = Path(os.environ.get("VELOBINS_NANOBENCH", "/work/shared/data/nanobench"))
needs_data = pytest.mark.skipif(not (ROOT / "train").is_dir(), reason=f"NanoBench data not found at {ROOT}")


@pytest.fixture(scope="module")
def all_flights() -> list:
    with pytest.warns(UserWarning, match="motors never turn on"):  # B7_oval_slow_rep1 has no flight
        train = load_directory("nanobench", ROOT / "train")
    return train + load_directory("nanobench", ROOT / "val")


@needs_data
def test_all_train_and_val_files_load(all_flights: list) -> None:
    names = [s.name for s in all_flights]
    n_files = len(list(ROOT.glob("train/*.csv*"))) + len(list(ROOT.glob("val/*.csv*")))
    assert len(names) == n_files - 1 and len(set(names)) == len(names)
    for flight in all_flights:
        assert 99.0 < flight.rate_hz < 101.0, flight.name
        assert flight.rotor_kind == "command" and flight.rotor.min() >= 0.0 and flight.rotor.max() <= 1.0
        assert (flight.rotor > 0).any(axis=1).all(), flight.name  # motors-off rows trimmed
        assert flight.duration > 5.0, flight.name
        assert flight.metadata["trajectory_shape"] in TRAJECTORY_SHAPES


@needs_data
def test_hover_segments_read_plus_g(all_flights: list) -> None:
    """Where the drone is (nearly) unaccelerated and level, body-z specific force ≈ +g."""
    zs = []
    for flight in all_flights:
        dv = np.gradient(flight.v, flight.t, axis=0)
        tilt = np.degrees(Rotation.from_quat(flight.q).magnitude())
        still = (np.linalg.norm(dv, axis=1) < 0.3) & (np.linalg.norm(flight.v, axis=1) < 0.1) & (tilt < 5)
        if still.sum() > 20:
            zs.append(np.median(flight.acc[still, 2]))
    assert len(zs) > 30
    assert abs(np.median(zs) - 9.80665) < 0.3
    assert min(zs) > 9.0


@needs_data
def test_frames_consistent_r_f_minus_g_matches_velocity_derivative() -> None:
    """q is body->world and v world: R f - g e_z tracks dv/dt; the transposed guess does not."""
    full = load_flight("nanobench", ROOT / "train" / "B3_figure8_fast_rep1.csv.gz")
    flight = full.slice(300, len(full) - 300)  # airborne part: no ground contact at take-off/landing
    rot = Rotation.from_quat(flight.q)
    dv = np.gradient(flight.v, flight.t, axis=0)
    g = np.array([0.0, 0.0, flight.gravity])
    err_ok = np.sqrt(np.mean((rot.apply(flight.acc) - g - dv) ** 2))
    err_inv = np.sqrt(np.mean((rot.inv().apply(flight.acc) - g - dv) ** 2))
    assert err_ok < 0.5 and err_inv > 3 * err_ok
    for k in range(2):  # horizontal axes carry the manoeuvre
        assert np.corrcoef(rot.apply(flight.acc)[:, k], dv[:, k])[0, 1] > 0.9
    # velocity is world-frame: it matches dp/dt
    dp = np.gradient(flight.p, flight.t, axis=0)
    assert np.sqrt(np.mean((dp - flight.v) ** 2)) < 0.05
    assert np.abs(flight.body_velocity()).max() < 5.0


def test_trajectory_shape_names() -> None:
    cases = {
        "B2_circle_fast_rep1": "circle",
        "B3_figure8_medium_rep2": "figure8",
        "lemniscate_slow": "figure8",
        "B5_helix_fast_mell_rep1": "helix",
        "B7_oval_slow_rep2": "oval",
        "ellipse": "oval",
        "B8_star_fast_rep1": "star",
        "B9_trefoil_slow_rep13": "trefoil",
        "B10_lissajous_slow_rep1": "other",
        "B6_linear_ramp_rep1": "other",
        "startup_test": "other",  # 'star' only as a whole word
    }
    for name, shape in cases.items():
        assert trajectory_shape(name) == shape, name
