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
    """``with pinned(claimed) as cpu:`` this thread runs on one CPU for the block: the one it is
    on, unless another thread of the same parallel section claimed that one already (``claimed``,
    a set shared by the section's threads), then one nobody claimed.  The CPU is added to
    ``claimed`` and taken out again at the end, and the thread's own CPU mask is given back.

    Why: Linux places a woken thread on the CPU of the thread that woke it when it sees no idle
    CPU at that instant, and on these VMs also when the other CPU has gone idle (a halted vCPU
    reads as preempted, not idle).  Every wake-up of a parallel section (a helper given work,
    the GIL passed back) can so put both threads on one core, 4 ms slices each, until load
    balancing moves one 10-15 ms later: in ``perf sched``, a 2-core product took 16-19 ms
    instead of 12, and an element-wise chain after 50 ms idle ran at one thread's speed.
    Pinned threads can only be woken where they are pinned.  Where the affinity calls are
    missing or refused, or the thread may use one CPU only, nothing changes."""

    def __init__(self, claimed: set) -> None:
        self.claimed = claimed
        self.mask: set | None = None
        self.cpu = -1

    def __enter__(self) -> int:
        cpu = current_cpu()
        if cpu < 0 or not PIN:
            return cpu
        try:
            mask = os.sched_getaffinity(0)
        except (OSError, AttributeError):
            return cpu
        with _pin_lock:
            if cpu in self.claimed or cpu not in mask:
                free = sorted(mask - self.claimed)
                if free:
                    cpu = free[0]
            self.claimed.add(cpu)
            self.cpu = cpu
        if len(mask) > 1:
            try:
                os.sched_setaffinity(0, {cpu})
                self.mask = mask
            except OSError:
                pass
        return cpu

    def __exit__(self, *exc: object) -> None:
        if self.mask is not None:
            try:
                os.sched_setaffinity(0, self.mask)
            except OSError:
                pass
        with _pin_lock:
            self.claimed.discard(self.cpu)


_pin_lock = threading.Lock()
try:  # the CPUs this process may use, read before any thread of ours was pinned
    ALLOWED_CPUS: frozenset = frozenset(os.sched_getaffinity(0))
except (OSError, AttributeError):
    ALLOWED_CPUS = frozenset()


def unpinned_thread() -> None:
    """The initializer of gradir's thread pools: a new thread inherits the CPU mask of the thread
    that started it, which may be pinned (``pinned``) at that moment; a pool thread may use every
    CPU the process may."""
    if len(ALLOWED_CPUS) > 1:
        try:
            os.sched_setaffinity(0, ALLOWED_CPUS)
        except OSError:
            pass


def let_helpers_start(here: int) -> None:
    """Right after waking helpers: give up this CPU for a moment, so that a helper Linux queued on
    it (see ``pinned``) runs now and pins itself to another CPU, rather than waiting behind this
    thread for the next scheduler tick (up to 4 ms; seen as 1.8 ms in ``perf sched``).  Where no
    helper is queued here, the call returns at once."""
    if here >= 0:
        os.sched_yield()
