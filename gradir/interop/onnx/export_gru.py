"""ONNX export of the GRU layers (``gradir/ops/gru.py``).

* A ``GRUTraining`` whose ``ZRH`` nothing reads (what the import of ONNX's ``GRU`` gives, and any forward GRU)
  is ONNX's own ``GRU`` (ai.onnx; ``Y``, ``Y_h``): a standard op every runtime has, in every direction, with
  sequence lengths, ``clip``, Float32 and Float64.  The round trip gives the same ``GRUTraining`` back.  ONNX's
  ``GRU`` takes Int32 lengths only: with Int64 ones the op stays ORT's ``GRUTraining`` (a ``Cast`` would not
  come back as the same graph).
* Otherwise ``GRUTraining`` and ``GRUGrad`` are ORT's ``com.microsoft`` ops of the same name (activations in
  ORT's lower case, which its kernel compares case-sensitively).
* ORT's ``GRUGrad`` computes the forward direction only, without sequence lengths or ``clip``: such a
  ``GRUGrad`` has no counterpart of the same semantics and is refused, located (``--custom-domain`` writes it
  in ``ai.gradir``), as ``LSTMGrad`` is.  Float64 is written (``gradir export`` warns that ORT's kernels are
  Float32 only).  ``GRUTraining``, like ``LSTMTraining``, is written in any configuration as ORT's op with
  ONNX's GRU semantics.
"""

from __future__ import annotations

from typing import Any

from ...errors import OnnxUnsupported as NoCounterpart
from ...ir.op import Op
from ...ir.types import DType
from ...ops.gru import GRUGradOp, GRUTrainingOp
from .common import MS_DOMAIN
from .export_ops import exporter

__all__: list[str] = []

_ONNX_ACTS = {"sigmoid": "Sigmoid", "tanh": "Tanh"}


def _given(op: Op, i: int) -> bool:
    return len(op.operands) > i and op.operands[i] is not None


def _read(e: Any, v: str) -> bool:
    """Whether value ``v`` is read by an op or is an output of the graph being exported."""
    return v in e.graph.outputs or any(v in o.operands for o in e.graph.ops)


def _attrs(e: Any, op: Op, onnx_spelling: bool) -> dict[str, Any]:
    a = op.resolved_attrs()
    acts = a["activations"]
    if acts is not None and onnx_spelling:
        acts = [_ONNX_ACTS[x] for x in acts]
    return {"hidden_size": a["hidden_size"], "direction": a["direction"],
            "linear_before_reset": a["linear_before_reset"] or None,
            "clip": None if a["clip"] is None else e.float_attr(op, "clip"),
            "activations": None if acts is None else list(acts)}


def orts_gru_training_refuses(graph: Any, op: Op) -> bool:
    """Whether ``op`` is a ``GRUTraining`` exported as ORT's op (not ONNX's ``GRU``) in a configuration ORT's kernel
    refuses (reverse or bidirectional, sequence lengths, clip): ``gradir export`` warns of it."""
    if op.op_name != "GRUTraining":
        return False
    a = op.resolved_attrs()
    if a["direction"] == "forward" and not _given(op, 4) and a["clip"] is None:
        return False
    int32_lengths = not _given(op, 4) or graph.types[op.operands[4]].dtype == DType.Int32
    read = op.results[2] in graph.outputs or any(op.results[2] in o.operands for o in graph.ops)
    return read or not int32_lengths


@exporter(GRUTrainingOp, GRUGradOp)
def _gru(e: Any, op: Op) -> None:
    ins, outs = [e.name(v) for v in op.operands], [e.name(r) for r in op.results]
    a = op.resolved_attrs()
    int32_lengths = not _given(op, 4) or e.type(op.operands[4]).dtype == DType.Int32  # what ONNX's GRU takes
    if op.op_name == "GRUTraining" and int32_lengths and not _read(e, op.results[2]):
        e.node("GRU", ins, outs[:2], **_attrs(e, op, True))
        return
    if op.op_name == "GRUGrad":
        if a["direction"] != "forward":
            raise NoCounterpart(f"ORT's GRUGrad supports only direction 'forward', not {a['direction']!r}")
        if _given(op, 4):
            raise NoCounterpart("ORT's GRUGrad does not support sequence lengths (SL)")
        if a["clip"] is not None:
            raise NoCounterpart("ORT's GRUGrad does not support clip")
    e.node(op.op_name, ins, outs, MS_DOMAIN, **_attrs(e, op, False))
