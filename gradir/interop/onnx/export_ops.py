"""How each gradir op is written as ONNX: ``exporter_for(op class)`` gives the function that writes an op
(``fn(export, op)``, ``export`` the ``exporter.Export`` under way) or ``None`` when it has no counterpart.

Most come from the op's ``ONNX`` data (``gradir.ir.onnxmap.OnnxMap``): ``_mapped`` writes the one node it
describes.  ``EXPORTERS`` holds the hand-written ones, by op class, for what is not data (an opset switch,
an attribute ONNX takes as an input, a lowering to standard ops, the LSTM's restrictions); they override
the data.  A hand exporter raises ``NoCounterpart`` for an op it cannot write exactly (the export then
says so, or writes the op in ``ai.gradir`` with ``custom_domain=True``).
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import numpy as np

from ...ir.constants import value_array
from ...errors import OnnxUnsupported as NoCounterpart
from ...ir.op import Op
from ...ir.onnxmap import OnnxMap, onnx_map
from ...ops.activation import (GeluOp, LogSoftmaxGrad_13Op, LogSoftmaxGradOp, LogSoftmaxOp, SoftmaxGrad_13Op,
                               SoftmaxGradOp, SoftmaxOp)
from ...ops.constant import ConstantOp
from ...ops.lstm import LSTMGradOp, LSTMTrainingOp
from ...ops.math import ReduceMeanOp, ReduceSumOp, ReshapeOp
from ...ops.shape import BroadcastToOp, ReduceSumToOp, ScaleOp, UnsqueezeOp, ZerosLikeOp
from ...ir.types import DType
from . import lowering
from .common import GRADIR_DOMAIN, MS_DOMAIN

__all__ = ["EXPORTERS", "Exporter", "exporter", "exporter_for", "exports_in_gradir_domain", "LIST_TYPES"]

Export = Any  # exporter.Export (which imports this module): what the functions below are given

Exporter = Callable[[Any, Op], None]
EXPORTERS: dict[type[Op], Exporter] = {}  # the hand-written ones, by op class (they override ``Op.ONNX``)


def exporter(*classes: type[Op]) -> Callable[[Exporter], Exporter]:
    def register(fn: Exporter) -> Exporter:
        for c in classes:
            EXPORTERS[c] = fn
        return fn
    return register


def exporter_for(cls: type[Op]) -> Optional[Exporter]:
    """How an op of class ``cls`` is written as ONNX: its hand-written exporter, else one made from its
    ``ONNX`` data; ``None`` when it has neither (it has no counterpart) or its data says ``ai.gradir``."""
    fn = EXPORTERS.get(cls)
    if fn is not None:
        return fn
    m = onnx_map(cls)
    if m is None or m.domain == GRADIR_DOMAIN:
        return None
    return lambda e, op: _mapped(e, op, m)


def exports_in_gradir_domain(cls: type[Op]) -> bool:
    """Whether ``cls``'s ops are written in ``ai.gradir`` without ``custom_domain=True``: a user op without
    ONNX data, or an op whose data says ``ai.gradir`` (never a built-in without a counterpart: an ONNX Runtime
    user must not get a model ORT cannot run without asking for it)."""
    m = onnx_map(cls)
    return m is not None and m.domain == GRADIR_DOMAIN and cls not in EXPORTERS


LIST_TYPES = {"ints": "INTS", "floats": "FLOATS", "strs": "STRINGS"}


def _in_opset(onnx: Any, op_type: str, opset: int) -> bool:
    try:
        onnx.defs.get_schema(op_type, opset, "")
    except onnx.defs.SchemaError:
        return False
    return True


def _io(e: Export, op: Op) -> tuple[list[str], list[str]]:
    return [e.name(v) for v in op.operands], [e.name(r) for r in op.results]


def _mapped(e: Export, op: Op, m: OnnxMap) -> None:
    """``op`` as the one node its ``ONNX`` data describes: its operands in the data's order, the attributes
    it lists under their ONNX names (float ones as the float32 ONNX has, booleans as 0/1, an empty list
    with its type), an opset without the op a ``NoCounterpart`` saying which to use."""
    op_type = m.op_type(type(op))
    problem = m.opset_problem(op_type, e.opset)
    if problem:
        raise NoCounterpart(problem)
    if m.domain == "" and not _in_opset(e.onnx, op_type, e.opset):  # data naming an op ONNX lacks (a user's)
        raise NoCounterpart(f"its ONNX data names ai.onnx {op_type}, which opset {e.opset} does not have")
    a = op.resolved_attrs()
    kw: dict[str, Any] = {}
    for name, onnx_name in m.attrs.items():
        v = a.get(name)
        if v is None:
            continue
        kind = op.attr_spec(name).kind
        if kind == "float":
            v = e.float_attr(op, name)
        elif kind == "bool":
            v = int(v)
        elif kind == "floats" and e.type(op.results[0]).dtype == DType.Float64 and \
                any(float(np.float32(x)) != x for x in v):
            raise NoCounterpart(f"its {name}={list(v)!r} are not all float32 numbers, and the ONNX attribute is "
                                "float32")
        if isinstance(v, tuple):
            v = list(v) if v else e.h.make_attribute(onnx_name, [], attr_type=getattr(
                e.onnx.AttributeProto, LIST_TYPES[kind]))
        kw[onnx_name] = v
    e.node(op_type, [e.name(v) for v in m.onnx_inputs(op.operands)], [e.name(r) for r in op.results],
           m.domain, **kw)


@exporter(SoftmaxGradOp, SoftmaxGrad_13Op, LogSoftmaxGradOp, LogSoftmaxGrad_13Op)
def _softmax_grad(e: Export, op: Op) -> None:
    """Float32: ORT's op.  Float64, which ORT has no kernel of: the same arithmetic in standard ops,
    marked so that import_onnx reads the op back (``lowering``)."""
    ins, outs = _io(e, op)
    axis = int(op.resolved_attrs()["axis"])
    t = e.type(op.operands[1])
    if t.dtype != DType.Float64 or e.custom or t.rank == 0:
        e.node(op.op_name, ins, outs, MS_DOMAIN, axis=axis)
        return
    first = len(e.nodes)
    a = axis % t.rank
    axes = [a] if op.op_name.endswith("_13") else list(range(a, t.rank))
    dy, y = ins
    if op.op_name.startswith("Log"):
        ex, s, m = e.fresh("exp"), e.fresh("summed"), e.fresh("scaled")
        e.node("Exp", [y], [ex])
        _reduce(e, "ReduceSum", dy, s, axes, True, 13)
        e.node("Mul", [ex, s], [m])
        e.node("Sub", [dy, m], outs)
    else:
        p, s, d = e.fresh("product"), e.fresh("summed"), e.fresh("centred")
        e.node("Mul", [dy, y], [p])
        _reduce(e, "ReduceSum", p, s, axes, True, 13)
        e.node("Sub", [dy, s], [d])
        e.node("Mul", [y, d], outs)
    lowering.mark(e.nodes, first, op.op_name, {"axis": axis}, ins, outs)

@exporter(GeluOp)
def _gelu(e: Export, op: Op) -> None:
    ins, outs = _io(e, op)
    if e.opset >= 20:
        e.node("Gelu", ins, outs)
    else:
        e.node("Gelu", ins, outs, MS_DOMAIN)


@exporter(ConstantOp)
def _constant(e: Export, op: Op) -> None:
    """A ``Constant`` node (an initializer would come back from ``import_onnx`` as a weight input); a fill
    (one number filling its shape) is ``ConstantOfShape``, never the materialized array (a fill of
    [30000, 30000] is 3.6 GB as a tensor and a few bytes as a fill)."""
    t = e.type(op.results[0])
    value = op.attrs["value"]
    out = e.name(op.results[0])
    if not isinstance(value, tuple) and t.numel != 1:
        fill = e.tensor(np.full(1, value, t.dtype.numpy), "value")
        e.node("ConstantOfShape", [e.ints(t.shape)], [out], value=fill)
        return
    e.node("Constant", [], [out], value=e.tensor(np.array(value_array(value, t)), "value"))


@exporter(SoftmaxOp, LogSoftmaxOp)
def _softmax(e: Export, op: Op) -> None:
    ins, outs = _io(e, op)
    rank = e.type(op.operands[0]).rank
    axis = op.resolved_attrs()["axis"]
    if e.opset >= 13:
        e.node(op.op_name, ins, outs, axis=axis)
    elif axis % max(rank, 1) == rank - 1:
        e.node(op.op_name, ins, outs, axis=rank - 1)
    else:
        raise NoCounterpart(f"before opset 13, ONNX's {op.op_name} flattens from its axis on; use --opset 13 or "
                            "later for a softmax over one inner axis")


@exporter(ReshapeOp)
def _reshape(e: Export, op: Op) -> None:
    ins, outs = _io(e, op)
    shape = list(op.attrs["shape"])
    if 0 in shape and e.opset < 14:
        raise NoCounterpart("a 0 in its shape means 'copy this dimension' in ONNX before opset 14 (allowzero); "
                            "use --opset 14 or later")
    e.node("Reshape", [ins[0], e.ints(shape)], outs, allowzero=1 if 0 in shape else None)


@exporter(UnsqueezeOp)
def _unsqueeze(e: Export, op: Op) -> None:
    ins, outs = _io(e, op)
    axes = list(op.attrs["axes"])
    if e.opset >= 13:
        e.node("Unsqueeze", [ins[0], e.ints(axes, "axes")], outs)
    else:
        e.node("Unsqueeze", ins, outs, axes=axes)


def _reduce(e: Export, name: str, x: str, out: str, axes: Optional[list], keepdims: bool, axes_input: int) -> None:
    if axes is not None and not axes:
        e.node("Identity", [x], [out])
    elif e.opset >= axes_input:
        e.node(name, [x] + ([e.ints(axes, "axes")] if axes is not None else []), [out], keepdims=int(keepdims))
    else:
        e.node(name, [x], [out], axes=axes, keepdims=int(keepdims))


@exporter(ReduceSumOp, ReduceMeanOp)
def _reduce_op(e: Export, op: Op) -> None:
    ins, outs = _io(e, op)
    a = op.resolved_attrs()
    axes = None if a["axes"] is None else list(a["axes"])
    _reduce(e, op.op_name, ins[0], outs[0], axes, a["keepdims"], 13 if op.op_name == "ReduceSum" else 18)


@exporter(ScaleOp)
def _scale(e: Export, op: Op) -> None:
    ins, outs = _io(e, op)
    t = e.type(op.operands[0])
    with np.errstate(over="ignore"):  # a Float32 op's factor is float32(factor), inf past its range, as in gradir
        factor = np.array(op.attrs["factor"], t.dtype.numpy)
    e.node("Scale", [ins[0], e.init(factor, "factor")], outs, MS_DOMAIN)


@exporter(ZerosLikeOp)
def _zeros_like(e: Export, op: Op) -> None:
    ins, outs = _io(e, op)
    t = e.type(op.operands[0])
    zero = e.onnx.numpy_helper.from_array(np.zeros(1, t.dtype.numpy))
    e.node("ConstantOfShape", [_shape_of(e, op.operands[0])], outs, value=zero)


def _shape_of(e: Export, v: str) -> str:
    """``Shape(v)``: the shape read from the value itself, as gradir's ``Like`` operands do (``import_onnx``
    turns ``Expand(x, Shape(v))`` back into ``BroadcastTo(x, v)``)."""
    name = e.fresh("shape")
    e.node("Shape", [e.name(v)], [name])
    return name


@exporter(BroadcastToOp)
def _broadcast_to(e: Export, op: Op) -> None:
    ins, outs = _io(e, op)
    e.node("Expand", [ins[0], _shape_of(e, op.operands[1])], outs)


@exporter(ReduceSumToOp)
def _reduce_sum_to(e: Export, op: Op) -> None:
    ins, outs = _io(e, op)
    x, like = e.type(op.operands[0]), e.type(op.operands[1])
    lead = x.rank - like.rank
    axes = list(range(lead)) + [lead + k for k, d in enumerate(like.shape) if d == 1 and x.shape[lead + k] != 1]
    if any(d is None for d in like.shape[:]) or any(x.shape[lead + k] is None for k, d in enumerate(like.shape)
                                                      if d == 1):
        raise NoCounterpart("it needs static shapes to export")
    if not axes:
        e.node("Identity", ins[:1], outs)
        return
    summed = e.fresh("summed")
    _reduce(e, "ReduceSum", ins[0], summed, axes, True, 13)
    e.node("Reshape", [summed, e.ints(like.shape)], outs)


@exporter(LSTMTrainingOp, LSTMGradOp)
def _lstm(e: Export, op: Op) -> None:
    a = op.resolved_attrs()
    if op.op_name == "LSTMGrad":
        if a["direction"] != "forward":
            raise NoCounterpart(f"ORT's LSTMGrad supports only direction 'forward', not {a['direction']!r}")
        if op.operands[3:4] != [None] and len(op.operands) > 3 and op.operands[3] is not None:
            raise NoCounterpart("ORT's LSTMGrad does not support sequence lengths (SL)")
        if len(op.operands) > 12 and op.operands[12] is not None:
            raise NoCounterpart("ORT's LSTMGrad does not support peepholes (P)")
    ins, outs = _io(e, op)
    kw = {"hidden_size": a["hidden_size"], "direction": a["direction"], "input_forget": a["input_forget"] or None,
          "clip": None if a["clip"] is None else e.float_attr(op, "clip"),
          "activations": None if a["activations"] is None else list(a["activations"])}
    e.node(op.op_name, ins, outs, MS_DOMAIN, **kw)
