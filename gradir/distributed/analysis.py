"""The placement pass: every value's placement, op by op, from the rules that place the ops
(``rules.placement_rule``: derived from their traits, or named by ``Op.SHARDING``); a refusal becomes a
located ``ShardError`` naming the op."""

from __future__ import annotations

from typing import Mapping, Optional

from ..errors import ArgumentError, Diagnostic, Refusal, ShardError, shown
from ..ir.graph import Graph
from ..ir.op import Op
from .placement import REPLICATED, Placement, RuleContext, integer, split
from .rules import RULES, placement_rule

__all__ = ["analyze"]


def _op_diagnostic(graph: Graph, op: Op, message: str, operand: Optional[int]) -> Diagnostic:
    span = None
    if op.loc is not None:
        ops = op.loc.operands
        span = ops[operand] if operand is not None and operand < len(ops) else op.loc.name
    return Diagnostic(message, span, graph.source if span is not None else None)


def analyze(graph: Graph, batch: Mapping[str, int]) -> tuple[dict[str, Placement], set[int]]:
    """Every value's placement (``batch``: input value name -> axis, see ``resolve_batch``) and the
    indices of the ``ReduceMean`` ops that reduce over a split axis (the shard graph rewrites them).

    Raises ``ShardError`` at the first op that refuses, located at the op (or at the operand at fault)."""
    if not isinstance(graph, Graph):
        raise ArgumentError(f"analyze() takes a Graph, not {type(graph).__name__}")
    if not isinstance(batch, Mapping):
        raise ArgumentError(f"batch must be a mapping of input value names to axes, got {type(batch).__name__}")
    ranks = {i.name: i.type.rank for i in graph.inputs}
    for key, axis in batch.items():
        if not isinstance(key, str) or key not in ranks:
            raise ArgumentError(f"batch: {shown(key)} is not the value name of an input (labels are resolved by "
                                f"gradir.shard)")
        number = integer(axis)
        if number is None or not 0 <= number < ranks[key]:
            raise ArgumentError(f"batch: the axis of {key} must be an integer from 0 to {ranks[key] - 1}, got "
                                f"{shown(axis)}")
    if not graph.validated:
        graph.validate()
    place: dict[str, Placement] = {}
    for i in graph.inputs:
        place[i.name] = split(batch[i.name]) if i.name in batch else REPLICATED
    means: set[int] = set()
    for k, op in enumerate(graph.ops):
        ps = [place[v] if v is not None else None for v in op.operands]
        if all(p is None or p.is_replicated for p in ps):
            for r in op.results:
                place[r] = REPLICATED
            continue
        types = [graph.types[v] if v is not None else None for v in op.operands]
        ctx = RuleContext(op, ps, types, [graph.types[r] for r in op.results])
        try:
            try:
                rule = RULES[placement_rule(type(op))]
            except ShardError as e:
                raise Refusal(e.messages[0]) from None
            out = rule(ctx)
        except Refusal as e:
            listed = ", ".join(f"{v} {p}" for v, p in zip(op.operands, ps) if v is not None)
            what = f"cannot shard {op.op_name} ({', '.join(op.results)} = {op.op_name}(...); operands: {listed})"
            raise ShardError(_op_diagnostic(graph, op, f"{what}: {e.message}", e.operand)) from None
        assert len(out) == len(op.results), (op.op_name, out)
        if ctx.mean_rewrite:
            means.add(k)
        for r, p in zip(op.results, out):
            place[r] = p
    return place, means
