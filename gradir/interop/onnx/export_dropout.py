"""How ``Dropout`` and ``DropoutGrad`` are written as ONNX: ONNX takes ``ratio`` and ``training_mode`` as
inputs (opset 12+), ORT's ``DropoutGrad`` too; they are written as initializers.

* A Dropout that draws nothing (``training_mode`` false or ``ratio`` 0) is ONNX's ``Dropout`` (the
  identity and an all-true mask in any runtime).
* ``generator="ort"`` is ONNX's ``Dropout`` with its ``seed``: ONNX Runtime draws the same mask (on its
  session's first run).
* A ``mask`` operand is ORT's ``DropoutGrad(data, mask, ratio)``, the same arithmetic, and an
  ``Identity`` of the mask.
* The Philox generator has no counterpart: ONNX Runtime would draw another mask.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...errors import OnnxUnsupported as NoCounterpart
from ...ir.op import Op
from ...ops.dropout import DropoutGradOp, DropoutOp
from .common import MS_DOMAIN
from .export_ops import exporter

__all__: list[str] = []


def _ratio(e: Any, op: Op) -> str:
    """The ratio as an initializer of the data's dtype (ORT reads it as a float)."""
    return e.init(np.array(op.attrs["ratio"], e.type(op.operands[0]).dtype.numpy), "ratio")


@exporter(DropoutOp)
def _dropout(e: Any, op: Op) -> None:
    a = op.attrs
    ins = [e.name(v) for v in op.operands if v is not None]
    outs = [e.name(r) for r in op.results]
    if len(op.operands) > 2 and op.operands[2] is not None:
        raise NoCounterpart("it draws a shard's slice of a mask (shard_rows): a shard graph is not exported")
    if e.opset < 12:
        raise NoCounterpart("ONNX's Dropout takes ratio and training_mode from opset 12; use --opset 12 or later")
    drops = a["training_mode"] and a["ratio"] > 0
    mask = op.operands[1] if len(op.operands) > 1 else None
    if drops and mask is not None:
        e.node("DropoutGrad", [ins[0], e.name(mask), _ratio(e, op), e.init(np.array(True), "training_mode")],
               outs[:1], MS_DOMAIN)
        e.node("Identity", [e.name(mask)], outs[1:])
        return
    if drops and a["generator"] != "ort":
        raise NoCounterpart('gradir\'s Philox mask (generator="philox") is not what ONNX Runtime draws; '
                            'generator="ort" gives a Dropout it reproduces')
    e.node("Dropout", [ins[0], _ratio(e, op), e.init(np.array(bool(a["training_mode"])), "training_mode")], outs,
           seed=a["seed"] if drops else None)


@exporter(DropoutGradOp)
def _dropout_grad(e: Any, op: Op) -> None:
    e.node("DropoutGrad", [e.name(op.operands[0]), e.name(op.operands[1]), _ratio(e, op),
                           e.init(np.array(bool(op.attrs["training_mode"])), "training_mode")],
           [e.name(op.results[0])], MS_DOMAIN)
