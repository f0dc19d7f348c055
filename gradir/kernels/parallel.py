"""Intra-op parallelism: split a large kernel into row chunks run on a small pool.

The runtime sets the number of threads (``set_threads``); kernels call
``parallel_rows``.  Work below ~1 ms per chunk runs inline on the calling thread,
because a pool round trip here costs ~100 µs (measured here; docs/performance.md).  The split only
depends on the array shape and the thread count, and each chunk computes exactly
what the whole would for its rows, so results are identical for any thread count.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable

import numpy as np

__all__ = ["set_threads", "get_threads", "threads_here", "parallel_rows", "blas_limit", "blas_threads",
           "own_blas_threads", "run_two", "blas_idle_threads_sleep", "MIN_CHUNK_BYTES"]

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


def _controller():  # type: ignore[no-untyped-def]
    """threadpoolctl's controller of the loaded libraries (made once; call with _blas_lock held)."""
    global _blas_controller
    if _blas_controller is None:
        from threadpoolctl import ThreadpoolController
        _blas_controller = ThreadpoolController()
    return _blas_controller


def _blas_threads_locked() -> int:
    if _blas_held:
        return min(min(_blas_held), _blas_cap)
    counts = [i["num_threads"] for i in _controller().select(user_api="blas").info()]
    return max(1, min(counts, default=1))


class blas_limit:
    """``with blas_limit(n):`` hold BLAS (process-wide, through threadpoolctl) to at most ``n``
    threads.  Counted across threads: overlapping users need not leave in the order they came
    nor from the thread they came in on, the smallest limit held applies (never more threads
    than BLAS had before the first came in), and the last one out restores what was set then."""

    def __init__(self, n: int) -> None:
        self.n = max(1, int(n))

    def __enter__(self) -> "blas_limit":
        with _blas_lock:
            self._enter_locked()
        return self

    def _enter_locked(self) -> None:
        global _blas_saved, _blas_cap
        ctl = _controller()
        if not _blas_held:
            counts = [i["num_threads"] for i in ctl.select(user_api="blas").info()]
            _blas_cap = max(1, min(counts, default=1))
            n = min(self.n, _blas_cap)
            _blas_saved = _as_controller(lambda: ctl.limit(limits=n, user_api="blas"))
        elif self.n < min(_blas_held) and self.n < _blas_cap:
            _as_controller(lambda: ctl.limit(limits=self.n, user_api="blas"))
        _blas_held.append(self.n)

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
                _as_controller(lambda: _controller().limit(limits=n, user_api="blas"))


def blas_threads() -> int:
    """How many threads BLAS may use for a call now (the smallest over its libraries), counting
    the ``blas_limit`` held by any thread."""
    with _blas_lock:
        return _blas_threads_locked()


class own_blas_threads:
    """``with own_blas_threads(wanted) as held:`` for a kernel that would run its BLAS calls on
    its own two threads, each with single-threaded BLAS.  When ``wanted``, and unless someone
    holds BLAS to more than one thread (the runtime, for ops that run beside this one: lowering
    the count under them would change their bits), BLAS is held to one thread (``held.ok``);
    ``held.threads`` is how many it could use before, the cores the kernel may take in its
    place.  Checked and entered at once, so no other holder comes in between."""

    def __init__(self, wanted: bool = True) -> None:
        self.wanted = wanted
        self.ok = False
        self.threads = 1
        self._limit: blas_limit | None = None

    def __enter__(self) -> "own_blas_threads":
        if self.wanted:
            with _blas_lock:
                self.threads = _blas_threads_locked()
                if not (_blas_held and min(_blas_held) > 1):
                    self._limit = blas_limit(1)
                    self._limit._enter_locked()
                    self.ok = True
        return self

    def __exit__(self, *exc: object) -> None:
        if self._limit is not None:
            self._limit.__exit__(*exc)
            self._limit = None


# OpenBLAS pool threads that spin at most 2**22 TSC cycles (~1.5 ms) after a call count as idle.
_SPIN_MAX = 22
_idle_sleep: bool | None = None


def blas_idle_threads_sleep() -> bool:
    """Whether BLAS's own pool threads leave the cores alone soon (~1 ms) after a call: every
    loaded BLAS is an OpenBLAS (pthreads) whose spin was shortened before it loaded
    (``gradir._blasenv``).  A process constant (whatever limits are held now).  A kernel that
    runs its own BLAS calls on two threads needs this; otherwise threads that spin for 0.1 s
    after the last multi-threaded call (OpenBLAS's default, or an OpenMP runtime's) take a
    core from it."""
    global _idle_sleep
    if _idle_sleep is None:
        from .. import _blasenv
        with _blas_lock:
            infos = _controller().select(user_api="blas").info()
        _idle_sleep = bool(infos) and _blasenv.EFFECTIVE <= _SPIN_MAX and all(
            i["internal_api"] == "openblas" and i.get("threading_layer") == "pthreads" for i in infos)
    return _idle_sleep


def _wait(future: Future) -> None:
    """Wait until ``future`` has finished, whatever it raised, through any number of Ctrl-C."""
    while True:
        try:
            future.result()
            return
        except KeyboardInterrupt:
            if future.done():
                return
        except BaseException:
            return


def run_two(first: Callable[[threading.Event], None], second: Callable[[threading.Event], None],
            concurrent: bool) -> None:
    """Run ``second`` on the pool beside ``first`` on this thread (``concurrent``), or one after
    the other.  Each gets a shared ``threading.Event`` that is set when the other failed (or
    Ctrl-C reached this thread), so a long body can stop early; the first error is raised, and
    never before both have finished (nothing writes into the caller's buffers afterwards)."""
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
        _wait(future)
        raise
    try:
        future.result()  # the helper's error, if it had one
    except KeyboardInterrupt:  # Ctrl-C while waiting for the helper
        stop.set()
        _wait(future)
        raise


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
