"""The forward kernels of the activation family (docs/ops.md)."""

from __future__ import annotations

import numpy as np

from .....ops.activation import (FastGeluOp, GeluOp, LeakyReluOp, LogSoftmaxOp, QuickGeluOp, ReluOp, SigmoidOp,
                                 SoftmaxOp, TanhOp)
from ..registry import kernel
from .blocks import act_kernel, check_alpha, check_operands, compiled, f32_args, run_elementwise, run_rows
from .numerics import (LOG2E, W32, X32_FAST, XCLIP, fast_gelu_e32, fast_gelu_sig64, gelu_h, leaky_body, mirror,
                       n_gelu_scratch, quick_gelu_bound, quick_gelu_e32, quick_gelu_sig64, sigmoid_pair64)

__all__ = ["fast_gelu", "gelu", "leaky_relu", "log_softmax", "quick_gelu", "relu", "sigmoid", "softmax", "tanh"]


@act_kernel(ReluOp, 1)
def relu(x: np.ndarray, *, out: np.ndarray | None = None) -> np.ndarray:
    """``max(x, 0)`` (NaN stays NaN)."""
    check_operands(x)
    return run_elementwise(lambda o, x, s: np.maximum(x, 0.0, out=o), 0, out, x)


@kernel(TanhOp, inplace=True, ufunc=np.tanh, splits=True)
def tanh(x: np.ndarray, *, out: np.ndarray | None = None) -> np.ndarray:
    check_operands(x)
    return run_elementwise(lambda o, x, s: np.tanh(x, out=o), 0, out, x)


def _sigmoid_body64(o: np.ndarray, x: np.ndarray, s: list[np.ndarray]) -> None:
    e, m = s[0], s[1]
    np.abs(x, out=e)
    np.negative(e, out=e)
    np.greater_equal(x, 0.0, out=m)
    sigmoid_pair64(e, m, o, None)


def _sigmoid_body32(o: np.ndarray, x: np.ndarray, s: list[np.ndarray]) -> None:
    e = s[0]
    np.clip(x, -W32, W32, out=e)
    np.multiply(e, -LOG2E, out=e)
    np.exp2(e, out=e)
    np.add(e, 1.0, out=e)
    np.divide(1.0, e, out=o)


@act_kernel(SigmoidOp, 1, scalar="_sigmoid1")
def sigmoid(x: np.ndarray, *, out: np.ndarray | None = None) -> np.ndarray:
    """``1 / (1 + exp(-x))``."""
    dtype = check_operands(x)
    if dtype == np.float32:
        return run_elementwise(_sigmoid_body32, 1, out, x, fast=compiled(dtype, "sigmoid"))
    return run_elementwise(_sigmoid_body64, 2, out, x)


@act_kernel(LeakyReluOp, 1)
def leaky_relu(x: np.ndarray, *, out: np.ndarray | None = None, alpha: float = 0.01) -> np.ndarray:
    """``x`` if ``x > 0`` else ``alpha·x`` (for every alpha, signed zeros and NaN included):
    ``x·1`` or ``x·alpha``, exactly one of the two branches."""
    dtype = check_operands(x)
    alpha = check_alpha(alpha, "LeakyRelu")
    body = leaky_body(alpha)

    def body1(o: np.ndarray, x: np.ndarray, s: list[np.ndarray]) -> None:
        body(o, x, x, s)

    return run_elementwise(body1, 2, out, x, fast=compiled(dtype, "leaky_relu"), fast_args=f32_args(dtype, alpha))


@act_kernel(QuickGeluOp, 1)
def quick_gelu(x: np.ndarray, *, out: np.ndarray | None = None, alpha: float = 1.702) -> np.ndarray:
    """``x ⊙ σ(alpha·x)``."""
    dtype = check_operands(x)
    alpha = check_alpha(alpha, "QuickGelu")
    if dtype == np.float32:
        bound = quick_gelu_bound(alpha)
        zero_side = np.maximum if alpha > 0.0 else np.minimum

        def body32(o: np.ndarray, x: np.ndarray, s: list[np.ndarray]) -> None:
            z, e = s[0], s[1]
            quick_gelu_e32(x, alpha, z, None, e)
            np.add(e, 1.0, out=e)
            # x / (1 + exp(-alpha x)); x clipped on the side where σ saturates to 0 (so even
            # x = -1e38 gives a tiny result), kept where σ saturates to 1
            zero_side(x, -bound if alpha > 0.0 else bound, out=z)
            np.divide(z, e, out=o)

        return run_elementwise(body32, 2, out, x, fast=compiled(dtype, "quick_gelu"),
                            fast_args=f32_args(dtype, -alpha * LOG2E, bound, -bound if alpha > 0.0 else bound))

    def body64(o: np.ndarray, x: np.ndarray, s: list[np.ndarray]) -> None:
        v, sig, _ = quick_gelu_sig64(x, alpha, s, False)
        if alpha != 0.0:  # x clipped where σ is exactly 0, so x = ∓inf gives 0, not NaN
            bound = XCLIP / abs(alpha)
            (np.maximum if alpha > 0.0 else np.minimum)(x, -bound if alpha > 0.0 else bound, out=v)
            x = v
        np.multiply(x, sig, out=o)

    return run_elementwise(body64, 8, out, x)


@act_kernel(GeluOp, 1, scalar="_gelu1")
def gelu(x: np.ndarray, *, out: np.ndarray | None = None) -> np.ndarray:
    """``x ⊙ Φ(x)``, the exact (erf) GELU."""
    dtype = check_operands(x)

    def body(o: np.ndarray, x: np.ndarray, s: list[np.ndarray]) -> None:
        p, m, z = gelu_h(x, s, False)
        mirror(p, m, s[4])  # Φ(x)
        np.maximum(x, z, out=z)  # x, but clipped on the saturated-to-0 side
        np.multiply(z, p, out=o)

    return run_elementwise(body, n_gelu_scratch(dtype), out, x, fast=compiled(dtype, "gelu"))


@act_kernel(FastGeluOp, 1, scalar="_fast_gelu1")
def fast_gelu(x: np.ndarray, *, out: np.ndarray | None = None) -> np.ndarray:
    """``½x(1 + tanh(k(x + c x³)))`` = ``x ⊙ σ(2k(x + c x³))``."""
    dtype = check_operands(x)
    if dtype == np.float32:
        def body32(o: np.ndarray, x: np.ndarray, s: list[np.ndarray]) -> None:
            z, e = s[0], s[2]
            fast_gelu_e32(x, z, s[1], e)
            np.add(e, 1.0, out=e)
            np.maximum(x, -X32_FAST, out=z)  # clipped on the saturated-to-0 side only
            np.divide(z, e, out=o)  # x / (1 + exp(-w))

        return run_elementwise(body32, 3, out, x, fast=compiled(dtype, "fast_gelu"))

    def body64(o: np.ndarray, x: np.ndarray, s: list[np.ndarray]) -> None:
        sig, _, _ = fast_gelu_sig64(x, s, False)
        np.multiply(x, sig, out=o)

    return run_elementwise(body64, 4, out, x)


def _softmax_body(o: np.ndarray, x: np.ndarray, big: list[np.ndarray], red: np.ndarray) -> None:
    p = big[0]
    np.maximum.reduce(x, axis=1, keepdims=True, out=red)
    np.subtract(x, red, out=p)
    np.exp(p, out=p)
    np.add.reduce(p, axis=1, keepdims=True, out=red)
    np.divide(p, red, out=o)


def _log_softmax_body(o: np.ndarray, x: np.ndarray, big: list[np.ndarray], red: np.ndarray) -> None:
    p, q = big[0], big[1]
    np.maximum.reduce(x, axis=1, keepdims=True, out=red)
    np.subtract(x, red, out=p)
    np.exp(p, out=q)
    np.add.reduce(q, axis=1, keepdims=True, out=red)
    np.log(red, out=red)
    np.subtract(p, red, out=o)


@act_kernel(SoftmaxOp, 1)
def softmax(x: np.ndarray, *, out: np.ndarray | None = None, axis: int = -1) -> np.ndarray:
    """``exp(x - max) / Σ exp(x - max)`` over the single axis ``axis``."""
    dtype = check_operands(x)
    return run_rows(_softmax_body, 1, out, (x,), axis, False, "Softmax",
                 compiled(dtype, "softmax_rows"))


@act_kernel(LogSoftmaxOp, 1)
def log_softmax(x: np.ndarray, *, out: np.ndarray | None = None, axis: int = -1) -> np.ndarray:
    """``(x - max) - log Σ exp(x - max)`` over the single axis ``axis``."""
    dtype = check_operands(x)
    return run_rows(_log_softmax_body, 2, out, (x,), axis, False, "LogSoftmax",
                 compiled(dtype, "log_softmax_rows"))
