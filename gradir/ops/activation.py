"""Activations (forward, docs/ops.md) and their ORT gradients."""

from __future__ import annotations

from ..ir import InferContext, Operand
from ..types import FLOAT_DTYPES, TensorType
from .common import ALPHA_LEAKY, ALPHA_QUICKGELU, BinaryActivationGradOp, UnaryOp, axis_attr

_Y = (Operand("dY", doc="upstream gradient"), Operand("Y", doc="forward output"))


# -- forward -----------------------------------------------------------------
class ReluOp(UnaryOp):
    """max(x, 0)."""


class SigmoidOp(UnaryOp):
    """Logistic sigmoid 1 / (1 + exp(-x))."""


class TanhOp(UnaryOp):
    """Hyperbolic tangent."""


class GeluOp(UnaryOp):
    """x * Phi(x), the exact (erf) GELU."""


class FastGeluOp(UnaryOp):
    """0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), the tanh approximation of GELU."""


class LeakyReluOp(UnaryOp):
    """x if x > 0 else alpha * x."""

    ATTRS = (ALPHA_LEAKY,)


class QuickGeluOp(UnaryOp):
    """x * sigmoid(alpha * x)."""

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


class LogSoftmaxOp(_SoftmaxForward):
    """x - log(sum(exp(x))) over one axis (opset-13 semantics), numerically stable."""


# -- gradients (ORT semantics) -------------------------------------------------
class ReluGradOp(BinaryActivationGradOp):
    """dX = dY where X > 0 (strict), else 0."""


class SigmoidGradOp(BinaryActivationGradOp):
    """dX = dY * Y * (1 - Y), from the forward output Y."""

    OPERANDS = _Y


class TanhGradOp(BinaryActivationGradOp):
    """dX = dY * (1 - Y^2), from the forward output Y."""

    OPERANDS = _Y


class LeakyReluGradOp(BinaryActivationGradOp):
    """dX = dY where Y > 0, else alpha * dY (reads the forward output Y, as ORT does)."""

    OPERANDS = _Y
    ATTRS = (ALPHA_LEAKY,)


class QuickGeluGradOp(BinaryActivationGradOp):
    """s = sigmoid(alpha X); dX = dY * s * (1 + alpha X (1 - s))."""

    ATTRS = (ALPHA_QUICKGELU,)


class GeluGradOp(BinaryActivationGradOp):
    """dX = dY * (Phi(X) + X phi(X)) (exact erf GELU)."""


class FastGeluGradOp(BinaryActivationGradOp):
    """Gradient of the tanh-approximated GELU."""


class _SoftmaxGrad(BinaryActivationGradOp):
    abstract = True
    OPERANDS = _Y

    def infer(self, ctx: InferContext) -> list[TensorType]:
        t = super().infer(ctx)[0]
        ctx.axis("axis", t.rank)
        return [t]


class SoftmaxGradOp(_SoftmaxGrad):
    """dX = Y * (dY - sum(Y * dY)), summed over all axes from `axis` on (pre-opset-13, flattened)."""

    ATTRS = (axis_attr(1),)


class SoftmaxGrad_13Op(_SoftmaxGrad):
    """dX = Y * (dY - sum_axis(Y * dY)), summed over the single axis `axis` (opset 13)."""

    ATTRS = (axis_attr(-1),)


class LogSoftmaxGradOp(_SoftmaxGrad):
    """dX = dY - exp(Y) * sum(dY), summed over all axes from `axis` on (pre-opset-13, flattened)."""

    ATTRS = (axis_attr(1),)


class LogSoftmaxGrad_13Op(_SoftmaxGrad):
    """dX = dY - exp(Y) * sum_axis(dY), over the single axis `axis` (opset 13)."""

    ATTRS = (axis_attr(-1),)
