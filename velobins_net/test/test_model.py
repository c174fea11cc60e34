"""The network (Fig. 2): recorded outputs, checkpoint compatibility, the module-by-module oracle, caches."""

from __future__ import annotations

import json

import pytest
import torch
from recorded import RECORD, SHIPPED, fixed_model, fixed_windows, shipped_model
from reference import accelerator, assert_same_outputs, reference_forward

from velobins_net.accel.traced import MAX_BATCH
from velobins_net.checkpoint import read_checkpoint
from velobins_net.config import ModelConfig
from velobins_net.encoder import DENSE_MIX_MAX_BATCH
from velobins_net.model import NetOutput, VeloBinsNet
from velobins_net.pretrained import MODELS_DIR

torch.set_num_threads(1)

CONFIGS = [
    {},
    {"rotor_kind": "speed"},
    {"bin_encoding": "pe"},
    {"bin_encoding": "direct"},
    {"cov_head": True, "uncertainty": "B+C"},
    {"cov_head": True, "uncertainty": "C"},
    {"head": "reg", "uncertainty": "C"},
]
BATCHES = [1, MAX_BATCH + 2, DENSE_MIX_MAX_BATCH + 3]
"""Traced; eager with the dense mixing convolution; eager with the grouped one."""

RECORDED = json.loads(RECORD.read_text())


def _model(**kw) -> VeloBinsNet:
    torch.manual_seed(0)
    model = VeloBinsNet(ModelConfig(num_bins=64, **kw))
    n = model.cfg.input_channels
    model.encoder.set_normalization(torch.linspace(-1.0, 1.0, n), torch.linspace(0.5, 2.0, n))
    return model.eval()


def _assert_recorded(out: NetOutput, want: dict, rows: slice = slice(None), tiles: int = 1) -> None:
    for name, value in want.items():
        got = getattr(out, name)
        assert (got is None) == (value is None), name
        if value is not None:
            expected = torch.tensor(value)[rows].repeat(tiles, *([1] * (got.dim() - 1)))
            atol = 2e-5 if name == "logits" else 2e-6  # logits of magnitude ~10: a few float32 ulps
            torch.testing.assert_close(got.detach(), expected, rtol=1e-5, atol=atol, msg=name)


@pytest.mark.parametrize("key", list(RECORDED))
def test_outputs_equal_those_recorded_from_the_fused_implementation(key):
    """Same predictions as before the model became readable modules, on every path a call can take."""
    kind, name = key.split("/")
    model = fixed_model(name) if kind == "fixed" else shipped_model(name)
    want = RECORDED[key]
    x = fixed_windows(model.cfg)
    with torch.inference_mode():
        _assert_recorded(model(x), want)  # eager, dense mixing convolution
        _assert_recorded(model(x[:1]), want, slice(0, 1))  # traced
        _assert_recorded(model(x[:1]), want, slice(0, 1))  # traced, from its cache
        _assert_recorded(model(x.repeat(3, 1, 1)), want, tiles=3)  # grouped mixing convolution
        with accelerator(False):
            _assert_recorded(model(x), want)  # the plain layer-by-layer forward
    _assert_recorded(model.train()(x), want)  # with gradients (training)


@pytest.mark.parametrize("name", SHIPPED)
def test_state_dict_keys_and_parameter_order_match_the_shipped_checkpoints(name):
    """Checkpoints load as they are, and an optimiser state saved with them maps onto the same parameters."""
    saved = read_checkpoint(MODELS_DIR / f"{name}.pt")["model_state"]
    model = shipped_model(name)
    assert list(model.state_dict()) == list(saved)
    assert [n for n, _ in model.named_parameters()] == [k for k in saved if k in dict(model.named_parameters())]


@pytest.mark.parametrize("kw", CONFIGS)
@pytest.mark.parametrize("batch", BATCHES)
def test_inference_equals_reference(kw, batch):
    model = _model(**kw)
    x = torch.randn(batch, 100, 10) * 3
    with torch.inference_mode():
        fast = model(x)
        fast_again = model(x)  # from the caches
        ref = reference_forward(model, x)
        with accelerator(False):
            plain = model(x)
    assert_same_outputs(fast, ref)
    assert_same_outputs(plain, ref)
    assert_same_outputs(fast_again, fast, rtol=0, atol=0)  # a window's estimate does not depend on earlier calls


@pytest.mark.parametrize("kw", [{}, {"rotor_kind": "speed", "cov_head": True, "uncertainty": "B+C"}])
@pytest.mark.parametrize("on", [True, False])
def test_training_forward_has_reference_gradients(kw, on):
    model = _model(**kw).train()
    x = torch.randn(3, 100, 10)

    def grads(reference: bool) -> dict[str, torch.Tensor]:
        model.zero_grad()
        with accelerator(on):
            out = reference_forward(model, x) if reference else model(x)
        loss = out.v.square().sum() + out.var.sum() + out.logits.logsumexp(-1).sum()
        loss.backward()
        return {n: p.grad.clone() for n, p in model.named_parameters()}

    fast, ref = grads(False), grads(True)
    assert fast.keys() == ref.keys()
    for name in ref:
        scale = float(ref[name].abs().max())
        torch.testing.assert_close(fast[name], ref[name], rtol=1e-4, atol=1e-5 * scale, msg=name)


@pytest.mark.parametrize("batch", [2, MAX_BATCH + 2])
def test_caches_follow_normalisation_weights_and_edits(batch):
    model = _model()
    x = torch.randn(batch, 100, 10)
    with torch.inference_mode():
        before = model(x).v
        # new normalisation while in eval mode: the derived weights must follow
        model.encoder.set_normalization(torch.zeros(10), torch.full((10,), 3.0))
        assert_same_outputs(model(x), reference_forward(model, x))
        assert not torch.allclose(model(x).v, before)
    # load other weights in eval mode
    other = _model()
    with torch.inference_mode():
        other(x)
    other.load_state_dict(model.state_dict())
    with torch.inference_mode():
        assert_same_outputs(other(x), model(x))
    # parameters replaced by other objects (assign=True)
    third = _model(rotor_kind="command")
    with torch.no_grad():
        third(x)
    third.load_state_dict(model.state_dict(), assign=True)
    with torch.inference_mode():
        assert_same_outputs(third(x), model(x))
    # in-place edits in eval mode (an optimiser step, a manual edit) are seen without any call
    with torch.no_grad():
        model.encoder.proj.weight.mul_(1.5)
        model.bins.gamma.mul_(2.0)
    with torch.inference_mode():
        assert_same_outputs(model(x), reference_forward(model, x))
    with torch.no_grad():
        model.bins.theta.bias.add_(0.3)
        model.encoder.layers[-1].qkv.weight.mul_(0.5)
        model.encoder.mix_conv.weight.mul_(0.7)
    with torch.inference_mode():
        assert_same_outputs(model(x), reference_forward(model, x))


def test_caches_follow_a_fused_optimiser_step():
    """Fused Adam updates parameters without bumping version counters; the cache must still follow."""
    model = _model()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2, fused=True)
    x = torch.randn(2, 100, 10)
    with torch.no_grad():
        model(x)
    model(x).v.square().sum().backward()
    opt.step()
    with torch.no_grad():
        assert_same_outputs(model(x), reference_forward(model, x))
    with torch.no_grad():
        model.encoder.proj.weight.data.mul_(2.0)  # invisible to version counters: needs invalidate_cache()
    model.invalidate_cache()
    with torch.no_grad():
        assert_same_outputs(model(x), reference_forward(model, x))


@pytest.mark.parametrize("batch", [2, MAX_BATCH + 2])
def test_dtype_move_drops_caches(batch):
    model = _model()
    x = torch.randn(batch, 100, 10)
    with torch.inference_mode():
        model(x)
    model.double()
    with torch.inference_mode():
        out = model(x.double())
        ref = reference_forward(model, x.double())
    assert out.v.dtype == torch.float64
    torch.testing.assert_close(out.v, ref.v, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("batch", [1, MAX_BATCH + 2])
def test_wrong_window_length_is_a_clear_error(batch):
    model = _model()
    for _ in range(2):
        with torch.inference_mode(), pytest.raises(ValueError, match="expected 100 time steps"):
            model(torch.randn(batch, 99, 10))


@pytest.mark.parametrize("kw", [{"cov_head": True, "uncertainty": "B+C"}, {"cov_head": True, "uncertainty": "C"}])
def test_uncertainty_is_an_inference_argument(kw):
    model = _model(**kw)
    x = torch.randn(2, 100, 10)
    with torch.inference_mode():
        default = model(x)
        for source in ("B", "C", "B+C"):
            assert_same_outputs(model(x, uncertainty=source), reference_forward(model, x, source))
    assert_same_outputs(default, reference_forward(model, x, kw["uncertainty"]))
    for _ in range(2):  # also once the traced path knows the model
        with torch.inference_mode(), pytest.raises(ValueError, match="covariance decoder"):
            _model()(x, uncertainty="C")
        with torch.inference_mode(), pytest.raises(ValueError, match="must be one of"):
            model(x, uncertainty="A")


def test_config_validation_names_field():
    with pytest.raises(ValueError, match="rotor_kind"):
        ModelConfig(rotor_kind="rps")
    with pytest.raises(ValueError, match="uncertainty"):
        ModelConfig(uncertainty="B+C", cov_head=False)
