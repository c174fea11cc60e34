"""`velobins simulate` then `velobins convert` produce a bag that reads back as the simulated flight."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np

from velobins_data.bag import read_bag
from velobins_data.datasets import read_csv

FIELDS = ("t", "acc", "gyro", "rotor", "p", "q", "v")


def velobins(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "velobins_eval.cli", *args], capture_output=True, text=True)


def test_simulate_then_convert_round_trips(tmp_path: Path) -> None:
    sim = velobins(
        "simulate",
        "--preset",
        "nano",
        "--flights",
        "1",
        "--seconds",
        "6",
        "--seed",
        "3",
        "--out",
        str(tmp_path / "sim"),
        "--workers",
        "1",
    )
    assert sim.returncode == 0, sim.stderr
    csvs = sorted((tmp_path / "sim").glob("*.csv"))
    assert len(csvs) == 1
    conv = velobins("convert", "--dataset", "csv", "--input", str(csvs[0]), "--output", str(tmp_path / "bag"))
    assert conv.returncode == 0, conv.stderr
    assert "messages" in conv.stdout
    flight, back = read_csv(csvs[0]), read_bag(tmp_path / "bag")
    assert back.name == flight.name and back.rotor_kind == "command" and back.num_rotors == 4
    for name in FIELDS:
        np.testing.assert_allclose(getattr(back, name), getattr(flight, name), atol=2e-9, err_msg=name)


def test_convert_reports_a_malformed_input(tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("t,acc_x\n0.0,1.0\n")
    conv = velobins("convert", "--dataset", "csv", "--input", str(bad), "--output", str(tmp_path / "bag"))
    assert conv.returncode == 2
    assert "bad.csv" in conv.stderr and "error" in conv.stderr
    assert not (tmp_path / "bag").exists()
