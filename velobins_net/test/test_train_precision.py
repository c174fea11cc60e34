"""``--precision`` and ``--deterministic``: mixed precision trains (fp16 with a loss scaler), an unsupported
device is refused in one line, and deterministic runs give bit-identical weights."""

from __future__ import annotations

import math

import pytest
import torch
from synthetic import make_flight

from velobins_net.checkpoint import read_checkpoint
from velobins_net.config import ModelConfig
from velobins_net.model import NetOutput
from velobins_net.train import TrainConfig, train
from velobins_net.train_precision import deterministic_algorithms, resolve_precision, to_float32

torch.set_num_threads(1)
TINY = ModelConfig(num_bins=32)


def _cfg(**kw) -> TrainConfig:
    base = {"model": TINY, "variant": "G+H^B", "epochs": 1, "stride": 10, "lr": 3e-3, "progress": False}
    return TrainConfig(**(base | kw))


def _data():
    return [make_flight(1, duration=6.0)], [make_flight(2, duration=3.0)]


@pytest.mark.parametrize("precision", ["bf16", "16"])
def test_mixed_precision_trains_with_float32_weights_and_validation(tmp_path, precision):
    seqs, val = _data()
    ref = train(_cfg(epochs=2), seqs, val, tmp_path / "32")
    res = train(_cfg(epochs=2, precision=precision), seqs, val, tmp_path / precision)
    ck = read_checkpoint(res.last_path)
    assert all(t.dtype == torch.float32 for k, t in ck["model_state"].items() if t.is_floating_point()), precision
    assert all(math.isfinite(h.train_loss) and math.isfinite(h.val_nll) for h in res.history)
    # The low-precision forward pass changes the trajectory (not bit-equal to float32) but not what is learnt.
    w32, wlow = read_checkpoint(ref.last_path)["model_state"], ck["model_state"]
    assert any(not torch.equal(w32[k], wlow[k]) for k in w32)
    assert res.history[-1].val_ave < 1.5 * ref.history[-1].val_ave
    # float16 keeps its loss scale in the checkpoint (an exact resume continues it); bfloat16 needs none.
    assert ("scaler_state" in ck) == (precision == "16")
    assert ck["train_config"]["precision"] == precision


def test_autocast_output_is_cast_back_for_the_loss():
    out = NetOutput(*(torch.ones(2, 3, dtype=torch.bfloat16) for _ in range(3)), None, None, None)
    cast = to_float32(out)
    assert isinstance(cast, NetOutput) and cast.v.dtype == torch.float32 and cast.log_sigma is None


def test_unknown_or_unsupported_precision_is_one_clear_error():
    with pytest.raises(ValueError, match=r"TrainConfig\.precision"):
        _cfg(precision="8")
    assert resolve_precision("32", torch.device("cpu")).dtype is None
    assert resolve_precision("bf16", torch.device("cpu")).dtype == torch.bfloat16
    # A device autocast cannot run on: refused before the run, naming the option and the way out.
    with pytest.raises(ValueError, match=r"--precision 16: not supported on meta .* use --precision 32"):
        resolve_precision("16", torch.device("meta"))


def test_deterministic_runs_are_bit_identical_and_the_setting_is_restored(tmp_path):
    seqs, val = _data()
    before = torch.are_deterministic_algorithms_enabled()
    runs = [train(_cfg(epochs=2, deterministic=True, seed=3), seqs, val, tmp_path / n) for n in "ab"]
    assert torch.are_deterministic_algorithms_enabled() == before
    a, b = (read_checkpoint(r.last_path)["model_state"] for r in runs)
    for key in a:
        assert torch.equal(a[key], b[key]), key
    assert [h.train_loss for h in runs[0].history] == [h.train_loss for h in runs[1].history]
    with deterministic_algorithms(True):
        # torch refuses an op without a deterministic kernel instead of running it
        with pytest.raises(RuntimeError, match="deterministic"):
            torch.zeros(4).put_(torch.tensor([0, 0]), torch.tensor([1.0, 2.0]))
    torch.zeros(4).put_(torch.tensor([0, 0]), torch.tensor([1.0, 2.0]))  # allowed again outside
