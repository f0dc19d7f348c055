"""Export of the indexing, joining and shape ops whose attributes ONNX takes as inputs (docs/onnx.md): each
is written in the form the opset wants (``Slice``'s bounds as inputs from opset 10, ``Split``'s sizes as an
input from 13 and ``num_outputs`` from 18, ``Squeeze``'s axes as an input from 13, ``Trilu`` from 14), and
ONNX Runtime's gradient ops with their shapes and sizes as Int64 initializers, in ORT's input order."""

from __future__ import annotations

from typing import Any

import numpy as np

from ...errors import OnnxUnsupported as NoCounterpart
from ...ir.op import Op
from ...ops.concat import SplitOp, SplitTrainingOp, split_sizes
from ...ops.index import GatherElementsGradOp, GatherGradOp, SliceGradOp, SliceOp, TriluOp
from ...ops.shape import ExpandOp, SqueezeOp
from .common import MS_DOMAIN
from .export_ops import exporter

__all__: list[str] = []


def _io(e: Any, op: Op) -> tuple[list[str], list[str]]:
    return [e.name(v) for v in op.operands], [e.name(r) for r in op.results]


@exporter(GatherGradOp)
def _gather_grad(e: Any, op: Op) -> None:
    (indices, dy), outs = _io(e, op)
    e.node("GatherGrad", [e.ints(op.attrs["shape"]), indices, dy], outs, MS_DOMAIN, axis=op.attrs["axis"])


@exporter(GatherElementsGradOp)
def _gather_elements_grad(e: Any, op: Op) -> None:
    (dy, indices), outs = _io(e, op)
    e.node("GatherElementsGrad", [dy, e.ints(op.attrs["shape"]), indices], outs, MS_DOMAIN, axis=op.attrs["axis"])


def _bounds(e: Any, op: Op) -> list[str]:
    a = op.attrs
    ins = [e.ints(a["starts"], "starts"), e.ints(a["ends"], "ends")]
    axes = a["axes"] if a["axes"] is not None or a["steps"] is None else list(range(len(a["starts"])))
    if axes is not None:
        ins.append(e.ints(axes, "axes"))
    if a["steps"] is not None:
        ins.append(e.ints(a["steps"], "steps"))
    return ins


@exporter(SliceOp)
def _slice(e: Any, op: Op) -> None:
    ins, outs = _io(e, op)
    a = op.attrs
    if e.opset >= 10:
        e.node("Slice", ins + _bounds(e, op), outs)
        return
    if a["steps"] is not None and any(s != 1 for s in a["steps"]):  # pragma: no cover - gradir exports opset 11+
        raise NoCounterpart("ONNX's Slice has steps from opset 10")
    e.node("Slice", ins, outs, starts=list(a["starts"]), ends=list(a["ends"]),
           axes=None if a["axes"] is None else list(a["axes"]))


@exporter(SliceGradOp)
def _slice_grad(e: Any, op: Op) -> None:
    ins, outs = _io(e, op)
    e.node("SliceGrad", ins + [e.ints(op.attrs["shape"])] + _bounds(e, op), outs, MS_DOMAIN)


@exporter(SplitOp)
def _split(e: Any, op: Op) -> None:
    ins, outs = _io(e, op)
    a = op.attrs
    if a["num_outputs"] is not None and e.opset >= 18:
        e.node("Split", ins, outs, axis=a["axis"], num_outputs=a["num_outputs"])
        return
    split = a["split"]
    if split is None:
        t = e.type(op.operands[0])
        n = t.shape[a["axis"] % t.rank]
        if n is None:
            raise NoCounterpart(f"num_outputs with a '?' axis needs opset 18 or later (ONNX's num_outputs), not "
                                f"{e.opset}")
        split = split_sizes(n, None, a["num_outputs"])
    if e.opset >= 13:
        e.node("Split", ins + [e.ints(split, "split")], outs, axis=a["axis"])
    else:
        e.node("Split", ins, outs, axis=a["axis"], split=list(split))


@exporter(SplitTrainingOp)
def _split_training(e: Any, op: Op) -> None:
    ins, outs = _io(e, op)
    e.node("SplitTraining", ins + [e.ints(op.attrs["split"], "split")], outs, MS_DOMAIN, axis=op.attrs["axis"])


@exporter(SqueezeOp)
def _squeeze(e: Any, op: Op) -> None:
    ins, outs = _io(e, op)
    axes = list(op.attrs["axes"])
    if e.opset >= 13:
        e.node("Squeeze", [ins[0], e.ints(axes, "axes")], outs)
    else:
        e.node("Squeeze", ins, outs, axes=axes)


@exporter(ExpandOp)
def _expand(e: Any, op: Op) -> None:
    ins, outs = _io(e, op)
    e.node("Expand", [ins[0], e.ints(op.attrs["shape"])], outs)


@exporter(TriluOp)
def _trilu(e: Any, op: Op) -> None:
    ins, outs = _io(e, op)
    if e.opset < 14:
        raise NoCounterpart("ONNX has Trilu from opset 14; use --opset 14 or later")
    e.node("Trilu", [ins[0], e.init(np.array(op.attrs["k"], np.int64), "k")], outs, upper=op.attrs["upper"])
