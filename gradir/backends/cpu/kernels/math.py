"""Kernels for the general forward ops (docs/ops.md): arithmetic, MatMul, layout, reductions.

Element-wise kernels write into ``out`` (which may be one of their operands:
the buffer plan reuses a dying operand) and split large arrays into row chunks
over the kernel threads (``parallel_rows``).
"""

from __future__ import annotations

from typing import Callable, Optional

import numpy as np

from ....ops.math import (AddOp, DivOp, ExpOp, FusedMatMulOp, IdentityOp, LogOp, MatMulOp, MulOp, NegOp, ReduceMeanOp,
                          ReduceSumOp, ReshapeOp, SqrtOp, SubOp, SumOp, TransposeOp)
from ....ops.matmul_layout import operand_perm
from . import blocked
from .registry import kernel
from .parallel import parallel_rows


def _elementwise(ufunc: Callable, *arrays: np.ndarray, out: Optional[np.ndarray], dtype=None) -> np.ndarray:
    """Apply a NumPy ufunc (with broadcasting) in row chunks of the result."""
    shape = np.broadcast_shapes(*(a.shape for a in arrays))
    if out is None:
        out = np.empty(shape, dtype=dtype or np.result_type(*arrays))
    if out.ndim == 0 or out.size < (1 << 16):
        ufunc(*arrays, out=out)
        return out
    # row chunks along axis 0 of the result; operands broadcast along it are passed whole
    views = [a if a.ndim < out.ndim or a.shape[0] == 1 else None for a in arrays]
    n = out.shape[0]
    row_bytes = out.itemsize * (out.size // n) * (len(arrays) + 1)

    def body(lo: int, hi: int) -> None:
        args = [a if v is not None else a[lo:hi] for a, v in zip(arrays, views)]
        ufunc(*args, out=out[lo:hi])

    if n == 1:  # one giant row: chunk the flattened array instead (shapes are identical then)
        ufunc(*arrays, out=out)
        return out
    parallel_rows(n, row_bytes, body)
    return out


def _ufunc_kernel(op: type, ufunc: np.ufunc) -> None:
    """Register an element-wise op that is exactly one NumPy ufunc (with broadcasting)."""
    name = op.op_name

    def fn(*operands: np.ndarray, out: Optional[np.ndarray] = None) -> np.ndarray:
        return _elementwise(ufunc, *operands, out=out)

    fn.__name__ = fn.__qualname__ = name.lower()
    fn.__doc__ = f"{name}: ``np.{ufunc.__name__}``, split into row chunks over the kernel threads."
    kernel(op, inplace=True, ufunc=ufunc, splits=True)(fn)


for _op, _ufunc in [(AddOp, np.add), (SubOp, np.subtract), (MulOp, np.multiply), (DivOp, np.divide),
                    (NegOp, np.negative), (ExpOp, np.exp), (LogOp, np.log), (SqrtOp, np.sqrt)]:
    _ufunc_kernel(_op, _ufunc)


@kernel(IdentityOp, inplace=True)
def identity(x: np.ndarray, *, out: Optional[np.ndarray] = None) -> np.ndarray:
    if out is x:
        return out
    return _copy(x, out)


def _copy(x: np.ndarray, out: Optional[np.ndarray]) -> np.ndarray:
    if out is None:
        return x.copy()
    np.copyto(out, x)
    return out


@kernel(SumOp, inplace=True, splits=True)
def sum_(*xs: np.ndarray, out: Optional[np.ndarray] = None) -> np.ndarray:
    if len(xs) == 1:
        return _copy(xs[0], out) if out is not xs[0] else out
    # always ((x0 + x1) + x2) + ...: the same bits whether or not ``out`` is an operand.  If ``out``
    # is an operand that is read after the first add, accumulate elsewhere and copy at the end.
    late_alias = out is not None and any(np.shares_memory(out, x) for x in xs[2:])
    acc = _elementwise(np.add, xs[0], xs[1], out=None if late_alias else out)
    for x in xs[2:]:
        _elementwise(np.add, acc, x, out=acc)
    if late_alias:
        np.copyto(out, acc)
        return out
    return acc


@kernel(MatMulOp, blas=True, warm=blocked.warm)
def matmul(a: np.ndarray, b: np.ndarray, *, out: Optional[np.ndarray] = None) -> np.ndarray:
    """``np.matmul`` in blocks fixed by the shapes, on the cores the step was given (``blocked``;
    a batch of matrices times one matrix is one 2-D product over the batch's rows when they merge
    into one axis without a copy: NumPy would call BLAS once per matrix of the batch, 3x slower
    for [100, 64, 512] @ [512, 256], and slower still with a transposed view)."""
    if out is None:
        return np.asarray(blocked.matmul(a, b))  # vector @ vector is a rank-0 array, not a NumPy scalar
    return blocked.matmul(a, b, out=out)


@kernel(FusedMatMulOp, blas=True, warm=blocked.warm)
def fused_matmul(a: np.ndarray, b: np.ndarray, *, alpha: float = 1.0, transA: int = 0, transB: int = 0,
                 transBatchA: int = 0, transBatchB: int = 0, out: Optional[np.ndarray] = None) -> np.ndarray:
    """``alpha · (A' @ B')``: the operands laid out as strided views (``matmul_layout``), which
    NumPy hands to BLAS with a transpose flag and leading dimension (no copy); then ``alpha``
    multiplies the product in place, as a ``Scale`` after a ``MatMul`` would."""
    pa = operand_perm(a.ndim, bool(transA), bool(transBatchA))
    pb = operand_perm(b.ndim, bool(transB), bool(transBatchB))
    c = matmul(a if pa is None else a.transpose(pa), b if pb is None else b.transpose(pb), out=out)
    if alpha != 1.0:
        np.multiply(c, c.dtype.type(alpha), out=c)
    return c


@kernel(TransposeOp)
def transpose(x: np.ndarray, *, perm=None, out: Optional[np.ndarray] = None) -> np.ndarray:
    t = np.transpose(x, perm)
    if out is None:
        return np.array(t, order="C")
    np.copyto(out, t)
    return out


@kernel(ReshapeOp)
def reshape(x: np.ndarray, *, shape, out: Optional[np.ndarray] = None) -> np.ndarray:
    if out is None:
        return np.array(x, copy=True).reshape(shape)
    np.copyto(out.reshape(x.shape), x)
    return out


def _axes(axes, ndim: int):
    return tuple(range(ndim)) if axes is None else tuple(a % ndim for a in axes) if ndim else ()


def _reduce(fn: Callable, x: np.ndarray, axes, keepdims: bool, out: Optional[np.ndarray]) -> np.ndarray:
    r = fn(x, axis=_axes(axes, x.ndim), keepdims=keepdims, dtype=x.dtype)
    if out is None:
        return np.asarray(r)
    out[...] = r
    return out


@kernel(ReduceSumOp)
def reduce_sum(x: np.ndarray, *, axes=None, keepdims: bool = False, out: Optional[np.ndarray] = None):
    return _reduce(np.sum, x, axes, keepdims, out)


@kernel(ReduceMeanOp)
def reduce_mean(x: np.ndarray, *, axes=None, keepdims: bool = False, out: Optional[np.ndarray] = None):
    return _reduce(np.mean, x, axes, keepdims, out)
