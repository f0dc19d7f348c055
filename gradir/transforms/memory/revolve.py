"""Binomial checkpointing (Griewank's *revolve*) of a chain of uniform units, and the LSTM plans built on it.

A chain of ``n`` units maps states ``x_0 -> x_1 -> ... -> x_n``; reversing unit ``i`` (its backward) needs
``x_i`` in hand.  With ``s`` snapshot slots, one of which holds ``x_0`` throughout, the least number of
unit *advances* (forward evaluations that keep no tape) that reverses the whole chain is

    t(n, s) = r·n - β(s + 1, r - 1),   β(s, r) = C(s + r, s),

where ``r`` (the repetition number: no unit is advanced more than ``r`` times) is the least integer with
``n <= β(s, r)`` (Griewank 1992; Griewank & Walther 2000).  ``schedule`` gives one optimal sequence of
actions; ``min_advances`` the closed form (tests check both against the dynamic program
``F(n, s) = min_m m + F(n - m, s - 1) + F(m, s)``).

For an LSTM layer the first descent of the schedule (``x_0`` to ``x_{n-1}``, taking snapshots) is the
forward op's own sweep, which computes every step anyway; the backward runs the rest.  Every unit is
recomputed once more with its tape before it is reversed, so the backward's recomputed units are
``t(n, s) - (n - 1) + n``: ``n`` (one extra forward) when every unit boundary is a snapshot.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from math import comb
from typing import Callable

__all__ = ["Action", "beta", "repetitions", "min_advances", "schedule", "split_point", "LSTMLayerPlan",
           "lstm_plans", "descent", "backward_actions", "recomputed_units", "max_recomputations"]


def beta(s: int, r: int) -> int:
    """``β(s, r) = C(s + r, s)``: the longest chain ``s`` slots reverse with ``r`` repetitions (0 if r < 0)."""
    return comb(s + r, s) if r >= 0 and s >= 0 else 0


def repetitions(n: int, s: int) -> int:
    """The least ``r`` with ``n <= β(s, r)`` (``n >= 1``, ``s >= 1``)."""
    if n < 1 or s < 1:
        raise ValueError(f"revolve: need n >= 1 units and s >= 1 slots, got n={n}, s={s}")
    r = 0
    while beta(s, r) < n:
        r += 1
    return r


def min_advances(n: int, s: int) -> int:
    """The least number of unit advances that reverses ``n`` units with ``s`` slots (closed form)."""
    r = repetitions(n, s)
    return r * n - beta(s + 1, r - 1)


def split_point(n: int, s: int) -> int:
    """Where an optimal schedule of ``n > 1`` units with ``s`` slots takes its next snapshot: the least
    ``m`` (units advanced from the chain's start) with ``m + t(n - m, s - 1) + t(m, s) = t(n, s)``."""
    if s == 1:
        return n - 1
    best = min_advances(n, s)
    for m in range(1, n):
        if m + min_advances(n - m, s - 1) + min_advances(m, s) == best:
            return m
    raise AssertionError(f"revolve: no split of {n} units with {s} slots")  # pragma: no cover


@dataclass(frozen=True)
class Action:
    """``restore`` (slot -> hand), ``advance`` (hand from ``unit`` on to the start of unit ``to``),
    ``snapshot`` (hand -> slot) or ``reverse`` (unit ``unit``, the hand at its start)."""

    kind: str
    unit: int
    slot: int = -1
    to: int = -1


def schedule(n: int, s: int) -> list[Action]:
    """One optimal schedule (deterministic): slot 0 holds ``x_0`` at the start; the actions' advances
    total ``min_advances(n, s)`` units, and units are reversed in the order ``n-1, ..., 0``."""
    repetitions(n, s)  # checks n and s
    out: list[Action] = []
    free = list(range(s - 1, 0, -1))

    def rev(start: int, m: int, slot: int) -> None:
        if not free:  # one slot: each unit from the chain's start, last first
            for u in range(start + m - 1, start - 1, -1):
                out.append(Action("restore", start, slot))
                if u > start:
                    out.append(Action("advance", start, to=u))
                out.append(Action("reverse", u))
            return
        out.append(Action("restore", start, slot))
        if m == 1:
            out.append(Action("reverse", start))
            return
        k = split_point(m, len(free) + 1)
        out.append(Action("advance", start, to=start + k))
        new = free.pop()
        out.append(Action("snapshot", start + k, new))
        rev(start + k, m - k, new)
        free.append(new)
        rev(start, k, slot)

    rev(0, n, 0)
    return out


def _first_restore(actions: list[Action]) -> int:
    """Index of the last ``restore`` before the first ``reverse``."""
    first = next(i for i, a in enumerate(actions) if a.kind == "reverse")
    return max(i for i in range(first) if actions[i].kind == "restore")


def descent(actions: list[Action]) -> list[Action]:
    """The first sweep from ``x_0`` up to the last restore before the first reverse (the forward op
    runs it: its snapshots are taken by the forward's own sweep)."""
    return actions[:_first_restore(actions)]


def backward_actions(actions: list[Action]) -> list[Action]:
    """The rest (the backward op runs it), starting with a ``restore``."""
    return actions[_first_restore(actions):]


@functools.lru_cache(maxsize=4096)
def _backward_counts(n: int, s: int) -> tuple[int, int]:
    counts = [0] * n
    for a in backward_actions(schedule(n, s)):
        if a.kind == "advance":
            for u in range(a.unit, a.to):
                counts[u] += 1
        elif a.kind == "reverse":
            counts[a.unit] += 1
    return sum(counts), max(counts)


def recomputed_units(n: int, s: int) -> int:
    """Units the backward recomputes: its advances, and every unit once more with its tape
    (``t(n, s) - (n - 1) + n`` for ``s >= 2``: the descent's ``n - 1`` advances are the forward's)."""
    return _backward_counts(n, s)[0]


def max_recomputations(n: int, s: int) -> int:
    """The most times the backward computes one unit again (its advances and its taped run)."""
    return _backward_counts(n, s)[1]


# -- LSTM layers -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LSTMLayerPlan:
    """A checkpointed LSTM layer: ``segment`` steps per unit (a multiple of the fixed chunk ``chunk``),
    ``units`` of them, ``slots`` snapshots of the (h, c) state; the backward keeps one unit's tape."""

    segment: int
    units: int
    slots: int
    memory: int  # bytes the backward holds for it: snapshots, one unit's tape, scratch
    recomputed_steps: int  # steps the backward computes again (forward, with or without tape)
    extra_seconds: float
    max_recomputations: int


def lstm_plans(S: int, chunk: int, state_bytes: int, step_tape_bytes: int, scratch_bytes: int,
               step_seconds: float, most: int = 24) -> list[LSTMLayerPlan]:
    """A Pareto set (memory down, extra time up) of at most ``most`` checkpointing plans for a layer of
    ``S`` steps: segments of ``L`` steps (multiples of ``chunk``) and ``s`` slots, from every segment
    boundary a snapshot (one extra forward) down to the least memory.  ``state_bytes`` is one (h, c)
    snapshot, ``step_tape_bytes`` what one step's tape holds (gates, C and H), ``step_seconds`` one
    forward step's predicted time."""
    if S < 1 or chunk < 1:
        return []
    cands: list[LSTMLayerPlan] = []
    n_chunks = -(-S // chunk)
    seen: set[int] = set()
    for c in sorted({max(1, min(n_chunks, round(n_chunks / k))) for k in (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64,
                                                                           96, 128, 192, 256)}):
        L = c * chunk
        n = -(-S // L)
        if n in seen or n > 256:
            continue
        seen.add(n)
        for s in sorted({min(n, v) for v in (1, 2, 3, 4, 5, 6, 8, 10, 12, 14, 16, 20, 24, 28, 32, 40, 48, 56, 64, 80,
                                              96, 112, 128, 160, 192, 224, n)}):
            steps = recomputed_units(n, s) * L
            mem = s * state_bytes + (min(L, S) + 1) * step_tape_bytes + scratch_bytes
            cands.append(LSTMLayerPlan(L, n, s, mem, steps, steps * step_seconds, max_recomputations(n, s)))
    cands.sort(key=lambda p: (p.extra_seconds, p.memory))
    front: list[LSTMLayerPlan] = []
    for p in cands:
        if not front or p.memory < front[-1].memory:
            front.append(p)
    if len(front) <= most:
        return front
    # keep both ends and spread the rest evenly over the front
    idx = sorted({round(i * (len(front) - 1) / (most - 1)) for i in range(most)})
    return [front[i] for i in idx]


@functools.lru_cache(maxsize=None)
def _dp(n: int, s: int) -> int:  # the dynamic program (tests): F(1, s) = 0, F(n, 1) = n(n-1)/2
    if n == 1:
        return 0
    if s == 1:
        return n * (n - 1) // 2
    return min(m + _dp(n - m, s - 1) + _dp(m, s) for m in range(1, n))


brute_force: Callable[[int, int], int] = _dp
