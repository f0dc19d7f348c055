"""Export of ``Pad`` (``gradir/ops/pad.py``): ``pads``, ``constant_value`` and ``axes`` as Int64 / X-typed
initializers (ONNX's inputs from opset 11, gradir's export floor); ``axes`` is an input from opset 18, so
before it the pads are written for every axis.  ``PadGrad`` has no ONNX counterpart (the ``ai.gradir``
domain)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ...ir.op import Op
from ...ops.pad import PadOp, resolve_pads
from .export_ops import exporter

__all__: list[str] = []


@exporter(PadOp)
def _pad(e: Any, op: Op) -> None:
    a = op.resolved_attrs()
    x = op.operands[0]
    pads, axes = list(a["pads"]), a["axes"]
    if axes is not None and e.opset < 18:
        begin, end = resolve_pads(e.type(x).rank, pads, axes)
        pads, axes = begin + end, None
    ins = [e.name(x), e.ints(pads, "pads")]
    if a["mode"] == "constant" and a["constant_value"] != 0.0 or axes is not None:
        # X's type, as the kernel casts it (an Int32 X pads with int(constant_value))
        value = np.array(a["constant_value"]).astype(e.type(x).dtype.numpy)
        ins.append(e.init(value, "constant_value") if a["mode"] == "constant" else "")
    if axes is not None:
        ins.append(e.ints(axes, "axes"))
    e.node("Pad", ins, [e.name(op.results[0])], mode=a["mode"])
