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
