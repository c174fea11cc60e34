"""Training throughput (windows/s): optimised loop vs a straightforward implementation, same run.

* optimised: :func:`velobins_net.train.train_epoch` as :func:`velobins_net.train.train` runs it:
  one vectorised gather per batch from the contiguous window array, the model's forward with its
  fast paths (block-diagonal branch convolutions, a last-token-only final transformer layer with
  its attention folded), the native small-head attention kernel
  (:mod:`velobins_net.accel.native`) and oneDNN linears (:mod:`velobins_net.accel.onednn_linear`) in
  the all-token layer (``VELOBINS_NATIVE_KERNELS=0`` measures without both), the active-set label
  solver (:func:`velobins_net.labels.error_conditioned_labels`) and fused Adam.
* straightforward: ``torch.utils.data.DataLoader`` over per-window ``__getitem__`` with default
  collation, every token through every layer module by module (``reference_forward`` of
  ``velobins_net/test/reference.py``), the plain label solver (``reference_error_conditioned_labels``
  there: all rows iterate until the last converges) and default Adam. This is the
  pre-optimisation implementation, unchanged; it lives beside the tests, which use it as oracle.

The label, attention and FFN-linear rows time both label solvers, the native and PyTorch attention
kernels, and oneDNN's and PyTorch's linear (forward + backward of the all-token layer's ops at
batch 128), to show how much of the speed-up each carries.

Both train G+H^B (N=512, batch 128, Adam 3e-4) on the same synthetic flights, 1 thread, taking
turns batch by batch (fair under load from other processes). Besides the overall ratio, the
per-batch ratio (straightforward ÷ optimised of the same turn) is printed as median and
interquartile range, so a reader sees how much of the figure is noise on a shared machine.
Like ``velobins train`` on CPU, the process first keeps freed memory for reuse
(:func:`velobins_net.accel.reuse_freed_memory`); that setting is process-wide, so the
straightforward baseline in the same process gets it too. ``--keep-default-malloc`` leaves glibc's
defaults, to measure what the setting itself is worth.
Target: optimised ≥ 2× straightforward. Run: .venv/bin/python benchmarks/bench_net_train.py [--batches 20]
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

from velobins_net.accel import kernel_status, reuse_freed_memory
from velobins_net.accel.native import attention, native_applies, reference_attention
from velobins_net.accel.onednn_linear import linear, onednn_applies
from velobins_net.bins import BinGrid, velocity_range_from
from velobins_net.config import ModelConfig
from velobins_net.data import WindowDataset
from velobins_net.labels import error_conditioned_labels
from velobins_net.losses import variant_loss
from velobins_net.model import VeloBinsNet
from velobins_net.train import TrainConfig, epoch_batches, make_optimizer, resolve_model_config, train_epoch
from velobins_net.variants import parse_variant

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "velobins_net" / "test"))
from benchstats import cpu_name, quartiles
from reference import reference_error_conditioned_labels, reference_forward
from synthetic import make_flight

BATCH = 128
WARMUP = 2


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=20, help="timed batches of each implementation")
    parser.add_argument("--keep-default-malloc", action="store_true", help="do not call reuse_freed_memory()")
    args = parser.parse_args()
    batches_timed = args.batches
    malloc = "glibc defaults" if args.keep_default_malloc or not reuse_freed_memory() else "freed memory reused"
    torch.set_num_threads(1)
    variant = parse_variant("G+H^B")
    flights = [make_flight(i, duration=30.0) for i in range(3)]
    ds = WindowDataset(flights, ModelConfig(), stride=1)
    r = velocity_range_from([ds.targets.numpy()])
    mcfg = resolve_model_config(TrainConfig(), variant, r)
    grid = BinGrid(mcfg.num_bins, mcfg.velocity_range)
    dev = torch.device("cpu")

    torch.manual_seed(0)
    fast = VeloBinsNet(mcfg)
    fast_opt = make_optimizer(fast.parameters(), 3e-4)
    batches = epoch_batches(len(ds), BATCH, 0, 0)[: batches_timed + WARMUP]
    if len(batches) < batches_timed + WARMUP:
        raise SystemExit(f"--batches: at most {len(batches) - WARMUP} batches in the benchmark's flights")

    torch.manual_seed(0)
    slow = VeloBinsNet(mcfg).train()
    slow_opt = torch.optim.Adam(slow.parameters(), lr=3e-4)
    loader = DataLoader(ds, batch_size=BATCH, shuffle=True, generator=torch.Generator().manual_seed(0))
    it = iter(loader)

    def slow_step() -> None:
        x, y = next(it)
        out = reference_forward(slow, x)
        loss, _ = variant_loss(variant, out, y, grid, slow.bins.centres, label_fn=reference_error_conditioned_labels)
        slow_opt.zero_grad()
        loss.backward()
        slow_opt.step()

    # The two implementations take turns batch by batch, so load from other processes on this
    # shared machine hits both alike; the first WARMUP batches of each are not timed.
    fast_s = slow_s = 0.0
    faults = [0, 0]  # minor page faults: optimised, straightforward
    ratios: list[float] = []
    for i, idx in enumerate(batches):
        f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        t0 = time.perf_counter()
        train_epoch(fast, fast, ds, [idx], fast_opt, variant, grid, False, dev)
        t1 = time.perf_counter()
        f1 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        slow_step()
        t2 = time.perf_counter()
        f2 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        if i >= WARMUP:
            fast_s += t1 - t0
            slow_s += t2 - t1
            ratios.append((t2 - t1) / (t1 - t0))
            faults[0] += f1 - f0
            faults[1] += f2 - f1
    fast_rate = batches_timed * BATCH / fast_s
    slow_rate = batches_timed * BATCH / slow_s

    x, y = ds.gather(batches[0])
    with torch.no_grad():
        v_hat = VeloBinsNet(mcfg).train()(x).v
    label_ms = {}
    for name, fn in [("optimised", error_conditioned_labels), ("reference", reference_error_conditioned_labels)]:
        t0 = time.perf_counter()
        for _ in range(5):
            fn(v_hat, y, grid)
        label_ms[name] = (time.perf_counter() - t0) / 5 * 1e3

    attn_ms = attention_ms(mcfg)
    lin_ms = linear_ms(mcfg)

    print(f"training throughput, G+H^B, N=512, batch {BATCH}, {batches_timed} batches, 1 thread, {len(ds)} windows")
    print(f"machine: {cpu_name()}, torch {torch.__version__}, allocator: {malloc}")
    print(f"native kernels: {kernel_status()}")
    print(f"{'implementation':50s} {'windows/s':>10s}")
    print(f"{'optimised (vectorised gather, last token)':50s} {fast_rate:10.0f}")
    print(f"{'straightforward (DataLoader, all tokens)':50s} {slow_rate:10.0f}")
    lo, mid, hi = quartiles(ratios)
    verdict = "met" if fast_rate / slow_rate >= 2.0 else "NOT met"
    print(f"speed-up {fast_rate / slow_rate:.2f}x (target >= 2x: {verdict})")
    print(f"per-batch ratio: median {mid:.2f}x, IQR {lo:.2f} to {hi:.2f}")
    ms_fast, ms_slow = 1e3 * fast_s / batches_timed, 1e3 * slow_s / batches_timed
    print(f"per batch: optimised {ms_fast:.1f} ms, straightforward {ms_slow:.1f} ms")
    print(
        f"minor page faults per batch: optimised {faults[0] / batches_timed:.0f}, "
        f"straightforward {faults[1] / batches_timed:.0f}"
    )
    print(f"labels per batch: optimised {label_ms['optimised']:.1f} ms, reference {label_ms['reference']:.1f} ms")
    if attn_ms:
        print(
            f"attention fwd+bwd per batch: native {attn_ms['new']:.1f} ms, "
            f"PyTorch {attn_ms['old']:.1f} ms (medians of {KERNEL_ROUNDS} alternating rounds)"
        )
    if lin_ms:
        flop = 3 * 2 * BATCH * mcfg.window_len * mcfg.d_model * mcfg.ffn_dim  # forward + 2 backward products
        print(
            f"FFN linear {mcfg.d_model}->{mcfg.ffn_dim} fwd+bwd per batch: oneDNN {lin_ms['new']:.1f} ms "
            f"({flop / lin_ms['new'] / 1e6:.0f} GFLOP/s), F.linear {lin_ms['old']:.1f} ms "
            f"({flop / lin_ms['old'] / 1e6:.0f} GFLOP/s)"
        )


KERNEL_ROUNDS = 15


def paired_fwd_bwd_ms(
    new: Callable[[torch.Tensor], torch.Tensor], old: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor
) -> dict[str, float]:
    """Median forward + backward ms of two implementations of one op, alternating round by round."""
    grad = torch.randn_like(old(x))
    times: dict[str, list[float]] = {"new": [], "old": []}
    for i in range(KERNEL_ROUNDS + 1):
        for name, fn in [("new", new), ("old", old)]:
            xi = x.clone().requires_grad_()
            t0 = time.perf_counter()
            fn(xi).backward(grad)
            if i:  # the first round warms up
                times[name].append(1e3 * (time.perf_counter() - t0))
    return {name: quartiles(t)[1] for name, t in times.items()}


def attention_ms(mcfg: ModelConfig) -> dict[str, float]:
    """All-token attention: native ("new") vs PyTorch ("old"); {} when the native kernel is not in use."""
    heads = mcfg.num_heads
    qkv = torch.randn(BATCH, mcfg.window_len, 3 * mcfg.d_model)
    if not native_applies(qkv, heads):
        return {}
    return paired_fwd_bwd_ms(lambda x: attention(x, heads), lambda x: reference_attention(x, heads), qkv)


def linear_ms(mcfg: ModelConfig) -> dict[str, float]:
    """The all-token FFN's first linear: oneDNN ("new") vs F.linear ("old"); {} when oneDNN is not in use."""
    x = torch.randn(BATCH, mcfg.window_len, mcfg.d_model)
    weight = torch.randn(mcfg.ffn_dim, mcfg.d_model, requires_grad=True)
    bias = torch.randn(mcfg.ffn_dim, requires_grad=True)
    if not onednn_applies(x, weight):
        return {}
    return paired_fwd_bwd_ms(lambda t: linear(t, weight, bias), lambda t: F.linear(t, weight, bias), x)


if __name__ == "__main__":
    main()
