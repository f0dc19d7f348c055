"""Intra-op parallelism: how many cores a kernel call may use, and the helpers that split
its work over them (row chunks, fixed blocks, two halves).

The runtime gives each step the cores that are free when it starts (``gradir.backends.cpu.executor``)
and runs the kernel inside ``with cores(n):``, a per-thread setting: two runs on different
threads, or two steps of one run, each see their own.  A kernel asks ``threads_here()``.
Outside any run (a kernel called directly, the compile-time constant folding) the process
default applies (``set_threads``; the number of cores, at most 2).

Work below ~1 ms per chunk runs inline on the calling thread, because a pool round trip
here costs ~100 µs (measured here; docs/performance.md).  How a kernel splits its work
never depends on how many threads it got, or each part computes exactly what the whole
would for its rows, so results are identical for any number of cores.
"""

from __future__ import annotations

import itertools
import os
import sys
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable

import numpy as np

from .cpus import ALLOWED_CPUS, current_cpu, let_helpers_start as _let_helpers_start, pinned, unpinned_thread

__all__ = ["set_threads", "get_threads", "cores", "threads_here", "parallel_rows", "run_blocks",
           "blas_limit", "blas_threads", "own_blas_threads", "run_two", "blas_idle_threads_sleep",
           "current_cpu", "pinned", "unpinned_thread", "ALLOWED_CPUS", "MIN_CHUNK_BYTES"]

# Below this many bytes touched per chunk, splitting costs more than it saves.
MIN_CHUNK_BYTES = 4 << 20

_lock = threading.Lock()
_threads = max(1, min(os.cpu_count() or 1, 2))
_pool: ThreadPoolExecutor | None = None


_local = threading.local()  # ``n``: the cores given to the kernel running on this thread


class cores:
    """``with cores(n):`` kernels called on this thread may use ``n`` threads (the calling one
    included).  The runtime sets it around each step to the cores that step was given."""

    def __init__(self, n: int) -> None:
        self.n = max(1, int(n))

    def __enter__(self) -> "cores":
        self.saved = getattr(_local, "n", None)
        _local.n = self.n
        return self

    def __exit__(self, *exc: object) -> None:
        _local.n = self.saved


def set_threads(n: int) -> None:
    """Set how many threads a kernel called outside a run may use (>= 1); runs set their own
    per step (``cores``) and never change this."""
    global _threads
    _threads = max(1, int(n))


def get_threads() -> int:
    return _threads


def _get_pool() -> ThreadPoolExecutor:
    global _pool
    with _lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=max(1, (os.cpu_count() or 2)), thread_name_prefix="gradir-chunk",
                                       initializer=unpinned_thread)
        return _pool


def threads_here() -> int:
    """How many threads a kernel called on this thread may use: what ``cores`` gave it, else
    the process default (``set_threads``)."""
    n = getattr(_local, "n", None)
    return _threads if n is None else n


_blas_lock = threading.Lock()
_blas_held: list[int] = []  # the limits asked for by the users inside a blas_limit now
_blas_saved: list[int] | None = None  # each library's thread count before the first of them came in
_blas_cap = 1  # the smallest BLAS thread count then: a limit never raises the count
_blas_controller = None
_blas_libs: list | None = None
_blas_scanned = 0  # len(sys.modules) at the last look for BLAS libraries


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


def _libs(rescan: bool = False) -> list:
    """threadpoolctl's controllers of the loaded BLAS libraries (call with _blas_lock held).
    Their ``get_num_threads``/``set_num_threads`` are a C call each (~1 µs), where a
    ``ThreadpoolController.limit`` reads every library's info first (~30 µs a run).  With
    ``rescan`` (nobody holds a limit), libraries loaded since (a BLAS that came with a package
    imported since: SciPy's, PyTorch's) are looked for again when Python modules were imported
    since the last look (a scan takes ~0.2 ms; counting modules, nothing)."""
    global _blas_libs, _blas_controller, _blas_scanned
    mods = len(sys.modules)
    if _blas_libs is None or (rescan and mods != _blas_scanned):
        if _blas_libs is not None:
            _blas_controller = None  # a new controller finds the libraries loaded now
        _blas_libs = list(_controller().select(user_api="blas").lib_controllers)
        _blas_scanned = mods
    return _blas_libs


def _counts() -> list[int]:
    return [max(1, lib.get_num_threads() or 1) for lib in _libs()]


def _set(counts: list[int]) -> None:
    def call() -> None:
        for lib, n in zip(_libs(), counts):
            lib.set_num_threads(n)
    _as_controller(call)


def _blas_threads_locked() -> int:
    if _blas_held:
        return min(min(_blas_held), _blas_cap)
    _libs(rescan=True)
    return min(_counts(), default=1)


class blas_limit:
    """``with blas_limit(n):`` hold BLAS (process-wide: OpenBLAS has one thread count for the
    whole process) to at most ``n`` threads.  Counted across threads: overlapping users need not
    leave in the order they came nor from the thread they came in on, the smallest limit held
    applies (never more threads than BLAS had before the first came in), and the last one out
    restores what was set then."""

    def __init__(self, n: int) -> None:
        self.n = max(1, int(n))

    def __enter__(self) -> "blas_limit":
        with _blas_lock:
            self._enter_locked()
        return self

    def _enter_locked(self) -> None:
        global _blas_saved, _blas_cap
        if not _blas_held:
            _libs(rescan=True)
            _blas_saved = _counts()
            _blas_cap = min(_blas_saved, default=1)
            if any(c > self.n for c in _blas_saved):
                _set([min(c, self.n) for c in _blas_saved])
        elif self.n < min(_blas_held) and self.n < _blas_cap:
            _set([min(c, self.n) for c in _blas_saved or []])
        _blas_held.append(self.n)

    def __exit__(self, *exc: object) -> None:
        global _blas_saved
        with _blas_lock:
            _blas_held.remove(self.n)
            if not _blas_held:
                saved, _blas_saved = _blas_saved, None
                if saved is not None and _counts() != saved:
                    _set(saved)
            elif self.n < min(_blas_held) and self.n < _blas_cap:
                n = min(_blas_held)
                _set([min(c, n) for c in _blas_saved or []])


def blas_threads() -> int:
    """How many threads BLAS may use for a call now (the smallest over its libraries), counting
    the ``blas_limit`` held by any thread."""
    with _blas_lock:
        return _blas_threads_locked()


class own_blas_threads:
    """``with own_blas_threads(wanted) as held:`` for a kernel that runs its BLAS calls on its
    own threads (``threads_here()`` of them), each with single-threaded BLAS.  When ``wanted``,
    and unless someone holds BLAS to more than one thread (lowering the count under them would
    change their bits), BLAS is held to one thread (``held.ok``; inside a run the runtime already
    holds it there).  ``held.threads`` is how many threads the kernel may use.  Checked and
    entered at once, so no other holder comes in between."""

    def __init__(self, wanted: bool = True) -> None:
        self.wanted = wanted
        self.ok = False
        self.threads = 1
        self._limit: blas_limit | None = None

    def __enter__(self) -> "own_blas_threads":
        if self.wanted:
            with _blas_lock:
                if not (_blas_held and min(_blas_held) > 1):
                    self._limit = blas_limit(1)
                    self._limit._enter_locked()
                    self.ok = True
                    self.threads = threads_here()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._limit is not None:
            self._limit.__exit__(*exc)
            self._limit = None


def blas_single() -> bool:
    """Whether BLAS is held to one thread now (inside a run with BLAS steps it is)."""
    held = _blas_held  # read without the lock: a holder around this call stays for its length
    return bool(held) and min(held, default=2) == 1


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
        from .... import _blasenv
        with _blas_lock:
            infos = _controller().select(user_api="blas").info()
        _idle_sleep = bool(infos) and _blasenv.EFFECTIVE <= _SPIN_MAX and all(
            i["internal_api"] == "openblas" and i.get("threading_layer") == "pthreads" for i in infos)
    return _idle_sleep


_openblas_only: tuple[int, bool] = (-1, False)


def openblas_only() -> bool:
    """Whether every loaded BLAS is an OpenBLAS (looked at again when modules were imported since)."""
    global _openblas_only
    mods = len(sys.modules)
    if _openblas_only[0] != mods:
        with _blas_lock:
            infos = _controller().select(user_api="blas").info()
        _openblas_only = (mods, bool(infos) and all(i["internal_api"] == "openblas" for i in infos))
    return _openblas_only[1]


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
            concurrent: bool, on_stop: Callable[[], None] | None = None) -> None:
    """Run ``second`` on the pool beside ``first`` on this thread (``concurrent``), or one after
    the other.  Each gets a shared ``threading.Event`` that is set when the other failed (or
    Ctrl-C reached this thread), so a long body can stop early; ``on_stop`` (if given) is called
    then too, e.g. to break a barrier the two bodies meet at.  The first error is raised, and
    never before both have finished (nothing writes into the caller's buffers afterwards)."""
    stop = threading.Event()

    def stopped() -> None:
        stop.set()
        if on_stop is not None:
            on_stop()

    if not concurrent:
        first(stop)
        second(stop)
        return
    err = np.geterr()

    def body() -> None:
        with pinned(), np.errstate(**err):
            try:
                second(stop)
            except BaseException:
                stopped()
                raise

    with pinned():
        future = None
        try:  # a Ctrl-C anywhere from here on stops the helper too
            future = _get_pool().submit(body)
            _let_helpers_start()
            first(stop)
        except BaseException:
            stopped()
            if future is not None:
                _wait(future)
            raise
        try:
            future.result()  # the helper's error, if it had one
        except KeyboardInterrupt:  # Ctrl-C while waiting for the helper
            stopped()
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
        with pinned(), np.errstate(**err):
            body(lo, hi)

    with pinned():
        futures = [pool.submit(chunk, bounds[k], bounds[k + 1]) for k in range(1, n)]
        _let_helpers_start()
        body(bounds[0], bounds[1])
        for f in futures:
            f.result()


def run_blocks(n_blocks: int, body: Callable[[int], None]) -> None:
    """Call ``body(i)`` for every ``i`` in ``range(n_blocks)``, on up to ``threads_here()``
    threads (this one included), each taking the next block not yet taken.  The blocks are
    the caller's (fixed by its shapes), so which thread computes which block, and how many
    threads there are, changes nothing in the results.  Every helper has finished before this
    returns or raises (nothing writes into the caller's buffers afterwards)."""
    threads = min(threads_here(), n_blocks)
    if threads <= 1:
        for i in range(n_blocks):
            body(i)
        return
    counter = itertools.count()  # next() on it is atomic under the GIL
    stop = threading.Event()
    err = np.geterr()

    def drain() -> None:
        while not stop.is_set():
            i = next(counter)
            if i >= n_blocks:
                return
            try:
                body(i)
            except BaseException:
                stop.set()
                raise

    def helper() -> None:
        with pinned(), np.errstate(**err):
            drain()

    with pinned():
        futures = [_get_pool().submit(helper) for _ in range(threads - 1)]
        _let_helpers_start()
        try:
            drain()
        except BaseException:
            for f in futures:
                _wait(f)
            raise
    first: BaseException | None = None
    for f in futures:
        if f.cancel():  # still queued (the pool is busy elsewhere): every block is done already
            continue
        try:
            f.result()
        except KeyboardInterrupt:
            stop.set()
            for g in futures:
                _wait(g)
            raise
        except BaseException as e:  # noqa: BLE001 - re-raised once every helper is done
            first = first or e
    if first is not None:
        raise first
