"""The gradient kernels of the activation family (ORT semantics, docs/ops.md)."""

from __future__ import annotations

import numpy as np

from .....ops.activation import (FastGeluGradOp, GeluGradOp, LeakyReluGradOp, LogSoftmaxGradOp, LogSoftmaxGrad_13Op,
                                 QuickGeluGradOp, ReluGradOp, SigmoidGradOp, SoftmaxGradOp, SoftmaxGrad_13Op,
                                 TanhGradOp)
from .blocks import act_kernel, check_alpha, check_operands, compiled, f32_args, run_elementwise, run_rows
from .numerics import (GELU_C, GELU_K, LOG2E, fast_gelu_e32, fast_gelu_sig64, gelu_h, leaky_body, mirror,
                       n_gelu_scratch, quick_gelu_bound, quick_gelu_e32, quick_gelu_sig64, sig_grad_from_e32)

__all__ = ["fast_gelu_grad", "gelu_grad", "leaky_relu_grad", "log_softmax_grad", "log_softmax_grad_13",
           "quick_gelu_grad", "relu_grad", "sigmoid_grad", "softmax_grad", "softmax_grad_13", "tanh_grad"]


def _relu_grad_body(o: np.ndarray, dy: np.ndarray, x: np.ndarray, s: list[np.ndarray]) -> None:
    # dX = dY where X > 0 else +0, bit for bit like ORT's select (also for inf/NaN in dY):
    # an all-ones/all-zeros integer mask ANDed with dY's bits.
    itype = np.int32 if o.dtype == np.float32 else np.int64
    mask = s[0].view(itype)
    np.greater(x, 0.0, out=mask)
    np.negative(mask, out=mask)
    np.bitwise_and(dy.view(itype), mask, out=o.view(itype))


@act_kernel(ReluGradOp, 2)
def relu_grad(dy: np.ndarray, x: np.ndarray, *, out: np.ndarray | None = None) -> np.ndarray:
    """``dX = dY`` where ``X > 0`` (strict; NaN is not > 0), else ``+0``."""
    dtype = check_operands(dy, x)
    return run_elementwise(_relu_grad_body, 1, out, dy, x, fast=compiled(dtype, "relu_grad"))


def _sigmoid_grad_body(o: np.ndarray, dy: np.ndarray, y: np.ndarray, s: list[np.ndarray]) -> None:
    t = s[0]
    np.subtract(1.0, y, out=t)
    np.multiply(dy, y, out=o)  # ORT's order: (dY * Y) * (1 - Y)
    np.multiply(o, t, out=o)


@act_kernel(SigmoidGradOp, 2)
def sigmoid_grad(dy: np.ndarray, y: np.ndarray, *, out: np.ndarray | None = None) -> np.ndarray:
    """``dX = dY ⊙ Y ⊙ (1 - Y)`` from the forward output ``Y``."""
    dtype = check_operands(dy, y)
    return run_elementwise(_sigmoid_grad_body, 1, out, dy, y, fast=compiled(dtype, "sigmoid_grad"))


def _tanh_grad_body(o: np.ndarray, dy: np.ndarray, y: np.ndarray, s: list[np.ndarray]) -> None:
    t = s[0]
    np.square(y, out=t)
    np.subtract(1.0, t, out=t)
    np.multiply(dy, t, out=o)  # ORT's dY * (1 - Y * Y)


@act_kernel(TanhGradOp, 2)
def tanh_grad(dy: np.ndarray, y: np.ndarray, *, out: np.ndarray | None = None) -> np.ndarray:
    """``dX = dY ⊙ (1 - Y²)`` from the forward output ``Y``."""
    dtype = check_operands(dy, y)
    return run_elementwise(_tanh_grad_body, 1, out, dy, y, fast=compiled(dtype, "tanh_grad"))


@act_kernel(LeakyReluGradOp, 2)
def leaky_relu_grad(dy: np.ndarray, y: np.ndarray, *, out: np.ndarray | None = None,
                    alpha: float = 0.01) -> np.ndarray:
    """``dX = dY`` where the forward *output* ``Y > 0``, else ``alpha·dY`` (also for ``Y = 0``
    and NaN).  Like ORT, this is the derivative of LeakyRelu only for ``alpha >= 0``."""
    dtype = check_operands(dy, y)
    alpha = check_alpha(alpha, "LeakyReluGrad")
    return run_elementwise(leaky_body(alpha), 2, out, dy, y, fast=compiled(dtype, "leaky_relu_grad"),
                        fast_args=f32_args(dtype, alpha))


@act_kernel(QuickGeluGradOp, 2)
def quick_gelu_grad(dy: np.ndarray, x: np.ndarray, *, out: np.ndarray | None = None,
                    alpha: float = 1.702) -> np.ndarray:
    """``s = σ(alpha·X)``; ``dX = dY ⊙ s ⊙ (1 + alpha·X ⊙ (1 - s))``, alpha of any sign."""
    dtype = check_operands(dy, x)
    alpha = check_alpha(alpha, "QuickGeluGrad")
    if dtype == np.float32:
        def body32(o: np.ndarray, dy: np.ndarray, x: np.ndarray, s: list[np.ndarray]) -> None:
            z, t, e = s[0], s[1], s[2]
            quick_gelu_e32(x, alpha, z, t, e)  # t = v, e = exp(-v)
            sig_grad_from_e32(e, t)
            np.multiply(dy, t, out=o)

        return run_elementwise(body32, 3, out, dy, x, fast=compiled(dtype, "quick_gelu_grad"),
                            fast_args=f32_args(dtype, alpha, quick_gelu_bound(alpha)))

    def body64(o: np.ndarray, dy: np.ndarray, x: np.ndarray, s: list[np.ndarray]) -> None:
        v, sig, c = quick_gelu_sig64(x, alpha, s, True)
        np.multiply(v, c, out=v)
        np.add(v, 1.0, out=v)
        np.multiply(dy, sig, out=o)  # ORT's order: (dY * s) * (1 + v (1 - s))
        np.multiply(o, v, out=o)

    return run_elementwise(body64, 8, out, dy, x)


@act_kernel(GeluGradOp, 2, scalar="_gelu_grad1")
def gelu_grad(dy: np.ndarray, x: np.ndarray, *, out: np.ndarray | None = None) -> np.ndarray:
    """``dX = dY ⊙ (Φ(X) + X ⊙ φ(X))``, the derivative of the exact (erf) GELU."""
    dtype = check_operands(dy, x)

    def body(o: np.ndarray, dy: np.ndarray, x: np.ndarray, s: list[np.ndarray]) -> None:
        h, m, z = gelu_h(x, s, True)
        mirror(h, m, z)  # Φ(x) + x φ(x)
        np.multiply(dy, h, out=o)

    return run_elementwise(body, n_gelu_scratch(dtype), out, dy, x, fast=compiled(dtype, "gelu_grad"))


@act_kernel(FastGeluGradOp, 2, scalar="_fast_gelu_grad1")
def fast_gelu_grad(dy: np.ndarray, x: np.ndarray, *, out: np.ndarray | None = None) -> np.ndarray:
    """``dX = dY ⊙ ½((1 + t) + x(1 - t²)·k(1 + 3c x²))``, ``t = tanh(k(x + c x³))``.

    Computed as ``σ(w)(1 + v σ(-w))``, ``w = 2k(x + c x³)``, ``v = 2k x (1 + 3c x²)``: the
    same function without the tanh form's cancellations.
    """
    dtype = check_operands(dy, x)
    if dtype == np.float32:
        def body32(o: np.ndarray, dy: np.ndarray, x: np.ndarray, s: list[np.ndarray]) -> None:
            z, q, e = s[0], s[1], s[2]
            fast_gelu_e32(x, z, q, e)
            np.multiply(q, 6.0 * GELU_K * GELU_C, out=q)
            np.add(q, 2.0 * GELU_K, out=q)
            np.multiply(q, z, out=q)  # v
            sig_grad_from_e32(e, q)
            np.multiply(dy, q, out=o)

        return run_elementwise(body32, 3, out, dy, x, fast=compiled(dtype, "fast_gelu_grad"))

    def body64(o: np.ndarray, dy: np.ndarray, x: np.ndarray, s: list[np.ndarray]) -> None:
        sig, c, v = fast_gelu_sig64(x, s, True)
        np.multiply(v, c, out=v)
        np.add(v, 1.0, out=v)
        np.multiply(dy, sig, out=o)
        np.multiply(o, v, out=o)

    return run_elementwise(body64, 4, out, dy, x)


# -- softmax families ----------------------------------------------------------------------


def _softmax_grad_body(o: np.ndarray, dy: np.ndarray, y: np.ndarray, big: list[np.ndarray],
                       red: np.ndarray) -> None:
    p = big[0]
    if o.ndim == 2:  # rows: a fused dot product per row, no product array
        np.einsum("ij,ij->i", y, dy, out=red[:, 0])
    else:
        np.multiply(y, dy, out=p)
        np.add.reduce(p, axis=1, keepdims=True, out=red)
    np.subtract(dy, red, out=p)
    np.multiply(p, y, out=o)


def _log_softmax_grad_body(o: np.ndarray, dy: np.ndarray, y: np.ndarray, big: list[np.ndarray],
                           red: np.ndarray) -> None:
    p = big[0]
    np.add.reduce(dy, axis=1, keepdims=True, out=red)
    if p.dtype == np.float32:
        np.multiply(y, LOG2E, out=p)
        np.exp2(p, out=p)
    else:
        np.exp(y, out=p)
    np.multiply(p, red, out=p)
    np.subtract(dy, p, out=o)


@act_kernel(SoftmaxGradOp, 2)
def softmax_grad(dy: np.ndarray, y: np.ndarray, *, out: np.ndarray | None = None,
                 axis: int = 1) -> np.ndarray:
    """Pre-opset-13: ``dX = Y ⊙ (dY - Σ(Y ⊙ dY))``, the sum over all axes ``>= axis``."""
    dtype = check_operands(dy, y)
    return run_rows(_softmax_grad_body, 1, out, (dy, y), axis, True, "SoftmaxGrad",
                 compiled(dtype, "softmax_grad_rows"))


@act_kernel(SoftmaxGrad_13Op, 2)
def softmax_grad_13(dy: np.ndarray, y: np.ndarray, *, out: np.ndarray | None = None,
                    axis: int = -1) -> np.ndarray:
    """``dX = Y ⊙ (dY - Σ_axis(Y ⊙ dY))``, the sum over the single axis ``axis``."""
    dtype = check_operands(dy, y)
    return run_rows(_softmax_grad_body, 1, out, (dy, y), axis, False, "SoftmaxGrad_13",
                 compiled(dtype, "softmax_grad_rows"))


@act_kernel(LogSoftmaxGradOp, 2)
def log_softmax_grad(dy: np.ndarray, y: np.ndarray, *, out: np.ndarray | None = None,
                     axis: int = 1) -> np.ndarray:
    """Pre-opset-13: ``dX = dY - exp(Y) ⊙ Σ dY``, the sum over all axes ``>= axis``."""
    dtype = check_operands(dy, y)
    return run_rows(_log_softmax_grad_body, 1, out, (dy, y), axis, True, "LogSoftmaxGrad",
                 compiled(dtype, "log_softmax_grad_rows"))


@act_kernel(LogSoftmaxGrad_13Op, 2)
def log_softmax_grad_13(dy: np.ndarray, y: np.ndarray, *, out: np.ndarray | None = None,
                        axis: int = -1) -> np.ndarray:
    """``dX = dY - exp(Y) ⊙ Σ_axis dY``, the sum over the single axis ``axis``."""
    dtype = check_operands(dy, y)
    return run_rows(_log_softmax_grad_body, 1, out, (dy, y), axis, False, "LogSoftmaxGrad_13",
                 compiled(dtype, "log_softmax_grad_rows"))
