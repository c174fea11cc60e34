"""The transformer layer: the last-token output and its folded attention, the native kernel, against plain PyTorch."""

from __future__ import annotations

import pytest
import torch
from reference import accelerator, reference_layer

from velobins_net.transformer import TransformerLayer

torch.set_num_threads(1)


def _layer(d: int = 48, heads: int = 4, ffn: int = 224, seed: int = 0) -> TransformerLayer:
    torch.manual_seed(seed)
    layer = TransformerLayer(d, heads, ffn)
    with torch.no_grad():  # LayerNorm parameters away from their (1, 0) initialisation
        for norm in (layer.norm1, layer.norm2):
            norm.weight.add_(0.3 * torch.randn(d))
            norm.bias.add_(0.3 * torch.randn(d))
    return layer


@pytest.mark.parametrize("on", [True, False])
@pytest.mark.parametrize(("d", "heads"), [(48, 4), (24, 1), (30, 5)])
def test_layer_equals_the_reference_on_every_token_and_on_the_last(on, d, heads):
    layer = _layer(d, heads, 2 * d)
    x = torch.randn(3, 50, d) * 2
    with torch.no_grad(), accelerator(on):
        ref = reference_layer(layer, x)
        every = layer(x)
        last = layer(x, last_only=True)
    assert every.shape == x.shape and last.shape == (3, 1, d)
    torch.testing.assert_close(every, ref, rtol=1e-5, atol=2e-5)
    torch.testing.assert_close(last[:, 0], ref[:, -1], rtol=1e-5, atol=2e-5)


def test_folded_last_query_has_the_plain_gradients():
    """Training folds the last layer's attention every step: the gradients are those of the layer itself."""
    layer = _layer()
    x = torch.randn(4, 30, 48, requires_grad=True)
    grads = {}
    for on in (True, False):
        layer.zero_grad()
        x.grad = None
        with accelerator(on):
            layer(x, last_only=True).square().sum().backward()
        grads[on] = {"x": x.grad.clone(), **{n: p.grad.clone() for n, p in layer.named_parameters()}}
    for name, plain in grads[False].items():
        scale = float(plain.abs().max())
        torch.testing.assert_close(grads[True][name], plain, rtol=1e-4, atol=1e-5 * scale, msg=name)


def test_folded_weights_follow_the_parameters_without_gradients():
    layer = _layer().eval()
    x = torch.randn(2, 30, 48)
    with torch.no_grad():
        before = layer(x, last_only=True)
        layer.qkv.weight.mul_(0.5)  # e.g. an optimiser step: the fold is rebuilt
        after = layer(x, last_only=True)
        with accelerator(False):
            plain = layer(x, last_only=True)
    assert not torch.allclose(before, after)
    torch.testing.assert_close(after, plain, rtol=1e-5, atol=2e-5)


def test_float64_gradcheck_of_the_last_token_output():
    layer = _layer(d=8, heads=2, ffn=16).double()
    x = torch.randn(2, 6, 8, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: layer(t, last_only=True), (x,))
