"""Fused, functional forward pass of the encoder and heads (same maths, fewer and cheaper ops).

The module path (:class:`velobins_net.encoder.Encoder` with ``last_token_only=False``) is the
plain reference: per-modality convolutions concatenated, a grouped mixing convolution, the
projection, and ``nn.Module`` calls per layer. This module computes the same function from
*fused weights* derived from those parameters:

* standardisation as one ``addcmul`` (x·(1/std) − mean/std), the ω² rotor feature as one ``where``;
* the three per-modality branch convolutions as ONE convolution with a block-diagonal weight
  (zero blocks contribute exact zeros), so no slicing of the input and no ``cat``;
* the grouped mixing convolution either kept grouped (large batches: fewest FLOPs) or as an
  equivalent dense block-diagonal convolution (small batches: the grouped kernel has a large
  fixed cost at batch 1);
* projection and time encoding in one ``baddbmm`` with the precomputed (time PE + bias);
* every-token attention on the packed projection by :func:`velobins_net.native.attention`
  (a native kernel for small heads on the CPU, PyTorch's otherwise: no q/k/v permute copies);
* the last layer for the last token only (§III-B "last-step feature"), with its single-query
  attention folded so that no key or value is ever projected (see :func:`_last_layer`);
* heads: every head's linear map on h in ONE matmul (bin queries θ_i(h), velocity, log σ), then
  one (3 × D)·(D × N) product of the per-axis queries with the cached bin features (eq:softmax),
  one softmax and two reductions for v̂ and σ̂² (eq:decode, eq:bin_variance) — at inference in one
  native call (:func:`velobins_net.native.bin_decode`). (Folding θ into the
  features, h·(W_iᵀFᵀ), was measured slower at batch 1: its (D_h × 3N) matrix misses the cache.)

Fused weights are a differentiable function of the parameters (:func:`fuse_encoder`), so
training uses the same code with weights rebuilt every step; in eval mode the owner caches them
(see ``Encoder.inference_weights``). Results equal the reference path to float rounding (tests
hold them to 1e-5 relative).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import torch
import torch.backends.mkldnn as mkldnn
import torch.nn.functional as F

from .native import attention, bin_decode
from .onednn_linear import linear

if TYPE_CHECKING:  # import cycle: encoder imports this module
    from .encoder import Encoder, TransformerLayer


@dataclass(frozen=True)
class LayerWeights:
    """One pre-norm transformer layer run on every token."""

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
class LastLayerWeights:
    """The last layer, run for the last token only, with its attention folded (see :func:`_last_layer`).

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


@dataclass(frozen=True)
class EncoderWeights:
    """Everything :func:`encode` needs, derived from an :class:`~velobins_net.encoder.Encoder`.

    Attributes:
        in_scale: (C,) 1/std of the input channels.
        in_shift: (C,) −mean/std.
        square_mask: (C,) bool, True on rotor channels fed as ω² (rpm), or None (pwm).
        conv_w: (3c, C, k) block-diagonal fusion of the acc / gyro / rotor branch convolutions.
        conv_b: (3c,) their biases.
        mix_w: mixing convolution weight, grouped (3c, c, k) or dense block-diagonal (3c, 3c, k).
        mix_b: (3c,) its bias.
        mix_groups: 3 for the grouped weight, 1 for the dense one.
        padding: 'same' padding of the convolutions.
        proj_wt: (3c, d) transposed projection weight.
        pe_bias: (T, d) time encoding plus projection bias.
        layers: every layer but the last (all tokens).
        last: the last layer (last token only), or None without transformer layers.
        norm_w: (d,) final LayerNorm weight.
        norm_b: (d,) final LayerNorm bias.
        num_heads: attention heads.
        d_model: transformer width d (a plain int, so exporters see a static LayerNorm shape).
    """

    in_scale: torch.Tensor
    in_shift: torch.Tensor
    square_mask: torch.Tensor | None
    conv_w: torch.Tensor
    conv_b: torch.Tensor
    mix_w: torch.Tensor
    mix_b: torch.Tensor
    mix_groups: int
    padding: int
    proj_wt: torch.Tensor
    pe_bias: torch.Tensor
    layers: tuple[LayerWeights, ...]
    last: LastLayerWeights | None
    norm_w: torch.Tensor
    norm_b: torch.Tensor
    num_heads: int
    d_model: int


_W = TypeVar("_W")


def _child(path: str, name: str | int) -> str:
    return f"{path}.{name}" if path else str(name)


def tensor_items(w: Any, path: str = "") -> Iterator[tuple[str, torch.Tensor]]:
    """(dotted path, tensor) of every tensor in nested fused-weight records (for export buffers)."""
    if isinstance(w, torch.Tensor):
        yield path, w
    elif isinstance(w, tuple):
        for i, item in enumerate(w):
            yield from tensor_items(item, _child(path, i))
    elif dataclasses.is_dataclass(w):
        for f in dataclasses.fields(w):
            yield from tensor_items(getattr(w, f.name), _child(path, f.name))


def map_tensors(w: _W, fn: Callable[[str, torch.Tensor], torch.Tensor], path: str = "") -> _W:
    """Copy of nested fused-weight records with every tensor t at path p replaced by fn(p, t)."""
    if isinstance(w, torch.Tensor):
        return fn(path, w)  # type: ignore[return-value]
    if isinstance(w, tuple):
        return tuple(map_tensors(item, fn, _child(path, i)) for i, item in enumerate(w))  # type: ignore[return-value]
    if dataclasses.is_dataclass(w) and not isinstance(w, type):
        values = {f.name: map_tensors(getattr(w, f.name), fn, _child(path, f.name)) for f in dataclasses.fields(w)}
        return dataclasses.replace(w, **values)
    return w


def _block_diagonal(blocks: list[torch.Tensor]) -> torch.Tensor:
    """Conv weights (out_i, in_i, k) → (Σ out_i, Σ in_i, k) with zeros off the diagonal blocks (differentiable)."""
    total_in = sum(b.shape[1] for b in blocks)
    rows, start = [], 0
    for b in blocks:
        rows.append(F.pad(b, (0, 0, start, total_in - start - b.shape[1])))
        start += b.shape[1]
    return torch.cat(rows, dim=0)


def _layer_weights(layer: TransformerLayer) -> LayerWeights:
    return LayerWeights(
        layer.norm1.weight,
        layer.norm1.bias,
        layer.qkv.weight,
        layer.qkv.bias,
        layer.out.weight,
        layer.out.bias,
        layer.norm2.weight,
        layer.norm2.bias,
        layer.ff1.weight,
        layer.ff1.bias,
        layer.ff2.weight,
        layer.ff2.bias,
    )


def _last_layer_weights(layer: TransformerLayer) -> LastLayerWeights:
    """Fold q·k and v·out of the packed projections per head (see :func:`_last_layer`); differentiable."""
    d, h = layer.d_model, layer.num_heads
    hd = d // h
    w, b = layer.qkv.weight, layer.qkv.bias
    wq, wk, wv = w[:d].view(h, hd, d), w[d : 2 * d].view(h, hd, d), w[2 * d :].view(h, hd, d)
    bq, bv = b[:d].view(h, 1, hd), b[2 * d :]
    scale = hd**-0.5
    qk_w = (wq.transpose(1, 2) @ wk).permute(1, 0, 2).reshape(d, h * d) * scale  # [i, (h, j)] = Σ_e Wq[h,e,i] Wk[h,e,j]
    qk_b = (bq @ wk).reshape(h * d) * scale
    wo = layer.out.weight.view(d, h, hd).permute(1, 2, 0)  # (h, hd, d): W_o,hᵀ
    vo_w = (wv.transpose(1, 2) @ wo).reshape(h * d, d)  # (h, d, d): W_v,hᵀ W_o,hᵀ
    vo_b = bv @ layer.out.weight.t() + layer.out.bias
    return LastLayerWeights(
        layer.norm1.weight,
        layer.norm1.bias,
        qk_w,
        qk_b,
        vo_w,
        vo_b,
        layer.norm2.weight,
        layer.norm2.bias,
        layer.ff1.weight,
        layer.ff1.bias,
        layer.ff2.weight,
        layer.ff2.bias,
    )


def fuse_encoder(enc: Encoder, dense_mix: bool) -> EncoderWeights:
    """Fused weights of ``enc`` (differentiable in its parameters).

    ``dense_mix``: express the grouped mixing convolution as a dense block-diagonal one
    (faster at batch 1; the grouped kernel is faster for training batches).
    """
    n_in = enc.norm_mean.shape[0]
    square_mask = None
    if enc.square_rotor:
        square_mask = torch.arange(n_in, device=enc.norm_mean.device) >= 6
    conv_w = _block_diagonal([enc.acc_conv.weight, enc.gyro_conv.weight, enc.rotor_conv.weight])
    conv_b = torch.cat([enc.acc_conv.bias, enc.gyro_conv.bias, enc.rotor_conv.bias])
    mix_w, groups = enc.mix_conv.weight, enc.mix_conv.groups
    if dense_mix and groups > 1:
        mix_w, groups = _block_diagonal(list(mix_w.chunk(groups, dim=0))), 1
    layers = list(enc.layers)
    return EncoderWeights(
        in_scale=1.0 / enc.norm_std,
        in_shift=-enc.norm_mean / enc.norm_std,
        square_mask=square_mask,
        conv_w=conv_w,
        conv_b=conv_b,
        mix_w=mix_w,
        mix_b=enc.mix_conv.bias,
        mix_groups=groups,
        padding=enc.acc_conv.padding[0],
        proj_wt=enc.proj.weight.t(),
        pe_bias=enc.time_pe + enc.proj.bias,
        layers=tuple(_layer_weights(layer) for layer in layers[:-1]),
        last=_last_layer_weights(layers[-1]) if layers else None,
        norm_w=enc.norm.weight,
        norm_b=enc.norm.bias,
        num_heads=layers[0].num_heads if layers else 1,
        d_model=enc.proj.out_features,
    )


NATIVE_GELU_MAX_NUMEL = 65536
"""GELU inputs up to this many values skip oneDNN (see :func:`gelu`); larger ones keep it (faster there)."""


def gelu(x: torch.Tensor) -> torch.Tensor:
    """Exact (erf) GELU; small CPU tensors on PyTorch's native vectorised kernel.

    For float32 CPU tensors ``F.gelu`` goes through oneDNN's eltwise primitive, measured here at
    ~6 µs fixed cost per call (vs < 1 µs native for 224 values, 28 vs 14 µs for the batch-1
    (100, 224) FFN activation), while for training-size activations oneDNN is the faster one.
    oneDNN is switched off only for this call (the flag is process-wide; another thread's op in
    that window merely takes a native kernel too).
    """
    if x.numel() > NATIVE_GELU_MAX_NUMEL or not mkldnn.enabled or x.device.type != "cpu":
        return F.gelu(x)
    mkldnn.enabled = False
    try:
        return F.gelu(x)
    finally:
        mkldnn.enabled = True


def _feed_forward(
    x: torch.Tensor, w: LayerWeights | LastLayerWeights, d: int, lin: Callable[..., torch.Tensor] = F.linear
) -> torch.Tensor:
    """x + FFN(LN2(x)), the second half of a pre-norm layer."""
    return x + lin(gelu(lin(F.layer_norm(x, (d,), w.ln2_w, w.ln2_b), w.ff1_w, w.ff1_b)), w.ff2_w, w.ff2_b)


def _layer(x: torch.Tensor, w: LayerWeights, heads: int, d: int) -> torch.Tensor:
    """Pre-norm transformer layer on every token (same maths as ``TransformerLayer.forward``); x (B, T, d)."""
    y = F.layer_norm(x, (d,), w.ln1_w, w.ln1_b)
    a = attention(linear(y, w.qkv_w, w.qkv_b), heads)  # native small-head kernel on the CPU
    return _feed_forward(x + linear(a, w.out_w, w.out_b), w, d, linear)


def _last_layer(x: torch.Tensor, w: LastLayerWeights, heads: int, d: int) -> torch.Tensor:
    """The last layer for the last token only; x (B, T, d) → (B, d).

    With y = LN1(x) and one query per head, q_h = y_T W_q,hᵀ + b_q,h, the scores are
    q_h·k_t,h/√d_h = y_t·(q_h W_k,h)/√d_h + q_h·b_k,h/√d_h; the last term is the same for every t
    and cancels in the softmax. The attention output, with Σ_t p_t = 1, is
    Σ_t p_t v_t,h = (Σ_t p_t y_t) W_v,hᵀ + b_v,h, and the output projection is linear, so

        q'_h = y_T A_h + c_h           A_h = W_q,hᵀ W_k,h/√d_h,   c_h = b_q,h W_k,h/√d_h
        p_h = softmax(q'_h · y_t)      (over t)
        out = Σ_h (p_h y) M_h + m       M_h = W_v,hᵀ W_o,hᵀ,       m = b_v W_oᵀ + b_o

    — the layer's attention exactly, without projecting any key or value (no (T × d)·(d × 2d)
    product, no attention kernel). Then the feed-forward half as usual.
    """
    b = x.shape[0]
    y = F.layer_norm(x, (d,), w.ln1_w, w.ln1_b)
    q = torch.addmm(w.qk_b, y[:, -1], w.qk_w).view(b, heads, d)  # (B, H, d)
    p = torch.softmax(torch.bmm(q, y.transpose(1, 2)), dim=-1)  # (B, H, T)
    ctx = torch.bmm(p, y).reshape(b, heads * d)  # (B, H·d)
    return _feed_forward(x[:, -1] + torch.addmm(w.vo_b, ctx, w.vo_w), w, d)


def encode(x: torch.Tensor, w: EncoderWeights) -> torch.Tensor:
    """Raw window x (B, T, 6+K) → last-step feature h (B, d); last layer for the last token only."""
    if w.square_mask is not None:
        x = torch.where(w.square_mask, x * x, x)
    z = torch.addcmul(w.in_shift, x, w.in_scale).transpose(1, 2)  # (B, C, T), standardised
    z = gelu(F.conv1d(z, w.conv_w, w.conv_b, padding=w.padding))
    z = gelu(F.conv1d(z, w.mix_w, w.mix_b, padding=w.padding, groups=w.mix_groups))
    z = torch.baddbmm(w.pe_bias, z.transpose(1, 2), w.proj_wt.expand(z.shape[0], -1, -1))
    for lw in w.layers:
        z = _layer(z, lw, w.num_heads, w.d_model)
    h = z[:, -1] if w.last is None else _last_layer(z, w.last, w.num_heads, w.d_model)
    return F.layer_norm(h, (w.d_model,), w.norm_w, w.norm_b)


@dataclass(frozen=True)
class HeadWeights:
    """All heads on h as one affine map h → [bin queries | velocity (3) | log σ (3)] (present parts only).

    With a bin encoding, the bin block holds the per-axis queries θ_i(h) ∈ R^D (3D columns),
    scored against the cached bin features in one (3 × D)·(D × N) product (eq:softmax); with the
    ``direct`` encoding it holds the 3N logits themselves.

    Attributes:
        weight_t: (D_h, O) transposed weight of the fused map.
        bias: (O,) its bias.
        num_bins: N (0 without a bin decoder).
        bin_cols: columns of the bin block (3D, 3N for ``direct``, 0 without bins).
        features_t: (D, N) transposed bin features φ(enc(b)), or None (``direct`` / no bins).
        centres: (N,) bin centres, or None.
        has_log_sigma: a covariance (log σ) block comes last.
        uncertainty: reported variance source ``"B"``, ``"C"`` or ``"B+C"``.
    """

    weight_t: torch.Tensor
    bias: torch.Tensor
    num_bins: int
    bin_cols: int
    features_t: torch.Tensor | None
    centres: torch.Tensor | None
    has_log_sigma: bool
    uncertainty: str


HeadOutputs = tuple[torch.Tensor, torch.Tensor, "torch.Tensor | None", "torch.Tensor | None", "torch.Tensor | None"]


def heads(h: torch.Tensor, w: HeadWeights) -> HeadOutputs:
    """h (B, D_h) → (v̂, reported variance, logits, bin variance, log σ) (the fields of ``NetOutput``).

    Bin decoding follows eq:decode and eq:bin_variance; the reported variance follows the
    configured source (B: bin variance, C: exp(2 log σ), B+C: their sum).
    """
    out = torch.addmm(w.bias, h, w.weight_t)
    log_sigma = out[:, -3:] if w.has_log_sigma else None
    if w.num_bins == 0:
        assert log_sigma is not None
        return out[:, :3], torch.exp(2.0 * log_sigma), None, None, log_sigma
    n = w.num_bins
    centres = w.centres
    assert centres is not None
    decoded = None
    if w.features_t is None:
        logits = out[:, : w.bin_cols].reshape(-1, 3, n)
    else:  # the 3B per-axis queries against the cached bin features
        queries = out[:, : w.bin_cols].reshape(-1, w.features_t.shape[0])
        decoded = bin_decode(queries, w.features_t, centres)  # one native call, inference only
        logits = (torch.mm(queries, w.features_t) if decoded is None else decoded[0]).view(-1, 3, n)
    if decoded is not None:
        v, bin_var = decoded[1].view(-1, 3), decoded[2].view(-1, 3)
    else:
        p = F.softmax(logits, dim=-1)
        v = p @ centres
        dev = centres - v.unsqueeze(-1)
        bin_var = (p * (dev * dev)).sum(-1)
    if w.uncertainty == "B":
        return v, bin_var, logits, bin_var, log_sigma
    assert log_sigma is not None
    var = torch.exp(2.0 * log_sigma)
    return v, var if w.uncertainty == "C" else bin_var + var, logits, bin_var, log_sigma
