"""Kernels of the logic family and the extremes (``gradir/ops/logic.py``, ``gradir/ops/elementary.py``) that are
not generated from a formula: Cast, the variadic Max and Min, ReduceMax.

Each is element by element (or NumPy's ``max`` over axes, which compares and never rounds), so its
bits do not depend on the thread count or on how the rows are split.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from ....ir.types import DType
from ....ops.logic import CastOp
from ....ops.elementary import MaxOp, MinOp, ReduceMaxOp
from .registry import kernel


@kernel(CastOp)
def cast(x: np.ndarray, *, to: str, out: Optional[np.ndarray] = None) -> np.ndarray:
    """NumPy's conversion (C's: float to integer truncates toward zero, nonzero is true)."""
    if out is None:
        out = np.empty(x.shape, DType(to).numpy)
    with np.errstate(invalid="ignore", over="ignore"):
        np.copyto(out, x, casting="unsafe")
    return out


def _extreme(ufunc: np.ufunc, xs: tuple, out: Optional[np.ndarray]) -> np.ndarray:
    """``((x0 op x1) op x2) op ...`` with broadcasting, into ``out`` (which may be an operand: it is read
    only by the first step, or the result is made elsewhere and copied)."""
    if len(xs) == 1:
        if out is None:
            return xs[0].copy()
        if out is not xs[0]:
            np.copyto(out, xs[0])
        return out
    shape = np.broadcast_shapes(*(x.shape for x in xs))
    late_alias = out is not None and any(np.shares_memory(out, x) for x in xs[2:])
    acc = ufunc(xs[0], xs[1], out=None if late_alias else out)
    if acc.shape != shape:  # a later operand broadcasts the first two up
        acc = np.broadcast_to(acc, shape).copy()
    for x in xs[2:]:
        ufunc(acc, x, out=acc)
    if out is not None and acc is not out:
        np.copyto(out, acc)
        return out
    return acc


@kernel(MaxOp, inplace=True)
def max_(*xs: np.ndarray, out: Optional[np.ndarray] = None) -> np.ndarray:
    return _extreme(np.maximum, xs, out)


@kernel(MinOp, inplace=True)
def min_(*xs: np.ndarray, out: Optional[np.ndarray] = None) -> np.ndarray:
    return _extreme(np.minimum, xs, out)


@kernel(ReduceMaxOp)
def reduce_max(x: np.ndarray, *, axes=None, keepdims: bool = False, out: Optional[np.ndarray] = None):
    dims = tuple(range(x.ndim)) if axes is None else tuple(a % x.ndim for a in axes) if x.ndim else ()
    r = np.max(x, axis=dims, keepdims=keepdims)
    if out is None:
        return np.asarray(r)
    out[...] = r
    return out
