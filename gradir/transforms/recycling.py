"""Which freed buffers a backend's buffer pool may keep for a later result, without raising the
planned peak (``Plan.recycle``).

A pool that keeps every freed buffer "in case" holds memory the plan has already given back: the
LSTM LM's run held 8 MB of pooled buffers at 5.8 MB planned (tests/test_memory_measured.py), and
across runs the pool kept one buffer of every shape it had ever freed.  So the plan decides: a value
freed at step ``i`` is kept when the first later step (in this run, or, wrapping round, in the next)
that makes a result of its dtype and shape can take it, and holding it until then keeps the planned
bytes (``Plan.curve``, plus what is already held) at or under the peak at every step between.  The
outputs of a run go back to the pool (once their caller dropped them) by the same rule, from the end
of the run.  Anything else is dropped when freed: the allocator returns it, and the page faults of a
fresh buffer are the price of the peak the plan promised.  The earliest taker is the only one tried:
holding for a later one covers the same steps and more.
"""

from __future__ import annotations

from typing import Any

__all__ = ["recycled"]


def recycled(steps: list[Any], types: dict, curve: list[int], peak: int, inputs: set[str],
             outputs: list[str], views: dict[str, str]) -> set[str]:
    """The values (freed intermediates and graph outputs) whose buffers the pool may keep; ``steps``
    are ``schedule.Step``s with their liveness and in-place reuse decided, ``curve`` and ``peak`` the
    planned bytes (static shapes)."""
    n = len(steps)
    takes: dict[tuple, list[int]] = {}  # (dtype, shape) -> steps making a fresh result of it, in order
    for st in steps:
        if st.view or st.tiny:  # a tiny step's result is not taken from the pool by the straight-line code
            continue
        for j, r in enumerate(st.results):
            t = types.get(r)
            if j not in st.inplace and t is not None and t.is_static and t.rank > 0:
                takes.setdefault(_key(t), []).append(st.index)
    taken: dict[tuple, set[int]] = {k: set() for k in takes}
    held = [0] * n
    keep: set[str] = set()

    def match(v: str, after: int) -> None:
        """Keep ``v`` (freed after step ``after``; ``n - 1`` for the run's end) for its first taker."""
        t = types.get(v)
        if t is None or not t.is_static or t.rank == 0 or v in inputs or v in views:  # a view's buffer is not its own
            return
        key = _key(t)
        cands = takes.get(key)
        if not cands:
            return
        free = [j for j in cands if j not in taken[key]]
        if not free:
            return
        later = [j for j in free if j > after]
        j = later[0] if later else free[0]
        span = range(after + 1, j) if j > after else list(range(after + 1, n)) + list(range(0, j))
        b = t.nbytes or 0
        if any(curve[k] + held[k] + b > peak for k in span):
            return
        for k in span:
            held[k] += b
        taken[key].add(j)
        keep.add(v)

    for st in steps:
        donors = {st.operands[i] for i in st.inplace.values()}
        for v in st.free_after:
            if v not in donors:
                match(v, st.index)
    for v in dict.fromkeys(outputs):
        match(v, n - 1)
    return keep


def _key(t: Any) -> tuple:
    return (t.dtype, tuple(t.shape))
