"""The dataflow executor's choices about cores (``gradir.backends.cpu.executor``): how many a starting step
gets, which ready steps count as about as critical, and when a ready step waits although a
core is free.  Plain functions of the plan's estimates (``Step.cost``, ``width``, ``priority``)
and of the steps running (start time, cores); tests replace ``grant`` to force allotments."""

from __future__ import annotations

import time

from ...transforms.schedule import Step

__all__ = ["SHARE", "defer", "wait_for_cores", "grant"]


# A ready step whose priority and cost are both at least this share of the starting step's is
# about as critical: a starting step (not a product) leaves it a core (equal branches side by side).
SHARE = 0.5


def defer(step: Step, running: dict[int, tuple[float, int]], steps: list[Step],
           dependents: list[list[int]]) -> bool:
    """Whether ``step`` should wait although a core is free: a running step's path is much
    longer (its priority times ``SHARE`` is above ``step``'s), a step after it can use several
    cores, and ``step`` would still hold the core when it ends (estimated).  The core is kept for
    the critical path's next step, which would otherwise run on fewer cores all its length."""
    now = time.perf_counter()
    for k, (t0, cores) in running.items():
        r = steps[k]
        if (SHARE * r.priority > step.priority and any(steps[d].width > 1 for d in dependents[k])
                and step.cost > r.cost / max(1, cores) - (now - t0)):
            return True
    return False


def wait_for_cores(step: Step, free: int, running: dict[int, tuple[float, int]], steps: list[Step]) -> bool:
    """Whether a product that could use more cores than are free should wait for a running step
    about to end (estimated time left under a quarter of the product's time on those cores)
    rather than start on fewer and stay on them for all its length."""
    if not step.kernel.blas or step.width <= free:
        return False
    now = time.perf_counter()
    return any(steps[k].cost / max(1, c) - (now - t0) < 0.25 * step.cost / min(step.width, free + c)
               for k, (t0, c) in running.items())


def grant(step: Step, free: int) -> int:
    """The cores a step starting now gets: those free (less one for each ready step about as
    critical), up to what it can use (``Step.width``), at least one.  (Tests replace this to
    force other allotments: results must not change.)"""
    return max(1, min(step.width, free))
