"""Intra-op parallelism: split a large kernel into row chunks run on a small pool.

The runtime sets the number of threads (``set_threads``); kernels call
``parallel_rows``.  Work below ~1 ms per chunk runs inline on the calling thread,
because a pool round trip here costs ~100 µs (PERFORMANCE.md).  The split only
depends on the array shape and the thread count, and each chunk computes exactly
what the whole would for its rows, so results are identical for any thread count.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

import numpy as np

__all__ = ["set_threads", "get_threads", "threads_here", "parallel_rows", "blas_limit", "blas_threads", "run_two",
           "blas_idle_threads_sleep", "MIN_CHUNK_BYTES"]

# Below this many bytes touched per chunk, splitting costs more than it saves.
MIN_CHUNK_BYTES = 4 << 20

_lock = threading.Lock()
_threads = max(1, min(os.cpu_count() or 1, 2))
_pool: ThreadPoolExecutor | None = None


_local = threading.local()  # per-thread cap on the threads a kernel may split into


class limit:
    """``with limit(n):`` kernels called on this thread split into at most ``n`` chunks.

    The runtime uses ``limit(1)`` for an op that may run beside another heavy op:
    those already keep both cores busy, and splitting them as well oversubscribes.
    """

    def __init__(self, n: int) -> None:
        self.n = n

    def __enter__(self) -> None:
        self.saved = getattr(_local, "cap", None)
        _local.cap = self.n

    def __exit__(self, *exc: object) -> None:
        _local.cap = self.saved


def set_threads(n: int) -> None:
    """Set how many threads a kernel may use for its row chunks (>= 1)."""
    global _threads
    _threads = max(1, int(n))


def get_threads() -> int:
    return _threads


def _get_pool() -> ThreadPoolExecutor:
    global _pool
    with _lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=max(1, (os.cpu_count() or 2)), thread_name_prefix="gradir-chunk")
        return _pool


def threads_here() -> int:
    """How many threads a kernel called on this thread may use (``set_threads``, capped by ``limit``)."""
    cap = getattr(_local, "cap", None)
    return _threads if cap is None else min(_threads, cap)


_blas_lock = threading.Lock()
_blas_held: list[int] = []  # the limits asked for by the users inside a blas_limit now
_blas_saved = None  # threadpoolctl's record of the counts before the first of them came in
_blas_cap = 1  # the smallest BLAS thread count then: a limit never raises the count
_blas_controller = None


def _as_controller(call: Callable[[], object]) -> object:
    """Run a threadpoolctl call that sets BLAS thread counts, from whichever thread.

    threadpoolctl >= 3.8 lets only one "controlling" thread set a process-wide (pthreads)
    OpenBLAS's thread count and silently ignores the others.  ``blas_limit``'s counted state
    already decides who acts, so the call takes control and gives it back afterwards."""
    try:
        from threadpoolctl import OpenBLASController
        clear = getattr(OpenBLASController, "clear_controlling_thread", None)
    except ImportError:
        clear = None
    if clear is not None:
        clear(force=True)
    try:
        return call()
    finally:
        if clear is not None:
            clear(force=True)


class blas_limit:
    """``with blas_limit(n):`` hold BLAS (process-wide, through threadpoolctl) to at most ``n``
    threads.  Counted across threads: overlapping users need not leave in the order they came
    nor from the thread they came in on, the smallest limit held applies (never more threads
    than BLAS had before the first came in), and the last one out restores what was set then."""

    def __init__(self, n: int) -> None:
        self.n = max(1, int(n))

    def __enter__(self) -> "blas_limit":
        global _blas_saved, _blas_controller, _blas_cap
        with _blas_lock:
            if _blas_controller is None:
                from threadpoolctl import ThreadpoolController
                _blas_controller = ThreadpoolController()
            ctl = _blas_controller
            if not _blas_held:
                counts = [i["num_threads"] for i in ctl.select(user_api="blas").info()]
                _blas_cap = max(1, min(counts, default=1))
                n = min(self.n, _blas_cap)
                _blas_saved = _as_controller(lambda: ctl.limit(limits=n, user_api="blas"))
            elif self.n < min(_blas_held) and self.n < _blas_cap:
                _as_controller(lambda: ctl.limit(limits=self.n, user_api="blas"))
            _blas_held.append(self.n)
        return self

    def __exit__(self, *exc: object) -> None:
        global _blas_saved
        with _blas_lock:
            _blas_held.remove(self.n)
            if not _blas_held:
                saved, _blas_saved = _blas_saved, None
                if saved is not None:
                    _as_controller(saved.restore_original_limits)
            elif self.n < min(_blas_held) and self.n < _blas_cap:
                n = min(min(_blas_held), _blas_cap)
                _as_controller(lambda: _blas_controller.limit(limits=n, user_api="blas"))


# OpenBLAS pool threads that spin at most 2**22 TSC cycles (~1.5 ms) after a call count as idle.
_SPIN_MAX = 22
_idle_sleep: bool | None = None


def blas_idle_threads_sleep() -> bool:
    """Whether BLAS's own pool threads leave the cores alone soon (~1 ms) after a call: an
    OpenBLAS (pthreads) whose spin was shortened before it loaded (``gradir._blasenv``; also
    true for any BLAS held to one thread).  A kernel that runs its own BLAS calls on two
    threads needs this; otherwise threads that spin for 0.1 s after the last multi-threaded
    call (OpenBLAS's default, or an OpenMP runtime's) take a core from it."""
    global _idle_sleep
    if _idle_sleep is None:
        from threadpoolctl import ThreadpoolController

        from .. import _blasenv
        ok = True
        for info in ThreadpoolController().select(user_api="blas").info():
            if info["num_threads"] <= 1:
                continue
            ok = ok and (info["internal_api"] == "openblas" and info.get("threading_layer") == "pthreads"
                         and _blasenv.EFFECTIVE <= _SPIN_MAX)
        _idle_sleep = ok
    return _idle_sleep


def run_two(first: Callable[[threading.Event], None], second: Callable[[threading.Event], None],
            concurrent: bool) -> None:
    """Run ``second`` on the pool beside ``first`` on this thread (``concurrent``), or one after
    the other.  Each gets a shared ``threading.Event`` that is set when the other failed (or
    Ctrl-C reached this thread), so a long body can stop early; the first error is raised."""
    stop = threading.Event()
    if not concurrent:
        first(stop)
        second(stop)
        return
    err = np.geterr()

    def body() -> None:
        with np.errstate(**err):
            try:
                second(stop)
            except BaseException:
                stop.set()
                raise

    future = _get_pool().submit(body)
    try:
        first(stop)
    except BaseException:
        stop.set()
        try:  # wait: nothing may write into the caller's buffers after this returns
            future.result()
        except BaseException:
            pass
        raise
    future.result()  # the helper's error, if it had one


def blas_threads() -> int:
    """How many threads BLAS may use for a call now (the smallest over its libraries), counting
    the ``blas_limit`` held by any thread."""
    global _blas_controller
    with _blas_lock:
        if _blas_held:
            return min(min(_blas_held), _blas_cap)
        if _blas_controller is None:
            from threadpoolctl import ThreadpoolController
            _blas_controller = ThreadpoolController()
        counts = [i["num_threads"] for i in _blas_controller.select(user_api="blas").info()]
    return max(1, min(counts, default=1))


def parallel_rows(n_rows: int, bytes_per_row: int, body: Callable[[int, int], None]) -> None:
    """Call ``body(start, stop)`` over ``[0, n_rows)`` in contiguous row ranges.

    ``bytes_per_row`` is the memory a row touches (all operands and results); it
    decides whether splitting pays.  The calling thread runs the first chunk.
    """
    threads = threads_here()
    if threads <= 1 or n_rows < 2 or n_rows * bytes_per_row < 2 * MIN_CHUNK_BYTES:
        body(0, n_rows)
        return
    n = min(threads, n_rows, max(1, (n_rows * bytes_per_row) // MIN_CHUNK_BYTES))
    bounds = [n_rows * k // n for k in range(n + 1)]
    pool = _get_pool()
    err = np.geterr()  # NumPy's error state is per thread: the chunks follow the caller's

    def chunk(lo: int, hi: int) -> None:
        with np.errstate(**err):
            body(lo, hi)

    futures = [pool.submit(chunk, bounds[k], bounds[k + 1]) for k in range(1, n)]
    body(bounds[0], bounds[1])
    for f in futures:
        f.result()
