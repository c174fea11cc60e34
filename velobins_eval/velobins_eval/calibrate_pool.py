"""Filter passes of ``velobins calibrate`` over its flights, in this process or in a few worker processes.

Every objective evaluation runs the EKF once over every flight, and the flights are independent:
with ``--workers N`` they are spread over N processes that received the flights once, at start-up
(a fork on Linux), so each evaluation sends only the candidate (a small config) and gets back the
per-update terms. The results are identical to the in-process path (same function, same inputs).
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor

import numpy as np

from velobins_common.errors import OptionError

_FLIGHTS: list = []
_WORK: Callable | None = None


def _init(flights: list, work: Callable) -> None:
    global _FLIGHTS, _WORK
    _FLIGHTS, _WORK = flights, work


def _run(index: int, args: tuple) -> tuple[np.ndarray, np.ndarray]:
    assert _WORK is not None
    return _WORK(_FLIGHTS[index], *args)


class FlightPool:
    """``work(flight, *args)`` for every flight, in order; ``workers`` > 1 runs them in that many processes."""

    def __init__(self, flights: Sequence, work: Callable, workers: int = 1):
        if workers < 1:
            raise OptionError("--workers", f"must be >= 1, got {workers}")
        self.flights = list(flights)
        self.work = work
        self.executor = None
        if workers > 1 and len(self.flights) > 1:
            context = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else None)
            self.executor = ProcessPoolExecutor(
                min(workers, len(self.flights)), mp_context=context, initializer=_init, initargs=(self.flights, work)
            )

    def map(self, *args) -> list:
        """``[work(flight, *args) for flight in flights]``."""
        if self.executor is None:
            return [self.work(f, *args) for f in self.flights]
        # longest flights first, so the last process to finish is not the one handed the longest flight last
        order = sorted(range(len(self.flights)), key=lambda i: -len(self.flights[i].t))
        futures = {i: self.executor.submit(_run, i, args) for i in order}
        return [futures[i].result() for i in range(len(self.flights))]

    def close(self) -> None:
        """End the worker processes (a no-op in-process)."""
        if self.executor is not None:
            self.executor.shutdown(cancel_futures=True)
            self.executor = None
