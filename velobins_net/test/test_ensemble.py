"""velobins_net.ensemble: the mixture of members' bin distributions, ensemble checkpoints, and the predictor's
weight on the smoothed disagreement."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from velobins_net.checkpoint import CheckpointError, read_checkpoint, save_checkpoint
from velobins_net.config import ModelConfig
from velobins_net.ensemble import EnsembleNet, ensemble_checkpoint, mixture_moments
from velobins_net.inference import PredictorConfig, StreamingPredictor, load_checkpoint
from velobins_net.model import VeloBinsNet

torch.set_num_threads(1)


def _member(seed: int, **kw) -> VeloBinsNet:
    torch.manual_seed(seed)
    return VeloBinsNet(ModelConfig(num_bins=32, **kw)).eval()


def _payload(model: VeloBinsNet, flights: list[str]) -> dict:
    """A checkpoint dict as ``train`` writes it (the fields the loaders read), trained on ``flights``."""
    cfg = model.cfg
    return {
        "model_config": cfg.to_dict(),
        "variant": "G+H^B",
        "bins": {"num_bins": cfg.num_bins, "velocity_range": cfg.velocity_range},
        "normalization": {"mean": torch.zeros(cfg.sensor_channels), "rotor_kind": cfg.rotor_kind},
        "data": {"train": [{"name": n} for n in flights], "val": [{"name": "sel"}]},
        "model_state": model.state_dict(),
        "optimizer_state": {"lr": 1.0},
    }


def test_mixture_moments_are_the_mean_and_the_law_of_total_variance() -> None:
    v = torch.tensor([[[1.0, 0.0, 2.0]], [[3.0, 0.0, -2.0]]])  # K=2, B=1
    var = torch.tensor([[[0.5, 1.0, 0.0]], [[1.5, 1.0, 2.0]]])
    mean, total, dis = mixture_moments(v, var)
    np.testing.assert_allclose(mean.numpy(), [[2.0, 0.0, 0.0]])
    np.testing.assert_allclose(dis.numpy(), [[1.0, 0.0, 4.0]])  # the members' spread about their mean
    np.testing.assert_allclose(total.numpy(), [[2.0, 1.0, 5.0]])  # mean variance + spread


def test_an_ensemble_averages_the_members_bin_distributions_and_decodes_them_as_one() -> None:
    members = [_member(0), _member(1), _member(2)]
    ens = EnsembleNet(members).eval()
    x = torch.randn(4, ens.cfg.window_len, 10)
    with torch.no_grad():
        outs = [m(x) for m in members]
        out = ens(x)
    probs = torch.stack([torch.softmax(o.logits, -1) for o in outs]).mean(0)
    np.testing.assert_allclose(torch.softmax(out.logits, -1).numpy(), probs.numpy(), rtol=1e-5, atol=1e-7)
    centres = members[0].bins.centres
    mean = (probs * centres).sum(-1)  # the averaged distribution's own mean and variance (eq:decode, eq:bin_variance)
    np.testing.assert_allclose(out.v.numpy(), mean.numpy(), rtol=1e-4, atol=1e-5)
    spread = torch.stack([o.v for o in outs]).var(0, unbiased=False)
    np.testing.assert_allclose(out.disagreement.numpy(), spread.numpy(), rtol=1e-4, atol=1e-7)
    np.testing.assert_allclose(
        out.var.numpy(), (torch.stack([o.var for o in outs]).mean(0) + spread).numpy(), rtol=1e-4, atol=1e-7
    )
    assert out.disagreement.min() > 0  # members of other seeds disagree


def test_members_must_share_the_window_and_the_bins() -> None:
    with pytest.raises(ValueError, match=r"member 1: model_config\.num_bins is 16"):
        EnsembleNet([_member(0), VeloBinsNet(ModelConfig(num_bins=16)).eval()])
    with pytest.raises(ValueError, match=r"model_config\.head is 'reg'"):
        EnsembleNet([_member(0), _member(1, head="reg", uncertainty="C")])


def test_an_ensemble_checkpoint_loads_as_the_ensemble_everywhere(tmp_path: Path) -> None:
    members = [_member(0), _member(1)]
    paths = []
    for i, m in enumerate(members):
        paths.append(save_checkpoint(tmp_path / f"m{i}.pt", _payload(m, [f"f{i}", "shared"])))
    merged = ensemble_checkpoint([read_checkpoint(p) for p in paths], paths)
    assert [r["name"] for r in merged["data"]["train"]] == ["f0", "shared", "f1"]  # the union: what calibrate checks
    assert "optimizer_state" not in merged and len(merged["members"]) == 2
    path = save_checkpoint(tmp_path / "ens.pt", merged)
    loaded = load_checkpoint(path)
    assert isinstance(loaded, EnsembleNet) and not loaded.training
    x = torch.randn(2, loaded.cfg.window_len, 10)
    with torch.no_grad():
        np.testing.assert_allclose(loaded(x).v.numpy(), EnsembleNet(members)(x).v.numpy(), rtol=1e-5, atol=1e-6)


def test_bad_ensembles_are_refused_naming_the_file(tmp_path: Path) -> None:
    one = save_checkpoint(tmp_path / "one.pt", _payload(_member(0), ["a"]))
    ckpt = read_checkpoint(one)
    with pytest.raises(ValueError, match="2 to 16 members, got 1"):
        ensemble_checkpoint([ckpt], [one])
    nested = ensemble_checkpoint([ckpt, ckpt], [one, one])
    with pytest.raises(ValueError, match="is an ensemble already"):
        ensemble_checkpoint([nested, ckpt], ["nested.pt", one])
    for members, match in (
        ([nested["members"][0]] * 17, "must list 2 to 16 members, got 17"),
        ("not a list", "must list 2 to 16 members, got str"),
        ([{"model_config": {}}, {}], r"members\[0\]' needs 'model_config' and 'model_state'"),
    ):
        bad = save_checkpoint(tmp_path / "bad.pt", nested | {"members": members})
        with pytest.raises(CheckpointError, match=match) as err:
            load_checkpoint(bad)
        assert "bad.pt" in str(err.value)
    wrong = nested["members"][1] | {"model_config": nested["members"][1]["model_config"] | {"num_bins": 16}}
    bad = save_checkpoint(tmp_path / "bad.pt", nested | {"members": [nested["members"][0], wrong]})
    with pytest.raises(CheckpointError, match=r"members\[1\]"):
        load_checkpoint(bad)


def _stream(predictor: StreamingPredictor, seconds: float = 3.0) -> list:
    """Feed a 200 Hz IMU and 50 Hz rotor stream; the predictions."""
    out = []
    for t in np.arange(0.0, seconds, 1 / 200):
        if round(t * 200) % 4 == 0:
            predictor.push_rotor(t, 0.5 + 0.1 * np.sin([t, 2 * t, 3 * t, 4 * t]))
        predictor.push_imu(t, [np.sin(3 * t), np.cos(t), 9.8 + t], [0.2 * t, np.sin(t), -0.3])
        p = predictor.step()
        if p is not None:
            out.append(p)
    return out


def test_the_predictor_adds_the_weighted_running_average_of_the_disagreement() -> None:
    ens = EnsembleNet([_member(0), _member(1)]).eval()
    plain = _stream(StreamingPredictor(ens, PredictorConfig(variance_scale=2.0)))
    tau, b = 0.5, 10.0
    weighted = _stream(StreamingPredictor(ens, PredictorConfig(variance_scale=2.0, disagreement_scale=b,
                                                               disagreement_tau=tau)))  # fmt: skip
    instant = _stream(StreamingPredictor(ens, PredictorConfig(disagreement_tau=0.0)))
    raw = np.array([p.disagreement for p in instant])  # τ = 0: each window's own
    average = np.empty_like(raw)
    for i in range(len(raw)):  # the running average by hand: dt 0.05 s at 20 Hz
        average[i] = raw[0] if i == 0 else average[i - 1] + (1 - np.exp(-0.05 / tau)) * (raw[i] - average[i - 1])
    np.testing.assert_allclose([p.disagreement for p in weighted], average, rtol=1e-6)
    np.testing.assert_allclose(
        [p.variance for p in weighted], np.array([p.variance for p in plain]) + b * average, rtol=1e-6
    )
    assert np.ptp(raw[:, 0]) > 0 and not np.allclose(average, raw)  # the average really smooths


def test_one_network_reports_no_disagreement_and_ignores_its_weight() -> None:
    model = _member(0)
    a = _stream(StreamingPredictor(model, PredictorConfig()))
    b = _stream(StreamingPredictor(model, PredictorConfig(disagreement_scale=100.0)))
    assert all(p.disagreement is None for p in b)
    np.testing.assert_allclose([p.variance for p in a], [p.variance for p in b])
    with pytest.raises(ValueError, match="disagreement_scale: must be >= 0"):
        PredictorConfig(disagreement_scale=-1.0)


def test_an_ensemble_exports_to_onnx_with_its_disagreement(tmp_path: Path) -> None:
    from velobins_net.export import ExportConfig, check_parity, export_model, export_wrapper

    ens = EnsembleNet([_member(0), _member(1)]).eval()
    assert export_wrapper(ens).output_names() == ["velocity", "variance", "probs", "disagreement"]
    path = export_model(ens, tmp_path / "ens.onnx", "onnx")
    parity = check_parity(ens, path, "onnx", ExportConfig(parity_batch=3))
    assert parity.passed and set(parity.max_abs) == {"velocity", "variance", "probs", "disagreement"}, parity


def test_fine_tuning_from_an_ensemble_is_refused_naming_its_members(tmp_path: Path) -> None:
    from velobins_net.train_init import read_init_source

    paths = [save_checkpoint(tmp_path / f"m{i}.pt", _payload(_member(i), ["a"])) for i in range(2)]
    ens = save_checkpoint(tmp_path / "ens.pt", ensemble_checkpoint([read_checkpoint(p) for p in paths], paths))
    with pytest.raises(CheckpointError, match="fine-tune from one of its members") as err:
        read_init_source(str(ens))
    assert "m0.pt" in str(err.value) and "ens.pt" in str(err.value)
