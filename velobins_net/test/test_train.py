"""Training on synthetic flights: learns, is reproducible, resumes exactly, checkpoints validate, DDP runs."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from synthetic import make_flight

from velobins_net.checkpoint import CheckpointError, read_checkpoint, save_checkpoint
from velobins_net.config import CHECKPOINT_FORMAT_VERSION, ModelConfig
from velobins_net.data import WindowDataset, fit_normalization, resample
from velobins_net.inference import load_checkpoint
from velobins_net.resample import antialias
from velobins_net.train import TrainConfig, train

torch.set_num_threads(1)
HERE = Path(__file__).resolve().parent
TINY = ModelConfig(num_bins=32)


def _cfg(**kw) -> TrainConfig:
    base = {"model": TINY, "variant": "G+H^B", "epochs": 1, "stride": 10, "lr": 3e-3, "progress": False}
    return TrainConfig(**(base | kw))


def test_synthetic_training_beats_zero_velocity(tmp_path):
    train_seqs = [make_flight(i) for i in range(4)]
    val = [make_flight(10)]
    zero_ave = float(np.linalg.norm(val[0].v[99::5], axis=1).mean())
    res = train(_cfg(epochs=5, stride=4), train_seqs, val, tmp_path)
    best = min(h.val_ave for h in res.history)
    assert best < 0.4 * zero_ave, (best, zero_ave)
    assert res.best_path.is_file() and res.last_path.is_file()
    ck = read_checkpoint(res.best_path)
    assert ck["format_version"] == CHECKPOINT_FORMAT_VERSION
    assert ck["bins"]["velocity_range"] == pytest.approx(1.1 * max(np.abs(s.v).max() for s in train_seqs), rel=1e-6)
    assert [d["name"] for d in ck["data"]["train"]] == [s.name for s in train_seqs]
    model = load_checkpoint(res.best_path)
    assert not model.training
    np.testing.assert_allclose(model.encoder.norm_mean.numpy(), ck["normalization"]["mean"], rtol=1e-6)


def test_reproducible_and_resume_is_exact(tmp_path):
    flights, val = [make_flight(1, duration=6.0)], [make_flight(2, duration=3.0)]
    a = train(_cfg(epochs=2), flights, val, tmp_path / "a")
    b = train(_cfg(epochs=2), flights, val, tmp_path / "b")
    c1 = train(_cfg(epochs=1), flights, val, tmp_path / "c")
    c = train(_cfg(epochs=2, resume=str(c1.last_path)), flights, val, tmp_path / "c")
    sa, sb, sc = (read_checkpoint(r.last_path)["model_state"] for r in (a, b, c))
    for k in sa:
        torch.testing.assert_close(sa[k], sb[k], rtol=0, atol=0)
        torch.testing.assert_close(sa[k], sc[k], rtol=0, atol=0)
    assert [h.epoch for h in c.history] == [0, 1]


def test_resume_with_other_config_or_format_is_a_clear_error(tmp_path):
    flights = [make_flight(1, duration=4.0)]
    res = train(_cfg(), flights, flights, tmp_path)
    with pytest.raises(CheckpointError, match="num_bins"):
        train(_cfg(model=ModelConfig(num_bins=16), resume=str(res.last_path)), flights, flights, tmp_path / "x")
    with pytest.raises(CheckpointError, match="variant"):
        train(_cfg(variant="G^B", resume=str(res.last_path)), flights, flights, tmp_path / "y")
    ck = read_checkpoint(res.last_path)
    ck.pop("format_version")
    bad = tmp_path / "old.pt"
    torch.save(ck | {"format_version": 0}, bad)
    with pytest.raises(CheckpointError, match="format_version"):
        load_checkpoint(bad)
    save_checkpoint(bad, {k: v for k, v in ck.items() if k != "bins"})
    with pytest.raises(CheckpointError, match="bins"):
        load_checkpoint(bad)


def test_windows_resampling_and_normalisation():
    flight = make_flight(3, duration=4.0, rate=400.0, kind="speed")
    ds = WindowDataset([flight], ModelConfig(rotor_kind="speed"), stride=7)
    assert ds.inputs.dtype == torch.float32 and ds.inputs.is_contiguous()
    assert len(ds.inputs) == 400  # stamps 0 … 3.9975 s → grid 0 … 3.99 s at 100 Hz
    x, y = ds.gather(torch.tensor([0, 3]))
    assert x.shape == (2, 100, 10)
    xi, yi = ds[3]
    torch.testing.assert_close(x[1], xi)
    torch.testing.assert_close(y[1], yi)
    # target = body velocity at the window's last sample (resampled grid t = 0.01·k)
    k = int(ds.ends[3])
    expected = [np.interp(k * 0.01, flight.t, flight.v[:, i]) for i in range(3)]
    np.testing.assert_allclose(yi.numpy(), expected, atol=1e-5)
    # inputs: the 400 Hz flight passes the anti-alias FIR before interpolation (as in the streaming predictor)
    acc = antialias(flight.t, flight.acc, 100.0)
    np.testing.assert_allclose(
        xi[-1, :3].numpy(), [np.interp(k * 0.01, flight.t, acc[:, i]) for i in range(3)], atol=1e-4
    )
    norm = fit_normalization(ds.inputs, "speed")
    feat = ds.inputs.double().numpy()[:, 6:] ** 2
    np.testing.assert_allclose(norm.mean[6:], feat.mean(0), rtol=1e-6)
    t, v = resample(np.array([0.0, 0.01, 0.02]), np.array([[0.0], [1.0], [2.0]]), 100.0)
    assert len(t) == 3 and v[2, 0] == 2.0
    with pytest.raises(ValueError, match="rotor_kind"):
        WindowDataset([flight], ModelConfig(rotor_kind="command"))


DDP_SCRIPT = textwrap.dedent(
    """
    import json, os, sys, torch
    sys.path.insert(0, {here!r})
    torch.set_num_threads(1)
    from synthetic import make_flight
    from velobins_net.config import ModelConfig
    from velobins_net.train import TrainConfig, train
    rank = int(os.environ["RANK"])
    # The ranks' clocks disagree on purpose: rank 1's own budget ran out before it started. Rank 0
    # decides (plan and in-epoch stop), so both ranks run rank 0's two epochs, step for step.
    budget = 10.0 if rank == 0 else 1e-6
    cfg = TrainConfig(model=ModelConfig(num_bins=16), epochs=2, stride=10, progress=False, device="cpu",
                      time_budget=budget)
    res = train(cfg, [make_flight(1, duration=6.0)], [make_flight(2, duration=3.0)], {out!r})
    torch.save(res.model.state_dict(), {out!r} + f"/rank{{rank}}.pt")
    with open({out!r} + f"/rank{{rank}}.json", "w") as fh:  # a file per rank: the ranks' stdout may interleave
        json.dump({{"epochs": len(res.history), "val_ave": res.history[-1].val_ave}}, fh)
    """
)


@pytest.mark.slow  # ~15 s on an idle 2-core machine, more under load
def test_distributed_data_parallel_two_cpu_processes(tmp_path):
    """``torchrun --nproc_per_node 2`` on CPU (gloo): both ranks end with bit-identical weights, and the time
    budget is rank 0's on every rank (a rank that decided alone would desynchronise the all-reduce)."""
    script = tmp_path / "ddp_run.py"
    out = tmp_path / "out"
    script.write_text(DDP_SCRIPT.format(here=str(HERE), out=str(out)))
    env = os.environ | {"OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo"}
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    torchrun = Path(sys.executable).with_name("torchrun")
    cmd = [str(torchrun), "--nproc_per_node", "2", "--master_addr", "127.0.0.1", "--master_port", str(port)]
    proc = subprocess.run([*cmd, str(script)], capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    done = [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [d["epochs"] for d in done] == [2, 2]  # rank 0's plan on both
    assert done[0]["val_ave"] == done[1]["val_ave"]
    weights = [torch.load(out / f"rank{r}.pt", weights_only=True) for r in (0, 1)]
    for key in weights[0]:
        assert torch.equal(weights[0][key], weights[1][key]), key
    ck = read_checkpoint(out / "last.pt")
    assert ck["world_size"] == 2 and all(torch.equal(ck["model_state"][k], weights[0][k]) for k in weights[0])


def test_resume_under_a_time_budget_keeps_the_elapsed_time_and_the_epoch_cap(tmp_path):
    flights, val = [make_flight(1, duration=6.0)], [make_flight(2, duration=3.0)]
    first = train(_cfg(epochs=3, time_budget=10.0), flights, val, tmp_path)  # 10 min: the 3-epoch cap binds
    assert len(first.history) == 3 and first.history[-1].budget_s == 600.0
    again = train(_cfg(epochs=3, time_budget=10.0, resume=str(first.last_path)), flights, val, tmp_path)
    assert [h.epoch for h in again.history] == [0, 1, 2]
    more = train(_cfg(epochs=5, time_budget=10.0, resume=str(first.last_path)), flights, val, tmp_path)
    assert [h.epoch for h in more.history] == [0, 1, 2, 3, 4]
    assert more.history[-1].elapsed_s > first.history[-1].elapsed_s


def test_split_tails_holds_out_the_end_of_every_long_enough_flight():
    from velobins_net.data import split_tails

    long_a, long_b, short = make_flight(1, duration=20.0), make_flight(2, duration=12.0), make_flight(3, duration=3.0)
    train_part, val_part = split_tails([long_a, long_b, short], 0.2, 1.0)
    assert [f.name for f in val_part] == [long_a.name, long_b.name]
    assert len(train_part) == 3 and len(train_part[2].t) == len(short.t)  # too short: kept whole for training
    for whole, head, tail in ((long_a, train_part[0], val_part[0]), (long_b, train_part[1], val_part[1])):
        assert len(head.t) + len(tail.t) == len(whole.t) and head.t[-1] < tail.t[0]
        assert len(tail.t) == pytest.approx(0.2 * len(whole.t), abs=1)
    with pytest.raises(ValueError, match="too short"):
        split_tails([short], 0.2, 1.0)
    with pytest.raises(ValueError, match=r"\(0, 1\)"):
        split_tails([long_a], 1.0, 1.0)
