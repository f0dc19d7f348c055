"""The gradient rules of the pooling ops (``ops/pool.py``), emitting ONNX Runtime's gradient ops: ``MaxPool`` ->
``MaxPoolGrad`` of its Indices, ``AveragePool`` -> ``AveragePoolGrad``; both take the forward X's shape as the
attribute ``shape`` (ORT reads it from the graph).  ``Conv`` -> ``ConvGrad`` is derived (``ConvOp.GRADIENT``)."""

from __future__ import annotations

from ..ir.op import Op
from .gradrules import Emitter, rule
from .rules_index import _static_shape

__all__: list[str] = []


@rule("MaxPool")
def _max_pool(e: Emitter, op: Op, cts: list, need: list) -> list:
    attrs = {k: v for k, v in op.attrs.items() if k != "shard_axis"}
    return [e.MaxPoolGrad(cts[0], op.results[1], shape=_static_shape(e, op, op.operands[0]), **attrs), None]


@rule("AveragePool")
def _average_pool(e: Emitter, op: Op, cts: list, need: list) -> list:
    return [e.AveragePoolGrad(cts[0], shape=_static_shape(e, op, op.operands[0]), **op.attrs)]
