"""Values known at import time: shape arithmetic over static shapes (``Shape``, ``Size``, ``Gather``,
``Concat``, ``ConstantOfShape``, ``Add``, ``Mul``, ... of known values), ORT's ``BroadcastGradientArgs``
and ``Constant`` nodes, evaluated while importing (with ``onnx.reference``) instead of becoming ops.

gradir ops take shapes and axes as attributes, not as values computed when the graph runs, so the ONNX
subgraphs that compute them must be known when the model is imported.  A result is sized before it is
evaluated: a 159-byte ``ConstantOfShape`` may ask for gigabytes.  ``Folding`` is a part of the
``Importer`` (``importer.py``), kept here; it reads and fills the importer's tables (``values``,
``consts``, ``shape_of``, ``made_by``, ``readers``, ``comments``) and its builder ``b``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...errors import OnnxUnsupported as Unsupported
from ...ir.types import DType
from .common import MS_DOMAIN
from .import_ops import check_limits
from .loading import tensor_array

__all__ = ["Folding", "FOLD_ELEMENTS", "FOLDABLE", "constant_value"]

# the most elements a value evaluated at import time may have (a bound checked before evaluating it)
FOLD_ELEMENTS = 1 << 22
# ai.onnx ops evaluated at import time when every input is known (shape arithmetic)
FOLDABLE = {"Shape", "Size", "Gather", "Concat", "Unsqueeze", "Squeeze", "Reshape", "Cast", "Add", "Sub", "Mul",
            "Div", "Mod", "Slice", "Range", "ConstantOfShape", "Equal", "Where", "ReduceProd", "Identity", "Neg",
            "Abs", "Max", "Min", "Expand", "Not", "And", "Or", "Xor", "Less", "Greater", "LessOrEqual",
            "GreaterOrEqual", "Tile", "Flatten", "Transpose", "ReduceSum", "ReduceMax", "ReduceMin", "Sign",
            "Sqrt", "Reciprocal", "Pow", "Floor", "Ceil", "Round", "Clip", "CastLike", "Trilu", "CumSum",
            "GatherElements", "Split"}
# element-wise ops whose result has the broadcast shape of the inputs (sized before they are evaluated)
_BROADCASTING = {"Where", "Add", "Sub", "Mul", "Div", "Mod", "Equal", "Less", "Greater", "LessOrEqual",
                 "GreaterOrEqual", "Max", "Min", "And", "Or", "Xor", "Pow"}


class Folding:
    """The importer's evaluation of what is known at import time (mixed into ``Importer``)."""

    b: Any  # the GraphBuilder
    onnx: Any
    opset: int
    values: dict[str, Any]
    consts: dict[str, np.ndarray]
    shape_of: dict[str, Any]
    made_by: dict[str, Any]
    readers: dict[str, list[tuple[str, str, int]]]
    symbolic: set[str]
    unnamed: bool
    dimension_names: Any  # Listing.dimension_names
    comments: list[tuple[int, int, str]]

    def _fold(self, node: Any, domain: str, attrs: dict) -> bool:
        """Evaluate ``node`` now when what it computes is known at import time."""
        if domain == "" and node.op_type in ("Shape", "Size") and node.input and node.input[0] in self.values:
            v = self.values[node.input[0]]
            if node.op_type == "Size" and None not in v.shape:
                self.consts[node.output[0]] = np.array(int(np.prod(v.shape, dtype=np.int64)), np.int64)
                self.made_by[node.output[0]] = node
                return True
            if node.op_type == "Shape":
                start, end = int(attrs.get("start", 0)), attrs.get("end")
                part = list(v.shape)[start:None if end is None else int(end)]
                if None not in part:  # the dimensions asked for are static, even if others are not
                    self.consts[node.output[0]] = np.array(part, np.int64)
                    self.made_by[node.output[0]] = node
                    if start == 0 and end is None:
                        self.shape_of[node.output[0]] = v
                    return True
                as_shape = (("", "Expand", 1), ("", "ConstantOfShape", 0))
                if start == 0 and end is None and all(r in as_shape for r in self.readers.get(node.output[0], ())):
                    # read only as a shape to broadcast to or fill: BroadcastTo / ZerosLike of v (export writes
                    # them so), known when the graph runs
                    self.shape_of[node.output[0]] = v
                    return True
            raise Unsupported(self._unknown_shape(node, v, attrs))
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
        if node.op_type in ("Div", "Mod") and len(node.input) > 1 and \
                self.consts[node.input[1]].dtype.kind in "iu" and not self.consts[node.input[1]].all():
            raise Unsupported(f"it {'divides' if node.op_type == 'Div' else 'takes the remainder of'} integers by "
                              "zero (undefined in ONNX)")
        size = self._fold_size(node, attrs)
        if size > FOLD_ELEMENTS:
            return self._too_big_to_fold(node, attrs, size)
        exact = _integer_division(node.op_type, [self.consts[n] for n in node.input], attrs)
        if exact is not None:
            self.consts[node.output[0]] = exact
            self.made_by[node.output[0]] = node
            return True
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

    def _unknown_shape(self, node: Any, v: Any, attrs: dict) -> str:
        """Why ``Shape``/``Size`` of ``v`` cannot be computed at import time: which of its dimensions are
        unknown, the symbolic dimension each is (as ONNX's shape inference propagates the inputs' names),
        and that ``--dim`` gives them sizes."""
        names = sorted(self.symbolic)
        unnamed = ("a dimension with no name (ONNX's '?', neither a size nor a name) cannot be given a size "
                   "on import: give the model static sizes (or named dimensions) before importing it")
        rank = len(v.shape)
        start, end = (int(attrs.get("start", 0)), attrs.get("end")) if node.op_type == "Shape" else (0, None)
        asked = range(rank)[start:None if end is None else int(end)]
        unknown = [k for k in asked if v.shape[k] is None]
        params = self.dimension_names(node.input[0])
        named = {k: params[k] for k in unknown if k < len(params) and params[k] in self.symbolic}
        dims = f"dimension{'s' if len(unknown) > 1 else ''} {', '.join(map(str, unknown))}"
        if not names:
            return (f"the shape of its input ({v.type}) is not known at import time ({dims}; gradir computes "
                    f"{node.op_type} when it imports), and {unnamed}")
        if named and len(named) == len(unknown):
            params = list(dict.fromkeys(named.values()))
            if len(unknown) == 1:
                what = f"its dimension {unknown[0]} is the symbolic dimension {named[unknown[0]]!r}"
            else:
                what = f"its dimensions {', '.join(f'{k} ({p!r})' for k, p in named.items())} are symbolic"
            them = "it a size" if len(params) == 1 else "them sizes"
            return (f"the shape of its input ({v.type}) is not known at import time: {what}; gradir computes "
                    f"{node.op_type} when it imports, so give {them} with {' '.join(f'--dim {p}=SIZE' for p in params)}"
                    f" (import_onnx(dims={{{', '.join(f'{p!r}: SIZE' for p in params)}}}))")
        what = f"its {dims} {'are' if len(unknown) > 1 else 'is'} not known"
        return (f"the shape of its input ({v.type}) is not known at import time: {what}; gradir computes "
                f"{node.op_type} when it imports, so give the symbolic dimensions sizes with --dim NAME=SIZE "
                f"(import_onnx(dims={{...}})); this model's are: {', '.join(names)}" +
                (f"; {unnamed}" if self.unnamed else ""))

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
            if op in _BROADCASTING:
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
        if ("", node.op_type) in self.handlers:
            return False
        raise Unsupported(f"its result would have {size:,} elements; gradir evaluates at most {FOLD_ELEMENTS:,} "
                          f"at import time")


def _integer_division(op: str, ins: list[np.ndarray], attrs: dict) -> Any:
    """ONNX's ``Div`` and ``Mod`` of integers, exactly (``onnx.reference`` before 1.17 divided int64 in
    float64, wrong beyond 2^53): ``Div`` truncates toward zero, as C does and ONNX Runtime computes;
    ``Mod`` takes the sign of the divisor (Python's ``%``), or of the dividend with ``fmod=1`` (C's
    ``fmod``).  ``None`` for anything else (floats are the evaluator's).  The divisors are not zero."""
    if op not in ("Div", "Mod") or len(ins) != 2 or ins[0].dtype.kind not in "iu" or ins[0].dtype != ins[1].dtype:
        return None
    a, b = ins
    if op == "Mod" and not int(attrs.get("fmod", 0)):
        return np.asarray(np.mod(a, b), a.dtype)
    q = np.floor_divide(a, b)
    r = a - q * b
    if op == "Div":  # floor to truncation: one up where the remainder is not zero and the signs differ
        return np.asarray(q + ((r != 0) & ((a < 0) != (b < 0))).astype(a.dtype), a.dtype)
    return np.asarray(np.fmod(a, b), a.dtype)


def constant_value(onnx: Any, node: Any) -> np.ndarray:
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
    for k, (x, y) in enumerate(zip(pa, pb)):
        if x != y and x != 1 and y != 1:
            raise Unsupported(f"its shapes {a} and {b} do not broadcast (dimension {k}: {x} and {y})")
    ra = [k for k in range(n) if pa[k] == 1 and pb[k] != 1 or k < n - len(a)]
    rb = [k for k in range(n) if pb[k] == 1 and pa[k] != 1 or k < n - len(b)]
    return np.array(ra, np.int64), np.array(rb, np.int64)
