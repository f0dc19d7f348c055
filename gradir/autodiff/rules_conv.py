"""The gradient rules of the convolution and pooling ops (``ops/conv.py``, ``ops/pool.py``), emitting ONNX Runtime's
gradient ops: ``Conv`` -> ``ConvGrad`` (``auto_pad`` resolved into ``pads``: ORT's kernel reads ``pads`` alone),
``MaxPool`` -> ``MaxPoolGrad`` of its Indices, ``AveragePool`` -> ``AveragePoolGrad``; the pooling gradients take
the forward X's shape as the attribute ``shape`` (ORT reads it from the graph)."""

from __future__ import annotations

from ..ir.op import Op
from ..ir.types import format_shape
from ..ops.conv import window
from .gradrules import Emitter, rule

__all__: list[str] = []


@rule("MaxPool")
def _max_pool(e: Emitter, op: Op, cts: list, need: list) -> list:
    """ORT's MaxPoolGrad reads Indices row-major whatever ``storage_order`` says (ORT 1.19.2's own gradient of a
    ``storage_order=1`` MaxPool is not the derivative): of such a MaxPool gradir scatters by the Indices of a
    row-major MaxPool of the same X, which is exact."""
    attrs = {k: v for k, v in op.attrs.items() if k != "shard_axis"}
    indices = op.results[1]
    if attrs.get("storage_order", 0):
        attrs["storage_order"] = 0
        indices = e.MaxPool(op.operands[0], **attrs)[1]
    return [e.MaxPoolGrad(cts[0], indices, shape=e.static_shape(op, op.operands[0]), **attrs), None]


@rule("AveragePool")
def _average_pool(e: Emitter, op: Op, cts: list, need: list) -> list:
    return [e.AveragePoolGrad(cts[0], shape=e.static_shape(op, op.operands[0]), **op.attrs)]


@rule("Conv")
def _conv(e: Emitter, op: Op, cts: list, need: list) -> list:
    x, w = op.operands[:2]
    attrs = dict(op.attrs)
    xs, ws = e.shape(x), e.shape(w)
    if attrs["auto_pad"] != "NOTSET" and None not in xs[2:] and None not in ws[2:]:
        geo = window(xs[2:], attrs, ws[2:])
        attrs.update(auto_pad="NOTSET", pads=list(geo.begin + geo.end))
    dx, dw, db = e.ConvGrad(cts[0], x, w, **attrs)
    has_b = len(op.operands) > 2 and op.operands[2] is not None
    return [dx, dw, db if has_b else None][:len(op.operands)]


@rule("GlobalAveragePool")
def _global_average_pool(e: Emitter, op: Op, cts: list, need: list) -> list:
    """dY broadcast to X's shape times 1 / (D1 * D2 * ...) (ONNX Runtime's builder: Expand, then Div by the
    count)."""
    x = op.operands[0]
    shape = e.shape(x)
    if None in shape[2:]:
        e.fail(op, f"cannot differentiate GlobalAveragePool: its operand {x} has shape {format_shape(shape)}, and "
                   "the 1/n of its mean needs the spatial sizes (give the '?' dimensions sizes)")
    n = 1
    for d in shape[2:]:
        n *= d
    dx = e.BroadcastTo(cts[0], x)
    return [dx if n == 1 else e.Scale(dx, factor=1.0 / n)]


@rule("GlobalMaxPool")
def _global_max_pool(e: Emitter, op: Op, cts: list, need: list) -> list:
    """dY times Cast(Equal(X, Y)) (Y and dY broadcast over the spatial axes), as gradir's ReduceMax rule: every
    element tied for the maximum gets dY whole.  (ONNX Runtime 1.19.2 has no gradient builder for it.)"""
    x = op.operands[0]
    mask = e.Cast(e.Equal(x, op.results[0]), to=e.type(x).dtype.value)
    return [e.Mul(cts[0], mask)]


@rule("Flatten")
def _flatten(e: Emitter, op: Op, cts: list, need: list) -> list:
    """dY reshaped back to X's shape (ONNX Runtime's builder: Reshape to Shape(X)); one '?' dimension of X
    becomes Reshape's -1."""
    shape = e.shape(op.operands[0])
    if sum(d is None for d in shape) > 1:
        e.fail(op, f"cannot differentiate Flatten: its operand {op.operands[0]} has shape {format_shape(shape)} "
                   "with more than one unknown dimension, so the gradient cannot be reshaped back")
    return [e.Reshape(cts[0], shape=[-1 if d is None else d for d in shape])]
