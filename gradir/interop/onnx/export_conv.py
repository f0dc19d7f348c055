"""ONNX export of ONNX Runtime's pooling gradients (``gradir/ops/pool.py``): ``MaxPoolGrad`` (dY, Indices) and
``AveragePoolGrad`` (dY) in the ai.onnx domain (opset 9, as ORT writes them; ``ort_schemas.py`` makes them
known to ``onnx.checker``), with the forward op's attributes.  ORT's kernels take dX's shape from the graph:
gradir's ``shape`` attribute is written as dX's value_info."""

from __future__ import annotations

from typing import Any

from ...ir.op import Op
from ...ops.pool import AveragePoolGradOp, MaxPoolGradOp
from .export_ops import exporter

__all__: list[str] = []


def _pool_grad(e: Any, op: Op) -> None:
    attrs = {k: (list(v) if isinstance(v, (tuple, list)) else v) for k, v in op.attrs.items() if k != "shape"}
    e.declare(op.results[0])
    e.node(op.op_name, [e.name(v) for v in op.operands], [e.name(op.results[0])], **attrs)


exporter(MaxPoolGradOp)(_pool_grad)
exporter(AveragePoolGradOp)(_pool_grad)
