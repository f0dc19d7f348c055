"""NumPy kernels for the activation family: docs/ops.md (ORT gradients and forwards).

Every kernel keeps its operands' dtype (Float32 or Float64; no float32 result goes
through a float64 array) and follows ``gradir.kernels``' calling convention,
``fn(*operands, out=None, **attrs)``, writing into ``out`` when it is given.

How they are built (docs/performance.md and ``benchmarks/bench_activations.py`` have the
measurements behind each choice):

* **Blocks.**  Element-wise kernels walk the flat arrays in fixed blocks of
  ``BLOCK_BYTES`` per operand.  Intermediates live in per-thread scratch buffers reused
  from block to block, so a kernel reads each operand from memory once and writes its
  result once however many NumPy passes it makes; the passes run in cache.  The softmax
  families do the same with whole rows (or column ranges) per block.
* **Threads.**  Blocks are dealt to threads in contiguous runs by
  :func:`~gradir.kernels.parallel.parallel_rows`.  The block grid depends only on the shape
  and dtype, never on the thread count, and a block is computed the same way wherever it
  runs, so results are bit-identical for any thread count.
* **No selects.**  ``np.where``/``putmask``/``copyto(where=)`` are 10-15x slower than a
  pass here.  Branches become exact arithmetic on 0/1 masks written by ``np.greater`` into
  a float buffer, integer bit masks (``ReluGrad``), or ``maximum`` tricks whose result is
  exactly one of the branches.
* **In place.**  Every kernel is registered ``inplace=True``: within a block each operand
  is read before the same positions of ``out`` are written, or only through same-position
  ufuncs, so ``out`` may be any operand.
* **Costs per pass** (float32, one core, 512 KiB blocks in L2; ns per element): a pass with
  a scalar 0.11, array*array 0.15-0.2 (NumPy's add/multiply loops are slower than
  ``maximum``'s), ``divide`` 0.23, ``exp2`` 0.26, ``tanh`` 0.34, ``exp`` 0.45,
  ``copysign`` 0.7.  Hence ``exp2`` with the ``log2 e`` folded into a constant, and
  formulas chosen for few array*array passes.

Numerics.  Float64 aims at a few ulps of the exact value: sigmoids are
``σ(w) = max(e, [w>=0]) / (1 + e)``, ``σ(-w) = max(e, [w<0]) / (1 + e)`` with
``e = exp(-|w|)`` (exact underflow to 0, full relative accuracy in both tails), and the
arguments ``alpha·x`` (QuickGelu) and ``x²`` (Gelu) reach ``exp`` with their rounding
error carried along (Dekker's exact product), because ``exp`` turns an argument error
``δ`` into a relative error ``δ``, which is ``|w|`` ulps of the result.  (FastGelu's cubic
argument is not carried; its error grows like ``|w|`` ulps in the far tail.)  Float32
takes the faster forms ``σ(w) = 1/(1 + e)``, ``e = exp(-w)``, with ``w`` clipped so that
every ``exp``, ``1 + exp`` and product stays a finite *normal* float (denormals make a
ufunc ~17x slower): its results keep a few ulps of relative accuracy, times ``1 + |w|``
for the argument's own rounding, and in the saturated tails, where the exact value is
below ~1e-30, may be such a tiny number instead of 0.  The exact GELU uses
``Φ(-a) = e^{-a²/2} R(a)`` with ``R(a) = erfcx(a/√2)/2``, which is smooth: Float64 takes
``R`` from ``scipy.special.erfcx``, Float32 from a degree-8 polynomial in
``t = 1/(1 + a/4)`` (relative error < 5e-7 after float32 rounding).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable

import numpy as np

from ..ops.common import finite
from . import jit, kernel
from .parallel import parallel_rows

__all__ = [
    "BLOCK_BYTES",
    "fast_gelu",
    "fast_gelu_grad",
    "gelu",
    "gelu_grad",
    "leaky_relu",
    "leaky_relu_grad",
    "log_softmax",
    "log_softmax_grad",
    "log_softmax_grad_13",
    "quick_gelu",
    "quick_gelu_grad",
    "relu",
    "relu_grad",
    "sigmoid",
    "sigmoid_grad",
    "softmax",
    "softmax_grad",
    "softmax_grad_13",
    "tanh",
    "tanh_grad",
]

#: Bytes per operand in one block: large enough that per-call overhead (and the GIL
#: hand-over between workers) stays small, small enough that a block's passes run in L2.
BLOCK_BYTES = 1 << 19

_K = math.sqrt(2.0 / math.pi)  # FastGelu: u = k (x + c x^3)
_C = 0.044715
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
_SQRT1_2 = math.sqrt(0.5)
_LOG2E = 1.0 / math.log(2.0)
_XCLIP = 1.0e4  # float64: beyond this every function here has saturated exactly (exp(-1e4) = 0)
_DEKKER = 134217729.0  # 2**27 + 1, Veltkamp's splitting constant for float64

# Float32 clips (see the module docstring): beyond them the functions are within ~1e-31 of
# their limits, and every intermediate stays a finite normal float32.
_F32_MAX = float(np.finfo(np.float32).max)
_W32 = 80.0  # |w| for plain sigmoids: e^80 (1 + 80) = 4.5e36 < 3.4e38, 1/(1 + e^80) = 1.8e-35
_X32_FAST = 9.5  # FastGelu: |w(9.5)| = 76.3, e^76.3 (1 + |v(9.5)|) = 2.8e35
_A32_GELU = 12.5  # exp(-12.5²/2) = 1.2e-34, Φ(-12.5) = 3.7e-36

# R(a) = erfcx(a/√2)/2 ~= t Q(t), t = 1/(1 + _R_P a), Q fitted (weighted least squares with
# Lawson iterations) on a in [0, 14.5]; relative error 6e-8 in float64 arithmetic.
_R_P = 0.25
_R_Q = (0.09979283517084202, 0.09859322172959288, 0.10321823605310673, 0.034940268503068826,
        0.19713730830782333, -0.19921763532212042, 0.29047261074616004, -0.15011195044822198,
        0.025175074081542743)  # ascending powers of t


# -- infrastructure ------------------------------------------------------------------------


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


def _check(*arrays: np.ndarray) -> np.dtype:
    dtype = arrays[0].dtype
    if dtype not in (np.float32, np.float64):
        raise TypeError(f"activation kernels take Float32 or Float64 operands, got {dtype}")
    for a in arrays[1:]:
        if a.dtype != dtype or a.shape != arrays[0].shape:
            raise ValueError(f"operands must share shape and dtype: {arrays[0].shape} {dtype} "
                             f"vs {a.shape} {a.dtype}")
    return dtype


def _alpha(alpha: float, op: str) -> float:
    alpha = float(alpha)
    msg = finite(alpha)
    if msg:
        raise ValueError(f"{op}: alpha {msg}")
    return alpha


def _f32(dtype: np.dtype, *values: float) -> tuple:
    """Scalar arguments of a compiled Float32 kernel (nothing for other dtypes, whose
    kernels are NumPy's); values beyond float32's range become ±inf without a warning."""
    if dtype != np.float32:
        return ()
    with np.errstate(over="ignore"):
        return tuple(np.float32(v) for v in values)


def _quick_gelu_bound(alpha: float) -> float:
    """|x| beyond which σ(alpha·x) saturates in Float32 (``|alpha·x| = _W32``), at most
    float32's largest value so that clipping always gives a finite x."""
    return min(_W32 / abs(alpha), _F32_MAX) if alpha != 0.0 else np.inf


def _compiled(dtype: np.dtype, name: str) -> Callable[..., None] | None:
    """The compiled Float32 kernel ``name`` of ``_jit_act``, or None (NumPy path)."""
    if dtype != np.float32:
        return None
    mod = jit.load("act")
    return None if mod is None else getattr(mod, name)


def _act_kernel(name: str, arity: int) -> Callable[[Callable], Callable]:
    """``@kernel(name, inplace=True)`` with a ``warm`` hook (``gradir.kernels``): calling the
    kernel once on 1x1 Float32 arrays builds its compiled path, or loads it from numba's cache."""

    def warm(dtype: np.dtype) -> None:
        if np.dtype(dtype) == np.float32 and jit.load("act") is not None:
            from . import KERNELS
            KERNELS[name].fn(*[np.full((1, 1), 0.5, np.float32)] * arity)

    return kernel(name, inplace=True, warm=warm)


def _overlaps_partly(out: np.ndarray, operands: tuple[np.ndarray, ...]) -> bool:
    """True when ``out`` shares memory with an operand other than as the very same array
    layout (in place is fine; a shifted or differently strided view is not)."""
    p = out.__array_interface__["data"][0]
    for a in operands:
        if np.may_share_memory(out, a) and not (
                a.__array_interface__["data"][0] == p and a.strides == out.strides and a.shape == out.shape):
            return True
    return False


def _elementwise(body: Callable[..., None], n_scratch: int, out: np.ndarray | None,
                 *operands: np.ndarray, fast: Callable[..., None] | None = None,
                 fast_args: tuple = ()) -> np.ndarray:
    """Run ``body(o, *operand_blocks, scratch)`` over fixed-size blocks of the flat arrays.

    ``o`` and the operand blocks are same-length 1-D views (``o`` may be the same memory as
    an operand block); ``scratch`` is a list of ``n_scratch`` private buffers of that length.
    ``fast``, when given, is a compiled kernel that does the same for a whole run of blocks
    in one call, ``fast(o, *operand_runs, *fast_args)``.
    """
    if out is None:
        out = np.empty(operands[0].shape, operands[0].dtype)
    elif not out.flags.c_contiguous or _overlaps_partly(out, operands):
        # outside the calling convention: compute apart, then copy (NumPy's out= semantics)
        np.copyto(out, _elementwise(body, n_scratch, None, *operands, fast=fast, fast_args=fast_args))
        return out
    else:
        jit.writable_out(out)
    flat_ops = [np.ascontiguousarray(a).reshape(-1) for a in operands]
    if fast is not None:
        flat_ops = [jit.readable(a) for a in flat_ops]
    flat_out = out.reshape(-1)
    n = flat_out.size
    if n == 0:
        return out
    dtype = flat_out.dtype
    block = _block_elems(dtype)
    n_blocks = -(-n // block)

    def run(b0: int, b1: int) -> None:
        if fast is not None:
            lo, hi = b0 * block, min(n, b1 * block)
            fast(flat_out[lo:hi], *(a[lo:hi] for a in flat_ops), *fast_args)
            return
        scratch = _scratch(dtype, n_scratch, min(block, n))
        for b in range(b0, b1):
            lo = b * block
            hi = min(n, lo + block)
            s = scratch if hi - lo == block else [a[: hi - lo] for a in scratch]
            body(flat_out[lo:hi], *(a[lo:hi] for a in flat_ops), s)

    parallel_rows(n_blocks, block * dtype.itemsize * (len(operands) + 1), run)
    return out


def _norm_axis(axis: int, ndim: int, op: str) -> int:
    axis = int(axis)
    if not -ndim <= axis < ndim:
        raise ValueError(f"{op}: axis {axis} is out of range for a rank-{ndim} operand "
                         f"(expected {-ndim} <= axis < {ndim})")
    return axis + ndim if axis < 0 else axis


def _rows(body: Callable[..., None], n_scratch: int, out: np.ndarray | None,
          operands: tuple[np.ndarray, ...], axis: int, flatten: bool, op: str,
          fast: Callable[..., None] | None = None) -> np.ndarray:
    """Run a reduce-over-one-axis ``body`` block by block.

    The operands are viewed as ``[outer, A, inner]`` with the reduced axis in the middle
    (``flatten=True`` gives the pre-opset-13 view ``[prod(shape[:axis]), prod(shape[axis:]), 1]``).
    ``body(o, *operand_blocks, big, red)`` gets blocks of shape ``[ob, A, w]`` (2-D
    ``[ob, A]`` when ``inner == 1``), ``big``, a list of ``n_scratch`` scratch arrays of the
    block's shape, and ``red``, a scratch array of the reduced shape; it reduces over axis 1.
    A block is a run of whole outer slices, or a column range of one outer slice when a
    slice is too big; the grid depends only on the shape, so results do not depend on the
    thread count.  ``fast``, when given, is a compiled kernel that does the same for a run
    of whole rows (``inner == 1``) in one call, ``fast(o, *operand_rows)`` on 2-D arrays
    (``o`` may be an operand, see ``_jit_act``).
    """
    shape = operands[0].shape
    ax = _norm_axis(axis, len(shape), op)
    if out is None:
        out = np.empty(shape, operands[0].dtype)
    elif not out.flags.c_contiguous or _overlaps_partly(out, operands):
        # outside the calling convention: compute apart, then copy (NumPy's out= semantics)
        np.copyto(out, _rows(body, n_scratch, None, operands, axis, flatten, op, fast))
        return out
    else:
        jit.writable_out(out, op)
    if out.size == 0:
        return out
    outer = math.prod(shape[:ax])
    if flatten:
        a_len, inner = math.prod(shape[ax:]), 1
    else:
        a_len, inner = shape[ax], math.prod(shape[ax + 1:])
    ops = [np.ascontiguousarray(a) for a in operands]
    if fast is not None:
        ops = [jit.readable(a) for a in ops]
    dtype = out.dtype
    block = _block_elems(dtype)
    unit: Callable[[int], tuple[tuple[slice, ...], tuple[int, ...]]]
    if inner == 1 or a_len * inner <= block:
        views = ([a.reshape(outer, a_len) for a in (out, *ops)] if inner == 1
                 else [a.reshape(outer, a_len, inner) for a in (out, *ops)])
        ob = max(1, block // (a_len * inner))
        n_units = -(-outer // ob)
        tail = (a_len,) if inner == 1 else (a_len, inner)

        def unit(u: int) -> tuple[tuple[slice, ...], tuple[int, ...]]:
            r0 = u * ob
            r1 = min(outer, r0 + ob)
            return (slice(r0, r1),), (r1 - r0, *tail)
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

    n_big = math.prod(unit(0)[1])
    if fast is not None and inner == 1:
        def run_fast(u0: int, u1: int) -> None:
            rows = slice(u0 * ob, min(outer, u1 * ob))
            fast(*(v[rows] for v in views))

        parallel_rows(n_units, n_big * dtype.itemsize * (len(operands) + 1), run_fast)
        return out

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


# -- float64 numerics ------------------------------------------------------------------------


def _sigmoid_pair64(e: np.ndarray, m: np.ndarray, s_out: np.ndarray, c: np.ndarray | None,
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


def _split(x: np.ndarray, hi: np.ndarray, lo: np.ndarray) -> None:
    """Veltkamp split ``x = hi + lo`` into 26-bit halves (float64, |x| < 1e300)."""
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
    """``corr`` such that ``exp(-|alpha*x|) = exp(-|v|) * corr`` to double precision, where
    ``v = fl(alpha*x)`` and ``m = [v >= 0]`` (0/1 floats); float64, |x| < 1e300.

    Dekker's exact product gives ``err = alpha*x - v``; then ``-|alpha*x| = -|v| - sign(v)*err``
    and ``exp(-sign(v)*err) = 1 - sign(v)*err`` to first order (``|err| < 1e-13`` wherever
    ``exp(-|v|)`` is not 0).
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


def _exp_half_square64(a: np.ndarray, e: np.ndarray, t1: np.ndarray, t2: np.ndarray,
                       t3: np.ndarray) -> None:
    """``e = exp(-a²/2)`` (float64, ``0 <= a <= _XCLIP``) with the rounding error of ``a²``
    carried: ``a² = hi + lo`` exactly (Dekker), ``exp(-(hi + lo)/2) = exp(-hi/2)(1 - lo/2)``."""
    np.multiply(a, a, out=e)
    _split(a, t1, t2)  # a = ah + al
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


def _gelu_h(x: np.ndarray, s: list[np.ndarray], want_h: bool
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Returns views ``(p, m, z)`` into ``s``: ``z = clip(x, ±bound)``, ``m = [z >= 0]`` and
    ``p = h(|z|) = Φ(-a) - a φ(a)`` (``want_h``) or ``p = Φ(-a)`` (otherwise), ``a = |z|``.

    Then ``Φ(x) = p + m(1 - 2p)`` and ``Φ(x) + x φ(x) = h + m(1 - 2h)``: the ``x < 0``
    branch is ``p`` itself (no subtraction, full relative accuracy in the left tail) and both
    are continuous at 0, so ``-0.0`` needs no care.  ``Φ(-a) = e R(a)``, ``e = exp(-a²/2)``.
    """
    z, a, e, r, t = s[0], s[1], s[2], s[3], s[4]
    if x.dtype == np.float64:
        np.clip(x, -_XCLIP, _XCLIP, out=z)
        np.abs(z, out=a)
        _exp_half_square64(a, e, t, s[5], s[6])
        np.multiply(a, _SQRT1_2, out=r)
        from scipy.special import erfcx  # imported on first use: scipy.special takes ~0.3 s
        erfcx(r, out=r)
        np.multiply(r, 0.5, out=r)  # R(a)
    else:
        np.clip(x, -_A32_GELU, _A32_GELU, out=z)
        np.abs(z, out=a)
        np.square(a, out=e)
        np.multiply(e, -0.5 * _LOG2E, out=e)
        np.exp2(e, out=e)  # exp(-a²/2)
        np.multiply(a, _R_P, out=t)
        np.add(t, 1.0, out=t)
        np.divide(1.0, t, out=t)  # t = 1/(1 + a/4)
        q = _R_Q
        np.multiply(t, q[-1], out=r)
        np.add(r, q[-2], out=r)
        for coef in q[-3::-1]:
            np.multiply(r, t, out=r)
            np.add(r, coef, out=r)
        np.multiply(r, t, out=r)  # R(a)
    if want_h:
        np.multiply(a, _INV_SQRT_2PI, out=a)
        np.subtract(r, a, out=r)  # R - a/√(2π)
    np.multiply(r, e, out=r)
    np.greater_equal(z, 0.0, out=a)
    return r, a, z


def _mirror(p: np.ndarray, m: np.ndarray, t: np.ndarray) -> None:
    """``p <- p + m(1 - 2p)``: ``p`` where ``m = 0``, ``1 - p`` where ``m = 1``."""
    np.multiply(p, -2.0, out=t)
    np.add(t, 1.0, out=t)
    np.multiply(t, m, out=t)
    np.add(p, t, out=p)


def _n_gelu_scratch(dtype: np.dtype) -> int:
    return 7 if dtype == np.float64 else 5


def _quick_gelu_sig64(x: np.ndarray, alpha: float, s: list[np.ndarray], need_c: bool
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Float64: views ``(v, σ(v), σ(-v))`` into ``s[0..3]`` for ``v = alpha·x`` (``x``
    clipped where σ has saturated exactly), the exp argument's rounding carried."""
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
    if alpha != 0.0:
        corr = s[4]
        _exp_correction_prod(xc, alpha, v, m, corr, s[5], s[6], s[7])
    _sigmoid_pair64(e, m, m, c if need_c else None, corr)
    return v, m, c


def _quick_gelu_e32(x: np.ndarray, alpha: float, z: np.ndarray, v: np.ndarray | None,
                    e: np.ndarray) -> np.ndarray:
    """Float32: ``e = exp(-v)`` for ``v = alpha·clip(x)`` with ``|v| <= _W32``; ``v`` into
    ``v`` if given.  Returns the clipped ``x`` (``z``, or ``x`` itself when alpha is 0)."""
    if alpha != 0.0:
        bound = _quick_gelu_bound(alpha)
        np.clip(x, -bound, bound, out=z)
        x = z
    if v is not None:
        np.multiply(x, alpha, out=v)
        np.multiply(v, -_LOG2E, out=e)
    else:
        np.multiply(x, -alpha * _LOG2E, out=e)
    np.exp2(e, out=e)
    return x


def _fast_gelu_e32(x: np.ndarray, z: np.ndarray, q: np.ndarray, e: np.ndarray) -> None:
    """Float32 FastGelu: ``z = clip(x, ±_X32_FAST)``, ``q = z²``, ``e = exp(-w)`` for
    ``w = 2k z (1 + c z²)`` (``|w| <= 76.3``)."""
    np.clip(x, -_X32_FAST, _X32_FAST, out=z)
    np.square(z, out=q)
    np.multiply(q, -2.0 * _K * _C * _LOG2E, out=e)
    np.add(e, -2.0 * _K * _LOG2E, out=e)
    np.multiply(e, z, out=e)
    np.exp2(e, out=e)


def _sig_grad_from_e32(e: np.ndarray, t: np.ndarray) -> None:
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


def _fast_gelu_sig64(x: np.ndarray, s: list[np.ndarray], need_v: bool
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Float64 FastGelu: views ``(σ(w), σ(-w), v = x w')`` into ``s[0..3]`` for
    ``w = 2k(x + c x³)``, ``v = 2k x (1 + 3c x²)``.

    ``½(1 + tanh(u)) = σ(2u)`` and ``1 - tanh(u)² = 4 σ(2u) σ(-2u)``, so the tanh form's
    cancellations (``1 + t`` for x << 0, ``1 - t²`` for |x| >> 0) never happen.
    """
    xc, q, e, m = s[0], s[1], s[2], s[3]
    np.clip(x, -_XCLIP, _XCLIP, out=xc)
    np.multiply(xc, xc, out=q)
    np.multiply(q, _C, out=q)  # c x²
    np.abs(xc, out=m)
    np.multiply(m, -2.0 * _K, out=m)
    np.add(q, 1.0, out=e)
    np.multiply(e, m, out=e)  # -|w| = -2k |x| (1 + c x²)
    if need_v:
        np.multiply(q, 3.0, out=q)
        np.add(q, 1.0, out=q)
        np.multiply(q, xc, out=q)
        np.multiply(q, 2.0 * _K, out=q)  # v
    np.greater_equal(xc, 0.0, out=m)  # [w >= 0]
    _sigmoid_pair64(e, m, m, xc if need_v else None)
    return m, xc, q


# -- gradient kernels (ORT semantics, docs/ops.md) -------------------------------------------


def _relu_grad_body(o: np.ndarray, dy: np.ndarray, x: np.ndarray, s: list[np.ndarray]) -> None:
    # dX = dY where X > 0 else +0, bit for bit like ORT's select (also for inf/NaN in dY):
    # an all-ones/all-zeros integer mask ANDed with dY's bits.
    itype = np.int32 if o.dtype == np.float32 else np.int64
    mask = s[0].view(itype)
    np.greater(x, 0.0, out=mask)
    np.negative(mask, out=mask)
    np.bitwise_and(dy.view(itype), mask, out=o.view(itype))


@_act_kernel("ReluGrad", 2)
def relu_grad(dy: np.ndarray, x: np.ndarray, *, out: np.ndarray | None = None) -> np.ndarray:
    """``dX = dY`` where ``X > 0`` (strict; NaN is not > 0), else ``+0``."""
    dtype = _check(dy, x)
    return _elementwise(_relu_grad_body, 1, out, dy, x, fast=_compiled(dtype, "relu_grad"))


def _sigmoid_grad_body(o: np.ndarray, dy: np.ndarray, y: np.ndarray, s: list[np.ndarray]) -> None:
    t = s[0]
    np.subtract(1.0, y, out=t)
    np.multiply(dy, y, out=o)  # ORT's order: (dY * Y) * (1 - Y)
    np.multiply(o, t, out=o)


@_act_kernel("SigmoidGrad", 2)
def sigmoid_grad(dy: np.ndarray, y: np.ndarray, *, out: np.ndarray | None = None) -> np.ndarray:
    """``dX = dY ⊙ Y ⊙ (1 - Y)`` from the forward output ``Y``."""
    dtype = _check(dy, y)
    return _elementwise(_sigmoid_grad_body, 1, out, dy, y, fast=_compiled(dtype, "sigmoid_grad"))


def _tanh_grad_body(o: np.ndarray, dy: np.ndarray, y: np.ndarray, s: list[np.ndarray]) -> None:
    t = s[0]
    np.square(y, out=t)
    np.subtract(1.0, t, out=t)
    np.multiply(dy, t, out=o)  # ORT's dY * (1 - Y * Y)


@_act_kernel("TanhGrad", 2)
def tanh_grad(dy: np.ndarray, y: np.ndarray, *, out: np.ndarray | None = None) -> np.ndarray:
    """``dX = dY ⊙ (1 - Y²)`` from the forward output ``Y``."""
    dtype = _check(dy, y)
    return _elementwise(_tanh_grad_body, 1, out, dy, y, fast=_compiled(dtype, "tanh_grad"))


@_act_kernel("LeakyReluGrad", 2)
def leaky_relu_grad(dy: np.ndarray, y: np.ndarray, *, out: np.ndarray | None = None,
                    alpha: float = 0.01) -> np.ndarray:
    """``dX = dY`` where the forward *output* ``Y > 0``, else ``alpha·dY`` (also for ``Y = 0``
    and NaN).  Like ORT, this is the derivative of LeakyRelu only for ``alpha >= 0``."""
    dtype = _check(dy, y)
    alpha = _alpha(alpha, "LeakyReluGrad")
    return _elementwise(_leaky_body(alpha), 2, out, dy, y, fast=_compiled(dtype, "leaky_relu_grad"),
                        fast_args=_f32(dtype, alpha))


def _leaky_body(alpha: float) -> Callable[..., None]:
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


@_act_kernel("QuickGeluGrad", 2)
def quick_gelu_grad(dy: np.ndarray, x: np.ndarray, *, out: np.ndarray | None = None,
                    alpha: float = 1.702) -> np.ndarray:
    """``s = σ(alpha·X)``; ``dX = dY ⊙ s ⊙ (1 + alpha·X ⊙ (1 - s))``, alpha of any sign."""
    dtype = _check(dy, x)
    alpha = _alpha(alpha, "QuickGeluGrad")
    if dtype == np.float32:
        def body32(o: np.ndarray, dy: np.ndarray, x: np.ndarray, s: list[np.ndarray]) -> None:
            z, t, e = s[0], s[1], s[2]
            _quick_gelu_e32(x, alpha, z, t, e)  # t = v, e = exp(-v)
            _sig_grad_from_e32(e, t)
            np.multiply(dy, t, out=o)

        return _elementwise(body32, 3, out, dy, x, fast=_compiled(dtype, "quick_gelu_grad"),
                            fast_args=_f32(dtype, alpha, _quick_gelu_bound(alpha)))

    def body64(o: np.ndarray, dy: np.ndarray, x: np.ndarray, s: list[np.ndarray]) -> None:
        v, sig, c = _quick_gelu_sig64(x, alpha, s, True)
        np.multiply(v, c, out=v)
        np.add(v, 1.0, out=v)
        np.multiply(dy, sig, out=o)  # ORT's order: (dY * s) * (1 + v (1 - s))
        np.multiply(o, v, out=o)

    return _elementwise(body64, 8, out, dy, x)


@_act_kernel("GeluGrad", 2)
def gelu_grad(dy: np.ndarray, x: np.ndarray, *, out: np.ndarray | None = None) -> np.ndarray:
    """``dX = dY ⊙ (Φ(X) + X ⊙ φ(X))``, the derivative of the exact (erf) GELU."""
    dtype = _check(dy, x)

    def body(o: np.ndarray, dy: np.ndarray, x: np.ndarray, s: list[np.ndarray]) -> None:
        h, m, z = _gelu_h(x, s, True)
        _mirror(h, m, z)  # Φ(x) + x φ(x)
        np.multiply(dy, h, out=o)

    return _elementwise(body, _n_gelu_scratch(dtype), out, dy, x, fast=_compiled(dtype, "gelu_grad"))


@_act_kernel("FastGeluGrad", 2)
def fast_gelu_grad(dy: np.ndarray, x: np.ndarray, *, out: np.ndarray | None = None) -> np.ndarray:
    """``dX = dY ⊙ ½((1 + t) + x(1 - t²)·k(1 + 3c x²))``, ``t = tanh(k(x + c x³))``.

    Computed as ``σ(w)(1 + v σ(-w))``, ``w = 2k(x + c x³)``, ``v = 2k x (1 + 3c x²)``: the
    same function without the tanh form's cancellations.
    """
    dtype = _check(dy, x)
    if dtype == np.float32:
        def body32(o: np.ndarray, dy: np.ndarray, x: np.ndarray, s: list[np.ndarray]) -> None:
            z, q, e = s[0], s[1], s[2]
            _fast_gelu_e32(x, z, q, e)
            np.multiply(q, 6.0 * _K * _C, out=q)
            np.add(q, 2.0 * _K, out=q)
            np.multiply(q, z, out=q)  # v
            _sig_grad_from_e32(e, q)
            np.multiply(dy, q, out=o)

        return _elementwise(body32, 3, out, dy, x, fast=_compiled(dtype, "fast_gelu_grad"))

    def body64(o: np.ndarray, dy: np.ndarray, x: np.ndarray, s: list[np.ndarray]) -> None:
        sig, c, v = _fast_gelu_sig64(x, s, True)
        np.multiply(v, c, out=v)
        np.add(v, 1.0, out=v)
        np.multiply(dy, sig, out=o)
        np.multiply(o, v, out=o)

    return _elementwise(body64, 4, out, dy, x)


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
        np.multiply(y, _LOG2E, out=p)
        np.exp2(p, out=p)
    else:
        np.exp(y, out=p)
    np.multiply(p, red, out=p)
    np.subtract(dy, p, out=o)


@_act_kernel("SoftmaxGrad", 2)
def softmax_grad(dy: np.ndarray, y: np.ndarray, *, out: np.ndarray | None = None,
                 axis: int = 1) -> np.ndarray:
    """Pre-opset-13: ``dX = Y ⊙ (dY - Σ(Y ⊙ dY))``, the sum over all axes ``>= axis``."""
    dtype = _check(dy, y)
    return _rows(_softmax_grad_body, 1, out, (dy, y), axis, True, "SoftmaxGrad",
                 _compiled(dtype, "softmax_grad_rows"))


@_act_kernel("SoftmaxGrad_13", 2)
def softmax_grad_13(dy: np.ndarray, y: np.ndarray, *, out: np.ndarray | None = None,
                    axis: int = -1) -> np.ndarray:
    """``dX = Y ⊙ (dY - Σ_axis(Y ⊙ dY))``, the sum over the single axis ``axis``."""
    dtype = _check(dy, y)
    return _rows(_softmax_grad_body, 1, out, (dy, y), axis, False, "SoftmaxGrad_13",
                 _compiled(dtype, "softmax_grad_rows"))


@_act_kernel("LogSoftmaxGrad", 2)
def log_softmax_grad(dy: np.ndarray, y: np.ndarray, *, out: np.ndarray | None = None,
                     axis: int = 1) -> np.ndarray:
    """Pre-opset-13: ``dX = dY - exp(Y) ⊙ Σ dY``, the sum over all axes ``>= axis``."""
    dtype = _check(dy, y)
    return _rows(_log_softmax_grad_body, 1, out, (dy, y), axis, True, "LogSoftmaxGrad",
                 _compiled(dtype, "log_softmax_grad_rows"))


@_act_kernel("LogSoftmaxGrad_13", 2)
def log_softmax_grad_13(dy: np.ndarray, y: np.ndarray, *, out: np.ndarray | None = None,
                        axis: int = -1) -> np.ndarray:
    """``dX = dY - exp(Y) ⊙ Σ_axis dY``, the sum over the single axis ``axis``."""
    dtype = _check(dy, y)
    return _rows(_log_softmax_grad_body, 1, out, (dy, y), axis, False, "LogSoftmaxGrad_13",
                 _compiled(dtype, "log_softmax_grad_rows"))


# -- forward kernels (docs/ops.md) -------------------------------------------------------------


@_act_kernel("Relu", 1)
def relu(x: np.ndarray, *, out: np.ndarray | None = None) -> np.ndarray:
    """``max(x, 0)`` (NaN stays NaN)."""
    _check(x)
    return _elementwise(lambda o, x, s: np.maximum(x, 0.0, out=o), 0, out, x)


@kernel("Tanh", inplace=True, ufunc=np.tanh)
def tanh(x: np.ndarray, *, out: np.ndarray | None = None) -> np.ndarray:
    _check(x)
    return _elementwise(lambda o, x, s: np.tanh(x, out=o), 0, out, x)


def _sigmoid_body64(o: np.ndarray, x: np.ndarray, s: list[np.ndarray]) -> None:
    e, m = s[0], s[1]
    np.abs(x, out=e)
    np.negative(e, out=e)
    np.greater_equal(x, 0.0, out=m)
    _sigmoid_pair64(e, m, o, None)


def _sigmoid_body32(o: np.ndarray, x: np.ndarray, s: list[np.ndarray]) -> None:
    e = s[0]
    np.clip(x, -_W32, _W32, out=e)
    np.multiply(e, -_LOG2E, out=e)
    np.exp2(e, out=e)
    np.add(e, 1.0, out=e)
    np.divide(1.0, e, out=o)


@_act_kernel("Sigmoid", 1)
def sigmoid(x: np.ndarray, *, out: np.ndarray | None = None) -> np.ndarray:
    """``1 / (1 + exp(-x))``."""
    dtype = _check(x)
    if dtype == np.float32:
        return _elementwise(_sigmoid_body32, 1, out, x, fast=_compiled(dtype, "sigmoid"))
    return _elementwise(_sigmoid_body64, 2, out, x)


@_act_kernel("LeakyRelu", 1)
def leaky_relu(x: np.ndarray, *, out: np.ndarray | None = None, alpha: float = 0.01) -> np.ndarray:
    """``x`` if ``x > 0`` else ``alpha·x`` (for every alpha, signed zeros and NaN included):
    ``x·1`` or ``x·alpha``, exactly one of the two branches."""
    dtype = _check(x)
    alpha = _alpha(alpha, "LeakyRelu")
    body = _leaky_body(alpha)

    def body1(o: np.ndarray, x: np.ndarray, s: list[np.ndarray]) -> None:
        body(o, x, x, s)

    return _elementwise(body1, 2, out, x, fast=_compiled(dtype, "leaky_relu"), fast_args=_f32(dtype, alpha))


@_act_kernel("QuickGelu", 1)
def quick_gelu(x: np.ndarray, *, out: np.ndarray | None = None, alpha: float = 1.702) -> np.ndarray:
    """``x ⊙ σ(alpha·x)``."""
    dtype = _check(x)
    alpha = _alpha(alpha, "QuickGelu")
    if dtype == np.float32:
        bound = _quick_gelu_bound(alpha)
        zero_side = np.maximum if alpha > 0.0 else np.minimum

        def body32(o: np.ndarray, x: np.ndarray, s: list[np.ndarray]) -> None:
            z, e = s[0], s[1]
            _quick_gelu_e32(x, alpha, z, None, e)
            np.add(e, 1.0, out=e)
            # x / (1 + exp(-alpha x)); x clipped on the side where σ saturates to 0 (so even
            # x = -1e38 gives a tiny result), kept where σ saturates to 1
            zero_side(x, -bound if alpha > 0.0 else bound, out=z)
            np.divide(z, e, out=o)

        return _elementwise(body32, 2, out, x, fast=_compiled(dtype, "quick_gelu"),
                            fast_args=_f32(dtype, -alpha * _LOG2E, bound, -bound if alpha > 0.0 else bound))

    def body64(o: np.ndarray, x: np.ndarray, s: list[np.ndarray]) -> None:
        v, sig, _ = _quick_gelu_sig64(x, alpha, s, False)
        if alpha != 0.0:  # x clipped where σ is exactly 0, so x = ∓inf gives 0, not NaN
            bound = _XCLIP / abs(alpha)
            (np.maximum if alpha > 0.0 else np.minimum)(x, -bound if alpha > 0.0 else bound, out=v)
            x = v
        np.multiply(x, sig, out=o)

    return _elementwise(body64, 8, out, x)


@_act_kernel("Gelu", 1)
def gelu(x: np.ndarray, *, out: np.ndarray | None = None) -> np.ndarray:
    """``x ⊙ Φ(x)``, the exact (erf) GELU."""
    dtype = _check(x)

    def body(o: np.ndarray, x: np.ndarray, s: list[np.ndarray]) -> None:
        p, m, z = _gelu_h(x, s, False)
        _mirror(p, m, s[4])  # Φ(x)
        np.maximum(x, z, out=z)  # x, but clipped on the saturated-to-0 side
        np.multiply(z, p, out=o)

    return _elementwise(body, _n_gelu_scratch(dtype), out, x, fast=_compiled(dtype, "gelu"))


@_act_kernel("FastGelu", 1)
def fast_gelu(x: np.ndarray, *, out: np.ndarray | None = None) -> np.ndarray:
    """``½x(1 + tanh(k(x + c x³)))`` = ``x ⊙ σ(2k(x + c x³))``."""
    dtype = _check(x)
    if dtype == np.float32:
        def body32(o: np.ndarray, x: np.ndarray, s: list[np.ndarray]) -> None:
            z, e = s[0], s[2]
            _fast_gelu_e32(x, z, s[1], e)
            np.add(e, 1.0, out=e)
            np.maximum(x, -_X32_FAST, out=z)  # clipped on the saturated-to-0 side only
            np.divide(z, e, out=o)  # x / (1 + exp(-w))

        return _elementwise(body32, 3, out, x, fast=_compiled(dtype, "fast_gelu"))

    def body64(o: np.ndarray, x: np.ndarray, s: list[np.ndarray]) -> None:
        sig, _, _ = _fast_gelu_sig64(x, s, False)
        np.multiply(x, sig, out=o)

    return _elementwise(body64, 4, out, x)


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


@_act_kernel("Softmax", 1)
def softmax(x: np.ndarray, *, out: np.ndarray | None = None, axis: int = -1) -> np.ndarray:
    """``exp(x - max) / Σ exp(x - max)`` over the single axis ``axis``."""
    dtype = _check(x)
    return _rows(_softmax_body, 1, out, (x,), axis, False, "Softmax",
                 _compiled(dtype, "softmax_rows"))


@_act_kernel("LogSoftmax", 1)
def log_softmax(x: np.ndarray, *, out: np.ndarray | None = None, axis: int = -1) -> np.ndarray:
    """``(x - max) - log Σ exp(x - max)`` over the single axis ``axis``."""
    dtype = _check(x)
    return _rows(_log_softmax_body, 2, out, (x,), axis, False, "LogSoftmax",
                 _compiled(dtype, "log_softmax_rows"))
