"""The budgeted plan: ``plan_with_budget(program, pass_log, kernels, budget)`` (docs/memory.md).

1. the base plan (``schedule.build_plan``, no budget); if its peak fits, that is the plan;
2. the decisions: the providers' choices (``recurrence.choices``, ``chunking.choices``) and the
   whole-graph recomputations (``remat``), as a 0/1 program (``model.Problem``);
3. solve it (``model.solve``: least predicted extra time under the budget, then least peak), rewrite
   the program, build its plan again and check the real planned peak; where the linear model missed
   (in-place reuse, views) the budget given to the model shrinks by the overshoot and it is solved
   again, at most ``ROUNDS`` times;
4. nothing fits: a ``CompileError`` naming the least feasible budget (the least peak over every
   decision, checked on its real plan) before anything runs.

``budget="auto"`` plans the peak / time curve between the least feasible budget and the base peak and
takes its knee: the point farthest from the chord between its ends.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Optional

from ...errors import CompileError, Diagnostic
from ...fileio import human_bytes
from ..passes.pipeline import lint
from ..schedule import Plan, build_plan
from . import remat
from .budget import format_budget, parse_budget
from .model import Choice, solve

__all__ = ["plan_with_budget", "MemoryReport", "CurvePoint", "collect_choices", "ROUNDS", "CURVE_POINTS"]

ROUNDS = 4  # solves per budget (the first, and tightened ones where the real plan overshot)
CURVE_POINTS = 6  # budgets on the curve, from the least feasible to the base peak


@dataclass
class CurvePoint:
    budget: int
    peak: int  # the real planned peak at that budget
    seconds: float  # predicted extra seconds
    knee: bool = False


@dataclass
class MemoryReport:
    """What a memory budget decided (``Plan.memory``; ``gradir plan`` prints ``lines()``)."""

    budget: int  # bytes (the knee's budget for ``auto``)
    auto: bool
    base_peak: int
    planned_peak: int
    extra_seconds: float  # predicted (``gradir.transforms.cost``)
    base_seconds: float  # the base plan's total estimated cost
    # value, its copy, the op, the copy's step, the step it runs before (the first late reader)
    recomputed: list[tuple[str, str, str, int, int]] = field(default_factory=list)
    options: list[tuple[str, list[str]]] = field(default_factory=list)  # chosen options: label, details
    floor: int = 0  # inputs and outputs alone
    # the curve and the least feasible budget cost a few more solves each: made when first asked
    # (``gradir plan`` prints them), by the planner, which is dropped when the report pickles
    points: Optional[list[CurvePoint]] = None
    least: Optional[int] = None
    planner: Any = field(default=None, repr=False, compare=False)

    @property
    def curve(self) -> list[CurvePoint]:
        """Planned peak and predicted extra time for a few budgets from the least feasible to the base peak."""
        if self.points is None:
            self.points = self.planner.curve(self.budget) if self.planner is not None else []
        return self.points

    @property
    def least_feasible(self) -> Optional[int]:
        if self.least is None and self.planner is not None:
            self.least = self.planner.least().plan.peak_bytes
        return self.least

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["planner"] = None
        return state

    @property
    def copies(self) -> dict[str, str]:
        """A copy's result -> the value it computes again."""
        return {c: v for v, c, _, _, _ in self.recomputed}

    def lines(self) -> list[str]:
        pct = 100.0 * self.extra_seconds / self.base_seconds if self.base_seconds > 0 else 0.0
        head = f"# memory budget: {format_budget(self.budget)}" + (" (auto: the curve's knee)" if self.auto else "")
        out = [head, f"#   planned peak {human_bytes(self.planned_peak)} (without a budget "
                     f"{human_bytes(self.base_peak)}); predicted extra time {_secs(self.extra_seconds)} "
                     f"({pct:.1f}% of the estimated {_secs(self.base_seconds)})"]
        if not self.recomputed and not self.options:
            out.append("#   nothing recomputed: the plan fits as it is")
        for value, copy, op, at, before in self.recomputed:
            out.append(f"#   recomputed: {value} = {op} again as {copy} at step [{at}], before step [{before}]")
        for label, details in self.options:
            out.append(f"#   {label}")
            out += [f"#     {d}" for d in details]
        if self.curve:
            out.append("#   budget / planned peak / predicted extra time:")
            for p in self.curve:
                out.append(f"#     {format_budget(p.budget):>10}  {human_bytes(p.peak):>10}  {_secs(p.seconds):>10}"
                           + ("  <- knee" if p.knee else ""))
        return out


def _secs(s: float) -> str:
    return f"{s * 1e3:.3f} ms" if s < 1 else f"{s:.3f} s"


def collect_choices(program: Any, plan: Plan) -> list[Choice]:
    """The providers' choices for ``program`` (``plan`` its base plan).  A provider module that does not
    exist (yet) has none; any other import error is a bug and propagates."""
    out: list[Choice] = []
    for name in ("recurrence", "chunking"):
        try:
            module = importlib.import_module(f"{__package__}.{name}")
        except ModuleNotFoundError as e:
            if e.name != f"{__package__}.{name}":
                raise
            continue
        out += module.choices(program, plan)
    return out


@dataclass
class _Result:
    program: Any
    plan: Plan
    seconds: float
    recomputed: list[tuple[str, str, str, str]]
    options: list[tuple[str, list[str]]]


class _Planner:
    def __init__(self, program: Any, pass_log: list, kernels: str, base: Plan) -> None:
        # (a copy: the planner outlives the call, which rewrites ``program`` for the chosen plan)
        self.program = remat.copy_program(program)
        self.pass_log, self.kernels, self.base = pass_log, kernels, base
        self.model = remat.build(base, collect_choices(program, base))
        self.realized: dict[tuple, _Result] = {}
        self.fits: dict[int, Optional[_Result]] = {}
        self._least: Optional[_Result] = None

    def realize(self, x: tuple[bool, ...]) -> _Result:
        hit = self.realized.get(x)
        if hit is not None:
            return hit
        prog = remat.copy_program(self.program)
        done = remat.apply(prog, self.base, self.model, x)
        problem = lint(prog)
        if problem:  # pragma: no cover - a bug in a rewrite: name it
            raise CompileError(f"the memory planner left an invalid graph: {problem} (a bug in gradir)")
        secs, _, _ = self.model.problem.evaluate(x)
        opts = []
        for j, on in enumerate(x):
            kind = self.model.kinds[j]
            if on and kind[0] == "option":
                opt = self.model.choices[kind[1]].options[kind[2]]
                opts.append((opt.label, list(opt.details)))
        log = list(self.pass_log)
        if done or opts:
            log.append(("memory-budget", f"recomputed {len(done)} value{'' if len(done) == 1 else 's'}"
                        + (f", {len(opts)} option{'' if len(opts) == 1 else 's'}" if opts else "")))
        res = _Result(prog, build_plan(prog, log, self.kernels), secs, done, opts)
        self.realized[x] = res
        return res

    def least(self) -> _Result:
        """The plan of least peak (every decision allowed), then least time: the least feasible budget."""
        if self._least is None:
            sol = solve(self.model.problem, None)
            x = sol.x if sol is not None else (False,) * len(self.model.kinds)
            self._least = self.realize(x)
            if self._least.plan.peak_bytes > self.base.peak_bytes:  # the model erred: the base is better
                self._least = self.realize((False,) * len(self.model.kinds))
        return self._least

    def fit(self, budget: int) -> Optional[_Result]:
        """The plan of least predicted time whose real peak fits ``budget``, or None."""
        if budget in self.fits:
            return self.fits[budget]
        target = float(budget)
        found = None
        for _ in range(ROUNDS):
            sol = solve(self.model.problem, target)
            if sol is None:
                break
            res = self.realize(sol.x)
            if res.plan.peak_bytes <= budget:
                found = res
                break
            target -= max(1, res.plan.peak_bytes - budget)
        if found is None and self.least().plan.peak_bytes <= budget:
            found = self.least()
        self.fits[budget] = found
        return found

    def curve(self, extra: Optional[int] = None) -> list[CurvePoint]:
        lo, hi = self.least().plan.peak_bytes, self.base.peak_bytes
        budgets = sorted({lo + (hi - lo) * k // (CURVE_POINTS - 1) for k in range(CURVE_POINTS)}
                         | ({extra} if extra is not None and lo <= extra else set()))
        out = []
        for b in budgets:
            res = self.fit(b)
            if res is not None:
                out.append(CurvePoint(b, res.plan.peak_bytes, res.seconds))
        return out


def knee(points: list[CurvePoint]) -> CurvePoint:
    """The point of the peak / time curve farthest from the chord between its ends (both axes scaled to
    their ranges); ties, and a straight curve, go to the smaller peak."""
    if len(points) <= 2:
        return points[0]
    p0, p1 = points[0], points[-1]
    span_m = max(1, max(p.peak for p in points) - min(p.peak for p in points))
    span_s = max(1e-30, max(p.seconds for p in points) - min(p.seconds for p in points))
    ax, ay = p0.peak / span_m, p0.seconds / span_s
    dx, dy = p1.peak / span_m - ax, p1.seconds / span_s - ay
    norm = (dx * dx + dy * dy) ** 0.5 or 1.0
    best = max(points, key=lambda p: (round(abs((p.peak / span_m - ax) * dy - (p.seconds / span_s - ay) * dx) / norm,
                                            12), -p.peak))
    return best


def plan_with_budget(program: Any, pass_log: list[tuple[str, str]], kernels: str, budget: object) -> Plan:
    """The plan of ``program`` (after its passes) whose planned peak is at most ``budget`` (bytes, a size
    text, ``"auto"`` or None), at the least predicted extra time; rewrites ``program`` to match (the
    recomputations and chosen options).  Raises ``CompileError`` when no plan fits, naming the least
    feasible budget."""
    budget = parse_budget(budget)
    base = build_plan(program, pass_log, kernels)
    if budget is None:
        return base
    where = program.graph.source.filename if getattr(program.graph, "source", None) else None
    if not base.static:
        raise CompileError(Diagnostic("a memory budget needs every shape known, and this graph has values "
                                      "with '?' dimensions", filename=where))
    planner = _Planner(program, pass_log, kernels, base)
    auto = budget == "auto"
    if auto:
        points = planner.curve()
        k = knee(points)
        k.knee = True
        budget, points = k.budget, points
    else:
        assert isinstance(budget, int)
        res = planner.fit(budget)
        if res is None:
            lf = planner.least().plan.peak_bytes
            floor = int(planner.model.problem.floor)
            raise CompileError(Diagnostic(
                f"no schedule fits a memory budget of {format_budget(budget)}: the least feasible budget is "
                f"{format_budget(lf, up=True)} (inputs and outputs alone: {format_budget(floor)})", filename=where))
        points = None
    res = planner.fit(budget)
    assert res is not None
    plan = res.plan
    steps = {r: st.index for st in plan.steps for r in st.results}
    program.__dict__.update(res.program.__dict__)  # the rewritten program is the one the backend runs
    plan.memory = MemoryReport(
        budget=budget, auto=auto, base_peak=base.peak_bytes, planned_peak=plan.peak_bytes,
        extra_seconds=res.seconds, base_seconds=sum(st.cost for st in base.steps),
        recomputed=[(v, c, op, steps.get(c, -1), steps.get(a, -1)) for v, c, op, a in res.recomputed],
        options=res.options,
        floor=int(planner.model.problem.floor), points=points, planner=planner)
    return plan
