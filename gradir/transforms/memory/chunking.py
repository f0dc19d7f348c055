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
from typing import TYPE_CHECKING, Any

from .rows import ROW_RULES, Rows, Use, matmul_rule, row_rule, rule_of, softmax_rule, nbytes as _nbytes

if TYPE_CHECKING:  # (the passes import this module: ``chunk-rows``)
    from ..passes.pipeline import Program

__all__ = ["ROW_RULES", "row_rule", "find_regions", "chunk_rows", "block_rows", "choices", "Region"]

# a region is formed only where the values it keeps from existing whole add up to at least this much
MIN_SAVED_BYTES = 8 << 20
# a block's values (all of them, one lane's) take about this much: they stay in the caches shared by the
# lanes (the L2 and L3 of the 2-core machines measured, docs/performance.md)
BLOCK_BYTES = 4 << 20
ROW_ALIGN = 16  # block edges on multiples of this many rows (whole register tiles of the products)
WORTH_SCRATCH_SHARE = 0.5  # a region's blocks hold at most this share of what it keeps from existing whole
DEFAULT_PIECES = 4  # a block without a budget: this many pieces (a budget may choose one)
DEFAULT_SCRATCH_SHARE = 0.25  # ... fewer if their blocks would hold more than this share of what chunking saves
LANES = 2  # blocks dealt out to two lanes, each summing its own; fixed: the bits must not follow the cores


class Region:
    """A region found in a program: its members (indices into ``program.ops``, in order), what each rule
    said, and the row structure."""

    def __init__(self, members: list[int], uses: dict[int, Use], rows: Rows) -> None:
        self.members, self.uses, self.rows = members, uses, rows


def _seeds(program: Program) -> list[int]:
    """Candidate row counts: the rows of the products by one matrix and of the softmax-like ops."""
    out: list[int] = []
    for op in program.ops:
        rule = rule_of(op)
        if rule not in (matmul_rule, softmax_rule) or not op.operands or op.operands[0] is None:
            continue
        t = program.types.get(op.operands[0] if rule is matmul_rule else op.operands[-1])
        if t is None or not t.is_static or t.rank < 2:
            continue
        s = [int(d) for d in t.shape]
        if rule is matmul_rule:
            if op.attrs.get("transA", 0):
                continue
            n = math.prod(s[:-1])
        else:
            axis = int(op.attrs.get("axis", -1))
            n = math.prod(s[:axis + len(s) if axis < 0 else axis])
        if n >= 2 * ROW_ALIGN and n not in out:
            out.append(n)
    return out


def _candidates(program: Program, r: Rows, taken: set[int]) -> dict[int, Use]:
    """Every op that can run in blocks of N rows, reading the region's values only by their rows."""
    uses: dict[int, Use] = {}
    kind: dict[str, str] = {}  # a candidate's result -> "rows" or its reduction
    read = {v for op in program.ops for v in op.operands}
    live = set(program.live_outputs)
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
        if any(u == "drop" and (v in read or v in live) for u, v in zip(use.results, op.results)):
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
        r = Rows(program.types, n)
        uses = _candidates(program, r, taken)
        pending = _components(program, set(uses))
        while pending:
            comp = pending.pop()
            kept = _convex(program, comp)
            if len(kept) < len(comp):
                pending.extend(_components(program, set(kept)))
                continue
            if len(kept) >= 2 and _saved_bytes(program, kept, uses) >= MIN_SAVED_BYTES:
                region = Region(kept, {k: uses[k] for k in kept}, r)
                if _worth_it(program, region):
                    regions.append(region)
                    taken.update(kept)
    regions.sort(key=lambda g: g.members[0])
    return regions


def _worth_it(program: Program, region: Region) -> bool:
    """Enough pieces for two lanes of a few pieces each, and blocks holding less than half of what the
    region keeps from existing whole."""
    from ...ops.chunked import ChunkedOp
    lay = layout_of(program, region)
    pieces = -(-lay.rows // lay.sub)
    return pieces >= 2 * LANES and ChunkedOp.build(lay).scratch_bytes() <= WORTH_SCRATCH_SHARE * _saved_bytes(
        program, region.members, region.uses)


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
            if u == "drop":
                continue
            if u == "rows":
                periods[v] = r.period(v)
                if use.kind != "view":
                    row_bytes += _nbytes(program.types[v]) // r.n
            else:
                sums[v] = u
        instrs.append(Instr(op, use.kind, use.rows, use.count))
    outputs = _outputs(program, region.members)
    sub = block_rows(r.n, sorted(set(periods.values())), row_bytes)
    lanes = LANES if -(-r.n // sub) >= LANES else 1
    names = set(inputs) | inside
    lay = ChunkLayout(r.n, sub, sub, lanes, instrs, inputs, outputs, periods, sums,
                      {v: program.types[v] for v in names})
    # without a budget: blocks of a few pieces (fewer kernel calls), holding at most a quarter of what the
    # region keeps from existing whole; ``choices`` offers blocks of one piece
    from ...ops.chunked import ChunkedOp
    saved = _saved_bytes(program, region.members, region.uses)
    m = DEFAULT_PIECES
    while True:
        lay.block = min(lay.lane_block(), sub * m)
        if m <= 1 or ChunkedOp.build(lay).scratch_bytes() <= saved * DEFAULT_SCRATCH_SHARE:
            return lay
        m //= 2


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
    from ...backends.base import kernel_info
    from ...ops.chunked import ChunkedOp
    if kernel_info(program.backend, ChunkedOp) is None:
        return "nothing to chunk: the backend has no Chunked kernel"
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
    """The budget's choices (``gradir.transforms.memory.model``): for each ``Chunked`` step of the base plan
    that runs in whole lanes, the option of running it in blocks of ``sub`` rows: its intermediates then
    hold one block per lane instead of every row.  The bits are the same (``ChunkLayout``): only the
    blocks the members run on change, not the pieces the sums are taken in."""
    from ...ops.chunked import ChunkedOp
    from .model import Choice, Interval, Option
    out = []
    for st in plan.steps:
        op = st.op
        if not isinstance(op, ChunkedOp) or op.layout is None or op.layout.block <= op.layout.sub:
            continue
        small = op.with_block(op.layout.sub)
        saved = op.scratch_bytes() - small.scratch_bytes()
        if saved <= 0:
            continue
        extra = (small.layout.n_blocks - op.layout.n_blocks) * len(op.layout.instrs) * CALL_SECONDS

        def apply(p: Program, results: tuple = tuple(op.results), block: int = op.layout.sub) -> None:
            for k, o in enumerate(p.ops):
                if isinstance(o, ChunkedOp) and tuple(o.results) == results:
                    p.ops[k] = o.with_block(block)
                    return
            raise ValueError(f"no Chunked op makes {', '.join(results)}")

        label = (f"run {', '.join(op.results)} ({len(op.layout.instrs)} ops over {op.layout.rows} rows) in "
                 f"blocks of {op.layout.sub} rows: {saved / 2**20:.1f} MiB of intermediates never whole")
        out.append(Choice(f"chunk {op.results[0]}", [Option(label, extra, [Interval(-saved, st.index, st.index)],
                                                           apply)], frozenset()))
    return out


# the predicted cost of one more member call on a block (Python and the kernel's set-up; measured ~20-50 µs)
CALL_SECONDS = 40e-6
