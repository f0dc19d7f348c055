"""Kernels of the normalization family (``gradir/ops/norm.py``): ONNX ``LayerNormalization`` and ORT's
``LayerNormalizationGrad``, in NumPy, in the operands' dtype.

X is viewed as rows [N, D] (the axes before ``axis`` flattened into N, the normalized ones into D); every
statistic of a row is a NumPy reduction over that row alone, so a row's results do not depend on how
many rows there are (the same bits on any thread count and on any split of the rows).
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from ....ops.norm import LayerNormalizationGradOp, LayerNormalizationOp
from . import kernel

__all__ = ["layer_normalization", "layer_normalization_grad"]


def _rows(x: np.ndarray, axis: int) -> tuple[int, np.ndarray]:
    start = axis % x.ndim
    n = int(np.prod(x.shape[:start], dtype=np.int64))
    return start, x.reshape(n, -1)


def _store(r: np.ndarray, out: Optional[np.ndarray], shape: tuple) -> np.ndarray:
    r = r.reshape(shape)
    if out is None:
        return np.ascontiguousarray(r)
    np.copyto(out, r)
    return out


@kernel(LayerNormalizationOp)
def layer_normalization(X: np.ndarray, Scale: np.ndarray, B: Optional[np.ndarray] = None, *,
                        out: Optional[tuple] = None, axis: int = -1,
                        epsilon: float = 1e-5) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(Y, Mean, InvStdDev) (docs/ops.md)."""
    start, x = _rows(X, axis)
    dt = X.dtype
    mean = x.mean(axis=1, keepdims=True)
    c = x - mean
    inv = 1 / np.sqrt((c * c).mean(axis=1, keepdims=True) + np.asarray(epsilon, dt))
    y = c * inv * Scale.reshape(1, -1)
    if B is not None:
        y += B.reshape(1, -1)
    o = out if out is not None else (None, None, None)
    stats = tuple(X.shape[:start]) + (1,) * (X.ndim - start)
    return _store(y, o[0], X.shape), _store(mean, o[1], stats), _store(inv, o[2], stats)


@kernel(LayerNormalizationGradOp)
def layer_normalization_grad(dY: np.ndarray, X: np.ndarray, Scale: np.ndarray, Mean: np.ndarray,
                             InvStdDev: np.ndarray, *, out: Optional[tuple] = None,
                             axis: int = -1) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(dX, dScale, dB) (docs/ops.md)."""
    _, x = _rows(X, axis)
    _, dy = _rows(dY, axis)
    mean, inv = Mean.reshape(x.shape[0], 1), InvStdDev.reshape(x.shape[0], 1)
    xhat = (x - mean) * inv
    g = dy * Scale.reshape(1, -1)
    dx = inv * (g - g.mean(axis=1, keepdims=True) - xhat * (g * xhat).mean(axis=1, keepdims=True))
    o = out if out is not None else (None, None, None)
    return (_store(dx, o[0], X.shape), _store((dy * xhat).sum(axis=0), o[1], Scale.shape),
            _store(dy.sum(axis=0), o[2], Scale.shape))
