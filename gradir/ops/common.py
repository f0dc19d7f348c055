"""Building blocks shared by the op families: base classes with a type rule."""

from __future__ import annotations

import math

from ..ir import Attr, BackwardOp, InferContext, Op, Operand
from ..types import ALL_DTYPES, FLOAT_DTYPES, NUMERIC_DTYPES, TensorType

__all__ = ["UnaryOp", "BinaryActivationGradOp", "ALPHA_LEAKY", "ALPHA_QUICKGELU", "axis_attr"]


ALPHA_MAX = 1e38  # Float32 kernels use alpha·log2(e) and alpha·x: both must stay finite


def finite(value: float) -> str | None:
    """Kernels compute in the operands' dtype: the attribute must be usable in Float32 too."""
    if math.isfinite(value) and abs(value) <= ALPHA_MAX:
        return None
    return f"must be a finite number with |alpha| <= {ALPHA_MAX:g}, got {value}"


ALPHA_LEAKY = Attr("alpha", "float", 0.01, check=finite, doc="slope for x <= 0 (finite, |alpha| <= 1e38)")
ALPHA_QUICKGELU = Attr("alpha", "float", 1.702, check=finite, doc="sigmoid scale (finite, |alpha| <= 1e38)")


def axis_attr(default: int) -> Attr:
    return Attr("axis", "int", default, doc="axis (negative counts from the end)")


class UnaryOp(Op):
    """Element-wise op on one tensor; result has the operand's type."""

    abstract = True
    OPERANDS = (Operand("X"),)
    DTYPES: tuple = FLOAT_DTYPES

    def infer(self, ctx: InferContext) -> list[TensorType]:
        ctx.dtype_in(0, self.DTYPES)
        return [ctx.type(0)]


class BinaryActivationGradOp(BackwardOp):
    """ORT activation gradient: (dY, X-or-Y) of identical shape and float dtype -> dX."""

    abstract = True
    OPERANDS = (Operand("dY", doc="upstream gradient"), Operand("X", doc="forward input"))
    RESULTS = ("dX",)

    def infer(self, ctx: InferContext) -> list[TensorType]:
        ctx.dtype_in(0, FLOAT_DTYPES)
        return [ctx.unify(0, 1)]


# re-exported for families
__all__ += ["ALL_DTYPES", "NUMERIC_DTYPES", "FLOAT_DTYPES"]
