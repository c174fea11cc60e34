"""Pre-norm transformer layer of the encoder (§III-B), on every token or on the last token only.

A layer is an :class:`nn.Module` holding its parameters; its computation is a function of
weight records derived from them (:meth:`TransformerLayer.weights`,
:meth:`TransformerLayer.last_token_weights`), so that gradient-free calls can run on cached,
folded weights while training runs the very same functions on weights rebuilt every step.

* :func:`all_tokens`: the layer on every token, x + Attn(LN1(x)), then + FFN(LN2(·)).
* :func:`last_token`: the same layer's output for the last token only — all the encoder needs
  of its last layer, since h is the last-step feature. With one query per head the attention
  folds into per-head (d × d) matrices, so no key or value is projected (derivation below).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from . import accel


@dataclass(frozen=True)
class LayerWeights:
    """One pre-norm transformer layer as its module holds it (packed q, k, v projection)."""

    ln1_w: torch.Tensor
    ln1_b: torch.Tensor
    qkv_w: torch.Tensor
    qkv_b: torch.Tensor
    out_w: torch.Tensor
    out_b: torch.Tensor
    ln2_w: torch.Tensor
    ln2_b: torch.Tensor
    ff1_w: torch.Tensor
    ff1_b: torch.Tensor
    ff2_w: torch.Tensor
    ff2_b: torch.Tensor


@dataclass(frozen=True)
class LastTokenWeights:
    """The layer for the last token only, with its attention folded (see :func:`last_token`).

    Attributes:
        ln1_w, ln1_b: first LayerNorm.
        qk_w: (d, H·d) per-head W_q,hᵀ W_k,h / √d_h, side by side.
        qk_b: (H·d,) per-head b_q,h W_k,h / √d_h.
        vo_w: (H·d, d) per-head W_v,hᵀ W_o,hᵀ, stacked.
        vo_b: (d,) b_v W_oᵀ + b_o.
        ln2_w, ln2_b, ff1_w, ff1_b, ff2_w, ff2_b: LayerNorm and feed-forward, as in the module.
    """

    ln1_w: torch.Tensor
    ln1_b: torch.Tensor
    qk_w: torch.Tensor
    qk_b: torch.Tensor
    vo_w: torch.Tensor
    vo_b: torch.Tensor
    ln2_w: torch.Tensor
    ln2_b: torch.Tensor
    ff1_w: torch.Tensor
    ff1_b: torch.Tensor
    ff2_w: torch.Tensor
    ff2_b: torch.Tensor


class TransformerLayer(nn.Module):
    """Pre-norm transformer encoder layer: parameters, and the weight records the functions below run on."""

    def __init__(self, d_model: int, num_heads: int, ffn_dim: int):
        super().__init__()
        self.d_model = d_model
        self.num_heads = num_heads
        self.norm1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.ff1 = nn.Linear(d_model, ffn_dim)
        self.ff2 = nn.Linear(ffn_dim, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (B, T, d) → (B, T, d), every token (:func:`all_tokens`)."""
        return all_tokens(x, self.weights(), self.num_heads, self.d_model)

    def weights(self) -> LayerWeights:
        """The parameters as a :class:`LayerWeights` record (no copy)."""
        return LayerWeights(
            *(self.norm1.weight, self.norm1.bias, self.qkv.weight, self.qkv.bias, self.out.weight, self.out.bias),
            *(self.norm2.weight, self.norm2.bias, self.ff1.weight, self.ff1.bias, self.ff2.weight, self.ff2.bias),
        )

    def last_token_weights(self) -> LastTokenWeights:
        """Fold q·k and v·out of the packed projections per head (see :func:`last_token`); differentiable."""
        d, h = self.d_model, self.num_heads
        hd = d // h
        w, b = self.qkv.weight, self.qkv.bias
        wq, wk, wv = w[:d].view(h, hd, d), w[d : 2 * d].view(h, hd, d), w[2 * d :].view(h, hd, d)
        bq, bv = b[:d].view(h, 1, hd), b[2 * d :]
        scale = hd**-0.5
        qk_w = (wq.transpose(1, 2) @ wk).permute(1, 0, 2).reshape(d, h * d) * scale  # [i, (h, j)]
        qk_b = (bq @ wk).reshape(h * d) * scale
        wo = self.out.weight.view(d, h, hd).permute(1, 2, 0)  # (h, hd, d): W_o,hᵀ
        vo_w = (wv.transpose(1, 2) @ wo).reshape(h * d, d)  # (h, d, d): W_v,hᵀ W_o,hᵀ
        vo_b = bv @ self.out.weight.t() + self.out.bias
        return LastTokenWeights(
            *(self.norm1.weight, self.norm1.bias, qk_w, qk_b, vo_w, vo_b),
            *(self.norm2.weight, self.norm2.bias, self.ff1.weight, self.ff1.bias, self.ff2.weight, self.ff2.bias),
        )


def feed_forward(
    x: torch.Tensor, w: LayerWeights | LastTokenWeights, d: int, lin: Callable[..., torch.Tensor] = F.linear
) -> torch.Tensor:
    """x + FFN(LN2(x)), the second half of a pre-norm layer (exact GELU); d a plain int (static for exporters)."""
    y = F.layer_norm(x, (d,), w.ln2_w, w.ln2_b)
    return x + lin(accel.gelu(lin(y, w.ff1_w, w.ff1_b)), w.ff2_w, w.ff2_b)


def all_tokens(x: torch.Tensor, w: LayerWeights, heads: int, d: int) -> torch.Tensor:
    """The layer on every token; x (B, T, d) → (B, T, d).

    Attention of the packed projection LN1(x)·W_qkvᵀ: softmax(q kᵀ/√d_h) v per head, then the
    output projection; :func:`velobins_net.accel.attention` and :func:`velobins_net.accel.linear`
    are ``F.scaled_dot_product_attention`` and ``F.linear`` where no faster kernel applies.
    """
    y = F.layer_norm(x, (d,), w.ln1_w, w.ln1_b)
    a = accel.attention(accel.linear(y, w.qkv_w, w.qkv_b), heads)
    return feed_forward(x + accel.linear(a, w.out_w, w.out_b), w, d, accel.linear)


def last_token(x: torch.Tensor, w: LastTokenWeights, heads: int, d: int) -> torch.Tensor:
    """The layer's output for the last token only; x (B, T, d) → (B, d).

    With y = LN1(x) and one query per head, q_h = y_T W_q,hᵀ + b_q,h, the scores are
    q_h·k_t,h/√d_h = y_t·(q_h W_k,h)/√d_h + q_h·b_k,h/√d_h; the last term is the same for every t
    and cancels in the softmax. The attention output, with Σ_t p_t = 1, is
    Σ_t p_t v_t,h = (Σ_t p_t y_t) W_v,hᵀ + b_v,h, and the output projection is linear, so

        q'_h = y_T A_h + c_h           A_h = W_q,hᵀ W_k,h/√d_h,   c_h = b_q,h W_k,h/√d_h
        p_h = softmax(q'_h · y_t)      (over t)
        out = Σ_h (p_h y) M_h + m       M_h = W_v,hᵀ W_o,hᵀ,       m = b_v W_oᵀ + b_o

    — the layer's attention exactly, without projecting any key or value. Then the feed-forward
    half as usual.
    """
    b = x.shape[0]
    y = F.layer_norm(x, (d,), w.ln1_w, w.ln1_b)
    q = torch.addmm(w.qk_b, y[:, -1], w.qk_w).view(b, heads, d)  # (B, H, d)
    p = torch.softmax(torch.bmm(q, y.transpose(1, 2)), dim=-1)  # (B, H, T)
    ctx = torch.bmm(p, y).reshape(b, heads * d)  # (B, H·d)
    return feed_forward(x[:, -1] + torch.addmm(w.vo_b, ctx, w.vo_w), w, d)
