"""Import of the indexing, joining and shape nodes whose ONNX inputs are gradir attributes (docs/onnx.md):
``Slice`` (inputs from opset 10, attributes before), ``Split`` (``split`` an input from opset 13,
``num_outputs`` from 18), ``Squeeze`` (``axes`` an input from 13), ``Expand``, ``Trilu`` (``k``), and ONNX
Runtime's ``GatherGrad``, ``GatherElementsGrad``, ``SliceGrad``, ``SplitTraining``, ``ConcatTraining``.  The
inputs must be known at import (an initializer, a ``Constant``, a shape computation over static shapes;
``SplitTraining``'s sizes also as a ``ConcatTraining``'s lengths)."""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from .common import MS_DOMAIN
from .import_ops import Unsupported, broadcast_shape, check_limits, handler

__all__: list[str] = []


def _ints(ctx: Any, node: Any, i: int, what: str) -> Optional[list[int]]:
    """Input ``i`` as a list of ints, ``None`` when omitted."""
    if i >= len(node.input) or not node.input[i]:
        return None
    return [int(v) for v in ctx.const(node, i, what, ints=True).reshape(-1)]


def _only(attrs: dict, allowed: set[str]) -> None:
    extra = sorted(set(attrs) - allowed)
    if extra:
        raise Unsupported(f"attribute{'s' if len(extra) > 1 else ''} {', '.join(extra)} "
                          f"{'are' if len(extra) > 1 else 'is'} not supported")


def _static(x: Any, what: str) -> tuple:
    if any(d is None for d in x.shape):
        raise Unsupported(f"{what} needs a static shape, but it is {x.type} (give the symbolic dimensions values "
                          "with --dim NAME=SIZE)")
    return tuple(x.shape)


@handler("GatherGrad", domain=MS_DOMAIN)
def _gather_grad(ctx: Any, node: Any, attrs: dict) -> list:
    """ORT (shape, indices, dY) -> GatherGrad(indices, dY, shape=, axis=)."""
    _only(attrs, {"axis"})
    shape = _ints(ctx, node, 0, "shape")
    return [ctx.b.GatherGrad(ctx.x(node, 1), ctx.x(node, 2), shape=shape, axis=int(attrs.get("axis", 0)))]


@handler("GatherElementsGrad", domain=MS_DOMAIN)
def _gather_elements_grad(ctx: Any, node: Any, attrs: dict) -> list:
    """ORT (dY, shape, indices) -> GatherElementsGrad(dY, indices, shape=, axis=)."""
    _only(attrs, {"axis"})
    shape = _ints(ctx, node, 1, "shape")
    return [ctx.b.GatherElementsGrad(ctx.x(node, 0), ctx.x(node, 2), shape=shape, axis=int(attrs.get("axis", 0)))]


def _slice_attrs(ctx: Any, node: Any, attrs: dict, first: int) -> dict:
    """starts, ends, axes, steps: inputs ``first``.. (opset 10+, and ORT's SliceGrad), else attributes."""
    if first == 1 and ctx.opset < 10:
        _only(attrs, {"starts", "ends", "axes"})
        kw = {k: [int(v) for v in attrs[k]] for k in ("starts", "ends", "axes") if k in attrs}
        kw.setdefault("axes", None)
    else:
        _only(attrs, set())
        kw = {k: _ints(ctx, node, first + j, k) for j, k in enumerate(("starts", "ends", "axes", "steps"))}
    if kw.get("starts") is None or kw.get("ends") is None:
        raise Unsupported("starts and ends are required")
    return kw


@handler("Slice")
def _slice(ctx: Any, node: Any, attrs: dict) -> list:
    return [ctx.b.Slice(ctx.x(node, 0), **_slice_attrs(ctx, node, attrs, 1))]


@handler("SliceGrad", domain=MS_DOMAIN)
def _slice_grad(ctx: Any, node: Any, attrs: dict) -> list:
    """ORT (dY, shape, starts, ends, axes, steps) -> SliceGrad(dY, shape=, starts=, ends=, axes=, steps=)."""
    shape = _ints(ctx, node, 1, "shape")
    return [ctx.b.SliceGrad(ctx.x(node, 0), shape=shape, **_slice_attrs(ctx, node, attrs, 2))]


def _parts(res: Any) -> list:
    return list(res) if isinstance(res, tuple) else [res]


@handler("Split")
def _split(ctx: Any, node: Any, attrs: dict) -> list:
    _only(attrs, {"axis", "split", "num_outputs"})
    x = ctx.x(node, 0)
    axis = int(attrs.get("axis", 0))
    split = [int(v) for v in attrs["split"]] if "split" in attrs else _ints(ctx, node, 1, "split")
    k = len(node.output)
    if split is not None:
        return _parts(ctx.b.Split(x, axis=axis, split=split))
    if "num_outputs" in attrs:
        k = int(attrs["num_outputs"])
    elif -x.rank <= axis < x.rank and x.shape[axis] is not None and x.shape[axis] % k:
        raise Unsupported(f"it splits axis {axis} of size {x.shape[axis]} into {k} equal parts (opset {ctx.opset} "
                          "has no uneven last part)")
    if k == 1:
        return [ctx.b.Identity(x)]
    return _parts(ctx.b.Split(x, axis=axis, num_outputs=k))


@handler("SplitTraining", domain=MS_DOMAIN)
def _split_training(ctx: Any, node: Any, attrs: dict) -> list:
    """ORT (input, split) -> SplitTraining(X, split=, axis=)."""
    _only(attrs, {"axis", "num_outputs"})
    split = _ints(ctx, node, 1, "split")
    if split is None:
        raise Unsupported("its split input is missing")
    return _parts(ctx.b.SplitTraining(ctx.x(node, 0), split=split, axis=int(attrs.get("axis", 0))))


@handler("ConcatTraining", domain=MS_DOMAIN)
def _concat_training(ctx: Any, node: Any, attrs: dict) -> list:
    """ConcatTraining; its lengths, known from the static shapes, are known at import too (the SplitTraining
    of its gradient reads them as its split sizes)."""
    _only(attrs, {"axis"})
    xs = [ctx.x(node, i) for i in range(len(node.input))]
    axis = int(attrs["axis"]) if "axis" in attrs else 0
    res = ctx.b.ConcatTraining(*xs, axis=axis)
    lengths = [x.shape[axis] for x in xs] if -xs[0].rank <= axis < xs[0].rank else [None]
    if len(node.output) > 1 and node.output[1] and None not in lengths:
        ctx.consts[node.output[1]] = np.array(lengths, np.int64)
    return list(res[:len(node.output)])


@handler("Squeeze")
def _squeeze(ctx: Any, node: Any, attrs: dict) -> list:
    _only(attrs, {"axes"})
    x = ctx.x(node, 0)
    axes = [int(a) for a in attrs["axes"]] if "axes" in attrs else _ints(ctx, node, 1, "axes")
    if not axes:  # none, or an empty list (ONNX Runtime's reading): every size-1 axis
        axes = [k for k, d in enumerate(_static(x, "Squeeze without axes")) if d == 1]
    for a in axes:  # said of the node in ONNX's terms (the op's type rule would say it too)
        if not -x.rank <= a < x.rank:
            raise Unsupported(f"axis {a} is out of range for a rank-{x.rank} input (axes go from {-x.rank} to "
                              f"{x.rank - 1})" if x.rank else f"axis {a} is out of range: the input is a scalar")
    if not axes:
        return [ctx.b.Identity(x)]
    return [ctx.b.Squeeze(x, axes=axes)]


@handler("Expand")
def _expand(ctx: Any, node: Any, attrs: dict) -> list:
    """To a value's shape (``Expand(x, Shape(v))``, as gradir's BroadcastTo exports): BroadcastTo(x, v);
    else Expand with the shape folded."""
    x = ctx.x(node, 0)
    like = ctx.shape_value(node, 1)
    if like is not None:
        return [ctx.b.BroadcastTo(x, like)]
    shape = _ints(ctx, node, 1, "shape") or []
    if any(d < 1 for d in shape):
        raise Unsupported(f"its shape {shape} has a dimension below 1")
    out = broadcast_shape(list(x.shape), shape)
    if out is None:
        raise Unsupported(f"{x.type} does not broadcast with the shape {shape}")
    check_limits("its result", x.dtype.value, out)
    if not shape:
        return [ctx.b.Identity(x)]
    return [ctx.b.Expand(x, shape=shape)]


@handler("Trilu")
def _trilu(ctx: Any, node: Any, attrs: dict) -> list:
    _only(attrs, {"upper"})
    k = _ints(ctx, node, 1, "k")
    if k is not None and len(k) != 1:
        raise Unsupported(f"its k has {len(k)} values; ONNX's k is one number")
    return [ctx.b.Trilu(ctx.x(node, 0), upper=int(attrs.get("upper", 1)), k=k[0] if k else 0)]
