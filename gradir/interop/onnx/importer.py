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
  domain, op type and why; the import goes on past one, so those downstream of it are too
  (``unsupported``).
* Each op line ends with a comment naming the ONNX node it came from.

This module is the import's driver (``import_onnx``, ``Importer``); ``loading`` reads the model safely,
``patterns`` rewrites node patterns before the import (the GELUs), ``folding`` evaluates what is known at
import time, ``unsupported`` lists what cannot be imported, and ``import_ops`` turns each node into gradir ops.
"""

from __future__ import annotations

import os
from typing import Any, Optional, Union

import numpy as np

from ...ops.builder import GraphBuilder
from ...ir.constants import MAX_CONSTANT_ELEMENTS
from ...errors import ArgumentError, Diagnostic, GradirError, OnnxError, shown
from ...ir.op import OPS
from ...text.syntax import parse
from ...ir.types import DType
from .common import MS_DOMAIN, ONNX_TO_DTYPE, ImportedModel, onnx_domain, require_onnx
from ...errors import OnnxUnsupported as Unsupported
from .folding import FOLD_ELEMENTS, FOLDABLE, Folding, constant_value
from .import_ops import check_limits, handlers
from .loading import check_import_arguments, elem_type_name, read_model, tensor_array
from .lowering import regroup
from .naming import keep_value_names, reserve_value_names
from .patterns import fuse_gelus
from .unsupported import Listing, no_handler

__all__ = ["import_onnx", "import_model", "Importer"]

ACCUMULATOR = "InPlaceAccumulatorV2"
# the type (AttributeProto.AttributeType) of each attribute the importer reads, whatever the op
_FLOAT, _INT, _STRING, _TENSOR, _FLOATS, _INTS, _STRINGS = 1, 2, 3, 4, 6, 7, 8
ATTRIBUTE_TYPES = {
    **dict.fromkeys(["alpha", "beta", "clip", "value_float"], _FLOAT),
    **dict.fromkeys(["axis", "keepdims", "noop_with_empty_axes", "allowzero", "transA", "transB", "transBatchA",
                     "transBatchB", "layout", "scale_down", "hidden_size", "input_forget", "start", "end", "to",
                     "value_int", "ignore_index"], _INT),
    **dict.fromkeys(["axes", "perm", "value_ints"], _INTS),
    **dict.fromkeys(["approximate", "direction", "reduction"], _STRING),
    "activations": _STRINGS, "value": _TENSOR, "value_floats": _FLOATS}


def import_onnx(model: Union[str, "os.PathLike[str]", bytes, Any], *, dims: Optional[dict[str, int]] = None,
                name: Optional[str] = None, base_dir: Union[str, "os.PathLike[str]", None] = None,
                dropout_seed: Optional[int] = None) -> ImportedModel:
    """Import an ONNX model (a path, the bytes of one, or an ``onnx.ModelProto``); see the module doc.

    ``dims`` gives symbolic input dimensions values (``{"batch": 64}``), so shape computations fold.
    ``name`` is the graph's name (default: the ONNX graph's, or the file's).  ``base_dir`` is the directory
    an initializer's external data is read from: a model read from a path reads it from the model's own
    directory; one given as bytes or a ``ModelProto`` has no directory, so its external data is refused
    unless ``base_dir`` is given (never the current directory: a received model must not choose which of
    your files become its weights).  External data stays inside that directory: no ``..``, no absolute
    path, no symbolic link out of it.  ``dropout_seed=S``: the training-mode Dropouts without a ``seed``
    draw ONNX Runtime's masks after ``onnxruntime.set_seed(S)``, ``S + k`` for the k-th in node order
    (docs/onnx.md, "Dropout's mask").
    """
    return import_model(model, dims=dims, name=name, base_dir=base_dir, dropout_seed=dropout_seed)


def import_model(model: Union[str, "os.PathLike[str]", bytes, Any], *, dims: Optional[dict[str, int]] = None,
                 name: Optional[str] = None, base_dir: Union[str, "os.PathLike[str]", None] = None,
                 option: str = "dims", dropout_seed: Optional[int] = None) -> ImportedModel:
    """``import_onnx`` for a caller whose sizes of symbolic dimensions are called ``option``: ``"dims"``
    (the API: ``dims['batch']``) or ``"--dim"`` (``gradir import``: ``--dim batch``), so that an error
    about one speaks its caller's language."""
    if dropout_seed is not None and (isinstance(dropout_seed, bool) or not isinstance(dropout_seed, int)
                                     or not -(1 << 63) <= dropout_seed < (1 << 63)):
        raise ArgumentError(f"dropout_seed must be a 64-bit integer or None, got {shown(dropout_seed)}")
    onnx = require_onnx()
    dims, name, base = check_import_arguments(model, dims, name, base_dir)
    proto, filename = read_model(onnx, model, base)
    if dims:
        named = {d.dim_param for vi in proto.graph.input for d in vi.type.tensor_type.shape.dim if d.dim_param}
        unknown = sorted(set(dims) - named)
        if unknown:
            which = f"--dim {unknown[0]}" if option == "--dim" else f"dims[{unknown[0]!r}]"
            raise OnnxError(Diagnostic(f"{which}: no input has a dimension named {unknown[0]!r} (the "
                                       f"symbolic dimensions are: {', '.join(sorted(named)) or 'none'})",
                                       filename=filename))
    imp = Importer(proto, filename, dims or {}, name)
    imp.dropout_seed = dropout_seed  # read by import_dropout (seedless Dropouts)
    return imp.run()


class Importer(Folding, Listing):
    """One import: the builder, what each ONNX name stands for, what is known at import time."""

    def __init__(self, proto: Any, filename: str, dims: dict[str, int], name: Optional[str]) -> None:
        self.onnx = require_onnx()
        self.proto = proto
        self.filename = filename
        self.dims = dims
        g = proto.graph
        self.opset = next((o.version for o in proto.opset_import if onnx_domain(o.domain) == ""), 1)
        self.b = GraphBuilder(name or _graph_name(g.name or os.path.splitext(os.path.basename(filename))[0]))
        reserve_value_names(self.b, g)  # the model's own tN names go back to their values (naming.py)
        self.values: dict[str, Any] = {}  # ONNX name -> gradir Value
        self.consts: dict[str, np.ndarray] = {}  # ONNX name -> value known at import time
        self.shape_of: dict[str, Any] = {}  # ONNX name of a Shape(...) result -> the Value it is the shape of
        self.inputs: dict[str, np.ndarray] = {}  # labelled inputs made from initializers
        self.problems: list[str] = []
        self.poisoned: set[str] = set()
        self.maybe_known: set[str] = set()  # poisoned names that might have been known at import time
        self.made_by: dict[str, Any] = {}  # folded value -> the node that computed it (to locate errors)
        self._stand_ins: set[str] = set()  # poisoned values a placeholder stands in for (unsupported.py)
        self._skipped: set[str] = set()  # values of nodes skipped unblamed after a failure: of no known type
        self._made_by_failed: dict[str, str] = {}  # poisoned value -> where the node that failed to make it is
        self.symbolic = {d.dim_param for vi in g.input for d in vi.type.tensor_type.shape.dim
                         if d.HasField("dim_param") and d.dim_param not in dims}
        # an input dimension with neither a size nor a name: no --dim can give it a size
        self.unnamed = any(not d.HasField("dim_value") and not d.dim_param for vi in g.input
                           for d in vi.type.tensor_type.shape.dim)
        self.comments: list[tuple[int, int, str]] = []  # (first op, end op, ONNX node name)
        self.notes: list[str] = []
        self.handlers = handlers()  # the ops registered now, user ops included

    # -- what handlers use ----------------------------------------------------------------------------
    def op_class(self, name: str) -> Any:
        if name not in OPS:
            raise Unsupported(f"gradir has no {name} op")
        return OPS[name]

    def x(self, node: Any, i: int, optional: bool = False) -> Any:
        """Input ``i`` of ``node`` as a gradir value; an omitted input is ``None`` if ``optional``, else an
        ``Unsupported`` naming it (the checker does not know ``com.microsoft`` ops' inputs)."""
        if i >= len(node.input) or not node.input[i]:
            if optional:
                return None
            raise Unsupported(f"input {i} is missing (the node has {len(node.input)} input"
                              f"{'s' if len(node.input) != 1 else ''})")
        n = node.input[i]
        if n in self.values:
            return self.values[n]
        if n in self.consts:
            v = self._materialize(n, self.consts[n])
            self.values[n] = v
            return v
        raise Unsupported(f"input {n!r} is defined nowhere")  # onnx.checker catches this first

    def const(self, node: Any, i: int, what: str, ints: bool = False) -> np.ndarray:
        """Input ``i``'s value, which must be known at import time: numbers, integers if ``ints`` (a shape,
        axes)."""
        n = node.input[i] if i < len(node.input) else ""
        if n in self.consts:
            a = self.consts[n]
            if a.dtype.kind not in ("iu" if ints else "biuf"):
                raise Unsupported(f"its {what} (input {i}, {n!r}) is {a.dtype}, not "
                                  f"{'integers' if ints else 'numbers'}")
            return a
        if not n:
            raise Unsupported(f"its {what} (input {i}) is missing")
        raise Unsupported(f"its {what} (input {i}, {n!r}) must be known at import time (an initializer, a "
                          "Constant, or computed from static shapes)")

    def shape_value(self, node: Any, i: int) -> Any:
        """The value whose ``Shape`` input ``i`` is, when it is one (``Expand`` to a value's shape)."""
        n = node.input[i] if i < len(node.input) else ""
        return self.shape_of.get(n)

    # -- the import ----------------------------------------------------------------------------------------
    def run(self) -> ImportedModel:
        """The import; an error of the builder's or of the graph's own checks (a label gradir cannot hold,
        ...) is said of the model file, with its message, never of ``<graph>`` or ``<GraphBuilder g>``."""
        try:
            return self._run()
        except OnnxError:
            raise
        except GradirError as e:
            raise OnnxError([Diagnostic(d.message, filename=self.filename) for d in e.diagnostics]) from None

    def _run(self) -> ImportedModel:
        g = self.proto.graph
        nodes, grad_outputs = self._strip_accumulators(list(g.node))
        inits = {t.name: t for t in g.initializer}
        nodes = fuse_gelus(self.onnx, nodes, inits, {o.name for o in g.output}, self.notes)
        nodes = regroup(self.onnx, nodes, {o.name for o in g.output}, MS_DOMAIN)  # ops export wrote as standard ops
        # where each value is read (op type, domain, operand index); graph outputs as ("", "", -1)
        self.readers: dict[str, list[tuple[str, str, int]]] = {o.name: [("", "", -1)] for o in g.output}
        for node in nodes:
            for k, n in enumerate(node.input):
                self.readers.setdefault(n, []).append((onnx_domain(node.domain), node.op_type, k))
        used = {n for node in nodes for n in node.input} | {o.name for o in g.output} | set(grad_outputs)
        for vi in g.input:
            if vi.name not in used and (vi.name in inits or vi.name in self._dropped):
                continue
            self._graph_input(vi, inits.get(vi.name))
        for name, t in inits.items():
            if name in self.values or name not in used:
                continue
            try:
                a = tensor_array(self.onnx, t)
            except Unsupported as e:
                self.problems.append(f"initializer {name!r}: {e}")
                self.poisoned.add(name)
                self.maybe_known.add(name)
                continue
            self._initializer(name, a)
        for node in nodes:
            self._node(node)
        if self.problems:
            self._fail()
        # a graph output listed twice is one output (ONNX names one value once)
        outputs = list({o.name: (o.name, o.name) for o in g.output if o.name not in self._dropped}.values())
        outputs += [(n, label) for n, label in grad_outputs.items() if n not in {o.name for o in g.output}]
        self._outputs(outputs)
        if self.problems:
            self._fail()
        graph = keep_value_names(self.b.build(), self.values, g)
        return ImportedModel(self._with_comments(graph), self.inputs, self.notes)

    def _strip_accumulators(self, nodes: list) -> tuple[list, dict[str, str]]:
        """Drop ``InPlaceAccumulatorV2`` nodes: their gradient input becomes an output labelled with its
        own name (ORT names it ``<param>_grad``); the buffers, reset flag and accumulator outputs go."""
        self._dropped: set[str] = set()
        grads: dict[str, str] = {}
        kept = []
        for node in nodes:
            if node.op_type == ACCUMULATOR and onnx_domain(node.domain) == MS_DOMAIN and len(node.input) >= 2 and \
                    node.input[0] and node.input[1]:  # a malformed one is kept: _node reports it
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
            kind = elem_type_name(self.onnx, tt.elem_type) if vi.type.HasField("tensor_type") else \
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
            check_limits(f"input {vi.name!r}", dtype.value, shape)
        except Unsupported as e:
            self.problems.append(f"graph input {vi.name!r}: {e}")
            self.poisoned.add(vi.name)
            return
        if init is not None:
            try:
                a = tensor_array(self.onnx, init)
            except Unsupported as e:
                self.problems.append(f"initializer {vi.name!r}: {e}")
                self.poisoned.add(vi.name)
                return
            self.inputs[vi.name] = a
        self.values[vi.name] = self.b.input(dtype.value, shape, label=vi.name)

    def _initializer(self, name: str, a: np.ndarray) -> None:
        try:
            dtype = DType.from_numpy(a.dtype)
        except ValueError:
            self.problems.append(f"initializer {name!r}: dtype {a.dtype} has no gradir dtype")
            self.poisoned.add(name)
            self.maybe_known.add(name)
            return
        if dtype.is_float and a.size > 1:
            self.values[name] = self.b.input(dtype.value, list(a.shape), label=name)
            self.inputs[name] = a
        else:
            self.consts[name] = a

    def _maker(self, name: str) -> str:
        """What makes the value ``name``, to locate a problem with it: its node, or the initializer."""
        node = self.made_by.get(name)
        if node is not None:
            return self._where(node)
        return f"initializer {name!r}" if name in self.consts else f"{name!r}"

    def _materialize(self, name: str, a: np.ndarray, maker: bool = True) -> Any:
        """The known value ``a`` as a gradir value (a ``Constant``).  A zero-size one is refused, naming
        what makes it (unless ``maker`` is false: the caller locates it): gradir's dimensions are at least
        1.  While it only feeds folding (an empty axes list) it is never materialized, so it works."""
        if a.size == 0:
            made = f" (made by {self._maker(name)})" if maker else ""
            raise Unsupported(f"{name!r}{made} is a zero-size value (shape {list(a.shape)}); gradir's dimensions "
                              "are at least 1, so no gradir value can hold it")
        try:
            DType.from_numpy(a.dtype)
        except ValueError:
            raise Unsupported(f"{name!r} is a {a.dtype} value known at import time; gradir has Float32, Float64, "
                              "Int32, Int64, Bool") from None
        flat = a.reshape(-1)
        if a.size > MAX_CONSTANT_ELEMENTS:
            bits = flat.view(f"u{flat.dtype.itemsize}")  # by bits: NaN is one value, -0.0 is not 0.0
            if np.all(bits == bits[0]):
                return self.b.constant(flat[0].item(), DType.from_numpy(a.dtype).value, list(a.shape))
            raise Unsupported(f"{name!r} is a {a.size:,}-element value known at import time; a Constant holds at "
                              f"most {MAX_CONSTANT_ELEMENTS:,}")
        return self.b.constant(np.array(a, order="C"))  # np.ascontiguousarray makes a 0-d array 1-d

    def _node(self, node: Any) -> None:
        where = self._where(node)
        stood_in = any(n in self.poisoned for n in node.input if n)
        if stood_in and not self._stand_in(node):
            self._poisoned_node(node, where)
            return
        domain = onnx_domain(node.domain)
        try:
            attrs = self._attributes(node)
            if node.op_type == "Constant" and domain == "":
                self.consts[node.output[0]] = constant_value(self.onnx, node)
                self.made_by[node.output[0]] = node
                return
            if self._fold(node, domain, attrs):
                return
            fn = self.handlers.get((domain, node.op_type))
            if fn is None and domain == "" and node.op_type in FOLDABLE:
                self._too_big_input(node)
            if fn is None:
                raise Unsupported(no_handler(domain))
            first = self.b.num_ops
            outs = fn(self, node, attrs)
        except Unsupported as e:
            self._failed(node, f"{where}: {e}")
            return
        except GradirError as e:
            self._failed(node, f"{where}: " + "; ".join(d.message for d in e.diagnostics))
            return
        except Exception:  # noqa: BLE001 - only for a placeholder: the import fails anyway, its listing must not
            if not stood_in:  # a handler's own bug stays one
                raise
            self._poisoned_node(node, where)  # a placeholder it could not take: as if there were none
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

    def _too_big_input(self, node: Any) -> None:
        """An op the importer only evaluates (``Cast``) read a value that was too big to evaluate (a large
        ``ConstantOfShape`` became a filled ``Constant``): say so, with its size, rather than only that
        gradir has no such op."""
        for k, n in enumerate(node.input):
            v = self.values.get(n) if n else None
            if v is not None and None not in v.shape:
                size = int(np.prod(v.shape, dtype=object))
                if size > FOLD_ELEMENTS:
                    raise Unsupported(f"its input {k} ({n!r}, {v.type}) has {size:,} elements, too many to evaluate "
                                      f"at import time (at most {FOLD_ELEMENTS:,}), and gradir has no "
                                      f"{node.op_type} op")

    def _attributes(self, node: Any) -> dict:
        """The node's attributes as Python values; a string one must be UTF-8 (the handlers decode them), and
        one the handlers read must have its type (``alpha`` a float, ``axes`` ints, ...): the checker does not
        know ``com.microsoft`` ops, so their attributes may have any type."""
        attrs = {}
        checked = onnx_domain(node.domain) in ("", MS_DOMAIN)
        for a in node.attribute:
            want = ATTRIBUTE_TYPES.get(a.name) if checked else None
            if want is not None and a.type != want:
                names = self.onnx.AttributeProto.AttributeType
                have = names.Name(a.type) if a.type in names.values() else str(a.type)
                raise Unsupported(f"attribute {a.name!r} is {have}, not {names.Name(want)}")
            try:
                v = self.onnx.helper.get_attribute_value(a)
            except Exception as e:  # noqa: BLE001 - an attribute of no type, or of one onnx cannot read
                raise Unsupported(f"attribute {a.name!r} cannot be read ({e})") from None
            for item in (v if isinstance(v, list) else [v]):
                if isinstance(item, bytes):
                    try:
                        item.decode("utf-8")
                    except UnicodeDecodeError:
                        raise Unsupported(f"attribute {a.name!r} is not valid UTF-8 ({shown(item)})") from None
            attrs[a.name] = v
        return attrs

    def _outputs(self, outputs: list[tuple[str, str]]) -> None:
        seen: set[str] = set()
        input_labels = {i.name: i.label for i in self.b.inputs}  # once: a look-up per output, not a pass
        for n, label in outputs:
            if n in self.values:
                v = self.values[n]
            elif n in self.consts:
                try:
                    v = self._materialize(n, self.consts[n], maker=False)
                except Unsupported as e:
                    self.problems.append(f"{self._maker(n)}: graph output {n!r}: {e}")
                    continue
            else:
                raise OnnxError(Diagnostic(f"graph output {n!r} is computed by nothing gradir imported",
                                            filename=self.filename))
            if v.name in seen or (v.name in input_labels and input_labels[v.name] != label):
                v = self.b.Identity(v)
            seen.add(v.name)
            self.b.output(v, label=label)

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
