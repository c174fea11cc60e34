"""Shipped models by name (issue 16): names, paths as is, one-line errors that list the names."""

from __future__ import annotations

from pathlib import Path

import pytest

from velobins_net.checkpoint import CheckpointError
from velobins_net.pretrained import MODELS_DIR, ResolvedModel, resolve_checkpoint, resolve_model, shipped_models


@pytest.fixture
def models_dir(tmp_path: Path) -> Path:
    d = tmp_path / "models"
    d.mkdir()
    for name in ("quad", "quad-reg"):
        (d / f"{name}.pt").write_bytes(b"weights")
        (d / f"{name}.yaml").write_text("{}\n")
    (d / "bare.pt").write_bytes(b"weights")  # a model without an overlay
    (d / "MODEL_CARD.md").write_text("# card\n")
    return d


def test_names_resolve_to_checkpoint_and_overlay(models_dir: Path) -> None:
    assert shipped_models(models_dir) == ["bare", "quad", "quad-reg"]
    assert resolve_model("quad", models_dir) == ResolvedModel(models_dir / "quad.pt", models_dir / "quad.yaml")
    assert resolve_model("quad-reg", models_dir).overlay == models_dir / "quad-reg.yaml"
    assert resolve_model("bare", models_dir) == ResolvedModel(models_dir / "bare.pt", None)
    assert resolve_checkpoint("quad", models_dir) == models_dir / "quad.pt"


def test_an_existing_path_is_used_as_is_even_over_a_name(
    models_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    own = tmp_path / "run" / "best.pt"
    own.parent.mkdir()
    own.write_bytes(b"mine")
    assert resolve_model(own, models_dir) == ResolvedModel(own, None)
    assert resolve_model(str(own), models_dir) == ResolvedModel(own, None)
    monkeypatch.chdir(tmp_path)
    Path("quad").write_bytes(b"a file named like a model")
    assert resolve_model("quad", models_dir) == ResolvedModel(Path("quad"), None)


@pytest.mark.parametrize("value", ["crazyfly", "runs/gh/best.pt", "quad.pt", "quad/"])
def test_unknown_names_and_missing_paths_are_one_line_errors_listing_the_names(models_dir: Path, value: str) -> None:
    with pytest.raises(CheckpointError) as info:
        resolve_model(value, models_dir)
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"{value}: ")
    assert "no such checkpoint file" in message and "(shipped: bare, quad, quad-reg)" in message
    assert isinstance(info.value, ValueError)  # the CLIs print it as one line, exit 2


def test_empty_value_and_empty_models_dir(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="no model given"):
        resolve_model("  ", tmp_path)
    with pytest.raises(CheckpointError, match=r"\(shipped: none installed\)"):
        resolve_model("quad", tmp_path / "missing")


def test_the_crazyflie_models_ship_with_their_overlays_and_card() -> None:
    assert {"crazyflie", "crazyflie-reg"} <= set(shipped_models())
    for name in ("crazyflie", "crazyflie-reg"):
        resolved = resolve_model(name)
        assert resolved.checkpoint == MODELS_DIR / f"{name}.pt" and resolved.checkpoint.is_file()
        assert resolved.overlay == MODELS_DIR / f"{name}.yaml" and resolved.overlay.is_file()
        assert resolved.checkpoint.stat().st_size < 8 * 2**20, "ship weights only (no optimizer state)"
    card = (MODELS_DIR / "MODEL_CARD.md").read_text()
    assert "BSD" in card and "NanoBench" in card and "velobins evaluate --checkpoint crazyflie" in card


def test_slim_checkpoint_drops_training_state_and_keeps_the_weights(tmp_path: Path) -> None:
    import torch

    from velobins_net.checkpoint import read_checkpoint, save_checkpoint
    from velobins_net.config import ModelConfig
    from velobins_net.inference import load_checkpoint
    from velobins_net.model import VeloBinsNet
    from velobins_net.pretrained import slim_checkpoint

    torch.manual_seed(0)
    model = VeloBinsNet(ModelConfig(num_bins=16)).eval()
    full = {
        "model_config": model.cfg.to_dict(),
        "variant": "G+H^B",
        "bins": {"num_bins": 16},
        "normalization": {},
        "model_state": model.state_dict(),
        "optimizer_state": {"state": {0: {"exp_avg": torch.ones(1000)}}, "param_groups": []},
        "rng": {"torch": torch.get_rng_state()},
        "git_commit": "abc",
        "data": {
            "description": "csv: train /home/pilot/flights/train (2 flights), val /home/pilot/flights/val (1 flight)",
            "train": [{"name": "hover_01", "source": "/home/pilot/flights/train/hover_01.csv", "dataset": "csv"}],
        },
    }
    save_checkpoint(tmp_path / "best.pt", full)
    slim = slim_checkpoint(tmp_path / "best.pt", tmp_path / "quad.pt", shipped_as="quad")
    ckpt = read_checkpoint(slim)
    assert "optimizer_state" not in ckpt and "rng" not in ckpt
    assert ckpt["git_commit"] == "abc" and ckpt["shipped_as"] == "quad"
    # The training machine's folders are cut, the flights' names kept.
    assert ckpt["data"]["description"] == "csv: train train (2 flights), val val (1 flight)"
    assert ckpt["data"]["train"] == [{"name": "hover_01", "source": "hover_01.csv", "dataset": "csv"}]
    assert slim.stat().st_size < (tmp_path / "best.pt").stat().st_size
    loaded = load_checkpoint(slim)
    for name, value in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], value), name


def _strings(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, (list, tuple)):
        return [s for v in value for s in _strings(v)]
    return []


@pytest.mark.parametrize("name", ["crazyflie", "crazyflie-reg"])
def test_shipped_models_carry_no_machine_paths(name: str) -> None:
    """The shipped files name their training flights, not the folders of the machine that trained them."""
    from velobins_net.checkpoint import read_checkpoint
    from velobins_net.pretrained import ABSOLUTE_PATH, MODELS_DIR

    ckpt = read_checkpoint(MODELS_DIR / f"{name}.pt")
    texts = [text for key, value in ckpt.items() if key != "model_state" for text in _strings(value)]
    found = [text for text in texts if ABSOLUTE_PATH.search(text)]
    assert not found, found[:3]
    assert ckpt["data"]["train"][0]["source"].endswith(".csv.gz")
