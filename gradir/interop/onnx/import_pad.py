"""Import of ONNX ``Pad``: ``pads``, ``constant_value`` and (opset 18+) ``axes`` are inputs from opset 11
(attributes ``pads``/``paddings`` and ``value`` before) and gradir attributes, so they must be known at import
(an initializer, a ``Constant``, a shape computation over static shapes).  ONNX's ``wrap`` mode (opset 19) is
refused, located at the node."""

from __future__ import annotations

from typing import Any

from .import_ops import Unsupported, handler

__all__: list[str] = []

_MODES = ("constant", "reflect", "edge")


@handler("Pad")
def _pad(ctx: Any, node: Any, attrs: dict) -> list:
    extra = sorted(set(attrs) - {"mode", "pads", "paddings", "value"})
    if extra:
        raise Unsupported(f"attribute{'s' if len(extra) > 1 else ''} {', '.join(extra)} not supported")
    mode = attrs.get("mode", b"constant")
    mode = mode.decode() if isinstance(mode, bytes) else str(mode)
    if mode not in _MODES:
        raise Unsupported(f"mode {mode!r} is not supported (gradir pads in modes {', '.join(_MODES)})")
    x = ctx.x(node, 0)
    kw: dict[str, Any] = {"mode": mode}
    if ctx.opset < 11:
        pads = attrs.get("pads", attrs.get("paddings"))
        if pads is None:
            raise Unsupported("it has no pads")
        kw["pads"] = [int(p) for p in pads]
        value = float(attrs.get("value", 0.0))
    else:
        kw["pads"] = [int(p) for p in ctx.const(node, 1, "pads", ints=True).reshape(-1)]
        value = 0.0
        if len(node.input) > 2 and node.input[2]:
            v = ctx.const(node, 2, "constant_value").reshape(-1)
            if v.size != 1:
                raise Unsupported(f"its constant_value has {v.size} elements, not one")
            value = float(v[0])
        if len(node.input) > 3 and node.input[3]:
            kw["axes"] = [int(a) for a in ctx.const(node, 3, "axes", ints=True).reshape(-1)]
    if value != 0.0:
        kw["constant_value"] = value
    return [ctx.b.Pad(x, **kw)]
