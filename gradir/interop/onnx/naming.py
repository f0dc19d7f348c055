"""Value names through an export and back: a model ``export_onnx`` wrote names each unlabelled value by its
gradir name (``t7``), so ``import_onnx`` gives those values their names back, and never makes up a name
that is one of the model's (an ONNX input named ``t0`` is not "the name of another value").

Only canonical value names (``t0``, ``t12``; not ``t007``) gradir can hold (at most 18 digits) are kept:
they are the ones gradir writes.  A longer ``t99999999999999999999999`` is an ordinary ONNX name: a label.
"""

from __future__ import annotations

import itertools
import re
from typing import Any

from ...ir.graph import Graph, GraphInput

__all__ = ["reserve_value_names", "keep_value_names"]

_CANONICAL = re.compile(r"t(?:0|[1-9][0-9]{0,17})\Z")  # a value name has at most 18 digits


def model_value_names(graph: Any) -> set[str]:
    """Every canonical value name among an ONNX graph's names (inputs, initializers, node outputs)."""
    names = {vi.name for vi in graph.input} | {t.name for t in graph.initializer}
    names.update(o for node in graph.node for o in node.output)
    names.update(o.name for o in graph.output)
    return {n for n in names if _CANONICAL.match(n)}


def reserve_value_names(builder: Any, graph: Any) -> None:
    """Make ``builder`` number its values after the model's own ``tN`` names, so that none of its names is
    one of the model's (``keep_value_names`` then gives those names back to their values)."""
    numbers = [int(n[1:]) for n in model_value_names(graph)]
    if numbers:
        builder._next = max(builder._next, max(numbers) + 1)


def keep_value_names(graph: Graph, values: dict[str, Any], model: Any = None) -> Graph:
    """``graph`` with each value named by its ONNX name where that name is a canonical value name
    (``values``: ONNX name -> the builder's ``Value``); the first ONNX name of a value wins.  An output
    whose ONNX name is canonical but reached no value by it (a constant folded on import) takes that
    name too, instead of a label.  Values without an ONNX name of their own are numbered anew, never
    with a canonical name the model (``model``, an ONNX graph) uses elsewhere."""
    rename: dict[str, str] = {}
    claimed: set[str] = set()
    for onnx_name, v in values.items():
        if _CANONICAL.match(onnx_name) and v.name not in rename and onnx_name not in claimed:
            rename[v.name] = onnx_name
            claimed.add(onnx_name)
    labels = list(graph.output_labels)
    for k, (o, lb) in enumerate(zip(graph.outputs, labels)):
        if lb is not None and _CANONICAL.match(lb) and lb not in claimed and o not in rename:
            rename[o] = lb
            claimed.add(lb)
            labels[k] = None  # the value now has the output's name: no label needed
    reserved = claimed | (model_value_names(model) if model is not None else set())
    free = (f"t{k}" for k in itertools.count() if f"t{k}" not in reserved)
    for n in [i.name for i in graph.inputs] + [x for op in graph.ops for x in op.results]:
        if n not in rename:  # a value with no ONNX name of its own (a Constant made on import): numbered anew
            rename[n] = next(free)
    rename = {k: v for k, v in rename.items() if k != v}
    if not rename and labels == list(graph.output_labels):
        return graph

    def r(n: Any) -> Any:
        return rename.get(n, n) if n is not None else None
    out = Graph([GraphInput(r(i.name), i.type, label=i.label) for i in graph.inputs],
                [op.copy(results=[r(x) for x in op.results], operands=[r(x) for x in op.operands]) for op in graph.ops],
                [r(o) for o in graph.outputs], name=graph.name, output_labels=labels)
    return out.validate()
