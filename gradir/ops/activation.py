"""Activations (forward, docs/ops.md) and their ORT gradients."""

from __future__ import annotations

from ..ir import InferContext, Operand
from ..types import FLOAT_DTYPES, TensorType
from .common import ALPHA_LEAKY, ALPHA_QUICKGELU, BinaryActivationGradOp, UnaryOp, axis_attr

_Y = (Operand("dY", doc="upstream gradient"), Operand("Y", doc="forward output"))


# -- forward -----------------------------------------------------------------
class ReluOp(UnaryOp):
    """max(x, 0)."""

    ELEMENTWISE = "same"
    FORMULA = "where(X <= 0, 0, X)"  # NaN stays NaN, as in the kernel
    GRADIENT = "ReluGrad"


class SigmoidOp(UnaryOp):
    """Logistic sigmoid 1 / (1 + exp(-x))."""

    ELEMENTWISE = "same"
    FORMULA = "1 / (1 + exp(-X))"
    GRADIENT = "SigmoidGrad"


class TanhOp(UnaryOp):
    """Hyperbolic tangent."""

    ELEMENTWISE = "same"
    FORMULA = "tanh(X)"
    GRADIENT = "TanhGrad"


class GeluOp(UnaryOp):
    """x * Phi(x), the exact (erf) GELU."""

    ELEMENTWISE = "same"
    FORMULA = "0.5 * X * (1 + erf(X / sqrt(2)))"
    GRADIENT = "GeluGrad"


class FastGeluOp(UnaryOp):
    """0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), the tanh approximation of GELU."""

    ELEMENTWISE = "same"
    FORMULA = "0.5 * X * (1 + tanh(0.7978845608028654 * (X + 0.044715 * X ** 3)))"
    GRADIENT = "FastGeluGrad"


class LeakyReluOp(UnaryOp):
    """x if x > 0 else alpha * x."""

    ELEMENTWISE = "same"
    FORMULA = "where(X > 0, X, alpha * X)"
    GRADIENT = "LeakyReluGrad"
    # LeakyReluGrad tests `Y > 0`.  For alpha > 0, Y > 0 exactly where X > 0, so ORT's convention of
    # passing Y is equivalent to passing X; for alpha <= 0 only X gives the right mask.  Passing X is
    # right for every alpha and spares recomputing Y.
    GRADIENT_OPERANDS = ("X",)

    ATTRS = (ALPHA_LEAKY,)


class QuickGeluOp(UnaryOp):
    """x * sigmoid(alpha * x)."""

    ELEMENTWISE = "same"
    FORMULA = "X * sigmoid(alpha * X)"
    GRADIENT = "QuickGeluGrad"

    ATTRS = (ALPHA_QUICKGELU,)


class _SoftmaxForward(UnaryOp):
    abstract = True
    ATTRS = (axis_attr(-1),)

    def infer(self, ctx: InferContext) -> list[TensorType]:
        t = ctx.type(0)
        ctx.dtype_in(0, FLOAT_DTYPES)
        ctx.axis("axis", t.rank)
        return [t]


class SoftmaxOp(_SoftmaxForward):
    """exp(x) / sum(exp(x)) over one axis (opset-13 semantics), numerically stable."""

    SHARDING = "axis"
    GRADIENT = "SoftmaxGrad_13"


class LogSoftmaxOp(_SoftmaxForward):
    """x - log(sum(exp(x))) over one axis (opset-13 semantics), numerically stable."""

    SHARDING = "axis"
    GRADIENT = "LogSoftmaxGrad_13"


# -- gradients (ORT semantics) -------------------------------------------------
class ReluGradOp(BinaryActivationGradOp):
    """dX = dY where X > 0 (strict), else 0."""

    ELEMENTWISE = "same"
    FORMULA = "where(X > 0, dY, 0)"
    LINEAR_IN = (0,)


class SigmoidGradOp(BinaryActivationGradOp):
    """dX = dY * Y * (1 - Y), from the forward output Y."""

    ELEMENTWISE = "same"
    FORMULA = "dY * Y * (1 - Y)"
    LINEAR_IN = (0,)

    OPERANDS = _Y


class TanhGradOp(BinaryActivationGradOp):
    """dX = dY * (1 - Y^2), from the forward output Y."""

    ELEMENTWISE = "same"
    FORMULA = "dY * (1 - Y * Y)"
    LINEAR_IN = (0,)

    OPERANDS = _Y


class LeakyReluGradOp(BinaryActivationGradOp):
    """dX = dY where Y > 0, else alpha * dY (reads the forward output Y, as ORT does)."""

    ELEMENTWISE = "same"
    FORMULA = "where(Y > 0, dY, alpha * dY)"
    LINEAR_IN = (0,)

    OPERANDS = _Y
    ATTRS = (ALPHA_LEAKY,)


class QuickGeluGradOp(BinaryActivationGradOp):
    """s = sigmoid(alpha X); dX = dY * s * (1 + alpha X (1 - s))."""

    ELEMENTWISE = "same"
    FORMULA = "dY * sigmoid(alpha * X) * (1 + alpha * X * (1 - sigmoid(alpha * X)))"
    LINEAR_IN = (0,)

    ATTRS = (ALPHA_QUICKGELU,)


class GeluGradOp(BinaryActivationGradOp):
    """dX = dY * (Phi(X) + X phi(X)) (exact erf GELU)."""

    ELEMENTWISE = "same"
    FORMULA = "dY * (0.5 * (1 + erf(X / sqrt(2))) + X * exp(-0.5 * X * X) / sqrt(2 * pi))"
    LINEAR_IN = (0,)


class FastGeluGradOp(BinaryActivationGradOp):
    """Gradient of the tanh-approximated GELU."""

    ELEMENTWISE = "same"
    FORMULA = ("dY * (0.5 * (1 + tanh(0.7978845608028654 * (X + 0.044715 * X ** 3))) + 0.5 * X * "
               "(1 - tanh(0.7978845608028654 * (X + 0.044715 * X ** 3)) ** 2) * 0.7978845608028654 * "
               "(1 + 3 * 0.044715 * X * X))")
    LINEAR_IN = (0,)


class _SoftmaxGrad(BinaryActivationGradOp):
    abstract = True
    OPERANDS = _Y

    def infer(self, ctx: InferContext) -> list[TensorType]:
        t = super().infer(ctx)[0]
        ctx.axis("axis", t.rank)
        return [t]


class SoftmaxGradOp(_SoftmaxGrad):
    """dX = Y * (dY - sum(Y * dY)), summed over all axes from `axis` on (pre-opset-13, flattened)."""

    SHARDING = "axis"
    FLATTENED = True
    ATTRS = (axis_attr(1),)


class SoftmaxGrad_13Op(_SoftmaxGrad):
    """dX = Y * (dY - sum_axis(Y * dY)), summed over the single axis `axis` (opset 13)."""

    SHARDING = "axis"
    ATTRS = (axis_attr(-1),)


class LogSoftmaxGradOp(_SoftmaxGrad):
    """dX = dY - exp(Y) * sum(dY), summed over all axes from `axis` on (pre-opset-13, flattened)."""

    SHARDING = "axis"
    FLATTENED = True
    ATTRS = (axis_attr(1),)


class LogSoftmaxGrad_13Op(_SoftmaxGrad):
    """dX = dY - exp(Y) * sum_axis(dY), over the single axis `axis` (opset 13)."""

    SHARDING = "axis"
    ATTRS = (axis_attr(-1),)
