"""Fusion: sibling GradLSTMCellInput ops share one gate recomputation."""

from __future__ import annotations

from ..ir import OPS
from . import Program, register_pass


@register_pass("fuse-lstm-cell-grads",
               "group GradLSTMCellInput ops over the same operands into one GradLSTMCellInputFused")
def fuse_lstm_cell_grads(p: Program) -> str:
    groups: dict[tuple, list[int]] = {}
    for k, op in enumerate(p.ops):
        if op.op_name == "GradLSTMCellInput":
            key = (tuple(op.operands), op.attrs["hidden_size"])
            groups.setdefault(key, []).append(k)
    fused_cls = OPS["GradLSTMCellInputFused"]
    replace: dict[int, object] = {}
    drop: set[int] = set()
    n_groups = 0
    for (operands, hidden), all_members in groups.items():
        members, seen = [], set()
        for k in all_members:  # one op per index (duplicates stay unfused if CSE is off)
            if p.ops[k].attrs["input_index"] not in seen:
                seen.add(p.ops[k].attrs["input_index"])
                members.append(k)
        if len(members) < 2:
            continue
        n_groups += 1
        ops = [p.ops[k] for k in members]
        fused = fused_cls([r for op in ops for r in op.results], list(operands),
                          {"input_indices": tuple(op.attrs["input_index"] for op in ops), "hidden_size": hidden},
                          [t for op in ops for t in (op.result_types or [])] or None, loc=ops[0].loc)
        # the fused op goes where the first member was: all members share its operands
        replace[members[0]] = fused
        drop.update(members[1:])
    if not n_groups:
        return "nothing to fuse"
    p.ops = [replace.get(k, op) for k, op in enumerate(p.ops) if k not in drop]
    return f"fused {len(drop) + len(replace)} ops into {n_groups}"
