"""Indexing: ONNX ``Gather``, ``GatherElements``, ``Slice``, ``Trilu`` and ONNX Runtime's gradients of them
(``GatherGrad``, ``GatherElementsGrad``, ``SliceGrad``).

Index operands are Int32 or Int64; a negative index counts from the end of its axis (ONNX), and an index
out of ``-n..n-1`` is a run-time error naming the op and the index (ONNX Runtime's kernels refuse it too).
ONNX and ONNX Runtime take a shape, slice bounds or a diagonal offset as small Int64 input tensors; gradir
takes them as attributes of the same names (the importer folds the constant inputs, the exporter writes
them back as initializers).  The scatter-adds of the gradients add repeated indices in the order of the
index operand, one element at a time: their bits are the same for any thread count and are ONNX
Runtime's single-threaded bits.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np

from ..ir.op import Attr, BackwardOp, InferContext, Op, Operand
from ..ir.onnxmap import OnnxMap
from ..ir.types import ALL_DTYPES, FLOAT_DTYPES, INT_DTYPES, Dim, TensorType, format_shape

__all__ = ["slice_bounds", "normalized_slices"]

AXIS = Attr("axis", "int", 0, doc="the indexed axis (negative counts from the end)")
SHAPE = Attr("shape", "ints", min=1, doc="the forward operand's shape (ONNX Runtime's `shape` input)")
INT64_MAX = (1 << 63) - 1


def _indexed_axis(ctx: InferContext, rank: int) -> int:
    axis = ctx.attrs["axis"]
    if not -rank <= axis < rank:
        ctx.fail(f"axis {axis} is out of range for rank {rank}" if rank else
                 f"axis {axis}: the data operand is a scalar, which has no axis to index", attr="axis")
    return axis % rank


def _grad_shape(ctx: InferContext, like: TensorType, keep: Sequence[int]) -> list[Dim]:
    """The ``shape`` attribute as the result's shape, but at ``keep`` (the axes the op does not index, which
    the upstream gradient ``like`` has whole) ``like``'s dims: a sharded run's shard holds its own rows of dY
    there, and its result has as many (the shape attribute is the whole graph's)."""
    shape: list[Dim] = list(ctx.attrs["shape"])
    for k in keep:
        shape[k] = like.shape[k]
    return shape


def _random_indices(rng: Any, n: int, shape: tuple, dtype: Any = np.int64) -> np.ndarray:
    """Indices in -n..n-1 (negative ones included, repeated ones likely)."""
    return rng.integers(-n, n, shape).astype(dtype)


class GatherOp(Op):
    """ONNX Gather: data at indices along axis; shape data.shape[:axis] + indices.shape + data.shape[axis+1:].

Indices (Int32 or Int64, any rank, a scalar included) in -n..n-1 for n = data.shape[axis]; a negative
one counts from the end; another is a run-time error naming the op. The gradient is ONNX Runtime's
GatherGrad."""

    ONNX = OnnxMap(attrs=("axis",))
    SHARDING = "gather"
    LINEAR_IN = (0,)
    NO_GRADIENT_OPERANDS = (1,)
    OPERANDS = (Operand("data"), Operand("indices", doc="Int32 or Int64, any rank, in -n..n-1", sample="indices"))
    RESULTS = ("output",)
    ATTRS = (AXIS,)

    def infer(self, ctx: InferContext) -> list[TensorType]:
        ctx.dtype_in(0, ALL_DTYPES)
        ctx.dtype_in(1, INT_DTYPES)
        d, i = ctx.type(0), ctx.type(1)
        a = _indexed_axis(ctx, d.rank)
        return [d.with_shape(d.shape[:a] + i.shape + d.shape[a + 1:])]

    @classmethod
    def example(cls, rng: Any, dtype: Any) -> tuple[list[Any], dict[str, Any]]:
        """Columns of a [4, 6] table gathered (axis 1) by [3, 2] Int32 indices, negative and repeated ones."""
        return [rng.standard_normal((4, 6)).astype(dtype), _random_indices(rng, 6, (3, 2), np.int32)], {"axis": 1}

    @classmethod
    def reference(cls, data: Any, indices: Any, *, axis: int) -> Any:
        d = np.asarray(data, np.float64)
        return np.take(d, np.asarray(indices, np.int64), axis=axis)


class GatherElementsOp(Op):
    """ONNX GatherElements: output[i][j][k] = data[indices[i][j][k]][j][k] (axis 0; likewise for the others).

Indices have data's rank, and at most data's size along every other axis; the result has their shape.
The gradient is ONNX Runtime's GatherElementsGrad."""

    ONNX = OnnxMap(attrs=("axis",))
    SHARDING = "gather_elements"
    LINEAR_IN = (0,)
    NO_GRADIENT_OPERANDS = (1,)
    OPERANDS = (Operand("data"), Operand("indices", doc="Int32 or Int64, data's rank, in -n..n-1", sample="indices"))
    RESULTS = ("output",)
    ATTRS = (AXIS,)

    def infer(self, ctx: InferContext) -> list[TensorType]:
        ctx.dtype_in(0, ALL_DTYPES)
        ctx.dtype_in(1, INT_DTYPES)
        d, i = ctx.type(0), ctx.type(1)
        a = _indexed_axis(ctx, d.rank)
        if i.rank != d.rank or any(x is not None and y is not None and x > y and k != a
                                   for k, (x, y) in enumerate(zip(i.shape, d.shape))):
            ctx.fail(f"indices have shape {format_shape(i.shape)}; they need data's rank {d.rank} and at most "
                     f"data's size {format_shape(d.shape)} along every axis but {a}", operand=1)
        return [d.with_shape(i.shape)]

    @classmethod
    def example(cls, rng: Any, dtype: Any) -> tuple[list[Any], dict[str, Any]]:
        return [rng.standard_normal((4, 5)).astype(dtype), _random_indices(rng, 5, (4, 3))], {"axis": -1}

    @classmethod
    def reference(cls, data: Any, indices: Any, *, axis: int) -> Any:
        d, idx = np.asarray(data, np.float64), np.asarray(indices, np.int64)
        a = axis % d.ndim
        out = np.empty(idx.shape)
        for pos in np.ndindex(*idx.shape):
            src = list(pos)
            src[a] = idx[pos] % d.shape[a]
            out[pos] = d[tuple(src)]
        return out


class GatherGradOp(BackwardOp):
    """ONNX Runtime GatherGrad: zeros of shape with dY added at indices along axis (the gradient of Gather's data).

ORT's inputs (shape, indices, dY) are gradir's (indices, dY) and the attribute shape. Repeated indices
add up, in the order of indices (ORT's single-threaded order; its multi-threaded kernel adds under a lock
in any order). Float32 and Float64, as ORT's CPU kernel."""

    ONNX = None  # import_index.py / export_index.py: the shape input
    SHARDING = "gather_grad"
    LINEAR_IN = (1,)
    OPERANDS = (Operand("indices", doc="Gather's indices", sample="indices"),
                Operand("dY", doc="the gradient of Gather's output"))
    RESULTS = ("dX",)
    ATTRS = (SHAPE, AXIS)

    def infer(self, ctx: InferContext) -> list[TensorType]:
        ctx.dtype_in(0, INT_DTYPES)
        ctx.dtype_in(1, FLOAT_DTYPES)
        i, dy = ctx.type(0), ctx.type(1)
        shape = list(ctx.attrs["shape"])
        a = _indexed_axis(ctx, len(shape))
        want = shape[:a] + list(i.shape) + shape[a + 1:]
        if dy.rank != len(want):
            ctx.fail(f"dY has shape {format_shape(dy.shape)}; expected {format_shape(want)} (Gather's output for "
                     f"shape={shape}, axis={ctx.attrs['axis']} and indices {format_shape(i.shape)})", operand=1)
        ctx.expect_shape(1, [None] * a + list(i.shape) + [None] * (len(shape) - a - 1))
        n = i.rank
        moved = TensorType(dy.dtype, tuple(dy.shape[:a]) + (shape[a],) + tuple(dy.shape[a + n:]))
        keep = [k for k in range(len(shape)) if k != a]
        return [TensorType(dy.dtype, _grad_shape(ctx, moved, keep))]

    @classmethod
    def example(cls, rng: Any, dtype: Any) -> tuple[list[Any], dict[str, Any]]:
        """dY of a Gather of [5, 3] rows by [4, 2] indices with repeats and negatives."""
        return ([np.array([[0, -1], [2, 0], [4, 4], [-5, 1]], np.int64), rng.standard_normal((4, 2, 3)).astype(dtype)],
                {"shape": [5, 3], "axis": 0})

    @classmethod
    def reference(cls, indices: Any, dY: Any, *, shape: Sequence[int], axis: int) -> Any:
        a = axis % len(shape)
        out = np.zeros(shape)
        idx = np.asarray(indices, np.int64).reshape(-1) % shape[a]
        dy = np.asarray(dY, np.float64)
        dy = dy.reshape(dy.shape[:a] + (idx.size,) + dy.shape[a + np.ndim(indices):])
        for j, t in enumerate(idx):
            np.add(out[(slice(None),) * a + (t,)], dy[(slice(None),) * a + (j,)],
                   out=out[(slice(None),) * a + (t,)])
        return out


class GatherElementsGradOp(BackwardOp):
    """ONNX Runtime GatherElementsGrad: zeros of shape with dY added at indices along axis (GatherElements' gradient).

ORT's inputs (dY, shape, indices) are gradir's (dY, indices) and the attribute shape. Repeated indices add
up in row-major order of indices."""

    ONNX = None  # import_index.py / export_index.py: the shape input
    SHARDING = "gather_elements_grad"
    LINEAR_IN = (0,)
    OPERANDS = (Operand("dY", doc="the gradient of GatherElements' output"),
                Operand("indices", doc="GatherElements' indices", sample="indices"))
    RESULTS = ("dX",)
    ATTRS = (SHAPE, AXIS)

    def infer(self, ctx: InferContext) -> list[TensorType]:
        ctx.dtype_in(0, FLOAT_DTYPES)
        ctx.dtype_in(1, INT_DTYPES)
        shape = list(ctx.attrs["shape"])
        _indexed_axis(ctx, len(shape))
        i = ctx.type(1)
        if i.rank != len(shape):
            ctx.fail(f"indices have shape {format_shape(i.shape)}; they need the rank of shape={shape}", operand=1)
        ctx.expect_shape(0, i.shape, " (the indices' shape)")
        return [TensorType(ctx.type(0).dtype, shape)]

    @classmethod
    def example(cls, rng: Any, dtype: Any) -> tuple[list[Any], dict[str, Any]]:
        """dY of a GatherElements of [5, 3] along axis 0 by [4, 3] indices (repeats likely)."""
        return ([rng.standard_normal((4, 3)).astype(dtype), _random_indices(rng, 5, (4, 3))],
                {"shape": [5, 3], "axis": 0})

    @classmethod
    def reference(cls, dY: Any, indices: Any, *, shape: Sequence[int], axis: int) -> Any:
        a = axis % len(shape)
        out = np.zeros(shape)
        idx, dy = np.asarray(indices, np.int64), np.asarray(dY, np.float64)
        for pos in np.ndindex(*idx.shape):
            dst = list(pos)
            dst[a] = idx[pos] % shape[a]
            out[tuple(dst)] += dy[pos]
        return out


# -- Slice --------------------------------------------------------------------------------------------------
def slice_bounds(n: int, start: int, end: int, step: int) -> tuple[int, int, int]:
    """ONNX Slice's bounds along an axis of size ``n``: ``(first, step, count)``.  Negative starts and ends count
    from the end, then are clamped (to 0..n for a positive step, start to 0..n-1 and end to -1..n-1 for a
    negative one), so INT64_MAX and INT64_MIN mean "to the end"."""
    start = start + n if start < 0 else start
    end = end + n if end < 0 else end
    if step > 0:
        start, end = min(max(start, 0), n), min(max(end, 0), n)
        count = max(0, -(-(end - start) // step))
    else:
        start, end = min(max(start, 0), n - 1), min(max(end, -1), n - 1)
        count = max(0, -(-(start - end) // -step))
    return start, step, count


def normalized_slices(shape: Sequence[int], starts: Sequence[int], ends: Sequence[int],
                      axes: Optional[Sequence[int]], steps: Optional[Sequence[int]]) -> tuple[slice, ...]:
    """One Python slice per axis of ``shape`` (concrete) selecting what ONNX Slice selects."""
    out = [slice(None)] * len(shape)
    axes = range(len(starts)) if axes is None else axes
    steps = [1] * len(starts) if steps is None else steps
    for s, e, a, st in zip(starts, ends, axes, steps):
        a %= len(shape)
        first, step, count = slice_bounds(shape[a], s, e, st)
        last = first + step * count  # one past the last taken, may be -1
        out[a] = slice(first, last if last >= 0 else None, step) if count else slice(0, 0)
    return tuple(out)


def _check_slice(ctx: InferContext, rank: int) -> list[tuple[int, int, int, int]]:
    """(axis, start, end, step) per sliced axis, checked."""
    s, e, axes, steps = (ctx.attrs[k] for k in ("starts", "ends", "axes", "steps"))
    n = len(s)
    for name, v in (("ends", e), ("axes", axes), ("steps", steps)):
        if v is not None and len(v) != n:
            ctx.fail(f"{name} has {len(v)} entries but starts has {n}", attr=name)
    axes = list(range(n)) if axes is None else list(axes)
    steps = [1] * n if steps is None else list(steps)
    for a in axes:
        if not -rank <= a < rank:
            ctx.fail(f"axis {a} is out of range for rank {rank}", attr="axes")
    norm = [a % rank for a in axes]
    if len(set(norm)) != n:
        ctx.fail(f"axes {axes} name an axis twice", attr="axes")
    if 0 in steps:
        ctx.fail("a step is 0", attr="steps")
    return list(zip(norm, s, e, steps))


def _sliced_shape(ctx: InferContext, shape: Sequence[Dim]) -> list[Dim]:
    out = list(shape)
    for a, s, e, st in _check_slice(ctx, len(shape)):
        if shape[a] is None:
            out[a] = None
            continue
        count = slice_bounds(shape[a], s, e, st)[2]
        if count == 0:
            ctx.fail(f"the slice {s}:{e}:{st} of axis {a} (size {shape[a]}) is empty; gradir's dimensions are "
                     f"positive", attr="starts")
        out[a] = count
    return out


SLICE_ATTRS = (Attr("starts", "ints", doc="first index per sliced axis (negative counts from the end; clamped)"),
               Attr("ends", "ints", doc="end (exclusive) per sliced axis; INT64_MAX/INT64_MIN: to the end"),
               Attr("axes", "ints", None, doc="the sliced axes (default 0..len(starts)-1)"),
               Attr("steps", "ints", None, doc="the step per sliced axis, non-zero, negative backwards (default 1)"))


def _slice_reference(shape: Sequence[int], starts: Sequence[int], ends: Sequence[int], axes: Any,
                     steps: Any) -> tuple:
    """The index arrays ONNX's Slice takes along each axis, from its text (an open grid)."""
    axes = list(range(len(starts))) if axes is None else [a % len(shape) for a in axes]
    steps = [1] * len(starts) if steps is None else list(steps)
    take = [np.arange(n) for n in shape]
    for a, s, e, st in zip(axes, starts, ends, steps):
        n = shape[a]
        s, e = (s + n if s < 0 else s), (e + n if e < 0 else e)
        lo, hi = (0, n) if st > 0 else (0, n - 1)
        s = min(max(s, lo), hi)
        e = min(max(e, 0 if st > 0 else -1), n if st > 0 else n - 1)
        take[a] = np.array([i for i in range(s, e, st)], np.int64)
    return np.ix_(*take)


class SliceOp(Op):
    """ONNX Slice: X[starts:ends:steps] along axes, ONNX's negative indices and clamping; gradient ORT's SliceGrad.

ONNX's inputs starts, ends, axes, steps (opset 10+; attributes before) are attributes. An empty slice is a
type error (gradir's dimensions are positive)."""

    ONNX = None  # import_index.py / export_index.py: inputs (opset 10+) or attributes
    SHARDING = "slice"
    SHAPE_ONLY = True
    LINEAR_IN = (0,)
    OPERANDS = (Operand("X"),)
    ATTRS = SLICE_ATTRS

    def infer(self, ctx: InferContext) -> list[TensorType]:
        t = ctx.type(0)
        return [t.with_shape(_sliced_shape(ctx, t.shape))]

    @classmethod
    def example(cls, rng: Any, dtype: Any) -> tuple[list[Any], dict[str, Any]]:
        """A [4, 6, 5] tensor sliced backwards on axis -1 from a clamped start, stepped by 2 on axis 1."""
        return ([rng.standard_normal((4, 6, 5)).astype(dtype)],
                {"starts": [100, 1], "ends": [-INT64_MAX - 1, -1], "axes": [-1, 1], "steps": [-2, 2]})

    @classmethod
    def reference(cls, X: Any, *, starts: Any, ends: Any, axes: Any, steps: Any) -> Any:
        x = np.asarray(X, np.float64)
        return x[_slice_reference(x.shape, starts, ends, axes, steps)]


class SliceGradOp(BackwardOp):
    """ONNX Runtime SliceGrad: zeros of shape with dY written into the slice (Slice's gradient).

ORT's inputs (dY, shape, starts, ends, axes, steps) are gradir's dY and attributes. gradir is exact for
negative steps too, which ONNX Runtime 1.19.2's CPU kernel refuses (narrowing_error)."""

    ONNX = None  # import_index.py / export_index.py
    SHARDING = "slice"
    LINEAR_IN = (0,)
    OPERANDS = (Operand("dY"),)
    RESULTS = ("dX",)
    ATTRS = (SHAPE,) + SLICE_ATTRS

    def infer(self, ctx: InferContext) -> list[TensorType]:
        ctx.dtype_in(0, FLOAT_DTYPES)
        dy = ctx.type(0)
        shape = list(ctx.attrs["shape"])
        if dy.rank != len(shape):
            ctx.fail(f"dY has shape {format_shape(dy.shape)}; shape={shape} has another rank", operand=0)
        sliced = _sliced_shape(ctx, shape)
        axes = {a for a, *_ in _check_slice(ctx, len(shape))}
        ctx.expect_shape(0, [d if k in axes else None for k, d in enumerate(sliced)], f" (the slice of shape={shape})")
        # along the other axes the result has dY's dims (``_grad_shape``)
        kept = [k for k in range(len(shape)) if k not in axes]
        return [TensorType(dy.dtype, _grad_shape(ctx, dy, kept))]

    @classmethod
    def example(cls, rng: Any, dtype: Any) -> tuple[list[Any], dict[str, Any]]:
        return ([rng.standard_normal((4, 2, 3)).astype(dtype)],
                {"shape": [4, 6, 5], "starts": [100, 1], "ends": [-INT64_MAX - 1, -1], "axes": [-1, 1],
                 "steps": [-2, 2]})

    @classmethod
    def reference(cls, dY: Any, *, shape: Any, starts: Any, ends: Any, axes: Any, steps: Any) -> Any:
        out = np.zeros(shape)
        out[_slice_reference(shape, starts, ends, axes, steps)] = np.asarray(dY, np.float64)
        return out


class TriluOp(Op):
    """ONNX Trilu: the upper (upper=1: j - i >= k) or lower (j - i <= k) triangle of the last two axes, the rest 0.

ONNX's input k (a scalar, default 0) is the attribute k (ONNX has Trilu from opset 14). Its gradient is Trilu
of dY."""

    ONNX = None  # import_index.py / export_index.py: the input k
    SHARDING = "trilu"
    SHAPE_ONLY = True  # a masked copy: it computes nothing, and is linear in X
    LINEAR_IN = (0,)
    OPERANDS = (Operand("X", doc="rank >= 2"),)
    ATTRS = (Attr("upper", "int", 1, choices=(0, 1), doc="1: keep the upper triangle, 0: the lower"),
             Attr("k", "int", 0, doc="the diagonal: 0 the main one, > 0 above it, < 0 below"))

    def infer(self, ctx: InferContext) -> list[TensorType]:
        t = ctx.type(0)
        if t.rank < 2:
            ctx.fail(f"operand X ({self.operand_value(0)}) must have rank 2 or more, got {t}", operand=0)
        return [t]

    @classmethod
    def example(cls, rng: Any, dtype: Any) -> tuple[list[Any], dict[str, Any]]:
        return [rng.standard_normal((4, 3, 5)).astype(dtype)], {"upper": 0, "k": 1}

    @classmethod
    def reference(cls, X: Any, *, upper: int, k: int) -> Any:
        x = np.asarray(X, np.float64)
        i, j = np.indices(x.shape[-2:])
        keep = (j - i >= k) if upper else (j - i <= k)
        return np.where(keep, x, 0.0)
