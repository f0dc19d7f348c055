"""Compiled Float32 activation kernels (see ``gradir.kernels.jit``).

Each function is one fused loop computing exactly the formula of the NumPy Float32
path in ``activation.py`` (same clips, same ``exp2`` arguments, same order of
operations where it matters), element by element, vectorized and without the GIL.
Element-wise kernels take same-length 1-D arrays ``(o, *operands, *scalars)``;
``o`` may be an operand.  Row kernels take 2-D ``[rows, n]`` arrays and reduce each
row in float64, in one fixed order.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from ._jit_core import ELEMENTWISE, INLINE, LOG2E, REDUCTION, clamp32, exp2_32, f32_as_i32, i32_as_f32

_F = np.float32
_ZERO = _F(0.0)
_ONE = _F(1.0)
_TWO = _F(2.0)

# the constants of activation.py, rounded to float32 exactly as NumPy does when a Python
# float meets a float32 array
_K = math.sqrt(2.0 / math.pi)
_C = 0.044715
_L2E = _F(LOG2E)
_NL2E = _F(-LOG2E)
_W32 = _F(80.0)
_X32_FAST = _F(9.5)
_A32_GELU = _F(12.5)
_GELU_E = _F(-0.5 * LOG2E)
_R_P = _F(0.25)
_INV_SQRT_2PI = _F(1.0 / math.sqrt(2.0 * math.pi))
_R_Q = (0.09979283517084202, 0.09859322172959288, 0.10321823605310673, 0.034940268503068826,
        0.19713730830782333, -0.19921763532212042, 0.29047261074616004, -0.15011195044822198,
        0.025175074081542743)
_Q0, _Q1, _Q2, _Q3, _Q4, _Q5, _Q6, _Q7, _Q8 = (_F(q) for q in _R_Q)
_FG_E2 = _F(-2.0 * _K * _C * LOG2E)
_FG_E1 = _F(-2.0 * _K * LOG2E)
_FG_V2 = _F(6.0 * _K * _C)
_FG_V1 = _F(2.0 * _K)


# -- shared pieces -----------------------------------------------------------------------------


@njit(**INLINE)
def _sig_grad(e, v):  # type: ignore[no-untyped-def]
    """``σ(w)(1 + v σ(-w))`` from ``e = exp(-w)``: ``((1 + e) + e v) / (1 + e)²`` (as in
    ``activation._sig_grad_from_e32``)."""
    t = v * e
    e1 = e + _ONE
    t = t + e1
    r = _ONE / e1
    return (t * r) * r


@njit(**INLINE)
def _gelu_p(x, want_h):  # type: ignore[no-untyped-def]
    """``(p, m, z)``: ``z = clip(x)``, ``m = [z >= 0]``, ``p = h(|z|)`` or ``Φ(-|z|)``."""
    z = clamp32(x, -_A32_GELU, _A32_GELU)
    a = abs(z)
    e = exp2_32((a * a) * _GELU_E)
    t = _ONE / (a * _R_P + _ONE)
    r = t * _Q8 + _Q7
    r = r * t + _Q6
    r = r * t + _Q5
    r = r * t + _Q4
    r = r * t + _Q3
    r = r * t + _Q2
    r = r * t + _Q1
    r = r * t + _Q0
    r = r * t
    if want_h:
        r = r - a * _INV_SQRT_2PI
    r = r * e
    m = _ONE if z >= _ZERO else _ZERO
    return r, m, z


@njit(**INLINE)
def _mirror(p, m):  # type: ignore[no-untyped-def]
    return p + (p * -_TWO + _ONE) * m


@njit(**INLINE)
def _fast_gelu_e(x):  # type: ignore[no-untyped-def]
    z = clamp32(x, -_X32_FAST, _X32_FAST)
    q = z * z
    e = exp2_32((q * _FG_E2 + _FG_E1) * z)
    return z, q, e


# -- gradient kernels --------------------------------------------------------------------------


@njit(**ELEMENTWISE)
def relu_grad(o, dy, x):  # type: ignore[no-untyped-def]
    for i in range(o.size):
        d = dy[i]
        xi = x[i]
        mask = np.int32(-np.int32(xi > _ZERO))
        o[i] = i32_as_f32(np.int32(f32_as_i32(d) & mask))


@njit(**ELEMENTWISE)
def sigmoid_grad(o, dy, y):  # type: ignore[no-untyped-def]
    for i in range(o.size):
        d = dy[i]
        yi = y[i]
        o[i] = (d * yi) * (_ONE - yi)


@njit(**ELEMENTWISE)
def tanh_grad(o, dy, y):  # type: ignore[no-untyped-def]
    for i in range(o.size):
        d = dy[i]
        yi = y[i]
        o[i] = d * (_ONE - yi * yi)


@njit(**ELEMENTWISE)
def leaky_relu_grad(o, dy, y, alpha):  # type: ignore[no-untyped-def]
    for i in range(o.size):
        d = dy[i]
        yi = y[i]
        o[i] = d * (_ONE if yi > _ZERO else alpha)


@njit(**ELEMENTWISE)
def quick_gelu_grad(o, dy, x, alpha, bound):  # type: ignore[no-untyped-def]
    for i in range(o.size):
        d = dy[i]
        v = clamp32(x[i], -bound, bound) * alpha
        e = exp2_32(v * _NL2E)
        o[i] = d * _sig_grad(e, v)


@njit(**ELEMENTWISE)
def gelu_grad(o, dy, x):  # type: ignore[no-untyped-def]
    for i in range(o.size):
        d = dy[i]
        h, m, z = _gelu_p(x[i], True)
        o[i] = d * _mirror(h, m)


@njit(**ELEMENTWISE)
def fast_gelu_grad(o, dy, x):  # type: ignore[no-untyped-def]
    for i in range(o.size):
        d = dy[i]
        z, q, e = _fast_gelu_e(x[i])
        v = (q * _FG_V2 + _FG_V1) * z
        o[i] = d * _sig_grad(e, v)


# Row sums: the only code compiled with ``reassoc`` (so they vectorize), kept in functions of
# their own so the flag cannot reorder the element-wise arithmetic around them.


@njit(**REDUCTION)
def _dot_row(a, b):  # type: ignore[no-untyped-def]
    acc = 0.0
    for j in range(a.size):
        acc += np.float64(a[j]) * np.float64(b[j])
    return acc


@njit(**REDUCTION)
def _sum_row(a):  # type: ignore[no-untyped-def]
    acc = 0.0
    for j in range(a.size):
        acc += np.float64(a[j])
    return acc


@njit(**REDUCTION)
def _sum_exp_row(x, m):  # type: ignore[no-untyped-def]
    acc = 0.0
    for j in range(x.size):
        acc += np.float64(exp2_32((x[j] - m) * _L2E))
    return acc


@njit(**ELEMENTWISE)
def _max_row(x):  # type: ignore[no-untyped-def]
    m = x[0]
    for j in range(1, x.size):
        xj = x[j]
        m = xj if xj > m else m
    return m


@njit(**ELEMENTWISE)
def softmax_grad_rows(o, dy, y):  # type: ignore[no-untyped-def]
    for r in range(o.shape[0]):
        s = _F(_dot_row(y[r], dy[r]))
        for j in range(o.shape[1]):
            d = dy[r, j]
            yj = y[r, j]
            o[r, j] = (d - s) * yj


@njit(**ELEMENTWISE)
def log_softmax_grad_rows(o, dy, y):  # type: ignore[no-untyped-def]
    for r in range(o.shape[0]):
        s = _F(_sum_row(dy[r]))
        for j in range(o.shape[1]):
            d = dy[r, j]
            yj = y[r, j]
            o[r, j] = d - exp2_32(yj * _L2E) * s


# -- forward kernels ---------------------------------------------------------------------------


@njit(**ELEMENTWISE)
def sigmoid(o, x):  # type: ignore[no-untyped-def]
    for i in range(o.size):
        e = exp2_32(clamp32(x[i], -_W32, _W32) * _NL2E)
        o[i] = _ONE / (e + _ONE)


@njit(**ELEMENTWISE)
def leaky_relu(o, x, alpha):  # type: ignore[no-untyped-def]
    """``max(x, alpha x)`` for alpha <= 1, ``min(x, alpha x)`` above (as the NumPy path)."""
    big = alpha > _ONE
    for i in range(o.size):
        xi = x[i]
        ax = xi * alpha
        if big:
            o[i] = ax if ax < xi else xi
        else:
            o[i] = ax if ax > xi else xi


@njit(**ELEMENTWISE)
def quick_gelu(o, x, nal2e, bound, keep):  # type: ignore[no-untyped-def]
    """``keep``: x is clipped only on the side where σ saturates to 0 (``-bound`` for
    alpha > 0, ``+bound`` for alpha < 0; the caller passes it)."""
    pos = keep < _ZERO
    for i in range(o.size):
        xi = x[i]
        e = exp2_32(clamp32(xi, -bound, bound) * nal2e) + _ONE
        if pos:
            z = keep if xi < keep else xi  # np.maximum(x, -bound)
        else:
            z = keep if xi > keep else xi  # np.minimum(x, bound)
        o[i] = z / e


@njit(**ELEMENTWISE)
def gelu(o, x):  # type: ignore[no-untyped-def]
    for i in range(o.size):
        xi = x[i]
        p, m, z = _gelu_p(xi, False)
        p = _mirror(p, m)
        o[i] = (z if z > xi else xi) * p


@njit(**ELEMENTWISE)
def fast_gelu(o, x):  # type: ignore[no-untyped-def]
    for i in range(o.size):
        xi = x[i]
        z, q, e = _fast_gelu_e(xi)
        e = e + _ONE
        z = -_X32_FAST if xi < -_X32_FAST else xi
        o[i] = z / e


@njit(**ELEMENTWISE)
def softmax_rows(o, x):  # type: ignore[no-untyped-def]
    for r in range(o.shape[0]):
        m = _max_row(x[r])
        for j in range(o.shape[1]):
            p = exp2_32((x[r, j] - m) * _L2E)
            o[r, j] = p
        s = _F(_sum_row(o[r]))
        for j in range(o.shape[1]):
            o[r, j] = o[r, j] / s


@njit(**ELEMENTWISE)
def log_softmax_rows(o, x):  # type: ignore[no-untyped-def]
    for r in range(o.shape[0]):
        m = _max_row(x[r])
        ls = _F(math.log(_sum_exp_row(x[r], m)))
        for j in range(o.shape[1]):
            o[r, j] = (x[r, j] - m) - ls
