"""Keep freed activation memory in the process on CPU (glibc), so training steps stop page-faulting.

PyTorch's CPU allocator is the C library's ``malloc``. With glibc's defaults a large block (an
activation of a training batch: 12 800 tokens × 224 FFN channels is 11.5 MB) may be served by a
fresh ``mmap`` and handed back to the kernel by ``munmap`` when freed, and memory freed at the top
of the heap is trimmed back as well. A training step then touches many of its activations' pages
for the first time again, each zeroed by the kernel before the step writes it: thousands of minor
page faults per batch, against a few hundred with this setting (``benchmarks/bench_net_train.py``
prints the count).

:func:`reuse_freed_memory` raises glibc's mmap threshold to its maximum (32 MiB on 64-bit) and
its trim threshold out of reach, so blocks up to 32 MiB come from the heap and are reused by the
next step. This is what PyTorch's CPU performance guide gets from preloading jemalloc or
tcmalloc, without a preload (which a `velobins train` command or a colcon-installed script cannot
do). It costs memory the process does not give back until it exits: right for a training
process, not done in the ROS nodes. ``benchmarks/bench_net_train.py`` prints the page faults per
batch (``--keep-default-malloc`` to compare); there the setting is process-wide, so the
straightforward baseline in the same process gets it too.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging

_LOG = logging.getLogger(__name__)

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_MAX = 32 * 1024 * 1024
"""glibc's DEFAULT_MMAP_THRESHOLD_MAX on 64-bit (4 MiB · sizeof(long)); larger values are refused."""
TRIM_THRESHOLD = 1 << 30


@functools.cache
def reuse_freed_memory() -> bool:
    """Set glibc's mmap and trim thresholds for a training process (once); False where not glibc.

    Returns whether both settings took effect. On other C libraries (musl, macOS) it does nothing
    and says so in the log: training runs the same, only without this saving.
    """
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError, TypeError):
        _LOG.info("reuse_freed_memory: no glibc mallopt (C library %r); allocator left as it is", name)
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    ok = bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_MAX)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
    if not ok:
        _LOG.warning("reuse_freed_memory: mallopt refused the thresholds; allocator left at its defaults")
    return ok
