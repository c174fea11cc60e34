"""Native CPU kernels (all-token attention for small heads; bin decoder and GELU at inference).

:func:`attention` maps the packed projection ``qkv`` (B, T, 3·H·E) to the attention output
(B, T, H·E), exactly ``F.scaled_dot_product_attention`` per head. On the CPU, for float32/64 and
head dimensions E ≤ 16, it runs the native kernel: the encoder's all-token layer has E = 12 and
T = 100, sizes at which PyTorch's CPU kernels spend most of their time outside the arithmetic
(``benchmarks/bench_net_train.py`` prints both).

:func:`bin_decode` is a backend of :func:`velobins_net.bins.decode_queries`: the bin decoder of
a window in one call (logits, softmax, eq:decode, eq:bin_variance) where PyTorch takes about ten
small ops (``benchmarks/bench_net_latency.py``). :func:`gelu` is the exact GELU of one window's
small activations, where PyTorch's oneDNN eltwise primitive has a large fixed cost.

The kernels are C++ (``native_kernels.cpp``: no PyTorch headers), built once per source,
compiler and CPU with ``g++ -O3 -march=native`` into the user cache (``$VELOBINS_CACHE_DIR``,
default ``~/.cache/velobins``) and loaded with ctypes; ``scripts/bootstrap.sh`` builds them ahead
(``python -m velobins_net.accel.native``). Anything that stops them (no compiler, a failed build,
``VELOBINS_NATIVE_KERNELS=0``, a GPU tensor, tracing for TorchScript/ONNX export, a gradient
through the bin decoder) falls back to PyTorch with the same results to float rounding; the
reason is logged once and :func:`kernel_status` reports it.

The switch :func:`kernels_enabled` is the accelerator's one switch (``velobins_net.accel.enabled``):
``VELOBINS_NATIVE_KERNELS=0`` in the environment of the process turns off the native kernels, the
oneDNN linears and the model's local fast paths, so the model runs its plain layer-by-layer forward.
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

_LOG = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("native_kernels.cpp")
DISABLE_ENV = "VELOBINS_NATIVE_KERNELS"
"""Set to 0 to never build or use the native kernel."""
CACHE_ENV = "VELOBINS_CACHE_DIR"
"""Where built kernels are kept (default ``$XDG_CACHE_HOME/velobins`` or ``~/.cache/velobins``)."""
COMPILER_ENV = "CXX"
MAX_HEAD_DIM = 16
"""Largest head dimension the kernel is compiled for (``VB_HEAD_DIMS`` in the source)."""
MIN_WORK_PER_THREAD = 16
"""(window, head) pairs per extra thread below which the kernel runs single-threaded."""
FLAG_SETS = (["-O3", "-march=native"], ["-O3"])
"""Compiler flags, tried in order (a compiler or CPU without ``-march=native`` gets the second)."""

_lock = threading.Lock()
_lib: ctypes.CDLL | None = None
_status: str | None = None  # None: not tried yet


def switch_from_environment() -> bool:
    """The switch as ``VELOBINS_NATIVE_KERNELS`` sets it: off for 0, false, no or off; on otherwise (and unset)."""
    return os.environ.get(DISABLE_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


_enabled = switch_from_environment()
"""The switch, read once: the model asks it several times per forward, where an environment lookup costs
as much as a small tensor op. :func:`set_enabled` changes it for the running process."""


def kernels_enabled() -> bool:
    """The accelerator switch: native kernels, oneDNN linears and the model's fast paths (off: PyTorch's plain ops)."""
    return _enabled


def set_enabled(on: bool | None) -> bool:
    """Turn the accelerator on or off in this process (None: as the environment says); returns the previous state.

    The model's outputs are the same either way to float rounding; tests use it to hold the fast
    paths to the plain ones, and a user to rule the accelerator out when a result looks wrong.
    """
    global _enabled
    previous, _enabled = _enabled, switch_from_environment() if on is None else bool(on)
    return previous


def cache_dir() -> Path:
    """Directory for built kernels."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "velobins"


def _cpu_signature() -> str:
    """What ``-march=native`` depends on: the CPU's model and feature flags."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        keep = [ln for ln in lines if ln.startswith(("model name", "flags", "Features", "CPU part"))]
        return "\n".join(sorted(set(keep)))
    except OSError:
        return platform.processor() or platform.machine()


def _library_path(compiler: str) -> Path:
    """Cache path keyed by the source, the compiler's version, the flag sets and the CPU."""
    version = subprocess.run([compiler, "--version"], capture_output=True, text=True, check=False).stdout
    key = hashlib.sha256()
    for part in (SOURCE.read_bytes(), version.encode(), repr(FLAG_SETS).encode(), _cpu_signature().encode()):
        key.update(part)
    return cache_dir() / f"native_kernels-{platform.machine()}-{key.hexdigest()[:16]}.so"


def build() -> Path:
    """Compile the kernel into the cache (no-op when already there); returns the library path.

    Raises:
        RuntimeError: no C++ compiler, or every flag set failed (the compiler's message included).
    """
    compiler = shutil.which(os.environ.get(COMPILER_ENV, "g++"))
    if compiler is None:
        raise RuntimeError(f"no C++ compiler ({os.environ.get(COMPILER_ENV, 'g++')}) on PATH")
    target = _library_path(compiler)
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    errors = []
    for flags in FLAG_SETS:
        # Built under a temporary name and renamed: concurrent builders (torchrun workers) never
        # load a half-written library.
        fd, tmp = tempfile.mkstemp(suffix=".so", dir=target.parent)
        os.close(fd)
        cmd = [compiler, *flags, "-std=c++17", "-shared", "-fPIC", "-pthread", str(SOURCE), "-o", tmp]
        _LOG.info("building the native kernels (once per machine): %s", " ".join(cmd))
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode == 0:
            os.replace(tmp, target)
            return target
        os.unlink(tmp)
        errors.append(f"{' '.join(flags)}: {proc.stderr.strip()[-2000:]}")
    raise RuntimeError("building the native kernels failed:\n" + "\n".join(errors))


def open_library(path: Path) -> ctypes.CDLL:
    """Load a built kernel library and declare its entry points' argument types.

    Raises:
        OSError: the file is not a loadable library.
        AttributeError: an entry point is missing (a library of another source).
        RuntimeError: the library was compiled for other head dimensions than :data:`MAX_HEAD_DIM`.
    """
    lib = ctypes.CDLL(str(path))
    ptr, i64 = ctypes.c_void_p, ctypes.c_int64
    dims = [i64, i64, i64, i64, ctypes.c_double, ctypes.c_int]
    for name in ("vb_attn_fwd_f32", "vb_attn_fwd_f64"):
        getattr(lib, name).argtypes = [ptr, ptr, ptr, *dims]
    for name in ("vb_attn_bwd_f32", "vb_attn_bwd_f64"):
        getattr(lib, name).argtypes = [ptr, ptr, ptr, ptr, ptr, *dims]
    lib.vb_bin_decode_f32.argtypes = [ptr, ptr, ptr, ptr, ptr, ptr, i64, i64, i64]
    lib.vb_gelu_f32.argtypes = [ptr, ptr, i64]
    lib.vb_vec_bytes.argtypes = []
    if lib.vb_attn_max_head_dim() != MAX_HEAD_DIM:
        raise RuntimeError("kernel library and native.py disagree on the head dimensions")
    return lib


def vector_bytes() -> int | None:
    """The width of the loaded kernels' vectors (64 with AVX-512, 32 with AVX, 16 otherwise), None without them."""
    lib = _load()
    return None if lib is None else int(lib.vb_vec_bytes())


def _load() -> ctypes.CDLL | None:
    """The kernel library, built on first use; None (reason logged once) when unavailable."""
    global _lib, _status
    if not _enabled:
        return None
    if _status is not None:
        return _lib
    with _lock:
        if _status is not None:
            return _lib
        try:
            path = build()
            lib = open_library(path)
        except (OSError, RuntimeError, AttributeError) as exc:
            _status = f"unavailable ({exc}): PyTorch kernels"
            _LOG.warning("native kernels %s", _status)
            return None
        _lib = lib
        _status = f"native ({path.name}, {lib.vb_vec_bytes()}-byte vectors)"
        return _lib


def kernel_status() -> str:
    """Whether the native kernels are in use, and why not (builds them if not tried yet)."""
    if not _enabled:
        return f"disabled ({DISABLE_ENV}=0 or accel.set_enabled(False)): PyTorch kernels"
    _load()
    assert _status is not None
    return _status


def _threads(work: int) -> int:
    return max(1, min(torch.get_num_threads(), work // MIN_WORK_PER_THREAD))


def _run_attention(direction: str, qkv: torch.Tensor, heads: int, *buffers: torch.Tensor) -> None:
    """Call ``vb_attn_{direction}_{f32|f64}`` on qkv (B, T, 3·H·E) and the direction's other buffers."""
    lib = _lib
    assert lib is not None
    b, t, c = qkv.shape
    e = c // (3 * heads)
    fn = getattr(lib, f"vb_attn_{direction}_{'f32' if qkv.dtype == torch.float32 else 'f64'}")
    ptrs = [qkv.data_ptr(), *(buf.data_ptr() for buf in buffers)]
    if fn(*ptrs, b, t, heads, e, e**-0.5, _threads(b * heads)) != 0:
        raise RuntimeError(f"native attention: head dimension {e} not supported")


class _NativeAttention(torch.autograd.Function):
    """Autograd wrapper: forward keeps (qkv, out, log-sum-exp); backward recomputes probabilities."""

    @staticmethod
    def forward(ctx: Any, qkv: torch.Tensor, heads: int) -> torch.Tensor:  # type: ignore[override]
        b, t, c = qkv.shape
        out = qkv.new_empty(b, t, c // 3)
        lse = qkv.new_empty(b, heads, t)
        _run_attention("fwd", qkv, heads, out, lse)
        ctx.save_for_backward(qkv, out, lse)
        ctx.heads = heads
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:  # type: ignore[override]
        qkv, out, lse = ctx.saved_tensors
        dqkv = torch.empty_like(qkv)
        _run_attention("bwd", qkv, ctx.heads, out, grad.contiguous(), lse, dqkv)
        return dqkv, None


def reference_attention(qkv: torch.Tensor, heads: int) -> torch.Tensor:
    """PyTorch's kernel on the same packed layout: qkv (B, T, 3·H·E) → (B, T, H·E)."""
    b, t, c = qkv.shape
    e = c // (3 * heads)
    q, k, v = qkv.view(b, t, 3, heads, e).permute(2, 0, 3, 1, 4).unbind(0)
    return F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, t, heads * e)


def native_applies(qkv: torch.Tensor, heads: int) -> bool:
    """Whether :func:`attention` would run the native kernel on this input."""
    if torch.jit.is_scripting() or torch.jit.is_tracing() or qkv.device.type != "cpu":
        return False
    if qkv.dtype not in (torch.float32, torch.float64) or qkv.dim() != 3 or qkv.shape[1] < 1:
        return False
    if qkv.shape[2] % (3 * heads) or qkv.shape[2] // (3 * heads) > MAX_HEAD_DIM:
        return False
    return _load() is not None


def native_attention(qkv: torch.Tensor, heads: int) -> torch.Tensor:
    """Self-attention of every token by the native kernel (where :func:`native_applies`): (B, T, 3HE) → (B, T, HE)."""
    return _NativeAttention.apply(qkv.contiguous(), heads)


def attention(qkv: torch.Tensor, heads: int) -> torch.Tensor:
    """Self-attention of every token: packed qkv (B, T, 3·H·E) → (B, T, H·E), no mask, scale 1/√E.

    The native kernel where it applies, else :func:`reference_attention` (the kernel's tests and
    ``benchmarks/bench_net_train.py`` compare the two; the model writes its own fallback beside
    its call of :func:`native_attention`, :meth:`velobins_net.transformer.TransformerLayer.attention`).
    """
    if native_applies(qkv, heads):
        return native_attention(qkv, heads)
    return reference_attention(qkv, heads)


def bin_decode(
    queries: torch.Tensor, features_t: torch.Tensor, centres: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
    """Bin decoding without autograd: queries (R, D), features_t (D, N), centres (N) → (logits (R, N), v (R), var (R)).

    logits = queries · features_t, p = softmax(logits), v = Σ p c, var = Σ p (c − v)². Returns None
    (the caller runs PyTorch) unless all are contiguous float32 CPU tensors, no gradient is needed,
    nothing is being traced and the native library is loaded.
    """
    if torch.jit.is_scripting() or torch.jit.is_tracing():
        return None
    tensors = (queries, features_t, centres)
    if any(t.device.type != "cpu" or t.dtype != torch.float32 or not t.is_contiguous() for t in tensors):
        return None
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        return None
    lib = _load()
    if lib is None:
        return None
    rows, dim = queries.shape
    n = features_t.shape[1]
    logits = queries.new_empty(rows, n)
    v = queries.new_empty(rows)
    var = queries.new_empty(rows)
    ptrs = (queries.data_ptr(), features_t.data_ptr(), centres.data_ptr(), logits.data_ptr(), v.data_ptr())
    if lib.vb_bin_decode_f32(*ptrs, var.data_ptr(), rows, dim, n) != 0:
        return None
    return logits, v, var


def gelu(x: torch.Tensor) -> torch.Tensor | None:
    """Exact GELU of a contiguous float32 CPU tensor without autograd in one native call; None otherwise.

    Φ(x) = ½ erfc(−x/√2) with a Chebyshev fit of erfc (relative error < 1.2e-7, see the source).
    Declines (the caller runs ``F.gelu``) under tracing, for other dtypes or devices, for a
    tensor that needs a gradient, or without the native library.
    """
    if torch.jit.is_scripting() or torch.jit.is_tracing():
        return None
    if x.device.type != "cpu" or x.dtype != torch.float32 or not x.is_contiguous():
        return None
    if x.requires_grad and torch.is_grad_enabled():
        return None
    lib = _load()
    if lib is None:
        return None
    y = torch.empty_like(x)
    if lib.vb_gelu_f32(x.data_ptr(), y.data_ptr(), x.numel()) != 0:
        return None
    return y


def main(argv: list[str] | None = None) -> int:
    """``python -m velobins_net.accel.native``: build the kernels (if needed) and report their status."""
    parser = argparse.ArgumentParser(description="Build the native kernels and report their status.")
    parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    print(f"native kernels: {kernel_status()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
