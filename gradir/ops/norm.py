"""Layer normalization: ONNX ``LayerNormalization`` (opset 17), ORT's ``SimplifiedLayerNormalization`` (RMSNorm)
and ORT's gradient ops ``LayerNormalizationGrad``, ``SimplifiedLayerNormalizationGrad``,
``InvertibleLayerNormalizationGrad``.

Each normalizes over every axis from ``axis`` on (the normalized axes, flattened into one row of D);
``Mean`` and ``InvStdDev`` keep X's rank, with 1s on the normalized axes, and are Float32 (ONNX's
``stash_type`` 1, its default and the only one ONNX's type constraint and ORT's CPU kernels accept), for a
Float64 X too.  The statistics and Y are computed in float64 and rounded once, so Float64 is exact and
Float32 within rounding of ORT's (which sums in the operand's dtype, and takes the variance as
E[x^2] - E[x]^2).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..ir.op import Attr, BackwardOp, InferContext, Op, Operand
from ..ir.onnxmap import MS_DOMAIN, OnnxMap
from ..ir.types import FLOAT_DTYPES, DType, TensorType

__all__ = ["LayerNormalizationOp", "SimplifiedLayerNormalizationOp", "LayerNormalizationGradOp",
           "SimplifiedLayerNormalizationGradOp", "InvertibleLayerNormalizationGradOp"]

EPSILON = Attr("epsilon", "float", 1e-5, doc="added to the variance before the square root")
AXIS = Attr("axis", "int", -1, doc="the first normalized axis: X is normalized over axes axis..rank-1 "
                                   "(negative counts from the end)")
STASH_TYPE = Attr("stash_type", "int", 1, choices=(1,),
                  doc="the statistics' dtype (ONNX TensorProto code): 1, Float32, the only one ONNX's "
                      "LayerNormalization types and ORT's CPU kernels take; they are computed in float64 all the same")


def _stats_shape(shape: tuple, start: int) -> tuple:
    return tuple(shape[:start]) + (1,) * (len(shape) - start)


def _params(ctx: InferContext, x: TensorType, start: int, operands: tuple[int, ...]) -> None:
    """Scale (and B) are X's dtype and have the normalized shape."""
    for i in operands:
        if ctx.has(i):
            ctx.same_dtype(0, i)
            ctx.expect_shape(i, tuple(x.shape[start:]), f" (the normalized axes {start}.. of X {x})")


def _stats(ctx: InferContext, x: TensorType, start: int, operands: tuple[int, ...]) -> None:
    """Saved statistics: Float32 or Float64 (ORT's ``U``), one dtype, X's shape with 1s on the normalized axes."""
    for i in operands:
        ctx.dtype_in(i, FLOAT_DTYPES)
        ctx.same_dtype(operands[0], i)
        ctx.expect_shape(i, _stats_shape(x.shape, start), f" (X {x} with 1s on the normalized axes)")


def _rows(x: Any, axis: int) -> tuple[tuple, tuple]:
    start = axis % x.ndim
    return tuple(range(start, x.ndim)), tuple(range(start))


def _example_x(rng: Any) -> tuple[Any, Any, Any]:
    """X [4, 3, 5] normalized over its last two axes (4 rows: the shard axis), Scale and B [3, 5], float64."""
    return rng.standard_normal((4, 3, 5)), rng.uniform(0.5, 1.5, (3, 5)), rng.standard_normal((3, 5))


class LayerNormalizationOp(Op):
    """ONNX LayerNormalization (opset 17): Y = (X - Mean) * InvStdDev * Scale + B over axes axis..rank-1.

    ``Mean`` is the mean and ``InvStdDev`` 1 / sqrt(variance + epsilon) of each row (the biased variance),
    Float32 (``stash_type`` 1), with 1s on the normalized axes.  ``Scale`` and ``B`` have the normalized
    axes' shape (ORT's broadcasting of a Scale of another shape is not taken).  ONNX's Mean/InvStdDev
    results are optional: a node with 1, 2 or 3 outputs imports (the others are computed and unused); in
    gradir all three are named on the line.  They take no gradient (they are saved for the gradient, as in
    ORT).  ORT's older form (the ai.onnx LayerNormalization of opsets 1-16, its contrib op) imports too."""

    ONNX = OnnxMap(attrs=("axis", "epsilon", "stash_type"), since=17)

    SHARDING = "layer_norm"
    OPERANDS = (Operand("X", doc="the input, normalized over axes axis..rank-1"),
                Operand("Scale", doc="the normalized axes' shape"),
                Operand("B", optional=True, doc="the normalized axes' shape (default 0)"))
    RESULTS = ("Y", "Mean", "InvStdDev")
    ATTRS = (AXIS, EPSILON, STASH_TYPE)
    GRADIENT = "LayerNormalizationGrad"
    NO_GRADIENT_RESULTS = (1, 2)

    def infer(self, ctx: InferContext) -> list[TensorType]:
        x = ctx.type(0)
        ctx.dtype_in(0, FLOAT_DTYPES)
        start = ctx.axis("axis", x.rank)
        _params(ctx, x, start, (1, 2))
        stats = TensorType(DType.Float32, _stats_shape(x.shape, start))
        return [x, stats, stats]

    @classmethod
    def example(cls, rng: Any, dtype: Any) -> tuple[list[Any], dict[str, Any]]:
        """X [4, 3, 5] normalized over its last two axes (4 rows: the shard axis), Scale and B [3, 5]."""
        return [a.astype(dtype) for a in _example_x(rng)], {"axis": 1, "epsilon": 1e-3}

    @classmethod
    def reference(cls, X: Any, Scale: Any, B: Any = None, *, axis: int, epsilon: float, stash_type: int = 1) -> Any:
        x = np.asarray(X, np.float64)
        norm, _ = _rows(x, axis)
        mean = x.mean(axis=norm, keepdims=True)
        inv = 1 / np.sqrt(((x - mean) ** 2).mean(axis=norm, keepdims=True) + epsilon)
        y = (x - mean) * inv * np.asarray(Scale, np.float64)
        if B is not None:
            y = y + np.asarray(B, np.float64)
        return y, mean.astype(np.float32), inv.astype(np.float32)


class SimplifiedLayerNormalizationOp(Op):
    """ORT's SimplifiedLayerNormalization (RMSNorm, an ai.onnx-domain contrib op): Y = X * InvStdDev * Scale over
    axes axis..rank-1, InvStdDev = 1 / sqrt(mean(X^2) + epsilon) of each row (Float32, ``stash_type`` 1,
    with 1s on the normalized axes; no gradient flows from it).  ORT's CPU kernel has no Float64 form
    that runs; gradir's is exact.  A node with 1 or 2 outputs imports."""

    ONNX = OnnxMap(attrs=("axis", "epsilon", "stash_type"))

    SHARDING = "layer_norm"
    OPERANDS = (Operand("X", doc="the input, normalized over axes axis..rank-1"),
                Operand("Scale", doc="the normalized axes' shape"))
    RESULTS = ("Y", "InvStdDev")
    ATTRS = (AXIS, EPSILON, STASH_TYPE)
    GRADIENT = "SimplifiedLayerNormalizationGrad"
    NO_GRADIENT_RESULTS = (1,)

    def infer(self, ctx: InferContext) -> list[TensorType]:
        x = ctx.type(0)
        ctx.dtype_in(0, FLOAT_DTYPES)
        start = ctx.axis("axis", x.rank)
        _params(ctx, x, start, (1,))
        return [x, TensorType(DType.Float32, _stats_shape(x.shape, start))]

    @classmethod
    def example(cls, rng: Any, dtype: Any) -> tuple[list[Any], dict[str, Any]]:
        """X [4, 3, 5] normalized over its last two axes, Scale [3, 5]."""
        return [a.astype(dtype) for a in _example_x(rng)[:2]], {"axis": 1, "epsilon": 1e-3}

    @classmethod
    def reference(cls, X: Any, Scale: Any, *, axis: int, epsilon: float, stash_type: int = 1) -> Any:
        x = np.asarray(X, np.float64)
        norm, _ = _rows(x, axis)
        inv = 1 / np.sqrt((x * x).mean(axis=norm, keepdims=True) + epsilon)
        return x * inv * np.asarray(Scale, np.float64), inv.astype(np.float32)


class LayerNormalizationGradOp(BackwardOp):
    """ORT LayerNormalizationGrad (com.microsoft): dX, dScale, dB of LayerNormalization from its saved Mean
    and InvStdDev.

    With x̂ = (X - Mean) * InvStdDev and g = dY * Scale, each over one row of the normalized axes:
    dX = InvStdDev * (g - mean(g) - x̂ * mean(g * x̂)); dScale = the sum of dY * x̂ over the other axes,
    dB the sum of dY.  ORT names the results X_grad, scale_grad, bias_grad.  Mean and InvStdDev are
    Float32 or Float64 (one dtype).  ORT's CPU kernel refuses a row of one element (``M == 1``) and reads
    Float32 statistics only (its Float64 kernel too); gradir takes both."""

    ONNX = OnnxMap(domain=MS_DOMAIN, attrs=("axis",), ignored=("epsilon", "stash_type"))

    SHARDING = "layer_norm"
    OPERANDS = (Operand("dY", doc="the gradient of Y"), Operand("X", doc="the forward's X"),
                Operand("Scale", doc="the forward's Scale"),
                Operand("Mean", doc="the forward's Mean (1s on the normalized axes)"),
                Operand("InvStdDev", doc="the forward's InvStdDev (1s on the normalized axes)"))
    RESULTS = ("dX", "dScale", "dB")
    ATTRS = (AXIS,)
    LINEAR_IN = (0,)

    def infer(self, ctx: InferContext) -> list[TensorType]:
        ctx.dtype_in(0, FLOAT_DTYPES)
        x = ctx.unify(0, 1)
        start = ctx.axis("axis", x.rank)
        _params(ctx, x, start, (2,))
        _stats(ctx, x, start, (3, 4))
        scale = ctx.type(2)
        return [x, scale, scale]

    @classmethod
    def example(cls, rng: Any, dtype: Any) -> tuple[list[Any], dict[str, Any]]:
        """dY and a forward's X [4, 3, 5], Scale [3, 5], Float32 Mean and InvStdDev [4, 1, 1] (axis 1)."""
        x, scale, _ = _example_x(rng)
        _, mean, inv = LayerNormalizationOp.reference(x, scale, axis=1, epsilon=1e-3)
        return ([rng.standard_normal((4, 3, 5)).astype(dtype), x.astype(dtype), scale.astype(dtype), mean, inv],
                {"axis": 1})

    @classmethod
    def reference(cls, dY: Any, X: Any, Scale: Any, Mean: Any, InvStdDev: Any, *, axis: int) -> Any:
        dy, x, scale, mean, inv = (np.asarray(a, np.float64) for a in (dY, X, Scale, Mean, InvStdDev))
        norm, outer = _rows(x, axis)
        xhat = (x - mean) * inv
        g = dy * scale
        dx = inv * (g - g.mean(axis=norm, keepdims=True) - xhat * (g * xhat).mean(axis=norm, keepdims=True))
        return dx, (dy * xhat).sum(axis=outer), dy.sum(axis=outer)


class SimplifiedLayerNormalizationGradOp(BackwardOp):
    """ORT SimplifiedLayerNormalizationGrad (com.microsoft): dX, dScale of SimplifiedLayerNormalization from its
    saved InvStdDev.  With x̂ = X * InvStdDev and g = dY * Scale over one row:
    dX = InvStdDev * (g - x̂ * mean(g * x̂)); dScale = the sum of dY * x̂ over the other axes.
    ORT's CPU kernel is Float32 only and refuses a row of one element (``M == 1``); gradir takes both."""

    ONNX = OnnxMap(domain=MS_DOMAIN, attrs=("axis",), ignored=("epsilon", "stash_type"))

    SHARDING = "layer_norm"
    OPERANDS = (Operand("dY", doc="the gradient of Y"), Operand("X", doc="the forward's X"),
                Operand("Scale", doc="the forward's Scale"),
                Operand("InvStdDev", doc="the forward's InvStdDev (1s on the normalized axes)"))
    RESULTS = ("dX", "dScale")
    ATTRS = (AXIS,)
    LINEAR_IN = (0,)

    def infer(self, ctx: InferContext) -> list[TensorType]:
        ctx.dtype_in(0, FLOAT_DTYPES)
        x = ctx.unify(0, 1)
        start = ctx.axis("axis", x.rank)
        _params(ctx, x, start, (2,))
        _stats(ctx, x, start, (3,))
        return [x, ctx.type(2)]

    @classmethod
    def example(cls, rng: Any, dtype: Any) -> tuple[list[Any], dict[str, Any]]:
        """dY and a forward's X [4, 3, 5], Scale [3, 5], Float32 InvStdDev [4, 1, 1] (axis 1)."""
        x, scale, _ = _example_x(rng)
        _, inv = SimplifiedLayerNormalizationOp.reference(x, scale, axis=1, epsilon=1e-3)
        return [rng.standard_normal((4, 3, 5)).astype(dtype), x.astype(dtype), scale.astype(dtype), inv], {"axis": 1}

    @classmethod
    def reference(cls, dY: Any, X: Any, Scale: Any, InvStdDev: Any, *, axis: int) -> Any:
        dy, x, scale, inv = (np.asarray(a, np.float64) for a in (dY, X, Scale, InvStdDev))
        norm, outer = _rows(x, axis)
        xhat = x * inv
        g = dy * scale
        return inv * (g - xhat * (g * xhat).mean(axis=norm, keepdims=True)), (dy * xhat).sum(axis=outer)


class InvertibleLayerNormalizationGradOp(BackwardOp):
    """ORT InvertibleLayerNormalizationGrad (com.microsoft): dX, dScale, dB of LayerNormalization from its result
    Y instead of X: x̂ = (Y - B) / Scale, then as LayerNormalizationGrad.  ORT's results are X_grad,
    scale_grad, bias_grad.  ORT's schema cannot infer dX's type (a model must declare it); its CPU kernel
    refuses a row of one element (``M == 1``) and reads Float32 statistics only; gradir takes both."""

    ONNX = OnnxMap(domain=MS_DOMAIN, attrs=("axis",), ignored=("epsilon", "stash_type"))

    SHARDING = "layer_norm"
    OPERANDS = (Operand("dY", doc="the gradient of Y"), Operand("Y", doc="the forward's Y"),
                Operand("Scale", doc="the forward's Scale (no zero)"), Operand("B", doc="the forward's B"),
                Operand("InvStdDev", doc="the forward's InvStdDev (1s on the normalized axes)"))
    RESULTS = ("dX", "dScale", "dB")
    ATTRS = (AXIS,)
    LINEAR_IN = (0,)

    def infer(self, ctx: InferContext) -> list[TensorType]:
        ctx.dtype_in(0, FLOAT_DTYPES)
        x = ctx.unify(0, 1)
        start = ctx.axis("axis", x.rank)
        _params(ctx, x, start, (2, 3))
        _stats(ctx, x, start, (4,))
        scale = ctx.type(2)
        return [x, scale, scale]

    @classmethod
    def example(cls, rng: Any, dtype: Any) -> tuple[list[Any], dict[str, Any]]:
        """dY and a forward's Y [4, 3, 5], Scale and B [3, 5], Float32 InvStdDev [4, 1, 1] (axis 1)."""
        x, scale, b = _example_x(rng)
        y, _, inv = LayerNormalizationOp.reference(x, scale, b, axis=1, epsilon=1e-3)
        return ([rng.standard_normal((4, 3, 5)).astype(dtype), y.astype(dtype), scale.astype(dtype),
                 b.astype(dtype), inv], {"axis": 1})

    @classmethod
    def reference(cls, dY: Any, Y: Any, Scale: Any, B: Any, InvStdDev: Any, *, axis: int) -> Any:
        dy, y, scale, b, inv = (np.asarray(a, np.float64) for a in (dY, Y, Scale, B, InvStdDev))
        norm, outer = _rows(y, axis)
        xhat = (y - b) / scale
        g = dy * scale
        dx = inv * (g - g.mean(axis=norm, keepdims=True) - xhat * (g * xhat).mean(axis=norm, keepdims=True))
        return dx, (dy * xhat).sum(axis=outer), dy.sum(axis=outer)
