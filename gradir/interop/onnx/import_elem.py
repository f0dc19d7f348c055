"""Import handlers of the logic family, the extremes and Pow (``gradir/ops/logic.py``, ``elementary.py``):
what is not data in their ONNX forms.

* ``Cast``'s ``to`` is a TensorProto number; gradir's is a dtype name.  A dtype gradir has no
  equivalent of (float16, uint8, string...) is refused naming it.
* ``ReduceMax`` takes ``axes`` as an attribute before opset 18 and as an input from 18 (folded into
  the attribute: it must be known at import), as ``ReduceSum`` does from 13.
* ``Pow``: ONNX allows an exponent of another dtype than the base (a float base and an integer
  exponent, ...); gradir's ``Pow`` reads one dtype, so such an exponent is cast to the base's first.
"""

from __future__ import annotations

from typing import Any, Optional

from .common import ONNX_TO_DTYPE
from .import_ops import Unsupported, handler


def _only(attrs: dict, allowed: set[str]) -> None:
    extra = sorted(set(attrs) - allowed)
    if extra:
        raise Unsupported(f"attribute{'s' if len(extra) > 1 else ''} {', '.join(extra)} "
                          f"{'are' if len(extra) > 1 else 'is'} not supported")


def _axes(ctx: Any, node: Any, attrs: dict) -> Optional[list[int]]:
    """Axes from the attribute (before opset 18) or input 1 (from 18, folded: known at import)."""
    if "axes" in attrs:
        return [int(a) for a in attrs["axes"]]
    if ctx.opset >= 18 and len(node.input) > 1 and node.input[1]:
        return [int(a) for a in ctx.const(node, 1, "axes", ints=True).reshape(-1)]
    return None


@handler("ReduceMax")
def _reduce_max(ctx: Any, node: Any, attrs: dict) -> list:
    _only(attrs, {"axes", "keepdims", "noop_with_empty_axes"})
    x = ctx.x(node, 0)
    axes = _axes(ctx, node, attrs)
    if not axes:
        if attrs.get("noop_with_empty_axes", 0):
            return [ctx.b.Identity(x)]
        axes = None
    return [ctx.b.ReduceMax(x, axes=axes, keepdims=bool(attrs.get("keepdims", 1)))]


@handler("Cast")
def _cast(ctx: Any, node: Any, attrs: dict) -> list:
    _only(attrs, {"to", "saturate"})
    to = attrs.get("to")
    if not isinstance(to, int) or isinstance(to, bool):
        raise Unsupported("its 'to' attribute must be a TensorProto data type number")
    dtype = ONNX_TO_DTYPE.get(to)
    if dtype is None:
        name = ctx.onnx.TensorProto.DataType.Name(to) if to in ctx.onnx.TensorProto.DataType.values() else str(to)
        raise Unsupported(f"to={name}: gradir's dtypes are {', '.join(d.value for d in ONNX_TO_DTYPE.values())}")
    return [ctx.b.Cast(ctx.x(node, 0), to=dtype.value)]


@handler("Pow")
def _pow(ctx: Any, node: Any, attrs: dict) -> list:
    _only(attrs, set())
    x, p = ctx.x(node, 0), ctx.x(node, 1)
    if not x.dtype.is_float:
        raise Unsupported(f"Pow of a {x.dtype} base is not supported (gradir's Pow is floating-point)")
    if p.dtype != x.dtype:
        p = ctx.b.Cast(p, to=x.dtype.value)
    return [ctx.b.Pow(x, p)]
