"""Native kernels (attention, bin decoder) and oneDNN linears: same values and gradients as PyTorch, fallbacks.

The kernel is compiled on first use (``g++``); without a compiler the native-only tests skip and
the fallback tests still run.
"""

from __future__ import annotations

import platform
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
import torch.backends.mkldnn as mkldnn
import torch.nn.functional as F

import velobins_net.accel.native as na
from velobins_net.accel import NATIVE_GELU_MAX_NUMEL, gelu, onednn_linear

torch.set_num_threads(1)

needs_compiler = pytest.mark.skipif(shutil.which("g++") is None, reason="no C++ compiler to build the kernel")


@pytest.fixture
def fresh_state(monkeypatch, tmp_path):
    """Forget the loaded kernel (restored afterwards) and build into an empty cache."""
    monkeypatch.setattr(na, "_lib", None)
    monkeypatch.setattr(na, "_status", None)
    monkeypatch.setenv(na.CACHE_ENV, str(tmp_path))
    return tmp_path


def _packed(b: int, t: int, h: int, e: int, dtype=torch.float32, scale: float = 2.0, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(b, t, 3 * h * e, generator=g, dtype=torch.float64) * scale).to(dtype)


def _value_and_grad(fn, qkv: torch.Tensor, heads: int, grad: torch.Tensor):
    x = qkv.clone().requires_grad_()
    out = fn(x, heads)
    out.backward(grad)
    return out.detach(), x.grad


@needs_compiler
def test_kernel_builds_and_is_used():
    assert na.kernel_status().startswith("native"), na.kernel_status()
    assert na.native_applies(_packed(2, 100, 4, 12), 4)


def _cpu_flags() -> set[str]:
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return set()
    return {flag for line in lines if line.startswith("flags") for flag in line.split(":", 1)[1].split()}


@needs_compiler
@pytest.mark.skipif(platform.machine() != "x86_64" or not _cpu_flags(), reason="x86-64 CPU flags are not readable")
def test_vector_width_follows_the_cpu():
    # 64-byte vectors without AVX-512 spill matmul's register blocks: the attention ran 5x slower than PyTorch's
    flags = _cpu_flags()
    expected = 64 if "avx512f" in flags else 32 if "avx" in flags else 16
    assert na.vector_bytes() == expected, na.kernel_status()
    assert f"{expected}-byte vectors" in na.kernel_status()


def _build_with_width(out: Path, width: int) -> Path:
    """The kernel source built as the machine's own build, but with ``width``-byte vectors."""
    path = out / f"kernels_{width}.so"
    cmd = ["g++", *na.FLAG_SETS[0], f"-DVB_VEC_BYTES={width}", "-std=c++17", "-shared", "-fPIC", "-pthread"]
    subprocess.run([*cmd, str(na.SOURCE), "-o", str(path)], check=True, capture_output=True)
    return path


@needs_compiler
def test_the_other_vector_width_computes_the_same(fresh_state, monkeypatch):
    # the width this CPU does not build (32 where AVX-512 builds 64, 64 elsewhere) runs on other machines
    width = 32 if na.vector_bytes() == 64 else 64
    lib = na.open_library(_build_with_width(fresh_state, width))
    assert lib.vb_vec_bytes() == width
    monkeypatch.setattr(na, "_lib", lib)
    monkeypatch.setattr(na, "_status", "native (test build)")
    for b, t, h, e in ((3, 100, 4, 12), (2, 37, 3, 16), (4, 33, 2, 1)):
        qkv = _packed(b, t, h, e)
        grad = torch.randn(b, t, h * e, generator=torch.Generator().manual_seed(1))
        out, dx = _value_and_grad(na.native_attention, qkv, h, grad)
        ref, dref = _value_and_grad(na.reference_attention, qkv, h, grad)
        torch.testing.assert_close(out, ref, rtol=1e-5, atol=2e-5)
        torch.testing.assert_close(dx, dref, rtol=1e-5, atol=2e-5)
    q, feats, centres = torch.randn(3, 32), torch.randn(32, 40), torch.linspace(-3.0, 3.0, 40)
    got = na.bin_decode(q, feats, centres)
    assert got is not None
    torch.testing.assert_close(got[1], torch.softmax(q @ feats, -1) @ centres, rtol=1e-5, atol=1e-5)
    x = torch.randn(70)
    torch.testing.assert_close(na.gelu(x), F.gelu(x), rtol=1e-6, atol=1e-7)


@needs_compiler
@pytest.mark.parametrize(
    "b,t,h,e",
    [(3, 100, 4, 12), (2, 7, 2, 5), (2, 37, 3, 16), (1, 1, 1, 3), (2, 16, 1, 16), (4, 33, 2, 1), (1, 130, 4, 12)],
)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_native_equals_pytorch_values_and_gradients(b, t, h, e, dtype):
    qkv = _packed(b, t, h, e, dtype)
    grad = torch.randn(b, t, h * e, dtype=dtype, generator=torch.Generator().manual_seed(1))
    out, dx = _value_and_grad(na.attention, qkv, h, grad)
    ref, dref = _value_and_grad(na.reference_attention, qkv, h, grad)
    tol = {"rtol": 1e-5, "atol": 2e-5} if dtype == torch.float32 else {"rtol": 1e-10, "atol": 1e-12}
    torch.testing.assert_close(out, ref, **tol)
    torch.testing.assert_close(dx, dref, **tol)


@needs_compiler
def test_gradcheck_float64():
    qkv = _packed(2, 9, 2, 5, torch.float64).requires_grad_()
    assert torch.autograd.gradcheck(lambda x: na.attention(x, 2), (qkv,))


@needs_compiler
def test_large_scores_stay_finite_and_exact():
    """Scores of several hundred: the row max is subtracted before exp, as PyTorch does."""
    qkv = _packed(2, 50, 2, 12, scale=15.0)
    out = na.attention(qkv, 2)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, na.reference_attention(qkv, 2), rtol=1e-4, atol=1e-3)


@needs_compiler
def test_threads_split_work_with_identical_results():
    qkv = _packed(64, 100, 4, 12)
    grad = torch.randn(64, 100, 48, generator=torch.Generator().manual_seed(2))
    one = _value_and_grad(na.attention, qkv, 4, grad)
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        assert na._threads(64 * 4) == 2
        two = _value_and_grad(na.attention, qkv, 4, grad)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(one[0], two[0]) and torch.equal(one[1], two[1])  # heads are independent


def test_large_heads_and_tracing_use_pytorch():
    qkv = _packed(2, 10, 2, 20)  # head dimension 20 > MAX_HEAD_DIM
    assert not na.native_applies(qkv, 2)
    torch.testing.assert_close(na.attention(qkv, 2), na.reference_attention(qkv, 2))
    traced = torch.jit.trace(lambda x: na.attention(x, 2), (_packed(2, 10, 2, 6),), check_trace=False)
    assert "scaled_dot_product_attention" in str(traced.graph)  # exportable op, not the ctypes call


@pytest.mark.parametrize(("value", "on"), [("0", False), ("off", False), ("No", False), ("1", True), ("", True)])
def test_switch_reads_the_environment(monkeypatch, value, on):
    monkeypatch.setenv(na.DISABLE_ENV, value)
    assert na.switch_from_environment() is on
    monkeypatch.delenv(na.DISABLE_ENV)
    assert na.switch_from_environment()


def test_set_enabled_turns_the_switch_and_returns_the_previous_state(monkeypatch):
    monkeypatch.setattr(na, "_enabled", True)
    assert na.set_enabled(False) is True
    assert not na.kernels_enabled() and not na.native_applies(_packed(2, 20, 2, 6), 2)
    assert na.kernel_status().startswith("disabled")
    monkeypatch.setenv(na.DISABLE_ENV, "1")
    assert na.set_enabled(None) is False  # back to what the environment says
    assert na.kernels_enabled()


def test_disabled_by_environment(fresh_state, monkeypatch):
    monkeypatch.setenv(na.DISABLE_ENV, "0")
    monkeypatch.setattr(na, "_enabled", na.switch_from_environment())  # as a process started so reads it
    qkv = _packed(2, 20, 2, 6)
    assert not na.native_applies(qkv, 2)
    assert na.kernel_status().startswith("disabled")
    assert not any(fresh_state.iterdir())  # nothing was built
    torch.testing.assert_close(na.attention(qkv, 2), na.reference_attention(qkv, 2))


def test_failed_build_falls_back_with_reason(fresh_state, monkeypatch, caplog):
    monkeypatch.setenv(na.COMPILER_ENV, "no-such-compiler-velobins")
    qkv = _packed(2, 20, 2, 6)
    with caplog.at_level("WARNING", logger=na.__name__):
        torch.testing.assert_close(na.attention(qkv, 2), na.reference_attention(qkv, 2))
    assert na.kernel_status().startswith("unavailable (no C++ compiler")
    assert "unavailable" in caplog.text


@needs_compiler
def test_compile_error_is_reported(fresh_state, monkeypatch, tmp_path):
    broken = tmp_path / "broken.cpp"
    broken.write_text("this is not C++\n")
    monkeypatch.setattr(na, "SOURCE", broken)
    with pytest.raises(RuntimeError, match="building the native kernels failed"):
        na.build()
    assert not [p for p in fresh_state.iterdir() if p.suffix == ".so"]  # no half-written library left


# ---------------------------------------------------------------- oneDNN linears of the all-token layer
needs_onednn = pytest.mark.skipif(onednn_linear._LINEAR is None, reason="this PyTorch build has no oneDNN linear op")


@needs_onednn
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("weight_grad", [True, False])
def test_onednn_linear_values_and_gradients(bias, weight_grad):
    g = torch.Generator().manual_seed(3)
    x = torch.randn(16, 100, 48, generator=g)
    w = (torch.randn(224, 48, generator=g) * 0.1).requires_grad_(weight_grad)
    b = torch.randn(224, generator=g).requires_grad_() if bias else None
    grad = torch.randn(16, 100, 224, generator=g)
    assert onednn_linear.onednn_applies(x, w)
    xa = x.clone().requires_grad_()
    out = onednn_linear.linear(xa, w, b)
    assert out.grad_fn is not None and "OneDnn" in type(out.grad_fn).__name__
    out.backward(grad)
    got = [xa.grad] + ([w.grad.clone()] if weight_grad else []) + ([b.grad.clone()] if bias else [])
    if weight_grad:
        w.grad = None
    if bias:
        b.grad = None
    # float64 reference: both float32 paths must sit within rounding of it
    x64 = x.double().requires_grad_()
    w64 = w.detach().double().requires_grad_(weight_grad)
    b64 = b.detach().double().requires_grad_() if bias else None
    torch.nn.functional.linear(x64, w64, b64).backward(grad.double())
    want = [x64.grad] + ([w64.grad] if weight_grad else []) + ([b64.grad] if bias else [])
    torch.testing.assert_close(out.double(), torch.nn.functional.linear(x64, w64, b64), rtol=1e-5, atol=1e-4)
    for a, e in zip(got, want, strict=True):
        torch.testing.assert_close(a.double(), e, rtol=1e-5, atol=1e-3)


def test_onednn_linear_falls_back():
    w = torch.randn(8, 4)
    small = torch.randn(2, 10, 4)  # below MIN_ROWS
    assert not onednn_linear.onednn_applies(small, w)
    big64 = torch.randn(onednn_linear.MIN_ROWS, 4, dtype=torch.float64)
    assert not onednn_linear.onednn_applies(big64, w.double())
    out = onednn_linear.linear(big64, w.double())
    torch.testing.assert_close(out, big64 @ w.double().t())


def test_onednn_linear_disabled_by_the_switch(monkeypatch):
    monkeypatch.setattr(na, "_enabled", False)
    assert not onednn_linear.onednn_applies(torch.randn(onednn_linear.MIN_ROWS, 4), torch.randn(8, 4))


# ---------------------------------------------------------------- bin decoder at inference
@needs_compiler
@pytest.mark.parametrize("rows,dim,n", [(3, 32, 512), (6, 32, 64), (3, 8, 37), (1, 5, 7)])
def test_bin_decode_equals_pytorch(rows, dim, n):
    g = torch.Generator().manual_seed(4)
    q = torch.randn(rows, dim, generator=g) * 2
    feats = torch.randn(dim, n, generator=g)
    centres = torch.linspace(-3.0, 3.0, n)
    got = na.bin_decode(q, feats, centres)
    assert got is not None
    logits = q.double() @ feats.double()
    p = torch.softmax(logits, -1)
    v = p @ centres.double()
    var = (p * (centres.double() - v[:, None]) ** 2).sum(-1)
    torch.testing.assert_close(got[0].double(), logits, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got[1].double(), v, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(got[2].double(), var, rtol=1e-4, atol=1e-6)


@needs_compiler
def test_bin_decode_declines_what_it_cannot_do():
    q, feats, centres = torch.randn(3, 4), torch.randn(4, 16), torch.linspace(-1, 1, 16)
    assert na.bin_decode(q.double(), feats.double(), centres.double()) is None  # float32 only
    assert na.bin_decode(q, feats.t().contiguous().t(), centres) is None  # non-contiguous
    assert na.bin_decode(q.requires_grad_(), feats, centres) is None  # needs autograd
    with torch.no_grad():
        assert na.bin_decode(q, feats, centres) is not None


@needs_compiler
def test_streaming_inference_decodes_natively(monkeypatch):
    """The model's gradient-free forward calls the native decoder and agrees with the oracle."""
    from reference import reference_forward

    from velobins_net.config import ModelConfig
    from velobins_net.model import VeloBinsNet

    calls = []
    real = na.bin_decode
    monkeypatch.setattr("velobins_net.accel.bin_decode", lambda *a: calls.append(1) or real(*a))
    torch.manual_seed(0)
    model = VeloBinsNet(ModelConfig(num_bins=128)).eval()
    x = torch.randn(1, 100, 10)
    with torch.inference_mode():
        fast = model(x)
        ref = reference_forward(model, x)
    assert calls
    torch.testing.assert_close(fast.v, ref.v, rtol=1e-5, atol=5e-6)
    torch.testing.assert_close(fast.var, ref.var, rtol=1e-4, atol=1e-7)
    torch.testing.assert_close(fast.logits, ref.logits, rtol=1e-5, atol=1e-5)


@needs_compiler
def test_native_gelu_equals_exact_gelu_and_declines_what_it_cannot_do():
    x = torch.cat([torch.linspace(-8.0, 8.0, 4001), torch.randn(1003) * 3])  # a tail of n % 16 values
    y = na.gelu(x)
    assert y is not None
    exact = torch.nn.functional.gelu(x.double())
    torch.testing.assert_close(y.double(), exact, rtol=1e-6, atol=1e-6)
    assert na.gelu(x.double()) is None  # float32 only
    assert na.gelu(x.view(2, -1).t()) is None  # non-contiguous
    assert na.gelu(x.clone().requires_grad_()) is None  # needs autograd


@pytest.mark.parametrize("numel", [224, NATIVE_GELU_MAX_NUMEL + 2])
def test_gelu_is_exact_gelu_and_leaves_onednn_flag(numel):
    x = torch.randn(2, numel // 2) * 4
    was = mkldnn.enabled
    y = gelu(x)
    assert y.shape == x.shape and y.is_contiguous()
    torch.testing.assert_close(y, 0.5 * x * (1.0 + torch.erf(x / 2**0.5)), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(y, F.gelu(x), rtol=1e-5, atol=1e-5)
    assert mkldnn.enabled == was
