"""Dead-code elimination and common-subexpression elimination."""

from __future__ import annotations

from ...ir.op import freeze
from .pipeline import Program, register_pass


@register_pass("dce", "remove ops none of whose results reach a graph output")
def dead_code_elimination(p: Program) -> str:
    needed = set(p.live_outputs)
    keep = []
    # one backward sweep over the ordered ops: an op is live if any result is needed
    for op in reversed(p.ops):
        if any(r in needed for r in op.results):
            keep.append(op)
            needed.update(v for v in op.operands if v is not None)
    removed = len(p.ops) - len(keep)
    keep.reverse()
    p.ops = keep
    return f"removed {removed} op{'s' if removed != 1 else ''}"


@register_pass("cse", "merge ops with the same type, attributes and operands (later copies reuse the first)")
def common_subexpression_elimination(p: Program) -> str:
    seen: dict[tuple, list[str]] = {}
    rename: dict[str, str] = {}
    keep = []
    merged = 0
    for op in p.ops:
        operands = [rename.get(v, v) if v is not None else None for v in op.operands]
        if operands != op.operands:
            op = op.copy(operands=operands)
        # the types too: a Constant's is part of the op (elsewhere operands and attributes determine it)
        key = (op.op_name, tuple(operands), freeze(op.attrs), tuple(op.result_types or ()))
        first = seen.get(key)
        if first is not None:
            merged += 1
            for r, f in zip(op.results, first):
                rename[r] = f
            continue
        seen[key] = op.results
        keep.append(op)
    p.ops = keep
    for r, f in rename.items():
        p.aliases[r] = f
    return f"merged {merged} op{'s' if merged != 1 else ''}"
