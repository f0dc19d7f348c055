"""Padding: ONNX ``Pad`` (modes constant, reflect, edge) and gradir's exact gradient of it, ``PadGrad``.

ONNX's ``pads``, ``constant_value`` and ``axes`` inputs (opset 11+; attributes before) are gradir attributes:
the importer folds them from initializers and constants, the exporter writes them back.  ``pads`` is
[begin_1, ..., begin_k, end_1, ..., end_k] over ``axes`` (default: every axis); a negative pad crops.  As ONNX
Runtime computes it, the crops come first and reflect and edge read the cropped tensor.  Reflect needs each pad
smaller than the cropped axis (ORT reads past the axis there), edge a non-empty one: both are type errors.
"""

from __future__ import annotations

import itertools
from typing import Any, Optional, Sequence

import numpy as np

from ..ir.op import Attr, BackwardOp, InferContext, Op, Operand
from ..ir.types import FLOAT_DTYPES, NUMERIC_DTYPES, TensorType

__all__ = ["resolve_pads", "axis_map"]

MODES = ("constant", "reflect", "edge")
MODE = Attr("mode", "str", "constant", choices=MODES,
            doc="constant: the pads hold constant_value; reflect: the axis mirrored without its edge; edge: the "
                "edge value repeated (ONNX's wrap is not supported)")
PADS = Attr("pads", "ints", doc="[begin_1, ..., begin_k, end_1, ..., end_k] over `axes`; negative crops")
AXES = Attr("axes", "ints", None, doc="the axes `pads` is for (default: all; negative counts from the end)")


def resolve_pads(rank: int, pads: Sequence[int], axes: Optional[Sequence[int]],
                 fail: Any = None) -> tuple[list[int], list[int]]:
    """(begin, end) per axis of a rank-``rank`` tensor from ``pads`` over ``axes``; ``fail(message, attr)``
    reports an inconsistent attribute (else ``ValueError``)."""
    def bad(msg: str, attr: str) -> None:
        if fail is None:
            raise ValueError(msg)
        fail(msg, attr)
    axes = list(range(rank)) if axes is None else list(axes)
    for a in axes:
        if not -rank <= a < rank:
            bad(f"axis {a} is out of range for rank {rank}", "axes")
    norm = [a % rank for a in axes]
    if len(set(norm)) != len(norm):
        bad(f"axes {axes} name an axis twice", "axes")
    if len(pads) != 2 * len(norm):
        bad(f"pads has {len(pads)} entries; it needs 2 per padded axis ({2 * len(norm)}: begins, then ends)", "pads")
    begin, end = [0] * rank, [0] * rank
    for k, a in enumerate(norm):
        begin[a], end[a] = int(pads[k]), int(pads[k + len(norm)])
    return begin, end


def _mirror(i: int, size: int, mode: str, lo: int) -> int:
    if 0 <= i < size:
        return lo + i
    if mode == "constant":
        return -1
    if mode == "edge":
        return lo + min(max(i, 0), size - 1)
    return lo + (-i if i < 0 else 2 * (size - 1) - i)


def axis_map(n: int, b: int, e: int, mode: str) -> list[int]:
    """For each position of the padded axis (size ``n``, pads ``b`` and ``e``), the index in X's axis it reads:
    the crop first, then ``mode`` on the cropped axis; -1: a constant pad."""
    size = n + min(b, 0) + min(e, 0)  # the cropped axis
    lo = max(-b, 0)
    return [_mirror(j - max(b, 0), size, mode, lo) for j in range(size + max(b, 0) + max(e, 0))]


def _check_geometry(ctx: InferContext, shape: Sequence[Optional[int]], begin: list[int], end: list[int],
                    mode: str) -> list[Optional[int]]:
    """The padded shape, the pads checked against the axes they pad (known ones)."""
    out: list[Optional[int]] = []
    for k, (n, b, e) in enumerate(zip(shape, begin, end)):
        if n is None:
            out.append(None)
            continue
        cropped = n + min(b, 0) + min(e, 0)
        size = cropped + max(b, 0) + max(e, 0)
        if size < 1:
            ctx.fail(f"pads {b} and {e} leave axis {k} (size {n}) with {size} elements (gradir's tensors are not "
                     f"empty)", attr="pads")
        if mode == "reflect" and max(b, e) > 0 and max(b, e) > cropped - 1:
            ctx.fail(f"reflect pads {b} and {e} of axis {k} must be smaller than the (cropped) axis, size "
                     f"{cropped} (ONNX Runtime reads past it)", attr="pads")
        if mode == "edge" and max(b, e) > 0 and cropped < 1:
            ctx.fail(f"edge pads {b} and {e} of axis {k} pad an axis cropped to nothing", attr="pads")
        out.append(size)
    return out


def _example(rng: Any, dtype: Any) -> np.ndarray:
    return rng.standard_normal((4, 3, 5, 6)).astype(dtype)


_EXAMPLE_ATTRS = {"mode": "reflect", "pads": [0, 0, 2, -1, 0, 0, 0, 3]}


class PadOp(Op):
    """ONNX Pad: X with `pads` elements added before and after each axis of `axes` (negative: removed), filled
    by `mode`.

A negative pad crops first; reflect and edge read the cropped axis (ONNX Runtime's order). The gradient:
constant mode a Pad of dY with the pads negated (ONNX Runtime's builder; the crop comes back as zeros),
reflect and edge gradir's PadGrad (ONNX Runtime has no gradient for them), which adds each mirrored or
repeated element back where it was read."""

    ONNX = None  # interop/onnx/import_pad.py, export_pad.py: pads, constant_value and axes are inputs
    SHARDING = "pad"
    OPERANDS = (Operand("data"),)
    RESULTS = ("output",)
    ATTRS = (MODE, PADS, Attr("constant_value", "float", 0.0, doc="the value of constant mode's pads"), AXES)

    def infer(self, ctx: InferContext) -> list[TensorType]:
        ctx.dtype_in(0, NUMERIC_DTYPES)
        x = ctx.type(0)
        begin, end = resolve_pads(x.rank, ctx.attrs["pads"], ctx.attrs["axes"],
                                  lambda msg, attr: ctx.fail(msg, attr=attr))
        return [x.with_shape(_check_geometry(ctx, x.shape, begin, end, ctx.attrs["mode"]))]

    @classmethod
    def example(cls, rng: Any, dtype: Any) -> tuple[list[Any], dict[str, Any]]:
        """X [4, 3, 5, 6]; reflect over the last two axes, a crop of one at the start of axis 3 (``axes`` left out: an
        export before opset 18 writes the pads of every axis)."""
        return [_example(rng, dtype)], dict(_EXAMPLE_ATTRS)

    @classmethod
    def reference(cls, data: Any, **attrs: Any) -> Any:
        x = np.asarray(data, np.float64)
        begin, end = resolve_pads(x.ndim, attrs["pads"], attrs.get("axes"))
        maps = [axis_map(n, b, e, attrs["mode"]) for n, b, e in zip(x.shape, begin, end)]
        y = np.empty([len(m) for m in maps])
        for j in itertools.product(*(range(len(m)) for m in maps)):
            src = tuple(m[k] for m, k in zip(maps, j))
            y[j] = attrs["constant_value"] if min(src, default=0) < 0 else x[src]
        return y


class PadGradOp(BackwardOp):
    """gradir's gradient of Pad, exact in every mode: dX[i] = the sum of dY over the positions of Pad's result
    that read X[i] (mirrored, repeated or kept; constant pads read nothing).

ONNX Runtime's Pad gradient is a Pad of dY with the pads negated, right for constant mode only; gradir emits
that there, and this op for reflect and edge. It takes Pad's attributes and dY; dX's shape follows from them."""

    NO_ONNX = "ONNX and ONNX Runtime have no gradient op of Pad's reflect and edge modes"
    SHARDING = "pad"
    LINEAR_IN = (0,)
    OPERANDS = (Operand("dY", doc="the gradient of Pad's result"),)
    RESULTS = ("dX",)
    ATTRS = (MODE, PADS, AXES)

    def infer(self, ctx: InferContext) -> list[TensorType]:
        ctx.dtype_in(0, FLOAT_DTYPES)
        dy = ctx.type(0)
        begin, end = resolve_pads(dy.rank, ctx.attrs["pads"], ctx.attrs["axes"],
                                  lambda msg, attr: ctx.fail(msg, attr=attr))
        shape: list[Optional[int]] = []
        for k, (d, b, e) in enumerate(zip(dy.shape, begin, end)):
            n = None if d is None else d - b - e
            if n is not None and n < 1:
                ctx.fail(f"pads {b} and {e} are more than axis {k} of dY (size {d}) holds", attr="pads")
            shape.append(n)
        x = dy.with_shape(shape)
        padded = _check_geometry(ctx, x.shape, begin, end, ctx.attrs["mode"])
        ctx.expect_shape(0, padded, " (Pad's result for dX's shape)")
        return [x]

    @classmethod
    def example(cls, rng: Any, dtype: Any) -> tuple[list[Any], dict[str, Any]]:
        """Pad's example: a dY of its result's shape."""
        x = _example(rng, np.float64)
        y = PadOp.reference(x, constant_value=0.0, **_EXAMPLE_ATTRS)
        return [rng.standard_normal(y.shape).astype(dtype)], dict(_EXAMPLE_ATTRS)

    @classmethod
    def reference(cls, dY: Any, **attrs: Any) -> Any:
        dy = np.asarray(dY, np.float64)
        begin, end = resolve_pads(dy.ndim, attrs["pads"], attrs.get("axes"))
        shape = [d - b - e for d, b, e in zip(dy.shape, begin, end)]
        maps = [axis_map(n, b, e, attrs["mode"]) for n, b, e in zip(shape, begin, end)]
        dx = np.zeros(shape)
        for j in itertools.product(*(range(len(m)) for m in maps)):
            src = tuple(m[k] for m, k in zip(maps, j))
            if min(src, default=0) >= 0:
                dx[src] += dy[j]
        return dx
