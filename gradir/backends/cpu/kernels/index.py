"""Kernels of the indexing and joining ops (``gradir/ops/index.py``, ``ops/concat.py``) and of ``Expand`` and
``Squeeze`` (``ops/shape.py``).

Every kernel returns fresh arrays (or writes ``out``), never a view of an operand.  An index out of
``-n..n-1`` is a ``ValueError`` naming the op, the index and where it is in the index operand.  The gather
gradients add into zeros in the order of the indices, one element at a time (``_jit_index.scatter_rows``
compiled, ``np.add.at`` without numba: the same bits), so their results do not depend on thread counts.
"""

from __future__ import annotations

import math
from typing import Any, Optional, Sequence

import numpy as np

from ....ops.concat import ConcatOp, ConcatTrainingOp, SplitOp, SplitTrainingOp, split_sizes
from ....ops.index import (GatherElementsGradOp, GatherElementsOp, GatherGradOp, GatherOp, SliceGradOp, SliceOp,
                           TriluOp, normalized_slices)
from ....ops.shape import ExpandOp, SqueezeOp
from . import jit
from .registry import kernel


def _into(r: np.ndarray, out: Optional[np.ndarray]) -> np.ndarray:
    if out is None:
        return np.array(r, copy=True)
    np.copyto(out, r)
    return out


def checked_indices(indices: np.ndarray, n: int, op: str, axis: int) -> np.ndarray:
    """``indices`` as Int64 in ``0..n-1`` (negative ones counted from the end), or a ``ValueError`` naming the
    first one out of ``-n..n-1``."""
    idx = np.array(indices, np.int64)
    bad = (idx < -n) | (idx >= n)
    if bad.any():
        pos = tuple(int(p) for p in np.argwhere(bad)[0]) if idx.ndim else ()
        where = f" at indices[{', '.join(map(str, pos))}]" if pos else ""
        raise ValueError(f"{op}: index {int(idx[pos] if pos else idx)}{where} is out of range for axis {axis} of "
                         f"size {n} (indices go from {-n} to {n - 1})")
    idx[idx < 0] += n
    return idx


@kernel(GatherOp)
def gather(data: np.ndarray, indices: np.ndarray, *, axis: int, out: Optional[np.ndarray] = None) -> np.ndarray:
    a = axis % data.ndim
    idx = checked_indices(indices, data.shape[a], "Gather", a)
    return np.asarray(np.take(data, idx, axis=a, out=out))  # a fresh array when out is None (0-d for one index)


def _element_index(idx: np.ndarray, a: int) -> tuple:
    """The index tuple of GatherElements: ``idx`` along axis ``a``, each position's own index elsewhere."""
    grid: list[Any] = list(np.ogrid[tuple(slice(s) for s in idx.shape)])
    grid[a] = idx
    return tuple(grid)


@kernel(GatherElementsOp)
def gather_elements(data: np.ndarray, indices: np.ndarray, *, axis: int,
                    out: Optional[np.ndarray] = None) -> np.ndarray:
    a = axis % data.ndim
    idx = checked_indices(indices, data.shape[a], "GatherElements", a)
    return _into(data[_element_index(idx, a)], out)


def _zeros(shape: Sequence[int], dtype: Any, out: Optional[np.ndarray]) -> np.ndarray:
    if out is None:
        return np.zeros(shape, dtype)
    out.fill(0)
    return out


@kernel(GatherGradOp)
def gather_grad(indices: np.ndarray, dy: np.ndarray, *, shape: Sequence[int], axis: int,
                out: Optional[np.ndarray] = None) -> np.ndarray:
    a = axis % len(shape)
    n, r = shape[a], indices.ndim
    result = _zeros(dy.shape[:a] + (n,) + dy.shape[a + r:], dy.dtype, out)
    idx = checked_indices(indices, n, "GatherGrad", a).reshape(-1)
    outer, inner = math.prod(dy.shape[:a]), math.prod(dy.shape[a + r:])
    o3 = result.reshape(outer, n, inner)  # a view: result is C-contiguous
    d3 = np.ascontiguousarray(dy).reshape(outer, idx.size, inner)
    jk = jit.load("index")
    if jk is not None and o3.size:
        jk.scatter_rows(o3, idx, jit.readable(d3))
    else:
        np.add.at(o3, (slice(None), idx), d3)
    return result


@kernel(GatherElementsGradOp)
def gather_elements_grad(dy: np.ndarray, indices: np.ndarray, *, shape: Sequence[int], axis: int,
                         out: Optional[np.ndarray] = None) -> np.ndarray:
    a = axis % len(shape)
    result = _zeros(shape, dy.dtype, out)
    idx = checked_indices(indices, shape[a], "GatherElementsGrad", a)
    np.add.at(result, _element_index(idx, a), dy)  # in row-major order of the indices
    return result


def _slices(op_shape: Sequence[int], starts: Any, ends: Any, axes: Any, steps: Any) -> tuple:
    return normalized_slices(op_shape, starts, ends, axes, steps)


@kernel(SliceOp)
def slice_(x: np.ndarray, *, starts: Any, ends: Any, axes: Any, steps: Any,
           out: Optional[np.ndarray] = None) -> np.ndarray:
    return _into(x[_slices(x.shape, starts, ends, axes, steps)], out)


@kernel(SliceGradOp)
def slice_grad(dy: np.ndarray, *, shape: Sequence[int], starts: Any, ends: Any, axes: Any, steps: Any,
               out: Optional[np.ndarray] = None) -> np.ndarray:
    sliced = {a % len(shape) for a in (range(len(starts)) if axes is None else axes)}
    full = [shape[k] if k in sliced else dy.shape[k] for k in range(len(shape))]  # a shard has its own rows
    result = _zeros(full, dy.dtype, out)
    result[_slices(full, starts, ends, axes, steps)] = dy
    return result


@kernel(TriluOp)
def trilu(x: np.ndarray, *, upper: int, k: int, out: Optional[np.ndarray] = None) -> np.ndarray:
    return _into(np.triu(x, k) if upper else np.tril(x, k), out)


def _parts(x: np.ndarray, sizes: Sequence[int], axis: int, out: Any) -> tuple:
    pieces = np.split(x, np.cumsum(sizes)[:-1], axis=axis)
    outs = out if out is not None else (None,) * len(pieces)
    return tuple(_into(p, o) for p, o in zip(pieces, outs))


@kernel(SplitOp)
def split(x: np.ndarray, *, axis: int, split: Any, num_outputs: Any, out: Any = None) -> tuple:
    a = axis % x.ndim
    return _parts(x, split_sizes(x.shape[a], split, num_outputs), a, out)  # type: ignore[arg-type]


@kernel(SplitTrainingOp)
def split_training(x: np.ndarray, *, split: Any, axis: int, out: Any = None) -> tuple:
    return _parts(x, split, axis % x.ndim, out)


@kernel(ConcatOp)
def concat(*xs: np.ndarray, axis: int, out: Optional[np.ndarray] = None) -> np.ndarray:
    return np.concatenate(xs, axis=axis, out=out)


@kernel(ConcatTrainingOp)
def concat_training(*xs: np.ndarray, axis: int, out: Any = None) -> tuple:
    out = out if out is not None else (None, None)
    lengths = np.array([x.shape[axis] for x in xs], np.int64)
    return np.concatenate(xs, axis=axis, out=out[0]), _into(lengths, out[1])


@kernel(ExpandOp)
def expand(x: np.ndarray, *, shape: Sequence[int], out: Optional[np.ndarray] = None) -> np.ndarray:
    return _into(np.broadcast_to(x, np.broadcast_shapes(x.shape, tuple(shape))), out)


@kernel(SqueezeOp)
def squeeze(x: np.ndarray, *, axes: Sequence[int], out: Optional[np.ndarray] = None) -> np.ndarray:
    return _into(np.squeeze(x, tuple(a % x.ndim for a in axes)), out)
