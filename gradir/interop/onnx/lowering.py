"""Ops written as standard ONNX ops for ONNX Runtime, and read back as themselves.

ONNX Runtime 1.19's CPU training build has ``SoftmaxGrad(_13)`` and ``LogSoftmaxGrad(_13)`` for Float32
only.  In Float64, ``export_onnx`` writes the same arithmetic as standard ops, which ORT runs in any dtype:

- ``LogSoftmaxGrad``: ``dX = dY - Exp(Y) * ReduceSum(dY, axes, keepdims=1)``;
- ``SoftmaxGrad``: ``dX = Y * (dY - ReduceSum(dY * Y, axes, keepdims=1))``;

over ``axis`` (the ``_13`` forms) or every axis from ``axis`` on (the flattened pre-opset-13 forms).
Each node of such a group carries a marker in its ``doc_string``; the last one says which op the group is
(``gradir-lowered: {"op": ..., "axis": ..., "inputs": [...], "outputs": [...]}``), the others
``gradir-lowered-part: OUTPUT``.  ``import_onnx`` (``regroup``) gives a complete, unedited group back as
the op (the same graph, the same bits); a group whose values are used elsewhere, or that lost a part, is
read as the standard ops it is.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["LOWERED_IN_FLOAT64", "mark", "regroup"]

# gradir ops that export_onnx writes as standard ops in Float64 (ORT has their kernels in Float32 only)
LOWERED_IN_FLOAT64 = frozenset({"SoftmaxGrad", "SoftmaxGrad_13", "LogSoftmaxGrad", "LogSoftmaxGrad_13"})

_FINAL = "gradir-lowered: "
_PART = "gradir-lowered-part: "


def mark(nodes: list, first: int, op_name: str, attrs: dict, inputs: list[str], outputs: list[str]) -> None:
    """Mark ``nodes[first:]`` (the nodes just written for one op) as one lowered group."""
    group = nodes[first:]
    for n in group[:-1]:
        n.doc_string = _PART + outputs[0]
    group[-1].doc_string = _FINAL + json.dumps({"op": op_name, **attrs, "inputs": inputs, "outputs": outputs})


def regroup(onnx: Any, nodes: list, graph_outputs: set[str], ms_domain: str) -> list:
    """``nodes`` with every complete lowered group replaced by the one op it was written for."""
    finals: dict[str, tuple[int, dict]] = {}
    parts_of: dict[str, list[int]] = {}  # group key -> its parts' indices (one pass: no scan per group)
    for i, n in enumerate(nodes):
        if n.doc_string.startswith(_PART):
            parts_of.setdefault(n.doc_string[len(_PART):], []).append(i)
        elif n.doc_string.startswith(_FINAL):
            try:
                spec = json.loads(n.doc_string[len(_FINAL):])
                key = spec["outputs"][0]
            except (ValueError, KeyError, IndexError, TypeError):
                continue
            if isinstance(spec, dict) and spec.get("op") in LOWERED_IN_FLOAT64 and list(n.output) == spec["outputs"]:
                finals[key] = (i, spec)
    if not finals:
        return nodes
    uses: dict[str, int] = {}
    for n in nodes:
        for x in n.input:
            uses[x] = uses.get(x, 0) + 1
    drop: set[int] = set()
    replace: dict[int, Any] = {}
    for key, (last, spec) in finals.items():
        parts = parts_of.get(key, [])
        inner = {o for i in parts for o in nodes[i].output}
        inner_uses = sum(1 for i in parts + [last] for x in nodes[i].input if x in inner)
        group_inputs = {x for i in parts + [last] for x in nodes[i].input if x not in inner}
        axis = spec.get("axis")
        if (not parts or inner & graph_outputs or inner_uses != sum(uses.get(o, 0) for o in inner)
                or not isinstance(axis, int) or not all(isinstance(x, str) for x in spec["inputs"])
                or len(spec["inputs"]) != 2 or not group_inputs <= set(spec["inputs"]) | _axes_inputs(nodes, parts)):
            continue  # edited since: read the standard ops as they are
        drop.update(parts)
        replace[last] = onnx.helper.make_node(spec["op"], spec["inputs"], spec["outputs"], domain=ms_domain,
                                              axis=axis, name=f"{spec['op']}_{spec['outputs'][0]}")
    return [replace.get(i, n) for i, n in enumerate(nodes) if i not in drop]


def _axes_inputs(nodes: list, parts: list[int]) -> set[str]:
    """The ``axes`` operands of the group's ``ReduceSum`` (an initializer the exporter made)."""
    return {nodes[i].input[1] for i in parts if nodes[i].op_type == "ReduceSum" and len(nodes[i].input) > 1}
