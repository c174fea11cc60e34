"""Pre-norm transformer layer of the encoder (§III-B): self-attention, then a feed-forward network.

As nanoGPT's ``Block`` without the causal mask: x + Attn(LN1(x)), then + FFN(LN2(·)), with multi-head
attention softmax(q kᵀ/√d_h) v and the exact GELU. The encoder uses only the last token of its last
layer (the feature h), so a layer can compute that token's output alone (``last_only``), as nanoGPT
applies its head to the last position only at inference.

Fast paths, each a commented branch beside the plain computation it replaces (on with the
accelerator switch :func:`velobins_net.accel.enabled`, held to the plain branch by the tests):

* every token: the native small-head attention kernel (:mod:`velobins_net.accel.native`);
* the last token only: the same attention with its weights folded per head
  (:meth:`TransformerLayer.fold_last_query`), so no key or value is projected;
* the layer's linears are :class:`velobins_net.accel.Linear`, ``nn.Linear`` on oneDNN's matmul for
  training-size inputs.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from . import accel


class LastQueryWeights(NamedTuple):
    """The last-token attention folded per head (:meth:`TransformerLayer.fold_last_query`).

    Attributes:
        qk_weight: (d, H·d) per-head W_q,hᵀ W_k,h / √d_h, side by side.
        qk_bias: (H·d,) per-head b_q,h W_k,h / √d_h.
        vo_weight: (H·d, d) per-head W_v,hᵀ W_o,hᵀ, stacked.
        vo_bias: (d,) b_v W_oᵀ + b_o.
    """

    qk_weight: torch.Tensor
    qk_bias: torch.Tensor
    vo_weight: torch.Tensor
    vo_bias: torch.Tensor


class TransformerLayer(nn.Module):
    """Pre-norm transformer encoder layer of width d with ``num_heads`` heads and an FFN of width ``ffn_dim``."""

    def __init__(self, d_model: int, num_heads: int, ffn_dim: int):
        super().__init__()
        self.d_model = d_model
        self.num_heads = num_heads
        self.norm1 = nn.LayerNorm(d_model)
        self.qkv = accel.Linear(d_model, 3 * d_model)  # q, k, v of every head, packed
        self.out = accel.Linear(d_model, d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.ff1 = accel.Linear(d_model, ffn_dim)
        self.ff2 = accel.Linear(ffn_dim, d_model)
        self._cache: accel.DerivedCache[LastQueryWeights] = accel.DerivedCache()

    def forward(self, x: torch.Tensor, last_only: bool = False) -> torch.Tensor:
        """x (B, T, d) → (B, T, d); with ``last_only`` the output of the last token only, (B, 1, d)."""
        x = (x[:, -1:] if last_only else x) + self.attention(self.norm1(x), last_only)
        return x + self.ff2(accel.gelu(self.ff1(self.norm2(x))))

    def attention(self, y: torch.Tensor, last_only: bool = False) -> torch.Tensor:
        """Multi-head self-attention of the normalised tokens y (B, T, d), with its output projection.

        Every token attends to every token: softmax(q_h k_hᵀ/√d_h) v_h per head h, the heads side by
        side, projected → (B, T, d). With ``last_only`` only the last token's query: (B, 1, d).
        """
        b, t, d = y.shape
        heads = self.num_heads
        if last_only and accel.enabled():  # fast path: one query needs no key or value (see fold_last_query)
            w = self._cache.derive((self,), "last query", self.fold_last_query)
            q = torch.addmm(w.qk_bias, y[:, -1], w.qk_weight).view(b, heads, d)  # q_h W_k,h / √d_h per head
            p = torch.softmax(torch.bmm(q, y.transpose(1, 2)), dim=-1)  # (B, H, T)
            return torch.addmm(w.vo_bias, torch.bmm(p, y).reshape(b, heads * d), w.vo_weight).view(b, 1, d)
        qkv = self.qkv(y)
        if not last_only and accel.native_applies(qkv, heads):  # fast path: native kernel for small heads
            return self.out(accel.native_attention(qkv, heads))
        q, k, v = qkv.view(b, t, 3, heads, d // heads).permute(2, 0, 3, 1, 4).unbind(0)  # each (B, H, T, d_h)
        if last_only:
            q = q[:, :, -1:]
        return self.out(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, -1, d))

    def fold_last_query(self) -> LastQueryWeights:
        """The attention of one query folded into per-head (d × d) maps: no key or value is projected.

        With y = LN1(x) and one query per head, q_h = y_T W_q,hᵀ + b_q,h, the scores are
        q_h·k_t,h/√d_h = y_t·(q_h W_k,h)/√d_h + q_h·b_k,h/√d_h; the last term is the same for every t
        and cancels in the softmax. With Σ_t p_t = 1 the head's output is
        Σ_t p_t v_t,h = (Σ_t p_t y_t) W_v,hᵀ + b_v,h, and the output projection is linear, so

            q'_h = y_T A_h + c_h           A_h = W_q,hᵀ W_k,h/√d_h,   c_h = b_q,h W_k,h/√d_h
            p_h = softmax(q'_h · y_t)      (over t)
            out = Σ_h (p_h y) M_h + m       M_h = W_v,hᵀ W_o,hᵀ,       m = b_v W_oᵀ + b_o

        — the layer's attention for the last token exactly, at a fraction of its cost. Differentiable
        (training folds every step); gradient-free calls reuse the fold until a parameter changes.
        """
        d, h = self.d_model, self.num_heads
        e = d // h
        w_q, w_k, w_v = self.qkv.weight.view(3, h, e, d).unbind(0)  # per head (H, d_h, d)
        b_q, _, b_v = self.qkv.bias.view(3, h, 1, e).unbind(0)
        w_o = self.out.weight.view(d, h, e).permute(1, 2, 0)  # per head W_o,hᵀ (H, d_h, d)
        return LastQueryWeights(
            qk_weight=(w_q.transpose(1, 2) @ w_k).permute(1, 0, 2).reshape(d, h * d) * e**-0.5,  # [i, (h, j)]
            qk_bias=(b_q @ w_k).reshape(h * d) * e**-0.5,
            vo_weight=(w_v.transpose(1, 2) @ w_o).reshape(h * d, d),
            vo_bias=self.out(b_v.reshape(d)),
        )
