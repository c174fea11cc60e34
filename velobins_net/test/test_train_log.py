"""The TensorBoard log beside ``history.json``: every epoch's scalars and σ histograms, each step once on resume."""

from __future__ import annotations

import shutil

import pytest
import torch
from synthetic import make_flight
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from velobins_net.config import ModelConfig
from velobins_net.train import TrainConfig, train
from velobins_net.train_log import AXES, LOG_DIR, SCALARS

torch.set_num_threads(1)


def _cfg(**kw) -> TrainConfig:
    base = {"model": ModelConfig(num_bins=32), "epochs": 1, "stride": 10, "lr": 3e-3, "progress": False}
    return TrainConfig(**(base | kw))


def _events(path) -> EventAccumulator:
    acc = EventAccumulator(str(path), size_guidance={"scalars": 0, "histograms": 0})
    acc.Reload()
    return acc


def test_event_log_holds_every_epoch_and_a_resume_logs_each_step_once(tmp_path):
    seqs, val = [make_flight(1, duration=6.0)], [make_flight(2, duration=3.0)]
    out = tmp_path / "run"
    first = train(_cfg(), seqs, val, out)
    shutil.copy(first.last_path, tmp_path / "epoch0.pt")
    train(_cfg(epochs=2, resume=str(first.last_path)), seqs, val, out)
    # Resume again from epoch 0 (as after a crash that lost epoch 1's checkpoint): epoch 1 is logged anew, once.
    final = train(_cfg(epochs=2, resume=str(tmp_path / "epoch0.pt")), seqs, val, out)
    acc = _events(out / LOG_DIR)
    tags = acc.Tags()
    assert set(SCALARS) <= set(tags["scalars"])
    for tag, field in SCALARS.items():
        events = acc.Scalars(tag)
        assert [e.step for e in events] == [0, 1], tag
        assert events[-1].value == pytest.approx(getattr(final.history[-1], field), rel=1e-5), tag
    for axis in AXES:
        assert f"val/sigma_{axis}" in tags["histograms"] and f"val/z_{axis}" in tags["histograms"]
        sigma = acc.Histograms(f"val/sigma_{axis}")
        assert [h.step for h in sigma] == [0, 1]
        assert sigma[-1].histogram_value.min > 0 and sigma[-1].histogram_value.num > 0


def test_no_event_log_when_disabled(tmp_path):
    seqs = [make_flight(1, duration=4.0)]
    train(_cfg(tensorboard=False), seqs, seqs, tmp_path)
    assert not (tmp_path / LOG_DIR).exists() and (tmp_path / "history.json").is_file()
