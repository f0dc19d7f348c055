"""Logic and selection: Where, the comparisons, Not, And, Cast.

Bool values are first-class here: ``Where`` reads a Bool condition, the comparisons give Bool results,
``Not``/``And`` take and give Bool, ``Cast`` converts between every dtype.  The element-wise ones are
defined by their ``FORMULA`` (their kernels are generated: the NumPy path, since their operands or
result are not of one float dtype, and the fusion pass leaves them out of fused loops).  Comparisons,
Not and And have no gradient (their results are Bool); ``Where`` routes dY to the operand it took.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..ir.op import Attr, InferContext, Op, Operand
from ..ir.onnxmap import OnnxMap
from ..ir.types import ALL_DTYPES, DType, NUMERIC_DTYPES, TensorType, format_shape
from .common import ElementwiseOp, broadcast_shapes

__all__ = ["WhereOp", "EqualOp", "LessOp", "GreaterOp", "NotOp", "AndOp", "CastOp", "DTYPE_NAMES"]

DTYPE_NAMES = tuple(d.value for d in DType)


def _broadcast(op: Op, ctx: InferContext, first: int) -> tuple:
    """The broadcast shape of operands ``first``.. (a located error when they do not broadcast)."""
    shape = ctx.type(first).shape
    for i in range(first + 1, len(op.operands)):
        merged = broadcast_shapes(shape, ctx.type(i).shape)
        if merged is None:
            ctx.fail(f"shapes {format_shape(shape)} and {format_shape(ctx.type(i).shape)} ({op.operand_value(i)}) "
                     "cannot be broadcast together", operand=i)
        shape = merged
    return broadcast_shapes(shape, ctx.type(0).shape) if first else shape  # type: ignore[return-value]


class WhereOp(ElementwiseOp):
    """X where condition holds, else Y (ONNX Where, NumPy broadcasting of all three).

The gradient is ORT's builder's, Where(condition, dY, 0) for X and Where(condition, 0, dY) for Y,
summed back to each operand's shape where it was broadcast (ORT's builder leaves that out; gradir's
driver undoes broadcasting for every rule)."""

    ONNX = OnnxMap(since=9)
    OPERANDS = (Operand("condition", doc="Bool"), Operand("X"), Operand("Y"))
    RESULTS = ("output",)
    FORMULA = "where(condition, X, Y)"
    BROADCASTS = True
    LINEAR_IN = (1, 2)
    LINEAR_JOINTLY = True

    def infer(self, ctx: InferContext) -> list[TensorType]:
        ctx.dtype_in(0, (DType.Bool,))
        ctx.dtype_in(1, ALL_DTYPES)
        ctx.same_dtype(1, 2)
        shape = _broadcast(self, ctx, 1)
        if shape is None:
            ctx.fail(f"condition {format_shape(ctx.type(0).shape)} ({self.operand_value(0)}) does not broadcast "
                     f"with the values' shape", operand=0)
        return [TensorType(ctx.type(1).dtype, shape)]

    @classmethod
    def example(cls, rng: Any, dtype: Any) -> tuple[list[Any], dict[str, Any]]:
        """A Bool condition [4, 5], X [4, 5] and a row Y [5] broadcast over it."""
        return [rng.standard_normal((4, 5)) > 0, rng.standard_normal((4, 5)).astype(dtype),
                rng.standard_normal(5).astype(dtype)], {}


class _Compare(ElementwiseOp):
    """A comparison of two numeric operands of one dtype, broadcast: a Bool result."""

    abstract = True
    ONNX = None
    OPERANDS = (Operand("A"), Operand("B"))
    RESULTS = ("C",)
    DTYPES: tuple = NUMERIC_DTYPES

    def infer(self, ctx: InferContext) -> list[TensorType]:
        ctx.dtype_in(0, self.DTYPES)
        ctx.same_dtype(0, 1)
        return [TensorType(DType.Bool, _broadcast(self, ctx, 0))]

    @classmethod
    def example(cls, rng: Any, dtype: Any) -> tuple[list[Any], dict[str, Any]]:
        """Small integers (so some pairs are equal) in the float dtype: A [4, 5], a row B [5]."""
        return [rng.integers(-2, 3, (4, 5)).astype(dtype), rng.integers(-2, 3, 5).astype(dtype)], {}


class EqualOp(_Compare):
    """A == B, element-wise with broadcasting: Bool (ONNX Equal; floats and integers)."""

    ONNX = OnnxMap()
    FORMULA = "A == B"
    DTYPES = ALL_DTYPES


class LessOp(_Compare):
    """A < B, element-wise with broadcasting: Bool (ONNX Less; floats and integers)."""

    ONNX = OnnxMap()
    FORMULA = "A < B"


class GreaterOp(_Compare):
    """A > B, element-wise with broadcasting: Bool (ONNX Greater; floats and integers)."""

    ONNX = OnnxMap()
    FORMULA = "A > B"


class NotOp(ElementwiseOp):
    """Logical not of a Bool tensor (ONNX Not)."""

    ONNX = OnnxMap()
    OPERANDS = (Operand("X", doc="Bool"),)
    FORMULA = "logical_not(X)"
    DTYPES = (DType.Bool,)

    @classmethod
    def example(cls, rng: Any, dtype: Any) -> tuple[list[Any], dict[str, Any]]:
        return [rng.standard_normal((4, 5)) > 0], {}


class AndOp(ElementwiseOp):
    """Logical and of two Bool tensors, with broadcasting (ONNX And)."""

    ONNX = OnnxMap()
    OPERANDS = (Operand("A", doc="Bool"), Operand("B", doc="Bool"))
    RESULTS = ("C",)
    FORMULA = "logical_and(A, B)"
    DTYPES = (DType.Bool,)

    @classmethod
    def example(cls, rng: Any, dtype: Any) -> tuple[list[Any], dict[str, Any]]:
        return [rng.standard_normal((4, 5)) > 0, rng.standard_normal(5) > 0], {}


class CastOp(Op):
    """X converted to the dtype `to` (ONNX Cast), element by element.

Float to integer truncates toward zero (C's conversion, as ONNX Runtime's kernel and NumPy do); a
float that is NaN, infinite or out of the integer's range has no defined result in ONNX, and gradir
gives NumPy's (the platform's) value. Float64 to Float32 rounds to nearest even; any nonzero number
(NaN included) is true as Bool, and true is 1. Int64 to Int32 keeps the low 32 bits. The gradient of
a float-to-float Cast is dY cast back (ORT's builder); a cast from or to an integer or Bool dtype
passes no gradient."""

    ONNX = None  # ``to`` is ONNX's TensorProto number: gradir.interop.onnx.import_logic / export_logic
    ELEMENTWISE = "same"
    OPERANDS = (Operand("input"),)
    RESULTS = ("output",)
    ATTRS = (Attr("to", "str", choices=DTYPE_NAMES, doc="the result's dtype"),)

    def infer(self, ctx: InferContext) -> list[TensorType]:
        return [ctx.type(0).with_dtype(DType(ctx.attrs["to"]))]

    @classmethod
    def example(cls, rng: Any, dtype: Any) -> tuple[list[Any], dict[str, Any]]:
        """X [4, 5] to Float64 (exact from either float dtype, so a gradient flows back)."""
        return [rng.standard_normal((4, 5)).astype(dtype)], {"to": "Float64"}

    @classmethod
    def reference(cls, input: Any, *, to: str) -> Any:
        return np.asarray(input).astype(DType(to).numpy)
