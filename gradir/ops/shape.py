"""Shape helpers that derived backward graphs need (the op spec: "add further ops where
a backward derivation needs them").

* ``ReduceSumTo(X, Like)`` undoes NumPy broadcasting: it sums ``X`` down to the
  shape of ``Like``.  ``autodiff`` inserts it centrally, once per broadcast operand.
* ``BroadcastTo(X, Like)`` is its transpose (the backward of ``ReduceSum``/``ReduceMean``).
* ``Unsqueeze(X, axes)`` re-inserts reduced axes (and promotes MatMul vectors); ``Squeeze`` removes them.
* ``Flatten(X, axis)``: ONNX's Flatten, a matrix view of X (an op of its own, not a ``Reshape``: its result's
  shape follows X's, ``?`` dimensions included).
* ``Expand(X, shape)``: ONNX's Expand, ``BroadcastTo`` with a static shape (both ways: NumPy rules).
* ``Scale(X, factor)`` multiplies by a constant (the ``1/n`` of ``ReduceMean``).
* ``ZerosLike(X)`` is a materialised zero (a gradient that no path reaches).

``Like`` operands are read for their *shape only*, so they may have any dtype,
and taking the shape from a value (not an attribute) keeps ``?`` dimensions
correct: the broadcast that happened at run time is undone at run time.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np

from ..ir.onnxmap import OnnxMap
from ..ir.op import Attr, InferContext, Op, Operand, unify_shapes
from ..ir.types import FLOAT_DTYPES, NUMERIC_DTYPES, TensorType, format_shape
from . import references
from .common import UnaryOp
from .math import broadcast_shapes

__all__ = ["sum_to_axes", "flatten_axis"]


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
    """X broadcast (NumPy rules) to the shape of Like: the transpose of ReduceSumTo.

Expand with its shape read from a value at run time (a derived gradient's `?` dimensions); ONNX's
`Expand(x, Shape(v))` imports as it, and it exports as that."""

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


class SqueezeOp(Op):
    """ONNX Squeeze: remove the size-1 axes `axes` (of X; negative counts from its end); Unsqueeze is its inverse.

ONNX's axes input (opset 13+; an attribute before) is the attribute; a Squeeze without axes (every size-1
axis) imports with them listed, from the static shape."""

    ONNX = None  # interop/onnx/import_index.py, export_index.py: axes as an input or attribute by opset
    SHARDING = "squeeze"
    SHAPE_ONLY = True
    VIEW = True
    LINEAR_IN = (0,)

    OPERANDS = (Operand("X"),)
    ATTRS = (Attr("axes", "ints", check=_check_unique, doc="the size-1 axes of X to remove"),)

    def infer(self, ctx: InferContext) -> list[TensorType]:
        t = ctx.type(0)
        norm = []
        for a in ctx.attrs["axes"]:
            if not -t.rank <= a < t.rank:
                ctx.fail(f"axis {a} is out of range for rank {t.rank}", attr="axes")
            if t.shape[a] not in (1, None):
                ctx.fail(f"axis {a} of X ({self.operand_value(0)}, {t}) has size {t.shape[a]}, not 1", attr="axes")
            norm.append(a % t.rank)
        if len(set(norm)) != len(norm):
            ctx.fail(f"axes {list(ctx.attrs['axes'])} name an axis twice", attr="axes")
        return [t.with_shape([d for k, d in enumerate(t.shape) if k not in norm])]

    @classmethod
    def example(cls, rng: Any, dtype: Any) -> tuple[list[Any], dict[str, Any]]:
        return [rng.standard_normal((4, 1, 3, 1)).astype(dtype)], {"axes": [-1, 1]}

    @classmethod
    def reference(cls, X: Any, *, axes: Sequence[int]) -> Any:
        x = np.asarray(X, np.float64)
        return np.squeeze(x, tuple(a % x.ndim for a in axes)).copy()


class FlattenOp(Op):
    """ONNX Flatten: X as a matrix [D0 * ... * D(axis-1), D(axis) * ... * Dn] (the same elements in the same
    order: a view); `axis` 0 gives [1, all].

The gradient is dY reshaped back to X's shape (ONNX Runtime's builder: Reshape to Shape(X))."""

    ONNX = OnnxMap(attrs=("axis",))
    SHARDING = "flatten"
    SHAPE_ONLY = True
    VIEW = True
    LINEAR_IN = (0,)

    OPERANDS = (Operand("X"),)
    RESULTS = ("Y",)
    ATTRS = (Attr("axis", "int", 1, doc="the first axis of the second dimension; negative counts from the end"),)

    def infer(self, ctx: InferContext) -> list[TensorType]:
        t = ctx.type(0)
        axis = ctx.attrs["axis"]
        if not -t.rank <= axis <= t.rank:
            ctx.fail(f"axis {axis} is out of range for rank {t.rank} (-{t.rank}..{t.rank})", attr="axis")
        a = flatten_axis(axis, t.rank)
        return [t.with_shape([_product(t.shape[:a]), _product(t.shape[a:])])]

    @classmethod
    def example(cls, rng: Any, dtype: Any) -> tuple[list[Any], dict[str, Any]]:
        """X [4, 3, 2, 5] flattened from axis 2: [12, 10]."""
        return [rng.standard_normal((4, 3, 2, 5)).astype(dtype)], {"axis": 2}

    @classmethod
    def reference(cls, X: Any, *, axis: int) -> Any:
        x = np.asarray(X, np.float64)
        a = flatten_axis(axis, x.ndim)
        return x.reshape(int(np.prod(x.shape[:a])), -1).copy()


def flatten_axis(axis: int, rank: int) -> int:
    """Flatten's ``axis`` as 0..rank (ONNX: a negative one counts from the end)."""
    return axis + rank if axis < 0 else axis


def _product(dims: Sequence[Optional[int]]) -> Optional[int]:
    n = 1
    for d in dims:
        if d is None:
            return None
        n *= d
    return n


def _check_expand(s: tuple) -> Optional[str]:
    bad = [d for d in s if d < 1]
    return f"entries must be positive, got {bad[0]}" if bad else None


class ExpandOp(Op):
    """ONNX Expand: X broadcast together with `shape` (NumPy rules, both ways: a 1 in shape keeps X's dim).

The static form of BroadcastTo: Expand's shape is an attribute (ONNX's shape input, folded at import),
BroadcastTo's is read from a value at run time (gradients with `?` dimensions, `Expand(x, Shape(v))`)."""

    ONNX = None  # interop/onnx/import_index.py, export_index.py: the shape input
    SHARDING = "expand"
    SHAPE_ONLY = True
    BROADCASTS = True
    LINEAR_IN = (0,)

    OPERANDS = (Operand("X"),)
    ATTRS = (Attr("shape", "ints", check=_check_expand, doc="the shape X is broadcast with"),)

    def infer(self, ctx: InferContext) -> list[TensorType]:
        t = ctx.type(0)
        shape = broadcast_shapes(t.shape, tuple(ctx.attrs["shape"]))
        if shape is None:
            ctx.fail(f"X ({self.operand_value(0)}) has shape {format_shape(t.shape)}, which does not broadcast with "
                     f"shape={list(ctx.attrs['shape'])}", attr="shape")
        return [t.with_shape(shape)]

    @classmethod
    def example(cls, rng: Any, dtype: Any) -> tuple[list[Any], dict[str, Any]]:
        """X [4, 1, 5] with shape [3, 1]: a new inner axis of 3, and shape's 1 keeps X's 5."""
        return [rng.standard_normal((4, 1, 5)).astype(dtype)], {"shape": [3, 1]}

    @classmethod
    def reference(cls, X: Any, *, shape: Sequence[int]) -> Any:
        x = np.asarray(X, np.float64)
        return np.array(x * np.ones(shape))


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
