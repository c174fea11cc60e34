"""Items 32 and 33 of README.md: ``velobins train`` with weight decay or dropout, which the network does not have.

Not product options: the study tried AdamW's decoupled weight decay at 0.1 and 1.0 (item 32), and dropout on the
encoder's last-step feature at 0.1 and 0.3, residual dropout at 0.1, dropout on the convolutions at 0.1 and on the
attention weights at 0.1 (item 33), on ``n8``; none of them is the lever the recipe lacks.
In this process the script swaps what ``velobins_net.train`` calls, and runs the ``velobins train`` command line
unchanged otherwise (ensemble members included):

* ``--weight-decay WD``: :func:`velobins_net.train.make_optimizer` becomes
  ``torch.optim.AdamW(params, lr, weight_decay=WD)`` in place of the paper's Adam.
* ``--dropout P``: every model that :func:`velobins_net.train.build_model` builds gets a forward hook on its encoder
  that applies ``F.dropout(h, P)`` to the feature h every head reads, in training mode only. The hook adds no
  parameter, so the checkpoint is the plain network and ``evaluate`` and ``calibrate`` read it as any other.
* ``--residual-dropout P``: the same models drop each feature of every transformer layer's attention and FFN
  outputs with probability ``P`` in training, before each is added to the residual stream (the original
  Transformer's residual dropout); no parameter either.
* ``--conv-dropout P``: the same models drop each activation of the encoder's two convolutions (per modality, then
  mixing) with probability ``P`` in training, before the next convolution and before the token projection.
* ``--attention-dropout P``: the same models drop each attention weight softmax(q kᵀ/√d_h) with probability ``P``
  in training (BERT's attention dropout). Training then takes the attention's plain branch, without its fast paths.

Usage:

    python regularise_train.py [--weight-decay WD] [--dropout P] [--residual-dropout P] [--conv-dropout P] \\
        [--attention-dropout P] <velobins train arguments...>
    python regularise_train.py --dropout 0.3 --dataset nanobench --data runs/recipe29/subsets/n8 \\
        --val-split flights --variant reg --recipe paper --members 1 --time-budget 5 --budget-clock cpu \\
        --seed 0 --out runs/do/reg_s0
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable, Iterable

import torch
import torch.nn.functional as F
from torch import nn

import velobins_net.train as train_module
from velobins_net.encoder import Encoder


def fraction(text: str) -> float:
    """A dropout probability in [0, 1), for argparse."""
    value = float(text)
    if not 0.0 <= value < 1.0:
        raise argparse.ArgumentTypeError(f"must be in [0, 1), got {value}")
    return value


def non_negative(text: str) -> float:
    """A weight decay, for argparse: AdamW refuses a negative one with a traceback, and an infinite one ruins the
    weights silently."""
    value = float(text)
    if not 0.0 <= value < math.inf:
        raise argparse.ArgumentTypeError(f"must be a finite number of at least 0, got {value}")
    return value


def with_weight_decay(decay: float) -> Callable[[Iterable[nn.Parameter], float], torch.optim.Optimizer]:
    """``make_optimizer`` with AdamW's decoupled weight decay ``decay``."""

    def adamw(params: Iterable[nn.Parameter], lr: float) -> torch.optim.Optimizer:
        print(f"regularise_train: AdamW, weight_decay {decay}", file=sys.stderr)
        return torch.optim.AdamW(params, lr=lr, weight_decay=decay, fused=True)

    return adamw


def encoder_of(model: nn.Module, option: str) -> Encoder:
    """The VeloBins encoder of ``model``; a Table I baseline has none, which ends the run with one line and exit 2."""
    encoder = getattr(model, "encoder", None)
    if not isinstance(encoder, Encoder):
        print(
            f"regularise_train: error: {option} needs a VeloBins network, not {type(model).__name__}", file=sys.stderr
        )
        raise SystemExit(2)
    return encoder


def dropout_hook(p: float) -> Callable[[nn.Module, tuple[torch.Tensor, ...], torch.Tensor], torch.Tensor]:
    """A forward hook that drops each feature of its module's output with probability ``p`` in training."""

    def hook(module: nn.Module, _inputs: tuple[torch.Tensor, ...], output: torch.Tensor) -> torch.Tensor:
        return F.dropout(output, p, training=module.training)

    return hook


def with_dropout(p: float, build: Callable[..., nn.Module]) -> Callable[..., nn.Module]:
    """``build_model`` whose models drop each feature of the encoder's output with probability ``p`` in training."""

    def built(cfg: object) -> nn.Module:
        model = build(cfg)
        encoder_of(model, "--dropout").register_forward_hook(dropout_hook(p))
        print(f"regularise_train: dropout {p} on the encoder's output", file=sys.stderr)
        return model

    return built


def with_residual_dropout(p: float, build: Callable[..., nn.Module]) -> Callable[..., nn.Module]:
    """``build_model`` whose transformer layers drop each feature of both sublayers' outputs (attention and FFN)
    with probability ``p`` in training, before the residual add: the original Transformer's residual dropout."""

    def dropped_attention(layer: nn.Module) -> Callable[..., torch.Tensor]:
        attention = layer.attention  # wrapped whole: its one-query fast path skips the output projection module

        def attend(y: torch.Tensor, last_only: bool = False) -> torch.Tensor:
            return F.dropout(attention(y, last_only), p, training=layer.training)

        return attend

    def built(cfg: object) -> nn.Module:
        model = build(cfg)
        layers = encoder_of(model, "--residual-dropout").layers
        for layer in layers:
            layer.ff2.register_forward_hook(dropout_hook(p))
            layer.attention = dropped_attention(layer)
        print(f"regularise_train: residual dropout {p} in {len(layers)} layers", file=sys.stderr)
        return model

    return built


def with_conv_dropout(p: float, build: Callable[..., nn.Module]) -> Callable[..., nn.Module]:
    """``build_model`` whose encoders drop each activation of both convolutions (per modality, then mixing) with
    probability ``p`` in training: the mixing convolution's input and the token projection's input."""

    def pre_hook(module: nn.Module, inputs: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
        return (F.dropout(inputs[0], p, training=module.training),)

    def dropped_mixing(encoder: Encoder) -> Callable[[torch.Tensor], torch.Tensor]:
        mixing = encoder.mixing_conv  # a method (its fast path folds the weights), so wrapped, not hooked

        def mix(z: torch.Tensor) -> torch.Tensor:
            return mixing(F.dropout(z, p, training=encoder.training))

        return mix

    def built(cfg: object) -> nn.Module:
        model = build(cfg)
        encoder = encoder_of(model, "--conv-dropout")
        encoder.mixing_conv = dropped_mixing(encoder)
        encoder.proj.register_forward_pre_hook(pre_hook)
        print(f"regularise_train: dropout {p} on both convolutions' outputs", file=sys.stderr)
        return model

    return built


def with_attention_dropout(p: float, build: Callable[..., nn.Module]) -> Callable[..., nn.Module]:
    """``build_model`` whose transformer layers drop each attention weight with probability ``p`` in training (the
    weights are rescaled by 1/(1 − p), as in the original Transformer and BERT); the output in eval is unchanged."""

    def dropped_attention(layer: nn.Module) -> Callable[..., torch.Tensor]:
        attention = layer.attention  # eval keeps the layer's own attention, fast paths included

        def attend(y: torch.Tensor, last_only: bool = False) -> torch.Tensor:
            if not layer.training:
                return attention(y, last_only)
            # the plain branch of TransformerLayer.attention with dropout on softmax(q kᵀ/√d_h): its fast paths
            # (the folded last query, the native kernel) have no dropout
            b, t, d = y.shape
            heads = layer.num_heads
            q, k, v = layer.qkv(y).view(b, t, 3, heads, d // heads).permute(2, 0, 3, 1, 4).unbind(0)
            if last_only:
                q = q[:, :, -1:]
            out = F.scaled_dot_product_attention(q, k, v, dropout_p=p)
            return layer.out(out.transpose(1, 2).reshape(b, -1, d))

        return attend

    def built(cfg: object) -> nn.Module:
        model = build(cfg)
        layers = encoder_of(model, "--attention-dropout").layers
        for layer in layers:
            layer.attention = dropped_attention(layer)
        print(f"regularise_train: attention dropout {p} in {len(layers)} layers", file=sys.stderr)
        return model

    return built


def main(argv: list[str]) -> int:
    """Run ``velobins train`` on the arguments this script does not know, with the regularisers it does."""
    parser = argparse.ArgumentParser(
        prog="regularise_train.py", description=__doc__.splitlines()[0], allow_abbrev=False
    )
    parser.add_argument("--weight-decay", type=non_negative, default=None, metavar="WD", help="AdamW weight decay")
    parser.add_argument("--dropout", type=fraction, default=None, metavar="P", help="dropout on the encoder's output")
    parser.add_argument(
        "--residual-dropout", type=fraction, default=None, metavar="P", help="dropout on each sublayer's output"
    )
    parser.add_argument(
        "--conv-dropout", type=fraction, default=None, metavar="P", help="dropout on both convolutions' outputs"
    )
    parser.add_argument(
        "--attention-dropout", type=fraction, default=None, metavar="P", help="dropout on the attention weights"
    )
    args, rest = parser.parse_known_args(argv)
    if args.weight_decay is not None:
        train_module.make_optimizer = with_weight_decay(args.weight_decay)
    if args.dropout is not None:
        train_module.build_model = with_dropout(args.dropout, train_module.build_model)
    if args.residual_dropout is not None:
        train_module.build_model = with_residual_dropout(args.residual_dropout, train_module.build_model)
    if args.conv_dropout is not None:
        train_module.build_model = with_conv_dropout(args.conv_dropout, train_module.build_model)
    if args.attention_dropout is not None:
        train_module.build_model = with_attention_dropout(args.attention_dropout, train_module.build_model)
    from velobins_eval.cli import main as cli_main

    return cli_main(["train", *rest])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
