"""Fine-tuning (``init_from``): what carries over, what is refitted or kept fresh, what is frozen, and the
one-line refusal of another architecture."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from synthetic import make_flight

from velobins_common.constants import ROTOR_SPEED
from velobins_net.bins import BinGrid
from velobins_net.checkpoint import CheckpointError, read_checkpoint
from velobins_net.config import RANGE_MARGIN, ModelConfig
from velobins_net.networks import build_model
from velobins_net.pretrained import resolve_checkpoint
from velobins_net.train import TrainConfig, resolve_model_config, train
from velobins_net.train_init import INIT_FREE_FIELDS, freeze_modules, initialise
from velobins_net.variants import parse_variant

torch.set_num_threads(1)
TINY = ModelConfig(num_bins=32)


def _cfg(**kw) -> TrainConfig:
    base = {"model": TINY, "variant": "G+H^B", "epochs": 1, "stride": 10, "lr": 3e-3, "progress": False}
    return TrainConfig(**(base | kw))


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """A small trained G+H^B model: 4 PWM rotors, 32 bins."""
    out = tmp_path_factory.mktemp("source")
    res = train(_cfg(), [make_flight(1, duration=6.0)], [make_flight(2, duration=3.0)], out)
    return res.best_path


def _target(num_rotors: int = 6, kind: str = ROTOR_SPEED, r: float = 7.0) -> ModelConfig:
    cfg = _cfg(model=ModelConfig(num_bins=32, num_rotors=num_rotors, rotor_kind=kind))
    return resolve_model_config(cfg, parse_variant("G+H^B"), r)


def test_weights_carry_over_except_the_rotor_input_of_another_rotor_count(source):
    src = read_checkpoint(source)
    mcfg = _target()
    model = build_model(mcfg)
    init = initialise(model, mcfg, str(source), ())
    assert init["kept_fresh"] == ["encoder.rotor_conv.weight"] and init["frozen"] == []
    assert init["source"] == str(source) and init["variant"] == "G+H^B"
    state = model.state_dict()
    fresh = build_model(mcfg).state_dict()
    for key, value in src["model_state"].items():
        if key in ("encoder.rotor_conv.weight", "encoder.norm_mean", "encoder.norm_std"):
            assert value.shape != state[key].shape, key
        elif key == "bins.centres":  # derived from the new run's R, not copied
            torch.testing.assert_close(state[key], BinGrid(32, 7.0).centres())
            assert not torch.equal(state[key], value)
        elif key == "bins.pe":  # derived from centres / R: the new run's own
            assert torch.equal(state[key], fresh[key])
        else:
            assert torch.equal(state[key], value), key


def test_fine_tuned_run_refits_normalisation_and_range_and_keeps_a_frozen_encoder(source, tmp_path):
    src = read_checkpoint(source)["model_state"]
    seqs, val = (
        [make_flight(5, duration=6.0, kind=ROTOR_SPEED, rotors=6)],
        [make_flight(6, duration=3.0, kind=ROTOR_SPEED, rotors=6)],
    )
    for s in seqs + val:
        s.v *= 3.0  # a faster vehicle than the source's
    six = ModelConfig(num_bins=32, num_rotors=6, rotor_kind=ROTOR_SPEED)
    res = train(_cfg(model=six, init_from=str(source), freeze=("encoder",)), seqs, val, tmp_path)
    ck = read_checkpoint(res.last_path)
    state = ck["model_state"]
    # Frozen: the encoder's loaded weights are untouched; the re-initialised rotor input is trained anyway.
    for key, value in src.items():
        if key.startswith("encoder.") and "norm_" not in key and key != "encoder.rotor_conv.weight":
            assert torch.equal(state[key], value), key
    assert ck["init"]["frozen"] and "encoder.rotor_conv.weight" not in ck["init"]["frozen"]
    fresh_model = build_model(_target())
    assert not torch.equal(state["encoder.rotor_conv.weight"], fresh_model.state_dict()["encoder.rotor_conv.weight"])
    assert not torch.equal(state["bins.theta.weight"], src["bins.theta.weight"])  # the head is trained
    # Refitted on the new flights, as a fresh run: normalisation (6 rotors, squared speeds) and R.
    body_v = np.concatenate([s.v for s in seqs])
    assert ck["bins"]["velocity_range"] == pytest.approx(RANGE_MARGIN * np.abs(body_v).max(), rel=1e-3)
    assert ck["bins"]["velocity_range"] > 2 * read_checkpoint(source)["bins"]["velocity_range"]
    assert state["encoder.norm_mean"].shape == (12,) and ck["normalization"]["rotor_kind"] == ROTOR_SPEED
    assert ck["model_config"]["num_rotors"] == 6 and ck["train_config"]["init_from"] == str(source)


def test_another_architecture_is_refused_naming_every_field(source, tmp_path):
    seqs = [make_flight(1, duration=4.0)]
    with pytest.raises(CheckpointError, match=r"architecture differs .*num_bins: 32 != 16") as info:
        train(_cfg(model=ModelConfig(num_bins=16), init_from=str(source)), seqs, seqs, tmp_path / "a")
    assert str(source) in str(info.value) and "num_rotors" in str(info.value)  # says what may differ
    with pytest.raises(CheckpointError, match="head: 'bins' != 'reg'"):
        train(_cfg(variant="reg", init_from=str(source)), seqs, seqs, tmp_path / "b")
    with pytest.raises(CheckpointError, match="no shipped model of that name"):
        train(_cfg(init_from="no-such-model"), seqs, seqs, tmp_path / "c")
    assert not (tmp_path / "a" / "last.pt").exists()
    assert set(INIT_FREE_FIELDS) < set(ModelConfig().to_dict())


def test_freeze_names_a_part_of_the_model(tmp_path):
    model = build_model(_target())
    with pytest.raises(ValueError, match=r"--freeze: 'decoder' is not a part .*encoder, bins"):
        freeze_modules(model, ["decoder"])
    frozen = freeze_modules(model, ["encoder.layers.0"])
    assert frozen and all(n.startswith("encoder.layers.0.") for n in frozen)
    assert all(not p.requires_grad for n, p in model.named_parameters() if n in frozen)
    assert model.encoder.layers[1].ff1.weight.requires_grad


def test_resume_keeps_the_frozen_set_and_refuses_another(source, tmp_path):
    seqs, val = [make_flight(1, duration=6.0)], [make_flight(2, duration=3.0)]
    first = train(_cfg(init_from=str(source), freeze=("encoder",)), seqs, val, tmp_path)
    again = train(
        _cfg(epochs=2, init_from=str(source), freeze=("encoder",), resume=str(first.last_path)), seqs, val, tmp_path
    )
    a, b = read_checkpoint(first.last_path)["model_state"], read_checkpoint(again.last_path)["model_state"]
    assert torch.equal(a["encoder.proj.weight"], b["encoder.proj.weight"]) and [h.epoch for h in again.history] == [
        0,
        1,
    ]
    with pytest.raises(CheckpointError, match=r"freeze: \['encoder'\] != \[\]"):
        train(_cfg(epochs=2, init_from=str(source), resume=str(first.last_path)), seqs, val, tmp_path / "x")


def test_a_shipped_model_name_fine_tunes(tmp_path):
    seqs, val = [make_flight(7, duration=4.0)], [make_flight(8, duration=3.0)]
    res = train(_cfg(model=ModelConfig(), init_from="crazyflie", stride=20), seqs, val, tmp_path)
    ck = read_checkpoint(res.best_path)
    assert ck["init"]["path"] == str(resolve_checkpoint("crazyflie")) and ck["init"]["kept_fresh"] == []
    assert ck["init"]["variant"] == "G+H^B" and res.init == ck["init"]
