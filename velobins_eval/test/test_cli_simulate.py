"""`velobins simulate`: the flights it writes and its refusals."""

from __future__ import annotations

from pathlib import Path

import pytest

from velobins_data.datasets.csv_format import read_csv
from velobins_eval.cli.simulate import main_simulate


def test_cli_writes_the_requested_flights(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "sim"
    argv = ["--preset", "nano", "--flights", "2", "--seconds", "2", "--seed", "1", "--out", str(out), "--workers", "1"]
    assert main_simulate(argv) == 0
    assert sorted(p.name for p in out.glob("*.csv")) == ["sim_circle_000.csv", "sim_figure8_001.csv"]
    assert read_csv(out / "sim_circle_000.csv").duration == pytest.approx(2.0)
    assert "wrote 2 nano flights" in capsys.readouterr().out
    assert main_simulate(["--preset", "nano", "--flights", "0", "--out", str(out)]) == 2
    with pytest.raises(SystemExit):
        main_simulate(["--preset", "jumbo", "--out", str(out)])
