"""``export_onnx``: a gradir graph as an ONNX model.

Standard ops become ``ai.onnx`` ops, ONNX Runtime's gradient ops their ``com.microsoft`` ops (so ORT's
training build runs the result), labels become ONNX names (values without one keep ``tN``), and
``Constant`` ops become initializers.  An op with no ONNX or ORT counterpart of identical semantics is
an error naming it, unless ``custom_domain=True`` writes it in the ``ai.gradir`` domain (for viewing
and for round trips through ``import_onnx``, not for ORT); a user's op without ONNX data, or any op whose
data says ``ai.gradir``, is written there without asking.  The model passes
``onnx.checker.check_model(full_check=True)``.

How an op is written comes from its class: its ``ONNX`` data (``gradir.ir.onnxmap.OnnxMap``), or a
hand-written exporter for what is not data (``export_ops``).
"""


from __future__ import annotations

import os
from typing import Any, Optional, Union

import numpy as np

from ...errors import ArgumentError, Diagnostic, GradirError, OnnxError, path_problem, shown
from ...errors import OnnxUnsupported as NoCounterpart
from ...ir.graph import Graph
from ...ir.op import Op
from ...ir.labels import output_labels_of
from ...ir.types import DType
from .common import DTYPE_TO_ONNX, GRADIR_DOMAIN, require_onnx
from .export_ops import EXPORTERS, LIST_TYPES, exporter_for, exports_in_gradir_domain

__all__ = ["export_onnx", "DEFAULT_OPSET", "EXPORTERS", "Export", "exporter_for", "exports_in_gradir_domain"]

DEFAULT_OPSET = 17
MIN_OPSET = 11
MAX_MODEL_BYTES = (1 << 31) - 1  # protobuf's limit for one message


def export_onnx(graph: Union[Graph, str, "os.PathLike[str]"], path: Union[str, "os.PathLike[str]", None] = None, *,
                opset: int = DEFAULT_OPSET, custom_domain: bool = False) -> Any:
    """The ONNX ``ModelProto`` of ``graph`` (a Graph, IR text or a .gir path); written to ``path`` if given
    (atomically; ``"-"`` is standard output).  Wrong argument types and values are ``ArgumentError``s."""
    from ...text.syntax import graph_argument
    onnx = require_onnx()
    path = _path_argument(path)
    if (not isinstance(opset, int) or isinstance(opset, bool)
            or not MIN_OPSET <= opset <= onnx.defs.onnx_opset_version()):
        raise ArgumentError(f"export_onnx(): opset must be an int from {MIN_OPSET} to "
                            f"{onnx.defs.onnx_opset_version()} (the installed onnx's newest), got {shown(opset)}")
    if not isinstance(custom_domain, (bool, np.bool_)):
        raise ArgumentError(f"export_onnx(): custom_domain must be True or False, got {shown(custom_domain)}")
    graph = graph_argument(graph, "export_onnx()")
    source = graph.source.filename if graph.source is not None else None
    if path is not None and path != "-" and source and _same_file(source, path):
        raise GradirError(Diagnostic("the output is the graph's own file; write the model to another path",
                                     filename=path))
    from ...ops.composite import expand_composites
    model = Export(onnx, expand_composites(graph), opset, bool(custom_domain)).run()  # composites as primitives
    if path is not None:
        from ...fileio import write_file
        write_file(path, _serialized(model, graph))
    return model


def _path_argument(path: Any) -> Optional[str]:
    """``export_onnx``'s ``path``: None, or a non-empty str or ``os.PathLike`` of one (else ``ArgumentError``)."""
    if path is None:
        return None
    if isinstance(path, os.PathLike):
        try:
            path = os.fspath(path)
        except Exception as e:  # noqa: BLE001 - a caller's __fspath__ that raises is the caller's problem
            raise ArgumentError(f"export_onnx(): path cannot be read as a path ({type(e).__name__})") from None
    if not isinstance(path, str):
        raise ArgumentError(f"export_onnx(): path must be a str, an os.PathLike or None, got {type(path).__name__}")
    if not path or "\0" in path:
        raise ArgumentError(f"export_onnx(): path must be a non-empty file name without NUL, got {shown(path)}")
    problem = path_problem(path)
    if problem:
        raise ArgumentError(f"export_onnx(): path {shown(path)} {problem}")
    return path


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _serialized(model: Any, graph: Graph) -> bytes:
    """The model's bytes; a model over protobuf's 2 GB limit is an error saying so (``Export.run`` checks
    the size first, this is the last guard)."""
    try:
        return model.SerializeToString()
    except ValueError as e:  # protobuf: "Message ... exceeds maximum protobuf size of 2GB"
        raise OnnxError(Diagnostic(f"the model cannot be written: {e}",
                                   filename=graph.source.filename if graph.source is not None else None)) from None


class Export:
    def __init__(self, onnx: Any, graph: Graph, opset: int, custom: bool) -> None:
        self.onnx, self.h, self.graph, self.opset, self.custom = onnx, onnx.helper, graph, opset, custom
        self.nodes: list = []
        self.inits: list = []
        self.domains: set[str] = set()
        self.names: dict[str, str] = {}
        self.taken: set[str] = set()  # every ONNX value name in use: the graph's own first, then generated ones
        self.node_names: set[str] = set()
        self.bytes = 0  # the tensors' bytes so far (protobuf's 2 GB limit)
        self._n = 0
        self.value_infos: dict[str, Any] = {}  # ONNX name -> the type of a value an ORT kernel reads from the graph

    # -- what exporters use ------------------------------------------------------------------------------
    def name(self, v: Optional[str]) -> str:
        return "" if v is None else self.names.get(v, v)

    def type(self, v: str) -> Any:
        return self.graph.types[v]

    def fresh(self, hint: str) -> str:
        """A new ONNX name, never one of the graph's (its labels and ``tN`` names are reserved before any
        op is exported) nor one generated before: a label ``shape__1`` must not meet a generated one."""
        while True:
            self._n += 1
            name = f"{hint}__{self._n}"
            if name not in self.taken:
                self.taken.add(name)
                return name

    def tensor(self, a: np.ndarray, name: str) -> Any:
        self.bytes += a.nbytes
        if self.bytes > MAX_MODEL_BYTES:
            raise OnnxError(Diagnostic(f"the model's tensors exceed {MAX_MODEL_BYTES:,} bytes, protobuf's 2 GB limit "
                                       "for one ONNX file", filename=self.where))
        return self.onnx.numpy_helper.from_array(a, name)

    def init(self, a: np.ndarray, hint: str = "const") -> str:
        name = self.fresh(hint)
        self.inits.append(self.tensor(np.asarray(a), name))
        return name

    def declare(self, v: str) -> None:
        """Write gradir value ``v``'s type to the graph's value_info: ORT's MaxPoolGrad and AveragePoolGrad take
        their result's shape from there."""
        self.value_infos[self.name(v)] = self.type(v)

    def ints(self, values: Any, hint: str = "shape") -> str:
        return self.init(np.array(list(values), np.int64), hint)

    def node(self, op_type: str, inputs: list, outputs: list, domain: str = "", **attrs: Any) -> None:
        if domain:
            self.domains.add(domain)
        attrs = {k: v for k, v in attrs.items() if v is not None}
        name = f"{op_type}_{outputs[0]}" if outputs and outputs[0] else op_type
        while name in self.node_names:
            self._n += 1
            name = f"{op_type}__{self._n}"
        self.node_names.add(name)
        made = {k: v for k, v in attrs.items() if isinstance(v, self.onnx.AttributeProto)}
        node = self.h.make_node(op_type, inputs, outputs, name=name, domain=domain or None,
                                **{k: v for k, v in attrs.items() if k not in made})
        node.attribute.extend(made.values())
        self.nodes.append(node)

    def float_attr(self, op: Op, attr: str, dtype: Optional[Any] = None) -> float:
        """A float attribute for an ONNX/ORT op, whose attributes are float32: in a Float64 op a value float32
        does not hold exactly (0.01) would compute something else, so that op has no exact counterpart."""
        v = float(op.resolved_attrs()[attr])
        dt = dtype if dtype is not None else self.type(op.results[0]).dtype
        if dt == DType.Float64 and float(np.float32(v)) != v:
            raise NoCounterpart(f"its {attr}={v!r} is not a float32 number, and the ONNX attribute is float32 (the "
                                f"model would compute with {float(np.float32(v))!r} where gradir computes in "
                                "Float64)")
        return v

    @property
    def where(self) -> Optional[str]:
        return self.graph.source.filename if self.graph.source is not None else None

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
            if lb is None and o in self.names:  # an unlabelled output of a labelled input is keyed by its name
                renames.append((o, o))
                continue
            if lb is None or self.names.get(o) == lb:
                continue
            if o in inputs or o in self.names or any(o == x for x, _ in renames):
                renames.append((o, lb))
            else:
                self.names[o] = lb
        # reserve every name the graph itself gives the model before generating any
        self.taken.update(self.name(i.name) for i in g.inputs)
        self.taken.update(self.name(r) for op in g.ops for r in op.results)
        self.taken.update(lb for _, lb in renames)
        problems = []
        for op in g.ops:
            if exports_in_gradir_domain(type(op)):
                self._custom(op)
                continue
            fn = exporter_for(type(op))
            mark = (len(self.nodes), len(self.inits), set(self.domains))
            try:
                if fn is None:
                    raise NoCounterpart("it has no ONNX or ONNX Runtime counterpart")
                fn(self, op)
            except NoCounterpart as e:
                del self.nodes[mark[0]:], self.inits[mark[1]:]  # what the op's exporter wrote before it gave up
                self.domains = mark[2]
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
            pair = (o, lb if lb is not None else o)
            if pair in renames:
                self.node("Identity", [self.name(o)], [pair[1]])
                name = pair[1]
            else:
                name = self.name(o)
            outputs.append(self._info(name, g.types[o]))
        graph = h.make_graph(self.nodes, g.name or "gradir", [self._info(self.name(i.name), i.type) for i in g.inputs],
                             outputs, initializer=self.inits,
                             value_info=[self._info(n, t) for n, t in self.value_infos.items()
                                         if n not in {o.name for o in outputs}])
        opsets = [h.make_opsetid("", self.opset)] + [h.make_opsetid(d, 1) for d in sorted(self.domains)]
        model = h.make_model(graph, opset_imports=opsets, producer_name="gradir")
        model.ir_version = min(model.ir_version, 10)  # ORT 1.19 reads IR 10 at most
        size = model.ByteSize()
        if size > MAX_MODEL_BYTES:
            raise OnnxError(Diagnostic(f"the model would be {size:,} bytes, over protobuf's 2 GB limit for one ONNX "
                                       "file", filename=self.where))
        try:
            self.onnx.checker.check_model(model, full_check=True)
        except Exception as e:  # noqa: BLE001 - a bug here, not the user's: say so plainly
            raise OnnxError(f"the exported model fails onnx.checker (a gradir bug; please report it): {e}") from None
        return model

    def _info(self, name: str, t: Any) -> Any:
        return self.h.make_tensor_value_info(name, DTYPE_TO_ONNX[t.dtype], list(t.shape))

    def _custom(self, op: Op) -> None:
        """The gradir op itself in the ``ai.gradir`` domain.  A float attribute float32 does not hold exactly
        is written as a one-element Float64 tensor attribute (a list of floats as a Float64 tensor of them),
        so ``import_onnx`` reads back the very number; an empty list gets its type from the attribute's kind."""
        attrs = {}
        for k, v in op.resolved_attrs().items():
            if v is None:
                continue
            spec = op.attr_spec(k)
            kind = spec.kind if spec is not None else ""
            if isinstance(v, float) and float(np.float32(v)) != v and not np.isnan(v):
                v = self.tensor(np.array(v, np.float64), k)
            elif kind == "floats" and any(float(np.float32(x)) != x and not np.isnan(x) for x in v):
                v = self.tensor(np.array(v, np.float64), k)
            elif isinstance(v, tuple) and not v and kind in LIST_TYPES:
                v = self.h.make_attribute(k, [], attr_type=getattr(self.onnx.AttributeProto, LIST_TYPES[kind]))
            attrs[k] = list(v) if isinstance(v, tuple) else v
        self.node(op.op_name, [self.name(v) for v in op.operands], [self.name(r) for r in op.results],
                  domain=GRADIR_DOMAIN, **attrs)
