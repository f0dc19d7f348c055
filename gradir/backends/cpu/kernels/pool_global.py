"""Kernels of ``GlobalAveragePool`` and ``GlobalMaxPool`` (``gradir/ops/pool.py``), in NumPy: each image
[N, C, D1 * D2 * ...] reduced along its last axis (NumPy's pairwise sum, a fixed order: no thread split).
Float32 sums in Float32, as ONNX Runtime's kernel."""

from __future__ import annotations

from typing import Optional

import numpy as np

from ....ops.pool import GlobalAveragePoolOp, GlobalMaxPoolOp
from .registry import kernel

__all__ = ["global_average_pool", "global_max_pool"]


def _images(X: np.ndarray) -> np.ndarray:
    return X.reshape(X.shape[:2] + (-1,))


def _put(out: Optional[np.ndarray], y: np.ndarray, X: np.ndarray) -> np.ndarray:
    y = y.reshape(X.shape[:2] + (1,) * (X.ndim - 2))
    if out is None:
        return y
    np.copyto(out, y)
    return out


@kernel(GlobalAveragePoolOp)
def global_average_pool(X: np.ndarray, *, out: Optional[np.ndarray] = None) -> np.ndarray:
    """Y (docs/ops.md)."""
    x = _images(X)
    return _put(out, x.sum(axis=-1, dtype=X.dtype) / X.dtype.type(x.shape[-1]), X)


@kernel(GlobalMaxPoolOp)
def global_max_pool(X: np.ndarray, *, out: Optional[np.ndarray] = None) -> np.ndarray:
    """Y (docs/ops.md)."""
    return _put(out, _images(X).max(axis=-1), X)
