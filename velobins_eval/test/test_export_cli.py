"""``velobins export`` end to end through the command line, in-process (issue 16).

A small checkpoint is written the way ``velobins train`` writes one; each test runs the real
``velobins`` entry point and checks the exit status, the one-line messages (no traceback), the
printed parity figure, and that nothing is left behind or overwritten that should not be.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from velobins_eval.cli import main
from velobins_net.checkpoint import save_checkpoint
from velobins_net.config import ModelConfig
from velobins_net.export import run_exported
from velobins_net.model import VeloBinsNet

torch.set_num_threads(1)


def _write_checkpoint(path: Path, **kw: object) -> VeloBinsNet:
    torch.manual_seed(0)
    model = VeloBinsNet(ModelConfig(num_bins=32, **kw)).eval()
    payload = {
        "model_config": model.cfg.to_dict(),
        "variant": "reg" if kw.get("head") == "reg" else "G+H",
        "bins": {"num_bins": 32},
        "normalization": {},
        "model_state": model.state_dict(),
    }
    save_checkpoint(path, payload)
    return model


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("ckpt") / "best.pt"
    _write_checkpoint(path)
    return path


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["export", *args])
    out, err = capsys.readouterr()
    return code, out, err


def _one_line_error(err: str, *names: str) -> None:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    for name in names:
        assert name in lines[0], (name, err)


@pytest.mark.parametrize("fmt", ["torchscript", "onnx"])
def test_export_writes_a_file_that_matches_the_model(ckpt: Path, tmp_path: Path, capsys, fmt: str) -> None:
    out = tmp_path / "sub" / ("m.onnx" if fmt == "onnx" else "m.pt")
    code, stdout, err = _run(capsys, "--checkpoint", str(ckpt), "--format", fmt, "--out", str(out))
    assert code == 0, err
    assert "max deviation" in stdout and "velocity" in stdout and "probs" in stdout
    deviation = float(stdout.split("max deviation ")[1].split()[0])
    assert 0.0 <= deviation < 1e-4
    assert sorted(p.name for p in out.parent.iterdir()) == [out.name]  # no temporary file left
    model = _write_checkpoint(tmp_path / "again.pt")  # same seed: the checkpoint's model
    x = torch.randn(4, model.cfg.window_len, model.cfg.input_channels)
    with torch.no_grad():
        ref = model(x).v.numpy()
    got = run_exported(out, fmt, x.numpy())[0]  # onnxruntime / torch.jit on new windows
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)


def test_regression_model_has_no_probs(tmp_path: Path, capsys) -> None:
    path = tmp_path / "reg.pt"
    _write_checkpoint(path, head="reg", uncertainty="C")
    code, stdout, err = _run(capsys, "--checkpoint", str(path), "--format", "onnx", "--out", str(tmp_path / "r.onnx"))
    assert code == 0, err
    assert "variance" in stdout and "probs" not in stdout


def test_existing_output_is_refused_without_overwrite(ckpt: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "m.pt"
    out.write_bytes(b"the user's file")
    code, _, err = _run(capsys, "--checkpoint", str(ckpt), "--format", "torchscript", "--out", str(out))
    assert code == 2
    _one_line_error(err, str(out), "--overwrite")
    assert out.read_bytes() == b"the user's file"
    code, stdout, err = _run(
        capsys, "--checkpoint", str(ckpt), "--format", "torchscript", "--out", str(out), "--overwrite"
    )
    assert code == 0, err
    assert out.read_bytes() != b"the user's file" and "max deviation" in stdout
    assert run_exported(out, "torchscript", np.zeros((1, 100, 10), np.float32))[0].shape == (1, 3)


@pytest.mark.parametrize("content", [None, b"not a checkpoint", b""])
def test_bad_checkpoint_is_one_line_exit_2(tmp_path: Path, capsys, content: bytes | None) -> None:
    bad = tmp_path / "bad.pt"
    if content is not None:
        bad.write_bytes(content)
    out = tmp_path / "new" / "m.onnx"
    code, _, err = _run(capsys, "--checkpoint", str(bad), "--format", "onnx", "--out", str(out))
    assert code == 2
    _one_line_error(err, "velobins export: error:", str(bad))
    assert not out.exists() and not out.parent.exists()


def test_foreign_checkpoint_is_refused(tmp_path: Path, capsys) -> None:
    """A pickle holding code is refused by the weights-only loader, naming the file."""
    bad = tmp_path / "evil.pt"
    torch.save({"format_version": 1, "x": Path("x")}, bad)
    code, _, err = _run(capsys, "--checkpoint", str(bad), "--format", "onnx", "--out", str(tmp_path / "m.onnx"))
    assert code == 2
    _one_line_error(err, str(bad))


def test_failed_parity_is_exit_1_with_the_figure(ckpt: Path, tmp_path: Path, capsys, monkeypatch) -> None:
    import velobins_net.export as export

    real = export.run_exported

    def drifting(path, fmt, window):  # an exporter bug: velocity off by 3 cm/s
        outputs = real(path, fmt, window)
        outputs[0] = outputs[0] + 0.03
        return outputs

    monkeypatch.setattr(export, "run_exported", drifting)
    out = tmp_path / "new" / "m.onnx"
    code, _, err = _run(capsys, "--checkpoint", str(ckpt), "--format", "onnx", "--out", str(out))
    assert code == 1
    _one_line_error(err, "parity FAILED", "0.03", str(out), "not written")
    assert not out.exists() and not out.parent.exists()  # nothing left behind, folder included


def test_output_folder_and_options_are_checked(ckpt: Path, tmp_path: Path, capsys) -> None:
    code, _, err = _run(capsys, "--checkpoint", str(ckpt), "--format", "onnx", "--out", str(tmp_path))
    assert code == 2
    _one_line_error(err, str(tmp_path), "folder")
    blocker = tmp_path / "file"
    blocker.write_text("x")
    code, _, err = _run(capsys, "--checkpoint", str(ckpt), "--format", "onnx", "--out", str(blocker / "m.onnx"))
    assert code == 2
    _one_line_error(err, "is a file, not a folder", "--out")
    code, _, err = _run(
        capsys, "--checkpoint", str(ckpt), "--format", "onnx", "--out", str(tmp_path / "m"), "--atol", "-1"
    )
    assert code == 2
    _one_line_error(err, "--atol")
    assert main(["export", "--checkpoint", str(ckpt), "--format", "tflite", "--out", "x"]) == 2
    assert "invalid choice" in capsys.readouterr().err
    assert main(["export", "--help"]) == 0
    assert "velobins export --checkpoint run/best.pt --format onnx" in capsys.readouterr().out


def test_missing_runtime_is_one_line(ckpt: Path, tmp_path: Path, capsys, monkeypatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "onnxruntime" else real(name, *a))
    out = tmp_path / "m.onnx"
    code, _, err = _run(capsys, "--checkpoint", str(ckpt), "--format", "onnx", "--out", str(out))
    assert code == 2
    _one_line_error(err, "onnxruntime", "pip install")
    assert not out.exists()
