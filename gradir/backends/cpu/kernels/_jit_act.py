"""Compiled Float32 activation kernels (see ``gradir.backends.cpu.kernels.jit``).

Each kernel is one fused loop computing the formula of the NumPy Float32 path in
``activation/`` (same clips, same ``exp2`` arguments, same order of operations where
it matters), element by element, vectorized and without the GIL.  Element-wise kernels
take same-length 1-D arrays ``(o, *operands, *scalars)``; row kernels take 2-D
``[rows, n]`` arrays and reduce each row in float64, in one fixed order.

``o`` may be an operand (the runtime writes in place).  LLVM vectorizes a loop whose
output may overlap its inputs only behind a run-time overlap check, which fails in place
and drops to scalar code (3-7x slower for the GELUs).  So each kernel runs the plain loop
when ``o`` is apart from its operands and, in place, computes a tile (element-wise) or a
row (softmax gradients) into a private buffer and copies it out.  (Always going through
the private buffer was fine on one CPU (Intel, AVX-512) but 1.2-4x slower than the plain
loop on another (AMD Zen 3).)  The softmax forwards always compute each row into a
private buffer (they need its sum before writing).  An ``o`` that *partly* overlaps an
operand is never passed in (``activation.blocks``' ``run_elementwise``/``run_rows``
compute apart then).
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

# the constants of activation/numerics.py, rounded to float32 exactly as NumPy does when a Python
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


# -- element-wise kernels: a scalar function per op, run by a plain loop ----------------------

# Each kernel spells out its two loops (scripts/gen_jit_act.py writes them into this file): a
# factory (a closure over the scalar function) or source generated at import would make numba
# recompile every kernel in every process, since its disk cache keeps neither (measured:
# closures miss the cache in a new process).
TILE = 1024


@njit(**INLINE)
def _apart(o, a):  # type: ignore[no-untyped-def]
    """True when the memory of ``o`` and ``a`` does not overlap."""
    po = o.ctypes.data
    pa = a.ctypes.data
    return po + o.nbytes <= pa or pa + a.nbytes <= po


@njit(**INLINE)
def _relu_grad1(d, x):  # type: ignore[no-untyped-def]
    # dY where X > 0 else +0, bit for bit like ORT's select (also for inf/NaN dY)
    mask = np.int32(-np.int32(x > _ZERO))
    return i32_as_f32(np.int32(f32_as_i32(d) & mask))


@njit(**INLINE)
def _sigmoid_grad1(d, y):  # type: ignore[no-untyped-def]
    return (d * y) * (_ONE - y)


@njit(**INLINE)
def _tanh_grad1(d, y):  # type: ignore[no-untyped-def]
    return d * (_ONE - y * y)


@njit(**INLINE)
def _leaky_relu_grad1(d, y, alpha):  # type: ignore[no-untyped-def]
    return d * (_ONE if y > _ZERO else alpha)


@njit(**INLINE)
def _quick_gelu_grad1(d, x, alpha, bound):  # type: ignore[no-untyped-def]
    v = clamp32(x, -bound, bound) * alpha
    return d * _sig_grad(exp2_32(v * _NL2E), v)


@njit(**INLINE)
def _gelu_grad1(d, x):  # type: ignore[no-untyped-def]
    h, m, z = _gelu_p(x, True)
    return d * _mirror(h, m)


@njit(**INLINE)
def _fast_gelu_grad1(d, x):  # type: ignore[no-untyped-def]
    z, q, e = _fast_gelu_e(x)
    return d * _sig_grad(e, (q * _FG_V2 + _FG_V1) * z)


@njit(**INLINE)
def _sigmoid1(x):  # type: ignore[no-untyped-def]
    return _ONE / (exp2_32(clamp32(x, -_W32, _W32) * _NL2E) + _ONE)


@njit(**INLINE)
def _leaky_relu1(x, alpha):  # type: ignore[no-untyped-def]
    return x * (_ONE if x > _ZERO else alpha)  # x·1 or x·alpha: exactly one branch


@njit(**INLINE)
def _quick_gelu1(x, nal2e, bound, keep):  # type: ignore[no-untyped-def]
    # x clipped only on the side where σ saturates to 0: keep = -bound (alpha > 0) or +bound
    e = exp2_32(clamp32(x, -bound, bound) * nal2e) + _ONE
    if keep < _ZERO:
        z = keep if x < keep else x
    else:
        z = keep if x > keep else x
    return z / e


@njit(**INLINE)
def _gelu1(x):  # type: ignore[no-untyped-def]
    p, m, z = _gelu_p(x, False)
    return (z if z > x else x) * _mirror(p, m)


@njit(**INLINE)
def _fast_gelu1(x):  # type: ignore[no-untyped-def]
    z, q, e = _fast_gelu_e(x)
    return (-_X32_FAST if x < -_X32_FAST else x) / (e + _ONE)


# -- element-wise kernels: written by scripts/gen_jit_act.py from its KERNELS (do not edit) ---------


@njit(**ELEMENTWISE)
def relu_grad(o, dy, x):  # type: ignore[no-untyped-def]
    if _apart(o, dy) and _apart(o, x):
        for i in range(o.size):
            o[i] = _relu_grad1(dy[i], x[i])
        return
    tmp = np.empty(TILE, _F)  # in place: compute a tile privately, then copy it out
    for t0 in range(0, o.size, TILE):
        t1 = min(t0 + TILE, o.size)
        dy_, x_, o_ = dy[t0:t1], x[t0:t1], o[t0:t1]
        for k in range(t1 - t0):
            tmp[k] = _relu_grad1(dy_[k], x_[k])
        for k in range(t1 - t0):
            o_[k] = tmp[k]


@njit(**ELEMENTWISE)
def sigmoid_grad(o, dy, y):  # type: ignore[no-untyped-def]
    if _apart(o, dy) and _apart(o, y):
        for i in range(o.size):
            o[i] = _sigmoid_grad1(dy[i], y[i])
        return
    tmp = np.empty(TILE, _F)  # in place: compute a tile privately, then copy it out
    for t0 in range(0, o.size, TILE):
        t1 = min(t0 + TILE, o.size)
        dy_, y_, o_ = dy[t0:t1], y[t0:t1], o[t0:t1]
        for k in range(t1 - t0):
            tmp[k] = _sigmoid_grad1(dy_[k], y_[k])
        for k in range(t1 - t0):
            o_[k] = tmp[k]


@njit(**ELEMENTWISE)
def tanh_grad(o, dy, y):  # type: ignore[no-untyped-def]
    if _apart(o, dy) and _apart(o, y):
        for i in range(o.size):
            o[i] = _tanh_grad1(dy[i], y[i])
        return
    tmp = np.empty(TILE, _F)  # in place: compute a tile privately, then copy it out
    for t0 in range(0, o.size, TILE):
        t1 = min(t0 + TILE, o.size)
        dy_, y_, o_ = dy[t0:t1], y[t0:t1], o[t0:t1]
        for k in range(t1 - t0):
            tmp[k] = _tanh_grad1(dy_[k], y_[k])
        for k in range(t1 - t0):
            o_[k] = tmp[k]


@njit(**ELEMENTWISE)
def leaky_relu_grad(o, dy, y, alpha):  # type: ignore[no-untyped-def]
    if _apart(o, dy) and _apart(o, y):
        for i in range(o.size):
            o[i] = _leaky_relu_grad1(dy[i], y[i], alpha)
        return
    tmp = np.empty(TILE, _F)  # in place: compute a tile privately, then copy it out
    for t0 in range(0, o.size, TILE):
        t1 = min(t0 + TILE, o.size)
        dy_, y_, o_ = dy[t0:t1], y[t0:t1], o[t0:t1]
        for k in range(t1 - t0):
            tmp[k] = _leaky_relu_grad1(dy_[k], y_[k], alpha)
        for k in range(t1 - t0):
            o_[k] = tmp[k]


@njit(**ELEMENTWISE)
def quick_gelu_grad(o, dy, x, alpha, bound):  # type: ignore[no-untyped-def]
    if _apart(o, dy) and _apart(o, x):
        for i in range(o.size):
            o[i] = _quick_gelu_grad1(dy[i], x[i], alpha, bound)
        return
    tmp = np.empty(TILE, _F)  # in place: compute a tile privately, then copy it out
    for t0 in range(0, o.size, TILE):
        t1 = min(t0 + TILE, o.size)
        dy_, x_, o_ = dy[t0:t1], x[t0:t1], o[t0:t1]
        for k in range(t1 - t0):
            tmp[k] = _quick_gelu_grad1(dy_[k], x_[k], alpha, bound)
        for k in range(t1 - t0):
            o_[k] = tmp[k]


@njit(**ELEMENTWISE)
def gelu_grad(o, dy, x):  # type: ignore[no-untyped-def]
    if _apart(o, dy) and _apart(o, x):
        for i in range(o.size):
            o[i] = _gelu_grad1(dy[i], x[i])
        return
    tmp = np.empty(TILE, _F)  # in place: compute a tile privately, then copy it out
    for t0 in range(0, o.size, TILE):
        t1 = min(t0 + TILE, o.size)
        dy_, x_, o_ = dy[t0:t1], x[t0:t1], o[t0:t1]
        for k in range(t1 - t0):
            tmp[k] = _gelu_grad1(dy_[k], x_[k])
        for k in range(t1 - t0):
            o_[k] = tmp[k]


@njit(**ELEMENTWISE)
def fast_gelu_grad(o, dy, x):  # type: ignore[no-untyped-def]
    if _apart(o, dy) and _apart(o, x):
        for i in range(o.size):
            o[i] = _fast_gelu_grad1(dy[i], x[i])
        return
    tmp = np.empty(TILE, _F)  # in place: compute a tile privately, then copy it out
    for t0 in range(0, o.size, TILE):
        t1 = min(t0 + TILE, o.size)
        dy_, x_, o_ = dy[t0:t1], x[t0:t1], o[t0:t1]
        for k in range(t1 - t0):
            tmp[k] = _fast_gelu_grad1(dy_[k], x_[k])
        for k in range(t1 - t0):
            o_[k] = tmp[k]


@njit(**ELEMENTWISE)
def sigmoid(o, x):  # type: ignore[no-untyped-def]
    if _apart(o, x):
        for i in range(o.size):
            o[i] = _sigmoid1(x[i])
        return
    tmp = np.empty(TILE, _F)  # in place: compute a tile privately, then copy it out
    for t0 in range(0, o.size, TILE):
        t1 = min(t0 + TILE, o.size)
        x_, o_ = x[t0:t1], o[t0:t1]
        for k in range(t1 - t0):
            tmp[k] = _sigmoid1(x_[k])
        for k in range(t1 - t0):
            o_[k] = tmp[k]


@njit(**ELEMENTWISE)
def leaky_relu(o, x, alpha):  # type: ignore[no-untyped-def]
    if _apart(o, x):
        for i in range(o.size):
            o[i] = _leaky_relu1(x[i], alpha)
        return
    tmp = np.empty(TILE, _F)  # in place: compute a tile privately, then copy it out
    for t0 in range(0, o.size, TILE):
        t1 = min(t0 + TILE, o.size)
        x_, o_ = x[t0:t1], o[t0:t1]
        for k in range(t1 - t0):
            tmp[k] = _leaky_relu1(x_[k], alpha)
        for k in range(t1 - t0):
            o_[k] = tmp[k]


@njit(**ELEMENTWISE)
def quick_gelu(o, x, nal2e, bound, keep):  # type: ignore[no-untyped-def]
    if _apart(o, x):
        for i in range(o.size):
            o[i] = _quick_gelu1(x[i], nal2e, bound, keep)
        return
    tmp = np.empty(TILE, _F)  # in place: compute a tile privately, then copy it out
    for t0 in range(0, o.size, TILE):
        t1 = min(t0 + TILE, o.size)
        x_, o_ = x[t0:t1], o[t0:t1]
        for k in range(t1 - t0):
            tmp[k] = _quick_gelu1(x_[k], nal2e, bound, keep)
        for k in range(t1 - t0):
            o_[k] = tmp[k]


@njit(**ELEMENTWISE)
def gelu(o, x):  # type: ignore[no-untyped-def]
    if _apart(o, x):
        for i in range(o.size):
            o[i] = _gelu1(x[i])
        return
    tmp = np.empty(TILE, _F)  # in place: compute a tile privately, then copy it out
    for t0 in range(0, o.size, TILE):
        t1 = min(t0 + TILE, o.size)
        x_, o_ = x[t0:t1], o[t0:t1]
        for k in range(t1 - t0):
            tmp[k] = _gelu1(x_[k])
        for k in range(t1 - t0):
            o_[k] = tmp[k]


@njit(**ELEMENTWISE)
def fast_gelu(o, x):  # type: ignore[no-untyped-def]
    if _apart(o, x):
        for i in range(o.size):
            o[i] = _fast_gelu1(x[i])
        return
    tmp = np.empty(TILE, _F)  # in place: compute a tile privately, then copy it out
    for t0 in range(0, o.size, TILE):
        t1 = min(t0 + TILE, o.size)
        x_, o_ = x[t0:t1], o[t0:t1]
        for k in range(t1 - t0):
            tmp[k] = _fast_gelu1(x_[k])
        for k in range(t1 - t0):
            o_[k] = tmp[k]


# -- end of the written kernels ----------------------------------------------------------------


# -- row kernels (softmax families) ------------------------------------------------------------
# Row sums are the only code compiled with ``reassoc`` (so they vectorize), in functions of
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
def _sum_row_exp(x, m, tmp):  # type: ignore[no-untyped-def]
    """``Σ exp(x - m)``, leaving ``x - m`` in ``tmp``."""
    acc = 0.0
    for j in range(x.size):
        z = x[j] - m
        tmp[j] = z
        acc += np.float64(exp2_32(z * _L2E))
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
    n = o.shape[1]
    apart = _apart(o, dy) and _apart(o, y)
    tmp = np.empty(n if not apart else 0, _F)  # in place: a private row, then copied out
    for r in range(o.shape[0]):
        dr = dy[r]
        yr = y[r]
        orow = o[r]
        s = _F(_dot_row(yr, dr))
        if apart:
            for j in range(n):
                orow[j] = (dr[j] - s) * yr[j]
            continue
        for j in range(n):
            tmp[j] = (dr[j] - s) * yr[j]
        for j in range(n):
            orow[j] = tmp[j]


@njit(**ELEMENTWISE)
def log_softmax_grad_rows(o, dy, y):  # type: ignore[no-untyped-def]
    n = o.shape[1]
    apart = _apart(o, dy) and _apart(o, y)
    tmp = np.empty(n if not apart else 0, _F)  # in place: a private row, then copied out
    for r in range(o.shape[0]):
        dr = dy[r]
        yr = y[r]
        orow = o[r]
        s = _F(_sum_row(dr))
        if apart:
            for j in range(n):
                orow[j] = dr[j] - exp2_32(yr[j] * _L2E) * s
            continue
        for j in range(n):
            tmp[j] = dr[j] - exp2_32(yr[j] * _L2E) * s
        for j in range(n):
            orow[j] = tmp[j]


@njit(**ELEMENTWISE)
def softmax_rows(o, x):  # type: ignore[no-untyped-def]
    n = o.shape[1]
    tmp = np.empty(n, np.float32)
    for r in range(o.shape[0]):
        xr = x[r]
        m = _max_row(xr)
        for j in range(n):
            tmp[j] = exp2_32((xr[j] - m) * _L2E)
        s = _F(_sum_row(tmp))
        orow = o[r]
        for j in range(n):
            orow[j] = tmp[j] / s


@njit(**ELEMENTWISE)
def log_softmax_rows(o, x):  # type: ignore[no-untyped-def]
    n = o.shape[1]
    tmp = np.empty(n, np.float32)
    for r in range(o.shape[0]):
        xr = x[r]
        m = _max_row(xr)
        ls = _F(math.log(_sum_row_exp(xr, m, tmp)))
        orow = o[r]
        for j in range(n):
            orow[j] = tmp[j] - ls
