"""Sensor augmentation of training windows: the right channels, the right statistics, reproducible in training."""

from __future__ import annotations

import pytest
import torch
from synthetic import make_flight

from velobins_net.augment import Augmentation, augment_windows
from velobins_net.config import ModelConfig
from velobins_net.train import TrainConfig, train

torch.set_num_threads(1)


def _windows(batch: int = 4000, length: int = 50, rotors: int = 4, extra: int = 0) -> torch.Tensor:
    torch.manual_seed(3)
    return torch.randn(batch, length, 6 + rotors + extra, dtype=torch.float64) + 5.0


def test_off_returns_the_batch_unchanged():
    x = _windows(10)
    assert augment_windows(x, Augmentation(), 4) is x


def test_bias_is_constant_per_window_and_noise_white_with_the_given_spreads():
    x = _windows()
    aug = Augmentation(acc_bias=0.3, gyro_noise=0.02)
    y = augment_windows(x, aug, 4)
    d = y - x
    acc, gyro = d[:, :, 0:3], d[:, :, 3:6]
    assert torch.allclose(acc, acc[:, :1, :].expand_as(acc))  # one bias per window and axis
    assert acc[:, 0, :].std().item() == pytest.approx(0.3, rel=0.05)
    assert gyro.std().item() == pytest.approx(0.02, rel=0.02)
    assert abs(torch.corrcoef(torch.stack([gyro[:, :-1, 0].flatten(), gyro[:, 1:, 0].flatten()]))[0, 1]) < 0.02
    assert torch.equal(d[:, :, 6:], torch.zeros_like(d[:, :, 6:]))  # rotor channels untouched
    assert not torch.equal(y, x) and torch.equal(x, _windows())  # the input is not modified


def test_rotor_scale_is_one_factor_for_every_rotor_of_a_window_and_nothing_else_changes():
    x = _windows(extra=9)  # a baseline's 9 attitude columns follow the rotors
    y = augment_windows(x, Augmentation(rotor_scale=0.1), 4)
    ratio = y[:, :, 6:10] / x[:, :, 6:10]
    assert torch.allclose(ratio, ratio[:, :1, :1].expand_as(ratio))
    assert ratio[:, 0, 0].log().std().item() == pytest.approx(0.1, rel=0.05)
    assert torch.equal(y[:, :, :6], x[:, :, :6]) and torch.equal(y[:, :, 10:], x[:, :, 10:])


@pytest.mark.parametrize("field", ["acc_noise", "gyro_bias", "rotor_scale"])
def test_negative_or_infinite_spreads_are_refused(field):
    for bad in (-0.1, float("inf"), float("nan")):
        with pytest.raises(ValueError, match=field):
            Augmentation(**{field: bad})


def test_training_with_augmentation_differs_is_reproducible_and_recorded(tmp_path):
    flights, val = [make_flight(1, duration=6.0)], [make_flight(2, duration=3.0)]
    base = {"model": ModelConfig(num_bins=32), "epochs": 1, "stride": 10, "lr": 3e-3, "progress": False}
    aug = Augmentation(acc_noise=0.1, acc_bias=0.1, gyro_noise=0.01, gyro_bias=0.01, rotor_scale=0.1)
    plain = train(TrainConfig(**base), flights, val, tmp_path / "plain")
    a = train(TrainConfig(**base, augment=aug), flights, val, tmp_path / "a")
    b = train(TrainConfig(**base, augment=aug), flights, val, tmp_path / "b")
    state = [torch.load(r.last_path, weights_only=False) for r in (plain, a, b)]
    plain_w, aug_w = state[0]["model_state"], state[1]["model_state"]
    assert any(not torch.equal(plain_w[k], aug_w[k]) for k in plain_w)  # the draws reached the weights
    for k in state[1]["model_state"]:
        torch.testing.assert_close(state[1]["model_state"][k], state[2]["model_state"][k], rtol=0, atol=0)
    assert state[1]["train_config"]["augment"] == vars(aug)
    assert TrainConfig(**(state[1]["train_config"] | {"model": base["model"]})).augment == aug
