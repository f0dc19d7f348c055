"""NumPy kernels for the activation family: OPS.md §1 (ORT gradients) and §2 (forwards).

Every kernel keeps its operands' dtype (Float32 or Float64; a float32 result is never
computed through a float64 array) and follows the calling convention of
``gradir.kernels``: ``fn(*operands, out=None, **attrs)``, writing into ``out`` when given.

How the kernels are built (PERFORMANCE.md has the measurements behind each choice):

* **Blocks.**  Element-wise kernels walk the flat arrays in fixed blocks of
  ``BLOCK_BYTES`` per operand; every intermediate lives in a small per-thread scratch
  buffer that is reused from block to block, so a kernel reads its operands from memory
  once and writes its result once, however many NumPy passes it makes.  The softmax
  families use the same idea with whole rows per block.
* **Threads.**  The blocks are dealt to threads in contiguous runs by
  :func:`~gradir.kernels.parallel.parallel_rows`.  The block grid depends only on the
  array's shape and dtype, never on the thread count, and each block is computed the same
  way wherever it runs, so results are bit-identical for any thread count.
* **No selects.**  ``np.where``/``putmask``/``copyto(where=)`` are 10-15x slower than a
  streaming pass here.  Branches become arithmetic on exact 0/1 masks (``np.greater``
  written straight into a float buffer), bit masks (``ReluGrad``), or ``maximum`` tricks
  whose results are exactly one of the two branches.
* **In place.**  Every kernel registered ``inplace=True`` is correct when ``out`` *is*
  one of its operands: within a block each operand element is read before the element
  of ``out`` at the same position is written, or only through same-position ufuncs.
* **Numerics.**  Sigmoids are formed from ``e = exp(-|w|)`` (never overflows) as
  ``σ(w) = max(e, [w>=0]) / (1 + e)`` and ``σ(-w) = max(e, [w<0]) / (1 + e)``, both with
  full relative accuracy in the tails.  Arguments that could overflow a square or cube are
  clipped at ``_XCLIP`` first, where every function involved has long saturated.  In
  Float64 the argument of each ``exp`` is carried with its rounding error (an exact
  Dekker product), so the kernels stay within a few ulps of the exact value even where
  ``exp`` magnifies the argument's rounding (e.g. ``QuickGeluGrad`` at ``x = -100``).
  The exact GELU uses ``Φ(-a) = e^{-a²/2} R(a)`` with ``R(a) = erfcx(a/√2)/2``, which is
  smooth: Float64 takes ``R`` from ``scipy.special.erfcx``, Float32 from a degree-8
  polynomial in ``t = 1/(1 + a/4)`` (relative error < 4e-7 after float32 rounding).
"""

from __future__ import annotations

import math
import threading
from typing import Callable

import numpy as np
import scipy.special as _sc

from . import kernel
from .parallel import parallel_rows

__all__ = [
    "relu_grad", "sigmoid_grad", "tanh_grad", "leaky_relu_grad", "quick_gelu_grad", "gelu_grad",
    "fast_gelu_grad", "softmax_grad", "log_softmax_grad", "softmax_grad_13", "log_softmax_grad_13",
    "relu", "sigmoid", "tanh", "leaky_relu", "quick_gelu", "gelu", "fast_gelu", "softmax",
    "log_softmax", "BLOCK_BYTES",
]

#: Bytes per operand in one block.  Large enough that the per-ufunc call overhead (and the
#: GIL hand-over between the two workers) is small, small enough to stay in L2.
BLOCK_BYTES = 1 << 19

_K_FAST = math.sqrt(2.0 / math.pi)  # FastGelu: u = k (x + c x^3)
_C_FAST = 0.044715
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
_SQRT1_2 = math.sqrt(0.5)
_XCLIP = 1.0e4  # float64: |arguments| beyond this saturate everything here (exp(-1e4) == 0)
# float32 bounds: every exp argument stays in [-87, 87], so exp, 1 + exp and 1/(1 + exp) are
# finite *normal* floats (denormals make a ufunc ~17x slower here); beyond the bounds the
# functions have saturated to within < 1e-33 absolute.
_W32 = 87.0  # |w| bound for float32 sigmoids
_X32_FASTGELU = 9.9  # |w(9.9)| = 85.0 for FastGelu's w = 2k(x + c x^3)
_A32_GELU = 12.5  # exp(-12.5^2/2) = 1.2e-34 and Φ(-12.5) = 3.7e-36 are still normal
_DEKKER = 134217729.0  # 2**27 + 1, Veltkamp splitting constant for float64

# R(a) = erfcx(a/sqrt 2)/2 ~= t * Q(t), t = 1/(1 + _R_P a), fitted (weighted least squares,
# Lawson iterations) on a in [0, 14.5]; beyond that exp(-a^2/2) underflows in float32.
_R_P = 0.25
_R_Q = (0.09979283517084202, 0.09859322172959288, 0.10321823605310673, 0.034940268503068826,
        0.19713730830782333, -0.19921763532212042, 0.29047261074616004, -0.15011195044822198,
        0.025175074081542743)  # ascending powers of t


# -- infrastructure --------------------------------------------------------------------


class _ScratchCache(threading.local):
    def __init__(self) -> None:
        self.bufs: dict[str, np.ndarray] = {}


_tls = _ScratchCache()


def _scratch(dtype: np.dtype, k: int, n: int) -> list[np.ndarray]:
    """``k`` distinct 1-D scratch arrays of length ``n``, owned by the calling thread."""
    buf = _tls.bufs.get(dtype.char)
    if buf is None or buf.shape[0] < k or buf.shape[1] < n:
        rows = max(k, 0 if buf is None else buf.shape[0])
        cols = max(n, 0 if buf is None else buf.shape[1])
        buf = np.empty((rows, cols), dtype)
        _tls.bufs[dtype.char] = buf
    return [buf[j, :n] for j in range(k)]


def _block_elems(dtype: np.dtype) -> int:
    return max(1024, BLOCK_BYTES // dtype.itemsize)


def _prepare(operands: tuple[np.ndarray, ...], out: np.ndarray | None) -> np.ndarray:
    if out is None:
        out = np.empty(operands[0].shape, operands[0].dtype)
    return out


def _elementwise(body: Callable[..., None], n_scratch: int, out: np.ndarray | None,
                 *operands: np.ndarray) -> np.ndarray:
    """Run ``body(o, *operand_blocks, scratch)`` over fixed-size blocks of the flat arrays.

    ``o`` and the operand blocks are same-length 1-D views (``o`` may be the same memory
    as an operand block); ``scratch`` is a list of ``n_scratch`` private buffers of that
    length.
    """
    out = _prepare(operands, out)
    flat_ops = [np.ascontiguousarray(a).reshape(-1) for a in operands]
    flat_out = out.reshape(-1)
    n = flat_out.size
    if n == 0:
        return out
    dtype = flat_out.dtype
    block = _block_elems(dtype)
    n_blocks = -(-n // block)

    def run(b0: int, b1: int) -> None:
        scratch = _scratch(dtype, n_scratch, min(block, n))
        for b in range(b0, b1):
            lo = b * block
            hi = min(n, lo + block)
            s = scratch if hi - lo == block else [a[: hi - lo] for a in scratch]
            body(flat_out[lo:hi], *(a[lo:hi] for a in flat_ops), s)

    parallel_rows(n_blocks, block * dtype.itemsize * (len(operands) + 1), run)
    return out



def _check(*arrays: np.ndarray) -> np.dtype:
    dtype = arrays[0].dtype
    if dtype not in (np.float32, np.float64):
        raise TypeError(f"activation kernels take Float32 or Float64 operands, got {dtype}")
    for a in arrays[1:]:
        if a.dtype != dtype or a.shape != arrays[0].shape:
            raise ValueError(f"operands must share shape and dtype: {arrays[0].shape} {dtype} "
                             f"vs {a.shape} {a.dtype}")
    return dtype


def _sigmoid_pair(e: np.ndarray, m: np.ndarray, s_out: np.ndarray, c: np.ndarray | None,
                  corr: np.ndarray | None = None) -> None:
    """``σ(w)`` into ``s_out`` and ``σ(-w)`` into ``c`` (if given), from ``e = -|w|`` and
    ``m = [w >= 0]`` as 0/1 floats.

    ``e`` and ``m`` are consumed (``s_out`` may be ``m``).  ``corr``, if given, multiplies
    ``exp(-|w|)`` (a first-order correction for the rounding error of ``w``).  ``exp``
    only sees arguments <= 0, so nothing overflows; each result is one of ``1/(1+e)`` or
    ``e/(1+e)``, so both keep full relative accuracy in the tails.
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


def _sigmoid_pair32(nw: np.ndarray, s: np.ndarray, c: np.ndarray) -> None:
    """Float32: ``s = σ(w) = 1/(1 + exp(-w))`` and ``c = σ(-w) = exp(-w)·s`` from
    ``nw = -w`` already clipped to ``[-_W32, _W32]`` (nothing overflows or goes denormal;
    both results keep full relative accuracy)."""
    np.exp(nw, out=c)
    np.add(c, 1.0, out=s)
    np.reciprocal(s, out=s)
    np.multiply(c, s, out=c)


def _split(x: np.ndarray, hi: np.ndarray, lo: np.ndarray) -> None:
    """Float64: Veltkamp split ``x = hi + lo`` into 26-bit halves (needs |x| < 1e300)."""
    np.multiply(x, _DEKKER, out=hi)
    np.subtract(hi, x, out=lo)
    np.subtract(hi, lo, out=hi)
    np.subtract(x, hi, out=lo)


def _split_scalar(a: float) -> tuple[float, float]:
    t = _DEKKER * a
    hi = t - (t - a)
    return hi, a - hi


def _exp_correction_prod(x: np.ndarray, alpha: float, v: np.ndarray, m: np.ndarray,
                         corr: np.ndarray, t1: np.ndarray, t2: np.ndarray,
                         t3: np.ndarray) -> None:
    """Float64: ``corr`` such that ``exp(-|alpha*x|) = exp(-|v|) * corr`` to double
    precision, where ``v = fl(alpha*x)`` and ``m = [v >= 0]`` (0/1 floats).

    Dekker's exact product gives ``err = alpha*x - v``; ``-|alpha*x| = -|v| - sign(v)*err``
    and ``exp(-sign(v)*err) = 1 - sign(v)*err`` to first order (``|err| < 1e-13`` wherever
    ``exp(-|v|)`` is not 0).  Needs |x| < 1e300.
    """
    ah, al = _split_scalar(alpha)
    _split(x, t1, t2)  # t1 = xh, t2 = xl
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


def _exp_half_square(a: np.ndarray, e: np.ndarray, t1: np.ndarray | None,
                     t2: np.ndarray | None, t3: np.ndarray | None) -> None:
    """``e = exp(-a*a/2)`` for ``0 <= a <= _XCLIP``.

    Float64 (when ``t3`` is given) carries the rounding error of ``a*a`` (Dekker):
    ``exp(-(hi + lo)/2) = exp(-hi/2) * (1 - lo/2)``.  Float32 uses ``fl(a*a)``, whose error
    is that of perturbing ``a`` by half an ulp (the function's own conditioning).
    """
    np.multiply(a, a, out=e)
    if t1 is None or t2 is None or t3 is None:
        np.multiply(e, -0.5, out=e)
        np.exp(e, out=e)
        return
    _split(a, t1, t2)  # a = ah + al
    np.multiply(t1, t1, out=t3)
    np.subtract(t3, e, out=t3)  # ah*ah - hi
    np.multiply(t1, t2, out=t1)
    np.multiply(t1, 2.0, out=t1)
    np.add(t3, t1, out=t3)
    np.multiply(t2, t2, out=t2)
    np.add(t3, t2, out=t3)  # lo = a*a - hi exactly
    np.multiply(t3, -0.5, out=t3)
    np.add(t3, 1.0, out=t3)
    np.multiply(e, -0.5, out=e)
    np.exp(e, out=e)
    np.multiply(e, t3, out=e)


def _erfcx_half(a: np.ndarray, r: np.ndarray, t: np.ndarray) -> None:
    """``r = R(a) = erfcx(a/√2)/2 = Φ(-a)·exp(a²/2)`` for ``0 <= a <= _XCLIP`` (> 0)."""
    if r.dtype == np.float64:
        np.multiply(a, _SQRT1_2, out=r)
        _sc.erfcx(r, out=r)
        np.multiply(r, 0.5, out=r)
        return
    np.multiply(a, _R_P, out=t)
    np.add(t, 1.0, out=t)
    np.reciprocal(t, out=t)
    q = _R_Q
    np.multiply(t, q[-1], out=r)
    np.add(r, q[-2], out=r)
    for coef in q[-3::-1]:
        np.multiply(r, t, out=r)
        np.add(r, coef, out=r)
    np.multiply(r, t, out=r)


def _gelu_core(x: np.ndarray, s: list[np.ndarray]
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Shared part of Gelu/GeluGrad: returns views ``(m, e, sR, xc)`` into ``s[0..3]`` with
    ``xc = clip(x, ±bound)``, ``e = exp(-xc²/2)``, ``sR = copysign(R(|xc|), x)`` and
    ``m = [sR > 0]``, so that ``Φ(x) = m - e·sR`` and ``Φ(x) + x·φ(x) = m + e·(xc/√(2π) - sR)``.

    Both formulas take the branch from the sign bit (``m`` is read off ``sR``), so ``+0.0``
    and ``-0.0`` agree, and the ``x < 0`` branch never subtracts.  The bound is ``_XCLIP`` in
    float64 (``e`` is exactly 0 long before) and ``_A32_GELU`` in float32 (keeps ``e`` a
    normal float).  ``s[4]`` is free for the caller afterwards.
    """
    xc, a, e, r = s[0], s[1], s[2], s[3]
    f64 = x.dtype == np.float64
    bound = _XCLIP if f64 else _A32_GELU
    np.clip(x, -bound, bound, out=xc)
    np.abs(xc, out=a)
    _erfcx_half(a, r, s[4])
    if f64:
        _exp_half_square(a, e, s[4], s[5], s[6])
    else:
        _exp_half_square(a, e, None, None, None)
    np.copysign(r, x, out=r)
    np.greater(r, 0.0, out=a)
    return a, e, r, xc


def _n_gelu_scratch(dtype: np.dtype) -> int:
    return 7 if dtype == np.float64 else 5


# -- gradient kernels (OPS.md §1, ORT semantics) -------------------------------------


def _relu_grad_body(o: np.ndarray, dy: np.ndarray, x: np.ndarray, s: list[np.ndarray]) -> None:
    # dX = dY where X > 0 else +0, bit for bit like ORT's select (also for inf/NaN in dY):
    # an all-ones/all-zeros integer mask ANDed with dY's bits.
    itype = np.int32 if o.dtype == np.float32 else np.int64
    mask = s[0].view(itype)
    np.greater(x, 0.0, out=mask)
    np.negative(mask, out=mask)
    np.bitwise_and(dy.view(itype), mask, out=o.view(itype))


@kernel("ReluGrad", inplace=True)
def relu_grad(dy: np.ndarray, x: np.ndarray, *, out: np.ndarray | None = None) -> np.ndarray:
    """``dX = dY`` where ``X > 0`` (strict; NaN counts as not > 0), else ``+0``."""
    _check(dy, x)
    return _elementwise(_relu_grad_body, 1, out, dy, x)


def _sigmoid_grad_body(o: np.ndarray, dy: np.ndarray, y: np.ndarray, s: list[np.ndarray]) -> None:
    t = s[0]
    np.subtract(1.0, y, out=t)
    np.multiply(dy, y, out=o)  # ORT's order: (dY * Y) * (1 - Y)
    np.multiply(o, t, out=o)


@kernel("SigmoidGrad", inplace=True)
def sigmoid_grad(dy: np.ndarray, y: np.ndarray, *, out: np.ndarray | None = None) -> np.ndarray:
    """``dX = dY ⊙ Y ⊙ (1 - Y)`` from the forward output ``Y``."""
    _check(dy, y)
    return _elementwise(_sigmoid_grad_body, 1, out, dy, y)


def _tanh_grad_body(o: np.ndarray, dy: np.ndarray, y: np.ndarray, s: list[np.ndarray]) -> None:
    t = s[0]
    np.multiply(y, y, out=t)
    np.subtract(1.0, t, out=t)
    np.multiply(dy, t, out=o)


@kernel("TanhGrad", inplace=True)
def tanh_grad(dy: np.ndarray, y: np.ndarray, *, out: np.ndarray | None = None) -> np.ndarray:
    """``dX = dY ⊙ (1 - Y²)`` from the forward output ``Y``."""
    _check(dy, y)
    return _elementwise(_tanh_grad_body, 1, out, dy, y)


def _leaky_scale(y: np.ndarray, alpha: float, sc: np.ndarray, t: np.ndarray) -> None:
    """``sc`` = 1 where ``y > 0`` else ``alpha``, exactly (NaN counts as not > 0)."""
    np.greater(y, 0.0, out=sc)
    if 0.0 <= alpha <= 1.0:
        np.maximum(sc, alpha, out=sc)
    else:
        np.subtract(1.0, sc, out=t)
        np.multiply(t, alpha, out=t)  # exactly alpha or 0
        np.add(sc, t, out=sc)  # exactly 1 or alpha


@kernel("LeakyReluGrad", inplace=True)
def leaky_relu_grad(dy: np.ndarray, y: np.ndarray, *, out: np.ndarray | None = None,
                    alpha: float = 0.01) -> np.ndarray:
    """``dX = dY`` where the forward *output* ``Y > 0``, else ``alpha·dY`` (``Y = 0`` too)."""
    _check(dy, y)
    alpha = float(alpha)

    def body(o: np.ndarray, dy: np.ndarray, y: np.ndarray, s: list[np.ndarray]) -> None:
        _leaky_scale(y, alpha, s[0], s[1])
        np.multiply(dy, s[0], out=o)  # dY*1 or dY*alpha, exactly ORT's two branches

    return _elementwise(body, 2, out, dy, y)


def _quick_gelu_sig(x: np.ndarray, alpha: float, s: list[np.ndarray], need_c: bool
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """``(v, σ(v), σ(-v))`` for ``v = alpha·x`` (``x`` clipped where σ has saturated).

    Uses ``s[0..3]`` (and ``s[4..6]`` in float64); returns views into them.
    """
    v, e, m, c = s[0], s[1], s[2], s[3]
    if alpha != 0.0:
        bound = _XCLIP / abs(alpha)
        np.clip(x, -bound, bound, out=c)
        xc = c
    else:
        xc = x
    np.multiply(xc, alpha, out=v)
    np.abs(v, out=e)
    np.negative(e, out=e)
    np.greater_equal(v, 0.0, out=m)
    corr = None
    if x.dtype == np.float64 and alpha != 0.0:
        corr = s[4]
        _exp_correction_prod(xc, alpha, v, m, corr, s[5], s[6], s[7])
    _sigmoid_pair(e, m, m, c if need_c else None, corr)
    return v, m, (c if need_c else None)


def _quick_gelu_nv32(x: np.ndarray, alpha: float, nv: np.ndarray) -> None:
    """Float32: ``nv = -alpha·x`` with ``x`` first clipped so that ``|nv| <= _W32``.

    Beyond the clip σ(alpha·x) is within 1.7e-38 of 0 or 1, so results only change by
    amounts below 1e-33 absolute."""
    if alpha != 0.0:
        bound = _W32 / abs(alpha)
        np.clip(x, -bound, bound, out=nv)
        np.multiply(nv, -alpha, out=nv)
    else:
        np.multiply(x, -alpha, out=nv)


def _n_quick_scratch(dtype: np.dtype) -> int:
    return 8 if dtype == np.float64 else 4


@kernel("QuickGeluGrad", inplace=True)
def quick_gelu_grad(dy: np.ndarray, x: np.ndarray, *, out: np.ndarray | None = None,
                    alpha: float = 1.702) -> np.ndarray:
    """``s = σ(alpha·X)``; ``dX = dY ⊙ s ⊙ (1 + alpha·X ⊙ (1 - s))`` (any sign of alpha)."""
    dtype = _check(dy, x)
    alpha = float(alpha)

    if dtype == np.float32:
        def body(o: np.ndarray, dy: np.ndarray, x: np.ndarray, s: list[np.ndarray]) -> None:
            nv, sig, c = s[0], s[1], s[2]
            _quick_gelu_nv32(x, alpha, nv)
            _sigmoid_pair32(nv, sig, c)
            np.multiply(nv, c, out=c)
            np.subtract(1.0, c, out=c)  # 1 + v (1 - s)
            np.multiply(dy, sig, out=o)  # ORT's order: (dY * s) * (1 + v (1 - s))
            np.multiply(o, c, out=o)

        return _elementwise(body, 3, out, dy, x)

    def body64(o: np.ndarray, dy: np.ndarray, x: np.ndarray, s: list[np.ndarray]) -> None:
        v, sig, c = _quick_gelu_sig(x, alpha, s, True)
        np.multiply(v, c, out=v)
        np.add(v, 1.0, out=v)
        np.multiply(dy, sig, out=o)
        np.multiply(o, v, out=o)

    return _elementwise(body64, _n_quick_scratch(dtype), out, dy, x)


@kernel("GeluGrad", inplace=True)
def gelu_grad(dy: np.ndarray, x: np.ndarray, *, out: np.ndarray | None = None) -> np.ndarray:
    """``dX = dY ⊙ (Φ(X) + X ⊙ φ(X))``, the exact (erf) GELU's derivative."""
    dtype = _check(dy, x)

    def body(o: np.ndarray, dy: np.ndarray, x: np.ndarray, s: list[np.ndarray]) -> None:
        m, e, sr, xc = _gelu_core(x, s)
        t = s[4]
        np.multiply(xc, _INV_SQRT_2PI, out=t)
        np.subtract(t, sr, out=t)
        np.multiply(t, e, out=t)
        np.add(t, m, out=t)  # Φ(x) + x φ(x)
        np.multiply(dy, t, out=o)

    return _elementwise(body, _n_gelu_scratch(dtype), out, dy, x)


def _fast_gelu_sig(x: np.ndarray, s: list[np.ndarray], need_v: bool
                   ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
    """FastGelu's ``σ(w)``, ``σ(-w)`` and ``v = x·w'`` for ``w = 2k(x + c x³)``.

    ``½(1 + tanh(u)) = σ(2u)`` and ``1 - tanh(u)² = 4 σ(2u) σ(-2u)``, so the tanh form's
    cancellations (``1 + t`` for x << 0, ``1 - t²`` for |x| >> 0) never happen.
    Returns views into ``s[0..3]``: ``(σ(w), σ(-w) or None, v or None)``.
    """
    xc, q, e, m = s[0], s[1], s[2], s[3]
    np.clip(x, -_XCLIP, _XCLIP, out=xc)
    np.multiply(xc, xc, out=q)
    np.multiply(q, _C_FAST, out=q)  # c x²
    np.abs(xc, out=m)
    np.multiply(m, -2.0 * _K_FAST, out=m)
    np.add(q, 1.0, out=e)
    np.multiply(e, m, out=e)  # -|w| = -2k |x| (1 + c x²)
    if need_v:
        np.multiply(q, 3.0, out=q)
        np.add(q, 1.0, out=q)
        np.multiply(q, xc, out=q)
        np.multiply(q, 2.0 * _K_FAST, out=q)  # v = x w' = 2k x (1 + 3c x²)
    np.greater_equal(xc, 0.0, out=m)  # [w >= 0]
    c = xc if need_v else None
    _sigmoid_pair(e, m, m, c)
    return m, c, (q if need_v else None)


def _fast_gelu_nw32(x: np.ndarray, nxk: np.ndarray, q: np.ndarray, nw: np.ndarray) -> None:
    """Float32 FastGelu arguments: ``nxk = -2k·xc``, ``q = c·xc²``, ``nw = -w = (1 + q)·nxk``
    with ``xc = clip(x, ±_X32_FASTGELU)`` so ``|w| <= 85`` (σ(w) has saturated to within
    1e-37 beyond the clip)."""
    np.clip(x, -_X32_FASTGELU, _X32_FASTGELU, out=nxk)
    np.multiply(nxk, nxk, out=q)
    np.multiply(q, _C_FAST, out=q)
    np.multiply(nxk, -2.0 * _K_FAST, out=nxk)
    np.add(q, 1.0, out=nw)
    np.multiply(nw, nxk, out=nw)


@kernel("FastGeluGrad", inplace=True)
def fast_gelu_grad(dy: np.ndarray, x: np.ndarray, *, out: np.ndarray | None = None) -> np.ndarray:
    """``dX = dY ⊙ ½((1 + t) + x(1 - t²)·k(1 + 3c x²))``, ``t = tanh(k(x + c x³))``.

    Computed as ``σ(w)·(1 + v·σ(-w))`` with ``w = 2k(x + c x³)``, ``v = 2k x (1 + 3c x²)``:
    the same function without the tanh form's cancellations.
    """
    dtype = _check(dy, x)
    if dtype == np.float32:
        def body32(o: np.ndarray, dy: np.ndarray, x: np.ndarray, s: list[np.ndarray]) -> None:
            nxk, q, sig, c = s[0], s[1], s[2], s[3]
            _fast_gelu_nw32(x, nxk, q, sig)
            _sigmoid_pair32(sig, sig, c)  # sig held -w
            np.multiply(q, 3.0, out=q)
            np.add(q, 1.0, out=q)
            np.multiply(q, nxk, out=q)  # -v = -2k x (1 + 3c x^2)
            np.multiply(q, c, out=q)
            np.subtract(1.0, q, out=q)  # 1 + v σ(-w)
            np.multiply(dy, sig, out=o)
            np.multiply(o, q, out=o)

        return _elementwise(body32, 4, out, dy, x)

    def body(o: np.ndarray, dy: np.ndarray, x: np.ndarray, s: list[np.ndarray]) -> None:
        sig, c, v = _fast_gelu_sig(x, s, True)
        np.multiply(v, c, out=v)
        np.add(v, 1.0, out=v)
        np.multiply(dy, sig, out=o)
        np.multiply(o, v, out=o)

    return _elementwise(body, 4, out, dy, x)


# -- softmax families ------------------------------------------------------------------


def _norm_axis(axis: int, ndim: int, op: str) -> int:
    axis = int(axis)
    if not -ndim <= axis < ndim:
        raise ValueError(f"{op}: axis {axis} is out of range for a rank-{ndim} operand "
                         f"(expected {-ndim} <= axis < {ndim})")
    return axis + ndim if axis < 0 else axis


def _rows(body: Callable[..., None], n_scratch: int, out: np.ndarray | None,
          operands: tuple[np.ndarray, ...], axis: int, flatten: bool, op: str) -> np.ndarray:
    """Run a reduce-over-one-axis ``body`` block by block.

    The operands are viewed as ``[outer, A, inner]`` (the reduced axis in the middle;
    ``flatten=True`` gives the pre-opset-13 view ``[prod(shape[:axis]), prod(shape[axis:]), 1]``).
    ``body(o, *operand_blocks, big, red)`` gets blocks of shape ``[ob, A, w]`` (2-D
    ``[ob, A]`` when ``inner == 1``), ``big`` a list of ``n_scratch`` scratch arrays of the
    block's shape and ``red`` a scratch array of the reduced shape, and reduces with
    ``axis=1, keepdims=True``.  Blocks are whole outer slices, or column ranges of one
    outer slice when an outer slice is too big; the block grid depends only on the shape.
    """
    shape = operands[0].shape
    ax = _norm_axis(axis, len(shape), op)
    out = _prepare(operands, out)
    if out.size == 0:
        return out
    outer = math.prod(shape[:ax])
    if flatten:
        a_len, inner = math.prod(shape[ax:]), 1
    else:
        a_len, inner = shape[ax], math.prod(shape[ax + 1:])
    ops = [np.ascontiguousarray(a) for a in operands]
    dtype = out.dtype
    block = _block_elems(dtype)
    if inner == 1:
        views = [a.reshape(outer, a_len) for a in (out, *ops)]
        ob = max(1, block // a_len)
        n_units = -(-outer // ob)

        def unit(u: int) -> tuple[tuple[slice, ...], tuple[int, ...]]:
            r0 = u * ob
            r1 = min(outer, r0 + ob)
            return (slice(r0, r1),), (r1 - r0, a_len)
    elif a_len * inner <= block:
        views = [a.reshape(outer, a_len, inner) for a in (out, *ops)]
        ob = max(1, block // (a_len * inner))
        n_units = -(-outer // ob)

        def unit(u: int) -> tuple[tuple[slice, ...], tuple[int, ...]]:
            r0 = u * ob
            r1 = min(outer, r0 + ob)
            return (slice(r0, r1),), (r1 - r0, a_len, inner)
    else:
        views = [a.reshape(outer, a_len, inner) for a in (out, *ops)]
        w = max(1, min(inner, block // a_len))
        n_cols = -(-inner // w)
        n_units = outer * n_cols

        def unit(u: int) -> tuple[tuple[slice, ...], tuple[int, ...]]:
            r, cb = divmod(u, n_cols)
            c0 = cb * w
            c1 = min(inner, c0 + w)
            return (slice(r, r + 1), slice(None), slice(c0, c1)), (1, a_len, c1 - c0)

    _, full = unit(0)
    n_big = math.prod(full)

    def run(u0: int, u1: int) -> None:
        scratch = _scratch(dtype, n_scratch + 1, n_big)
        for u in range(u0, u1):
            idx, bshape = unit(u)
            size = math.prod(bshape)
            rshape = (bshape[0], 1) + bshape[2:]
            big = [a[:size].reshape(bshape) for a in scratch[:n_scratch]]
            red = scratch[n_scratch][: math.prod(rshape)].reshape(rshape)
            body(*(v[idx] for v in views), big, red)

    parallel_rows(n_units, n_big * dtype.itemsize * (len(operands) + 1), run)
    return out


def _softmax_grad_body(o: np.ndarray, dy: np.ndarray, y: np.ndarray, big: list[np.ndarray],
                       red: np.ndarray) -> None:
    p = big[0]
    np.multiply(y, dy, out=p)
    np.add.reduce(p, axis=1, keepdims=True, out=red)
    np.subtract(dy, red, out=p)
    np.multiply(p, y, out=o)


def _log_softmax_grad_body(o: np.ndarray, dy: np.ndarray, y: np.ndarray, big: list[np.ndarray],
                           red: np.ndarray) -> None:
    p = big[0]
    np.add.reduce(dy, axis=1, keepdims=True, out=red)
    np.exp(y, out=p)
    np.multiply(p, red, out=p)
    np.subtract(dy, p, out=o)


@kernel("SoftmaxGrad", inplace=True)
def softmax_grad(dy: np.ndarray, y: np.ndarray, *, out: np.ndarray | None = None,
                 axis: int = 1) -> np.ndarray:
    """Pre-opset-13: ``dX = Y ⊙ (dY - Σ(Y ⊙ dY))``, the sum over all axes ``>= axis``."""
    _check(dy, y)
    return _rows(_softmax_grad_body, 1, out, (dy, y), axis, True, "SoftmaxGrad")


@kernel("SoftmaxGrad_13", inplace=True)
def softmax_grad_13(dy: np.ndarray, y: np.ndarray, *, out: np.ndarray | None = None,
                    axis: int = -1) -> np.ndarray:
    """``dX = Y ⊙ (dY - Σ_axis(Y ⊙ dY))``, the sum over the single axis ``axis``."""
    _check(dy, y)
    return _rows(_softmax_grad_body, 1, out, (dy, y), axis, False, "SoftmaxGrad_13")


@kernel("LogSoftmaxGrad", inplace=True)
def log_softmax_grad(dy: np.ndarray, y: np.ndarray, *, out: np.ndarray | None = None,
                     axis: int = 1) -> np.ndarray:
    """Pre-opset-13: ``dX = dY - exp(Y) ⊙ Σ dY``, the sum over all axes ``>= axis``."""
    _check(dy, y)
    return _rows(_log_softmax_grad_body, 1, out, (dy, y), axis, True, "LogSoftmaxGrad")


@kernel("LogSoftmaxGrad_13", inplace=True)
def log_softmax_grad_13(dy: np.ndarray, y: np.ndarray, *, out: np.ndarray | None = None,
                        axis: int = -1) -> np.ndarray:
    """``dX = dY - exp(Y) ⊙ Σ_axis dY``, the sum over the single axis ``axis``."""
    _check(dy, y)
    return _rows(_log_softmax_grad_body, 1, out, (dy, y), axis, False, "LogSoftmaxGrad_13")


# -- forward kernels (OPS.md §2) --------------------------------------------------------


@kernel("Relu", inplace=True)
def relu(x: np.ndarray, *, out: np.ndarray | None = None) -> np.ndarray:
    """``max(x, 0)`` (NaN stays NaN)."""
    _check(x)
    return _elementwise(lambda o, x, s: np.maximum(x, 0.0, out=o), 0, out, x)


@kernel("Tanh", inplace=True)
def tanh(x: np.ndarray, *, out: np.ndarray | None = None) -> np.ndarray:
    _check(x)
    return _elementwise(lambda o, x, s: np.tanh(x, out=o), 0, out, x)


def _sigmoid_body(o: np.ndarray, x: np.ndarray, s: list[np.ndarray]) -> None:
    e, m = s[0], s[1]
    np.abs(x, out=e)
    np.negative(e, out=e)
    np.greater_equal(x, 0.0, out=m)
    _sigmoid_pair(e, m, o, None)


def _sigmoid_body32(o: np.ndarray, x: np.ndarray, s: list[np.ndarray]) -> None:
    e = s[0]
    np.clip(x, -_W32, _W32, out=e)
    np.negative(e, out=e)
    np.exp(e, out=e)
    np.add(e, 1.0, out=e)
    np.reciprocal(e, out=o)


@kernel("Sigmoid", inplace=True)
def sigmoid(x: np.ndarray, *, out: np.ndarray | None = None) -> np.ndarray:
    """``1 / (1 + exp(-x))``.

    Float64: ``max(e, [x>=0]) / (1 + e)`` with ``e = exp(-|x|)`` (exact underflow to 0);
    Float32: ``1 / (1 + exp(-x))`` with ``x`` clipped to ``±_W32``."""
    dtype = _check(x)
    if dtype == np.float32:
        return _elementwise(_sigmoid_body32, 1, out, x)
    return _elementwise(_sigmoid_body, 2, out, x)


@kernel("LeakyRelu", inplace=True)
def leaky_relu(x: np.ndarray, *, out: np.ndarray | None = None, alpha: float = 0.01) -> np.ndarray:
    """``x`` if ``x > 0`` else ``alpha·x``."""
    _check(x)
    alpha = float(alpha)

    def body(o: np.ndarray, x: np.ndarray, s: list[np.ndarray]) -> None:
        if alpha <= 1.0:  # max(x, alpha x) is exactly one of the two branches
            np.multiply(x, alpha, out=s[0])
            np.maximum(x, s[0], out=o)
        else:  # alpha > 1: min(x, alpha x)
            np.multiply(x, alpha, out=s[0])
            np.minimum(x, s[0], out=o)

    return _elementwise(body, 1, out, x)


@kernel("QuickGelu", inplace=True)
def quick_gelu(x: np.ndarray, *, out: np.ndarray | None = None, alpha: float = 1.702) -> np.ndarray:
    """``x ⊙ σ(alpha·x)``."""
    dtype = _check(x)
    alpha = float(alpha)

    if dtype == np.float32:
        zero_side = np.maximum if alpha > 0.0 else np.minimum
        bound = _W32 / abs(alpha) if alpha != 0.0 else np.inf

        def body(o: np.ndarray, x: np.ndarray, s: list[np.ndarray]) -> None:
            e, xz = s[0], s[1]
            _quick_gelu_nv32(x, alpha, e)
            np.exp(e, out=e)
            np.add(e, 1.0, out=e)
            # x / (1 + exp(-alpha x)), with x clipped on the side where σ saturates to 0
            # (so x = -1e38 still gives a tiny result); the other side keeps x itself
            zero_side(x, -bound if alpha > 0.0 else bound, out=xz)
            np.divide(xz, e, out=o)

        return _elementwise(body, 2, out, x)

    def body64(o: np.ndarray, x: np.ndarray, s: list[np.ndarray]) -> None:
        _, sig, _ = _quick_gelu_sig(x, alpha, s, False)
        np.multiply(x, sig, out=o)

    return _elementwise(body64, _n_quick_scratch(dtype), out, x)


@kernel("Gelu", inplace=True)
def gelu(x: np.ndarray, *, out: np.ndarray | None = None) -> np.ndarray:
    """``x ⊙ Φ(x)``, the exact (erf) GELU."""
    dtype = _check(x)

    def body(o: np.ndarray, x: np.ndarray, s: list[np.ndarray]) -> None:
        m, e, sr, xc = _gelu_core(x, s)
        np.multiply(sr, e, out=sr)
        np.subtract(m, sr, out=m)  # Φ(x)
        # x Φ(x); on the saturated negative side use the clipped x, so that even x = -1e38
        # gives a tiny result (x > bound keeps x: Φ is 1 there)
        np.maximum(x, xc, out=xc)
        np.multiply(xc, m, out=o)

    return _elementwise(body, _n_gelu_scratch(dtype), out, x)


@kernel("FastGelu", inplace=True)
def fast_gelu(x: np.ndarray, *, out: np.ndarray | None = None) -> np.ndarray:
    """``½x(1 + tanh(k(x + c x³)))`` = ``x ⊙ σ(2k(x + c x³))``."""
    dtype = _check(x)
    if dtype == np.float32:
        def body32(o: np.ndarray, x: np.ndarray, s: list[np.ndarray]) -> None:
            nw = s[2]
            _fast_gelu_nw32(x, s[0], s[1], nw)
            np.exp(nw, out=nw)
            np.add(nw, 1.0, out=nw)
            np.maximum(x, -_X32_FASTGELU, out=s[0])  # clipped on the saturated-to-0 side
            np.divide(s[0], nw, out=o)  # x / (1 + exp(-w))

        return _elementwise(body32, 3, out, x)

    def body(o: np.ndarray, x: np.ndarray, s: list[np.ndarray]) -> None:
        sig, _, _ = _fast_gelu_sig(x, s, False)
        np.multiply(x, sig, out=o)

    return _elementwise(body, 4, out, x)


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


@kernel("Softmax", inplace=True)
def softmax(x: np.ndarray, *, out: np.ndarray | None = None, axis: int = -1) -> np.ndarray:
    """``exp(x - max) / Σ exp(x - max)`` over the single axis ``axis``."""
    _check(x)
    return _rows(_softmax_body, 1, out, (x,), axis, False, "Softmax")


@kernel("LogSoftmax", inplace=True)
def log_softmax(x: np.ndarray, *, out: np.ndarray | None = None, axis: int = -1) -> np.ndarray:
    """``(x - max) - log Σ exp(x - max)`` over the single axis ``axis``."""
    _check(x)
    return _rows(_log_softmax_body, 2, out, (x,), axis, False, "LogSoftmax")
