"""The shard graph: the (derived) graph as one shard runs it.

Derive first, then shard: gradients are derived at the global shape (a mean's ``1/n`` is the global
``n``), and the shard graph is the same graph with each split input's batch dimension (and every
dimension that follows from it) as ``?``.  Two rewrites keep the global meaning:

* an op placed by the ``reshape`` rule (``Reshape``) whose result is split gets ``-1`` at the split
  dimension of its ``shape`` (its other dims are the global ones, known);
* an averaging reduction (``AVERAGES``: ``ReduceMean``) over the split axis becomes ``ReduceSum`` then
  ``Scale(1/n)`` with the global count ``n``: a partial sum whose shards add up to the global mean;
* an op with ``SHARD_ROWS`` (a ``Dropout`` that draws its mask, a ``MaxPool``, whose Indices are positions in
  the whole X) on a split value gets the shard's rows (``shard_rows``: an input
  ``ROWS_LABEL``, Int64 ``[B, 2]`` of (global row, B), which the run splits along axis 0 like the batch)
  and the split axis (``shard_axis``), so that each shard draws its slice at the whole tensor's indices.
"""

from __future__ import annotations

import math
from typing import Mapping

from ..errors import ShardError
from ..ir.graph import Graph, GraphInput
from ..ir.op import OPS, VALUE_NAME
from ..ir.types import DType, TensorType
from .placement import Placement
from .rules import placement_rule

__all__ = ["build_shard_graph", "ROWS_LABEL"]

ROWS_LABEL = "gradir.shard_rows"  # the input of a shard graph that holds each shard's rows of the batch


def _fresh_names(graph: Graph):
    names = [i.name for i in graph.inputs] + [r for op in graph.ops for r in op.results]
    n = max((int(v[1:]) for v in names if VALUE_NAME.match(v)), default=-1) + 1
    while True:
        yield f"t{n}"
        n += 1


def build_shard_graph(graph: Graph, batch: Mapping[str, int], place: Mapping[str, Placement],
                      means: set[int]) -> Graph:
    """The shard graph of ``graph`` (validated) for the placements ``analyze`` found."""
    inputs = []
    for i in graph.inputs:
        t = i.type
        if i.name in batch:
            shape = list(t.shape)
            shape[batch[i.name]] = None
            t = TensorType(t.dtype, shape)
        inputs.append(GraphInput(i.name, t, i.span, i.type_span, i.label, i.label_span))
    fresh = _fresh_names(graph)
    rows: list[str] = []  # the shard_rows input, once a Dropout needs it
    ops = []
    for k, op in enumerate(graph.ops):
        p = place[op.results[0]]
        if k in means:
            t = graph.types[op.operands[0]]
            axes = op.attrs["axes"]
            norm = range(t.rank) if axes is None else [a % t.rank for a in axes]
            n = math.prod(t.shape[a] for a in norm)
            total = next(fresh)
            ops.append(OPS["ReduceSum"](results=[total], operands=op.operands, attrs=dict(op.attrs), loc=op.loc))
            ops.append(OPS["Scale"](results=op.results, operands=[total], attrs={"factor": 1.0 / n}, loc=op.loc))
            continue
        if p.is_split and placement_rule(type(op)) == "reshape":
            shape = list(graph.types[op.results[0]].shape)
            shape[p.axis] = -1
            ops.append(op.copy(attrs=dict(op.attrs, shape=tuple(shape)), result_types=None))
            continue
        if p.is_split and op.SHARD_ROWS and op.needs_shard_rows():
            if not rows:
                rows.append(next(fresh))
                inputs.append(GraphInput(rows[0], TensorType(DType.Int64, (None, 2)), label=ROWS_LABEL))
            at = [o.name for o in op.OPERANDS].index("shard_rows")
            where = (list(op.operands) + [None] * at)[:at] + [rows[0]]
            ops.append(op.copy(operands=where, attrs=dict(op.attrs, shard_axis=p.axis), result_types=None))
            continue
        ops.append(op.untyped())
    g = Graph(inputs, ops, graph.outputs, graph.name, graph.source, output_labels=graph.output_labels)
    g.output_spans = list(graph.output_spans)
    try:
        g.validate()
    except ShardError:
        raise
    except Exception as e:  # pragma: no cover - a placement rule that let a shape mismatch through
        raise ShardError(f"internal error: the shard graph does not check: {e}") from None
    for v, p in place.items():
        want, got = graph.types[v], g.types[v]
        ok = (got.dtype == want.dtype and got.rank == want.rank and all(
            (g_ is None) if (p.is_split and k == p.axis) else (g_ == w_)
            for k, (g_, w_) in enumerate(zip(got.shape, want.shape))))
        if not ok and not (p.is_split and want.shape[p.axis] is None and got == want):
            raise ShardError(f"internal error: {v} is {p} but its shard type is {got} (global {want})")
    return g

