"""Shape helpers that derived backward graphs need (the op spec: "add further ops where
a backward derivation needs them").

* ``ReduceSumTo(X, Like)`` undoes NumPy broadcasting: it sums ``X`` down to the
  shape of ``Like``.  ``autodiff`` inserts it centrally, once per broadcast operand.
* ``BroadcastTo(X, Like)`` is its transpose (the backward of ``ReduceSum``/``ReduceMean``).
* ``Unsqueeze(X, axes)`` re-inserts reduced axes (and promotes MatMul vectors).
* ``Scale(X, factor)`` multiplies by a constant (the ``1/n`` of ``ReduceMean``).
* ``ZerosLike(X)`` is a materialised zero (a gradient that no path reaches).

``Like`` operands are read for their *shape only*, so they may have any dtype,
and taking the shape from a value (not an attribute) keeps ``?`` dimensions
correct: the broadcast that happened at run time is undone at run time.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np

from ..ir.op import Attr, InferContext, Op, Operand, unify_shapes
from ..ir.types import FLOAT_DTYPES, NUMERIC_DTYPES, TensorType, format_shape
from . import references
from .common import UnaryOp
from .math import broadcast_shapes

__all__ = ["sum_to_axes"]


def sum_to_axes(shape: tuple, target: tuple) -> tuple[tuple[int, ...], int]:
    """Axes of ``shape`` to sum (keepdims) to reach ``target`` after dropping the
    ``len(shape) - len(target)`` leading axes.  Concrete shapes only (kernels)."""
    lead = len(shape) - len(target)
    axes = tuple(range(lead)) + tuple(lead + k for k, d in enumerate(target) if d == 1 and shape[lead + k] != 1)
    return axes, lead


def _broadcasts_to(small: tuple, big: tuple) -> bool:
    """Can a tensor of shape ``small`` be broadcast to exactly ``big`` (``?`` unifies)?"""
    if len(small) > len(big):
        return False
    b = broadcast_shapes(small, big)
    return b is not None and unify_shapes(b, big) is not None


class ReduceSumToOp(Op):
    """Sum X over the axes along which Like's shape was broadcast to X's: the result has Like's shape."""

    SHARDING = "reduce_to"
    REDUCTION = True
    LINEAR_IN = (0,)

    OPERANDS = (Operand("X", doc="the broadcast tensor (e.g. a gradient)"),
                Operand("Like", doc="any dtype; only its shape is read, which must broadcast to X's"))
    RESULTS = ("Y",)

    def infer(self, ctx: InferContext) -> list[TensorType]:
        ctx.dtype_in(0, NUMERIC_DTYPES)
        x, like = ctx.type(0), ctx.type(1)
        if not _broadcasts_to(like.shape, x.shape):
            ctx.fail(f"operand Like ({self.operand_value(1)}) has shape {format_shape(like.shape)}, which does "
                     f"not broadcast to the shape {format_shape(x.shape)} of X ({self.operand_value(0)})",
                     operand=1)
        # a `?` in Like that meets a concrete non-1 dim of X must be that dim (or 1: keep `?`)
        return [TensorType(x.dtype, like.shape)]

    @classmethod
    def example(cls, rng: Any, dtype: Any) -> tuple[list[Any], dict[str, Any]]:
        """X [4, 3, 5] summed to Like's [3, 1] (a leading and an inner broadcast axis undone)."""
        return [rng.standard_normal((4, 3, 5)).astype(dtype), rng.standard_normal((3, 1)).astype(dtype)], {}

    @classmethod
    def reference(cls, X: Any, Like: Any) -> Any:
        return references.sum_to(X, np.shape(Like))


class BroadcastToOp(Op):
    """X broadcast (NumPy rules) to the shape of Like: the transpose of ReduceSumTo."""

    SHARDING = "broadcast_to"
    SHAPE_ONLY = True
    BROADCASTS = True
    LINEAR_IN = (0,)

    OPERANDS = (Operand("X"), Operand("Like", doc="any dtype; only its shape is read"))
    RESULTS = ("Y",)

    def infer(self, ctx: InferContext) -> list[TensorType]:
        ctx.dtype_in(0, NUMERIC_DTYPES)
        x, like = ctx.type(0), ctx.type(1)
        if not _broadcasts_to(x.shape, like.shape):
            ctx.fail(f"operand X ({self.operand_value(0)}) has shape {format_shape(x.shape)}, which does not "
                     f"broadcast to the shape {format_shape(like.shape)} of Like ({self.operand_value(1)})",
                     operand=0)
        shape = unify_shapes(broadcast_shapes(x.shape, like.shape), like.shape)
        return [TensorType(x.dtype, shape)]

    @classmethod
    def example(cls, rng: Any, dtype: Any) -> tuple[list[Any], dict[str, Any]]:
        return [rng.standard_normal((3, 1)).astype(dtype), rng.standard_normal((4, 3, 5)).astype(dtype)], {}

    @classmethod
    def reference(cls, X: Any, Like: Any) -> Any:
        return np.array(np.broadcast_to(np.asarray(X, np.float64), np.shape(Like)))


def _check_unique(v: tuple) -> Optional[str]:
    if len(set(v)) != len(v):
        return f"lists an axis twice: {list(v)}"
    return None


class UnsqueezeOp(Op):
    """Insert size-1 axes; `axes` are positions in the result (negative counts from its end)."""

    SHARDING = "unsqueeze"
    SHAPE_ONLY = True
    VIEW = True
    LINEAR_IN = (0,)

    OPERANDS = (Operand("X"),)
    ATTRS = (Attr("axes", "ints", check=_check_unique, doc="positions of the new axes in the result"),)

    def infer(self, ctx: InferContext) -> list[TensorType]:
        t = ctx.type(0)
        axes = ctx.attrs["axes"]
        r = t.rank + len(axes)
        norm = []
        for a in axes:
            if not -r <= a < r:
                ctx.fail(f"axis {a} is out of range for the result rank {r}", attr="axes")
            norm.append(a % r)
        if len(set(norm)) != len(norm):
            ctx.fail(f"axes {list(axes)} name the same result axis twice", attr="axes")
        dims = iter(t.shape)
        return [t.with_shape([1 if k in norm else next(dims) for k in range(r)])]

    @classmethod
    def example(cls, rng: Any, dtype: Any) -> tuple[list[Any], dict[str, Any]]:
        return [rng.standard_normal((4, 3)).astype(dtype)], {"axes": [1, -1]}

    @classmethod
    def reference(cls, X: Any, *, axes: Sequence[int]) -> Any:
        x = np.asarray(X, np.float64)
        r = x.ndim + len(axes)
        return np.expand_dims(x, tuple(sorted(a % r for a in axes))).copy()


class ScaleOp(UnaryOp):
    """factor * X, for a constant factor (e.g. the 1/n of a mean's gradient)."""

    ELEMENTWISE = "same"
    FORMULA = "factor * X"
    LINEAR_IN = (0,)

    ATTRS = (Attr("factor", "float", doc="the constant multiplier"),)
    DTYPES = FLOAT_DTYPES

    @classmethod
    def example(cls, rng: Any, dtype: Any) -> tuple[list[Any], dict[str, Any]]:
        return [rng.standard_normal((4, 5)).astype(dtype)], {"factor": -2.5}


class ZerosLikeOp(UnaryOp):
    """Zeros of X's type (X's values are not read): a gradient that no path reaches."""

    ELEMENTWISE = "same"
    FORMULA = "zeros_like(X)"

    DTYPES = NUMERIC_DTYPES
