"""Where gradir's threads run: each thread of a parallel section (a kernel's blocks or row chunks,
the two halves of an LSTM loop, concurrent steps of a run) pinned to a CPU of its own for the
section's length (``pinned``).

Linux places a woken thread on the CPU of the thread that woke it when it sees no idle CPU at
that instant, and on the VMs measured also when the other CPU had gone idle; the two threads
then share one core until load balancing moves one, 10-15 ms later.  ``perf sched`` showed it
for a 2-core product (16-19 ms instead of 12) and for an element-wise chain after 50 ms idle
(at one thread's speed: 26 instead of 16.5 ms).
"""

from __future__ import annotations

import os
import threading

__all__ = ["ALLOWED_CPUS", "PIN", "current_cpu", "pinned", "unpinned_thread", "let_helpers_start"]

# GRADIR_PIN_THREADS=0: never pin (a program that places its threads itself); read at import
PIN = os.environ.get("GRADIR_PIN_THREADS", "").strip() != "0"

_getcpu = None  # libc's sched_getcpu, False where there is none


def current_cpu() -> int:
    """The CPU this thread runs on now (-1 where that cannot be asked)."""
    global _getcpu
    if _getcpu is None:
        try:
            import ctypes
            f = ctypes.CDLL(None).sched_getcpu
            f.restype, f.argtypes = ctypes.c_int, []
            _getcpu = f
        except (OSError, AttributeError):
            _getcpu = False
    return _getcpu() if _getcpu else -1


class pinned:
    """``with pinned() as cpu:`` this thread runs on one CPU for the block: the one it is on, unless
    another pinned thread of gradir holds that one, then a CPU of its mask that none holds; when
    every CPU of its mask is held, it is not pinned.  At the end the claim is given back and the
    thread's CPU mask restored.  Nested, it is a no-op (the thread stays where the outer block
    put it).

    Why: Linux places a woken thread on the CPU of the thread that woke it when it sees no idle
    CPU at that instant, and on these VMs also when the other CPU has gone idle (a halted vCPU
    reads as preempted, not idle).  Every wake-up of a parallel section (a helper given work,
    the GIL passed back) can so put both threads on one core, 4 ms slices each, until load
    balancing moves one 10-15 ms later: in ``perf sched``, a 2-core product took 16-19 ms
    instead of 12, and an element-wise chain after 50 ms idle ran at one thread's speed.
    Pinned threads can only be woken where they are pinned.  Where the affinity calls are
    missing or refused, with ``GRADIR_PIN_THREADS=0``, or where the thread may use one CPU
    only, nothing is pinned."""

    def __init__(self) -> None:
        self.mask: set | None = None
        self.cpu = -1
        self.outer = False

    def __enter__(self) -> int:
        cpu = current_cpu()
        if cpu < 0 or not PIN:
            return cpu
        if getattr(_local, "pinned", -1) >= 0:  # nested: already pinned by an outer block
            return _local.pinned
        try:
            mask = os.sched_getaffinity(0)
        except (OSError, AttributeError):
            return cpu
        if len(mask) < 2:
            return cpu
        with _pin_lock:
            if _claims.get(cpu, 0) or cpu not in mask:
                free = sorted(c for c in mask if not _claims.get(c, 0))
                if not free:
                    return cpu  # every CPU held: share, unpinned, as without pinning
                cpu = free[0]
            _claims[cpu] = _claims.get(cpu, 0) + 1
            self.cpu = cpu
        global _base_mask
        _base_mask = frozenset(mask)  # what an unpinned thread of ours may use now
        try:
            os.sched_setaffinity(0, {cpu})
            self.mask = mask
        except OSError:
            pass
        _local.pinned = cpu
        self.outer = True
        return cpu

    def __exit__(self, *exc: object) -> None:
        if not self.outer:
            return
        _local.pinned = -1
        if self.mask is not None:
            try:
                os.sched_setaffinity(0, self.mask)
            except OSError:
                pass
        with _pin_lock:
            n = _claims.get(self.cpu, 0) - 1
            if n > 0:
                _claims[self.cpu] = n
            else:
                _claims.pop(self.cpu, None)


_pin_lock = threading.Lock()
_claims: dict[int, int] = {}  # CPU -> how many pinned threads of gradir hold it now
_local = threading.local()  # ``pinned``: the CPU this thread is pinned to (-1: none)
try:  # the CPUs this process may use, read before any thread of ours was pinned
    ALLOWED_CPUS: frozenset = frozenset(os.sched_getaffinity(0))
except (OSError, AttributeError):
    ALLOWED_CPUS = frozenset()
_base_mask = ALLOWED_CPUS  # the mask of the last thread that was pinned, before it was


def unpinned_thread() -> None:
    """The initializer of gradir's thread pools: a new thread inherits the CPU mask of the thread
    that started it, which may be pinned (``pinned``) at that moment; a pool thread gets the mask
    that thread had before it was pinned (``ALLOWED_CPUS`` before any was)."""
    if len(_base_mask) > 1:
        try:
            os.sched_setaffinity(0, _base_mask)
        except OSError:
            pass


def let_helpers_start() -> None:
    """Right after waking helpers: give up this CPU for a moment, so that a helper Linux queued on
    it (see ``pinned``) runs now and pins itself to another CPU, rather than waiting behind this
    thread for the next scheduler tick (up to 4 ms; seen as 1.8 ms in ``perf sched``).  Where no
    helper is queued here, the call returns at once."""
    if hasattr(os, "sched_yield"):
        os.sched_yield()
