"""Pooling: ONNX ``MaxPool`` (with its ``Indices``) and ``AveragePool``, and ONNX Runtime's gradients of them,
``MaxPoolGrad`` and ``AveragePoolGrad`` (both in the ai.onnx domain, opset 9, as ORT writes them).

X is [N, C, D1, ...]; the window geometry (``kernel_shape``, ``strides``, ``pads``, ``dilations``, ``auto_pad``,
``ceil_mode``) is Conv's (``gradir/ops/conv.py``).  ORT's gradient ops take the forward X's shape from the
graph's value info; gradir takes it as the attribute ``shape`` (its axes 0 and 1 follow dY's: ORT's kernel takes
axis 0 from dY, and pooling keeps the channels, so a shard's dY says its own rows and channels).
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from ..ir.op import Attr, BackwardOp, InferContext, Op, Operand
from ..ir.onnxmap import OnnxMap
from ..ir.types import FLOAT_DTYPES, INT_DTYPES, DType, TensorType
from .conv import AUTO_PAD, DILATIONS, PADS, STRIDES, Window, window

__all__: list[str] = []

KERNEL = Attr("kernel_shape", "ints", min=1, doc="the window")
CEIL_MODE = Attr("ceil_mode", "int", 0, choices=(0, 1), doc="1: the output size rounds up (a partial last window)")
SHAPE = Attr("shape", "ints", min=1, doc="the forward X's shape (axes 0 and 1 follow dY's)")
COUNT_PAD = Attr("count_include_pad", "int", 0, choices=(0, 1), doc="1: divide by the whole window, pads included")
_WINDOW = (AUTO_PAD, KERNEL, STRIDES, PADS, DILATIONS, CEIL_MODE)
_POOL_ONNX = ("auto_pad", "ceil_mode", "dilations", "kernel_shape", "pads", "strides")


def _geometry(ctx: InferContext, x: TensorType) -> Window:
    if x.rank < 3:
        ctx.fail(f"X must be [N, C, D1, ...] (rank 3 or more), got {x}", operand=0)
    geo = window(x.shape[2:], ctx.attrs, None, bool(ctx.attrs["ceil_mode"]),
                 fail=lambda msg, attr: ctx.fail(msg, attr=attr))
    if any(p >= k for p, k in zip(geo.begin + geo.end, geo.kernel * 2)):
        ctx.fail(f"pads {list(geo.begin + geo.end)} must be smaller than kernel_shape {list(geo.kernel)} (a window "
                 f"all in the padding has no element; ONNX and ORT refuse it too)", attr="pads")
    return geo


def _grad_x(ctx: InferContext, dy: TensorType) -> tuple[TensorType, Window]:
    """The forward X's type (``shape``, axes 0 and 1 dY's) and its geometry, checked against dY."""
    shape = list(ctx.attrs["shape"])
    if len(shape) != dy.rank:
        ctx.fail(f"shape {shape} has {len(shape)} axes, dY {dy} has {dy.rank}", attr="shape")
    shape[:2] = dy.shape[:2]
    x = dy.with_shape(tuple(shape))
    geo = _geometry(ctx, x)
    ctx.expect_shape(0, tuple(dy.shape[:2]) + geo.out, " (the pooled shape of `shape`)")
    return x, geo


def pool_windows(x: np.ndarray, geo: Window, fill: float) -> np.ndarray:
    """The windows of ``x`` [N, C, D...] padded with ``fill``: [N, C, O..., K...] (a copy)."""
    k = len(geo.out)
    # ceil_mode's last window may reach past the end padding: pad there too
    extra = [max(0, (o - 1) * s + (kk - 1) * d + 1 - (n + b + e))
             for o, s, kk, d, n, b, e in zip(geo.out, geo.strides, geo.kernel, geo.dilations, x.shape[2:], geo.begin,
                                             geo.end)]
    xp = np.pad(x, [(0, 0), (0, 0)] + [(b, e + z) for b, e, z in zip(geo.begin, geo.end, extra)],
                constant_values=fill)
    out = np.empty(x.shape[:2] + geo.out + geo.kernel, x.dtype)
    for kk in itertools.product(*(range(n) for n in geo.kernel)):
        sl = tuple(slice(kk[i] * geo.dilations[i], kk[i] * geo.dilations[i] + (geo.out[i] - 1) * geo.strides[i] + 1,
                         geo.strides[i]) for i in range(k))
        out[(Ellipsis,) + kk] = xp[(slice(None), slice(None)) + sl]
    return out


def window_positions(x_shape: tuple, geo: Window) -> np.ndarray:
    """For every window element, the flat (row-major) position in one [D...] image, or -1 in the padding:
    [O..., K...] Int64."""
    sp = x_shape[2:]
    pos = np.arange(int(np.prod(sp)), dtype=np.float64).reshape(sp)
    return pool_windows(pos[None, None], geo, -1.0)[0, 0].astype(np.int64)


def average_counts(x_shape: tuple, geo: Window, count_include_pad: int) -> np.ndarray:
    """The divisor of each output position [O...]: the window's elements inside the input (or inside the
    explicit padding too with ``count_include_pad``; never past it, as ONNX and ORT count)."""
    inside = window_positions(x_shape, geo) >= 0
    if count_include_pad:
        sp = tuple(n + b + e for n, b, e in zip(x_shape[2:], geo.begin, geo.end))
        padded = Window((geo.kernel, geo.strides, geo.dilations, (0,) * len(sp), (0,) * len(sp), geo.out))
        inside = window_positions((1, 1) + sp, padded) >= 0
    k = len(geo.out)
    return inside.reshape(geo.out + (-1,)).sum(axis=-1).astype(np.float64) if k else inside.astype(np.float64)


def _example_x(rng: Any, dtype: Any) -> np.ndarray:
    return rng.standard_normal((4, 3, 7, 6)).astype(dtype)


_EXAMPLE_ATTRS = {"kernel_shape": [3, 2], "strides": [2, 2], "pads": [1, 1, 1, 0], "ceil_mode": 1}


def _full(cls: type, attrs: dict) -> dict:
    return {**{a.name: a.default for a in cls.ATTRS if not a.required}, **attrs}


class MaxPoolOp(Op):
    """ONNX MaxPool: Y = the maximum of each window (pads count as -inf); Indices (Int64) = where it is in X,
    flattened over all of X [N, C, D1, ...] (row-major; ``storage_order`` 1: the spatial axes column-major).

The first maximum in window order wins a tie (ORT's). The gradient is ONNX Runtime's MaxPoolGrad of Indices.
``shard_rows`` is set by sharding (``gradir.shard``), never by hand, as Dropout's: Int64 [n, 2], row k = (the
global index along ``shard_axis`` (0 or 1) of X's k-th slice, the global size there), so that a shard writes
the whole X's Indices."""

    ONNX = OnnxMap(attrs=_POOL_ONNX + ("storage_order",))
    SHARDING = "pool"
    SHARD_ROWS = True
    NO_GRADIENT_RESULTS = (1,)
    NO_GRADIENT_OPERANDS = (1,)
    OPERANDS = (Operand("X", doc="[N, C, D1, ...]"),
                Operand("shard_rows", optional=True, doc="set by sharding: Int64 [n, 2], (global index, global size) "
                                                         "along shard_axis of each slice of X"))
    RESULTS = ("Y", "Indices")
    ATTRS = _WINDOW + (Attr("storage_order", "int", 0, choices=(0, 1), doc="1: Indices column-major in space"),
                       Attr("shard_axis", "int", 0, choices=(0, 1), doc="set by sharding: the axis shard_rows indexes"))

    def infer(self, ctx: InferContext) -> list[TensorType]:
        ctx.dtype_in(0, FLOAT_DTYPES)
        x = ctx.type(0)
        y = x.with_shape(x.shape[:2] + _geometry(ctx, x).out)
        if ctx.has(1):
            ctx.dtype_in(1, (DType.Int64,))
            axis = ctx.attrs["shard_axis"]
            ctx.expect_shape(1, (x.shape[axis], 2), f" (one (index, size) row per slice of X along axis {axis})")
        return [y, y.with_dtype(DType.Int64)]

    @classmethod
    def example(cls, rng: Any, dtype: Any) -> tuple[list[Any], dict[str, Any]]:
        """X [4, 3, 7, 6]; a 3x2 window, stride 2, asymmetric pads, ceil_mode."""
        return [_example_x(rng, dtype)], dict(_EXAMPLE_ATTRS)

    @classmethod
    def reference(cls, X: Any, shard_rows: Any = None, **attrs: Any) -> Any:
        x = np.asarray(X, np.float64)
        geo = window(x.shape[2:], attrs, None, bool(attrs["ceil_mode"]))
        rows = np.asarray(shard_rows if shard_rows is not None else
                          np.stack([np.arange(x.shape[attrs["shard_axis"]])] * 2, axis=1), np.int64)
        y = np.full(x.shape[:2] + geo.out, -np.inf)
        idx = np.zeros(y.shape, np.int64)
        sp = x.shape[2:]
        order = np.arange(int(np.prod(sp))).reshape(sp)
        if attrs["storage_order"]:
            order = np.arange(int(np.prod(sp))).reshape(sp[::-1]).T
        for n, c in itertools.product(range(x.shape[0]), range(x.shape[1])):
            for o in itertools.product(*(range(s) for s in geo.out)):
                for kk in itertools.product(*(range(s) for s in geo.kernel)):
                    p = [o[i] * geo.strides[i] + kk[i] * geo.dilations[i] - geo.begin[i] for i in range(len(o))]
                    if all(0 <= p[i] < sp[i] for i in range(len(p))) and x[(n, c) + tuple(p)] > y[(n, c) + o]:
                        y[(n, c) + o] = x[(n, c) + tuple(p)]
                        image = n * x.shape[1] + c if shard_rows is None else \
                            rows[n, 0] * x.shape[1] + c if attrs["shard_axis"] == 0 else n * rows[c, 1] + rows[c, 0]
                        idx[(n, c) + o] = image * order.size + order[tuple(p)]
        return y, idx


class MaxPoolGradOp(BackwardOp):
    """ONNX Runtime MaxPoolGrad (ai.onnx domain, opset 9): dX = zeros of ``shape`` with dX.flat[Indices] += dY,
    added in dY's order. Each dY[n, c] adds into the image dX[n, c] (at its Indices modulo the image size: MaxPool's
    indices are there; so a shard holding some of the rows or channels needs no offset). ORT's CPU kernel is
    Float32 only."""

    ONNX = None  # import_conv.py / export_conv.py: the shape comes from the graph's value info
    SHARDING = "pool"
    LINEAR_IN = (0,)
    NO_GRADIENT_OPERANDS = (1,)
    OPERANDS = (Operand("dY", doc="the gradient of MaxPool's Y"), Operand("Indices", doc="MaxPool's Indices"))
    RESULTS = ("dX",)
    ATTRS = (SHAPE,) + MaxPoolOp.ATTRS[:-1]  # not shard_axis

    def infer(self, ctx: InferContext) -> list[TensorType]:
        ctx.dtype_in(0, FLOAT_DTYPES)
        ctx.dtype_in(1, INT_DTYPES)
        x, _ = _grad_x(ctx, ctx.type(0))
        ctx.expect_shape(1, ctx.type(0).shape, " (dY's)")
        return [x]

    @classmethod
    def example(cls, rng: Any, dtype: Any) -> tuple[list[Any], dict[str, Any]]:
        """MaxPool's example: dY and its Indices."""
        x = _example_x(rng, np.float64)
        _, idx = MaxPoolOp.reference(x, **_full(MaxPoolOp, _EXAMPLE_ATTRS))
        return [rng.standard_normal(idx.shape).astype(dtype), idx], {"shape": list(x.shape), **_EXAMPLE_ATTRS}

    @classmethod
    def reference(cls, dY: Any, Indices: Any, **attrs: Any) -> Any:
        dy = np.asarray(dY, np.float64)
        dx = np.zeros(tuple(dy.shape[:2]) + tuple(attrs["shape"][2:]))
        image = int(np.prod(dx.shape[2:]))
        idx = np.asarray(Indices, np.int64) % image
        for n, c in itertools.product(range(dx.shape[0]), range(dx.shape[1])):
            np.add.at(dx[n, c].reshape(-1), idx[n, c].reshape(-1), dy[n, c].reshape(-1))
        return dx


class AveragePoolOp(Op):
    """ONNX AveragePool: Y = the mean of each window over its elements inside X (``count_include_pad`` 1: the
    explicit pads count too, as zeros). The gradient is ONNX Runtime's AveragePoolGrad."""

    ONNX = OnnxMap(attrs=_POOL_ONNX + ("count_include_pad",))
    SHARDING = "pool"
    LINEAR_IN = (0,)
    OPERANDS = (Operand("X", doc="[N, C, D1, ...]"),)
    RESULTS = ("Y",)
    ATTRS = _WINDOW + (COUNT_PAD,)

    def infer(self, ctx: InferContext) -> list[TensorType]:
        ctx.dtype_in(0, FLOAT_DTYPES)
        x = ctx.type(0)
        return [x.with_shape(x.shape[:2] + _geometry(ctx, x).out)]

    @classmethod
    def example(cls, rng: Any, dtype: Any) -> tuple[list[Any], dict[str, Any]]:
        """X [4, 3, 7, 6]; a 3x2 window, stride 2, asymmetric pads, ceil_mode, count_include_pad."""
        return [_example_x(rng, dtype)], {**_EXAMPLE_ATTRS, "count_include_pad": 1}

    @classmethod
    def reference(cls, X: Any, **attrs: Any) -> Any:
        x = np.asarray(X, np.float64)
        geo = window(x.shape[2:], attrs, None, bool(attrs["ceil_mode"]))
        sums = pool_windows(x, geo, 0.0).reshape(x.shape[:2] + geo.out + (-1,)).sum(axis=-1)
        return sums / average_counts(x.shape, geo, attrs["count_include_pad"])


class AveragePoolGradOp(BackwardOp):
    """ONNX Runtime AveragePoolGrad (ai.onnx domain, opset 9): each dY spread evenly over its window
    (AveragePool's divisor). ORT's CPU kernel is Float32 only and has no ``dilations``.

ORT 1.19.2's 3-D kernel is not the gradient of its AveragePool where windows overlap, leave gaps or are padded
(1-D and 2-D are right); gradir's is exact in every rank (the adjoint of AveragePool)."""

    ONNX = None  # import_conv.py / export_conv.py: the shape comes from the graph's value info
    SHARDING = "pool"
    LINEAR_IN = (0,)
    OPERANDS = (Operand("dY", doc="the gradient of AveragePool's Y"),)
    RESULTS = ("dX",)
    ATTRS = (SHAPE,) + AveragePoolOp.ATTRS

    def infer(self, ctx: InferContext) -> list[TensorType]:
        ctx.dtype_in(0, FLOAT_DTYPES)
        return [_grad_x(ctx, ctx.type(0))[0]]

    @classmethod
    def example(cls, rng: Any, dtype: Any) -> tuple[list[Any], dict[str, Any]]:
        """AveragePool's example: a dY of its Y's shape."""
        x = _example_x(rng, np.float64)
        attrs = {**_EXAMPLE_ATTRS, "count_include_pad": 1}
        y = AveragePoolOp.reference(x, **_full(AveragePoolOp, attrs))
        return [rng.standard_normal(y.shape).astype(dtype)], {"shape": list(x.shape), **attrs}

    @classmethod
    def reference(cls, dY: Any, **attrs: Any) -> Any:
        dy = np.asarray(dY, np.float64)
        shape = tuple(dy.shape[:2]) + tuple(attrs["shape"][2:])
        geo = window(shape[2:], attrs, None, bool(attrs["ceil_mode"]))
        g = dy / average_counts(shape, geo, attrs["count_include_pad"])
        pos = window_positions(shape, geo)  # [O..., K...]
        dx = np.zeros(shape[:2] + (int(np.prod(shape[2:])),))
        flat = pos.reshape(-1)
        ok = flat >= 0
        for n, c in itertools.product(range(shape[0]), range(shape[1])):
            vals = np.broadcast_to(g[n, c][(Ellipsis,) + (None,) * len(geo.kernel)], pos.shape).reshape(-1)
            np.add.at(dx[n, c], flat[ok], vals[ok])
        return dx.reshape(shape)


def _global_x(ctx: InferContext) -> TensorType:
    ctx.dtype_in(0, FLOAT_DTYPES)
    x = ctx.type(0)
    if x.rank < 3:
        ctx.fail(f"X must be [N, C, D1, ...] (rank 3 or more), got {x}", operand=0)
    return x.with_shape(x.shape[:2] + (1,) * (x.rank - 2))


def _global_example(rng: Any, dtype: Any) -> np.ndarray:
    """X [4, 3, 5, 6] of distinct values (a unique maximum per image: finite differences see one slope)."""
    return (rng.permutation(360).reshape(4, 3, 5, 6) / 64).astype(dtype)


class _GlobalPool(Op):
    """What GlobalAveragePool and GlobalMaxPool share: X [N, C, D1, ...] -> Y [N, C, 1, ...]."""

    abstract = True
    SHARDING = "pool"
    OPERANDS = (Operand("X", doc="[N, C, D1, ...]"),)
    RESULTS = ("Y",)

    def infer(self, ctx: InferContext) -> list[TensorType]:
        return [_global_x(ctx)]

    @classmethod
    def example(cls, rng: Any, dtype: Any) -> tuple[list[Any], dict[str, Any]]:
        return [_global_example(rng, dtype)], {}


class GlobalAveragePoolOp(_GlobalPool):
    """ONNX GlobalAveragePool: Y [N, C, 1, ...] = the mean of each image X[n, c] over its spatial axes.

The gradient (ONNX Runtime's builder: dY expanded to X's shape, divided by the count) is dY broadcast to X's
shape times 1 / (D1 * D2 * ...), exactly; it needs X's spatial sizes."""

    ONNX = OnnxMap()  # the class's own (an op's ONNX data is never inherited)
    LINEAR_IN = (0,)

    @classmethod
    def reference(cls, X: Any) -> Any:
        x = np.asarray(X, np.float64)
        return x.mean(axis=tuple(range(2, x.ndim)), keepdims=True)


class GlobalMaxPoolOp(_GlobalPool):
    """ONNX GlobalMaxPool: Y [N, C, 1, ...] = the maximum of each image X[n, c] over its spatial axes (NaN if
    the image has one).

The gradient is dY times Cast(Equal(X, Y)), the form of ONNX Runtime's ReduceMax-style builders (1.19.2
registers no gradient for GlobalMaxPool: its training graphs cannot hold one): every element tied for the
maximum gets dY whole (ties are not split, unlike MaxPool's gradient, which gives it to the first)."""

    ONNX = OnnxMap()

    @classmethod
    def reference(cls, X: Any) -> Any:
        x = np.asarray(X, np.float64)
        return x.max(axis=tuple(range(2, x.ndim)), keepdims=True)
