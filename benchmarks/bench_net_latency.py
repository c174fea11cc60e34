"""Single-thread forward latency at batch 1: VeloBins (optimised) vs regression vs straightforward.

* VeloBins: eval mode, precomputed bin encodings, last token only in the last layer.
* Regression: the AI-IO baseline heads on the same (optimised) encoder.
* Straightforward VeloBins: all tokens in every layer, bin encodings recomputed per forward.

Paper (Orin NX, one A78AE thread): 4.73 ms vs 4.36 ms (+9 %). Targets here: bins overhead
≤ 5 % vs regression and ≤ 0.35 ms per forward. Run: .venv/bin/python benchmarks/bench_net_latency.py
"""

from __future__ import annotations

import time

import torch

from velobins_net.config import ModelConfig
from velobins_net.model import VeloBinsNet

REPEATS = 7
ITERS = 300


def _time(fn, x: torch.Tensor) -> float:
    """Median over REPEATS of the mean ms per call over ITERS calls."""
    for _ in range(50):
        fn(x)
    runs = []
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        for _ in range(ITERS):
            fn(x)
        runs.append((time.perf_counter() - t0) / ITERS * 1e3)
    return sorted(runs)[len(runs) // 2]


def main() -> None:
    torch.set_num_threads(1)
    torch.manual_seed(0)
    bins = VeloBinsNet(ModelConfig(num_bins=512)).eval()
    reg = VeloBinsNet(ModelConfig(head="reg", uncertainty="C")).eval()
    x = torch.randn(1, 100, 10)
    cases = {}
    with torch.inference_mode():
        cases["VeloBins (precomputed bins, last token)"] = _time(lambda z: bins(z), x)
        cases["Regression (AI-IO heads, last token)"] = _time(lambda z: reg(z), x)
        cases["VeloBins straightforward (all tokens, bins recomputed)"] = _time(
            lambda z: bins(z, last_token_only=False, use_cache=False), x
        )
    base = cases["Regression (AI-IO heads, last token)"]
    print(f"forward latency, batch 1, 1 thread, N=512, window 100x10 (median of {REPEATS}x{ITERS})")
    print(f"{'model':58s} {'ms':>8s} {'vs reg':>8s}")
    for name, ms in cases.items():
        print(f"{name:58s} {ms:8.3f} {100 * (ms / base - 1):+7.1f}%")
    vb = cases["VeloBins (precomputed bins, last token)"]
    print(f"targets: overhead <= 5 % -> {100 * (vb / base - 1):+.1f} %; latency <= 0.35 ms -> {vb:.3f} ms")


if __name__ == "__main__":
    main()
