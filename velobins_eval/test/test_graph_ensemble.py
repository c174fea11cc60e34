"""An ensemble checkpoint (``velobins ensemble``) through the real node graph: the network node loads it, the
predictor weighs the members' disagreement into the published covariance, and the eval node's figures match the
offline pipeline with the same predictor parameters."""

from __future__ import annotations

import math
from pathlib import Path

import graph_fixtures as gf
import pytest
import torch

from velobins_data.bag import read_bag
from velobins_eval.cli import main as cli_main
from velobins_eval.evaluate import fuse_flight, predict_flight
from velobins_eval.graph import run_graph
from velobins_eval.scoring import GroundTruth, score
from velobins_net.checkpoint import read_checkpoint, save_checkpoint
from velobins_net.inference import PredictorConfig, load_checkpoint

RATE = 2.0
"""Replay speed factor, as test_graph's."""
REL_TOL = 0.02
"""Graph vs offline, relative, on the velocity figures (test_graph's METRIC_REL_TOL)."""
B = 5.0
"""The disagreement weight the graph's predictor runs with (``predictor.disagreement_scale``)."""


@pytest.fixture(scope="module")
def ensemble(tmp_path_factory: pytest.TempPathFactory) -> tuple[gf.GraphSetup, Path]:
    """The tiny trained checkpoint and a second member made from it by perturbing its weights (a member that
    disagrees), combined by the command."""
    setup = gf.tiny_setup(tmp_path_factory.mktemp("graph"))
    folder = tmp_path_factory.mktemp("ensemble")
    other = read_checkpoint(setup.checkpoint)
    gen = torch.Generator().manual_seed(0)
    other["model_state"] = {
        k: v + 0.05 * v.std().nan_to_num() * torch.randn(v.shape, generator=gen) if v.is_floating_point() and v.ndim > 1
        else v
        for k, v in other["model_state"].items()
    }  # fmt: skip
    member = save_checkpoint(folder / "member.pt", other)
    out = folder / "ensemble.pt"
    argv = ["ensemble", "--checkpoint", str(setup.checkpoint), "--checkpoint", str(member), "--out", str(out)]
    assert cli_main(argv) == 0
    return setup, out


@pytest.mark.ros
def test_the_graph_runs_an_ensemble_as_offline(ensemble, tmp_path: Path, ros_domain: int) -> None:
    setup, checkpoint = ensemble
    label, flight = "ensemble", setup.flight.name
    run = run_graph(
        setup.bag,
        checkpoint,
        tmp_path / "report",
        rate=RATE,
        label=label,
        flight=flight,
        extra_params={"velobins_net_node": {"predictor.disagreement_scale": B}},
        timeout=60 + 2 * setup.flight.duration / RATE,
        domain_id=ros_domain,
    )
    logs = "\n".join(f"--- {exe}\n{text[-1500:]}" for exe, text in run.logs.items())
    assert run.return_codes == {exe: 0 for exe in run.return_codes} and len(run.return_codes) == 4, logs
    got = run.metrics[label]["flights"][flight]

    seq = read_bag(setup.bag)
    model = load_checkpoint(checkpoint)
    t, v, var, dis = predict_flight(model, seq, PredictorConfig(disagreement_scale=B), disagreement=True)
    assert dis.min() >= 0 and dis.max() > 0  # the members disagree, and the covariance carries it
    offline = score(fuse_flight(seq, t, v, var, "offline"), GroundTruth.of(seq))
    plain = score(fuse_flight(seq, *predict_flight(model, seq), "offline"), GroundTruth.of(seq))
    assert offline.net_nll != plain.net_nll  # b·d̄ changed what the filter was told
    for key in ("net_ave", "net_nll", "ave", "nees_median"):
        want = float(getattr(offline, key))
        if not (math.isfinite(got[key]) and abs(got[key] - want) <= max(REL_TOL * abs(want), 0.01)):
            windows = gf.window_diff(run.report_dir, label, flight, t, v)
            raise AssertionError(f"{key}: graph {got[key]:.6g} vs offline {want:.6g}; {windows}\n{logs}")
