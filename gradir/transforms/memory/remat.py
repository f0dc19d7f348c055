"""Whole-graph rematerialization: a value freed after its early readers and computed again, by a copy of
the op that made it, just before its late readers (a forward activation the backward reads again).

``build(plan, choices)`` turns the base plan and the providers' choices into the planner's 0/1 program
(``model.Problem``); ``apply(program, model, x)`` rewrites the program for a solution ``x``.

The memory model counts bytes at *points*: the base plan's steps, and one point before each step where
copies run (the copies' results are live there, the value they replace is not).  Positions order
them: step ``s`` is at ``2s``, the point before step ``c`` at ``2c - 1``.  Four kinds of variables:

* ``remat``: value ``v`` (made at step ``p``, readers split at their largest gap into early ones up to
  step ``a`` and late ones from step ``c``) is freed after ``a`` and computed again before ``c``:
  ``-bytes(v)`` over positions ``2a+1 .. 2c-1``, the copy's results at ``2c-1``; time: the step's cost;
* ``chain``: an operand ``u`` of a copy at ``c``, computed again there too (it was freed, or is in its own
  gap): its results at ``2c-1``; it needs its own operands in turn (at most ``MAX_CHAIN`` deep);
* ``extend``: an operand ``u`` kept alive up to ``c`` (increments per target, so that two copies reading it
  never count it twice): ``+bytes(u)`` from where it was freed;
* ``option``: a provider's option (``model.Option``): its intervals, positive ones taken to cover the
  points beside them too (a safe side).

The model errs on the safe side (a copy written in place, an operand dying at a copy and given to it,
are counted as fresh bytes); the planner checks the real plan and tightens the budget where it missed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from ...ops.fused import FusedElementwiseOp
from .model import Choice, Problem

__all__ = ["Site", "Model", "build", "apply", "copy_program", "rename_op", "recomputable", "MAX_CHAIN"]

MAX_CHAIN = 6  # how many ops back a copy may recompute its operands


def recomputable(op: Any) -> bool:
    """Whether running ``op`` again gives the same bits: not a ``Constant`` (its array is there anyway),
    and not an op that opts out (``RECOMPUTE = False`` on its class: a stateful or random user op).
    gradir's own ops are pure functions of their operands and attributes (Dropout's mask is a function
    of its seed and the element's index: docs/onnx.md)."""
    return op.op_name != "Constant" and getattr(type(op), "RECOMPUTE", True)


@dataclass
class Site:
    """A copy of the op of base step ``step`` run before base step ``before``; ``value`` is the result it
    is for; ``late``: the base steps whose reads of ``value`` it takes over (a ``remat``; none for a chain)."""

    kind: str  # "remat" or "chain"
    value: str
    step: int
    before: int
    late: list[int] = field(default_factory=list)
    early: int = -1  # the last early reader (remat)


@dataclass
class Model:
    problem: Problem
    kinds: list[tuple]  # per variable: ("remat"|"chain", Site) | ("extend", value, before) | ("option", i, j)
    choices: list[Choice]


class _Builder:
    def __init__(self, plan: Any, choices: list[Choice]) -> None:
        self.plan = plan
        steps = plan.steps
        self.n = len(steps)
        types = plan.types
        self.size = {v: (t.nbytes or 0) for v, t in types.items()}
        self.producer: dict[str, int] = {}
        readers: dict[str, set[int]] = {}
        for st in steps:
            for v in st.operands:
                if v is not None:
                    readers.setdefault(v, set()).add(st.index)
            for r in st.results:
                self.producer[r] = st.index
        self.readers = {v: sorted(rs) for v, rs in readers.items()}
        self.views = plan.views
        self.keep = plan.keep
        # the last step using a value's buffer (its own readers and its views')
        self.buf_last: dict[str, int] = {}
        for v, rs in self.readers.items():
            root = self.views.get(v, v)
            self.buf_last[root] = max(self.buf_last.get(root, -1), rs[-1])
        self.donated = {st.operands[o]: st.index for st in steps for o in st.inplace.values()}
        self.live_after = _live_after(plan)
        self.touched = {v for ch in choices for v in ch.values}
        self.choices = choices
        self.seconds: list[float] = []
        self.memory: list[list[tuple[int, float]]] = []
        self.kinds: list[tuple] = []
        self.rows: list[tuple[dict[int, float], float]] = []
        self.natural: dict[str, tuple[int, Site]] = {}  # value -> (variable, site)
        self.chains: dict[tuple[str, int], Optional[int]] = {}
        self.refused: dict[tuple[str, int], int] = {}  # chains refused, at the depth they were asked
        self.extends: dict[tuple[str, int], int] = {}

    # -- points --------------------------------------------------------------------------------------
    def points(self, lo: int, hi: int) -> list[int]:
        """The points at positions ``lo..hi`` (step s at 2s, the point before step c at 2c-1)."""
        out = [s for s in range(max(0, (lo + 1) // 2), min(self.n - 1, hi // 2) + 1)]
        out += [t for c in self.vcs if lo <= 2 * c - 1 <= hi for t in self.vpoint[c].values()]
        return out

    def var(self, seconds: float, memory: list[tuple[int, float]], kind: tuple) -> int:
        self.seconds.append(seconds)
        self.memory.append(memory)
        self.kinds.append(kind)
        return len(self.seconds) - 1

    def eligible(self, v: str) -> bool:
        """Whether ``v`` may be computed again: made by an op that is not a view, recomputable, touching
        nothing a provider rewrites; not a graph input or output."""
        if v in self.keep or v not in self.producer or v in self.touched:
            return False
        st = self.plan.steps[self.producer[v]]
        if st.view or not recomputable(st.op) or self.size.get(v, 0) <= 0:
            return False
        return not any(w in self.touched for w in list(st.results) + [u for u in st.operands if u is not None])

    def alive(self, u: str, c: int) -> bool:
        """Whether ``u`` is live between steps c-1 and c in the base plan."""
        if u in self.keep or self.views.get(u, u) in self.keep:
            return True
        return self.producer.get(u, self.n) < c and self.buf_last.get(self.views.get(u, u), -1) >= c

    # -- building --------------------------------------------------------------------------------------
    def candidates(self) -> list[Site]:
        roots_with_views = set(self.views.values())
        sites = []
        for v, rs in self.readers.items():
            if v in self.views or v in roots_with_views or not self.eligible(v):
                continue
            p = self.producer[v]
            seq = [p] + [r for r in rs if r != p]
            gaps = [(seq[k + 1] - seq[k], -k) for k in range(len(seq) - 1)]
            if not gaps:
                continue
            gap, k = max(gaps)
            k = -k
            if gap < 2:
                continue
            a, c = seq[k], seq[k + 1]
            sites.append(Site("remat", v, p, c, [r for r in rs if r >= c], a))
        return sites

    def build(self) -> Model:
        for s in self.candidates():
            self.natural[s.value] = (self.var(self.plan.steps[s.step].cost, [], ("remat", s)), s)
        for x, s in list(self.natural.values()):
            self.require(x, s.step, s.before, 0)
        # the points where copies run: before step c, one per copied op (in the order they run, the
        # order of the ops they copy), each with what was live after step c-1
        sites = [k[1] for k in self.kinds if k[0] in ("remat", "chain")]
        self.vcs = sorted({s.before for s in sites})
        self.vpoint: dict[int, dict[int, int]] = {}
        base = list(self.plan.curve)
        for c in self.vcs:
            steps = sorted({s.step for s in sites if s.before == c})
            self.vpoint[c] = {p: len(base) + k for k, p in enumerate(steps)}
            base += [self.live_after[c - 1]] * len(steps)
        for j, kind in enumerate(self.kinds):
            if kind[0] in ("remat", "chain"):
                self.memory[j] = self.copy_memory(kind[1], sites)
        self.finish_extends()
        for i, ch in enumerate(self.choices):
            opts = []
            for j, opt in enumerate(ch.options):
                mem = []
                for iv in opt.intervals:
                    lo, hi = (2 * iv.start - 1, 2 * iv.end + 1) if iv.bytes > 0 else (2 * iv.start, 2 * iv.end)
                    mem += [(t, float(iv.bytes)) for t in self.points(lo, hi)]
                opts.append(self.var(float(opt.extra_seconds), mem, ("option", i, j)))
            if opts:
                self.rows.append(({o: 1.0 for o in opts}, 1.0))
        floor = sum(self.size.get(v, 0) for v in self.keep)
        problem = Problem([float(b) for b in base], self.seconds, self.memory, self.rows, float(floor))
        return Model(problem, self.kinds, self.choices)

    def copy_memory(self, s: Site, sites: list[Site]) -> list[tuple[int, float]]:
        """A copy's bytes: every result while it runs; the value it is for, on through the later copies
        before the same step (a recomputed value up to its late readers, where the base plan has it;
        a chain's up to the last copy there that may read it); a recomputed value's early life freed
        from after its last early reader."""
        here = self.vpoint[s.before]
        results = self.plan.steps[s.step].results
        mem = [(here[s.step], float(sum(self.size.get(r, 0) for r in results)))]
        if s.kind == "remat":
            last = max(here)
        else:
            last = max([q.step for q in sites if q.before == s.before
                        and s.value in self.plan.steps[q.step].operands] + [s.step])
        mem += [(t, float(self.size[s.value])) for p, t in here.items() if s.step < p <= last]
        if s.kind == "remat":
            mem += [(t, -float(self.size[s.value])) for t in self.points(2 * s.early + 1, 2 * s.before - 1)]
        return mem

    def require(self, x: int, step: int, c: int, depth: int) -> None:
        """The operands of a copy of ``step`` run before step ``c`` (variable ``x``) must be live there."""
        for u in dict.fromkeys(w for w in self.plan.steps[step].operands if w is not None):
            if u in self.keep:
                continue
            if self.alive(u, c):
                nat = self.natural.get(u)
                if nat is not None and nat[1].early < c < nat[1].before:  # u is in its own gap at c
                    y = self.chain(u, c, depth)
                    row = {x: 1.0, nat[0]: 1.0}
                    if y is not None:
                        row[y] = -1.0
                    self.rows.append((row, 1.0))
                continue
            z = self.extends.get((u, c))
            if z is None:
                z = self.extends[(u, c)] = self.var(0.0, [], ("extend", u, c))
            y = self.chain(u, c, depth)
            row = {x: 1.0, z: -1.0}
            if y is not None:
                row[y] = -1.0
            self.rows.append((row, 0.0))

    def chain(self, u: str, c: int, depth: int) -> Optional[int]:
        key = (u, c)
        if key in self.chains and (self.chains[key] is not None or self.refused[key] <= depth):
            return self.chains[key]
        if depth >= MAX_CHAIN or u in self.views or not self.eligible(u):
            self.chains[key] = None
            self.refused[key] = depth  # (reached again from closer to a copy, it may be allowed)
            return None
        p = self.producer[u]
        y = self.chains[key] = self.var(self.plan.steps[p].cost, [], ("chain", Site("chain", u, p, c)))
        self.require(y, p, c, depth + 1)
        return y

    def finish_extends(self) -> None:
        """Extension variables as increments: ``extend(u, c_k)`` keeps ``u`` from ``c_{k-1}`` to ``c_k``
        and needs ``extend(u, c_{k-1})``."""
        by_value: dict[str, list[int]] = {}
        for (u, c) in self.extends:
            by_value.setdefault(u, []).append(c)
        for u, cs in by_value.items():
            root = self.views.get(u, u)
            last = self.buf_last.get(root, self.producer.get(root, 0))
            lo = 2 * last if self.donated.get(root) == last else 2 * last + 1
            prev = None
            for c in sorted(cs):
                z = self.extends[(u, c)]
                self.memory[z] = [(t, float(self.size.get(root, 0))) for t in self.points(lo, 2 * c - 1)]
                lo = 2 * c
                if prev is not None:
                    self.rows.append(({z: 1.0, prev: -1.0}, 0.0))
                prev = z


def _live_after(plan: Any) -> list[int]:
    """The bytes live after each step of ``plan`` and its frees (the schedule's own count)."""
    types = plan.types
    size = {v: (t.nbytes or 0) for v, t in types.items()}
    live = sum(size.get(v, 0) for v in plan.inputs)
    out = []
    for st in plan.steps:
        if not st.view:
            live += sum(size.get(r, 0) for j, r in enumerate(st.results) if j not in st.inplace)
        for v in st.free_after:
            if v in plan.views:
                continue  # a view's bytes are its root's: freed with it
            if not any(st.operands[i] == v for i in st.inplace.values()):
                live -= size.get(v, 0)
        out.append(live)
    return out


def build(plan: Any, choices: list[Choice]) -> Model:
    """The 0/1 program of ``plan`` (the base plan) with the providers' ``choices``."""
    return _Builder(plan, choices).build()


# -- rewriting the program ----------------------------------------------------------------------------

def copy_program(program: Any) -> Any:
    """A copy of ``program`` that rewrites can change without touching it (ops are replaced, not edited)."""
    q = object.__new__(type(program))
    q.__dict__.update(program.__dict__)
    q.ops = list(program.ops)
    q.types = dict(program.types)
    q.inputs = list(program.inputs)
    q.outputs = list(program.outputs)
    q.aliases = dict(program.aliases)
    return q


def rename_op(op: Any, operands: dict[str, str], results: Optional[dict[str, str]] = None) -> Any:
    """A copy of ``op`` reading ``operands[v]`` for ``v`` and writing ``results[r]`` for ``r`` (a fused
    loop's members are renamed alike: its kernel maps values to members by name)."""
    results = results or {}

    def name(v: Optional[str]) -> Optional[str]:
        return None if v is None else results.get(v, operands.get(v, v))

    if isinstance(op, FusedElementwiseOp):
        members = [m.copy(results=[name(r) for r in m.results], operands=[name(v) for v in m.operands])
                   for m in op.members]
        body = tuple(m.to_string().rsplit(" : ", 1)[0] if m.result_types else m.to_string() for m in members)
        outs = [name(r) for r in op.results]
        return op.copy(results=outs, operands=[name(v) for v in op.operands],
                       attrs={**op.attrs, "body": body, "outputs": tuple(outs)}, members=members)
    return op.copy(results=[name(r) for r in op.results], operands=[name(v) for v in op.operands])


def apply(program: Any, plan: Any, model: Model, x: tuple[bool, ...]) -> list[tuple[str, str, str, str]]:
    """Rewrite ``program`` (the options first, then the copies) for the solution ``x``; returns
    ``(value, its copy, op name, the result of the op it runs before)`` per copy."""
    for j, on in enumerate(x):
        kind = model.kinds[j]
        if on and kind[0] == "option":
            model.choices[kind[1]].options[kind[2]].apply(program)
    sites = [model.kinds[j][1] for j, on in enumerate(x) if on and model.kinds[j][0] in ("remat", "chain")]
    if not sites:
        return []
    numbers = [int(v[1:]) for v in program.types if v[:1] == "t" and v[1:].isdigit()]
    fresh = max(numbers, default=0) + 1
    new_name: dict[tuple[str, int], str] = {}  # (value, before) -> its copy's name
    done = []
    sites.sort(key=lambda s: (s.before, s.step, s.kind))
    remats = {s.value: s for s in sites if s.kind == "remat"}

    def version(u: str, c: int) -> str:
        if (u, c) in new_name:
            return new_name[(u, c)]
        s = remats.get(u)
        if s is not None and s.before <= c and (u, s.before) in new_name:
            return new_name[(u, s.before)]
        return u

    index = {r: k for k, op in enumerate(program.ops) for r in op.results}
    inserts: dict[str, list[Any]] = {}
    rewire: dict[str, dict[str, str]] = {}
    for s in sites:
        op = plan.steps[s.step].op
        rmap = {}
        for r in op.results:
            rmap[r] = f"t{fresh}"
            program.types[f"t{fresh}"] = program.types[r]
            fresh += 1
        clone = rename_op(op, {u: version(u, s.before) for u in op.operands if u is not None}, rmap)
        new_name[(s.value, s.before)] = rmap[s.value]
        anchor = plan.steps[s.before].results[0]
        inserts.setdefault(anchor, []).append(clone)
        if s.kind == "remat":
            for r in s.late:
                rewire.setdefault(plan.steps[r].results[0], {})[s.value] = rmap[s.value]
        done.append((s.value, rmap[s.value], op.op_name, anchor))
    ops = []
    for op in program.ops:
        first = op.results[0] if op.results else None
        ops += inserts.get(first, [])
        if first in rewire:
            op = rename_op(op, rewire[first])
        ops.append(op)
    missing = [a for a in inserts if a not in index]
    if missing:  # pragma: no cover - an option removed an op it should have kept
        raise AssertionError(f"memory planner: no op writes {missing[0]} after the options")
    program.ops = ops
    return done
