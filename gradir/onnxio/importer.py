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
import re
import stat
from typing import Any, Iterator, Optional, Union

import numpy as np

from ..builder import GraphBuilder
from ..constants import MAX_CONSTANT_ELEMENTS
from ..errors import Diagnostic, GradirError, OnnxError, shown
from ..ir import OPS
from ..syntax import parse
from ..types import DType
from .common import GRADIR_DOMAIN, MS_DOMAIN, ONNX_TO_DTYPE, ImportedModel, require_onnx
from ..errors import OnnxUnsupported as Unsupported
from .import_ops import HANDLERS, check_limits, custom
from .lowering import regroup
from .naming import keep_value_names, reserve_value_names

__all__ = ["import_onnx", "Importer"]

# ai.onnx ops evaluated at import time when every input is known (shape arithmetic)
# the most elements a value evaluated at import time may have (a bound checked before evaluating it)
FOLD_ELEMENTS = 1 << 22
FOLDABLE = {"Shape", "Size", "Gather", "Concat", "Unsqueeze", "Squeeze", "Reshape", "Cast", "Add", "Sub", "Mul",
            "Div", "Slice", "Range", "ConstantOfShape", "Equal", "Where", "ReduceProd", "Identity", "Neg", "Abs",
            "Max", "Min", "Expand", "Not", "Less", "Greater", "Tile", "Flatten", "Transpose", "ReduceSum"}
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
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def _domain(d: str) -> str:
    return "" if d in ("", "ai.onnx") else d


def import_onnx(model: Union[str, "os.PathLike[str]", bytes, Any], *, dims: Optional[dict[str, int]] = None,
                name: Optional[str] = None, base_dir: Union[str, "os.PathLike[str]", None] = None) -> ImportedModel:
    """Import an ONNX model (a path, the bytes of one, or an ``onnx.ModelProto``); see the module doc.

    ``dims`` gives symbolic input dimensions values (``{"batch": 64}``), so shape computations fold.
    ``name`` is the graph's name (default: the ONNX graph's, or the file's).  ``base_dir`` is the directory
    an initializer's external data is read from: a model read from a path reads it from the model's own
    directory; one given as bytes or a ``ModelProto`` has no directory, so its external data is refused
    unless ``base_dir`` is given (never the current directory: a received model must not choose which of
    your files become its weights).  External data stays inside that directory: no ``..``, no absolute
    path, no symbolic link out of it.
    """
    onnx = require_onnx()
    dims, name, base = _check_arguments(model, dims, name, base_dir)
    filename = "<model>"
    if isinstance(model, (str, os.PathLike)):
        filename = os.fspath(model)
        try:
            proto = onnx.load(filename, load_external_data=False)
        except OSError as e:
            raise OnnxError(Diagnostic(f"cannot read the model: {e.strerror or e}", filename=filename)) from None
        except Exception as e:  # noqa: BLE001 - protobuf's DecodeError and friends
            raise OnnxError(Diagnostic(f"not an ONNX model ({type(e).__name__}: {e})", filename=filename)) from None
        if base is None:
            base = os.path.dirname(os.path.abspath(filename))
    elif isinstance(model, (bytes, bytearray)):
        try:
            proto = onnx.load_from_string(bytes(model))
        except Exception as e:  # noqa: BLE001
            raise OnnxError(Diagnostic(f"not an ONNX model ({type(e).__name__}: {e})", filename=filename)) from None
    else:
        proto = model
    if proto.ByteSize() == 0 or not proto.HasField("graph"):  # an empty file parses as an empty model
        raise OnnxError(Diagnostic("not an ONNX model: it is empty" if proto.ByteSize() == 0 else
                                   "not an ONNX model: it has no graph", filename=filename))
    bad = _not_utf8(proto)
    if bad:
        raise OnnxError(Diagnostic(f"not a valid ONNX model: {bad[0]} is not valid UTF-8 ({shown(bad[1])})",
                                   filename=filename))
    external = [t for t in _all_tensors(proto.graph) if _is_external(onnx, t)]
    if external:
        if proto is model:  # the caller's ModelProto is not changed: its copy gets the data
            proto = onnx.ModelProto()
            proto.CopyFrom(model)
            external = [t for t in _all_tensors(proto.graph) if _is_external(onnx, t)]
        for t in external:
            _load_external(onnx, t, base, filename)
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


def _check_arguments(model: Any, dims: Any, name: Any, base_dir: Any) -> tuple[dict[str, int], Optional[str],
                                                                                Optional[str]]:
    """``import_onnx``'s arguments checked (``ArgumentError``, which says which one and why)."""
    from ..errors import ArgumentError
    onnx = require_onnx()
    if not isinstance(model, (str, os.PathLike, bytes, bytearray, onnx.ModelProto)):
        raise ArgumentError(f"import_onnx() takes a path, bytes or an onnx.ModelProto, not {type(model).__name__}")
    if isinstance(model, (str, os.PathLike)):
        try:
            path = os.fspath(model)
        except Exception as e:  # noqa: BLE001 - a __fspath__ of the caller's that raises
            raise ArgumentError(f"import_onnx(): the model path cannot be read as a path ({type(e).__name__})") \
                from None
        if not isinstance(path, str) or not path or "\0" in path:
            raise ArgumentError(f"import_onnx(): the model path must be a non-empty str without NUL, got "
                                f"{shown(path)}")
    if dims is None:
        dims = {}
    if not isinstance(dims, dict):
        raise ArgumentError(f"import_onnx(): dims must be a dict of symbolic dimension names to sizes "
                            f"({{\"batch\": 64}}), got {type(dims).__name__}")
    for k, v in dims.items():
        if not isinstance(k, str) or not k:
            raise ArgumentError(f"import_onnx(): dims: a dimension name must be a non-empty str, got {shown(k)}")
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not 1 <= int(v) <= 2 ** 62:
            raise ArgumentError(f"import_onnx(): dims[{k!r}] must be an int of at least 1, got {shown(v)}")
    dims = {k: int(v) for k, v in dims.items()}
    if name is not None and not isinstance(name, str):
        raise ArgumentError(f"import_onnx(): name must be a str or None, got {type(name).__name__}")
    if name is not None and not _IDENT.match(name):
        raise ArgumentError(f"import_onnx(): name {shown(name)} is not an identifier (letters, digits and _, not "
                            "starting with a digit)")
    base = None
    if base_dir is not None:
        if not isinstance(base_dir, (str, os.PathLike)):
            raise ArgumentError(f"import_onnx(): base_dir must be a path (str or os.PathLike) or None, got "
                                f"{type(base_dir).__name__}")
        try:
            base = os.fspath(base_dir)
        except Exception as e:  # noqa: BLE001
            raise ArgumentError(f"import_onnx(): base_dir cannot be read as a path ({type(e).__name__})") from None
        if not isinstance(base, str) or not base or "\0" in base:
            raise ArgumentError(f"import_onnx(): base_dir must be a non-empty str without NUL, got {shown(base)}")
        if not os.path.isdir(base):
            raise ArgumentError(f"import_onnx(): base_dir {base!r} is not a directory")
    return dims, name, base


def _not_utf8(msg: Any, path: str = "model") -> Optional[tuple[str, bytes]]:
    """The first string field of ``msg`` (recursively) that is not valid UTF-8, as (where, its bytes):
    protobuf hands such a field over as ``bytes``, where every name is expected to be a ``str``."""
    from google.protobuf.descriptor import FieldDescriptor as F
    for field, value in msg.ListFields():
        if field.type == F.TYPE_STRING:
            items = value if _repeated(field) else [value]
            for k, v in enumerate(items):
                if not isinstance(v, str):
                    return (f"{path}.{field.name}" + (f"[{k}]" if _repeated(field) else ""), v)
        elif field.type == F.TYPE_MESSAGE:
            items = value if _repeated(field) else [value]
            for k, v in enumerate(items):
                found = _not_utf8(v, f"{path}.{field.name}" + (f"[{k}]" if _repeated(field) else ""))
                if found:
                    return found
    return None


def _repeated(field: Any) -> bool:
    is_repeated = getattr(field, "is_repeated", None)  # protobuf 5.28+; ``label`` is gone in 7
    return bool(is_repeated) if is_repeated is not None else field.label == field.LABEL_REPEATED


def _all_tensors(graph: Any) -> Iterator[Any]:
    """Every TensorProto of a graph: initializers, sparse initializers, node attributes, subgraphs'."""
    yield from graph.initializer
    for sp in graph.sparse_initializer:
        yield sp.values
        yield sp.indices
    for node in graph.node:
        for a in node.attribute:
            if a.HasField("t"):
                yield a.t
            yield from a.tensors
            if a.HasField("sparse_tensor"):
                yield a.sparse_tensor.values
                yield a.sparse_tensor.indices
            if a.HasField("g"):
                yield from _all_tensors(a.g)
            for sub in a.graphs:
                yield from _all_tensors(sub)


def _is_external(onnx: Any, t: Any) -> bool:
    return t.HasField("data_location") and t.data_location == onnx.TensorProto.EXTERNAL


def _load_external(onnx: Any, t: Any, base: Optional[str], filename: str) -> None:
    """Read tensor ``t``'s external data into its ``raw_data``, from a file inside ``base`` only."""
    what = f"initializer {t.name!r}" if t.name else "a tensor"

    def refuse(why: str) -> OnnxError:
        return OnnxError(Diagnostic(f"{what}: its external data {why}", filename=filename))

    info = {e.key: e.value for e in t.external_data}
    location = info.get("location", "")
    if base is None:
        raise refuse(f"(location {location!r}) has no directory to be read from: a model given as bytes or an "
                     "onnx.ModelProto has none; give import_onnx(..., base_dir=DIR), or the path of the model")
    if not location:
        raise refuse("has no location")
    if "\0" in location or os.path.isabs(location) or location.startswith(("/", "\\")) or \
            ".." in location.replace("\\", "/").split("/"):
        raise refuse(f"location {location!r} is not a relative path inside the model's directory")
    try:
        offset = int(info.get("offset", "0"))
        length = int(info["length"]) if "length" in info else None
    except ValueError:
        raise refuse(f"offset or length is not a number ({info.get('offset')!r}, {info.get('length')!r})") from None
    if offset < 0 or (length is not None and length < 0):
        raise refuse(f"offset {offset} or length {length} is negative")
    root = os.path.realpath(base)
    path = os.path.join(root, location)
    real = os.path.realpath(path)
    if os.path.commonpath([root, real]) != root or os.path.islink(path):
        raise refuse(f"location {location!r} leads out of the directory {base!r} (a symbolic link)")
    try:  # O_NONBLOCK: a FIFO is refused below instead of waiting for a writer
        fd = os.open(real, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError as e:
        raise refuse(f"file {location!r} cannot be read: {e.strerror or e}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise refuse(f"location {location!r} is not a regular file")
        end = st.st_size if length is None else offset + length
        if offset > st.st_size or end > st.st_size:
            raise refuse(f"(offset {offset}, length {length}) runs past the end of {location!r} "
                         f"({st.st_size:,} bytes)")
        os.lseek(fd, offset, os.SEEK_SET)
        chunks, left = [], end - offset
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 24))
            if not chunk:
                raise refuse(f"file {location!r} ended early (it was changed while read)")
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
    except OSError as e:
        raise refuse(f"file {location!r} cannot be read: {e.strerror or e}") from None
    finally:
        os.close(fd)
    del t.external_data[:]
    t.data_location = onnx.TensorProto.DEFAULT
    t.raw_data = data


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
        self.maybe_known: set[str] = set()  # poisoned names that might have been known at import time
        self.made_by: dict[str, Any] = {}  # folded value -> the node that computed it (to locate errors)
        self.symbolic = {d.dim_param for vi in g.input for d in vi.type.tensor_type.shape.dim
                         if d.HasField("dim_param") and d.dim_param not in dims}
        self.comments: list[tuple[int, int, str]] = []  # (first op, end op, ONNX node name)
        self.notes: list[str] = []

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
        g = self.proto.graph
        nodes, grad_outputs = self._strip_accumulators(list(g.node))
        inits = {t.name: t for t in g.initializer}
        nodes = fuse_erf_gelu(self.onnx, nodes, inits, {o.name for o in g.output}, self.notes)
        nodes = regroup(self.onnx, nodes, {o.name for o in g.output}, MS_DOMAIN)  # ops export wrote as standard ops
        # where each value is read (op type, domain, operand index); graph outputs as ("", "", -1)
        self.readers: dict[str, list[tuple[str, str, int]]] = {o.name: [("", "", -1)] for o in g.output}
        for node in nodes:
            for k, n in enumerate(node.input):
                self.readers.setdefault(n, []).append((_domain(node.domain), node.op_type, k))
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
        outputs = [(o.name, o.name) for o in g.output if o.name not in self._dropped]
        outputs += [(n, label) for n, label in grad_outputs.items()]
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
            if node.op_type == ACCUMULATOR and _domain(node.domain) == MS_DOMAIN and len(node.input) >= 2 and \
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
            kind = _elem_type_name(self.onnx, tt.elem_type) if vi.type.HasField("tensor_type") else \
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

    def _materialize(self, name: str, a: np.ndarray) -> Any:
        try:
            DType.from_numpy(a.dtype)
        except ValueError:
            raise Unsupported(f"{name!r} is a {a.dtype} value known at import time; gradir has Float32, Float64, "
                              "Int32, Int64, Bool") from None
        flat = a.reshape(-1)
        if a.size > MAX_CONSTANT_ELEMENTS:
            if a.size and np.all(flat == flat[0]) and not np.isnan(flat[0]).any():
                return self.b.constant(flat[0].item(), DType.from_numpy(a.dtype).value, list(a.shape))
            raise Unsupported(f"{name!r} is a {a.size:,}-element value known at import time; a Constant holds at "
                              f"most {MAX_CONSTANT_ELEMENTS:,}")
        return self.b.constant(np.array(a, order="C"))  # np.ascontiguousarray makes a 0-d array 1-d

    def _node(self, node: Any) -> None:
        where = self._where(node)
        if any(n in self.poisoned for n in node.input if n):
            self._poisoned_node(node, where)
            return
        domain = _domain(node.domain)
        try:
            attrs = self._attributes(node)
            if node.op_type == "Constant" and domain == "":
                self.consts[node.output[0]] = _constant_value(self.onnx, node)
                self.made_by[node.output[0]] = node
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
            self._failed(node, f"{where}: {e}")
            return
        except GradirError as e:
            self._failed(node, f"{where}: " + "; ".join(d.message for d in e.diagnostics))
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

    def _failed(self, node: Any, problem: str) -> None:
        """``node`` could not be imported: its problem is listed, and what it computes is poisoned (a
        node it feeds is not blamed for it).  What an op the importer evaluates computes might have
        been known at import time (a ``Shape`` given its ``--dim``), so it does not make the ops it
        feeds unsupported either."""
        self.problems.append(problem)
        outs = [n for n in node.output if n]
        self.poisoned.update(outs)
        d = _domain(node.domain)
        if d == "" and node.op_type in FOLDABLE | {"Constant"} or d == MS_DOMAIN and \
                node.op_type == "BroadcastGradientArgs":
            self.maybe_known.update(outs)

    def _where(self, node: Any) -> str:
        return f"node {node.name or '(unnamed)'!r} ({_domain(node.domain) or 'ai.onnx'} {node.op_type})"

    def _poisoned_node(self, node: Any, where: str) -> None:
        """A node fed by a node that could not be imported: reported only if its own op type is unsupported.

        An op the importer folds (``Where``, ``Concat``, ``Gather``, ``Slice``, ...) and has no handler for is
        unsupported here too, unless what poisons it could have been known at import time (``Shape`` of an
        unsupported node's result, a bad initializer, ...): then it would have folded, and is not blamed."""
        d = _domain(node.domain)
        maybe_known = all(n in self.maybe_known for n in node.input if n in self.poisoned)
        if d == "" and node.op_type in ("Shape", "Size") or \
                d == "" and node.op_type in FOLDABLE | {"Constant"} and maybe_known or \
                d == MS_DOMAIN and node.op_type == "BroadcastGradientArgs" and maybe_known:
            self.maybe_known.update(n for n in node.output if n)
        elif (d, node.op_type) not in HANDLERS and not (d == GRADIR_DOMAIN and node.op_type in OPS):
            self.problems.append(f"{where}: " + ("gradir has no equivalent op" if d in ("", MS_DOMAIN) else
                                                 f"the domain {d!r} is not supported"))
        self.poisoned.update(n for n in node.output if n)

    def _attributes(self, node: Any) -> dict:
        """The node's attributes as Python values; a string one must be UTF-8 (the handlers decode them), and
        one the handlers read must have its type (``alpha`` a float, ``axes`` ints, ...): the checker does not
        know ``com.microsoft`` ops, so their attributes may have any type."""
        attrs = {}
        checked = _domain(node.domain) in ("", MS_DOMAIN)
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

    def _fold(self, node: Any, domain: str, attrs: dict) -> bool:
        """Evaluate ``node`` now when what it computes is known at import time."""
        if domain == "" and node.op_type in ("Shape", "Size") and node.input and node.input[0] in self.values:
            v = self.values[node.input[0]]
            if node.op_type == "Size" and None not in v.shape:
                self.consts[node.output[0]] = np.array(int(np.prod(v.shape, dtype=np.int64)), np.int64)
                return True
            if node.op_type == "Shape":
                start, end = int(attrs.get("start", 0)), attrs.get("end")
                part = list(v.shape)[start:None if end is None else int(end)]
                if None not in part:  # the dimensions asked for are static, even if others are not
                    self.consts[node.output[0]] = np.array(part, np.int64)
                    if start == 0 and end is None:
                        self.shape_of[node.output[0]] = v
                    return True
                as_shape = (("", "Expand", 1), ("", "ConstantOfShape", 0))
                if start == 0 and end is None and all(r in as_shape for r in self.readers.get(node.output[0], ())):
                    # read only as a shape to broadcast to or fill: BroadcastTo / ZerosLike of v (export writes
                    # them so), known when the graph runs
                    self.shape_of[node.output[0]] = v
                    return True
            names = sorted(self.symbolic)
            raise Unsupported(f"the shape of its input ({v.type}) is not known at import time; gradir computes "
                              f"{node.op_type} when it imports, so give the symbolic dimensions sizes with --dim "
                              f"NAME=SIZE (import_onnx(dims={{...}}))" +
                              (f"; this model's are: {', '.join(names)}" if names else ""))
        if domain == "" and node.op_type == "ConstantOfShape" and node.input[0] in self.shape_of:
            v = self.shape_of[node.input[0]]
            fill = tensor_array(self.onnx, attrs["value"]) if "value" in attrs else np.zeros(1, np.float32)
            if fill.size == 1 and fill.reshape(-1)[0] == 0 and not np.signbit(fill.reshape(-1)[0]) and \
                    fill.dtype == v.dtype.numpy:
                self.values[node.output[0]] = self.b.ZerosLike(v)  # the zeros of v's shape and dtype
                self.comments.append((self.b.num_ops - 1, self.b.num_ops, node.name or node.op_type))
                return True
        if domain == MS_DOMAIN and node.op_type == "BroadcastGradientArgs":
            if len(node.input) < 2 or not node.input[0] or not node.input[1]:
                raise Unsupported(f"it takes two shapes, A and B; it has {len(node.input)} input"
                                  f"{'s' if len(node.input) != 1 else ''}")
            a, b = (self.consts.get(n) for n in node.input[:2])
            if a is None or b is None:
                return False
            if a.dtype.kind not in "iu" or b.dtype.kind not in "iu":
                raise Unsupported(f"its shapes are {a.dtype} and {b.dtype}, not integers")
            ra, rb = _broadcast_gradient_args(a, b)
            for n, r in zip(node.output, (ra, rb)):
                if n:
                    self.consts[n] = r
                    self.made_by[n] = node
            return True
        if domain != "" or node.op_type not in FOLDABLE:
            return False
        if not all((not n) or n in self.consts for n in node.input):
            return False
        if node.op_type == "Div" and len(node.input) > 1 and self.consts[node.input[1]].dtype.kind in "iu" and \
                not self.consts[node.input[1]].all():
            raise Unsupported("it divides integers by zero (undefined in ONNX)")
        size = self._fold_size(node, attrs)
        if size > FOLD_ELEMENTS:
            return self._too_big_to_fold(node, attrs, size)
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
            with np.errstate(all="ignore"):  # an integer division by zero is the model's; no NumPy warning
                res = ReferenceEvaluator(model).run(None, {n: self.consts[n] for n in ins})
        except Exception as e:  # noqa: BLE001 - the reference evaluator's own errors
            raise Unsupported(f"cannot evaluate it at import time: {e}") from None
        for n, r in zip([n for n in node.output if n], res):
            self.consts[n] = np.asarray(r)
            self.made_by[n] = node
        return True

    def _fold_size(self, node: Any, attrs: dict) -> int:
        """An upper bound of the number of elements folding ``node`` makes, from its inputs' shapes and
        values alone: checked before ``onnx.reference`` allocates it (``ConstantOfShape([1000, 1000,
        1000])`` is 159 bytes of model and 4 GB of result)."""
        ins = [self.consts[n] for n in node.input if n]
        op = node.op_type

        def prod(dims: Any) -> int:
            n = 1
            for d in dims:
                n *= max(int(d), 0)
            return n

        def broadcast(shapes: list) -> int:
            rank = max((len(sh) for sh in shapes), default=0)
            dims = [1] * rank
            for sh in shapes:
                for k, d in enumerate(sh):
                    j = rank - len(sh) + k
                    dims[j] = max(dims[j], int(d))
            return prod(dims)

        if not ins:
            return 1
        biggest = max(a.size for a in ins)
        try:
            if op == "ConstantOfShape":
                return prod(ins[0].reshape(-1))
            if op == "Expand" and len(ins) >= 2:
                return broadcast([ins[0].shape, [int(d) for d in ins[1].reshape(-1)]])
            if op == "Tile" and len(ins) >= 2:
                reps = [int(d) for d in ins[1].reshape(-1)]
                return prod(ins[0].shape) * prod(reps)
            if op == "Range" and len(ins) >= 3:
                start, limit, delta = (float(a.reshape(-1)[0]) for a in ins[:3])
                if delta == 0 or not all(np.isfinite([start, limit, delta])):
                    return 0 if delta == 0 else FOLD_ELEMENTS + 1
                return max(int(np.ceil((limit - start) / delta)), 0)
            if op in ("Where", "Add", "Sub", "Mul", "Div", "Equal", "Less", "Greater", "Max", "Min"):
                return broadcast([a.shape for a in ins])
            if op == "Concat":
                return sum(a.size for a in ins)
            if op == "Gather" and len(ins) >= 2 and ins[0].ndim:
                axis = int(attrs.get("axis", 0)) % ins[0].ndim
                return prod(ins[0].shape[:axis] + ins[0].shape[axis + 1:]) * ins[1].size
        except (ValueError, TypeError, IndexError, OverflowError, ZeroDivisionError):
            return FOLD_ELEMENTS + 1  # values too odd to size: not folded (the evaluator would fail on them)
        return biggest  # every other foldable op makes at most as many elements as its largest input

    def _too_big_to_fold(self, node: Any, attrs: dict, size: int) -> bool:
        """A node whose result is too big to evaluate at import time: a ``ConstantOfShape`` becomes a filled
        ``Constant`` (which holds one number, whatever its shape); an op gradir has is imported as that op;
        anything else is refused, saying why."""
        if node.op_type == "ConstantOfShape":
            if self.consts[node.input[0]].dtype.kind not in "iu":
                raise Unsupported(f"its shape is {self.consts[node.input[0]].dtype}, not integers")
            shape = [int(d) for d in self.consts[node.input[0]].reshape(-1)]
            fill = tensor_array(self.onnx, attrs["value"]) if "value" in attrs else np.zeros(1, np.float32)
            if fill.size != 1:
                raise Unsupported(f"its value has {fill.size} elements, not 1")
            try:
                dtype = DType.from_numpy(fill.dtype)
            except ValueError:
                raise Unsupported(f"its value is {fill.dtype}; gradir has Float32, Float64, Int32, Int64, Bool") \
                    from None
            if min(shape, default=0) < 0:
                raise Unsupported(f"its shape {shape} has a negative dimension")
            check_limits("its result", dtype.value, shape)
            self.values[node.output[0]] = self.b.constant(fill.reshape(-1)[0].item(), dtype.value, shape)
            self.comments.append((self.b.num_ops - 1, self.b.num_ops, node.name or node.op_type))
            return True
        if ("", node.op_type) in HANDLERS:
            return False
        raise Unsupported(f"its result would have {size:,} elements; gradir evaluates at most {FOLD_ELEMENTS:,} "
                          f"at import time")

    def _outputs(self, outputs: list[tuple[str, str]]) -> None:
        seen: set[str] = set()
        input_labels = {i.name: i.label for i in self.b.inputs}  # once: a look-up per output, not a pass
        for n, label in outputs:
            if n in self.values:
                v = self.values[n]
            elif n in self.consts:
                try:
                    v = self._materialize(n, self.consts[n])
                except Unsupported as e:
                    node = self.made_by.get(n)
                    self.problems.append(f"{self._where(node) + ': ' if node is not None else ''}graph output "
                                         f"{n!r}: {e}")
                    continue
            else:
                raise OnnxError(Diagnostic(f"graph output {n!r} is computed by nothing gradir imported",
                                            filename=self.filename))
            if v.name in seen or (v.name in input_labels and input_labels[v.name] != label):
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


# bytes per element of the types whose data tensor_array checks itself (others: onnx.numpy_helper's checks)
_ITEMSIZE = {1: 4, 2: 1, 3: 1, 4: 2, 5: 2, 6: 4, 7: 8, 9: 1, 10: 2, 11: 8, 12: 4, 13: 8, 16: 2}
_FIELDS = {1: "float_data", 11: "double_data", 7: "int64_data", 2: "int32_data", 3: "int32_data", 4: "int32_data",
           5: "int32_data", 6: "int32_data", 9: "int32_data", 10: "int32_data", 16: "int32_data", 12: "uint64_data",
           13: "uint64_data"}


def _elem_type_name(onnx: Any, t: int) -> str:
    try:
        return onnx.TensorProto.DataType.Name(t)
    except ValueError:
        return f"element type {t} (not an ONNX type)"


def tensor_array(onnx: Any, t: Any) -> np.ndarray:
    """``t``'s value as an array, or ``Unsupported`` saying what is wrong with its data: a type ONNX does not
    define, data longer or shorter than its shape, raw bytes not a whole number of elements (the checker
    lets some of these through; ``onnx.numpy_helper`` fails on them with bare NumPy errors)."""
    if t.HasField("data_location") and t.data_location == onnx.TensorProto.EXTERNAL:
        raise Unsupported("its external data was not read")
    try:
        onnx.helper.tensor_dtype_to_np_dtype(t.data_type)
    except Exception:  # noqa: BLE001 - KeyError, or ValueError for an unknown enum value
        raise Unsupported(f"its data type is {_elem_type_name(onnx, t.data_type)}, which gradir cannot read") \
            from None
    if any(d < 0 for d in t.dims):
        raise Unsupported(f"its shape {list(t.dims)} has a negative dimension")
    n = 1
    for d in t.dims:
        n *= int(d)
    dims = list(t.dims)
    if t.HasField("raw_data") and t.data_type in _ITEMSIZE:
        size = _ITEMSIZE[t.data_type]
        if len(t.raw_data) != n * size:
            raise Unsupported(f"its raw_data has {len(t.raw_data):,} bytes; its shape {dims} of "
                              f"{_elem_type_name(onnx, t.data_type)} takes {n * size:,}")
    elif not t.HasField("raw_data") and t.data_type in _FIELDS:
        got = len(getattr(t, _FIELDS[t.data_type]))
        if got != n:
            raise Unsupported(f"its {_FIELDS[t.data_type]} has {got:,} values; its shape {dims} holds {n:,}")
    try:
        a = onnx.numpy_helper.to_array(t)
    except Exception as e:  # noqa: BLE001 - NumPy's and onnx's own errors on malformed data
        raise Unsupported(f"its data cannot be read ({type(e).__name__}: {e})") from None
    if a.size != n:
        raise Unsupported(f"its data has {a.size:,} values; its shape {dims} holds {n:,}")
    return a


def _graph_name(name: str) -> str:
    import re
    name = re.sub(r"[^A-Za-z0-9_]", "_", name)
    return name if name and not name[0].isdigit() else "g_" + name


def _constant_value(onnx: Any, node: Any) -> np.ndarray:
    if len(node.attribute) != 1:
        raise Unsupported(f"a Constant has exactly one value attribute; this one has {len(node.attribute)}")
    a = node.attribute[0]
    v = onnx.helper.get_attribute_value(a)
    if a.name == "value":
        return tensor_array(onnx, v)
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
    def value(t: Any) -> Optional[np.ndarray]:
        """A small tensor's value (the GELU's constants are scalars); others, and bad ones, are left for
        the import to read and report."""
        if t.data_location == onnx.TensorProto.EXTERNAL or len(t.dims) > 1 or any(d != 1 for d in t.dims):
            return None
        try:
            return tensor_array(onnx, t)
        except Unsupported:
            return None

    consts = {n: a for n, a in ((n, value(t)) for n, t in inits.items()) if a is not None}
    for node in nodes:
        if node.op_type == "Constant" and _domain(node.domain) == "" and len(node.attribute) == 1 and \
                node.attribute[0].name == "value" and node.output:
            a = value(node.attribute[0].t)
            if a is not None:
                consts[node.output[0]] = a
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
