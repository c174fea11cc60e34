"""The shipped Crazyflie models on the shipped demo flights (issue 16), offline and through the CLIs.

The models are in ``velobins_net/velobins_net/models``, the held-out NanoBench flights in
``velobins_eval/velobins_eval/demo_data/nanobench``. These tests check that the models load as data
(weights_only), fit the flights, carry an overlay the EKF reads, beat IMU-only on a flight they
never saw, and are reachable by name from ``velobins evaluate``, ``velobins export`` and
``velobins demo`` (offline here; the graph replay is the main job's).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from velobins_eval.cli import main
from velobins_eval.demo import DEMO_DATA
from velobins_net.pretrained import resolve_model

torch.set_num_threads(1)

NAMES = ("crazyflie", "crazyflie-reg")
CIRCLE = DEMO_DATA / "B2_circle_fast_rep1.csv.gz"


@pytest.fixture(scope="module")
def flights() -> list:
    from velobins_data.datasets import load_flights

    seqs = list(load_flights("nanobench", DEMO_DATA).sequences)
    assert sorted(s.name for s in seqs) == ["B2_circle_fast_rep1", "B3_figure8_medium_rep1"]
    return seqs


def test_demo_flights_ship_with_their_licence() -> None:
    licence = (DEMO_DATA / "LICENSE").read_text()
    assert "BSD 3-Clause" in licence and "NanoBench" in licence and "Ullah" in licence
    assert sum(p.stat().st_size for p in DEMO_DATA.iterdir()) < 3 * 2**20


@pytest.mark.parametrize("name", NAMES)
def test_shipped_model_loads_as_data_and_fits_the_demo_flights(name: str, flights: list) -> None:
    from velobins_eval.evaluate import check_fits
    from velobins_net.checkpoint import read_checkpoint
    from velobins_net.inference import load_checkpoint

    resolved = resolve_model(name)
    ckpt = read_checkpoint(resolved.checkpoint)  # torch.load(weights_only=True) inside
    assert "optimizer_state" not in ckpt and ckpt["variant"] == ("G+H^B" if name == "crazyflie" else "reg")
    model = load_checkpoint(resolved.checkpoint)
    assert (model.cfg.num_rotors, model.cfg.rotor_kind) == (4, "command")
    check_fits(model, resolved.checkpoint, flights)  # raises on a rotor count/kind mismatch
    train_files = (
        {Path(s).name for s in ckpt["data"]["train_files"]} if "train_files" in ckpt.get("data", {}) else set()
    )
    assert not {f.name for f in DEMO_DATA.glob("*.csv.gz")} & train_files, "demo flights must be held out"


@pytest.mark.parametrize("name", NAMES)
def test_shipped_overlay_is_a_filter_config_the_ekf_reads(name: str) -> None:
    from velobins_ekf.ekf import EkfConfig
    from velobins_ekf.params import load_filter_config

    overlay = resolve_model(name).overlay
    config = load_filter_config([overlay])
    default = EkfConfig()
    assert config.gyro_noise_density > 5 * default.gyro_noise_density  # the Crazyflie's IMU is noisy in flight
    assert config != default


def test_shipped_model_beats_imu_only_on_a_held_out_flight(flights: list) -> None:
    from velobins_eval.evaluate import fuse_flight, imu_only_flight, load_ekf_config, predict_flight
    from velobins_eval.scoring import GroundTruth, score
    from velobins_net.inference import load_checkpoint

    seq = next(s for s in flights if s.name == "B2_circle_fast_rep1")
    resolved = resolve_model("crazyflie")
    ekf = load_ekf_config([resolved.overlay])
    t, v, var = predict_flight(load_checkpoint(resolved.checkpoint), seq)
    fused = score(fuse_flight(seq, t, v, var, "G+H^B", ekf), GroundTruth.of(seq))
    imu = score(imu_only_flight(seq, t, ekf), GroundTruth.of(seq))
    assert fused.net_ave < 0.3 and fused.ave < 0.3, fused
    assert fused.ave < imu.ave / 5 and fused.ate < imu.ate / 5, (fused, imu)
    assert 0.5 < fused.nees_median < 20, fused


def test_evaluate_and_export_take_a_shipped_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    overlay = resolve_model("crazyflie").overlay
    out = tmp_path / "eval"
    argv = ["evaluate", "--checkpoint", "crazyflie", "--dataset", "nanobench", "--data", str(CIRCLE)]
    assert main([*argv, "--params", str(overlay), "--no-imu-only", "--out", str(out)]) == 0
    config = json.loads((out / "config.json").read_text())
    assert config["checkpoints"] == [str(resolve_model("crazyflie").checkpoint)]
    assert config["filters"]["G+H^B"] | {"filter": None} == {
        "params": [str(overlay)],
        "source": "--params",  # --params replaces a shipped model's own overlay, for every checkpoint
        "filter": None,
        "predictor": {},
    }
    assert "G+H^B" in json.loads((out / "metrics.json").read_text())
    capsys.readouterr()

    assert (
        main(
            [
                "evaluate",
                "--checkpoint",
                "crazyfly",
                "--dataset",
                "nanobench",
                "--data",
                str(CIRCLE),
                "--out",
                str(tmp_path / "x"),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "crazyfly: no such checkpoint file" in err and "crazyflie, crazyflie-reg" in err
    assert not (tmp_path / "x").exists()

    assert main(["export", "--checkpoint", "crazyfly", "--format", "onnx", "--out", str(tmp_path / "m.onnx")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "(shipped: crazyflie, crazyflie-reg" in err


def test_demo_scores_the_shipped_models_offline(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "main_job"
    assert main(["demo", "--model", "crazyfly", "--out", str(out)]) == 2  # refused before --out is touched
    assert "(shipped: crazyflie, crazyflie-reg" in capsys.readouterr().err and not out.exists()

    assert main(["demo", "--data", str(CIRCLE), "--skip-graph", "--out", str(out)]) == 0
    report = (out / "report.md").read_text()
    doc = json.loads((out / "metrics.json").read_text())
    assert set(doc) == {"G+H^B", "reg", "imu-only"}
    assert "## Per flight" in report and "| B2_circle_fast_rep1 | G+H^B |" in report
    assert doc["G+H^B"]["aggregate"]["ave"] < doc["imu-only"]["aggregate"]["ave"] / 5
    assert (out / "offline" / "plots" / "B2_circle_fast_rep1.png").is_file()
    config = json.loads((out / "config.json").read_text())
    assert config["models"]["G+H^B"]["overlay"].endswith("crazyflie.yaml")

    # A user's own model of the same variant beside the shipped one gets its own row.
    own = resolve_model("crazyflie").checkpoint
    argv = ["demo", "--model", "crazyflie", "--model", str(own), "--data", str(CIRCLE), "--skip-graph"]
    assert main([*argv, "--out", str(out), "--overwrite"]) == 0
    assert set(json.loads((out / "metrics.json").read_text())) == {"G+H^B", "G+H^B (crazyflie)", "imu-only"}


@pytest.mark.ros
def test_graph_runs_the_shipped_model_by_name_with_its_overlay(flights: list, tmp_path: Path, ros_domain: int) -> None:
    """The node resolves ``model_path:=crazyflie`` itself; the overlay reaches the EKF node."""
    from velobins_data.bag import write_bag
    from velobins_eval.graph import run_graph

    seq = next(s for s in flights if s.name == "B3_figure8_medium_rep1")
    write_bag(seq, tmp_path / "bag")
    run = run_graph(
        tmp_path / "bag",
        "crazyflie",
        tmp_path / "report",
        rate=2.0,
        label="G+H^B",
        flight=seq.name,
        timeout=150,
        domain_id=ros_domain,
        params_files=[resolve_model("crazyflie").overlay],
    )
    assert run.metrics, run.logs
    m = run.metrics["G+H^B"]["flights"][seq.name]
    # With the generic EKF noise instead of the overlay the filter is over-confident (NEES median > 100).
    assert m["ave"] < 0.3 and m["ate"] < 1.5 and 1.0 < m["nees_median"] < 10, m  # IMU-only: AVE 5.6, ATE 41
