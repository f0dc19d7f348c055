"""Activations (forward, docs/ops.md) and their ORT gradients."""

from __future__ import annotations

from typing import Any

from ..ir.op import BackwardOp, InferContext, Op, Operand
from ..ir.onnxmap import MS_DOMAIN, OnnxMap
from ..ir.types import FLOAT_DTYPES, TensorType
from . import references
from .common import ALPHA_LEAKY, ALPHA_QUICKGELU, BinaryActivationGradOp, UnaryOp, axis_attr

_Y = (Operand("dY", doc="upstream gradient"), Operand("Y", doc="forward output"))


# -- forward -----------------------------------------------------------------
class ReluOp(UnaryOp):
    """max(x, 0)."""

    ONNX = OnnxMap()
    ELEMENTWISE = "same"
    FORMULA = "where(X <= 0, 0, X)"  # NaN stays NaN, as in the kernel
    GRADIENT = "ReluGrad"


class SigmoidOp(UnaryOp):
    """Logistic sigmoid 1 / (1 + exp(-x))."""

    ONNX = OnnxMap()
    ELEMENTWISE = "same"
    FORMULA = "1 / (1 + exp(-X))"
    GRADIENT = "SigmoidGrad"


class TanhOp(UnaryOp):
    """Hyperbolic tangent."""

    ONNX = OnnxMap()
    ELEMENTWISE = "same"
    FORMULA = "tanh(X)"
    GRADIENT = "TanhGrad"


class GeluOp(UnaryOp):
    """x * Phi(x), the exact (erf) GELU."""

    ONNX = OnnxMap(domain=MS_DOMAIN, ort_float32_only=True)  # ai.onnx Gelu from opset 20: a hand exporter
    ELEMENTWISE = "same"
    FORMULA = "0.5 * X * (1 + erf(X / sqrt(2)))"
    GRADIENT = "GeluGrad"


class FastGeluOp(UnaryOp):
    """0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), the tanh approximation of GELU."""

    ONNX = OnnxMap(domain=MS_DOMAIN, ort_float32_only=True)
    ELEMENTWISE = "same"
    FORMULA = "0.5 * X * (1 + tanh(0.7978845608028654 * (X + 0.044715 * X ** 3)))"
    GRADIENT = "FastGeluGrad"


class LeakyReluOp(UnaryOp):
    """x if x > 0 else alpha * x."""

    ONNX = OnnxMap(attrs=("alpha",))
    ELEMENTWISE = "same"
    FORMULA = "where(X > 0, X, alpha * X)"
    GRADIENT = "LeakyReluGrad"
    # LeakyReluGrad tests `Y > 0`.  For alpha > 0, Y > 0 exactly where X > 0, so ORT's convention of
    # passing Y is equivalent to passing X; for alpha <= 0 only X gives the right mask.  Passing X is
    # right for every alpha and spares recomputing Y.
    GRADIENT_OPERANDS = ("X",)

    ATTRS = (ALPHA_LEAKY,)

    @classmethod
    def example(cls, rng: Any, dtype: Any) -> tuple[list[Any], dict[str, Any]]:
        """The default example with a slope other than the default (so that its export carries it)."""
        return super().example(rng, dtype)[0], {"alpha": 0.25}


class QuickGeluOp(UnaryOp):
    """x * sigmoid(alpha * x)."""

    ONNX = OnnxMap(domain=MS_DOMAIN, attrs=("alpha",))
    ELEMENTWISE = "same"
    FORMULA = "X * sigmoid(alpha * X)"
    GRADIENT = "QuickGeluGrad"

    ATTRS = (ALPHA_QUICKGELU,)

    @classmethod
    def example(cls, rng: Any, dtype: Any) -> tuple[list[Any], dict[str, Any]]:
        """The default example with a slope other than the default (so that its export carries it)."""
        return super().example(rng, dtype)[0], {"alpha": -0.75}


class _SoftmaxForward(Op):
    abstract = True
    OPERANDS = (Operand("X"),)
    ATTRS = (axis_attr(-1),)

    def infer(self, ctx: InferContext) -> list[TensorType]:
        t = ctx.type(0)
        ctx.dtype_in(0, FLOAT_DTYPES)
        ctx.axis("axis", t.rank)
        return [t]

    @classmethod
    def example(cls, rng: Any, dtype: Any) -> tuple[list[Any], dict[str, Any]]:
        """Rows of 5 scores, normalised over axis 1 (a batch of 4 rows: the shard axis)."""
        return [rng.standard_normal((4, 5)).astype(dtype)], {"axis": 1}


class SoftmaxOp(_SoftmaxForward):
    """exp(x) / sum(exp(x)) over one axis (opset-13 semantics), numerically stable."""

    ONNX = OnnxMap(attrs=("axis",))  # before opset 13 it flattens: hand handlers

    SHARDING = "axis"
    GRADIENT = "SoftmaxGrad_13"

    @classmethod
    def reference(cls, X: Any, *, axis: int) -> Any:
        return references.softmax(X, axis)


class LogSoftmaxOp(_SoftmaxForward):
    """x - log(sum(exp(x))) over one axis (opset-13 semantics), numerically stable."""

    ONNX = OnnxMap(attrs=("axis",))  # before opset 13 it flattens: hand handlers

    SHARDING = "axis"
    GRADIENT = "LogSoftmaxGrad_13"

    @classmethod
    def reference(cls, X: Any, *, axis: int) -> Any:
        return references.log_softmax(X, axis)


# -- gradients (ORT semantics) -------------------------------------------------
class ReluGradOp(BinaryActivationGradOp):
    """dX = dY where X > 0 (strict), else 0."""

    ONNX = OnnxMap(domain=MS_DOMAIN, ort_float32_only=True)
    ELEMENTWISE = "same"
    FORMULA = "where(X > 0, dY, 0)"
    LINEAR_IN = (0,)


class SigmoidGradOp(BinaryActivationGradOp):
    """dX = dY * Y * (1 - Y), from the forward output Y."""

    ONNX = OnnxMap(domain=MS_DOMAIN)
    ELEMENTWISE = "same"
    FORMULA = "dY * Y * (1 - Y)"
    LINEAR_IN = (0,)

    OPERANDS = _Y


class TanhGradOp(BinaryActivationGradOp):
    """dX = dY * (1 - Y^2), from the forward output Y."""

    ONNX = OnnxMap(domain=MS_DOMAIN)
    ELEMENTWISE = "same"
    FORMULA = "dY * (1 - Y * Y)"
    LINEAR_IN = (0,)

    OPERANDS = _Y


class LeakyReluGradOp(BinaryActivationGradOp):
    """dX = dY where Y > 0, else alpha * dY (reads the forward output Y, as ORT does)."""

    ONNX = OnnxMap(domain=MS_DOMAIN, attrs=("alpha",), ort_float32_only=True)
    ELEMENTWISE = "same"
    FORMULA = "where(Y > 0, dY, alpha * dY)"
    LINEAR_IN = (0,)

    OPERANDS = _Y
    ATTRS = (ALPHA_LEAKY,)

    @classmethod
    def example(cls, rng: Any, dtype: Any) -> tuple[list[Any], dict[str, Any]]:
        """The default example with a slope other than the default (so that its export carries it)."""
        return super().example(rng, dtype)[0], {"alpha": 0.25}


class QuickGeluGradOp(BinaryActivationGradOp):
    """s = sigmoid(alpha X); dX = dY * s * (1 + alpha X (1 - s))."""

    ONNX = OnnxMap(domain=MS_DOMAIN, attrs=("alpha",), ort_float32_only=True)
    ELEMENTWISE = "same"
    FORMULA = "dY * sigmoid(alpha * X) * (1 + alpha * X * (1 - sigmoid(alpha * X)))"
    LINEAR_IN = (0,)

    ATTRS = (ALPHA_QUICKGELU,)

    @classmethod
    def example(cls, rng: Any, dtype: Any) -> tuple[list[Any], dict[str, Any]]:
        """The default example with a slope other than the default (so that its export carries it)."""
        return super().example(rng, dtype)[0], {"alpha": -0.75}


class GeluGradOp(BinaryActivationGradOp):
    """dX = dY * (Phi(X) + X phi(X)) (exact erf GELU)."""

    ONNX = OnnxMap(domain=MS_DOMAIN, ort_float32_only=True)
    ELEMENTWISE = "same"
    FORMULA = "dY * (0.5 * (1 + erf(X / sqrt(2))) + X * exp(-0.5 * X * X) / sqrt(2 * pi))"
    LINEAR_IN = (0,)


class FastGeluGradOp(BinaryActivationGradOp):
    """Gradient of the tanh-approximated GELU."""

    ONNX = OnnxMap(domain=MS_DOMAIN)
    ELEMENTWISE = "same"
    FORMULA = ("dY * (0.5 * (1 + tanh(0.7978845608028654 * (X + 0.044715 * X ** 3))) + 0.5 * X * "
               "(1 - tanh(0.7978845608028654 * (X + 0.044715 * X ** 3)) ** 2) * 0.7978845608028654 * "
               "(1 + 3 * 0.044715 * X * X))")
    LINEAR_IN = (0,)


class _SoftmaxGrad(BackwardOp):
    abstract = True
    OPERANDS = _Y
    RESULTS = ("dX",)

    def infer(self, ctx: InferContext) -> list[TensorType]:
        ctx.dtype_in(0, FLOAT_DTYPES)
        t = ctx.unify(0, 1)
        ctx.axis("axis", t.rank)
        return [t]

    @classmethod
    def example(cls, rng: Any, dtype: Any) -> tuple[list[Any], dict[str, Any]]:
        """dY and a forward output Y of rank 3, summed from axis 1 (a batch of 4: the shard axis)."""
        y = references.softmax(rng.standard_normal((4, 3, 2)), 1)
        return [rng.standard_normal((4, 3, 2)).astype(dtype), y.astype(dtype)], {"axis": 1}


class SoftmaxGradOp(_SoftmaxGrad):
    """dX = Y * (dY - sum(Y * dY)), summed over all axes from `axis` on (pre-opset-13, flattened)."""

    ONNX = OnnxMap(domain=MS_DOMAIN, attrs=("axis",))

    SHARDING = "axis"
    FLATTENED = True
    ATTRS = (axis_attr(1),)

    @classmethod
    def reference(cls, dY: Any, Y: Any, *, axis: int) -> Any:
        return references.softmax_grad(dY, Y, axis, flattened=True)


class SoftmaxGrad_13Op(_SoftmaxGrad):
    """dX = Y * (dY - sum_axis(Y * dY)), summed over the single axis `axis` (opset 13)."""

    ONNX = OnnxMap(domain=MS_DOMAIN, attrs=("axis",), ort_float32_only=True)

    SHARDING = "axis"
    ATTRS = (axis_attr(-1),)

    @classmethod
    def reference(cls, dY: Any, Y: Any, *, axis: int) -> Any:
        return references.softmax_grad(dY, Y, axis, flattened=False)


class LogSoftmaxGradOp(_SoftmaxGrad):
    """dX = dY - exp(Y) * sum(dY), summed over all axes from `axis` on (pre-opset-13, flattened)."""

    ONNX = OnnxMap(domain=MS_DOMAIN, attrs=("axis",), ort_float32_only=True)

    SHARDING = "axis"
    FLATTENED = True
    ATTRS = (axis_attr(1),)

    @classmethod
    def reference(cls, dY: Any, Y: Any, *, axis: int) -> Any:
        return references.log_softmax_grad(dY, Y, axis, flattened=True)


class LogSoftmaxGrad_13Op(_SoftmaxGrad):
    """dX = dY - exp(Y) * sum_axis(dY), over the single axis `axis` (opset 13)."""

    ONNX = OnnxMap(domain=MS_DOMAIN, attrs=("axis",), ort_float32_only=True)

    SHARDING = "axis"
    ATTRS = (axis_attr(-1),)

    @classmethod
    def reference(cls, dY: Any, Y: Any, *, axis: int) -> Any:
        return references.log_softmax_grad(dY, Y, axis, flattened=False)
