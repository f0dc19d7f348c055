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
from .export_ops import _io, _reduce, exporter


@exporter(CastOp)
def _cast(e: Any, op: Op) -> None:
    ins, outs = _io(e, op)
    e.node("Cast", ins, outs, to=DTYPE_TO_ONNX[DType(op.attrs["to"])])


@exporter(ReduceMaxOp)
def _reduce_max(e: Any, op: Op) -> None:
    ins, outs = _io(e, op)
    a = op.resolved_attrs()
    _reduce(e, "ReduceMax", ins[0], outs[0], None if a["axes"] is None else list(a["axes"]), a["keepdims"], 18)
