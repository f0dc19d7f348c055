"""ONNX export of the norm family's ops that are not data alone: an inference-mode ``BatchNormalization``
(ONNX's node has Y alone then; its running_mean and running_var, copies of input_mean and input_var, are
written as ``Identity`` nodes of them when the graph reads them).  ``exporter`` imports this module (it
registers its functions in ``export_ops.EXPORTERS``)."""

from __future__ import annotations

from typing import Any

from ...errors import OnnxUnsupported as NoCounterpart
from ...ir.op import Op
from ...ops.batch_norm import BatchNormalizationOp
from .export_ops import exporter


@exporter(BatchNormalizationOp)
def _batch_normalization(e: Any, op: Op) -> None:
    if e.opset < 14 and op.attrs.get("training_mode"):  # an inference node is the same in opsets 9-13
        raise NoCounterpart(f"ONNX's BatchNormalization takes training_mode from opset 14 on (asked: {e.opset})")
    ins = [e.name(v) for v in op.operands]
    attrs = {"epsilon": e.float_attr(op, "epsilon"), "momentum": e.float_attr(op, "momentum")}
    if op.attrs.get("training_mode"):
        e.node("BatchNormalization", ins, [e.name(r) for r in op.results], training_mode=1, **attrs)
        return
    used = {v for o in e.graph.ops for v in o.operands} | set(e.graph.outputs)
    e.node("BatchNormalization", ins, [e.name(op.results[0])], **attrs)
    for r, src in zip(op.results[1:], op.operands[3:]):
        if r in used:
            e.node("Identity", [e.name(src)], [e.name(r)])
