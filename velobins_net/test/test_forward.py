"""The model's one forward: same outputs and gradients as the module-by-module oracle; caches; uncertainty."""

from __future__ import annotations

import pytest
import torch
import torch.backends.mkldnn as mkldnn
import torch.nn.functional as F
from reference import reference_forward

from velobins_net.accel import NATIVE_GELU_MAX_NUMEL, gelu
from velobins_net.config import ModelConfig
from velobins_net.encoder import DENSE_MIX_MAX_BATCH
from velobins_net.model import NetOutput, VeloBinsNet

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


def _model(**kw) -> VeloBinsNet:
    torch.manual_seed(0)
    model = VeloBinsNet(ModelConfig(num_bins=64, **kw))
    n = model.cfg.input_channels
    model.encoder.set_normalization(torch.linspace(-1.0, 1.0, n), torch.linspace(0.5, 2.0, n))
    return model.eval()


def _assert_same(a: NetOutput, b: NetOutput) -> None:
    for name in NetOutput._fields:
        x, y = getattr(a, name), getattr(b, name)
        assert (x is None) == (y is None), name
        if x is not None:
            # atol: float32 rounding of differently ordered sums (the accelerated attention kernel
            # vs PyTorch's); either kernel leaves up to ~1.5e-6 on v here.
            torch.testing.assert_close(x, y, rtol=1e-5, atol=5e-6, msg=name)


@pytest.mark.parametrize("kw", CONFIGS)
@pytest.mark.parametrize("batch", [1, DENSE_MIX_MAX_BATCH + 3])
def test_inference_equals_reference(kw, batch):
    model = _model(**kw)
    x = torch.randn(batch, 100, 10) * 3
    with torch.inference_mode():
        fast = model(x)
        fast_again = model(x)  # from the caches
        ref = reference_forward(model, x)
    _assert_same(fast, ref)
    _assert_same(fast_again, fast)


@pytest.mark.parametrize("kw", [{}, {"rotor_kind": "speed", "cov_head": True, "uncertainty": "B+C"}])
def test_training_forward_has_reference_gradients(kw):
    model = _model(**kw).train()
    x = torch.randn(3, 100, 10)

    def grads(reference: bool) -> dict[str, torch.Tensor]:
        model.zero_grad()
        out = reference_forward(model, x) if reference else model(x)
        loss = out.v.square().sum() + out.var.sum() + out.logits.logsumexp(-1).sum()
        loss.backward()
        return {n: p.grad.clone() for n, p in model.named_parameters()}

    fast, ref = grads(False), grads(True)
    assert fast.keys() == ref.keys()
    for name in ref:
        scale = float(ref[name].abs().max())
        torch.testing.assert_close(fast[name], ref[name], rtol=1e-4, atol=1e-5 * scale, msg=name)


def test_caches_follow_normalisation_weights_and_edits():
    model = _model()
    x = torch.randn(2, 100, 10)
    with torch.inference_mode():
        before = model(x).v
        # new normalisation while in eval mode: the derived weights must follow
        model.encoder.set_normalization(torch.zeros(10), torch.full((10,), 3.0))
        _assert_same(model(x), reference_forward(model, x))
        assert not torch.allclose(model(x).v, before)
    # load other weights in eval mode
    other = _model()
    with torch.inference_mode():
        other(x)
    other.load_state_dict(model.state_dict())
    with torch.inference_mode():
        _assert_same(other(x), model(x))
    # parameters replaced by other objects (assign=True)
    third = _model(rotor_kind="command")
    with torch.no_grad():
        third(x)
    third.load_state_dict(model.state_dict(), assign=True)
    with torch.inference_mode():
        _assert_same(third(x), model(x))
    # in-place edits in eval mode (an optimiser step, a manual edit) are seen without any call
    with torch.no_grad():
        model.encoder.proj.weight.mul_(1.5)
        model.bins.gamma.mul_(2.0)
    with torch.inference_mode():
        _assert_same(model(x), reference_forward(model, x))
    with torch.no_grad():
        model.bins.theta.bias.add_(0.3)
        model.encoder.layers[-1].qkv.weight.mul_(0.5)
    with torch.inference_mode():
        _assert_same(model(x), reference_forward(model, x))


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
        _assert_same(model(x), reference_forward(model, x))
    with torch.no_grad():
        model.encoder.proj.weight.data.mul_(2.0)  # invisible to version counters: needs invalidate_cache()
    model.invalidate_cache()
    with torch.no_grad():
        _assert_same(model(x), reference_forward(model, x))


def test_dtype_move_drops_caches():
    model = _model()
    x = torch.randn(2, 100, 10)
    with torch.inference_mode():
        model(x)
    model.double()
    with torch.inference_mode():
        out = model(x.double())
        ref = reference_forward(model, x.double())
    assert out.v.dtype == torch.float64
    torch.testing.assert_close(out.v, ref.v, rtol=1e-10, atol=1e-12)


def test_wrong_window_length_is_a_clear_error():
    model = _model()
    with torch.inference_mode(), pytest.raises(ValueError, match="expected 100 time steps"):
        model(torch.randn(1, 99, 10))


@pytest.mark.parametrize("numel", [224, NATIVE_GELU_MAX_NUMEL + 2])
def test_gelu_is_exact_gelu_and_leaves_onednn_flag(numel):
    x = torch.randn(2, numel // 2) * 4
    was = mkldnn.enabled
    y = gelu(x)
    assert y.shape == x.shape and y.is_contiguous()
    torch.testing.assert_close(y, 0.5 * x * (1.0 + torch.erf(x / 2**0.5)), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(y, F.gelu(x), rtol=1e-5, atol=1e-5)
    assert mkldnn.enabled == was


@pytest.mark.parametrize("kw", [{"cov_head": True, "uncertainty": "B+C"}, {"cov_head": True, "uncertainty": "C"}])
def test_uncertainty_is_an_inference_argument(kw):
    model = _model(**kw)
    x = torch.randn(2, 100, 10)
    with torch.inference_mode():
        default = model(x)
        for source in ("B", "C", "B+C"):
            _assert_same(model(x, uncertainty=source), reference_forward(model, x, source))
    _assert_same(default, reference_forward(model, x, kw["uncertainty"]))
    with torch.inference_mode(), pytest.raises(ValueError, match="covariance decoder"):
        _model()(x, uncertainty="C")
    with torch.inference_mode(), pytest.raises(ValueError, match="must be one of"):
        model(x, uncertainty="A")
