"""The encoder (§III-B): parameter count, input standardisation, its fast paths against the plain branches."""

from __future__ import annotations

import pytest
import torch
from reference import accelerator, reference_encoder

from velobins_net.config import ModelConfig
from velobins_net.encoder import DENSE_MIX_MAX_BATCH, Encoder, block_diagonal
from velobins_net.model import count_parameters

torch.set_num_threads(1)


def _encoder(**kw) -> Encoder:
    torch.manual_seed(0)
    enc = Encoder(ModelConfig(**kw))
    n = enc.norm_mean.shape[0]
    enc.set_normalization(torch.linspace(-1.0, 1.0, n), torch.linspace(0.5, 2.0, n))
    return enc


def test_parameter_count_matches_paper():
    n = count_parameters(Encoder(ModelConfig(num_rotors=4)))
    assert n == 69_936
    assert abs(n - 69_800) / 69_800 < 0.01


def test_standardise_squares_rotor_speeds_and_uses_the_frozen_statistics():
    enc = Encoder(ModelConfig(rotor_kind="speed")).eval()
    mean, std = torch.arange(10.0), torch.full((10,), 2.0)
    enc.set_normalization(mean, std)
    x = torch.randn(2, 100, 10)
    with torch.inference_mode():
        enc(x * 5)
        z = enc.standardise(x)
    torch.testing.assert_close(enc.norm_mean, mean)  # not updated by a forward
    torch.testing.assert_close(z[..., 6:], (x[..., 6:] ** 2 - mean[6:]) / 2.0)
    torch.testing.assert_close(z[..., :6], (x[..., :6] - mean[:6]) / 2.0)
    command = Encoder(ModelConfig(rotor_kind="command"))
    torch.testing.assert_close(command.standardise(x), x)  # commands raw, unit statistics
    with pytest.raises(ValueError, match="std"):
        enc.set_normalization(mean, torch.zeros(10))
    with pytest.raises(ValueError, match="expected shape"):
        enc.set_normalization(torch.zeros(9), torch.ones(9))


def test_block_diagonal_convolution_is_the_separate_convolutions():
    g = torch.Generator().manual_seed(0)
    blocks = [torch.randn(4, c, 3, generator=g) for c in (3, 3, 5)]
    z = torch.randn(2, 11, 20, generator=g)
    fused = torch.nn.functional.conv1d(z, block_diagonal(blocks), padding=1)
    parts = [torch.nn.functional.conv1d(p, w, padding=1) for p, w in zip(z.split([3, 3, 5], 1), blocks, strict=True)]
    torch.testing.assert_close(fused, torch.cat(parts, 1))


@pytest.mark.parametrize("batch", [3, DENSE_MIX_MAX_BATCH + 1])
@pytest.mark.parametrize("grad", [False, True])
def test_fast_convolutions_equal_the_plain_ones(batch, grad):
    """Block-diagonal branches (always) and the dense mixing convolution (small gradient-free batches)."""
    enc = _encoder(rotor_kind="speed", num_rotors=6)
    z = torch.randn(batch, 12, 100)
    with torch.set_grad_enabled(grad):
        fast = enc.mixing_conv(enc.branch_convs(z))
        with accelerator(False):
            plain = enc.mixing_conv(enc.branch_convs(z))
    torch.testing.assert_close(fast, plain, rtol=1e-5, atol=1e-5)
    if grad:  # the block-diagonal weight is rebuilt from the parameters: gradients reach the branches
        fast.square().sum().backward()
        assert all(p.grad is not None for p in enc.rotor_conv.parameters())


@pytest.mark.parametrize("kw", [{}, {"rotor_kind": "speed"}, {"num_layers": 1}, {"num_layers": 3, "num_heads": 2}])
def test_encoder_equals_the_all_token_reference(kw):
    enc = _encoder(**kw).eval()
    x = torch.randn(5, 100, 10) * 3
    with torch.inference_mode():
        h = enc(x)
        ref = reference_encoder(enc, x)
        with accelerator(False):
            plain = enc(x)
    torch.testing.assert_close(h, ref, rtol=1e-5, atol=5e-6)
    torch.testing.assert_close(plain, ref, rtol=1e-5, atol=5e-6)


def test_without_transformer_layers_h_is_the_last_token():
    enc = _encoder(num_layers=0).eval()
    x = torch.randn(2, 100, 10)
    with torch.no_grad():
        h = enc(x)
        torch.testing.assert_close(h, reference_encoder(enc, x), rtol=1e-5, atol=5e-6)
    assert h.shape == (2, 48)


def test_wrong_window_length_is_a_clear_error():
    with torch.inference_mode(), pytest.raises(ValueError, match="expected 100 time steps"):
        _encoder()(torch.randn(1, 99, 10))
