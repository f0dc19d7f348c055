"""Kernels of batch normalization (``gradir/ops/batch_norm.py``), in NumPy.

X [N, C, D1, ...] is viewed as channel rows [C, M] (M = N * D1 * ..., a float64 copy, contiguous): every
statistic of a channel is a float64 NumPy reduction over its row alone (a pairwise sum of a contiguous vector),
so a channel's results depend neither on the other channels nor on how channels are split over threads or
shards.  Results are rounded to X's dtype once, at the end.  A Float32 op's epsilon and momentum are the
float32s ONNX stores (and ORT uses): the same bits after an ONNX round trip.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from ....ops.batch_norm import BatchNormalizationGradOp, BatchNormalizationOp, BatchNormInternalOp
from .parallel import parallel_rows
from .registry import kernel

__all__ = ["batch_normalization", "batch_norm_internal", "batch_normalization_grad"]


def _rows(x: np.ndarray) -> np.ndarray:
    """[C, M] float64, contiguous."""
    n, c = x.shape[0], x.shape[1]
    return np.array(np.moveaxis(x.reshape(n, c, -1), 1, 0), dtype=np.float64, order="C").reshape(c, -1)  # a copy


def _unrows(r: np.ndarray, x: np.ndarray, out: Optional[np.ndarray]) -> np.ndarray:
    """Rows [C, M] back to X's layout and dtype, into ``out`` when it fits."""
    n, c = x.shape[0], x.shape[1]
    y = np.moveaxis(r.reshape(c, n, -1), 0, 1).reshape(x.shape)
    if out is not None and out.shape == x.shape and out.dtype == x.dtype:
        np.copyto(out, y)
        return out
    return y.astype(x.dtype)


def _vec(v: np.ndarray, dtype: np.dtype, out: Optional[np.ndarray]) -> np.ndarray:
    if out is not None and out.shape == v.shape and out.dtype == dtype:
        np.copyto(out, v)
        return out
    return v.astype(dtype)


def _const(value: float, dtype: np.dtype) -> float:
    return float(np.float32(value)) if dtype == np.float32 else float(value)


def _forward(X: np.ndarray, scale: np.ndarray, B: np.ndarray, input_mean: np.ndarray, input_var: np.ndarray,
             out: Optional[tuple], epsilon: float, momentum: float, training: bool, saved: bool) -> tuple:
    eps, mom = _const(epsilon, X.dtype), _const(momentum, X.dtype)
    x = _rows(X)
    c = x.shape[0]
    o = out if out is not None else (None,) * 5
    if training:
        mean, var = np.empty(c), np.empty(c)
    else:
        mean, var = input_mean.astype(np.float64), input_var.astype(np.float64)
    inv = np.empty(c)
    s64, b64 = scale.astype(np.float64), B.astype(np.float64)

    def rows(lo: int, hi: int) -> None:
        r = x[lo:hi]
        if training:
            m = r.mean(axis=1, keepdims=True)
            r -= m
            mean[lo:hi] = m[:, 0]
            var[lo:hi] = (r * r).mean(axis=1)
        else:
            r -= mean[lo:hi, None]
        inv[lo:hi] = 1 / np.sqrt(var[lo:hi] + eps)
        r *= (inv[lo:hi] * s64[lo:hi])[:, None]
        r += b64[lo:hi, None]

    parallel_rows(c, 8 * x.shape[1] * 3, rows)
    y = _unrows(x, X, o[0])
    if training:
        run_mean = input_mean.astype(np.float64) * mom + mean * (1 - mom)
        run_var = input_var.astype(np.float64) * mom + var * (1 - mom)
    else:
        run_mean, run_var = mean, var
    res = [y, _vec(run_mean, X.dtype, o[1]), _vec(run_var, X.dtype, o[2])]
    if saved:
        res += [_vec(mean, X.dtype, o[3]), _vec(inv, X.dtype, o[4])]
    return tuple(res)


@kernel(BatchNormalizationOp)
def batch_normalization(X: np.ndarray, scale: np.ndarray, B: np.ndarray, input_mean: np.ndarray,
                        input_var: np.ndarray, *, out: Optional[tuple] = None, epsilon: float = 1e-5,
                        momentum: float = 0.9, training_mode: int = 0) -> tuple:
    """(Y, running_mean, running_var) (docs/ops.md)."""
    return _forward(X, scale, B, input_mean, input_var, out, epsilon, momentum, bool(training_mode), False)


@kernel(BatchNormInternalOp)
def batch_norm_internal(X: np.ndarray, scale: np.ndarray, B: np.ndarray, input_mean: np.ndarray,
                        input_var: np.ndarray, *, out: Optional[tuple] = None, epsilon: float = 1e-5,
                        momentum: float = 0.9, training_mode: int = 1) -> tuple:
    """(Y, running_mean, running_var, saved_mean, saved_inv_std) (docs/ops.md)."""
    return _forward(X, scale, B, input_mean, input_var, out, epsilon, momentum, True, True)


@kernel(BatchNormalizationGradOp)
def batch_normalization_grad(dY: np.ndarray, X: np.ndarray, scale: np.ndarray, saved_mean: np.ndarray,
                             saved_inv_std: np.ndarray, *, out: Optional[tuple] = None,
                             epsilon: float = 1e-5) -> tuple:
    """(dX, dscale, dB) (docs/ops.md)."""
    x, dy = _rows(X), _rows(dY)
    c, m = x.shape
    o = out if out is not None else (None,) * 3
    mean, inv, s64 = (a.astype(np.float64) for a in (saved_mean, saved_inv_std, scale))
    db, ds = np.empty(c), np.empty(c)

    def rows(lo: int, hi: int) -> None:
        xh = x[lo:hi]
        xh -= mean[lo:hi, None]
        xh *= inv[lo:hi, None]
        g = dy[lo:hi]
        db[lo:hi] = g.sum(axis=1)
        ds[lo:hi] = (g * xh).sum(axis=1)
        # dX = scale * inv / M * (M * dY - dB - x̂ * dscale), in place of x̂
        xh *= -ds[lo:hi, None]
        xh += m * g
        xh -= db[lo:hi, None]
        xh *= (s64[lo:hi] * inv[lo:hi] / m)[:, None]

    parallel_rows(c, 8 * m * 3, rows)
    return _unrows(x, X, o[0]), _vec(ds, scale.dtype, o[1]), _vec(db, scale.dtype, o[2])
