"""The ONNX import of ONNX's ``GRU`` (ai.onnx): a ``GRUTraining`` whose first two results are the node's ``Y`` and
``Y_h``, so that a model with a GRU differentiates with ``gradir grad``.  ORT's own ``GRUTraining`` and ``GRUGrad``
(com.microsoft) import by the ONNX data of their classes (``gradir/ops/gru.py``); ``GRUGrad`` after a check of
its ZRH slot, which a shifted node leaves empty."""

from __future__ import annotations

from typing import Any

from ...ir.onnxmap import onnx_map
from ...ops.gru import GRUGradOp
from .common import MS_DOMAIN
from .import_ops import Unsupported, handler, mapped

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


@handler("GRUGrad", domain=MS_DOMAIN)
def _gru_grad(ctx: Any, node: Any, attrs: dict) -> list:
    """ORT's GRUGrad, by its class's ONNX data.  ORT's gradient builder copies the forward GRU's inputs as listed,
    then HAll, ZRH, dHAll, dHFinal: from a GRU that lists fewer than six, they land early, and when only Y_h was
    used (dHAll empty) ZRH's slot (7) is empty, so the node would fail on that before GRUGrad's own check of the
    shifted inputs (``ops/gru.py``) could say why: say it here."""
    if len(node.input) < 10 and (len(node.input) <= 7 or not node.input[7]):
        raise Unsupported(f"input 7 (ZRH) is missing, and the node has {len(node.input)} inputs, not 10: the inputs "
                          "are shifted, as ONNX Runtime's gradient builder writes them for a GRU node that lists "
                          "fewer than its six inputs; GRUGrad's inputs are X, W, R, B, SL, H0, HAll, ZRH, dHAll, "
                          "dHFinal (list all six in the GRU, '' for SL and H0, and build the training graph again)")
    return mapped(GRUGradOp, onnx_map(GRUGradOp))(ctx, node, attrs)
