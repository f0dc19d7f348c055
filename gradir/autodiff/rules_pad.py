"""The gradient rule of ``Pad`` (``gradir/ops/pad.py``): constant mode as ONNX Runtime's builder writes it, a
``Pad`` of dY with the pads negated (what the forward cropped comes back as zeros); reflect and edge, for which
ORT has no gradient, gradir's exact ``PadGrad``."""

from __future__ import annotations

from ..ir.op import Op
from .gradrules import Emitter, rule

__all__: list[str] = []


@rule("Pad")
def _pad(e: Emitter, op: Op, cts: list, need: list) -> list:
    a = op.attrs
    axes = {} if a.get("axes") is None else {"axes": list(a["axes"])}
    if a.get("mode", "constant") == "constant":
        return [e.Pad(cts[0], mode="constant", pads=[-p for p in a["pads"]], **axes)]
    return [e.PadGrad(cts[0], mode=a["mode"], pads=list(a["pads"]), **axes)]
