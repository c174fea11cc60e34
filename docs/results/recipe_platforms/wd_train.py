"""Item 32 of README.md: ``velobins train`` with AdamW's decoupled weight decay in place of the paper's Adam.

Not a product option: the study tried weights 0.1 and 1.0 on ``n8``, and both cost both methods network AVE.
The script swaps :func:`velobins_net.train.make_optimizer` for ``torch.optim.AdamW(params, lr, weight_decay=WD)``
in this process and runs the ``velobins train`` command line unchanged otherwise (ensemble members included).
Usage:

    python wd_train.py WD <velobins train arguments...>
    python wd_train.py 1.0 --dataset nanobench --data runs/recipe29/subsets/n8 --val-split flights \\
        --variant reg --recipe paper --members 1 --time-budget 5 --budget-clock cpu --seed 0 --out runs/wd/reg_s0
"""

from __future__ import annotations

import sys
from collections.abc import Iterable

import torch

import velobins_net.train as train_module


def main(argv: list[str]) -> int:
    """Run ``velobins train argv[1:]`` with weight decay ``argv[0]``."""
    if not argv:
        print("usage: wd_train.py WD <velobins train arguments...>", file=sys.stderr)
        return 2
    try:
        decay = float(argv[0])
    except ValueError:
        print(f"wd_train: error: WD must be a number, got {argv[0]!r}", file=sys.stderr)
        return 2

    def adamw(params: Iterable[torch.nn.Parameter], lr: float) -> torch.optim.Optimizer:
        print(f"wd_train: AdamW, weight_decay {decay}", file=sys.stderr)
        return torch.optim.AdamW(params, lr=lr, weight_decay=decay, fused=True)

    train_module.make_optimizer = adamw
    from velobins_eval.cli import main as cli_main

    return cli_main(["train", *argv[1:]])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
