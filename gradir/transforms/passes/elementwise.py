"""``fuse-elementwise``: connected element-wise ops become one ``FusedElementwise`` op, run as one
compiled loop (``gradir.backends.cpu.kernels.fused``), so the values between them never go through memory.

An op can join a group when it is element-wise with a scalar formula (``Op.ELEMENTWISE`` and
``Op.FORMULA``, or the variadic ``Sum``) that calls no transcendental function (those kernels
are SIMD or polynomial code far faster than a loop calling libm per element, see
``gradir.ir.formula``), or, in Float32, its compiled kernel has an element function
(``KernelInfo.scalar``: Sigmoid, the GELUs and their gradients), or its kernel is generated from
its formula (then the loop computes it as its kernel does), and its result is Float32 or
Float64 with a static shape equal to the group's (operands may broadcast into it).  Ops are
visited in order; an op joins the group of an operand's producer, merging the groups of several
operands, unless that would make the group depend on itself through an op outside it (a cycle:
checked by walking back from the group's outside operands, never past the group's first op).
Groups made only of such element-function ops stay as they were too (their kernels are
faster than a loop of calls).  Groups of fewer than two ops, or smaller than ``MIN_ELEMENTS``
elements (where the unfused ops' tiny-array paths are as fast and compiling would cost more
than it saves), stay as they were; groups stop growing at ``MAX_OPS`` ops, which keeps compile
time bounded and identical stretches of a long graph sharing one compiled loop.  For the same
reason a ``Sum`` of more than ``MAX_OPERANDS`` operands stays apart (its formula, and the loop's
signature, grow with the operand count: a ``Sum`` of thousands, a gradient accumulated over a long
unrolled graph, would be a loop of thousands of arrays, and compiling its formula's expression
tree, as deep as it has operands, would exhaust Python's recursion limit).

A ``ReduceSumTo`` over the group's leading axes (a broadcast bias's gradient) joins the group as
an epilogue (``_sums``): the loop adds the value up as it computes it, in NumPy's order, so the
sum keeps the unfused bits (docs/performance.md, "Sums as epilogues").

What the loops can take is the backend's to say (``gradir.backends.base.fusion``: ``can_fuse``,
``element_function``, ``sum_layout``): this pass does not import the kernels.
"""

from __future__ import annotations

import heapq
import math
from typing import Any, Optional

from ...backends.base import fusion
from ...ir.op import Op
from ...ops.fused import FusedElementwiseOp, sum_lead
from ...ops.shape import ReduceSumToOp
from ...ir.types import DType
from .pipeline import Program, register_pass

__all__ = ["fuse_elementwise", "fusable", "MIN_ELEMENTS", "MAX_OPS", "MAX_OPERANDS"]

MIN_ELEMENTS = 1 << 14
MAX_OPS = 32
MAX_OPERANDS = 64  # operands of one member (a variadic Sum); more stay apart, checked before any formula


def fusable(op: Op, types: dict, fz: Any = None) -> bool:
    """Whether ``op`` may be a member of a fused group (see the module docstring); ``fz``: what the
    backend's fused loops can take (``gradir.backends.base.fusion``; default: the cpu kernels')."""
    if fz is None:
        fz = fusion("cpu")
    if fz is None or not op.ELEMENTWISE or len(op.results) != 1 or len(op.operands) > MAX_OPERANDS:
        return False
    t = types.get(op.results[0])
    if t is None or t.dtype not in (DType.Float32, DType.Float64) or not t.is_static:
        return False
    if not fz.can_fuse(type(op), len(op.operands), t.dtype.numpy):
        return False
    for v in op.operands:
        tv = types.get(v) if v is not None else None
        if tv is None or tv.dtype != t.dtype or not tv.is_static:
            return False
    return True


class _Groups:
    def __init__(self, p: Program) -> None:
        self.ops = p.ops
        self.producer: dict[str, int] = {}
        for k, op in enumerate(self.ops):
            for r in op.results:
                self.producer[r] = k
        self.group: dict[int, int] = {}  # op index -> group id (the index of its first op)
        self.members: dict[int, list[int]] = {}
        self.ext: dict[int, set[int]] = {}  # group id -> producers of what its members read (outside or not)
        self.key: dict[int, tuple] = {}

    def reads(self, k: int) -> set[int]:
        return {q for q in (self.producer.get(v) for v in self.ops[k].operands if v is not None) if q is not None}

    def acyclic(self, members: set[int], reads: set[int]) -> bool:
        """No op outside ``members`` both depends on one of them and feeds one of them (``reads``:
        the producers of the values the members read)."""
        first = min(members)
        seen: set[int] = set()
        stack = [q for q in reads if q > first and q not in members]
        while stack:
            k = stack.pop()
            if k in members:
                return False
            if k in seen or k < first:  # an op before the group's first cannot depend on it
                continue
            seen.add(k)
            for v in self.ops[k].operands:
                q = self.producer.get(v) if v is not None else None
                if q is not None and q >= first:
                    stack.append(q)
        return True

    def add(self, k: int, key: tuple) -> None:
        joined: Optional[int] = None
        for v in self.ops[k].operands:
            q = self.producer.get(v) if v is not None else None
            g = self.group.get(q) if q is not None else None
            if g is None or g == joined or self.key[g] != key:
                continue
            n = len(self.members[g]) + (len(self.members[joined]) if joined is not None else 1)
            if n > MAX_OPS:
                continue
            merged = set(self.members[g]) | ({k} if joined is None else set(self.members[joined]))
            reads = self.ext[g] | (self.reads(k) if joined is None else self.ext[joined])
            if not self.acyclic(merged, reads):
                continue
            if joined is None:
                self.members[g].append(k)
                self.group[k] = g
                self.ext[g] = reads
                joined = g
            else:  # merge group g into the one k joined
                for m in self.members.pop(g):
                    self.group[m] = joined
                    self.members[joined].append(m)
                self.members[joined].sort()
                self.ext[joined] = reads
                del self.key[g], self.ext[g]
        if joined is None:
            self.group[k] = k
            self.members[k] = [k]
            self.key[k] = key
            self.ext[k] = self.reads(k)


def _all_scalar(p: Program, members: list[int], fz: Any) -> bool:
    """Every member is an op whose compiled kernel's element function the loop would call (Sigmoid,
    the GELUs and their gradients): their own kernels are vectorized block code, and a loop of
    calls to their element functions was slower (Gelu, Sigmoid, Gelu, Sigmoid on 1024²: 4.2 ms
    fused against 2.6 ms unfused, one thread); fused with cheap ops around them, they pay."""
    return all(fz.element_function(type(p.ops[k]), p.types[p.ops[k].results[0]].dtype.numpy) is not None
               for k in members)


@register_pass("fuse-elementwise",
               f"run connected element-wise ops (Float32/Float64, static shapes of at least {MIN_ELEMENTS:,} "
               f"elements; Exp, Log, Tanh and Float64 activations stay apart) as one compiled loop each "
               f"(FusedElementwise)")
def fuse_elementwise(p: Program) -> str:
    fz = fusion(p.backend)
    if fz is None:
        return "nothing to fuse: the backend has no fused loops"
    gs = _Groups(p)
    types = p.types
    for k, op in enumerate(p.ops):
        if fusable(op, types, fz):
            t = types[op.results[0]]
            gs.add(k, (t.dtype, tuple(t.shape)))
    sums = _sums(p, gs, fz)
    groups, small, scalar = [], 0, 0
    for g, m in gs.members.items():
        ends = sums.get(g, [])
        if len(m) + len(ends) < 2:
            continue
        if types[p.ops[min(m)].results[0]].numel < MIN_ELEMENTS:
            small += 1
        elif _all_scalar(p, m, fz):  # sums or not: GeluGrad and its bias sum on 512x4096 took 1.31 ms in one
            # loop, 1.08 apart (1.14 with 'nsz' in the loop)
            scalar += 1
        else:
            groups.append((sorted(m), ends))
    groups, crossed = _without_cycles(p, groups)
    apart = "; ".join(
        [f"{small} group{'s' if small != 1 else ''} under {MIN_ELEMENTS:,} elements left apart (a loop's start "
         f"costs more than it saves)"] * (small > 0) +
        [f"{scalar} group{'s' if scalar != 1 else ''} of only Sigmoid/GELU-like ops left apart (their own "
         f"kernels are as fast)"] * (scalar > 0) +
        [f"{crossed} group{'s' if crossed != 1 else ''} left apart: fused, {'they' if crossed != 1 else 'it'} "
         f"would depend on {'themselves' if crossed != 1 else 'itself'} through another group"] * (crossed > 0))
    if not groups:
        return "nothing to fuse" + (f": {apart}" if apart else "")
    live = set(p.live_outputs)
    readers: dict[str, set[int]] = {}
    for k, op in enumerate(p.ops):
        for v in op.operands:
            if v is not None:
                readers.setdefault(v, set()).add(k)
    unit_of: dict[int, int] = {}  # op index -> unit (the index of its group's first op, or its own)
    fused: dict[int, Op] = {}
    n_ops = n_sums = 0
    for members, ends in groups:
        ms = set(members) | set(ends)
        inputs: list[str] = []
        outputs: list[str] = []
        defined = {p.ops[k].results[0] for k in members}
        for k in members:
            for v in p.ops[k].operands:
                if v is not None and v not in defined and v not in inputs:
                    inputs.append(v)
            r = p.ops[k].results[0]
            if r in live or any(j not in ms for j in readers.get(r, ())):
                outputs.append(r)
        outputs += [p.ops[k].results[0] for k in ends]
        fused[members[0]] = FusedElementwiseOp.build([p.ops[k] for k in members + ends], inputs, outputs, types,
                                                     loop_type=types[p.ops[members[0]].results[0]])
        for k in members + ends:
            unit_of[k] = members[0]
        n_ops += len(members) + len(ends)
        n_sums += bool(ends)
    p.ops = _order(p, unit_of, fused)
    done = f"fused {n_ops} ops into {len(groups)} loop{'s' if len(groups) != 1 else ''}"
    if n_sums:
        done += f" ({n_sums} ending in ReduceSumTo sums, added up in the loop)"
    return done + (f"; {apart}" if apart else "")


# A sum over leading axes joins a group only when its columns (the kept elements) make at least
# two strips of the sum loop (the backend's ``SUM_MIN_STRIP``), one per thread: else the loop
# would run on one thread, where the unfused ops split their work.  None: that rule; a number: that.
MIN_SUM_COLUMNS: Optional[int] = None


def _sum_lead(op: Op, types: dict, key: tuple, min_columns: int) -> Optional[int]:
    """How many leading axes ``op`` (a ``ReduceSumTo``) sums its operand over, when that operand
    has the group's type (``key``) and nothing else is summed; else None."""
    x, like = op.operands
    tx = types.get(x) if x is not None else None
    tl = types.get(like) if like is not None else None
    ty = types.get(op.results[0])
    if tx is None or tl is None or ty is None or not tl.is_static or (tx.dtype, tuple(tx.shape)) != key \
            or ty.dtype != tx.dtype or len(tl.shape) > len(tx.shape):
        return None
    shape = tuple(tx.shape)
    lead = sum_lead(shape, tl.shape)
    # (``sum_layout`` checks later that the sum has rows and columns, and their layout)
    padded = (1,) * (len(shape) - len(tl.shape)) + tuple(tl.shape)
    if padded[lead:] != shape[lead:] or math.prod(shape[lead:]) < min_columns:
        return None
    return lead


def _sums(p: Program, gs: _Groups, fz: Any) -> dict[int, list[int]]:
    """Group id -> the ``ReduceSumTo`` ops (indices) that end it: each sums a member's value over
    the group's leading axes (all of a group's sums over the same ones), its operands' layout
    keeps those axes apart from one innermost axis (``sum_layout``), and taking it into the group
    closes no cycle through another op.  A sum whose ``Like`` an op computes for it alone stays
    apart: the loop does not read ``Like``, and that op would run for nothing."""
    ends: dict[int, list[int]] = {}
    lead_of: dict[int, int] = {}
    min_columns = 2 * fz.SUM_MIN_STRIP if MIN_SUM_COLUMNS is None else MIN_SUM_COLUMNS
    live = set(p.live_outputs)
    n_readers: dict[str, int] = {}
    for op in p.ops:
        for v in op.operands:
            if v is not None:
                n_readers[v] = n_readers.get(v, 0) + 1
    for k, op in enumerate(p.ops):
        if type(op) is not ReduceSumToOp:
            continue
        q = gs.producer.get(op.operands[0]) if op.operands[0] is not None else None
        g = gs.group.get(q) if q is not None else None
        like = op.operands[1]
        if g is None or (like in gs.producer and n_readers.get(like, 0) == 1 and like not in live):
            continue
        lead = _sum_lead(op, p.types, gs.key[g], min_columns)
        if lead is None or lead_of.get(g, lead) != lead:
            continue
        members = set(gs.members[g])
        defined = {p.ops[m].results[0] for m in members}
        outside = {v for m in members for v in p.ops[m].operands if v is not None and v not in defined}
        if fz.sum_layout(gs.key[g][1], [tuple(p.types[v].shape) for v in outside], lead) is None:
            continue
        if not gs.acyclic(members | set(ends.get(g, ())) | {k}, gs.ext[g] | {q}):
            continue
        ends.setdefault(g, []).append(k)
        lead_of[g] = lead
    return ends


def _without_cycles(p: Program, groups: list) -> tuple[list, int]:
    """``groups`` less those that would close a cycle through another group (each group alone
    was checked as it grew, but group A may feed an op that feeds group B while B feeds A):
    while the graph of units (groups, other ops) has a cycle, the last group on one is left
    apart.  Returns the groups kept and how many were left apart."""
    dropped = 0
    while groups:
        unit_of: dict[int, int] = {}
        for members, ends in groups:
            for k in members + ends:
                unit_of[k] = members[0]
        producer: dict[str, int] = {}
        for k, op in enumerate(p.ops):
            for r in op.results:
                producer[r] = unit_of.get(k, k)
        deps: dict[int, set[int]] = {}
        for k, op in enumerate(p.ops):
            u = unit_of.get(k, k)
            reads = op.operands[:1] if type(op) is ReduceSumToOp and k in unit_of else op.operands
            d = deps.setdefault(u, set())
            d.update(q for q in (producer.get(v) for v in reads if v is not None) if q is not None and q != u)
        users: dict[int, list[int]] = {u: [] for u in deps}
        for u, d in deps.items():
            for q in d:
                users[q].append(u)
        count = {u: len(d) for u, d in deps.items()}
        ready = [u for u, c in count.items() if c == 0]
        while ready:
            u = ready.pop()
            for w in users[u]:
                count[w] -= 1
                if count[w] == 0:
                    ready.append(w)
        stuck = {u for u, c in count.items() if c > 0}
        if not stuck:
            break
        # less what only follows a cycle: what is left lies on one (or between two)
        out = {u: sum(1 for w in users[u] if w in stuck) for u in stuck}
        tail = [u for u in stuck if out[u] == 0]
        while tail:
            u = tail.pop()
            stuck.discard(u)
            for q in deps[u]:
                if q in stuck:
                    out[q] -= 1
                    if out[q] == 0:
                        tail.append(q)
        worst = max(members[0] for members, _ in groups if members[0] in stuck)
        groups = [g for g in groups if g[0][0] != worst]
        dropped += 1
    return groups, dropped


def _order(p: Program, unit_of: dict[int, int], fused: dict[int, Op]) -> list[Op]:
    """The ops with each group replaced by its fused op, in a valid order: Kahn's algorithm over
    the units, the earliest original position first (the old order wherever it still holds)."""
    producer: dict[str, int] = {}
    units: dict[int, Op] = {}
    for k, op in enumerate(p.ops):
        u = unit_of.get(k, k)
        units[u] = fused.get(u, op) if u in fused else op
        for r in op.results:
            producer[r] = u
    deps: dict[int, set[int]] = {u: set() for u in units}
    users: dict[int, list[int]] = {u: [] for u in units}
    for u, op in units.items():
        for v in op.operands:
            d = producer.get(v) if v is not None else None
            if d is not None and d != u and d not in deps[u]:
                deps[u].add(d)
                users[d].append(u)
    ready = [u for u, d in deps.items() if not d]
    heapq.heapify(ready)
    out: list[Op] = []
    while ready:
        u = heapq.heappop(ready)
        out.append(units[u])
        for w in users[u]:
            deps[w].discard(u)
            if not deps[w]:
                heapq.heappush(ready, w)
    assert len(out) == len(units), "fuse-elementwise made a cycle"
    return out
