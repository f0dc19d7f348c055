"""``import_onnx``: an ONNX model (a plain forward model, or a training graph ONNX Runtime built) as a
gradir graph.

* The model is checked with ``onnx.checker`` first; a model that fails is refused with its message.
* Inputs keep their ONNX names as labels; so do outputs.  A training graph written by ORT's
  ``generate_artifacts`` has its ``InPlaceAccumulatorV2`` nodes stripped: the imported graph outputs
  each parameter's gradient (``<param>_grad``) directly, and its gradient buffers and reset flag go.
* Initializers: integer ones (shapes, axes) are values known at import time: they fold into the
  attributes of the ops that read them, or become ``Constant`` ops; a float initializer of one element
  becomes a ``Constant``; larger ones (a forward model's weights) become labelled inputs, whose values
  ``ImportedModel.inputs`` holds (``gradir import`` writes them beside the graph).
* Shape computations over static shapes (``Shape``, ``Size``, ``ConstantOfShape``, integer arithmetic,
  ``Gather``, ``Concat``, ...) are evaluated at import time (with ``onnx.reference``).
* Every node gradir cannot express exactly is reported, all at once, in one ``OnnxError``: its name,
  domain, op type and why.
* Each op line ends with a comment naming the ONNX node it came from.
"""

from __future__ import annotations

import os
from typing import Any, Optional, Union

import numpy as np

from ..builder import GraphBuilder
from ..constants import MAX_CONSTANT_ELEMENTS
from ..errors import Diagnostic, GradirError, OnnxError
from ..ir import OPS
from ..syntax import parse
from ..types import DType
from .common import GRADIR_DOMAIN, MS_DOMAIN, ONNX_TO_DTYPE, ImportedModel, require_onnx
from ..errors import OnnxUnsupported as Unsupported
from .import_ops import HANDLERS, custom
from .lowering import regroup
from .naming import keep_value_names, reserve_value_names

__all__ = ["import_onnx", "Importer"]

# ai.onnx ops evaluated at import time when every input is known (shape arithmetic)
FOLDABLE = {"Shape", "Size", "Gather", "Concat", "Unsqueeze", "Squeeze", "Reshape", "Cast", "Add", "Sub", "Mul",
            "Div", "Slice", "Range", "ConstantOfShape", "Equal", "Where", "ReduceProd", "Identity", "Neg", "Abs",
            "Max", "Min", "Expand", "Not", "Less", "Greater", "Tile", "Flatten", "Transpose", "ReduceSum"}
ACCUMULATOR = "InPlaceAccumulatorV2"


def _domain(d: str) -> str:
    return "" if d in ("", "ai.onnx") else d


def import_onnx(model: Union[str, "os.PathLike[str]", bytes, Any], *, dims: Optional[dict[str, int]] = None,
                name: Optional[str] = None) -> ImportedModel:
    """Import an ONNX model (a path, the bytes of one, or an ``onnx.ModelProto``); see the module doc.

    ``dims`` gives symbolic input dimensions values (``{"batch": 64}``), so shape computations fold.
    """
    onnx = require_onnx()
    filename = "<model>"
    if isinstance(model, (str, os.PathLike)):
        filename = os.fspath(model)
        try:
            proto = onnx.load(filename)
        except OSError as e:
            raise OnnxError(Diagnostic(f"cannot read the model: {e.strerror or e}", filename=filename)) from None
        except Exception as e:  # noqa: BLE001 - protobuf's DecodeError and friends
            raise OnnxError(Diagnostic(f"not an ONNX model ({type(e).__name__}: {e})", filename=filename)) from None
    elif isinstance(model, (bytes, bytearray)):
        try:
            proto = onnx.load_from_string(bytes(model))
        except Exception as e:  # noqa: BLE001
            raise OnnxError(Diagnostic(f"not an ONNX model ({type(e).__name__}: {e})", filename=filename)) from None
    elif isinstance(model, onnx.ModelProto):
        proto = model
    else:
        from ..errors import ArgumentError
        raise ArgumentError(f"import_onnx() takes a path, bytes or an onnx.ModelProto, not {type(model).__name__}")
    if proto.ByteSize() == 0 or not proto.HasField("graph"):  # an empty file parses as an empty model
        raise OnnxError(Diagnostic("not an ONNX model: it is empty" if proto.ByteSize() == 0 else
                                   "not an ONNX model: it has no graph", filename=filename))
    try:
        onnx.checker.check_model(proto)
    except Exception as e:  # noqa: BLE001 - onnx.checker.ValidationError and C++ errors
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise OnnxError(Diagnostic(f"the model fails onnx.checker: {first}", filename=filename)) from None
    if dims:
        named = {d.dim_param for vi in proto.graph.input for d in vi.type.tensor_type.shape.dim if d.dim_param}
        unknown = sorted(set(dims) - named)
        if unknown:
            raise OnnxError(Diagnostic(f"--dim {unknown[0]}: no input has a dimension named {unknown[0]!r} (the "
                                       f"symbolic dimensions are: {', '.join(sorted(named)) or 'none'})",
                                       filename=filename))
    return Importer(proto, filename, dims or {}, name).run()


class Importer:
    """One import: the builder, what each ONNX name stands for, what is known at import time."""

    def __init__(self, proto: Any, filename: str, dims: dict[str, int], name: Optional[str]) -> None:
        self.onnx = require_onnx()
        self.proto = proto
        self.filename = filename
        self.dims = dims
        g = proto.graph
        self.opset = next((o.version for o in proto.opset_import if _domain(o.domain) == ""), 1)
        self.b = GraphBuilder(name or _graph_name(g.name or os.path.splitext(os.path.basename(filename))[0]))
        reserve_value_names(self.b, g)  # the model's own tN names go back to their values (naming.py)
        self.values: dict[str, Any] = {}  # ONNX name -> gradir Value
        self.consts: dict[str, np.ndarray] = {}  # ONNX name -> value known at import time
        self.shape_of: dict[str, Any] = {}  # ONNX name of a Shape(...) result -> the Value it is the shape of
        self.inputs: dict[str, np.ndarray] = {}  # labelled inputs made from initializers
        self.problems: list[str] = []
        self.poisoned: set[str] = set()
        self.comments: list[tuple[int, int, str]] = []  # (first op, end op, ONNX node name)
        self.notes: list[str] = []

    # -- what handlers use ----------------------------------------------------------------------------
    def op_class(self, name: str) -> Any:
        if name not in OPS:
            raise Unsupported(f"gradir has no {name} op")
        return OPS[name]

    def x(self, node: Any, i: int) -> Any:
        """Input ``i`` of ``node`` as a gradir value (``None`` when omitted)."""
        if i >= len(node.input) or not node.input[i]:
            return None
        n = node.input[i]
        if n in self.values:
            return self.values[n]
        if n in self.consts:
            v = self._materialize(n, self.consts[n])
            self.values[n] = v
            return v
        raise Unsupported(f"input {n!r} is defined nowhere")  # onnx.checker catches this first

    def const(self, node: Any, i: int, what: str) -> np.ndarray:
        """Input ``i``'s value, which must be known at import time."""
        n = node.input[i] if i < len(node.input) else ""
        if n in self.consts:
            return self.consts[n]
        raise Unsupported(f"its {what} (input {i}, {n!r}) must be known at import time (an initializer, a "
                          "Constant, or computed from static shapes)")

    def shape_value(self, node: Any, i: int) -> Any:
        """The value whose ``Shape`` input ``i`` is, when it is one (``Expand`` to a value's shape)."""
        n = node.input[i] if i < len(node.input) else ""
        return self.shape_of.get(n)

    # -- the import ----------------------------------------------------------------------------------------
    def run(self) -> ImportedModel:
        g = self.proto.graph
        nodes, grad_outputs = self._strip_accumulators(list(g.node))
        inits = {t.name: t for t in g.initializer}
        nodes = fuse_erf_gelu(self.onnx, nodes, inits, {o.name for o in g.output}, self.notes)
        nodes = regroup(self.onnx, nodes, {o.name for o in g.output}, MS_DOMAIN)  # ops export wrote as standard ops
        used = {n for node in nodes for n in node.input} | {o.name for o in g.output} | set(grad_outputs)
        for vi in g.input:
            if vi.name not in used and (vi.name in inits or vi.name in self._dropped):
                continue
            self._graph_input(vi, inits.get(vi.name))
        for name, t in inits.items():
            if name in self.values or name not in used:
                continue
            self._initializer(name, self.onnx.numpy_helper.to_array(t))
        for node in nodes:
            self._node(node)
        if self.problems:
            self._fail()
        outputs = [(o.name, o.name) for o in g.output if o.name not in self._dropped]
        outputs += [(n, label) for n, label in grad_outputs.items()]
        self._outputs(outputs)
        graph = keep_value_names(self.b.build(), self.values, g)
        return ImportedModel(self._with_comments(graph), self.inputs, self.notes)

    def _strip_accumulators(self, nodes: list) -> tuple[list, dict[str, str]]:
        """Drop ``InPlaceAccumulatorV2`` nodes: their gradient input becomes an output labelled with its
        own name (ORT names it ``<param>_grad``); the buffers, reset flag and accumulator outputs go."""
        self._dropped: set[str] = set()
        grads: dict[str, str] = {}
        kept = []
        for node in nodes:
            if node.op_type == ACCUMULATOR and _domain(node.domain) == MS_DOMAIN:
                grads[node.input[1]] = node.input[1]
                self._dropped.update(node.output)
                self._dropped.add(node.input[0])
                if len(node.input) > 2:
                    self._dropped.add(node.input[2])
                continue
            kept.append(node)
        if grads:
            still = {n for node in kept for n in node.input}
            self._dropped -= still
            self.notes.append(f"stripped {len(grads)} {ACCUMULATOR} node{'s' if len(grads) > 1 else ''}: the graph "
                              "outputs each gradient directly")
        return kept, grads

    def _type(self, vi: Any) -> tuple[DType, list]:
        tt = vi.type.tensor_type
        if not vi.type.HasField("tensor_type") or tt.elem_type not in ONNX_TO_DTYPE:
            kind = self.onnx.TensorProto.DataType.Name(tt.elem_type) if vi.type.HasField("tensor_type") else \
                vi.type.WhichOneof("value")
            raise Unsupported(f"input {vi.name!r} has type {kind}; gradir has Float32, Float64, Int32, Int64, Bool")
        shape = []
        for d in tt.shape.dim:
            if d.HasField("dim_value"):
                shape.append(int(d.dim_value))
            elif d.HasField("dim_param") and d.dim_param in self.dims:
                shape.append(int(self.dims[d.dim_param]))
            else:
                shape.append(None)
        if not tt.HasField("shape"):
            raise Unsupported(f"input {vi.name!r} has no shape (not even its rank)")
        return ONNX_TO_DTYPE[tt.elem_type], shape

    def _graph_input(self, vi: Any, init: Any) -> None:
        try:
            dtype, shape = self._type(vi)
        except Unsupported as e:
            self.problems.append(f"graph input {vi.name!r}: {e}")
            self.poisoned.add(vi.name)
            return
        self.values[vi.name] = self.b.input(dtype.value, shape, label=vi.name)
        if init is not None:
            self.inputs[vi.name] = self.onnx.numpy_helper.to_array(init)

    def _initializer(self, name: str, a: np.ndarray) -> None:
        try:
            dtype = DType.from_numpy(a.dtype)
        except ValueError:
            self.problems.append(f"initializer {name!r}: dtype {a.dtype} has no gradir dtype")
            self.poisoned.add(name)
            return
        if dtype.is_float and a.size > 1:
            self.values[name] = self.b.input(dtype.value, list(a.shape), label=name)
            self.inputs[name] = a
        else:
            self.consts[name] = a

    def _materialize(self, name: str, a: np.ndarray) -> Any:
        flat = a.reshape(-1)
        if a.size > MAX_CONSTANT_ELEMENTS:
            if a.size and np.all(flat == flat[0]) and not np.isnan(flat[0]).any():
                return self.b.constant(flat[0].item(), DType.from_numpy(a.dtype).value, list(a.shape))
            raise Unsupported(f"{name!r} is a {a.size:,}-element value known at import time; a Constant holds at "
                              f"most {MAX_CONSTANT_ELEMENTS:,}")
        return self.b.constant(np.array(a, order="C"))  # np.ascontiguousarray makes a 0-d array 1-d

    def _node(self, node: Any) -> None:
        where = f"node {node.name or '(unnamed)'!r} ({_domain(node.domain) or 'ai.onnx'} {node.op_type})"
        if any(n in self.poisoned for n in node.input if n):
            # fed by a node that could not be imported: report it only if its own op type is unsupported
            d = _domain(node.domain)
            if (d, node.op_type) not in HANDLERS and not (d == GRADIR_DOMAIN and node.op_type in OPS) and \
                    not (d == "" and node.op_type in FOLDABLE | {"Constant"}):
                self.problems.append(f"{where}: gradir has no equivalent op")
            self.poisoned.update(node.output)
            return
        attrs = {a.name: self.onnx.helper.get_attribute_value(a) for a in node.attribute}
        domain = _domain(node.domain)
        try:
            if node.op_type == "Constant" and domain == "":
                self.consts[node.output[0]] = _constant_value(self.onnx, node)
                return
            if self._fold(node, domain, attrs):
                return
            fn = HANDLERS.get((domain, node.op_type))
            if fn is None and domain == GRADIR_DOMAIN and node.op_type in OPS:
                fn = custom(node.op_type)
            if fn is None:
                raise Unsupported("gradir has no equivalent op" if domain in ("", MS_DOMAIN) else
                                  f"the domain {domain!r} is not supported")
            first = self.b.num_ops
            outs = fn(self, node, attrs)
        except Unsupported as e:
            self.problems.append(f"{where}: {e}")
            self.poisoned.update(node.output)
            return
        except GradirError as e:
            msg = "; ".join(d.message for d in e.diagnostics)
            self.problems.append(f"{where}: {msg}")
            self.poisoned.update(node.output)
            return
        if self.b.num_ops > first:
            self.comments.append((first, self.b.num_ops, node.name or node.op_type))
        for k, n in enumerate(node.output):
            if not n:
                continue
            v = outs[k] if k < len(outs) else None
            if v is None:
                self.problems.append(f"{where}: output {k} ({n!r}) is not supported")
                self.poisoned.add(n)
            else:
                self.values[n] = v

    def _fold(self, node: Any, domain: str, attrs: dict) -> bool:
        """Evaluate ``node`` now when what it computes is known at import time."""
        if domain == "" and node.op_type in ("Shape", "Size") and node.input[0] in self.values:
            v = self.values[node.input[0]]
            if None in v.shape:  # not known now; Expand and ConstantOfShape of it are BroadcastTo and ZerosLike
                if node.op_type == "Shape" and int(attrs.get("start", 0)) == 0 and attrs.get("end") is None:
                    self.shape_of[node.output[0]] = v
                    return True
                return False
            shape = np.array(v.shape, np.int64)
            if node.op_type == "Size":
                self.consts[node.output[0]] = np.array(int(np.prod(shape)), np.int64)
                return True
            start, end = int(attrs.get("start", 0)), attrs.get("end")
            self.consts[node.output[0]] = shape[start:None if end is None else int(end)]
            if start == 0 and end is None:
                self.shape_of[node.output[0]] = v
            return True
        if domain == "" and node.op_type == "ConstantOfShape" and node.input[0] in self.shape_of:
            v = self.shape_of[node.input[0]]
            fill = self.onnx.numpy_helper.to_array(attrs["value"]) if "value" in attrs else np.zeros(1, np.float32)
            if fill.size == 1 and fill.reshape(-1)[0] == 0 and not np.signbit(fill.reshape(-1)[0]) and \
                    fill.dtype == v.dtype.numpy:
                self.values[node.output[0]] = self.b.ZerosLike(v)  # the zeros of v's shape and dtype
                self.comments.append((self.b.num_ops - 1, self.b.num_ops, node.name or node.op_type))
                return True
        if domain == MS_DOMAIN and node.op_type == "BroadcastGradientArgs":
            a, b = (self.consts.get(n) for n in node.input[:2])
            if a is None or b is None:
                return False
            ra, rb = _broadcast_gradient_args(a, b)
            for n, r in zip(node.output, (ra, rb)):
                if n:
                    self.consts[n] = r
            return True
        if domain != "" or node.op_type not in FOLDABLE:
            return False
        if not all((not n) or n in self.consts for n in node.input):
            return False
        from onnx.reference import ReferenceEvaluator
        onnx = self.onnx
        ins = [n for n in node.input if n]
        model = onnx.helper.make_model(
            onnx.helper.make_graph([node], "fold", [
                onnx.helper.make_tensor_value_info(n, onnx.helper.np_dtype_to_tensor_dtype(self.consts[n].dtype),
                                                   self.consts[n].shape) for n in ins],
                                   [onnx.helper.make_tensor_value_info(n, 0, None) for n in node.output if n]),
            opset_imports=[onnx.helper.make_opsetid("", self.opset)])
        try:
            res = ReferenceEvaluator(model).run(None, {n: self.consts[n] for n in ins})
        except Exception as e:  # noqa: BLE001 - the reference evaluator's own errors
            raise Unsupported(f"cannot evaluate it at import time: {e}") from None
        for n, r in zip([n for n in node.output if n], res):
            self.consts[n] = np.asarray(r)
        return True

    def _outputs(self, outputs: list[tuple[str, str]]) -> None:
        seen: set[str] = set()
        for n, label in outputs:
            if n in self.values:
                v = self.values[n]
            elif n in self.consts:
                v = self._materialize(n, self.consts[n])
            else:
                raise OnnxError(Diagnostic(f"graph output {n!r} is computed by nothing gradir imported",
                                            filename=self.filename))
            if v.name in seen or any(i.name == v.name and i.label != label for i in self.b.inputs):
                v = self.b.Identity(v)
            seen.add(v.name)
            self.b.output(v, label=label)

    def _fail(self) -> None:
        n = len(self.problems)
        head = Diagnostic(f"{n} node{'s' if n > 1 else ''} cannot be imported:", filename=self.filename)
        raise OnnxError([head] + [Diagnostic(p, filename=self.filename) for p in self.problems])

    def _with_comments(self, graph: Any) -> Any:
        """The graph re-read from its text with each op line ending in ``# <ONNX node name>``.  An ONNX name
        that is the value's own gradir name (``t3`` for ``t3``: a model gradir exported) is no label."""
        for i in graph.inputs:
            if i.label == i.name:
                i.label = None
        graph.output_labels = [None if lb == o else lb for o, lb in zip(graph.outputs, graph.output_labels)]
        lines = graph.to_text().split("\n")
        head = (1 if graph.name is not None else 0) + len(graph.inputs)
        for first, end, name in self.comments:
            for k in range(first, end):
                lines[head + k] += "  # " + name.replace("\n", " ")
        return parse("\n".join(lines), self.filename + ".gir" if not self.filename.startswith("<") else "<import>")


def _graph_name(name: str) -> str:
    import re
    name = re.sub(r"[^A-Za-z0-9_]", "_", name)
    return name if name and not name[0].isdigit() else "g_" + name


def _constant_value(onnx: Any, node: Any) -> np.ndarray:
    a = node.attribute[0]
    v = onnx.helper.get_attribute_value(a)
    if a.name == "value":
        return onnx.numpy_helper.to_array(v)
    kinds = {"value_float": np.float32, "value_floats": np.float32, "value_int": np.int64, "value_ints": np.int64}
    if a.name in kinds:
        return np.array(v, kinds[a.name])
    raise Unsupported(f"Constant with {a.name} is not supported")


def _broadcast_gradient_args(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """ORT's BroadcastGradientArgs: the axes of the broadcast result to sum for each of two shapes."""
    a, b = [int(x) for x in a.reshape(-1)], [int(x) for x in b.reshape(-1)]
    n = max(len(a), len(b))
    pa, pb = [1] * (n - len(a)) + a, [1] * (n - len(b)) + b
    ra = [k for k in range(n) if pa[k] == 1 and pb[k] != 1 or k < n - len(a)]
    rb = [k for k in range(n) if pb[k] == 1 and pa[k] != 1 or k < n - len(b)]
    return np.array(ra, np.int64), np.array(rb, np.int64)


def fuse_erf_gelu(onnx: Any, nodes: list, inits: dict, graph_outputs: set[str], notes: list[str]) -> list:
    """An erf-written GELU (``x * (1 + Erf(x / sqrt(2))) * 0.5`` as PyTorch exports it, with the Mul by 0.5
    first or last) becomes one ``Gelu`` node, as ONNX Runtime's transformers make it before training."""
    consts = {n: onnx.numpy_helper.to_array(t) for n, t in inits.items()}
    for node in nodes:
        if node.op_type == "Constant" and _domain(node.domain) == "" and node.attribute and \
                node.attribute[0].name == "value":
            consts[node.output[0]] = onnx.numpy_helper.to_array(node.attribute[0].t)
    producer = {o: n for n in nodes for o in n.output}
    uses: dict[str, list] = {}
    for n in nodes:
        for i in n.input:
            uses.setdefault(i, []).append(n)

    def scalar(name: str, want: float, tol: float = 1e-6) -> bool:
        a = consts.get(name)
        return a is not None and a.size == 1 and abs(float(a.reshape(-1)[0]) - want) <= tol * abs(want)

    def only_use(name: str) -> Any:
        u = uses.get(name, [])
        return u[0] if len(u) == 1 and name not in graph_outputs else None

    def other(node: Any, name: str) -> Optional[str]:
        ins = list(node.input)
        return ins[1 - ins.index(name)] if len(ins) == 2 and name in ins else None

    drop: set[int] = set()
    replace: dict[int, Any] = {}
    for erf in nodes:
        if erf.op_type != "Erf" or _domain(erf.domain) != "":
            continue
        div = producer.get(erf.input[0])
        if div is None or only_use(erf.input[0]) is not erf:
            continue
        if div.op_type == "Div" and scalar(div.input[1], 2 ** 0.5):
            x = div.input[0]
        elif div.op_type == "Mul" and (scalar(div.input[1], 2 ** -0.5) or scalar(div.input[0], 2 ** -0.5)):
            x = div.input[0] if scalar(div.input[1], 2 ** -0.5) else div.input[1]
        else:
            continue
        add = only_use(erf.output[0])
        if add is None or add.op_type != "Add" or not scalar(other(add, erf.output[0]) or "", 1.0):
            continue
        m1 = only_use(add.output[0])
        if m1 is None or m1.op_type != "Mul":
            continue
        partner = other(m1, add.output[0])
        half = producer.get(partner or "")
        chain = [div, erf, add, m1]
        if partner == x:  # x * (1 + erf) * 0.5
            m2 = only_use(m1.output[0])
            if m2 is None or m2.op_type != "Mul" or not scalar(other(m2, m1.output[0]) or "", 0.5):
                continue
            chain.append(m2)
            out = m2.output[0]
        elif half is not None and half.op_type == "Mul" and x in half.input and \
                scalar(other(half, x) or "", 0.5) and only_use(half.output[0]) is m1:  # (x * 0.5) * (1 + erf)
            chain.append(half)
            out = m1.output[0]
        else:
            continue
        if any(id(n) in drop for n in chain):
            continue
        gelu = onnx.helper.make_node("Gelu", [x], [out], name="+".join(n.name for n in chain if n.name) or "Gelu",
                                     domain=MS_DOMAIN)
        last = max(nodes.index(n) for n in chain)
        drop.update(id(n) for n in chain)
        replace[last] = gelu
    if not replace:
        return nodes
    notes.append(f"fused {len(replace)} erf-written GELU{'s' if len(replace) > 1 else ''} into Gelu, as ONNX Runtime "
                 f"does")
    return [replace[k] if k in replace else n for k, n in enumerate(nodes) if k in replace or id(n) not in drop]
