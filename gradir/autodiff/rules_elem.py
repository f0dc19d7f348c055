"""Gradient rules of the logic family, the extremes and ORT's training losses (``gradir/ops/logic.py``,
``elementary.py``, ``loss.py``):
ORT's gradient builders' forms (orttraining's ``gradient_builder.cc``), with broadcasting undone by the
driver (ORT's Where builder leaves it out).  Imported by the package (``gradir/autodiff/__init__.py``)."""

from __future__ import annotations

from typing import Optional

from ..ir.op import Op
from .gradrules import Emitter, rule


def _x(op: Op) -> str:
    return op.operands[0]  # type: ignore[return-value]


def _reduced_axes(op: Op, rank: int) -> list[int]:
    axes = op.attrs["axes"]
    return list(range(rank)) if axes is None else sorted(a % rank for a in axes)


@rule("Equal", "Less", "Greater", "Not", "And")
def _no_gradient(e: Emitter, op: Op, cts: list, need: list) -> list:
    """Bool results: no cotangent reaches them (only floating-point values are differentiated)."""
    return [None] * len(op.operands)


@rule("Where")
def _where(e: Emitter, op: Op, cts: list, need: list) -> list:
    """Where(condition, dY, 0) for X, Where(condition, 0, dY) for Y (ORT's builder)."""
    cond, dy = op.operands[0], cts[0]
    zero = e.ZerosLike(dy)
    return [None, e.Where(cond, dy, zero) if need[1] else None, e.Where(cond, zero, dy) if need[2] else None]


@rule("Cast")
def _cast(e: Emitter, op: Op, cts: list, need: list) -> list:
    """dY cast back to the operand's dtype (ORT's builder); only a float-to-float cast passes a gradient
    (a Cast to an integer or Bool has no cotangent: its result is not differentiated)."""
    t = e.type(_x(op))
    return [e.Cast(cts[0], to=t.dtype.value) if t.dtype.is_float else None]


@rule("Max", "Min")
def _min_max(e: Emitter, op: Op, cts: list, need: list) -> list:
    """ORT's builder: mask_i = Cast(Equal(X_i, Y)), dY / Sum(masks) * mask_i, so operands tied for the
    extreme share dY evenly; the driver sums each back to its operand's shape."""
    if len(op.operands) == 1:
        return [e.Identity(cts[0]) if need[0] else None]
    y, dtype = op.results[0], e.type(op.results[0]).dtype.value
    masks = [e.Cast(e.Equal(x, y), to=dtype) for x in op.operands]
    scaled = e.Div(cts[0], e.Sum(*masks))
    out: list[Optional[str]] = []
    for k, mask in enumerate(masks):
        out.append(e.Mul(scaled, mask) if need[k] else None)
    return out


@rule("ReduceMax")
def _reduce_max(e: Emitter, op: Op, cts: list, need: list) -> list:
    """ORT's builder: dY (unsqueezed where the reduction dropped axes) times Cast(Equal(X, Y)): every
    position equal to the maximum gets dY whole."""
    x, y, dy = _x(op), op.results[0], cts[0]
    axes = _reduced_axes(op, e.rank(x))
    if axes and not op.attrs["keepdims"]:
        dy, y = e.Unsqueeze(dy, axes=axes), e.Unsqueeze(y, axes=axes)
    mask = e.Cast(e.Equal(x, y), to=e.type(x).dtype.value)
    dx = e.Mul(dy, mask)
    return [dx if e.shape(dx) == e.shape(x) else e.BroadcastTo(dx, x)]


@rule("SoftmaxCrossEntropy", "SparseSoftmaxCrossEntropy")
def _ort_cross_entropy(e: Emitter, op: Op, cts: list, need: list) -> list:
    """The logits get ORT's ``SoftmaxCrossEntropyGrad`` / ``SparseSoftmaxCrossEntropyGrad`` of the loss's
    cotangent (ORT's builders: dY, log_prob, label[, weight] and the reduction), plus ``LogSoftmaxGrad_13``
    (last axis) of log_prob's when log_prob reaches an output (ORT's builder ignores that path); labels and
    weights get none (``NO_GRADIENT_OPERANDS``)."""
    log_prob = op.results[1]
    parts = []
    if cts[0] is not None:
        grad = f"{op.op_name}Grad"
        parts.append(e.op(grad, cts[0], log_prob, *op.operands[1:], reduction=op.attrs["reduction"]))
    if cts[1] is not None:
        parts.append(e.LogSoftmaxGrad_13(cts[1], log_prob, axis=-1))
    dx = parts[0] if len(parts) == 1 else e.Sum(*parts)
    return [dx if need[0] else None] + [None] * (len(op.operands) - 1)
