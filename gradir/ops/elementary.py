"""Powers, erf and extremes: Pow, Erf, the variadic Max and Min, ReduceMax.

Pow and Erf are defined by their ``FORMULA`` and ``VJP`` (their kernels and backward ops are
generated; this module is imported after ``vjp.py``, whose hook makes them).  The extremes' gradients
are ORT's builders' (``gradir/autodiff/rules_elem.py``): for Max and Min, ``Equal``/``Cast``/
``Sum``/``Div``, so operands tied for the extreme split dY evenly; for ReduceMax, ``Equal``/``Cast``/
``Mul``, so every position tied for the maximum gets dY whole (ORT's builder, not PyTorch's ``amax``,
which splits it).
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np

from ..ir.op import InferContext, Op, Operand
from ..ir.onnxmap import OnnxMap
from ..ir.types import NUMERIC_DTYPES, TensorType
from .common import ElementwiseOp, UnaryOp, infer_broadcast
from .math import Reduce

__all__ = ["PowOp", "ErfOp", "MaxOp", "MinOp", "ReduceMaxOp"]


class PowOp(ElementwiseOp):
    """X to the power exponent, element-wise with broadcasting (ONNX Pow; any real exponent).

A negative X with a non-integer exponent is NaN, as in ONNX and NumPy. The gradient with respect
to X is dY * exponent * X^(exponent - 1) (ORT's builder's Sub/Pow/Mul); with respect to the exponent
dY * log(X) * X^exponent where X > 0 and 0 elsewhere (ORT's builder refuses it; gradir gives it).
The importer reads an exponent of another dtype than X through a Cast."""

    ONNX = OnnxMap()
    OPERANDS = (Operand("X"), Operand("exponent"))
    FORMULA = "X ** exponent"
    VJP = {"X": "dY * exponent * X ** (exponent - 1)",
           "exponent": "where(X > 0, dY * log(X) * Y, zeros_like(X))"}

    @classmethod
    def example(cls, rng: Any, dtype: Any) -> tuple[list[Any], dict[str, Any]]:
        """A positive base [4, 5] (the exponent's gradient is defined there) and a row of exponents [5]."""
        return [rng.uniform(0.5, 2.0, (4, 5)).astype(dtype), rng.uniform(-2.0, 3.0, 5).astype(dtype)], {}


class ErfOp(UnaryOp):
    """The error function (ONNX Erf); its gradient is dY * 2/sqrt(pi) * exp(-x^2) (ORT's builder's)."""

    ONNX = OnnxMap(ort_float32_only=True)
    ELEMENTWISE = "same"
    FORMULA = "erf(X)"
    VJP = {"X": "dY * (2 / sqrt(pi)) * exp(-(X * X))"}


class _Extreme(Op):
    abstract = True
    OPERANDS = (Operand("data_0", variadic=True),)
    RESULTS = ("max",)
    ELEMENTWISE = "broadcast"
    BROADCASTS = True

    def infer(self, ctx: InferContext) -> list[TensorType]:
        return infer_broadcast(self, ctx, NUMERIC_DTYPES)

    @classmethod
    def example(cls, rng: Any, dtype: Any) -> tuple[list[Any], dict[str, Any]]:
        """Three operands [4, 5], [5] and [4, 5] (one broadcast), apart by more than the finite-difference
        step."""
        x = rng.permutation(60).reshape(3, 4, 5).astype(dtype) / 8
        return [x[0], x[1, 0], x[2]], {}


class MaxOp(_Extreme):
    """The element-wise maximum of n >= 1 operands, with broadcasting (ONNX Max; NaN if any is NaN).

Gradient (ORT's builder): dY divided among the operands equal to the maximum, evenly where several
are, summed back to each operand's shape."""

    ONNX = OnnxMap()
    RESULTS = ("max",)

    @classmethod
    def reference(cls, *data: Any) -> Any:
        out = np.asarray(data[0], np.float64)
        for d in data[1:]:
            out = np.maximum(out, np.asarray(d, np.float64))
        return np.array(out)


class MinOp(_Extreme):
    """The element-wise minimum of n >= 1 operands, with broadcasting (ONNX Min; NaN if any is NaN).

Gradient (ORT's builder): dY divided among the operands equal to the minimum, evenly where several
are, summed back to each operand's shape."""

    ONNX = OnnxMap()
    RESULTS = ("min",)

    @classmethod
    def reference(cls, *data: Any) -> Any:
        out = np.asarray(data[0], np.float64)
        for d in data[1:]:
            out = np.minimum(out, np.asarray(d, np.float64))
        return np.array(out)


class ReduceMaxOp(Reduce):
    """Maximum over `axes` (default all; NaN if any element is).

ONNX ReduceMax: `axes` an attribute before opset 18, an input from 18 (folded into the attribute on
import). Gradient (ORT's builder): dY to every position equal to the maximum, whole (ties are not
split)."""

    ONNX = None  # axes attribute or input by opset: hand handlers, as ReduceSum's
    REDUCTION = True

    @classmethod
    def example(cls, rng: Any, dtype: Any) -> tuple[list[Any], dict[str, Any]]:
        """Distinct values (a unique maximum per row, so finite differences see one slope), reduced over the
        last axis."""
        return [(rng.permutation(24).reshape(4, 3, 2) / 4).astype(dtype)], {"axes": [-1]}

    @classmethod
    def reference(cls, X: Any, *, axes: Optional[Sequence[int]], keepdims: bool) -> Any:
        return np.asarray(np.max(np.asarray(X, np.float64), axis=None if axes is None else tuple(axes),
                                 keepdims=keepdims))
