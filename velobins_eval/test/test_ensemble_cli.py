"""``velobins ensemble``: trained checkpoints into one ensemble checkpoint, which every loader reads."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from velobins_eval.cli import main as cli_main
from velobins_net.checkpoint import save_checkpoint
from velobins_net.config import ModelConfig
from velobins_net.ensemble import EnsembleNet
from velobins_net.inference import load_checkpoint
from velobins_net.model import VeloBinsNet


def _checkpoint(path: Path, seed: int, **kw) -> Path:
    torch.manual_seed(seed)
    cfg = ModelConfig(num_bins=16, **kw)
    model = VeloBinsNet(cfg).eval()
    payload = {
        "model_config": cfg.to_dict(),
        "variant": "G+H^B",
        "bins": {"num_bins": cfg.num_bins, "velocity_range": cfg.velocity_range},
        "normalization": {"mean": torch.zeros(cfg.sensor_channels), "rotor_kind": cfg.rotor_kind},
        "data": {"train": [{"name": f"flight{seed}"}], "val": []},
        "model_state": model.state_dict(),
    }
    return save_checkpoint(path, payload)


def test_ensemble_writes_a_checkpoint_every_loader_reads(tmp_path: Path, capsys) -> None:
    a, b = _checkpoint(tmp_path / "a.pt", 0), _checkpoint(tmp_path / "b.pt", 1)
    out = tmp_path / "sub" / "ens.pt"
    assert cli_main(["ensemble", "--checkpoint", str(a), "--checkpoint", str(b), "--out", str(out)]) == 0
    assert "ensemble of 2 members" in capsys.readouterr().out
    model = load_checkpoint(out)
    assert isinstance(model, EnsembleNet) and len(model.members) == 2

    before = out.read_bytes()
    assert cli_main(["ensemble", "--checkpoint", str(a), "--checkpoint", str(b), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--overwrite" in err[0] and out.read_bytes() == before  # nothing of the user's replaced
    assert cli_main(["ensemble", "--checkpoint", str(b), "--checkpoint", str(a), "--out", str(out), "--overwrite"]) == 0
    assert out.read_bytes() != before


@pytest.mark.parametrize(
    ("members", "message"),
    [
        (["a.pt"], "2 or more members, got 1"),
        (["a.pt", "missing.pt"], "missing.pt"),
        (["a.pt", "other.pt"], "model_config.num_bins is 32"),
        (["a.pt", "ens.pt"], "is an ensemble already"),
    ],
)
def test_bad_members_are_one_line_and_exit_2(tmp_path: Path, capsys, members, message) -> None:
    _checkpoint(tmp_path / "a.pt", 0)
    _checkpoint(tmp_path / "other.pt", 2, **{})
    torch.manual_seed(2)
    cfg = ModelConfig(num_bins=32)
    other = torch.load(tmp_path / "other.pt", weights_only=False)
    other["model_config"] = cfg.to_dict()
    other["model_state"] = VeloBinsNet(cfg).state_dict()
    torch.save(other, tmp_path / "other.pt")
    _checkpoint(tmp_path / "b.pt", 1)
    assert cli_main(["ensemble", "--checkpoint", str(tmp_path / "a.pt"), "--checkpoint", str(tmp_path / "b.pt"),
                     "--out", str(tmp_path / "ens.pt")]) == 0  # fmt: skip
    capsys.readouterr()
    argv = ["ensemble", *[x for m in members for x in ("--checkpoint", str(tmp_path / m))], "--out"]
    assert cli_main([*argv, str(tmp_path / "new.pt")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
    assert not (tmp_path / "new.pt").exists()
