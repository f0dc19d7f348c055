"""``export_onnx``: a gradir graph as an ONNX model.

Standard ops become ``ai.onnx`` ops, ONNX Runtime's gradient ops their ``com.microsoft`` ops (so ORT's
training build runs the result), labels become ONNX names (values without one keep ``tN``), and
``Constant`` ops become initializers.  An op with no ONNX or ORT counterpart of identical semantics is
an error naming it, unless ``custom_domain=True`` writes it in the ``ai.gradir`` domain (for viewing
and for round trips through ``import_onnx``, not for ORT).  The model passes
``onnx.checker.check_model(full_check=True)``.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Optional, Union

import numpy as np

from ..constants import value_array
from ..errors import ArgumentError, Diagnostic, OnnxError
from ..errors import OnnxUnsupported as NoCounterpart
from ..graph import Graph
from ..ir import Op
from ..labels import output_labels_of
from .common import DTYPE_TO_ONNX, GRADIR_DOMAIN, MS_DOMAIN, require_onnx

__all__ = ["export_onnx", "DEFAULT_OPSET", "EXPORTERS"]

DEFAULT_OPSET = 17
MIN_OPSET = 11

Exporter = Callable[["_Export", Op], None]
EXPORTERS: dict[str, Exporter] = {}


def exporter(*names: str) -> Callable[[Exporter], Exporter]:
    def register(fn: Exporter) -> Exporter:
        for n in names:
            EXPORTERS[n] = fn
        return fn
    return register


def export_onnx(graph: Union[Graph, str, "os.PathLike[str]"], path: Union[str, "os.PathLike[str]", None] = None, *,
                opset: int = DEFAULT_OPSET, custom_domain: bool = False) -> Any:
    """The ONNX ``ModelProto`` of ``graph`` (a Graph, IR text or a .gir path); written to ``path`` if given."""
    from ..syntax import graph_argument
    onnx = require_onnx()
    graph = graph_argument(graph, "export_onnx()")
    if (not isinstance(opset, int) or isinstance(opset, bool)
            or not MIN_OPSET <= opset <= onnx.defs.onnx_opset_version()):
        raise ArgumentError(f"opset must be an int from {MIN_OPSET} to {onnx.defs.onnx_opset_version()} (the installed "
                            f"onnx's newest), got {opset!r}")
    model = _Export(onnx, graph, opset, custom_domain).run()
    if path is not None:
        from ..fileio import write_file
        write_file(path, model.SerializeToString())
    return model


class _Export:
    def __init__(self, onnx: Any, graph: Graph, opset: int, custom: bool) -> None:
        self.onnx, self.h, self.graph, self.opset, self.custom = onnx, onnx.helper, graph, opset, custom
        self.nodes: list = []
        self.inits: list = []
        self.domains: set[str] = set()
        self.names: dict[str, str] = {}
        self._n = 0

    # -- what exporters use ------------------------------------------------------------------------------
    def name(self, v: Optional[str]) -> str:
        return "" if v is None else self.names.get(v, v)

    def type(self, v: str) -> Any:
        return self.graph.types[v]

    def fresh(self, hint: str) -> str:
        self._n += 1
        return f"{hint}__{self._n}"

    def init(self, a: np.ndarray, hint: str = "const") -> str:
        name = self.fresh(hint)
        self.inits.append(self.onnx.numpy_helper.from_array(np.asarray(a), name))
        return name

    def ints(self, values: Any, hint: str = "shape") -> str:
        return self.init(np.array(list(values), np.int64), hint)

    def node(self, op_type: str, inputs: list, outputs: list, domain: str = "", **attrs: Any) -> None:
        if domain:
            self.domains.add(domain)
        attrs = {k: v for k, v in attrs.items() if v is not None}
        name = f"{op_type}_{outputs[0]}" if outputs and outputs[0] else self.fresh(op_type)
        self.nodes.append(self.h.make_node(op_type, inputs, outputs, name=name, domain=domain or None, **attrs))

    # -- the export --------------------------------------------------------------------------------------
    def run(self) -> Any:
        g, h = self.graph, self.h
        for i in g.inputs:
            if i.label is not None:
                self.names[i.name] = i.label
        out_labels = output_labels_of(g)
        renames: list[tuple[str, str]] = []  # (value, label) outputs that need an Identity
        inputs = {i.name for i in g.inputs}
        for o, lb in zip(g.outputs, out_labels):
            if lb is None or self.names.get(o) == lb:
                continue
            if o in inputs or o in self.names or any(o == x for x, _ in renames):
                renames.append((o, lb))
            else:
                self.names[o] = lb
        problems = []
        for op in g.ops:
            fn = EXPORTERS.get(op.op_name)
            try:
                if fn is None:
                    raise NoCounterpart("it has no ONNX or ONNX Runtime counterpart")
                fn(self, op)
            except NoCounterpart as e:
                if self.custom:
                    self._custom(op)
                else:
                    problems.append(Diagnostic(f"{op.op_name} ({', '.join(op.results)}): {e}; export it with "
                                               "--custom-domain (ai.gradir, not runnable by ONNX Runtime)",
                                               op.loc.line if op.loc else None, g.source))
        if problems:
            raise OnnxError(problems)
        outputs = []
        for o, lb in zip(g.outputs, out_labels):
            pair = (o, lb)
            if pair in renames:
                self.node("Identity", [self.name(o)], [lb])
                name = lb
            else:
                name = self.name(o)
            outputs.append(self._info(name, g.types[o]))
        graph = h.make_graph(self.nodes, g.name or "gradir", [self._info(self.name(i.name), i.type) for i in g.inputs],
                             outputs, initializer=self.inits)
        opsets = [h.make_opsetid("", self.opset)] + [h.make_opsetid(d, 1) for d in sorted(self.domains)]
        model = h.make_model(graph, opset_imports=opsets, producer_name="gradir")
        model.ir_version = min(model.ir_version, 10)  # ORT 1.19 reads IR 10 at most
        try:
            self.onnx.checker.check_model(model, full_check=True)
        except Exception as e:  # noqa: BLE001 - a bug here, not the user's: say so plainly
            raise OnnxError(f"the exported model fails onnx.checker (a gradir bug; please report it): {e}") from None
        return model

    def _info(self, name: str, t: Any) -> Any:
        return self.h.make_tensor_value_info(name, DTYPE_TO_ONNX[t.dtype], list(t.shape))

    def _custom(self, op: Op) -> None:
        attrs = {}
        for k, v in op.resolved_attrs().items():
            if v is None:
                continue
            attrs[k] = list(v) if isinstance(v, tuple) else v
        self.node(op.op_name, [self.name(v) for v in op.operands], [self.name(r) for r in op.results],
                  domain=GRADIR_DOMAIN, **attrs)


def _io(e: _Export, op: Op) -> tuple[list[str], list[str]]:
    return [e.name(v) for v in op.operands], [e.name(r) for r in op.results]


def _same(onnx_name: str, domain: str = "", attrs: tuple = ()) -> Exporter:
    def fn(e: _Export, op: Op) -> None:
        ins, outs = _io(e, op)
        kw = {k: op.resolved_attrs()[k] for k in attrs}
        e.node(onnx_name, ins, outs, domain, **kw)
    return fn


for _n in ("Identity", "Neg", "Exp", "Log", "Sqrt", "Relu", "Sigmoid", "Tanh", "Add", "Sub", "Mul", "Div", "MatMul",
           "Sum"):
    EXPORTERS[_n] = _same(_n)
EXPORTERS["LeakyRelu"] = _same("LeakyRelu", attrs=("alpha",))
for _n in ("ReluGrad", "SigmoidGrad", "TanhGrad", "GeluGrad", "FastGeluGrad"):
    EXPORTERS[_n] = _same(_n, MS_DOMAIN)
for _n in ("LeakyReluGrad", "QuickGeluGrad"):
    EXPORTERS[_n] = _same(_n, MS_DOMAIN, ("alpha",))
for _n in ("SoftmaxGrad", "SoftmaxGrad_13", "LogSoftmaxGrad", "LogSoftmaxGrad_13"):
    EXPORTERS[_n] = _same(_n, MS_DOMAIN, ("axis",))
EXPORTERS["FastGelu"] = _same("FastGelu", MS_DOMAIN)
EXPORTERS["QuickGelu"] = _same("QuickGelu", MS_DOMAIN, ("alpha",))


@exporter("FusedMatMul")
def _fused_matmul(e: _Export, op: Op) -> None:
    ins, outs = _io(e, op)
    a = op.resolved_attrs()
    e.node("FusedMatMul", ins, outs, MS_DOMAIN, alpha=float(a["alpha"]),
           **{k: int(a[k]) for k in ("transA", "transB", "transBatchA", "transBatchB")})


@exporter("SoftmaxCrossEntropyLoss")
def _sce(e: _Export, op: Op) -> None:
    if e.opset < 12:
        raise NoCounterpart("ONNX has SoftmaxCrossEntropyLoss from opset 12; use --opset 12 or later")
    ins, outs = _io(e, op)
    a = op.resolved_attrs()
    e.node("SoftmaxCrossEntropyLoss", ins, outs, reduction=a["reduction"], ignore_index=a.get("ignore_index"))


@exporter("SoftmaxCrossEntropyLossGrad")
def _sce_grad(e: _Export, op: Op) -> None:
    ins, outs = _io(e, op)
    a = op.resolved_attrs()  # without ignore_index, gradir's kernel ignores label -1 as ORT's does
    e.node("SoftmaxCrossEntropyLossGrad", ins, outs, MS_DOMAIN, reduction=a["reduction"],
           ignore_index=a.get("ignore_index"))


@exporter("Gelu")
def _gelu(e: _Export, op: Op) -> None:
    ins, outs = _io(e, op)
    if e.opset >= 20:
        e.node("Gelu", ins, outs)
    else:
        e.node("Gelu", ins, outs, MS_DOMAIN)


@exporter("Constant")
def _constant(e: _Export, op: Op) -> None:
    t = e.type(op.results[0])
    a = value_array(op.attrs["value"], t)
    e.inits.append(e.onnx.numpy_helper.from_array(np.asarray(a), e.name(op.results[0])))


@exporter("Transpose")
def _transpose(e: _Export, op: Op) -> None:
    ins, outs = _io(e, op)
    perm = op.resolved_attrs().get("perm")
    e.node("Transpose", ins, outs, perm=None if perm is None else list(perm))


@exporter("Softmax", "LogSoftmax")
def _softmax(e: _Export, op: Op) -> None:
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


@exporter("Reshape")
def _reshape(e: _Export, op: Op) -> None:
    ins, outs = _io(e, op)
    shape = list(op.attrs["shape"])
    if 0 in shape and e.opset < 14:
        raise NoCounterpart("a 0 in its shape means 'copy this dimension' in ONNX before opset 14 (allowzero); "
                            "use --opset 14 or later")
    e.node("Reshape", [ins[0], e.ints(shape)], outs, allowzero=1 if 0 in shape else None)


@exporter("Unsqueeze")
def _unsqueeze(e: _Export, op: Op) -> None:
    ins, outs = _io(e, op)
    axes = list(op.attrs["axes"])
    if e.opset >= 13:
        e.node("Unsqueeze", [ins[0], e.ints(axes, "axes")], outs)
    else:
        e.node("Unsqueeze", ins, outs, axes=axes)


def _reduce(e: _Export, name: str, x: str, out: str, axes: Optional[list], keepdims: bool, axes_input: int) -> None:
    if axes is not None and not axes:
        e.node("Identity", [x], [out])
    elif e.opset >= axes_input:
        e.node(name, [x] + ([e.ints(axes, "axes")] if axes is not None else []), [out], keepdims=int(keepdims))
    else:
        e.node(name, [x], [out], axes=axes, keepdims=int(keepdims))


@exporter("ReduceSum", "ReduceMean")
def _reduce_op(e: _Export, op: Op) -> None:
    ins, outs = _io(e, op)
    a = op.resolved_attrs()
    axes = None if a["axes"] is None else list(a["axes"])
    _reduce(e, op.op_name, ins[0], outs[0], axes, a["keepdims"], 13 if op.op_name == "ReduceSum" else 18)


@exporter("Scale")
def _scale(e: _Export, op: Op) -> None:
    ins, outs = _io(e, op)
    t = e.type(op.operands[0])
    e.node("Scale", [ins[0], e.init(np.array(op.attrs["factor"], t.dtype.numpy), "factor")], outs, MS_DOMAIN)


@exporter("ZerosLike")
def _zeros_like(e: _Export, op: Op) -> None:
    ins, outs = _io(e, op)
    t = e.type(op.operands[0])
    zero = e.onnx.numpy_helper.from_array(np.zeros(1, t.dtype.numpy))
    e.node("ConstantOfShape", [_shape_of(e, op.operands[0])], outs, value=zero)


def _shape_of(e: _Export, v: str) -> str:
    """``Shape(v)``: the shape read from the value itself, as gradir's ``Like`` operands do (``import_onnx``
    turns ``Expand(x, Shape(v))`` back into ``BroadcastTo(x, v)``)."""
    name = e.fresh("shape")
    e.node("Shape", [e.name(v)], [name])
    return name


@exporter("BroadcastTo")
def _broadcast_to(e: _Export, op: Op) -> None:
    ins, outs = _io(e, op)
    e.node("Expand", [ins[0], _shape_of(e, op.operands[1])], outs)


@exporter("ReduceSumTo")
def _reduce_sum_to(e: _Export, op: Op) -> None:
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


@exporter("LSTMTraining", "LSTMGrad")
def _lstm(e: _Export, op: Op) -> None:
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
          "clip": a["clip"], "activations": None if a["activations"] is None else list(a["activations"])}
    e.node(op.op_name, ins, outs, MS_DOMAIN, **kw)
