"""Fusion of sibling ops: ops that declare ``FUSES_INTO`` (today ``GradLSTMCellInput``, whose
siblings over the same operands share one gate recomputation) become one fused op."""

from __future__ import annotations

from ...ir.op import OPS
from .pipeline import Program, register_pass


@register_pass("fuse-lstm-cell-grads",
               "group GradLSTMCellInput ops over the same operands into one GradLSTMCellInputFused")
def fuse_siblings(p: Program) -> str:
    groups: dict[tuple, list[int]] = {}
    for k, op in enumerate(p.ops):
        if op.FUSES_INTO is not None:
            _, index_attr, _ = op.FUSES_INTO
            others = tuple(sorted((a, repr(v)) for a, v in op.attrs.items() if a != index_attr))
            groups.setdefault((type(op), tuple(op.operands), others), []).append(k)
    replace: dict[int, object] = {}
    drop: set[int] = set()
    n_groups = 0
    for (cls, operands, _), all_members in groups.items():
        fused_name, index_attr, list_attr = cls.FUSES_INTO
        members, seen = [], set()
        for k in all_members:  # one op per index (duplicates stay unfused if CSE is off)
            if p.ops[k].attrs[index_attr] not in seen:
                seen.add(p.ops[k].attrs[index_attr])
                members.append(k)
        if len(members) < 2:
            continue
        n_groups += 1
        ops = [p.ops[k] for k in members]
        attrs = {a: v for a, v in ops[0].attrs.items() if a != index_attr}
        attrs[list_attr] = tuple(op.attrs[index_attr] for op in ops)
        fused = OPS[fused_name]([r for op in ops for r in op.results], list(operands), attrs,
                                [t for op in ops for t in (op.result_types or [])] or None, loc=ops[0].loc)
        # the fused op goes where the first member was: all members share its operands
        replace[members[0]] = fused
        drop.update(members[1:])
    if not n_groups:
        return "nothing to fuse"
    p.ops = [replace.get(k, op) for k, op in enumerate(p.ops) if k not in drop]
    return f"fused {len(drop) + len(replace)} ops into {n_groups}"
