"""What a memory decision is: a ``Choice`` among ``Option``s, each a rewrite of the program with its
memory change (``Interval``s over the steps of the plan built without a budget, the *base plan*) and
its predicted extra time.  The planner (``planner.py``) solves for the options of least extra time
whose planned peak fits the budget, applies them, and checks the result by building the plan again.

Positions are base-plan step indices (``Step.index`` of the plan built with the same passes and no
budget): an interval ``[start, end]`` adds (``bytes > 0``) or removes (``bytes < 0``) that many bytes
at every step from ``start`` to ``end``, both included, where the base plan's live bytes at a step are
``Plan.curve[step]`` (the bytes live while the step runs: what was live before it, its new results and
its kernel's scratch).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional

__all__ = ["Interval", "Option", "Choice", "Problem", "Solution", "solve"]


@dataclass(frozen=True)
class Interval:
    bytes: int  # > 0 added, < 0 removed (against the base plan)
    start: int  # first base step it covers
    end: int  # last base step it covers (inclusive)


@dataclass
class Option:
    """One way to take a ``Choice``: ``apply(program)`` rewrites the program (ops found by their result
    names, which every rewrite keeps stable); options of different choices are applied one after
    another and must commute."""

    label: str  # one line for ``gradir plan``: what is kept and what is recomputed
    extra_seconds: float  # predicted extra time (``gradir.transforms.cost``)
    intervals: list[Interval]
    apply: Callable[[Any], None]  # apply(program: Program) -> None
    details: list[str] = field(default_factory=list)  # more lines for ``gradir plan`` (checkpoint steps, ...)


@dataclass
class Choice:
    """A decision with alternatives: keep the base (the implicit option: no rewrite, no change) or take
    exactly one of ``options``.  ``values`` are the value names its options rewrite or remove: the
    whole-graph rematerialization leaves them alone."""

    key: str  # e.g. "lstm t5" or "chunk t10..t14"
    options: list[Option]
    values: frozenset[str] = frozenset()


# -- the solver -------------------------------------------------------------------------------------------

@dataclass
class Problem:
    """The planner's decisions as a 0/1 program over ``len(seconds)`` variables.

    ``base[t]`` is the bytes live at *point* ``t`` without any decision (the base plan's steps, and the
    points between two steps where recomputations run); taking variable ``j`` adds ``seconds[j]`` of
    predicted time and ``bytes`` at the points of ``memory[j]`` (a list of ``(point, bytes)``, bytes < 0
    freed).  ``rows`` are the logic between decisions, each ``({variable: coefficient}, upper)``:
    ``sum(coefficient * x) <= upper`` (one option per choice, a recomputation needs its operands).
    ``floor`` is a lower bound of every peak (the inputs and outputs, live whatever is decided)."""

    base: list[float]
    seconds: list[float]
    memory: list[list[tuple[int, float]]]
    rows: list[tuple[dict[int, float], float]] = field(default_factory=list)
    floor: float = 0.0

    def evaluate(self, x: Any) -> tuple[float, float, bool]:
        """(predicted extra seconds, peak, whether the logic rows hold) of the 0/1 vector ``x``."""
        live = list(self.base)
        for j, on in enumerate(x):
            if on:
                for t, b in self.memory[j]:
                    live[t] += b
        ok = all(sum(c * x[j] for j, c in row.items()) <= upper + 1e-9 for row, upper in self.rows)
        secs = sum(s for s, on in zip(self.seconds, x) if on)
        return secs, max([self.floor] + live), ok


@dataclass
class Solution:
    x: tuple[bool, ...]
    seconds: float  # predicted extra seconds
    peak: float  # the model's planned peak


# the tie-break admits solutions within this fraction of the least time (the MILP's own tolerances are far
# below it); any value keeps the peak monotone in the budget (docs/memory.md)
TIME_SLACK = 1e-6


def solve(problem: Problem, budget: Optional[float]) -> Optional[Solution]:
    """The decisions of least predicted extra time whose peak is at most ``budget``, the smallest peak
    among those (a second solve with the time fixed), or None when none fits.  ``budget=None``: the
    least peak over every decision, then the least time at that peak (the least feasible budget).

    Deterministic: HiGHS (``scipy.optimize.milp``) with no time limit and a zero optimality gap."""
    n = len(problem.seconds)
    if budget is not None and problem.floor > budget:
        return None
    if n == 0:
        peak = max([problem.floor] + list(problem.base))
        return Solution((), 0.0, peak) if budget is None or peak <= budget else None
    if budget is None:
        first = _solve(problem, "peak", None, None)
        if first is None:  # pragma: no cover - every variable off is always feasible in memory
            return None
        return _solve(problem, "seconds", first.peak * (1 + 1e-9) + 1e-6, None) or first
    first = _solve(problem, "seconds", budget, None)
    if first is None:
        return None
    return _solve(problem, "peak", budget, first.seconds) or first


def _solve(problem: Problem, objective: str, budget: Optional[float], seconds: Optional[float]) -> Optional[Solution]:
    """One MILP: variables ``x`` (0/1) and ``m`` (the peak, continuous); minimize ``objective``
    ("seconds" or "peak") subject to every point <= m <= budget, the logic rows, and (when given) the
    predicted seconds at most ``seconds``.  Bytes are counted in KiB: HiGHS's feasibility tolerance
    (1e-6) is then a thousandth of a byte, so a solution it accepts fits to the byte (byte counts are
    whole); seconds are scaled to their largest."""
    import numpy as np
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import coo_matrix

    n = len(problem.seconds)
    scale_b = 1024.0
    scale_s = max([abs(s) for s in problem.seconds] + [1e-12])
    touched: dict[int, list[tuple[int, float]]] = {}
    for j, mem in enumerate(problem.memory):
        for t, b in mem:
            touched.setdefault(t, []).append((j, b))
    fixed = max([problem.floor] + [b for t, b in enumerate(problem.base) if t not in touched])
    # points with the same decisions and the same bytes for each: only the one of most base bytes
    # binds (the steps between two events of a long interval are many, their rows the same)
    rows: dict[tuple, float] = {}
    for t in sorted(touched):
        merged: dict[int, float] = {}
        for j, b in touched[t]:
            merged[j] = merged.get(j, 0.0) + b
        key = tuple(sorted((j, b) for j, b in merged.items() if b != 0))
        if not key:
            fixed = max(fixed, problem.base[t])
        elif rows.get(key, -np.inf) < problem.base[t]:
            rows[key] = problem.base[t]
    r, c, v, lo, hi = [], [], [], [], []
    row = 0
    for key, base in rows.items():  # base + sum(b x) - m <= 0
        for j, b in key:
            r.append(row), c.append(j), v.append(b / scale_b)
        r.append(row), c.append(n), v.append(-1.0)
        lo.append(-np.inf), hi.append(-base / scale_b)
        row += 1
    for coefs, upper in problem.rows:
        for j, a in coefs.items():
            r.append(row), c.append(j), v.append(float(a))
        lo.append(-np.inf), hi.append(float(upper))
        row += 1
    if seconds is not None:
        for j, s in enumerate(problem.seconds):
            r.append(row), c.append(j), v.append(s / scale_s)
        lo.append(-np.inf), hi.append(seconds / scale_s * (1 + TIME_SLACK) + 1e-9)
        row += 1
    cost = np.zeros(n + 1)
    if objective == "seconds":
        cost[:n] = np.asarray(problem.seconds) / scale_s
    else:
        cost[n] = 1.0
    upper_m = np.inf if budget is None else budget / scale_b
    if fixed / scale_b > upper_m:
        return None
    bounds = Bounds(np.r_[np.zeros(n), fixed / scale_b], np.r_[np.ones(n), upper_m])
    integrality = np.r_[np.ones(n), 0]
    constraints = []
    if row:
        a = coo_matrix((v, (r, c)), shape=(row, n + 1)).tocsr()
        constraints.append(LinearConstraint(a, np.asarray(lo), np.asarray(hi)))
    res = milp(cost, constraints=constraints, integrality=integrality, bounds=bounds,
               options={"mip_rel_gap": 0.0, "presolve": True, "disp": False})
    if res.status != 0 or res.x is None:
        return None
    x = tuple(bool(round(val)) for val in res.x[:n])
    secs, peak, _ = problem.evaluate(x)
    if budget is not None and peak > budget:  # the solver's tolerance let a byte through: not a fit
        return None
    return Solution(x, secs, peak)
