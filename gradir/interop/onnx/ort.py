"""Whether ONNX Runtime can run an export (``ort_notes``): what ``gradir export`` says after writing a
model ORT's CPU training build would refuse.

``export_onnx`` writes a model that passes ``onnx.checker``, which is not the same as one ORT runs: ORT
1.19 has some of its gradient kernels for Float32 only, refuses a ``Scale`` by 0, and has no kernel for
the ``ai.gradir`` ops ``custom_domain=True`` writes (and a user's op).  The export is still right (for viewing,
for round trips through ``import_onnx``); the notes say why ORT would not run it, instead of leaving the user to
find out from ORT's error.
"""

from __future__ import annotations

from ...errors import OnnxUnsupported as NoCounterpart
from ...ir.graph import Graph
from ...ir.op import Op
from ...ir.onnxmap import onnx_map
from ...ir.types import DType
from . import lowering
from .common import require_onnx
from .export_gru import orts_gru_training_refuses
from .export_ops import exporter_for, exports_in_gradir_domain
from .exporter import Export

__all__ = ["ort_notes"]

def ort_notes(graph: Graph, opset: int, custom: bool) -> list[str]:
    """Why ONNX Runtime's CPU training build cannot run the export of ``graph`` (empty when it can): ops
    written in the ``ai.gradir`` domain, and ops ORT has no CPU kernel of for their dtype."""
    from ...ops.composite import expand_composites
    graph = expand_composites(graph)  # a composite op exports as its decomposition
    lacking: dict[str, list[str]] = {}
    for op in graph.ops:
        t = graph.types[op.results[0]] if op.results else None
        if exports_in_gradir_domain(type(op)) or custom and (exporter_for(type(op)) is None or
                                                               _needs_custom(graph, op, opset)):
            lacking.setdefault("ai.gradir ops (ONNX Runtime has no kernel for them)", []).append(op.op_name)
        elif _float32_only(type(op)) and t is not None and t.dtype == DType.Float64 and \
                not (op.op_name == "Gelu" and opset >= 20) and \
                not (op.op_name in lowering.LOWERED_IN_FLOAT64 and not custom and t.rank > 0):  # standard ops
            lacking.setdefault("no Float64 CPU kernel in ONNX Runtime 1.19", []).append(op.op_name)
        elif op.op_name == "Scale" and float(op.attrs["factor"]) == 0.0:
            lacking.setdefault("ONNX Runtime's Scale refuses a factor of 0", []).append(op.op_name)
        elif orts_gru_training_refuses(graph, op):
            lacking.setdefault("ONNX Runtime's GRUTraining computes the forward direction only, without sequence "
                               "lengths or clip", []).append(op.op_name)
    return [f"{why}: {', '.join(sorted(set(ops)))}" for why, ops in lacking.items()]


def _needs_custom(graph: Graph, op: Op, opset: int) -> bool:
    e = Export(require_onnx(), graph, opset, False)
    try:
        exporter_for(type(op))(e, op)  # type: ignore[misc] - called only for ops that have one
    except NoCounterpart:
        return True
    return False


def _float32_only(cls: type[Op]) -> bool:
    """ORT's CPU kernel of the op's node exists for Float32 only (its ONNX data says so)."""
    m = onnx_map(cls)
    return m is not None and m.ort_float32_only
