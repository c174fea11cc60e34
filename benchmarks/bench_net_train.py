"""Training throughput (windows/s): optimised loop vs a straightforward implementation, same run.

* optimised: :func:`velobins_net.train.train_epoch`: one vectorised gather per batch from the
  contiguous window array, last-token-only final transformer layer.
* straightforward: ``torch.utils.data.DataLoader`` over per-window ``__getitem__`` with default
  collation, and every token through every layer.

Both train G+H^B (N=512, batch 128, Adam 3e-4) on the same synthetic flights, 1 thread.
Target: optimised ≥ 2× straightforward. Run: .venv/bin/python benchmarks/bench_net_train.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch
from torch.utils.data import DataLoader

from velobins_net.bins import BinGrid, velocity_range_from
from velobins_net.config import ModelConfig
from velobins_net.data import WindowDataset
from velobins_net.losses import variant_loss
from velobins_net.model import VeloBinsNet
from velobins_net.train import TrainConfig, epoch_batches, resolve_model_config, train_epoch
from velobins_net.variants import parse_variant

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "velobins_net" / "test"))
from synthetic import make_flight

BATCHES = 20
BATCH = 128


def main() -> None:
    torch.set_num_threads(1)
    variant = parse_variant("G+H^B")
    seqs = [make_flight(i, duration=30.0) for i in range(3)]
    ds = WindowDataset(seqs, ModelConfig(), stride=1)
    r = velocity_range_from([ds.targets.numpy()])
    mcfg = resolve_model_config(TrainConfig(), variant, r)
    grid = BinGrid(mcfg.num_bins, mcfg.velocity_range)
    dev = torch.device("cpu")

    torch.manual_seed(0)
    fast = VeloBinsNet(mcfg)
    opt = torch.optim.Adam(fast.parameters(), lr=3e-4)
    batches = epoch_batches(len(ds), BATCH, 0, 0)[:BATCHES]
    train_epoch(fast, fast, ds, batches[:2], opt, variant, grid, False, dev)  # warm-up
    t0 = time.perf_counter()
    train_epoch(fast, fast, ds, batches, opt, variant, grid, False, dev)
    fast_rate = BATCHES * BATCH / (time.perf_counter() - t0)

    torch.manual_seed(0)
    slow = VeloBinsNet(mcfg).train()
    opt = torch.optim.Adam(slow.parameters(), lr=3e-4)
    loader = DataLoader(ds, batch_size=BATCH, shuffle=True, generator=torch.Generator().manual_seed(0))
    it = iter(loader)
    t0 = None
    for i in range(BATCHES + 2):
        if i == 2:
            t0 = time.perf_counter()
        x, y = next(it)
        out = slow(x, last_token_only=False, use_cache=False)
        loss, _ = variant_loss(variant, out, y, grid, slow.bins.centres)
        opt.zero_grad()
        loss.backward()
        opt.step()
    slow_rate = BATCHES * BATCH / (time.perf_counter() - t0)

    print(f"training throughput, G+H^B, N=512, batch {BATCH}, {BATCHES} batches, 1 thread, {len(ds)} windows")
    print(f"{'implementation':50s} {'windows/s':>10s}")
    print(f"{'optimised (vectorised gather, last token)':50s} {fast_rate:10.0f}")
    print(f"{'straightforward (DataLoader, all tokens)':50s} {slow_rate:10.0f}")
    print(f"speed-up {fast_rate / slow_rate:.2f}x (target >= 2x)")


if __name__ == "__main__":
    main()
