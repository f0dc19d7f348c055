"""Deterministic measures of how work grows with the input, for the tests that guard against
quadratic behaviour (instead of wall-clock bounds, which fail under load).

- ``executed_lines(fn)``: the number of Python lines ``fn()`` executes (``sys.settrace``): the same
  count on every run and machine, whatever else runs; it sees Python-level loops, not work inside C.
- ``cpu_seconds(fn)``: the CPU time this process spends in ``fn()`` (``time.process_time``), for work
  inside C (the regular-expression engine): other processes' load does not count.
"""

from __future__ import annotations

import sys
import time
from typing import Callable

__all__ = ["executed_lines", "cpu_seconds", "grows_linearly"]


def executed_lines(fn: Callable[[], object]) -> int:
    count = [0]

    def local(frame, event, arg):  # type: ignore[no-untyped-def]
        if event == "line":
            count[0] += 1
        return local

    old = sys.gettrace()
    sys.settrace(lambda frame, event, arg: local)
    try:
        fn()
    finally:
        sys.settrace(old)
    return count[0]


def cpu_seconds(fn: Callable[[], object]) -> float:
    t = time.process_time()
    fn()
    return time.process_time() - t


def grows_linearly(make: Callable[[int], Callable[[], object]], n: int, factor: int = 4,
                   slack: float = 1.25) -> tuple[int, int]:
    """``(small, big)``: the lines executed by ``make(n)()`` and ``make(factor * n)()``; asserts that the
    big one is at most ``slack * factor`` times the small one (quadratic work would be ``factor²``)."""
    small, big = executed_lines(make(n)), executed_lines(make(factor * n))
    assert big <= slack * factor * small, (n, small, big)
    return small, big
