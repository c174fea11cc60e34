"""The Table I baselines export to TorchScript and ONNX with the parity check VeloBins models get."""

from __future__ import annotations

import pytest
import torch

from velobins_net.config import ModelConfig
from velobins_net.export import FORMATS, check_parity, export_model, export_wrapper
from velobins_net.networks import build_model


@pytest.mark.parametrize("method", ["tlio", "eqnio", "imo", "airio"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_baseline_exports_match_pytorch(method: str, fmt: str, tmp_path) -> None:
    torch.manual_seed(0)
    cfg = ModelConfig(method=method, head="reg", uncertainty="C", baseline_width=0.125, frame_width=0.125)
    model = build_model(cfg).eval()
    path = export_model(model, tmp_path / f"{method}.{fmt}", fmt)
    result = check_parity(model, path, fmt)
    names = export_wrapper(model).output_names()
    assert names[0] == ("velocity" if method == "airio" else "displacement")
    assert ("covariance" in names) == (method == "eqnio") and set(result.max_abs) == set(names)
    assert result.passed, result.max_abs
