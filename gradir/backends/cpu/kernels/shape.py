"""Kernels for the shape helpers of ``gradir/ops/shape.py`` (used by derived gradients).

Every kernel returns a fresh array (or writes ``out``), never a view of an operand,
so the buffer plan may reuse an operand's buffer afterwards.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from ....ops.shape import BroadcastToOp, FlattenOp, ReduceSumToOp, ScaleOp, UnsqueezeOp, ZerosLikeOp
from ....ops.shape import sum_to_axes
from .registry import kernel


def _result(r: np.ndarray, out: Optional[np.ndarray]) -> np.ndarray:
    if out is None:
        return np.array(r, copy=True)
    np.copyto(out, r)
    return out


@kernel(ReduceSumToOp)
def reduce_sum_to(x: np.ndarray, like: np.ndarray, *, out: Optional[np.ndarray] = None) -> np.ndarray:
    if x.shape == like.shape:
        return _result(x, out)
    axes, lead = sum_to_axes(x.shape, like.shape)
    r = np.sum(x, axis=axes, keepdims=True, dtype=x.dtype)
    return _result(r.reshape(like.shape), out)


@kernel(BroadcastToOp)
def broadcast_to(x: np.ndarray, like: np.ndarray, *, out: Optional[np.ndarray] = None) -> np.ndarray:
    return _result(np.broadcast_to(x, like.shape), out)


@kernel(UnsqueezeOp)
def unsqueeze(x: np.ndarray, *, axes, out: Optional[np.ndarray] = None) -> np.ndarray:
    return _result(np.expand_dims(x, tuple(axes)), out)


@kernel(FlattenOp)
def flatten(x: np.ndarray, *, axis: int, out: Optional[np.ndarray] = None) -> np.ndarray:
    """Y (docs/ops.md); a copy here (the schedule runs a static Flatten as a view instead: ``Op.VIEW``)."""
    a = axis + x.ndim if axis < 0 else axis
    return _result(x.reshape(int(np.prod(x.shape[:a], dtype=np.int64)), -1), out)


@kernel(ScaleOp, inplace=True)
def scale(x: np.ndarray, *, factor: float, out: Optional[np.ndarray] = None) -> np.ndarray:
    return np.multiply(x, x.dtype.type(factor), out=out)


@kernel(ZerosLikeOp)
def zeros_like(x: np.ndarray, *, out: Optional[np.ndarray] = None) -> np.ndarray:
    if out is None:
        return np.zeros_like(x)
    out.fill(0)
    return out
