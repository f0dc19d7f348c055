"""Chunking: regions of ops independent along their rows run in blocks of rows (``Chunked``,
``gradir.ops.chunked``), so that their large intermediates (a language model's logits, log-probabilities
and their gradients) never exist whole, as a fused linear cross-entropy does.

*Rows* are the leading axes a region's row-indexed values share: ``N`` rows, and each row-indexed value
is ``[N, ...]`` once its leading axes are merged (``[S, 1, B, C]`` over ``N = S·B``; its *period*, the rows
one index of its first axis holds, is ``B``).  An op belongs to a region when its rule (``ROW_RULES``,
keyed by op class; element-wise ops by their ``ELEMENTWISE`` trait) says that its row-indexed results'
rows depend only on the same rows of its row-indexed operands, its other operands being read whole
(weights, scalars); or that it sums over every row (``Xᵀ·dY``, a mean loss): such a *reduction* ends the
region, its partial sums added up block by block.

Bit-identity.  Summing over rows block by block gives other bits than one kernel over the whole array,
so the region is not a budget's choice: the ``chunk-rows`` pass (a default pass) always forms it, with a
block size fixed by the shapes (``block_rows``), and every run, budgeted or not, runs the same blocks and
adds the same partial sums in the same order.  The budget then has nothing to choose (``choices`` gives
none): the plan without a budget already holds only a block of each intermediate (``Plan.curve``).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Callable, Optional

from ...ir.op import Op
from ...ir.types import TensorType

if TYPE_CHECKING:  # (the passes import this module: ``chunk-rows``)
    from ..passes.pipeline import Program

__all__ = ["ROW_RULES", "row_rule", "find_regions", "chunk_rows", "block_rows", "choices", "Region"]

# a region is formed only where the values it keeps from existing whole add up to at least this much
MIN_SAVED_BYTES = 8 << 20
# a block's values (all of them, one lane's) take about this much: they stay in the caches shared by the
# lanes (the L2 and L3 of the 2-core machines measured, docs/performance.md)
BLOCK_BYTES = 4 << 20
ROW_ALIGN = 16  # block edges on multiples of this many rows (whole register tiles of the products)
LANES = 2  # blocks dealt out to two lanes, each summing its own; fixed: the bits must not follow the cores


class Use:
    """What a rule says of one op: per operand, its block of rows (True) or whole (False); per result,
    ``"rows"`` or a reduction (``"sum"`` / ``"mean"``, with ``count``, the values a mean divides by)."""

    def __init__(self, rows: tuple[bool, ...], results: tuple[str, ...], kind: str = "kernel", count: int = 1) -> None:
        self.rows, self.results, self.kind, self.count = rows, results, kind, count


Rule = Callable[[Op, "_Rows"], Optional[Use]]
ROW_RULES: dict[type, Rule] = {}


def row_rule(*classes: type) -> Callable[[Rule], Rule]:
    """Register ``fn(op, rows) -> Use | None`` as the row rule of ``classes``."""
    def deco(fn: Rule) -> Rule:
        for c in classes:
            ROW_RULES[c] = fn
        return fn
    return deco


class _Rows:
    """The row structure for ``N`` rows: which values are row-indexed and their periods."""

    def __init__(self, types: dict[str, TensorType], n: int) -> None:
        self.types, self.n = types, n

    def shape(self, v: Optional[str]) -> Optional[tuple[int, ...]]:
        t = self.types.get(v) if v is not None else None
        if t is None or not t.is_static:
            return None
        return tuple(int(d) for d in t.shape)

    def k(self, v: Optional[str]) -> Optional[int]:
        """How many leading axes of ``v`` are rows (the fewest whose product is N), or None."""
        s = self.shape(v)
        if not s or s[0] < 2:
            return None
        p = 1
        for k, d in enumerate(s, 1):
            p *= d
            if p == self.n:
                return k
            if p > self.n:
                return None
        return None

    def period(self, v: str) -> int:
        s = self.shape(v)
        assert s is not None
        return math.prod(s[1:self.k(v)])

    def row_shape(self, v: Optional[str]) -> Optional[tuple[int, ...]]:
        k = self.k(v)
        s = self.shape(v)
        return None if k is None or s is None else s[:k]


def _broadcast(op: Op, r: _Rows) -> Optional[Use]:
    """Element-wise ops (and ``BroadcastTo``): each operand either has the result's row axes (its block)
    or size 1 on all of them (read whole)."""
    if len(op.results) != 1:
        return None
    res = r.shape(op.results[0])
    rs = r.row_shape(op.results[0])
    if res is None or rs is None:
        return None
    rows = []
    for v in op.operands:
        s = r.shape(v)
        if v is None or s is None:
            return None
        padded = (1,) * (len(res) - len(s)) + s
        if len(s) == len(res) and s[:len(rs)] == rs:
            rows.append(True)
        elif all(d == 1 for d in padded[:len(rs)]):
            rows.append(False)
        else:
            return None
    return Use(tuple(rows), ("rows",))


def _axis_free(axis: int, rank: int, k: int) -> bool:
    return (axis + rank if axis < 0 else axis) >= k


def _softmax(op: Op, r: _Rows) -> Optional[Use]:
    """Softmax-like ops over one axis (or, the pre-13 ones, the axes from it on): not a row axis."""
    x = op.operands[-1]
    k, s = r.k(x), r.shape(x)
    if k is None or s is None or any(r.row_shape(v) != r.row_shape(x) or r.shape(v) != s for v in op.operands):
        return None
    if not _axis_free(int(op.attrs.get("axis", -1)), len(s), k):
        return None
    return Use((True,) * len(op.operands), ("rows",))


def _reduce(op: Op, r: _Rows) -> Optional[Use]:
    """A reduction over inner axes keeps the rows; ``ReduceSum``/``ReduceMean`` over every row axis is a
    sum over the region's rows (its result read whole, after the region)."""
    x = op.operands[0]
    k, s = r.k(x), r.shape(x)
    if k is None or s is None:
        return None
    axes = op.attrs.get("axes")
    norm = sorted({a + len(s) if a < 0 else a for a in (range(len(s)) if axes is None else axes)})
    if all(a >= k for a in norm):
        return Use((True,), ("rows",)) if r.row_shape(op.results[0]) == s[:k] else None
    if set(range(k)) <= set(norm) and op.op_name in ("ReduceSum", "ReduceMean"):
        kind = "mean" if op.op_name == "ReduceMean" else "sum"
        return Use((True,), (kind,), "sum", math.prod(s[a] for a in norm))
    return None


def _view(op: Op, r: _Rows) -> Optional[Use]:
    """A reshape (``Reshape``, ``Unsqueeze``, ``Squeeze``, ...): row n of the operand is row n of the result
    when both merge their leading axes into N rows."""
    if r.k(op.operands[0]) is None or len(op.results) != 1 or r.k(op.results[0]) is None:
        return None
    return Use((True,) + (False,) * (len(op.operands) - 1), ("rows",), "view")


def _matmul(op: Op, r: _Rows) -> Optional[Use]:
    """``A·B`` with A's rows the region's (not its last axis) and B one matrix read whole; or ``Aᵀ·B`` with
    both ``[N, ·]``: the sum over the rows of the rows' products (a weight's gradient)."""
    a, b = op.operands[:2]
    sa, sb = r.shape(a), r.shape(b)
    if sa is None or sb is None or len(sb) != 2:
        return None
    at = op.attrs
    if at.get("transBatchA", 0) or at.get("transBatchB", 0):
        return None
    if not at.get("transA", 0):
        k = r.k(a)
        if k is None or k >= len(sa) or r.row_shape(op.results[0]) != sa[:k]:
            return None
        return Use((True, False), ("rows",))
    if len(sa) == 2 and r.k(a) == 1 and r.k(b) == 1 and not at.get("transB", 0):
        return Use((True, True), ("sum",), "sum")
    return None


def _install_rules() -> None:
    from ...ir.op import OPS

    def named(*names: str) -> list[type]:
        return [OPS[n] for n in names if n in OPS]
    row_rule(*named("Softmax", "LogSoftmax", "SoftmaxGrad", "SoftmaxGrad_13", "LogSoftmaxGrad",
                    "LogSoftmaxGrad_13"))(_softmax)
    row_rule(*named("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin"))(_reduce)
    row_rule(*named("Reshape", "Unsqueeze", "Squeeze", "Flatten"))(_view)
    row_rule(*named("MatMul", "FusedMatMul"))(_matmul)
    row_rule(*named("BroadcastTo"))(_broadcast)


def rule_of(op: Op) -> Optional[Rule]:
    if not ROW_RULES:
        _install_rules()
    rule = ROW_RULES.get(type(op))
    if rule is None and (getattr(op, "ELEMENTWISE", None) or op.op_name == "FusedElementwise"):
        if op.op_name == "FusedElementwise" and op.body.sums:  # type: ignore[attr-defined]
            return None  # sums over its leading axes: not the region's kind of sum
        return _broadcast
    return rule


class Region:
    """A region found in a program: its members (indices into ``program.ops``, in order), what each rule
    said, and the row structure."""

    def __init__(self, members: list[int], uses: dict[int, Use], rows: _Rows) -> None:
        self.members, self.uses, self.rows = members, uses, rows


def _seeds(program: Program) -> list[int]:
    """Candidate row counts: the rows of the products by one matrix and of the softmax-like ops."""
    out: list[int] = []
    for op in program.ops:
        rule = rule_of(op)
        if rule not in (_matmul, _softmax) or not op.operands or op.operands[0] is None:
            continue
        t = program.types.get(op.operands[0] if rule is _matmul else op.operands[-1])
        if t is None or not t.is_static or t.rank < 2:
            continue
        s = [int(d) for d in t.shape]
        if rule is _matmul:
            if op.attrs.get("transA", 0):
                continue
            n = math.prod(s[:-1])
        else:
            axis = int(op.attrs.get("axis", -1))
            n = math.prod(s[:axis + len(s) if axis < 0 else axis])
        if n >= 2 * ROW_ALIGN and n not in out:
            out.append(n)
    return out


def _candidates(program: Program, r: _Rows, taken: set[int]) -> dict[int, Use]:
    """Every op that can run in blocks of N rows, reading the region's values only by their rows."""
    uses: dict[int, Use] = {}
    kind: dict[str, str] = {}  # a candidate's result -> "rows" or its reduction
    for k, op in enumerate(program.ops):
        if k in taken:
            continue
        rule = rule_of(op)
        use = rule(op, r) if rule is not None else None
        if use is None or not any(use.rows) or len(use.results) != len(op.results):
            continue
        if any(v in kind and (kind[v] != "rows" or not use.rows[i]) for i, v in enumerate(op.operands)):
            continue
        if any(u == "rows" and r.k(v) is None for u, v in zip(use.results, op.results)):
            continue
        uses[k] = use
        kind.update(zip(op.results, use.results))
    return uses


def _components(program: Program, members: set[int]) -> list[list[int]]:
    """The members connected through the values they pass each other."""
    parent = {k: k for k in members}

    def find(k: int) -> int:
        while parent[k] != k:
            parent[k] = parent[parent[k]]
            k = parent[k]
        return k
    producer: dict[str, int] = {}
    for k in sorted(members):
        for v in program.ops[k].operands:
            if v in producer:
                parent[find(k)] = find(producer[v])
        for v in program.ops[k].results:
            producer[v] = k
    groups: dict[int, list[int]] = {}
    for k in sorted(members):
        groups.setdefault(find(k), []).append(k)
    return list(groups.values())


def _convex(program: Program, comp: list[int]) -> list[int]:
    """Drop the members that read, through ops outside, a value made from another member: the region
    runs as one op, so nothing outside it may sit between two of its members."""
    comp_set = set(comp)
    while True:
        tainted: set[str] = set()  # values of ops outside that depend on a member
        made: set[str] = set()
        bad: set[int] = set()
        for k, op in enumerate(program.ops):
            reads = {v for v in op.operands if v is not None}
            if k in comp_set:
                if reads & tainted:
                    bad.add(k)
                made.update(op.results)
            elif reads & (made | tainted):
                tainted.update(op.results)
        if not bad:
            return sorted(comp_set)
        comp_set -= bad


def find_regions(program: Program) -> list[Region]:
    """The regions worth running in blocks (``MIN_SAVED_BYTES``), in program order, none overlapping."""
    regions: list[Region] = []
    taken: set[int] = set()
    for n in _seeds(program):
        r = _Rows(program.types, n)
        uses = _candidates(program, r, taken)
        pending = _components(program, set(uses))
        while pending:
            comp = pending.pop()
            kept = _convex(program, comp)
            if len(kept) < len(comp):
                pending.extend(_components(program, set(kept)))
                continue
            if len(kept) >= 2 and _saved_bytes(program, kept, uses) >= MIN_SAVED_BYTES:
                regions.append(Region(kept, {k: uses[k] for k in kept}, r))
                taken.update(kept)
    regions.sort(key=lambda g: g.members[0])
    return regions


def _outputs(program: Program, members: list[int]) -> list[str]:
    """The members' results read outside the region or that are graph outputs, in order."""
    inside = set(members)
    read_outside = {v for k, op in enumerate(program.ops) if k not in inside for v in op.operands}
    live = set(program.live_outputs)
    return [v for k in members for v in program.ops[k].results if v in read_outside or v in live]


def _saved_bytes(program: Program, members: list[int], uses: dict[int, Use]) -> int:
    """The bytes of the row-indexed values the region makes that then never exist whole."""
    outs = set(_outputs(program, members))
    for k in reversed(members):  # a view read outside keeps the value it views whole too
        if uses[k].kind == "view" and program.ops[k].results[0] in outs:
            outs.add(program.ops[k].operands[0])
    return sum(_nbytes(program.types[v]) for k in members if uses[k].kind != "view"
               for v, u in zip(program.ops[k].results, uses[k].results) if u == "rows" and v not in outs)


def _nbytes(t: Optional[TensorType]) -> int:
    if t is None or not t.is_static:
        return 0
    return math.prod(int(d) for d in t.shape) * t.dtype.numpy.itemsize


def block_rows(n: int, periods: list[int], row_bytes: int) -> int:
    """Rows per block: about ``BLOCK_BYTES`` of the region's values, on a multiple of every period and of
    ``ROW_ALIGN``: a function of the shapes alone (never of a budget or a thread count)."""
    unit = math.lcm(ROW_ALIGN, *periods) if periods else ROW_ALIGN
    if unit >= n:
        return n
    block = max(unit, BLOCK_BYTES // max(1, row_bytes) // unit * unit)
    return min(block, n)


def layout_of(program: Program, region: Region) -> Any:
    """The ``ChunkLayout`` of ``region``: what its op's kernel runs."""
    from ...ops.chunked import ChunkLayout, Instr
    r, ops = region.rows, program.ops
    inside = {v for k in region.members for v in ops[k].results}
    inputs: list[str] = []
    periods: dict[str, int] = {}
    sums: dict[str, str] = {}
    instrs = []
    row_bytes = 0
    for k in region.members:
        op, use = ops[k], region.uses[k]
        for v, rows in zip(op.operands, use.rows):
            if v is None:
                continue
            if v not in inside and v not in inputs:
                inputs.append(v)
            if rows:
                periods[v] = r.period(v)
        for v, u in zip(op.results, use.results):
            if u == "rows":
                periods[v] = r.period(v)
                if use.kind != "view":
                    row_bytes += _nbytes(program.types[v]) // r.n
            else:
                sums[v] = u
        instrs.append(Instr(op, use.kind, use.rows, use.count))
    outputs = _outputs(program, region.members)
    block = block_rows(r.n, sorted(set(periods.values())), row_bytes)
    lanes = LANES if -(-r.n // block) >= LANES else 1
    names = set(inputs) | inside
    return ChunkLayout(r.n, block, lanes, instrs, inputs, outputs, periods, sums,
                       {v: program.types[v] for v in names})


def chunk(program: Program, region: Region) -> None:
    """Replace ``region``'s members by one ``Chunked`` op; the ops between them that read none of their
    values go before it, those that do after it."""
    from ...ops.chunked import ChunkedOp
    op = ChunkedOp.build(layout_of(program, region))
    members = set(region.members)
    first, last = region.members[0], region.members[-1]
    before, after = [], []
    made: set[str] = set()
    for k in range(first, last + 1):
        o = program.ops[k]
        if k in members:
            made.update(o.results)
        elif any(v in made for v in o.operands):
            made.update(o.results)
            after.append(o)
        else:
            before.append(o)
    program.ops = program.ops[:first] + before + [op] + after + program.ops[last + 1:]


def chunk_rows(program: Program) -> str:
    """The ``chunk-rows`` pass: every region worth it (``find_regions``) becomes a ``Chunked`` op."""
    n = 0
    described = []
    while True:
        regions = find_regions(program)
        if not regions:
            break
        region = regions[0]
        chunk(program, region)
        n += 1
        described.append(f"{len(region.members)} ops over {region.rows.n} rows")
    return f"chunked {n} region{'s' * (n != 1)} ({'; '.join(described)})" if n else "nothing to chunk"


def choices(program: Program, plan: Any) -> list:
    """The budget's choices (``gradir.transforms.memory.model``): none.  The ``chunk-rows`` pass forms
    every region in every run (its blocks fixed by the shapes, for the same bits with and without a
    budget), so the base plan already holds only a block of each intermediate."""
    return []
