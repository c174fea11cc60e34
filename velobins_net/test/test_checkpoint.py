"""velobins_net.checkpoint: atomic save, validated load, and old format versions read in today's layout."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from velobins_net.checkpoint import CheckpointError, model_from_checkpoint, read_checkpoint, save_checkpoint, upgrade
from velobins_net.config import CHECKPOINT_FORMAT_VERSION, ModelConfig
from velobins_net.model import VeloBinsNet
from velobins_net.pretrained import resolve_checkpoint


def _payload(cfg: ModelConfig, model: torch.nn.Module, rotor_kind: str) -> dict:
    """A checkpoint dict as ``train`` writes it, with ``rotor_kind`` as given (old or new name)."""
    return {
        "model_config": cfg.to_dict() | {"rotor_kind": rotor_kind},
        "variant": "G+H^B",
        "bins": {"num_bins": cfg.num_bins, "velocity_range": cfg.velocity_range},
        "normalization": {"mean": torch.zeros(cfg.sensor_channels), "rotor_kind": rotor_kind},
        "train_config": {"epochs": 1, "model": cfg.to_dict() | {"rotor_kind": rotor_kind}},
        "model_state": model.state_dict(),
    }


def test_a_version_1_checkpoint_with_the_old_rotor_kind_loads_as_today(tmp_path: Path) -> None:
    torch.manual_seed(0)
    cfg = ModelConfig(rotor_kind="speed", num_bins=16)
    model = VeloBinsNet(cfg).eval()
    old = tmp_path / "v1.pt"
    torch.save({"format_version": 1} | _payload(cfg, model, "rpm"), old)  # the layout before issue 22, by hand

    ckpt = read_checkpoint(old)
    assert ckpt["format_version"] == CHECKPOINT_FORMAT_VERSION == 2
    assert ckpt["model_config"]["rotor_kind"] == ckpt["normalization"]["rotor_kind"] == "speed"
    assert ckpt["train_config"]["model"]["rotor_kind"] == "speed" and ckpt["train_config"]["epochs"] == 1
    loaded = model_from_checkpoint(ckpt, old)
    assert loaded.cfg.rotor_kind == "speed" and loaded.encoder.square_rotor  # rotor speeds still enter squared
    x = torch.randn(2, cfg.window_len, cfg.input_channels).abs()
    torch.testing.assert_close(loaded(x).v, model(x).v, rtol=0, atol=0)
    assert torch.load(old, weights_only=False)["model_config"]["rotor_kind"] == "rpm", "the file is not rewritten"


def test_saving_writes_the_current_version_and_new_names(tmp_path: Path) -> None:
    cfg = ModelConfig(rotor_kind="pwm", num_bins=16)  # an old name given in code is renamed too
    assert cfg.rotor_kind == "command"
    path = save_checkpoint(tmp_path / "new.pt", _payload(cfg, VeloBinsNet(cfg), cfg.rotor_kind))
    raw = torch.load(path, weights_only=False)
    assert raw["format_version"] == CHECKPOINT_FORMAT_VERSION and raw["model_config"]["rotor_kind"] == "command"
    assert upgrade(raw) is raw  # nothing to do for the current version
    assert [p.name for p in tmp_path.iterdir()] == ["new.pt"], "the atomic save leaves no temporary file"


def test_the_shipped_models_still_load_unchanged() -> None:
    for name in ("crazyflie", "crazyflie-reg"):
        path = resolve_checkpoint(name)
        assert torch.load(path, weights_only=False)["format_version"] == 1  # shipped before the rename
        model = model_from_checkpoint(read_checkpoint(path), path)
        assert (model.cfg.num_rotors, model.cfg.rotor_kind) == (4, "command")


@pytest.mark.parametrize(
    ("content", "match"),
    [
        ({"format_version": 3}, "format_version' is 3, this code reads versions"),
        ({"format_version": 2, "model_config": {}}, "missing fields"),
        ([1, 2], "expected a dict"),
    ],
)
def test_foreign_checkpoints_are_one_error_naming_the_file(tmp_path: Path, content: object, match: str) -> None:
    path = tmp_path / "x.pt"
    torch.save(content, path)
    with pytest.raises(CheckpointError, match=match) as info:
        read_checkpoint(path)
    assert str(info.value).startswith(str(path))


def test_an_unknown_rotor_kind_in_an_old_checkpoint_names_the_field(tmp_path: Path) -> None:
    cfg = ModelConfig(num_bins=16)
    path = tmp_path / "odd.pt"
    torch.save({"format_version": 1} | _payload(cfg, VeloBinsNet(cfg), "thrust"), path)
    with pytest.raises(CheckpointError, match=r"'model_config.rotor_kind' must be one of \('speed', 'command'\)"):
        read_checkpoint(path)
