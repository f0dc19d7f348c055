"""Normalization: ONNX ``LayerNormalization`` (opset 17) and ORT's ``LayerNormalizationGrad``.

Both normalize over every axis from ``axis`` on (the normalized axes, flattened into one row);
``Mean`` and ``InvStdDev`` keep X's rank, with 1s on the normalized axes.  They are computed in the
operands' dtype (Float32 in Float32, as ORT does with its default ``stash_type``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..ir.op import Attr, BackwardOp, InferContext, Op, Operand
from ..ir.onnxmap import MS_DOMAIN, OnnxMap
from ..ir.types import FLOAT_DTYPES, TensorType

__all__ = ["LayerNormalizationOp", "LayerNormalizationGradOp"]

EPSILON = Attr("epsilon", "float", 1e-5, doc="added to the variance before the square root")
AXIS = Attr("axis", "int", -1, doc="the first normalized axis: X is normalized over axes axis..rank-1 "
                                   "(negative counts from the end)")


def _stats_shape(shape: tuple, start: int) -> tuple:
    return tuple(shape[:start]) + (1,) * (len(shape) - start)


def _params(ctx: InferContext, x: TensorType, start: int, operands: tuple[int, ...]) -> None:
    """Scale (and B) are X's dtype and have the normalized shape."""
    for i in operands:
        if ctx.has(i):
            ctx.same_dtype(0, i)
            ctx.expect_shape(i, tuple(x.shape[start:]), f" (the normalized axes {start}.. of X {x})")


class LayerNormalizationOp(Op):
    """ONNX LayerNormalization (opset 17): Y = (X - mean) * InvStdDev * Scale + B over axes axis..rank-1.

    ``Mean`` is the mean and ``InvStdDev`` 1 / sqrt(variance + epsilon) of each row (the biased
    variance), both with 1s on the normalized axes.  ``Scale`` and ``B`` have the normalized axes' shape.
    ONNX's ``Mean``/``InvStdDev`` results are optional; in gradir all three are named on the line.  Mean
    and InvStdDev take no gradient (they are saved for the gradient, as in ORT)."""

    ONNX = OnnxMap(attrs=("axis", "epsilon"), since=17)

    SHARDING = "layer_norm"
    OPERANDS = (Operand("X", doc="the input, normalized over axes axis..rank-1"),
                Operand("Scale", doc="the normalized axes' shape"),
                Operand("B", optional=True, doc="the normalized axes' shape (default 0)"))
    RESULTS = ("Y", "Mean", "InvStdDev")
    ATTRS = (AXIS, EPSILON)
    GRADIENT = "LayerNormalizationGrad"
    NO_GRADIENT_RESULTS = (1, 2)

    def infer(self, ctx: InferContext) -> list[TensorType]:
        x = ctx.type(0)
        ctx.dtype_in(0, FLOAT_DTYPES)
        start = ctx.axis("axis", x.rank)
        _params(ctx, x, start, (1, 2))
        stats = x.with_shape(_stats_shape(x.shape, start))
        return [x, stats, stats]

    @classmethod
    def example(cls, rng: Any, dtype: Any) -> tuple[list[Any], dict[str, Any]]:
        """X [4, 3, 5] normalized over its last two axes (4 rows: the shard axis), Scale and B [3, 5]."""
        return ([rng.standard_normal((4, 3, 5)).astype(dtype), rng.uniform(0.5, 1.5, (3, 5)).astype(dtype),
                 rng.standard_normal((3, 5)).astype(dtype)], {"axis": 1, "epsilon": 1e-3})

    @classmethod
    def reference(cls, X: Any, Scale: Any, B: Any = None, *, axis: int, epsilon: float) -> Any:
        x = np.asarray(X, np.float64)
        axes = tuple(range(axis % x.ndim, x.ndim))
        mean = x.mean(axis=axes, keepdims=True)
        inv = 1 / np.sqrt(((x - mean) ** 2).mean(axis=axes, keepdims=True) + epsilon)
        y = (x - mean) * inv * np.asarray(Scale, np.float64)
        if B is not None:
            y = y + np.asarray(B, np.float64)
        return y, mean, inv


class LayerNormalizationGradOp(BackwardOp):
    """ORT LayerNormalizationGrad (com.microsoft): dX, dScale, dB of LayerNormalization from its saved Mean
    and InvStdDev.

    With x̂ = (X - Mean) * InvStdDev and g = dY * Scale, each over one row of the normalized axes:
    dX = InvStdDev * (g - mean(g) - x̂ * mean(g * x̂)); dScale = the sum of dY * x̂ over the other axes,
    dB the sum of dY.  ORT names the results X_grad, scale_grad, bias_grad."""

    ONNX = OnnxMap(domain=MS_DOMAIN, attrs=("axis",))

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
        for i in (3, 4):
            ctx.same_dtype(0, i)
            ctx.expect_shape(i, _stats_shape(x.shape, start), f" (X {x} with 1s on the normalized axes)")
        scale = ctx.type(2)
        return [x, scale, scale]

    @classmethod
    def example(cls, rng: Any, dtype: Any) -> tuple[list[Any], dict[str, Any]]:
        """dY and a forward's X [4, 3, 5], Scale [3, 5], Mean and InvStdDev [4, 1, 1] (axis 1)."""
        x = rng.standard_normal((4, 3, 5))
        scale = rng.uniform(0.5, 1.5, (3, 5))
        _, mean, inv = LayerNormalizationOp.reference(x, scale, axis=1, epsilon=1e-3)
        return ([rng.standard_normal((4, 3, 5)).astype(dtype), x.astype(dtype), scale.astype(dtype),
                 mean.astype(dtype), inv.astype(dtype)], {"axis": 1})

    @classmethod
    def reference(cls, dY: Any, X: Any, Scale: Any, Mean: Any, InvStdDev: Any, *, axis: int) -> Any:
        dy, x, scale, mean, inv = (np.asarray(a, np.float64) for a in (dY, X, Scale, Mean, InvStdDev))
        start = axis % x.ndim
        norm, outer = tuple(range(start, x.ndim)), tuple(range(start))
        xhat = (x - mean) * inv
        g = dy * scale
        dx = inv * (g - g.mean(axis=norm, keepdims=True) - xhat * (g * xhat).mean(axis=norm, keepdims=True))
        return dx, (dy * xhat).sum(axis=outer), dy.sum(axis=outer)
