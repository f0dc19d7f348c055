"""Losses: ONNX ``SoftmaxCrossEntropyLoss`` (opset 12+) and ORT's ``SoftmaxCrossEntropyLossGrad``.

Shapes: scores ``[N, C]`` or ``[N, C, d1, ..., dk]``; labels ``[N]`` or ``[N, d1, ..., dk]`` (Int32 or
Int64); optional per-class weights ``[C]``.  The loss is a scalar for ``reduction`` "sum" and "mean",
the labels' shape for "none"; ``log_prob`` has the scores' shape.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from ..ir.op import Attr, BackwardOp, InferContext, Op, Operand
from ..ir.onnxmap import MS_DOMAIN, OnnxMap
from ..ir.types import FLOAT_DTYPES, INT_DTYPES, TensorType, format_shape
from . import references

__all__ = ["REDUCTIONS", "SoftmaxCrossEntropyLossOp", "SoftmaxCrossEntropyLossGradOp"]

REDUCTIONS = ("none", "sum", "mean")

REDUCTION_ATTR = Attr("reduction", "str", "mean", choices=REDUCTIONS,
                      doc='"none" (one loss per target), "sum", or "mean" (divided by the summed weights of the '
                          'targets not ignored: their count without weights)')
IGNORE_INDEX_ATTR = Attr("ignore_index", "int", None,
                         doc="a label value that is ignored: its loss and gradient are 0 and it does not count in "
                             "the mean (optional)")


def _loss_types(ctx: InferContext, scores: int, labels: int, weights: Optional[int]) -> tuple[TensorType, tuple]:
    """Check scores/labels/weights; return the scores' type and the per-target shape [N, d1, ..., dk]."""
    s = ctx.type(scores)
    ctx.dtype_in(scores, FLOAT_DTYPES)
    what = ctx.operand_name(scores)
    if s.rank < 2:
        ctx.fail(f"operand {what} ({ctx.op.operand_value(scores)}) must have rank 2 or more ([N, C] or "
                 f"[N, C, d1, ..., dk]), got {s}", operand=scores)
    ctx.dtype_in(labels, INT_DTYPES)
    target = (s.shape[0],) + tuple(s.shape[2:])
    lab = ctx.type(labels)
    if lab.rank != s.rank - 1:
        ctx.fail(f"operand {ctx.operand_name(labels)} ({ctx.op.operand_value(labels)}) has shape "
                 f"{format_shape(lab.shape)}; expected {format_shape(target)} ({what} {s} without its class "
                 f"axis 1)", operand=labels)
    target = ctx.expect_shape(labels, target, f" ({what} {s} without its class axis 1)")
    c = s.shape[1]
    if weights is not None and ctx.has(weights):
        ctx.same_dtype(scores, weights)
        c = ctx.expect_shape(weights, (c,), f" (one weight per class of {what} {s})")[0]
    return TensorType(s.dtype, (target[0], c) + tuple(target[1:])), target


class SoftmaxCrossEntropyLossOp(Op):
    """ONNX SoftmaxCrossEntropyLoss (opset 12+): loss of log_softmax(scores) over axis 1 at the labels, and log_prob.

    ``log_prob = LogSoftmax(scores, axis=1)``; the loss of target ``(n, d...)`` with label ``c`` is
    ``-log_prob[n, c, d...] * weights[c]`` (weight 1 without weights), 0 where the label is ``ignore_index``.
    "mean" divides the sum by the sum of the weights of the targets not ignored (their count without
    weights): when every target is ignored that is 0/0, NaN, as in ONNX's reference and PyTorch (ORT's
    CPU kernel skips the division and gives 0).  A label that is not ignored must be in ``0..C-1``:
    another is a run-time error naming it (ORT's kernel also ignores -1 when ``ignore_index`` is
    absent; ONNX does not).  ONNX's ``log_prob`` result is optional; in gradir both results are always
    named on the line, and a ``log_prob`` nothing reads is freed right after the op (the kernel computes
    it anyway).  Labels and weights have no gradient: deriving with respect to the weights is an error.
    """

    ONNX = OnnxMap(attrs=("reduction", "ignore_index"), since=12)

    SHARDING = "cross_entropy"
    OPERANDS = (Operand("scores", doc="[N, C] or [N, C, d1, ..., dk]"),
                Operand("labels", doc="[N] or [N, d1, ..., dk], Int32 or Int64, in 0..C-1 or ignore_index",
                        sample="classes"),
                Operand("weights", optional=True, doc="[C] per-class weights (default 1)"))
    RESULTS = ("loss", "log_prob")
    ATTRS = (REDUCTION_ATTR, IGNORE_INDEX_ATTR)
    REDUCTION = True
    GRADIENT = "SoftmaxCrossEntropyLossGrad"
    NO_GRADIENT_OPERANDS = (1, 2)  # ONNX: labels and weights are not differentiable (ORT has no gradient)

    def infer(self, ctx: InferContext) -> list[TensorType]:
        s, target = _loss_types(ctx, 0, 1, 2)
        loss = TensorType(s.dtype, target if ctx.attrs["reduction"] == "none" else ())
        return [loss, s]

    @classmethod
    def example(cls, rng: Any, dtype: Any) -> tuple[list[Any], dict[str, Any]]:
        """Scores [4, 3], labels (one of them ignored) and positive per-class weights; summed (a mean
        divides by what no shard knows: sharding refuses it)."""
        return ([rng.standard_normal((4, 3)).astype(dtype), np.array([0, 2, 1, 2], np.int64),
                 rng.uniform(0.5, 2.0, 3).astype(dtype)], {"ignore_index": 1, "reduction": "sum"})

    @classmethod
    def reference(cls, scores: Any, labels: Any, weights: Any = None, *, reduction: str,
                  ignore_index: Optional[int]) -> Any:
        return references.sce_loss(scores, labels, weights, reduction, ignore_index)


class SoftmaxCrossEntropyLossGradOp(BackwardOp):
    """ORT SoftmaxCrossEntropyLossGrad: d_logits = (exp(log_prob) - onehot(label)) * weight[label] * dY (scaled).

    For "none" each target's ``dY`` scales its row; for "sum" the scalar ``dY``; for "mean" ``dY``
    divided by the summed weights (or count) of the targets not ignored, left to right, unless that
    is 0 (then ``dY`` itself, as ORT does).  Ignored targets get exactly 0.  Without ``ignore_index``
    ORT's kernels ignore the label -1; gradir does the same.  Operands, attributes and result are
    ORT's (``com.microsoft``, opset 1).
    """

    ONNX = OnnxMap(domain=MS_DOMAIN, attrs=("reduction", "ignore_index"))

    SHARDING = "cross_entropy"
    OPERANDS = (Operand("dY", doc="gradient of the loss: scalar for sum/mean, the labels' shape for none"),
                Operand("log_prob", doc="[N, C] or [N, C, d1, ..., dk], the forward's log_prob"),
                Operand("label", doc="[N] or [N, d1, ..., dk], Int32 or Int64", sample="classes"),
                Operand("weight", optional=True, doc="[C] per-class weights"))
    RESULTS = ("d_logits",)
    ATTRS = (REDUCTION_ATTR, Attr("ignore_index", "int", None,
                                  doc="a label value whose target gets gradient 0 (optional; absent: -1, as in "
                                      "ORT's kernels)"))
    LINEAR_IN = (0,)

    def infer(self, ctx: InferContext) -> list[TensorType]:
        lp, target = _loss_types(ctx, 1, 2, 3)
        ctx.same_dtype(1, 0)
        want = target if ctx.attrs["reduction"] == "none" else ()
        why = (" (the labels' shape, for reduction=\"none\")" if want else
               f" (a scalar, for reduction=\"{ctx.attrs['reduction']}\")")
        ctx.expect_shape(0, want, why)
        return [lp]

    @classmethod
    def example(cls, rng: Any, dtype: Any) -> tuple[list[Any], dict[str, Any]]:
        """The scalar dY of a "sum" loss, a forward's log_prob [4, 3], labels and weights."""
        log_prob = references.log_softmax(rng.standard_normal((4, 3)), 1)
        return ([np.array(rng.standard_normal(), dtype), log_prob.astype(dtype), np.array([0, 2, 1, 2], np.int64),
                 rng.uniform(0.5, 2.0, 3).astype(dtype)], {"reduction": "sum"})

    @classmethod
    def reference(cls, dY: Any, log_prob: Any, label: Any, weight: Any = None, *, reduction: str,
                  ignore_index: Optional[int]) -> Any:
        return references.sce_grad(dY, log_prob, label, weight, reduction, ignore_index)


# -- ORT's training losses: SoftmaxCrossEntropy (soft labels) and SparseSoftmaxCrossEntropy (class indices) -----
ORT_REDUCTION_ATTR = Attr("reduction", "str", "mean", choices=REDUCTIONS,
                          doc='"mean" (divided by the number of rows, or by the summed weights), "sum", or "none" '
                              '(one loss per row)')


def _rows_of(ctx: InferContext, i: int) -> TensorType:
    """Operand ``i`` is the logits (or log_prob) [..., C]: float, rank >= 1."""
    t = ctx.type(i)
    ctx.dtype_in(i, FLOAT_DTYPES)
    if t.rank < 1:
        ctx.fail(f"operand {ctx.operand_name(i)} ({ctx.op.operand_value(i)}) is a scalar; it must be [..., C] (the "
                 "classes on the last axis)", operand=i)
    return t


def _sparse_types(ctx: InferContext, x: int, label: int, weight: Optional[int]) -> tuple[TensorType, tuple]:
    """Logits/log_prob [..., C] at ``x``, Int labels [...] at ``label``, optional weights [...] at ``weight``:
    the logits' type and the labels' shape."""
    t = _rows_of(ctx, x)
    ctx.dtype_in(label, INT_DTYPES)
    rows = ctx.expect_shape(label, t.shape[:-1], f" ({ctx.operand_name(x)} {t} without its class axis)")
    if weight is not None and ctx.has(weight):
        ctx.same_dtype(x, weight)
        ctx.expect_shape(weight, rows, " (one weight per sample: the labels' shape)")
    return t, rows


class SoftmaxCrossEntropyOp(Op):
    """ORT's SoftmaxCrossEntropy (com.microsoft): -sum(label * log_softmax(logits)) over the last axis, reduced.

`label` has the logits' shape: a distribution over the classes of each row (one-hot or soft; each row
summing to 1, which ORT's gradient assumes). "mean" divides the sum by the number of rows N (the
product of every axis but the last), "sum" does not. ``log_prob`` is LogSoftmax(logits) over the last
axis. ORT's CPU kernel is Float32 only; gradir computes Float64 too. The gradient is ORT's
``SoftmaxCrossEntropyGrad`` (and ``LogSoftmaxGrad_13`` of a log_prob that reaches an output); the
label gets none (as in ORT). For reduction "none" gradir gives one loss per row (the shape ORT's
schema infers); ORT 1.19's CPU kernel writes one number there instead."""

    ONNX = OnnxMap(domain=MS_DOMAIN, attrs=("reduction",), ort_float32_only=True)
    SHARDING = "cross_entropy_rows"
    OPERANDS = (Operand("logits", doc="[..., C]"), Operand("label", doc="[..., C], the logits' shape and dtype"))
    RESULTS = ("loss", "log_prob")
    ATTRS = (ORT_REDUCTION_ATTR,)
    REDUCTION = True
    NO_GRADIENT_OPERANDS = (1,)

    def infer(self, ctx: InferContext) -> list[TensorType]:
        t = _rows_of(ctx, 0)
        ctx.same_dtype(0, 1)
        ctx.expect_shape(1, t.shape, " (the logits' shape)")
        return [TensorType(t.dtype, t.shape[:-1] if ctx.attrs["reduction"] == "none" else ()), t]

    @classmethod
    def example(cls, rng: Any, dtype: Any) -> tuple[list[Any], dict[str, Any]]:
        """Logits [4, 3] and soft labels (rows summing to 1), summed."""
        label = references.softmax(rng.standard_normal((4, 3)), -1)
        return [rng.standard_normal((4, 3)).astype(dtype), label.astype(dtype)], {"reduction": "sum"}

    @classmethod
    def reference(cls, logits: Any, label: Any, *, reduction: str) -> Any:
        lp = references.log_softmax(logits, -1)
        per_row = -np.sum(np.asarray(label, np.float64) * lp, axis=-1)
        return _reduced(per_row, None, reduction), lp


def _reduced(per_row: np.ndarray, weight: Any, reduction: str) -> np.ndarray:
    if reduction == "none":
        return per_row
    total = np.sum(per_row)
    if reduction == "mean":
        total = total / (np.sum(np.asarray(weight, np.float64)) if weight is not None else per_row.size)
    return np.asarray(total)


class SoftmaxCrossEntropyGradOp(BackwardOp):
    """ORT's SoftmaxCrossEntropyGrad (com.microsoft): d_logits = (exp(log_prob) - label) * dY, dY / N for "mean".

For "none" dY has one value per row (gradir; ORT 1.19's CPU kernel reads an uninitialized scale
there). Float32 in ORT; gradir computes Float64 too."""

    ONNX = OnnxMap(domain=MS_DOMAIN, attrs=("reduction",), ort_float32_only=True)
    SHARDING = "cross_entropy_rows"
    OPERANDS = (Operand("dY", doc="scalar for sum/mean, one per row for none"),
                Operand("log_prob", doc="[..., C], the forward's"), Operand("label", doc="[..., C]"))
    RESULTS = ("d_logits",)
    ATTRS = (ORT_REDUCTION_ATTR,)
    LINEAR_IN = (0,)

    def infer(self, ctx: InferContext) -> list[TensorType]:
        t = _rows_of(ctx, 1)
        ctx.same_dtype(1, 0)
        ctx.same_dtype(1, 2)
        ctx.expect_shape(2, t.shape, " (log_prob's shape)")
        ctx.expect_shape(0, t.shape[:-1] if ctx.attrs["reduction"] == "none" else (), "")
        return [t]

    @classmethod
    def example(cls, rng: Any, dtype: Any) -> tuple[list[Any], dict[str, Any]]:
        """The scalar dY of a "sum" loss, a forward's log_prob [4, 3] and soft labels."""
        lp = references.log_softmax(rng.standard_normal((4, 3)), -1)
        label = references.softmax(rng.standard_normal((4, 3)), -1)
        return [np.array(rng.standard_normal(), dtype), lp.astype(dtype), label.astype(dtype)], {"reduction": "sum"}

    @classmethod
    def reference(cls, dY: Any, log_prob: Any, label: Any, *, reduction: str) -> Any:
        lp, dy = np.asarray(log_prob, np.float64), np.asarray(dY, np.float64)
        scale = dy[..., None] if reduction == "none" else dy / (lp.size // lp.shape[-1] if reduction == "mean" else 1)
        return (np.exp(lp) - np.asarray(label, np.float64)) * scale


class SparseSoftmaxCrossEntropyOp(Op):
    """ORT's SparseSoftmaxCrossEntropy (ai.onnx, opset 9): -log_softmax(logits)[label] * weight, reduced.

`label` [...] holds class indices (Int32 or Int64) of the rows of logits [..., C]; the optional `weight`
[...] scales each sample's loss. "mean" divides the sum by the summed weights (by N without them).
A label outside 0..C-1 is a run-time error naming it (ORT reads out of bounds). ORT's CPU kernel is
Float32 with Int64 labels only; gradir computes Float64 and Int32 labels too. The gradient is ORT's
``SparseSoftmaxCrossEntropyGrad`` (and ``LogSoftmaxGrad_13`` of a log_prob that reaches an output);
labels and weights get none. For reduction "none" gradir gives one loss per row (the shape ORT's
schema infers); ORT 1.19's CPU kernel writes one number there instead."""

    # a schema ORT adds to ai.onnx (gradir.interop.onnx.ort_schemas registers it with onnx)
    ONNX = OnnxMap(attrs=("reduction",), since=9, ort_float32_only=True)
    SHARDING = "cross_entropy_rows"
    OPERANDS = (Operand("logits", doc="[..., C]"),
                Operand("label", doc="[...], Int32 or Int64, in 0..C-1", sample="classes"),
                Operand("weight", optional=True, doc="[...] per-sample weights"))
    RESULTS = ("loss", "log_prob")
    ATTRS = (ORT_REDUCTION_ATTR,)
    REDUCTION = True
    NO_GRADIENT_OPERANDS = (1, 2)

    def infer(self, ctx: InferContext) -> list[TensorType]:
        t, rows = _sparse_types(ctx, 0, 1, 2)
        return [TensorType(t.dtype, rows if ctx.attrs["reduction"] == "none" else ()), t]

    @classmethod
    def example(cls, rng: Any, dtype: Any) -> tuple[list[Any], dict[str, Any]]:
        """Logits [4, 3], labels and positive per-sample weights, summed."""
        return ([rng.standard_normal((4, 3)).astype(dtype), np.array([0, 2, 1, 2], np.int64),
                 rng.uniform(0.5, 2.0, 4).astype(dtype)], {"reduction": "sum"})

    @classmethod
    def reference(cls, logits: Any, label: Any, weight: Any = None, *, reduction: str) -> Any:
        lp = references.log_softmax(logits, -1)
        lab = np.asarray(label, np.int64)
        per_row = -np.take_along_axis(lp, lab[..., None], axis=-1)[..., 0]
        if weight is not None:
            per_row = per_row * np.asarray(weight, np.float64)
        return _reduced(per_row, weight, reduction), lp


class SparseSoftmaxCrossEntropyGradOp(BackwardOp):
    """ORT's SparseSoftmaxCrossEntropyGrad (ai.onnx, opset 9): (exp(log_prob) - onehot(label)) * weight * dY'.

dY' is dY for "sum", dY divided by the summed weights (by N without them) for "mean", each row's dY
for "none" (gradir; ORT 1.19's CPU kernel reads the first). Float32 with Int64 labels in ORT; gradir
computes Float64 and Int32 labels too."""

    ONNX = OnnxMap(attrs=("reduction",), since=9, ort_float32_only=True)  # see SparseSoftmaxCrossEntropy
    SHARDING = "cross_entropy_rows"
    OPERANDS = (Operand("dY", doc="scalar for sum/mean, the labels' shape for none"),
                Operand("log_prob", doc="[..., C], the forward's"),
                Operand("label", doc="[...], Int32 or Int64, in 0..C-1", sample="classes"),
                Operand("weight", optional=True, doc="[...] per-sample weights"))
    RESULTS = ("d_logits",)
    ATTRS = (ORT_REDUCTION_ATTR,)
    LINEAR_IN = (0,)

    def infer(self, ctx: InferContext) -> list[TensorType]:
        t, rows = _sparse_types(ctx, 1, 2, 3)
        ctx.same_dtype(1, 0)
        ctx.expect_shape(0, rows if ctx.attrs["reduction"] == "none" else (), "")
        return [t]

    @classmethod
    def example(cls, rng: Any, dtype: Any) -> tuple[list[Any], dict[str, Any]]:
        """The scalar dY of a "sum" loss, a forward's log_prob [4, 3], labels and weights."""
        lp = references.log_softmax(rng.standard_normal((4, 3)), -1)
        return ([np.array(rng.standard_normal(), dtype), lp.astype(dtype), np.array([0, 2, 1, 2], np.int64),
                 rng.uniform(0.5, 2.0, 4).astype(dtype)], {"reduction": "sum"})

    @classmethod
    def reference(cls, dY: Any, log_prob: Any, label: Any, weight: Any = None, *, reduction: str) -> Any:
        lp, dy = np.asarray(log_prob, np.float64), np.asarray(dY, np.float64)
        onehot = np.eye(lp.shape[-1])[np.asarray(label, np.int64)]
        w = np.ones(lp.shape[:-1]) if weight is None else np.asarray(weight, np.float64)
        scale = dy if reduction == "none" else dy / (np.sum(w) if reduction == "mean" else 1)
        return (np.exp(lp) - onehot) * (w * scale)[..., None]
