"""Training schedules and the time budget: LR warm-up/decay, KL ramp, rotating windows, selection score, budget plan."""

from __future__ import annotations

import itertools
import json
import math
import time

import pytest
import torch
from synthetic import make_flight

from velobins_net.bins import BinGrid
from velobins_net.checkpoint import read_checkpoint
from velobins_net.config import ModelConfig
from velobins_net.losses import variant_loss
from velobins_net.model import VeloBinsNet
from velobins_net.schedule import (
    RECIPES,
    BudgetPlanner,
    epoch_window_indices,
    kl_weight_factor,
    lr_factor,
    nees_bounds,
    nll_start_epoch,
    selection_score,
)
from velobins_net.train import TrainConfig, resolve_model_config, train, weighted_loss
from velobins_net.variants import parse_variant

torch.set_num_threads(1)
TINY = ModelConfig(num_bins=32)


def test_paper_recipe_is_the_dataclass_default():
    cfg = TrainConfig()
    for name, value in RECIPES["paper"].items():
        assert getattr(cfg, name) == value, name
    for name, recipe in RECIPES.items():
        assert set(recipe) == set(RECIPES["paper"]), name  # every recipe sets the same fields
        TrainConfig(**recipe)  # and is a valid config


def test_lr_factor_warmup_then_cosine_or_constant():
    assert lr_factor(0.3, "constant", 0.0, 1.0) == 1.0
    assert lr_factor(0.0, "cosine", 0.1, 0.02) == 0.0
    assert lr_factor(0.05, "cosine", 0.1, 0.02) == pytest.approx(0.5)
    assert lr_factor(0.1, "cosine", 0.1, 0.02) == pytest.approx(1.0)
    assert lr_factor(0.55, "cosine", 0.1, 0.02) == pytest.approx(0.02 + 0.98 * 0.5)
    assert lr_factor(1.0, "cosine", 0.1, 0.02) == pytest.approx(0.02)
    assert lr_factor(1.7, "cosine", 0.1, 0.02) == pytest.approx(0.02)  # past the plan: stays at the end value
    grid = [lr_factor(p / 100, "cosine", 0.05, 0.0) for p in range(5, 101)]
    assert all(a >= b for a, b in itertools.pairwise(grid))
    with pytest.raises(ValueError, match="lr_schedule"):
        lr_factor(0.5, "step", 0.0, 1.0)


def test_kl_ramp():
    assert kl_weight_factor(0.0, 0.0, 0.1) == 1.0
    assert kl_weight_factor(0.0, 0.2, 0.1) == pytest.approx(0.1)
    assert kl_weight_factor(0.1, 0.2, 0.1) == pytest.approx(0.55)
    assert kl_weight_factor(0.2, 0.2, 0.1) == 1.0


def test_rotating_windows_cover_every_window_once_per_cycle():
    n, stride = 103, 4
    cycle = torch.cat([epoch_window_indices(n, stride, e, True) for e in range(8, 8 + stride)])
    assert sorted(cycle.tolist()) == list(range(n))
    assert torch.equal(epoch_window_indices(n, stride, 3, False), torch.arange(n))


def test_selection_score_charges_the_missing_share_in_nats():
    lo, hi = nees_bounds()
    assert lo == pytest.approx(0.216, abs=5e-4) and hi == pytest.approx(9.348, abs=5e-4)
    assert selection_score(-1.0, 0.95) == -1.0
    assert selection_score(-1.0, 0.99) == -1.0  # no reward beyond nominal
    assert selection_score(-1.0, 0.475) == pytest.approx(-1.0 + math.log(2.0))


def test_budget_planner_fits_the_remaining_time():
    pl = BudgetPlanner(budget_s=10.0, max_epochs=50, start=time.perf_counter())
    assert pl.plan(0, estimate_s=3.0) == 3
    pl.epoch_s = [2.0, 2.0]
    assert pl.plan(2) in (6, 7)  # ~10 s left minus a little → 4 more
    assert BudgetPlanner(10.0, 5, start=time.perf_counter()).plan(0, estimate_s=0.1) == 5  # epochs cap
    late = BudgetPlanner(10.0, 50, start=time.perf_counter() - 20.0)
    assert late.plan(4, estimate_s=1.0) == 4  # over budget: nothing more
    assert BudgetPlanner(1.0, 50, start=time.perf_counter()).plan(0, estimate_s=5.0) == 1  # always one epoch


def test_weighted_loss_scales_only_the_kl_gradient():
    variant = parse_variant("G+H^B")
    mcfg = resolve_model_config(TrainConfig(model=TINY), variant, 2.0)
    torch.manual_seed(0)
    net = VeloBinsNet(mcfg)
    grid = BinGrid(mcfg.num_bins, mcfg.velocity_range)
    x, y = torch.randn(8, 100, 10), 0.5 * torch.randn(8, 3)
    out = net(x)
    full, terms = variant_loss(variant, out, y, grid, net.bins.centres)
    assert weighted_loss(variant, out, y, grid, net.bins.centres, False, 1.0).item() == pytest.approx(full.item())
    half = weighted_loss(variant, out, y, grid, net.bins.centres, False, 0.5)
    assert half.item() == pytest.approx(terms["huber"] + 0.5 * terms["kl"], rel=1e-5)


def test_kl_scale_multiplies_lambda_kl_for_the_whole_run(tmp_path):
    """``kl_scale`` scales λ_KL on top of the ramp: after the ramp the recorded weight is kl_scale, not 1."""
    flights = [make_flight(1, duration=6.0)]
    cfg = TrainConfig(model=TINY, stride=10, epochs=3, progress=False, kl_scale=0.25, kl_ramp=0.3, kl_ramp_start=0.1)
    train(cfg, flights, flights, tmp_path)
    rows = json.loads((tmp_path / "history.json").read_text())
    assert rows[-1]["kl_weight"] == pytest.approx(0.25)
    assert all(0.0 < r["kl_weight"] <= 0.25 for r in rows)
    with pytest.raises(ValueError, match="kl_scale"):
        TrainConfig(kl_scale=-0.1)


def test_label_floor_val_changes_training_from_the_second_epoch(tmp_path):
    """``label_floor='val'`` bounds the labels' σ by the last validation's RMS error: the first epoch (no
    validation yet) trains exactly as without it, the second one differently."""
    flights = [make_flight(1, duration=6.0)]
    losses = {}
    for floor in ("none", "val"):
        cfg = TrainConfig(model=TINY, stride=10, epochs=2, progress=False, seed=3, label_floor=floor)
        losses[floor] = [h.train_loss for h in train(cfg, flights, flights, tmp_path / floor).history]
    assert losses["val"][0] == pytest.approx(losses["none"][0], rel=1e-9)
    assert losses["val"][1] != pytest.approx(losses["none"][1], rel=1e-6)
    with pytest.raises(ValueError, match="label_floor"):
        TrainConfig(label_floor="train")


def test_time_budget_plans_epochs_stops_and_records_the_plan(tmp_path):
    flights, val = [make_flight(i, duration=8.0) for i in range(2)], [make_flight(9, duration=4.0)]
    budget_s = 10.0
    cfg = TrainConfig(
        model=TINY, stride=2, epochs=10_000, progress=False, time_budget=budget_s / 60.0, **_small_data_schedule()
    )
    res = train(cfg, flights, val, tmp_path)
    assert res.best_path.is_file() and res.history[0].windows_per_s > 0  # at least one step, even on a slow machine
    rows = json.loads((tmp_path / "history.json").read_text())
    assert all(r["budget_s"] == pytest.approx(budget_s) for r in rows)
    starts = [0.0] + [r["elapsed_s"] for r in rows[:-1]]
    assert all(t < budget_s for t in starts)  # no epoch starts past the budget
    if len(rows) > 1:  # the last epoch stopped at the budget (a validation and a checkpoint past it at most)
        assert rows[-1]["elapsed_s"] < budget_s + 2.0 * (rows[-1]["elapsed_s"] - rows[-2]["elapsed_s"]) + 1.0
    assert all(r["planned_epochs"] >= 1 for r in rows) and rows[-1]["planned_epochs"] <= len(rows) + 1
    assert 0.0 <= rows[-1]["val_nees_share"] <= 1.0 and math.isfinite(rows[-1]["val_nees_median"])
    assert 0.0 < rows[-1]["cpu_s"] and rows[-1]["lr"] <= cfg.lr


def test_the_huber_phase_under_a_budget_is_the_papers_share_of_the_first_plan_rounded_up():
    assert nll_start_epoch(10, 100, None) == 10  # no budget: the configured epoch
    # the paper's 10 % of 11-16 planned epochs is two Huber epochs, where rounding to nearest gave 1 or 2
    assert [nll_start_epoch(10, 100, n) for n in (4, 11, 13, 15, 16, 21)] == [1, 2, 2, 2, 2, 3]
    assert nll_start_epoch(10, 100, 10) == 1  # an exact share is not rounded past
    assert nll_start_epoch(0, 100, 13) == 0  # no Huber phase asked: none given
    assert nll_start_epoch(10, 10, 3) == 3  # all Huber: never more epochs than planned


def test_a_regression_run_records_its_phases_and_keeps_the_switch_of_its_first_plan(tmp_path):
    """Under a budget the switch comes from the first plan and stays put while the plan is re-made; every epoch
    says which loss it trained on; the checkpoint records the switch. Without a budget it is nll_start_epoch."""
    flights, val = [make_flight(i, duration=6.0) for i in range(2)], [make_flight(9, duration=4.0)]
    cfg = TrainConfig(model=TINY, variant="reg", stride=4, epochs=5, nll_start_epoch=2, progress=False)
    rows = [h.loss_kind for h in train(cfg, flights, val, tmp_path / "epochs").history]
    assert rows == ["huber", "huber", "nll", "nll", "nll"]
    budget = TrainConfig(model=TINY, variant="reg", stride=4, epochs=40, nll_start_epoch=10, progress=False,
                         time_budget=4.0 / 60.0)  # fmt: skip
    res = train(budget, flights, val, tmp_path / "budget")
    switch = nll_start_epoch(10, 40, res.history[0].planned_epochs)
    assert [h.loss_kind for h in res.history] == ["nll" if h.epoch >= switch else "huber" for h in res.history]
    assert read_checkpoint(res.last_path)["budget"]["nll_start_epoch"] == switch
    assert all(h.loss_kind == "" for h in train(TrainConfig(model=TINY, stride=8, epochs=1, progress=False),
                                                  flights, val, tmp_path / "bins").history)  # fmt: skip


def test_patience_stops_early(tmp_path):
    flights = [make_flight(1, duration=6.0)]
    cfg = TrainConfig(model=TINY, stride=10, epochs=30, lr=0.0, progress=False, patience=2)  # lr 0: never improves
    res = train(cfg, flights, flights, tmp_path)
    assert res.best_epoch == 0 and len(res.history) == 3


def _small_data_schedule() -> dict:
    keep = ("lr_schedule", "warmup", "min_lr_ratio", "rotate_windows", "best_metric")
    return {k: v for k, v in RECIPES["small-data"].items() if k in keep} | {"lr": 3e-3}


def test_a_cpu_budget_counts_compute_not_waiting():
    """``clock="cpu"`` counts this process's CPU seconds: time spent waiting (here asleep; on a shared machine,
    descheduled) does not use the budget, while on the wall clock it does."""
    wall = BudgetPlanner(0.3, 50, start=time.perf_counter(), clock="wall")
    cpu = BudgetPlanner(0.3, 50, start=time.process_time(), clock="cpu")
    wall.epoch_started()
    cpu.epoch_started()
    time.sleep(0.4)
    wall.epoch_ended()
    cpu.epoch_ended()
    assert wall.over() and not cpu.over()
    assert wall.epoch_s[0] >= 0.4 > 0.2 > cpu.epoch_s[0]
    assert cpu.plan(1, estimate_s=0.01) > 1 and wall.plan(1, estimate_s=0.01) == 1  # remaining time, per clock
