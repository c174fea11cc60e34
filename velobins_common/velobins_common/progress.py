"""Progress bars for long work: on a terminal only, never frames of bars in a log.

tqdm redraws its bar with carriage returns; written to a file (CI, ``> log``) every redraw stays
in the file, and a training log grows to megabytes of bar frames. Every command therefore makes
its bars with :func:`progress_bar`, which shows them only when standard error is an interactive
terminal; results and per-epoch lines are printed as ordinary lines either way.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any

from tqdm import tqdm


def is_terminal(stream: Any = None) -> bool:
    """Whether ``stream`` (default: standard error, where tqdm draws) is an interactive terminal."""
    stream = sys.stderr if stream is None else stream
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except ValueError:  # a closed stream
        return False


def progress_bar(iterable: Iterable[Any] | None = None, *, enabled: bool = True, **kwargs: Any) -> tqdm:
    """A tqdm bar over ``iterable`` that draws only when ``enabled`` and on a terminal.

    When it does not draw, iteration, ``update`` and ``close`` still work (tqdm's ``disable``),
    so callers never branch on whether a bar is visible.
    """
    return tqdm(iterable, disable=not (enabled and is_terminal()), **kwargs)
