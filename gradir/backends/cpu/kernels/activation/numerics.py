"""The numerics the activation kernels share (see the package's docstring): exact-in-the-tails
sigmoids and Dekker products for Float64, clipped ``exp2`` forms for Float32, the GELU family's
pieces, and the constants the compiled kernels (``_jit_act.py``) repeat."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

GELU_K = math.sqrt(2.0 / math.pi)  # FastGelu: u = k (x + c x^3)
GELU_C = 0.044715
INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
SQRT1_2 = math.sqrt(0.5)
LOG2E = 1.0 / math.log(2.0)
XCLIP = 1.0e4  # float64: beyond this every function here has saturated exactly (exp(-1e4) = 0)
DEKKER = 134217729.0  # 2**27 + 1, Veltkamp's splitting constant for float64

# Float32 clips (see the module docstring): beyond them the functions are within ~1e-31 of
# their limits, and every intermediate stays a finite normal float32.
F32_MAX = float(np.finfo(np.float32).max)
W32 = 80.0  # |w| for plain sigmoids: e^80 (1 + 80) = 4.5e36 < 3.4e38, 1/(1 + e^80) = 1.8e-35
X32_FAST = 9.5  # FastGelu: |w(9.5)| = 76.3, e^76.3 (1 + |v(9.5)|) = 2.8e35
A32_GELU = 12.5  # exp(-12.5²/2) = 1.2e-34, Φ(-12.5) = 3.7e-36

# R(a) = erfcx(a/√2)/2 ~= t Q(t), t = 1/(1 + R_P a), Q fitted (weighted least squares with
# Lawson iterations) on a in [0, 14.5]; relative error 6e-8 in float64 arithmetic.
R_P = 0.25
R_Q = (0.09979283517084202, 0.09859322172959288, 0.10321823605310673, 0.034940268503068826,
        0.19713730830782333, -0.19921763532212042, 0.29047261074616004, -0.15011195044822198,
        0.025175074081542743)  # ascending powers of t


def quick_gelu_bound(alpha: float) -> float:
    """|x| beyond which σ(alpha·x) saturates in Float32 (``|alpha·x| = W32``), at most
    float32's largest value so that clipping always gives a finite x."""
    return min(W32 / abs(alpha), F32_MAX) if alpha != 0.0 else np.inf


# -- float64 numerics ------------------------------------------------------------------------


def sigmoid_pair64(e: np.ndarray, m: np.ndarray, s_out: np.ndarray, c: np.ndarray | None,
                    corr: np.ndarray | None = None) -> None:
    """``σ(w)`` into ``s_out`` and ``σ(-w)`` into ``c`` (if given), from ``e = -|w|`` and
    ``m = [w >= 0]`` (0/1 floats); consumes ``e`` and ``m`` (``s_out`` may be ``m``).

    ``corr``, if given, multiplies ``exp(-|w|)`` (first-order correction for the rounding
    error of ``w``).  ``exp`` only sees arguments <= 0; each result is ``1/(1+e)`` or
    ``e/(1+e)``, so both keep full relative accuracy in the tails and underflow exactly.
    """
    np.exp(e, out=e)
    if corr is not None:
        np.multiply(e, corr, out=e)
    if c is not None:
        np.subtract(1.0, m, out=c)  # [w < 0]
        np.maximum(e, c, out=c)  # 1 if w < 0 else e
    np.maximum(e, m, out=m)  # 1 if w >= 0 else e
    np.add(e, 1.0, out=e)
    np.divide(m, e, out=s_out)
    if c is not None:
        np.divide(c, e, out=c)


def split(x: np.ndarray, hi: np.ndarray, lo: np.ndarray) -> None:
    """Veltkamp split ``x = hi + lo`` into 26-bit halves (float64, |x| < 1e300)."""
    np.multiply(x, DEKKER, out=hi)
    np.subtract(hi, x, out=lo)
    np.subtract(hi, lo, out=hi)
    np.subtract(x, hi, out=lo)


def split_scalar(a: float) -> tuple[float, float]:
    t = DEKKER * a
    hi = t - (t - a)
    return hi, a - hi


def exp_correction_prod(x: np.ndarray, alpha: float, v: np.ndarray, m: np.ndarray,
                         corr: np.ndarray, t1: np.ndarray, t2: np.ndarray,
                         t3: np.ndarray) -> None:
    """``corr`` such that ``exp(-|alpha*x|) = exp(-|v|) * corr`` to double precision, where
    ``v = fl(alpha*x)`` and ``m = [v >= 0]`` (0/1 floats); float64, |x| < 1e300.

    Dekker's exact product gives ``err = alpha*x - v``; then ``-|alpha*x| = -|v| - sign(v)*err``
    and ``exp(-sign(v)*err) = 1 - sign(v)*err`` to first order (``|err| < 1e-13`` wherever
    ``exp(-|v|)`` is not 0).
    """
    ah, al = split_scalar(alpha)
    split(x, t1, t2)  # t1 = xh, t2 = xl
    np.multiply(t1, ah, out=corr)
    np.subtract(corr, v, out=corr)
    np.multiply(t2, ah, out=t3)
    np.add(corr, t3, out=corr)
    np.multiply(t1, al, out=t3)
    np.add(corr, t3, out=corr)
    np.multiply(t2, al, out=t3)
    np.add(corr, t3, out=corr)  # corr = err, exactly
    np.multiply(m, -2.0, out=t3)
    np.add(t3, 1.0, out=t3)  # -sign(v)
    np.multiply(corr, t3, out=corr)
    np.add(corr, 1.0, out=corr)


def exp_half_square64(a: np.ndarray, e: np.ndarray, t1: np.ndarray, t2: np.ndarray,
                       t3: np.ndarray) -> None:
    """``e = exp(-a²/2)`` (float64, ``0 <= a <= XCLIP``) with the rounding error of ``a²``
    carried: ``a² = hi + lo`` exactly (Dekker), ``exp(-(hi + lo)/2) = exp(-hi/2)(1 - lo/2)``."""
    np.multiply(a, a, out=e)
    split(a, t1, t2)  # a = ah + al
    np.multiply(t1, t1, out=t3)
    np.subtract(t3, e, out=t3)  # ah*ah - hi
    np.multiply(t1, t2, out=t1)
    np.multiply(t1, 2.0, out=t1)
    np.add(t3, t1, out=t3)
    np.multiply(t2, t2, out=t2)
    np.add(t3, t2, out=t3)  # lo = a*a - hi, exactly
    np.multiply(t3, -0.5, out=t3)
    np.add(t3, 1.0, out=t3)
    np.multiply(e, -0.5, out=e)
    np.exp(e, out=e)
    np.multiply(e, t3, out=e)


# -- shared pieces of the GELU family -----------------------------------------------------------


def gelu_h(x: np.ndarray, s: list[np.ndarray], want_h: bool
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Returns views ``(p, m, z)`` into ``s``: ``z = clip(x, ±bound)``, ``m = [z >= 0]`` and
    ``p = h(|z|) = Φ(-a) - a φ(a)`` (``want_h``) or ``p = Φ(-a)`` (otherwise), ``a = |z|``.

    Then ``Φ(x) = p + m(1 - 2p)`` and ``Φ(x) + x φ(x) = h + m(1 - 2h)``: the ``x < 0``
    branch is ``p`` itself (no subtraction, full relative accuracy in the left tail) and both
    are continuous at 0, so ``-0.0`` needs no care.  ``Φ(-a) = e R(a)``, ``e = exp(-a²/2)``.
    """
    z, a, e, r, t = s[0], s[1], s[2], s[3], s[4]
    if x.dtype == np.float64:
        np.clip(x, -XCLIP, XCLIP, out=z)
        np.abs(z, out=a)
        exp_half_square64(a, e, t, s[5], s[6])
        np.multiply(a, SQRT1_2, out=r)
        from scipy.special import erfcx  # imported on first use: scipy.special takes ~0.3 s
        erfcx(r, out=r)
        np.multiply(r, 0.5, out=r)  # R(a)
    else:
        np.clip(x, -A32_GELU, A32_GELU, out=z)
        np.abs(z, out=a)
        np.square(a, out=e)
        np.multiply(e, -0.5 * LOG2E, out=e)
        np.exp2(e, out=e)  # exp(-a²/2)
        np.multiply(a, R_P, out=t)
        np.add(t, 1.0, out=t)
        np.divide(1.0, t, out=t)  # t = 1/(1 + a/4)
        q = R_Q
        np.multiply(t, q[-1], out=r)
        np.add(r, q[-2], out=r)
        for coef in q[-3::-1]:
            np.multiply(r, t, out=r)
            np.add(r, coef, out=r)
        np.multiply(r, t, out=r)  # R(a)
    if want_h:
        np.multiply(a, INV_SQRT_2PI, out=a)
        np.subtract(r, a, out=r)  # R - a/√(2π)
    np.multiply(r, e, out=r)
    np.greater_equal(z, 0.0, out=a)
    return r, a, z


def mirror(p: np.ndarray, m: np.ndarray, t: np.ndarray) -> None:
    """``p <- p + m(1 - 2p)``: ``p`` where ``m = 0``, ``1 - p`` where ``m = 1``."""
    np.multiply(p, -2.0, out=t)
    np.add(t, 1.0, out=t)
    np.multiply(t, m, out=t)
    np.add(p, t, out=p)


def n_gelu_scratch(dtype: np.dtype) -> int:
    return 7 if dtype == np.float64 else 5


def quick_gelu_sig64(x: np.ndarray, alpha: float, s: list[np.ndarray], need_c: bool
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Float64: views ``(v, σ(v), σ(-v))`` into ``s[0..3]`` for ``v = alpha·x`` (``x``
    clipped where σ has saturated exactly), the exp argument's rounding carried."""
    v, e, m, c = s[0], s[1], s[2], s[3]
    if alpha != 0.0:
        bound = XCLIP / abs(alpha)
        np.clip(x, -bound, bound, out=c)
        xc = c
    else:
        xc = x
    np.multiply(xc, alpha, out=v)
    np.abs(v, out=e)
    np.negative(e, out=e)
    np.greater_equal(v, 0.0, out=m)
    corr = None
    if alpha != 0.0:
        corr = s[4]
        exp_correction_prod(xc, alpha, v, m, corr, s[5], s[6], s[7])
    sigmoid_pair64(e, m, m, c if need_c else None, corr)
    return v, m, c


def quick_gelu_e32(x: np.ndarray, alpha: float, z: np.ndarray, v: np.ndarray | None,
                    e: np.ndarray) -> np.ndarray:
    """Float32: ``e = exp(-v)`` for ``v = alpha·clip(x)`` with ``|v| <= W32``; ``v`` into
    ``v`` if given.  Returns the clipped ``x`` (``z``, or ``x`` itself when alpha is 0)."""
    if alpha != 0.0:
        bound = quick_gelu_bound(alpha)
        np.clip(x, -bound, bound, out=z)
        x = z
    if v is not None:
        np.multiply(x, alpha, out=v)
        np.multiply(v, -LOG2E, out=e)
    else:
        np.multiply(x, -alpha * LOG2E, out=e)
    np.exp2(e, out=e)
    return x


def fast_gelu_e32(x: np.ndarray, z: np.ndarray, q: np.ndarray, e: np.ndarray) -> None:
    """Float32 FastGelu: ``z = clip(x, ±X32_FAST)``, ``q = z²``, ``e = exp(-w)`` for
    ``w = 2k z (1 + c z²)`` (``|w| <= 76.3``)."""
    np.clip(x, -X32_FAST, X32_FAST, out=z)
    np.square(z, out=q)
    np.multiply(q, -2.0 * GELU_K * GELU_C * LOG2E, out=e)
    np.add(e, -2.0 * GELU_K * LOG2E, out=e)
    np.multiply(e, z, out=e)
    np.exp2(e, out=e)


def sig_grad_from_e32(e: np.ndarray, t: np.ndarray) -> None:
    """Float32: given ``e = exp(-w)`` and ``t = v``, leave ``σ(w)(1 + v σ(-w))`` in ``t``.

    ``σ(w)(1 + v σ(-w)) = ((1 + e) + e v) s²`` with ``s = 1/(1 + e)``: four array*array
    passes instead of six, no overflow for ``|w|, |v| <= 80``.  Consumes ``e``.
    """
    np.multiply(t, e, out=t)
    np.add(e, 1.0, out=e)
    np.add(t, e, out=t)
    np.divide(1.0, e, out=e)
    np.multiply(t, e, out=t)
    np.multiply(t, e, out=t)


def fast_gelu_sig64(x: np.ndarray, s: list[np.ndarray], need_v: bool
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Float64 FastGelu: views ``(σ(w), σ(-w), v = x w')`` into ``s[0..3]`` for
    ``w = 2k(x + c x³)``, ``v = 2k x (1 + 3c x²)``.

    ``½(1 + tanh(u)) = σ(2u)`` and ``1 - tanh(u)² = 4 σ(2u) σ(-2u)``, so the tanh form's
    cancellations (``1 + t`` for x << 0, ``1 - t²`` for |x| >> 0) never happen.
    """
    xc, q, e, m = s[0], s[1], s[2], s[3]
    np.clip(x, -XCLIP, XCLIP, out=xc)
    np.multiply(xc, xc, out=q)
    np.multiply(q, GELU_C, out=q)  # c x²
    np.abs(xc, out=m)
    np.multiply(m, -2.0 * GELU_K, out=m)
    np.add(q, 1.0, out=e)
    np.multiply(e, m, out=e)  # -|w| = -2k |x| (1 + c x²)
    if need_v:
        np.multiply(q, 3.0, out=q)
        np.add(q, 1.0, out=q)
        np.multiply(q, xc, out=q)
        np.multiply(q, 2.0 * GELU_K, out=q)  # v
    np.greater_equal(xc, 0.0, out=m)  # [w >= 0]
    sigmoid_pair64(e, m, m, xc if need_v else None)
    return m, xc, q


def leaky_body(alpha: float) -> Callable[..., None]:
    """``o = v·1`` where ``y > 0``, else ``v·alpha`` (also for ``y = ±0`` and NaN): exactly
    one of the two branches, for LeakyReluGrad (``v = dY``) and LeakyRelu (``v = y = x``)."""

    def body(o: np.ndarray, v: np.ndarray, y: np.ndarray, s: list[np.ndarray]) -> None:
        sc = s[0]  # exactly 1 where y > 0, else exactly alpha (alpha is finite)
        np.greater(y, 0.0, out=sc)
        if 0.0 <= alpha <= 1.0:
            np.maximum(sc, alpha, out=sc)
        else:
            np.subtract(1.0, sc, out=s[1])
            np.multiply(s[1], alpha, out=s[1])
            np.add(sc, s[1], out=sc)
        np.multiply(v, sc, out=o)

    return body
