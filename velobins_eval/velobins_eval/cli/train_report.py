"""What ``velobins train`` prints of a finished run (one network, or each member of an ensemble): its epochs, its
budget, its best epoch."""

from __future__ import annotations

import argparse
import sys


def describe_init(init: dict) -> str:
    """One line on how a fine-tuned (or partly frozen) run started."""
    parts = [f"initialised from {init['source']} ({init['variant']})"] if init.get("source") else []
    if init["kept_fresh"]:
        parts.append(f"kept fresh (shapes differ): {', '.join(init['kept_fresh'])}")
    if init["frozen"]:
        parts.append(f"frozen: {len(init['frozen'])} parameter tensors")
    return "; ".join(parts)


def report(args: argparse.Namespace, cfg, result) -> int:
    """Print a finished run's epochs, its budget and its best epoch; the exit status (1: no epoch scored)."""
    if result.init is not None:
        print(describe_init(result.init))
    if result.history:
        phases = any(h.loss_kind for h in result.history)  # the regression baseline's Huber, then NLL
        head = f"{'epoch':>5} {'loss':>9} {'val AVE':>8} {'val NLL':>8} {'NEES in':>7} {'lr':>8} {'win/s':>7}"
        print(head + (f" {'phase':>6}" if phases else ""))
        for h in result.history:
            print(
                f"{h.epoch:>5} {h.train_loss:>9.4f} {h.val_ave:>8.4f} {h.val_nll:>8.3f} "
                f"{100 * h.val_nees_share:>6.0f}% {h.lr:>8.2e} {h.windows_per_s:>7.0f}"
                + (f" {h.loss_kind:>6}" if phases else "")
            )
        if cfg.time_budget:
            last = result.history[-1]
            print(
                f"time budget {cfg.time_budget:g} min ({cfg.budget_clock} clock): ran {len(result.history)} epochs "
                f"in {last.elapsed_s:.0f} s wall, {last.cpu_s:.0f} s CPU"
            )
    if result.best_epoch < 0:
        last = result.history[-1].epoch if result.history else None
        print(
            f"velobins train: error: no epoch gave a finite validation {args.best_metric}: best.pt was not "
            f"written ({result.last_path} holds epoch {last}); check the data with 'velobins check'",
            file=sys.stderr,
        )
        return 1
    print(f"best: epoch {result.best_epoch}, val {args.best_metric} {result.best_value:.4f} -> {result.best_path}")
    return 0
