"""The ONNX import of ONNX's ``GRU`` (ai.onnx): a ``GRUTraining`` whose first two results are the node's ``Y`` and
``Y_h``, so that a model with a GRU differentiates with ``gradir grad``.  ORT's own ``GRUTraining`` and ``GRUGrad``
(com.microsoft) need no handler: their ONNX data is in their classes (``gradir/ops/gru.py``)."""

from __future__ import annotations

from typing import Any

from .import_ops import Unsupported, handler

_ATTRS = {"hidden_size", "direction", "activations", "clip", "linear_before_reset", "layout"}


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else v


@handler("GRU")
def _gru(ctx: Any, node: Any, attrs: dict) -> list:
    extra = sorted(set(attrs) - _ATTRS)
    if extra:
        raise Unsupported(f"attribute{'s' if len(extra) > 1 else ''} {', '.join(extra)} "
                          f"{'are' if len(extra) > 1 else 'is'} not supported")
    if attrs.get("layout", 0) != 0:
        raise Unsupported("layout=1 (batch first) is not supported; gradir's GRU is sequence first")
    ins = [ctx.x(node, i, optional=i >= 3) for i in range(min(len(node.input), 6))]
    kw: dict[str, Any] = {"hidden_size": int(attrs["hidden_size"])} if "hidden_size" in attrs else {}
    if "direction" in attrs:
        kw["direction"] = _text(attrs["direction"])
    if "activations" in attrs:
        kw["activations"] = [_text(a) for a in attrs["activations"]]
    if "clip" in attrs:
        kw["clip"] = float(attrs["clip"])
    if "linear_before_reset" in attrs:
        kw["linear_before_reset"] = int(attrs["linear_before_reset"])
    res = ctx.b.GRUTraining(*ins, **kw)
    return list(res[:2])
