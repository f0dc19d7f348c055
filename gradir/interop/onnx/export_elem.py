"""Export handlers of the logic family and the extremes (``gradir/ops/logic.py``, ``elementary.py``): ``Cast``'s
``to`` as ONNX's TensorProto number; ``ReduceMax``'s ``axes`` as an attribute before opset 18, an input
from 18."""

from __future__ import annotations

from typing import Any

from ...ir.op import Op
from ...ir.types import DType
from ...ops.logic import CastOp
from ...ops.elementary import ReduceMaxOp
from .common import DTYPE_TO_ONNX
from .export_ops import exporter


@exporter(CastOp)
def _cast(e: Any, op: Op) -> None:
    e.node("Cast", [e.name(op.operands[0])], [e.name(op.results[0])], to=DTYPE_TO_ONNX[DType(op.attrs["to"])])


@exporter(ReduceMaxOp)
def _reduce_max(e: Any, op: Op) -> None:
    x, out = e.name(op.operands[0]), e.name(op.results[0])
    a = op.resolved_attrs()
    axes, keep = (None if a["axes"] is None else list(a["axes"])), int(a["keepdims"])
    if axes is not None and not axes:
        e.node("Identity", [x], [out])
    elif e.opset >= 18:
        e.node("ReduceMax", [x] + ([e.ints(axes, "axes")] if axes is not None else []), [out], keepdims=keep)
    else:
        e.node("ReduceMax", [x], [out], axes=axes, keepdims=keep)
