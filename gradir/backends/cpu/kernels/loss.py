"""Kernels of the loss family (``gradir/ops/loss.py``): ONNX ``SoftmaxCrossEntropyLoss`` and ORT's
``SoftmaxCrossEntropyLossGrad``, in Float32 and Float64.

* ``log_prob`` is the ``LogSoftmax`` kernel's over axis 1 (``max``-shifted, so no overflow at
  |x| = 1000), bit for bit what ``LogSoftmax(scores, axis=1)`` gives.
* Every sum runs in a fixed order that depends only on the shapes (NumPy's pairwise sum of a
  contiguous vector; the gradient's sum of weights left to right, as ORT's loop), never on the
  thread count.
* A label that is neither ``ignore_index`` nor in ``0..C-1`` is a ``ValueError`` naming its
  position and value (ORT reads out of bounds there); the runtime reports it at the op's line.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from ....ops.loss import (SoftmaxCrossEntropyGradOp, SoftmaxCrossEntropyLossGradOp, SoftmaxCrossEntropyLossOp,
                          SoftmaxCrossEntropyOp, SparseSoftmaxCrossEntropyGradOp, SparseSoftmaxCrossEntropyOp)
from . import jit
from .registry import kernel
from .activation import log_softmax
from .parallel import parallel_rows

__all__ = ["softmax_cross_entropy_loss", "softmax_cross_entropy_loss_grad", "targets"]


def _check(op: str, x: np.ndarray, labels: np.ndarray, weights: Optional[np.ndarray]) -> tuple[int, int, int]:
    """(N, C, D) of scores ``x`` [N, C, d...] and ``labels`` [N, d...] (D the product of the d's)."""
    if x.dtype not in (np.float32, np.float64):
        raise TypeError(f"{op}: scores must be Float32 or Float64, got {x.dtype}")
    if labels.dtype not in (np.int32, np.int64):
        raise TypeError(f"{op}: labels must be Int32 or Int64, got {labels.dtype}")
    if x.ndim < 2 or labels.shape != x.shape[:1] + x.shape[2:]:
        raise ValueError(f"{op}: labels of shape {list(labels.shape)} do not fit scores of shape {list(x.shape)} "
                         "(expected the scores' shape without axis 1)")
    if weights is not None and (weights.dtype != x.dtype or weights.shape != (x.shape[1],)):
        raise ValueError(f"{op}: weights must be {x.dtype} [{x.shape[1]}], got {weights.dtype} {list(weights.shape)}")
    n, c = x.shape[0], x.shape[1]
    return n, c, labels.size // n if n else 0


def targets(op: str, labels: np.ndarray, n: int, c: int, ignore_index: Optional[int], what: str = "scores",
            ignored: str = "ignore_index={}") -> tuple[np.ndarray, np.ndarray]:
    """(labels as Int64 [N, D] with ignored ones replaced by 0, mask of the targets not ignored).
    Raises ``ValueError`` for a label that is not ignored and not a class index (``what`` names the
    operand whose axis 1 holds the classes; ``ignored`` says how the ignored value was chosen)."""
    lab = labels.reshape(n, -1).astype(np.int64)
    keep = np.ones(lab.shape, bool) if ignore_index is None else lab != ignore_index
    bad = keep & ((lab < 0) | (lab >= c))
    if bad.any():
        k = int(np.argmax(bad.reshape(-1)))
        where = list(np.unravel_index(k, labels.shape))
        more = int(bad.sum()) - 1
        allowed = f"0..{c - 1}" + ("" if ignore_index is None else " or " + ignored.format(ignore_index))
        raise ValueError(f"{op}: label {int(lab.reshape(-1)[k])} at labels{[int(i) for i in where]} is out of range: "
                         f"expected {allowed} ({what} has {c} classes on axis 1)"
                         + (f"; {more} more label{'s are' if more > 1 else ' is'} out of range" if more else ""))
    return np.where(keep, lab, 0), keep


def _store(r: np.ndarray, out: Optional[np.ndarray]) -> np.ndarray:
    if out is None:
        return r
    np.copyto(out, r)
    return out


@kernel(SoftmaxCrossEntropyLossOp)
def softmax_cross_entropy_loss(scores: np.ndarray, labels: np.ndarray, weights: Optional[np.ndarray] = None, *,
                               out: Optional[tuple] = None, reduction: str = "mean",
                               ignore_index: Optional[int] = None) -> tuple[np.ndarray, np.ndarray]:
    """(loss, log_prob) with ONNX's semantics (docs/ops.md)."""
    op = "SoftmaxCrossEntropyLoss"
    n, c, d = _check(op, scores, labels, weights)
    out_loss, out_lp = out if out is not None else (None, None)
    lab, keep = targets(op, labels, n, c, ignore_index)
    lp = log_softmax(scores, out=out_lp, axis=1)
    dtype = lp.dtype
    picked = np.take_along_axis(lp.reshape(n, c, d), lab[:, None, :], axis=1)[:, 0, :]
    loss = np.negative(picked)  # [N, D], a fresh array
    loss[~keep] = 0
    w = None
    if weights is not None:
        w = weights[lab]  # a copy
        w[~keep] = 0
        np.multiply(loss, w, out=loss)
    if reduction == "none":
        return _store(loss.reshape(labels.shape), out_loss), lp
    total = np.add.reduce(loss.reshape(-1), dtype=dtype)
    if reduction == "mean":
        if w is not None:
            denom = np.add.reduce(w.reshape(-1), dtype=dtype)
        else:
            denom = dtype.type(np.count_nonzero(keep) if ignore_index is not None else n * d)
        with np.errstate(divide="ignore", invalid="ignore"):  # every target ignored: 0/0 = NaN, as ONNX
            total = np.divide(total, denom, dtype=dtype)
    return _store(np.asarray(total, dtype), out_loss), lp


# out may be log_prob: each row is read before it is written
@kernel(SoftmaxCrossEntropyLossGradOp, inplace=True, splits=True)
def softmax_cross_entropy_loss_grad(dy: np.ndarray, log_prob: np.ndarray, label: np.ndarray,
                                    weight: Optional[np.ndarray] = None, *, out: Optional[np.ndarray] = None,
                                    reduction: str = "mean", ignore_index: Optional[int] = None) -> np.ndarray:
    """ORT's gradient: ``(exp(log_prob) - onehot(label)) * (weight[label] * dY')``, 0 for ignored targets."""
    op = "SoftmaxCrossEntropyLossGrad"
    n, c, d = _check(op, log_prob, label, weight)
    dtype = log_prob.dtype
    if dy.dtype != dtype:
        raise TypeError(f"{op}: dY must be {dtype} like log_prob, got {dy.dtype}")
    want = label.shape if reduction == "none" else ()
    if dy.shape != want:
        raise ValueError(f"{op}: dY has shape {list(dy.shape)}; expected {list(want)} for reduction={reduction!r}")
    lab, keep = targets(op, label, n, c, -1 if ignore_index is None else ignore_index, "log_prob",
                        "ignore_index={}" if ignore_index is not None else "{} (ORT's default ignore_index)")
    if reduction == "none":
        scale = dy.reshape(n, d)
        factor = weight[lab] * scale if weight is not None else scale
    else:
        s = dy[()]
        if reduction == "mean":
            if weight is not None:
                chosen = weight[lab[keep]]
                total = np.cumsum(chosen, dtype=dtype)[-1] if chosen.size else dtype.type(0)  # left to right
            else:
                total = dtype.type(np.count_nonzero(keep))
            if total != 0:
                s = np.divide(s, total, dtype=dtype)
        factor = weight[lab] * s if weight is not None else np.full((n, d), s, dtype)
    res = out if out is not None and out.flags.c_contiguous else np.empty(log_prob.shape, dtype)
    rv = jit.writable_out(res, op).reshape(n, c, d)
    lpv = np.ascontiguousarray(log_prob).reshape(n, c, d)

    compiled = jit.load("loss") if dtype == np.float32 and d == 1 else None
    if compiled is not None:  # one pass, vectorized exp (NumPy's float32 exp is scalar without AVX-512)
        f2 = np.ascontiguousarray(factor.reshape(n), dtype)
        lab2 = np.where(keep.reshape(n), lab.reshape(n), -1).astype(np.int64)
        r2, lp2 = rv.reshape(n, c), lpv.reshape(n, c)
        parallel_rows(n, 2 * c * dtype.itemsize,
                      lambda lo, hi: compiled.ce_grad_rows(r2[lo:hi], lp2[lo:hi], lab2[lo:hi], f2[lo:hi]))
        return _store(res, out) if res is not out else out

    def rows(lo: int, hi: int) -> None:  # every element on its own: any split gives the same bits
        r, kk, lb = rv[lo:hi], keep[lo:hi], lab[lo:hi]
        np.exp(lpv[lo:hi], out=r)
        nn, dd = np.nonzero(kk)
        r[nn, lb[nn, dd], dd] -= dtype.type(1)  # each target has one label: no repeated index
        np.multiply(r, factor[lo:hi, None, :], out=r)
        if not kk.all():
            np.moveaxis(r, 1, 2)[~kk] = 0  # exactly 0, even where exp(log_prob) is not finite

    parallel_rows(n, 3 * c * d * dtype.itemsize, rows)
    return _store(res, out) if res is not out else out


# -- ORT's training losses over the last axis: SoftmaxCrossEntropy, SparseSoftmaxCrossEntropy and their gradients --
def _rows(op: str, x: np.ndarray) -> tuple[int, int]:
    """(N, C) of logits or log_prob [..., C] (N the product of the other axes)."""
    if x.dtype not in (np.float32, np.float64):
        raise TypeError(f"{op}: logits must be Float32 or Float64, got {x.dtype}")
    if x.ndim < 1:
        raise ValueError(f"{op}: logits must be [..., C], got a scalar")
    c = x.shape[-1]
    return (x.size // c if c else 0), c


def _sparse_labels(op: str, x: np.ndarray, label: np.ndarray, weight: Optional[np.ndarray]) -> tuple:
    """(N, C, labels as Int64 [N], weights [N] or None), checked: a label outside 0..C-1 is a ValueError."""
    n, c = _rows(op, x)
    if label.dtype not in (np.int32, np.int64) or label.shape != x.shape[:-1]:
        raise ValueError(f"{op}: labels must be Int32 or Int64 {list(x.shape[:-1])}, got {label.dtype} "
                         f"{list(label.shape)}")
    if weight is not None and (weight.dtype != x.dtype or weight.shape != label.shape):
        raise ValueError(f"{op}: weights must be {x.dtype} {list(label.shape)}, got {weight.dtype} "
                         f"{list(weight.shape)}")
    lab, _ = targets(op, label.reshape(-1), n, c, None, "logits")
    return n, c, lab.reshape(-1), None if weight is None else weight.reshape(-1)


def _reduce_loss(per_row: np.ndarray, w: Optional[np.ndarray], n: int, reduction: str, shape: tuple,
                 out: Optional[np.ndarray]) -> np.ndarray:
    """The loss from each row's (a contiguous [N]): itself ("none"), its sum (NumPy's pairwise order, fixed by
    N), divided by the summed weights or by N ("mean")."""
    dtype = per_row.dtype
    if reduction == "none":
        return _store(per_row.reshape(shape), out)
    total = np.add.reduce(per_row, dtype=dtype)
    if reduction == "mean":
        denom = np.add.reduce(w, dtype=dtype) if w is not None else dtype.type(n)
        with np.errstate(divide="ignore", invalid="ignore"):
            total = np.divide(total, denom, dtype=dtype)
    return _store(np.asarray(total, dtype), out)


@kernel(SoftmaxCrossEntropyOp)
def softmax_cross_entropy(logits: np.ndarray, label: np.ndarray, *, out: Optional[tuple] = None,
                          reduction: str = "mean") -> tuple[np.ndarray, np.ndarray]:
    """(loss, log_prob): log_prob is LogSoftmax's over the last axis; each row's loss -sum(label * log_prob)."""
    op = "SoftmaxCrossEntropy"
    n, c = _rows(op, logits)
    if label.shape != logits.shape or label.dtype != logits.dtype:
        raise ValueError(f"{op}: label must be {logits.dtype} {list(logits.shape)}, got {label.dtype} "
                         f"{list(label.shape)}")
    out_loss, out_lp = out if out is not None else (None, None)
    lp = log_softmax(logits, out=out_lp, axis=-1)
    per_row = np.negative(np.sum(np.multiply(label, lp).reshape(n, c), axis=1, dtype=lp.dtype))
    return _reduce_loss(per_row, None, n, reduction, logits.shape[:-1], out_loss), lp


@kernel(SoftmaxCrossEntropyGradOp, inplace=True)
def softmax_cross_entropy_grad(dy: np.ndarray, log_prob: np.ndarray, label: np.ndarray, *,
                               out: Optional[np.ndarray] = None, reduction: str = "mean") -> np.ndarray:
    """ORT's loop: ``(exp(log_prob) - label) * dY'`` (dY' = dY / N for "mean"; each row's dY for "none")."""
    op = "SoftmaxCrossEntropyGrad"
    n, c = _rows(op, log_prob)
    dtype = log_prob.dtype
    scale = dy[..., None] if reduction == "none" else (np.divide(dy, dtype.type(n), dtype=dtype)
                                                       if reduction == "mean" else dy)
    r = np.exp(log_prob)
    np.subtract(r, label, out=r)
    np.multiply(r, np.asarray(scale, dtype), out=r)
    return _store(r, out)


@kernel(SparseSoftmaxCrossEntropyOp)
def sparse_softmax_cross_entropy(logits: np.ndarray, label: np.ndarray, weight: Optional[np.ndarray] = None, *,
                                 out: Optional[tuple] = None, reduction: str = "mean") -> tuple[np.ndarray, np.ndarray]:
    """(loss, log_prob): each row's loss -log_prob[label] * weight."""
    op = "SparseSoftmaxCrossEntropy"
    n, c, lab, w = _sparse_labels(op, logits, label, weight)
    out_loss, out_lp = out if out is not None else (None, None)
    lp = log_softmax(logits, out=out_lp, axis=-1)
    per_row = np.negative(lp.reshape(n, c)[np.arange(n), lab])
    if w is not None:
        np.multiply(per_row, w, out=per_row)
    return _reduce_loss(per_row, w, n, reduction, label.shape, out_loss), lp


@kernel(SparseSoftmaxCrossEntropyGradOp, inplace=True)
def sparse_softmax_cross_entropy_grad(dy: np.ndarray, log_prob: np.ndarray, label: np.ndarray,
                                      weight: Optional[np.ndarray] = None, *, out: Optional[np.ndarray] = None,
                                      reduction: str = "mean") -> np.ndarray:
    """ORT's loop: ``(exp(log_prob) - (label == j)) * (weight * dY')`` (dY' = dY / the summed weights, or / N,
    for "mean"; each row's dY for "none")."""
    op = "SparseSoftmaxCrossEntropyGrad"
    n, c, lab, w = _sparse_labels(op, log_prob, label, weight)
    dtype = log_prob.dtype
    if reduction == "none":
        s = dy.reshape(-1)
    elif reduction == "mean":
        s = np.divide(dy, np.add.reduce(w, dtype=dtype) if w is not None else dtype.type(n), dtype=dtype)
    else:
        s = dy
    factor = np.multiply(w, s, dtype=dtype) if w is not None else np.broadcast_to(np.asarray(s, dtype), (n,))
    r = np.exp(log_prob).reshape(n, c)
    r[np.arange(n), lab] -= dtype.type(1)
    np.multiply(r, factor[:, None], out=r)
    return _store(r.reshape(log_prob.shape), out)
