"""The buffers a compiled graph's runs reuse (``BufferPool``): freed intermediates, and the outputs
of earlier runs once nobody holds them."""

from __future__ import annotations

import sys
import threading
from typing import Any, Iterable, Optional

import numpy as np

__all__ = ["BufferPool"]


class BufferPool:
    """Freed intermediate buffers, reused for later results of the same dtype and shape; and the
    output arrays of earlier runs (``lend``), taken back once nothing but the pool refers to them
    (``reclaim``: the caller dropped them, and no view of them is left).  A fresh output costs its
    page faults on every run: 2 ms per MB on these VMs for memory the guest had not touched yet,
    0.3 ms per MB elsewhere; a training loop drops a step's gradients before the next step.

    What it is given is what the plan lets it keep (``Plan.recycle``: buffers a later result of the same
    shape takes, held only where that keeps the planned peak): the executors give it nothing else."""

    MAX_LENT = 256  # output arrays watched at most (those of the latest runs)

    def __init__(self) -> None:
        self._free: dict[tuple, list[np.ndarray]] = {}
        self._lock = threading.Lock()
        self._lent: list[np.ndarray] = []

    def lend(self, arrays: Iterable[Any]) -> None:
        """Watch ``arrays`` (a run's outputs), to ``reclaim`` them once nobody else holds them."""
        with self._lock:
            seen = {id(a) for a in self._lent}
            for a in arrays:
                if isinstance(a, np.ndarray) and a.base is None and id(a) not in seen:
                    seen.add(id(a))
                    self._lent.append(a)
            del self._lent[:-self.MAX_LENT]

    def reclaim(self) -> None:
        """Move the watched arrays that only this pool refers to into the free buffers."""
        with self._lock:
            lent, self._lent = self._lent, []
            while lent:
                a = lent.pop()
                # references: this local and getrefcount's argument; anything more is someone's
                if sys.getrefcount(a) > 2:
                    self._lent.append(a)
                elif a.flags.c_contiguous and a.flags.writeable:
                    lst = self._free.setdefault((a.dtype, a.shape), [])
                    if len(lst) < 4:
                        lst.append(a)
                del a
            self._lent.reverse()

    def clear(self) -> None:
        """Drop every kept buffer and stop watching the lent ones (their memory goes back to the allocator
        once nothing else holds it)."""
        with self._lock:
            self._free.clear()
            self._lent.clear()

    def take(self, dtype: np.dtype, shape: tuple) -> Optional[np.ndarray]:
        with self._lock:
            lst = self._free.get((dtype, shape))
            return lst.pop() if lst else None

    def give(self, arr: np.ndarray) -> None:
        if arr.base is not None or not arr.flags.c_contiguous or not arr.flags.writeable:
            return
        with self._lock:
            lst = self._free.setdefault((arr.dtype, arr.shape), [])
            if len(lst) < 4:
                lst.append(arr)
