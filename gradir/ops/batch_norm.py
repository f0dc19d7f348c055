"""Batch normalization: ONNX ``BatchNormalization`` (opsets 9-15; training mode from 14), ORT's
``BatchNormInternal`` (what ORT's ``BatchNormReplacement`` turns a training-mode BatchNormalization into) and
ORT's gradient op ``BatchNormalizationGrad``.

X is [N, C, D1, ...] (rank 2 or more); axis 1 is the channel axis.  Every per-channel operand and result
(scale, B, the means and variances) is [C], of X's dtype (ONNX lets scale/B and mean/var take their own float
types; gradir asks for X's).  In training mode the statistics are over every axis but 1, the variance is the
biased one (divided by N * D1 * ...), and running = input * momentum + saved * (1 - momentum) (ORT, checked
against 1.19.2).  Statistics and results are computed in float64 and rounded once: Float64 is exact, Float32
within rounding of ORT's (ORT's BatchNormInternal and BatchNormalizationGrad kernels are Float32 only).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..ir.op import Attr, BackwardOp, InferContext, Op, Operand
from ..ir.onnxmap import MS_DOMAIN, OnnxMap
from ..ir.types import FLOAT_DTYPES, TensorType

__all__ = ["BatchNormalizationOp", "BatchNormInternalOp", "BatchNormalizationGradOp"]

EPSILON = Attr("epsilon", "float", 1e-5, doc="added to the variance before the square root")
MOMENTUM = Attr("momentum", "float", 0.9, doc="running = input * momentum + this batch's * (1 - momentum)")
_CHANNEL = (Operand("X", doc="[N, C, D1, ...], normalized per channel (axis 1)"),
            Operand("scale", doc="[C]"), Operand("B", doc="[C]"),
            Operand("input_mean", doc="[C]: the running mean"), Operand("input_var", doc="[C]: the running variance"))


def _channels(ctx: InferContext, x: TensorType, operands: range | tuple[int, ...]) -> TensorType:
    """X has rank 2 or more; the per-channel operands are [C], X's dtype.  Returns the [C] type."""
    if x.rank < 2:
        ctx.fail(f"X must be [N, C, D1, ...] (rank 2 or more: axis 1 is the channel axis), got {x}", operand=0)
    for i in operands:
        ctx.same_dtype(0, i)
        ctx.expect_shape(i, (x.shape[1],), f" (X {x} has {x.shape[1]} channels, along axis 1)")
    return TensorType(x.dtype, (x.shape[1],))


def _split(x: np.ndarray) -> tuple[tuple[int, ...], callable]:
    """The axes the statistics run over (all but 1) and a reshape of a [C] vector to broadcast against X."""
    axes = (0,) + tuple(range(2, x.ndim))
    return axes, lambda v: np.asarray(v, np.float64).reshape((1, -1) + (1,) * (x.ndim - 2))


def _reference(X: Any, scale: Any, B: Any, input_mean: Any, input_var: Any, epsilon: float, momentum: float,
               training: bool) -> tuple[np.ndarray, ...]:
    x = np.asarray(X, np.float64)
    axes, c = _split(x)
    if training:
        mean, var = x.mean(axis=axes), x.var(axis=axes)
        running_mean = np.asarray(input_mean, np.float64) * momentum + mean * (1 - momentum)
        running_var = np.asarray(input_var, np.float64) * momentum + var * (1 - momentum)
    else:
        mean, var = np.asarray(input_mean, np.float64), np.asarray(input_var, np.float64)
        running_mean, running_var = mean, var
    inv = 1 / np.sqrt(var + epsilon)
    y = (x - c(mean)) * c(inv * np.asarray(scale, np.float64)) + c(B)
    return y, running_mean, running_var, mean, inv


def _example(rng: Any, dtype: Any) -> list[Any]:
    """X [3, 4, 5] (4 channels: the shard axis), scale, B, input_mean, input_var [4]."""
    return [a.astype(dtype) for a in (rng.standard_normal((3, 4, 5)), rng.uniform(0.5, 1.5, 4),
                                       rng.standard_normal(4), rng.standard_normal(4), rng.uniform(0.5, 1.5, 4))]


class BatchNormalizationOp(Op):
    """ONNX BatchNormalization (opsets 9-15; training mode from 14): Y = (X - mean) / sqrt(var + epsilon) * scale + B
    per channel (axis 1).

    ``training_mode`` 0 (inference): mean and var are input_mean and input_var; the results running_mean and
    running_var are copies of them (ONNX's node has Y alone: an exported inference node writes Y only).
    ``training_mode`` 1: mean and var are the batch's, over every axis but 1 (the biased variance), and
    running_mean/running_var = input * momentum + batch's * (1 - momentum) (ONNX's node has 1 or 3 outputs).
    The running statistics take no gradient.  Training mode differentiates as ORT does: the gradient rule
    reads the saved statistics of a ``BatchNormInternal`` of the same operands and emits
    ``BatchNormalizationGrad`` (an imported ORT training graph holds BatchNormInternal already); inference mode
    differentiates in X, scale, B, input_mean and input_var with BatchNormalization (inference) and ReduceSum.
    (ORT's training graphs turn every BatchNormalization, an inference-mode one too, into BatchNormInternal:
    they train with the batch's statistics; gradir keeps the mode the node says.)"""

    ONNX = OnnxMap(attrs=("epsilon", "momentum", "training_mode"), since=9)

    SHARDING = "batch_norm"
    OPERANDS = _CHANNEL
    RESULTS = ("Y", "running_mean", "running_var")
    ATTRS = (EPSILON, MOMENTUM,
             Attr("training_mode", "int", 0, choices=(0, 1), doc="1: normalize with the batch's statistics"))
    NO_GRADIENT_RESULTS = (1, 2)

    def infer(self, ctx: InferContext) -> list[TensorType]:
        x = ctx.type(0)
        ctx.dtype_in(0, FLOAT_DTYPES)
        c = _channels(ctx, x, range(1, 5))
        return [x, c, c]

    @classmethod
    def example(cls, rng: Any, dtype: Any) -> tuple[list[Any], dict[str, Any]]:
        """X [3, 4, 5], the [4] channel operands; training mode (its gradient is ORT's)."""
        return _example(rng, dtype), {"epsilon": 1e-3, "momentum": 0.8, "training_mode": 1}

    @classmethod
    def reference(cls, X: Any, scale: Any, B: Any, input_mean: Any, input_var: Any, *, epsilon: float,
                  momentum: float, training_mode: int) -> Any:
        return _reference(X, scale, B, input_mean, input_var, epsilon, momentum, bool(training_mode))[:3]


class BatchNormInternalOp(Op):
    """ORT BatchNormInternal (com.microsoft): a training-mode BatchNormalization that also returns the batch's
    statistics for the gradient: saved_mean and saved_inv_std = 1 / sqrt(var + epsilon) (the biased variance).
    ORT's CPU kernel is Float32 only; gradir's is exact in Float64 too.  Only the training form exists
    (``training_mode`` 1, ORT's default; ORT's inference form is a plain BatchNormalization)."""

    ONNX = OnnxMap(domain=MS_DOMAIN, attrs=("epsilon", "momentum", "training_mode"), ort_float32_only=True)

    SHARDING = "batch_norm"
    OPERANDS = _CHANNEL
    RESULTS = ("Y", "running_mean", "running_var", "saved_mean", "saved_inv_std")
    ATTRS = (EPSILON, MOMENTUM, Attr("training_mode", "int", 1, choices=(1,), doc="1: training (the only form)"))
    NO_GRADIENT_RESULTS = (1, 2, 3, 4)

    def infer(self, ctx: InferContext) -> list[TensorType]:
        x = ctx.type(0)
        ctx.dtype_in(0, FLOAT_DTYPES)
        c = _channels(ctx, x, range(1, 5))
        return [x, c, c, c, c]

    @classmethod
    def example(cls, rng: Any, dtype: Any) -> tuple[list[Any], dict[str, Any]]:
        """X [3, 4, 5], the [4] channel operands."""
        return _example(rng, dtype), {"epsilon": 1e-3, "momentum": 0.8}

    @classmethod
    def reference(cls, X: Any, scale: Any, B: Any, input_mean: Any, input_var: Any, *, epsilon: float,
                  momentum: float, training_mode: int = 1) -> Any:
        return _reference(X, scale, B, input_mean, input_var, epsilon, momentum, True)


class BatchNormalizationGradOp(BackwardOp):
    """ORT BatchNormalizationGrad (com.microsoft): dX, dscale, dB of a training-mode batch norm from its saved
    statistics.  With M = N * D1 * ... and x̂ = (X - saved_mean) * saved_inv_std per channel:
    dB = Σ dY, dscale = Σ dY * x̂ (over every axis but 1), dX = scale * saved_inv_std / M * (M * dY - dB - x̂ * dscale).
    ORT names the results X_grad, scale_grad, bias_grad and its last two operands mean and variance, but reads
    them as BatchNormInternal's saved_mean and saved_inv_std, and does not use ``epsilon`` (kept for ORT's
    signature).  ORT's CPU kernel is Float32 only; gradir's is exact in Float64 too."""

    ONNX = OnnxMap(domain=MS_DOMAIN, attrs=("epsilon",), ort_float32_only=True)

    SHARDING = "batch_norm"
    OPERANDS = (Operand("dY", doc="the gradient of Y"), Operand("X", doc="the forward's X"),
                Operand("scale", doc="the forward's scale [C]"), Operand("saved_mean", doc="[C]"),
                Operand("saved_inv_std", doc="[C]: 1 / sqrt(var + epsilon)"))
    RESULTS = ("dX", "dscale", "dB")
    ATTRS = (Attr("epsilon", "float", 1e-5, doc="not used (ORT's signature): saved_inv_std holds it"),)
    LINEAR_IN = (0,)

    def infer(self, ctx: InferContext) -> list[TensorType]:
        ctx.dtype_in(0, FLOAT_DTYPES)
        x = ctx.unify(0, 1)
        c = _channels(ctx, x, (2, 3, 4))
        return [x, c, c]

    @classmethod
    def example(cls, rng: Any, dtype: Any) -> tuple[list[Any], dict[str, Any]]:
        """dY and a forward's X [3, 4, 5], scale and the saved statistics [4]."""
        x, scale, b, m, v = _example(rng, np.float64)
        _, _, _, mean, inv = _reference(x, scale, b, m, v, 1e-3, 0.9, True)
        return [a.astype(dtype) for a in (rng.standard_normal(x.shape), x, scale, mean, inv)], {"epsilon": 1e-3}

    @classmethod
    def reference(cls, dY: Any, X: Any, scale: Any, saved_mean: Any, saved_inv_std: Any, *,
                  epsilon: float = 1e-5) -> Any:
        dy, x = np.asarray(dY, np.float64), np.asarray(X, np.float64)
        axes, c = _split(x)
        m = x.size // x.shape[1]
        inv = np.asarray(saved_inv_std, np.float64)
        xhat = (x - c(saved_mean)) * c(inv)
        db, ds = dy.sum(axis=axes), (dy * xhat).sum(axis=axes)
        dx = c(np.asarray(scale, np.float64) * inv / m) * (m * dy - c(db) - xhat * c(ds))
        return dx, ds, db
