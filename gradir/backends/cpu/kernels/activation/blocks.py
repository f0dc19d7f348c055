"""The machinery every activation kernel runs on (see the package's docstring): operand checks,
per-thread scratch, and the walks over fixed-size blocks (element-wise) or whole rows (softmax
families) that NumPy bodies or compiled kernels fill, the blocks dealt to threads."""

from __future__ import annotations

import math
import threading
from collections.abc import Callable

import numpy as np

from .....ops.common import finite
from .. import jit
from ..registry import kernel
from ..parallel import parallel_rows

__all__ = ["BLOCK_BYTES", "act_kernel", "check_alpha", "check_operands", "compiled", "f32_args", "run_elementwise",
           "run_rows"]

#: Bytes per operand in one block: large enough that per-call overhead (and the GIL
#: hand-over between workers) stays small, small enough that a block's passes run in L2.
BLOCK_BYTES = 1 << 19

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


def check_operands(*arrays: np.ndarray) -> np.dtype:
    dtype = arrays[0].dtype
    if dtype not in (np.float32, np.float64):
        raise TypeError(f"activation kernels take Float32 or Float64 operands, got {dtype}")
    for a in arrays[1:]:
        if a.dtype != dtype or a.shape != arrays[0].shape:
            raise ValueError(f"operands must share shape and dtype: {arrays[0].shape} {dtype} "
                             f"vs {a.shape} {a.dtype}")
    return dtype


def check_alpha(alpha: float, op: str) -> float:
    alpha = float(alpha)
    msg = finite(alpha)
    if msg:
        raise ValueError(f"{op}: alpha {msg}")
    return alpha


def f32_args(dtype: np.dtype, *values: float) -> tuple:
    """Scalar arguments of a compiled Float32 kernel (nothing for other dtypes, whose
    kernels are NumPy's); values beyond float32's range become ±inf without a warning."""
    if dtype != np.float32:
        return ()
    with np.errstate(over="ignore"):
        return tuple(np.float32(v) for v in values)


def compiled(dtype: np.dtype, name: str) -> Callable[..., None] | None:
    """The compiled Float32 kernel ``name`` of ``_jit_act``, or None (NumPy path)."""
    if dtype != np.float32:
        return None
    mod = jit.load("act")
    return None if mod is None else getattr(mod, name)


def act_kernel(op: type, arity: int, scalar: str | None = None) -> Callable[[Callable], Callable]:
    """``@kernel(op, inplace=True)`` with a ``warm`` hook (``gradir.backends.cpu.kernels``): calling the
    kernel once on 1x1 Float32 arrays builds its compiled path, or loads it from numba's cache.
    ``scalar``: the ``_jit_act`` function that computes one element of the compiled Float32 path
    from the operands alone (a fused loop calls it, see ``KernelInfo.scalar``)."""

    def warm(dtype: np.dtype) -> None:
        if np.dtype(dtype) == np.float32 and jit.load("act") is not None:
            from ..registry import KERNELS
            KERNELS[op].fn(*[np.full((1, 1), 0.5, np.float32)] * arity)

    return kernel(op, inplace=True, warm=warm, scalar=scalar, splits=True)


def _overlaps_partly(out: np.ndarray, operands: tuple[np.ndarray, ...]) -> bool:
    """True when ``out`` shares memory with an operand other than as the very same array
    layout (in place is fine; a shifted or differently strided view is not)."""
    p = out.__array_interface__["data"][0]
    for a in operands:
        if np.may_share_memory(out, a) and not (
                a.__array_interface__["data"][0] == p and a.strides == out.strides and a.shape == out.shape):
            return True
    return False


def run_elementwise(body: Callable[..., None], n_scratch: int, out: np.ndarray | None,
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
        np.copyto(out, run_elementwise(body, n_scratch, None, *operands, fast=fast, fast_args=fast_args))
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


def run_rows(body: Callable[..., None], n_scratch: int, out: np.ndarray | None,
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
        np.copyto(out, run_rows(body, n_scratch, None, operands, axis, flatten, op, fast))
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
