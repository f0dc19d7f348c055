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
from typing import Any, Callable

__all__ = ["Interval", "Option", "Choice"]


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
