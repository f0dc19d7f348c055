"""The IR: op signatures as data, ``Op``/``BackwardOp``, and ``Graph``.

Values are named ``tN``.  An op declares its operands, results and attributes
as class-level data; one generic checker (``Op.check``) validates operand count,
``_`` placement, attribute names/kinds/ranges and then runs the op's own type
rule (``infer``), which raises ``OpError`` naming the operand or attribute at
fault.  Subclasses are registered by class name without the ``Op`` suffix.
"""

from __future__ import annotations

import difflib
import json
import math
import numbers
import os
import re
from array import array
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Iterable, Mapping, Optional, Sequence

import numpy as np

from .errors import ArgumentError, OpError, OpErrors, Diagnostic, Source, Span, VerifyError, errors_of, shown
from .types import DType, Dim, TensorType, format_attr_value

if TYPE_CHECKING:  # pragma: no cover
    from .trivia import Trivia

__all__ = ["Operand", "Attr", "REQUIRED", "Op", "BackwardOp", "Graph", "OpLoc", "OpError",
           "InferContext", "OPS", "lookup_op", "format_attr_value", "VALUE_NAME"]

VALUE_NAME = re.compile(r"t[0-9]+\Z")


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()


@dataclass(frozen=True)
class Operand:
    name: str
    optional: bool = False
    variadic: bool = False  # one or more; only the last operand may be variadic
    doc: str = ""


INT_ATTR_LIMIT = 1 << 63  # int attributes are 64-bit, as in ONNX


@dataclass(frozen=True)
class Attr:
    """An attribute: ``kind`` is one of int, float, str, bool, ints, floats, strs, or tensor (a number,
    boolean or flat list of them, checked against the op's dtype by the op: see ``gradir.constants``).

    ``default`` is ``REQUIRED`` (must be given) or a value; ``None`` means
    "absent" (e.g. ``perm`` defaults to reversed axes).  ``choices``/``min``/
    ``max`` constrain the value (each element for list kinds); ``check`` returns an
    error message or ``None``.
    """

    name: str
    kind: str
    default: Any = REQUIRED
    choices: Optional[tuple] = None
    min: Optional[float] = None
    max: Optional[float] = None
    check: Optional[Callable[[Any], Optional[str]]] = None
    doc: str = ""
    # maps an accepted spelling to the canonical one (applied before ``check``; the printer shows the result)
    normalize: Optional[Callable[[Any], Any]] = None

    @property
    def required(self) -> bool:
        return self.default is REQUIRED

    def describe(self) -> str:
        kind = {"ints": "list of int", "floats": "list of float", "strs": "list of str",
                "tensor": "number, true/false or flat list of them"}.get(self.kind, self.kind)
        parts = [kind]
        if self.choices:
            parts.append("one of " + ", ".join(format_attr_value(c) for c in self.choices))
        if self.min is not None and self.max is not None:
            parts.append(f"{format_attr_value(self.min)}..{format_attr_value(self.max)}")
        elif self.min is not None:
            parts.append(f">= {format_attr_value(self.min)}")
        return ", ".join(parts)

    def coerce(self, value: Any) -> Any:
        """Return ``value`` converted to this attribute's kind, or raise ValueError."""
        k = self.kind
        if value is None:
            if self.default is None:
                return None
            raise ValueError(f"expects a {self.describe()}")
        if k in ("ints", "floats", "strs"):
            if not isinstance(value, (list, tuple)):
                raise ValueError(f"expects a list, got {format_attr_value(value)}")
            elem = Attr(self.name, k[:-1], default=REQUIRED, choices=self.choices, min=self.min, max=self.max)
            out = []
            for v in value:
                try:
                    out.append(elem.coerce(v))
                except ValueError as e:
                    raise ValueError(f"list element {format_attr_value(v)}: {e}") from None
            value = tuple(out)
        elif k == "int":  # numbers.Integral also admits NumPy integers
            if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
                raise ValueError(f"expects an integer, got {format_attr_value(value)}")
            value = int(value)
            if not -INT_ATTR_LIMIT <= value < INT_ATTR_LIMIT:  # before any op's rule puts it in a message
                raise ValueError(f"expects a 64-bit integer, got {format_attr_value(value)}")
        elif k == "float":
            if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
                raise ValueError(f"expects a number, got {format_attr_value(value)}")
            try:
                value = float(value)
            except OverflowError:  # an int too large for a float
                raise ValueError(f"expects a number within the Float64 range, got {format_attr_value(value)}") \
                    from None
        elif k == "str":
            if not isinstance(value, str):
                raise ValueError(f"expects a string, got {format_attr_value(value)}")
        elif k == "bool":
            if not isinstance(value, bool):
                raise ValueError(f"expects true or false, got {format_attr_value(value)}")
        elif k == "tensor":
            from .constants import coerce_value
            value = coerce_value(value)
        else:  # pragma: no cover - programming error
            raise AssertionError(k)
        if k in ("int", "float", "str"):
            if self.choices is not None and value not in self.choices:
                raise ValueError(f"must be one of {', '.join(format_attr_value(c) for c in self.choices)}, "
                                 f"got {format_attr_value(value)}")
            if self.min is not None and value < self.min:
                raise ValueError(self._range_msg(value))
            if self.max is not None and value > self.max:
                raise ValueError(self._range_msg(value))
        if self.normalize is not None:
            value = self.normalize(value)
        if self.check is not None:
            msg = self.check(value)
            if msg:
                raise ValueError(msg)
        return value

    def _range_msg(self, value: Any) -> str:
        if self.max is None:
            return f"must be >= {format_attr_value(self.min)}, got {format_attr_value(value)}"
        return (f"must be in {format_attr_value(self.min)}..{format_attr_value(self.max)}, "
                f"got {format_attr_value(value)}")


class OpLoc:
    """Where an op's pieces are in the source text: the op's line, its name, and each result,
    operand, attribute (name and value) and type.

    A statement is one line, so each piece is a column range on it.  A big file has hundreds of
    thousands of ops, each with a dozen pieces: they are stored as one flat array of columns per
    op (4 bytes each, instead of a 72-byte ``Span`` object each) and made into ``Span``s when
    read, which only error messages and tools do.
    """

    __slots__ = ("_cols", "_keys", "_counts")

    def __init__(self, line: Span, name: Span, results: Sequence[Span] = (), operands: Sequence[Span] = (),
                 attrs: Optional[Mapping[str, Span]] = None, attr_names: Optional[Mapping[str, Span]] = None,
                 types: Sequence[Span] = ()) -> None:
        cols = [line.line, line.col, line.end_col, name.col, name.end_col]
        add = cols.append
        for sp in results:
            add(sp[1])
            add(sp[2])
        for sp in operands:
            add(sp[1])
            add(sp[2])
        if attrs:
            keys = tuple(attrs)
            for k in keys:
                sp = attrs[k]
                add(sp[1])
                add(sp[2])
            for k in keys:
                sp = (attr_names or attrs).get(k, attrs[k])
                add(sp[1])
                add(sp[2])
        else:
            keys = ()
        for sp in types:
            add(sp[1])
            add(sp[2])
        self._cols = array("i", cols)
        self._keys = keys
        self._counts = (len(results), len(operands), len(types))

    def _spans(self, start: int, n: int) -> list[Span]:
        c, line = self._cols, self._cols[0]
        return [Span(line, c[start + 2 * k], c[start + 2 * k + 1]) for k in range(n)]

    @property
    def lineno(self) -> int:
        """The op's line number (no ``Span`` made)."""
        return self._cols[0]

    @property
    def line(self) -> Span:
        return Span(self._cols[0], self._cols[1], self._cols[2])

    @property
    def name(self) -> Span:
        return Span(self._cols[0], self._cols[3], self._cols[4])

    @property
    def results(self) -> list[Span]:
        return self._spans(5, self._counts[0])

    @property
    def operands(self) -> list[Span]:
        return self._spans(5 + 2 * self._counts[0], self._counts[1])

    def _attr_start(self) -> int:
        return 5 + 2 * (self._counts[0] + self._counts[1])

    @property
    def attrs(self) -> dict[str, Span]:
        return dict(zip(self._keys, self._spans(self._attr_start(), len(self._keys))))

    @property
    def attr_names(self) -> dict[str, Span]:
        return dict(zip(self._keys, self._spans(self._attr_start() + 2 * len(self._keys), len(self._keys))))

    @property
    def types(self) -> list[Span]:
        return self._spans(self._attr_start() + 4 * len(self._keys), self._counts[2])

    def __eq__(self, other: object) -> bool:
        return isinstance(other, OpLoc) and (self._cols, self._keys, self._counts) == (
            other._cols, other._keys, other._counts)

    def __repr__(self) -> str:
        return f"OpLoc(line={self._cols[0]}, name={self.name}, results={self.results}, operands={self.operands})"


class InferContext:
    """What a type rule sees: the op, its operand types (``None`` if omitted) and attributes."""

    def __init__(self, op: "Op", types: Sequence[Optional[TensorType]], attrs: Mapping[str, Any]) -> None:
        self.op = op
        self.types = list(types)
        self.attrs = dict(attrs)

    @property
    def name(self) -> str:
        return self.op.op_name

    def fail(self, message: str, *, operand: int | None = None, attr: str | None = None,
             element: int | None = None) -> "None":
        raise OpError(f"{self.name}: {message}", operand=operand, attr=attr, element=element)

    def declared(self, k: int = 0) -> TensorType:
        """Result ``k``'s type as written on the line, for ops whose type is not inferable
        (``DECLARED_TYPE``): a missing one is an error saying it is required."""
        given = self.op.result_types
        t = given[k] if given is not None and k < len(given) else None
        if t is None:
            raise OpError(f"{self.name}: the result type is required on a {self.name} line (nothing to infer "
                          f"it from), e.g. {self.op.results[0] if self.op.results else 't1'} = {self.name}(...) "
                          f": Float32 [2, 3]")
        return t

    def type(self, i: int) -> TensorType:
        t = self.types[i] if i < len(self.types) else None
        if t is None:  # unreachable after check_signature; a clear error all the same, never an assert
            self.fail(f"operand {self.operand_name(i)} is required", operand=i)
        return t

    def has(self, i: int) -> bool:
        return i < len(self.types) and self.types[i] is not None

    def operand_name(self, i: int) -> str:
        sig = self.op.OPERANDS
        if i < len(sig):
            return sig[i].name
        return f"{sig[-1].name}{i - len(sig) + 2}" if sig and sig[-1].variadic else f"#{i}"

    # -- common checks ---------------------------------------------------
    def dtype_in(self, i: int, allowed: Sequence[DType]) -> DType:
        t = self.type(i)
        if t.dtype not in allowed:
            self.fail(f"operand {self.operand_name(i)} ({self.op.operand_value(i)}) has dtype {t.dtype}; "
                      f"expected {' or '.join(d.value for d in allowed)}", operand=i)
        return t.dtype

    def rank(self, i: int, rank: int) -> TensorType:
        t = self.type(i)
        if t.rank != rank:
            self.fail(f"operand {self.operand_name(i)} ({self.op.operand_value(i)}) must have rank {rank}, "
                      f"got {t}", operand=i)
        return t

    def same_dtype(self, i: int, j: int) -> None:
        a, b = self.type(i), self.type(j)
        if a.dtype != b.dtype:
            self.fail(f"operand {self.operand_name(j)} ({self.op.operand_value(j)}) has dtype {b.dtype} but "
                      f"{self.operand_name(i)} ({self.op.operand_value(i)}) has {a.dtype}", operand=j)

    def unify(self, i: int, j: int) -> TensorType:
        """Operands ``i`` and ``j`` must have identical types (``?`` matches anything)."""
        self.same_dtype(i, j)
        a, b = self.type(i), self.type(j)
        merged = unify_shapes(a.shape, b.shape)
        if merged is None:
            self.fail(f"operand {self.operand_name(j)} ({self.op.operand_value(j)}) has shape "
                      f"{_fmt(b.shape)} but {self.operand_name(i)} ({self.op.operand_value(i)}) has "
                      f"{_fmt(a.shape)}; they must be equal", operand=j)
        return TensorType(a.dtype, merged)

    def expect_shape(self, i: int, shape: Sequence[Dim], what: str = "") -> tuple:
        """Operand ``i`` must have ``shape``; returns the unified shape."""
        t = self.type(i)
        merged = unify_shapes(t.shape, tuple(shape))
        if merged is None:
            self.fail(f"operand {self.operand_name(i)} ({self.op.operand_value(i)}) has shape {_fmt(t.shape)}; "
                      f"expected {_fmt(shape)}{what}", operand=i)
        return merged

    def axis(self, attr: str, rank: int) -> int:
        axis = self.attrs[attr]
        if not -rank <= axis < rank or rank == 0:
            self.fail(f"{attr} {axis} is out of range for rank {rank}", attr=attr)
        return axis % rank


def _fmt(shape: Sequence[Dim]) -> str:
    from .types import format_shape
    return format_shape(shape)


def unify_dim(a: Dim, b: Dim) -> tuple[bool, Dim]:
    if a is None:
        return True, b
    if b is None or a == b:
        return True, a
    return False, None


def unify_shapes(a: Sequence[Dim], b: Sequence[Dim]) -> Optional[tuple]:
    if len(a) != len(b):
        return None
    out = []
    for x, y in zip(a, b):
        ok, d = unify_dim(x, y)
        if not ok:
            return None
        out.append(d)
    return tuple(out)


OPS: dict[str, type["Op"]] = {}


def lookup_op(name: str) -> Optional[type["Op"]]:
    return OPS.get(name)


class Op:
    """An operation: ``results = OpName(operands, attrs) : result_types``.

    Class-level data (overridden by each op):

    * ``OPERANDS``: the operand signature, in order.
    * ``RESULTS``: result names (documentation and count).
    * ``ATTRS``: the attribute signature, in printing order.
    * ``infer(ctx)``: the type rule; returns one ``TensorType`` per result.
    """

    OPERANDS: ClassVar[tuple[Operand, ...]] = ()
    RESULTS: ClassVar[tuple[str, ...]] = ("Y",)
    ATTRS: ClassVar[tuple[Attr, ...]] = ()
    abstract: ClassVar[bool] = True
    is_backward: ClassVar[bool] = False
    op_name: ClassVar[str] = "Op"
    # the result types are part of the op (read by ``infer`` via ``ctx.declared``), not inferred:
    # copies that drop the inferred types to infer them again keep these (``untyped``)
    DECLARED_TYPE: ClassVar[bool] = False

    # -- traits: what passes, autodiff and the builder ask of an op, as data (docs/ops.md lists them) --
    # "same": the operands and the result share one shape, element by element; "broadcast": the same
    # after NumPy broadcasting of the operands.
    ELEMENTWISE: ClassVar[Optional[str]] = None
    # The scalar formula of an element-wise op (a Python expression in the operand and attribute names
    # and the functions of ``gradir.traits.FORMULA_FUNCTIONS``), from which a fusion pass can generate a
    # loop; a test checks it against the kernel.
    FORMULA: ClassVar[Optional[str]] = None
    BROADCASTS: ClassVar[bool] = False  # operand shapes broadcast (so a gradient may need ReduceSumTo)
    # The operands the result is linear in, the others held fixed: each on its own (Mul, MatMul: bilinear),
    # or with LINEAR_JOINTLY all of them together (Add, Sub: f(2a, 2b) = 2 f(a, b), but not in a alone).
    LINEAR_IN: ClassVar[tuple[int, ...]] = ()
    LINEAR_JOINTLY: ClassVar[bool] = False
    REDUCTION: ClassVar[bool] = False  # sums (or averages) over axes
    SHAPE_ONLY: ClassVar[bool] = False  # moves, views or repeats elements; computes nothing
    GRADIENT: ClassVar[Optional[str]] = None  # the ONNX Runtime gradient op this forward op's rule emits
    # (fused op, the attribute that tells siblings apart, the fused op's list attribute): siblings over
    # the same operands and other attributes fuse into one op (the fusion pass)
    FUSES_INTO: ClassVar[Optional[tuple[str, str, str]]] = None

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        if cls.__dict__.get("abstract", False):
            return
        cls.abstract = False
        name = cls.__name__
        if not name.endswith("Op"):
            raise TypeError(f"op class {name} must end in 'Op'")
        cls.op_name = name[:-2]
        if cls.op_name in OPS:
            raise TypeError(f"op {cls.op_name} registered twice")
        variadic = [k for k, o in enumerate(cls.OPERANDS) if o.variadic]
        if variadic and variadic != [len(cls.OPERANDS) - 1]:
            raise TypeError(f"{name}: only the last operand may be variadic")
        OPS[cls.op_name] = cls

    def __init__(self, results: Sequence[str], operands: Sequence[Optional[str]],
                 attrs: Optional[Mapping[str, Any]] = None,
                 result_types: Optional[Sequence[Optional[TensorType]]] = None,
                 loc: Optional[OpLoc] = None) -> None:
        if self.abstract:
            raise TypeError(f"{type(self).__name__} is abstract")
        self.results: list[str] = _items(results, f"{self.op_name}: results", _is_str, "value names")
        self.operands: list[Optional[str]] = _items(operands, f"{self.op_name}: operands",
                                                    lambda v: v is None or isinstance(v, str), "value names or None")
        if attrs is not None and not isinstance(attrs, Mapping):
            raise ArgumentError(f"{self.op_name}: attrs must be a mapping of attribute names to values, "
                                f"got {type(attrs).__name__}")
        while self.operands and self.operands[-1] is None:  # trailing omitted operands are implied
            self.operands.pop()
        self.attrs: dict[str, Any] = dict(attrs or {})
        self.result_types: Optional[list[Optional[TensorType]]] = (
            list(result_types) if result_types is not None else None)
        self.loc = loc

    # -- signature helpers -------------------------------------------------
    @classmethod
    def attr_spec(cls, name: str) -> Optional[Attr]:
        for a in cls.ATTRS:
            if a.name == name:
                return a
        return None

    @classmethod
    def num_results(cls, attrs: Mapping[str, Any]) -> int:
        return len(cls.RESULTS)

    @classmethod
    def result_names(cls, attrs: Mapping[str, Any]) -> tuple[str, ...]:
        return cls.RESULTS

    @classmethod
    def summary(cls) -> str:
        doc = (cls.__doc__ or "").strip()
        return doc.split("\n")[0] if doc else ""

    @classmethod
    def signature(cls) -> str:
        ops = []
        for o in cls.OPERANDS:
            ops.append(o.name + ("..." if o.variadic else "") + ("?" if o.optional else ""))
        attrs = []
        for a in cls.ATTRS:
            if a.required:
                attrs.append(a.name)
            elif a.default is None:
                attrs.append(f"{a.name}?")
            else:
                attrs.append(f"{a.name}={format_attr_value(a.default)}")
        results = ", ".join(cls.RESULTS) if cls.RESULTS else "..."
        return f"{results} = {cls.op_name}({', '.join(ops + attrs)})"

    def operand_value(self, i: int) -> str:
        if i < len(self.operands) and self.operands[i] is not None:
            return self.operands[i]  # type: ignore[return-value]
        return "_"

    def resolved_attrs(self) -> dict[str, Any]:
        """Declared attributes with defaults filled in (raw values, uncoerced)."""
        out = {}
        for a in self.ATTRS:
            if a.name in self.attrs:
                out[a.name] = self.attrs[a.name]
            elif not a.required:
                out[a.name] = a.default
        return out

    # -- checking ----------------------------------------------------------
    def check_signature(self) -> None:
        """Check operand count, ``_`` placement, attributes and result count.

        Raises ``OpErrors`` with every problem found.  On success the attributes
        are coerced and stored back, complete (defaults filled in, declared order).
        """
        errors: list[OpError] = []
        name = self.op_name
        sig = self.OPERANDS
        n = len(self.operands)
        has_var = bool(sig) and sig[-1].variadic
        n_required = sum(1 for o in sig if not o.optional and not o.variadic)
        n_required += 1 if has_var and not sig[-1].optional else 0
        # trailing omitted optionals may be left out
        if (not has_var and n > len(sig)) or n < n_required:
            if has_var:
                want, most = f"at least {len(sig)}", len(sig)
            elif n_required == len(sig):
                want, most = f"{len(sig)}", len(sig)
            else:
                want, most = f"{n_required} to {len(sig)}", len(sig)
            names = ", ".join(o.name + ("?" if o.optional else "") + ("..." if o.variadic else "") for o in sig)
            errors.append(OpError(f"{name} takes {want} operand{'' if most == 1 else 's'} ({names}), got {n}",
                                  operand=len(sig) if n > len(sig) else None))
        for i, v in enumerate(self.operands):
            spec = sig[i] if i < len(sig) else (sig[-1] if has_var else None)
            if v is None and spec is not None and not spec.optional:
                errors.append(OpError(f"{name}: operand {spec.name} is required; '_' is only allowed for "
                                      f"optional operands", operand=i))
        if not errors:  # a required operand after the last one given (trailing operands are optional only)
            absent = [o.name for o in sig[n:] if not o.optional and not o.variadic]
            if absent:
                errors.append(OpError(f"{name}: operand{'s' if len(absent) > 1 else ''} {', '.join(absent)} "
                                      f"{'are' if len(absent) > 1 else 'is'} required but not given (only "
                                      f"trailing optional operands may be left out; got {n} operands)",
                                      operand=None))
        n_res = None
        attrs: dict[str, Any] = {}
        for key, raw in self.attrs.items():
            spec_a = self.attr_spec(key)
            if spec_a is None:
                known = [a.name for a in self.ATTRS]
                hint = difflib.get_close_matches(key, known, n=1)
                if hint:
                    msg = f"{name} has no attribute '{key}'; did you mean '{hint[0]}'?"
                elif known:
                    msg = f"{name} has no attribute '{key}' (it has: {', '.join(known)})"
                else:
                    msg = f"{name} takes no attributes, got '{key}'"
                errors.append(OpError(msg, attr=key))
                continue
            try:
                attrs[key] = spec_a.coerce(raw)
            except ValueError as e:
                sep = "" if str(e).startswith("=") else " "
                errors.append(OpError(f"{name}: attribute {key}{sep}{e}", attr=key))
        for a in self.ATTRS:
            if a.name not in self.attrs:
                if a.required:
                    errors.append(OpError(f"{name}: attribute '{a.name}' ({a.describe()}) is required"))
                else:
                    attrs[a.name] = a.default
        if not errors:
            self.attrs = {a.name: attrs[a.name] for a in self.ATTRS}
            n_res = self.num_results(self.attrs)
            if len(self.results) != n_res:
                errors.append(OpError(
                    f"{name} has {n_res} result{'s' if n_res != 1 else ''} "
                    f"({', '.join(self.result_names(self.attrs))}), but {len(self.results)} "
                    f"{'are' if len(self.results) != 1 else 'is'} assigned", result=0))
        if errors:
            raise OpErrors(errors)

    def check(self, operand_types: Sequence[Optional[TensorType]]) -> list[TensorType]:
        """Validate this op given its operand types; return the result types.

        Raises ``OpError`` (a type problem) or ``OpErrors`` (signature problems).
        """
        self.check_signature()
        sig = self.OPERANDS
        n = len(self.operands)
        n_res = self.num_results(self.attrs)
        types = list(operand_types) + [None] * (max(len(sig), n) - len(operand_types))
        ctx = InferContext(self, types, self.attrs)
        self.check_attrs(ctx)
        out = list(self.infer(ctx))
        assert len(out) == n_res, (self.op_name, out)
        return out

    def check_attrs(self, ctx: InferContext) -> None:
        """Cross-attribute checks that don't need types (hook)."""

    def demo_range(self, operand: int, types: Mapping[str, TensorType]) -> Optional[tuple[int, int]]:
        """Inclusive value range for a generated integer operand in a demo run (hook)."""
        return None

    def demo_scale(self, operand: int) -> Optional[float]:
        """Half-width ``a`` of U(-a, a) for a generated float operand in a demo run; ``None``
        (the default) means N(0, 1) (hook)."""
        return None

    def infer(self, ctx: InferContext) -> list[TensorType]:  # pragma: no cover - abstract
        raise NotImplementedError

    def validate(self, operand_types: Optional[Sequence[Optional[TensorType]]] = None) -> list[TensorType]:
        """Check this op on its own; return result types or raise ``VerifyError``
        whose diagnostics say why (never a bare ``False``).

        Without ``operand_types`` only the arity and attributes can be checked
        fully; operand types then default to the op's recorded ones, if any.
        """
        if operand_types is None:
            raise VerifyError(Diagnostic(f"{self.op_name}: validate() needs the operand types "
                                         "(or validate the op inside its Graph)"))
        operand_types = _items(operand_types, f"{self.op_name}.validate(): operand_types",
                               lambda t: t is None or isinstance(t, TensorType), "TensorType or None")
        if len(operand_types) != len(self.operands) or any(
                t is None and v is not None for t, v in zip(operand_types, self.operands)):
            raise ArgumentError(f"{self.op_name}.validate(): operand_types must give one TensorType per operand "
                                f"({len(self.operands)}: {', '.join(v or '_' for v in self.operands)}), None only for "
                                f"an omitted one; got {len(operand_types)}")
        try:
            types = self.check(operand_types)
        except (OpError, OpErrors) as e:
            errs = e.errors if isinstance(e, OpErrors) else [e]
            raise VerifyError([Diagnostic(x.message) for x in errs]) from None
        return types

    # -- printing ----------------------------------------------------------
    def to_string(self) -> str:
        """The op's canonical line, e.g. ``t2 = ReluGrad(t0, t1) : Float32 [4]``."""
        ops = list(self.operands)
        while ops and ops[-1] is None and len(ops) > 0:
            ops.pop()
        args = ["_" if v is None else v for v in ops]
        resolved = self.resolved_attrs()
        for a in self.ATTRS:
            if a.name not in resolved:
                continue
            v = resolved[a.name]
            if not a.required and attr_equal(v, a.default):
                continue
            args.append(f"{a.name}={format_attr_value(v)}")
        # attributes not in the signature (invalid op) still print, for error messages
        for k, v in self.attrs.items():
            if self.attr_spec(k) is None:
                args.append(f"{k}={format_attr_value(v)}")
        line = f"{', '.join(self.results)} = {self.op_name}({', '.join(args)})"
        if self.result_types and all(t is not None for t in self.result_types):
            line += " : " + ", ".join(str(t) for t in self.result_types)  # type: ignore[arg-type]
        return line

    __str__ = to_string

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.to_string()}>"

    def key(self) -> tuple:
        """Structural identity (op type, results, operands, attributes, types)."""
        return (self.op_name, tuple(self.results), tuple(self.operands), freeze(self.resolved_attrs()),
                tuple(self.result_types) if self.result_types else None)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Op) and self.key() == other.key()

    def __hash__(self) -> int:
        return hash(self.key())

    def kernel_attrs(self) -> dict[str, Any]:
        """The keywords the op's kernel is called with: its attributes (hook: an op whose kernel
        needs more, e.g. ``Constant`` its array, adds it)."""
        return self.attrs

    def untyped(self) -> "Op":
        """A copy whose result types are inferred again (kept when they are declared, not inferred)."""
        return self.copy() if self.DECLARED_TYPE else self.copy(result_types=None)

    def copy(self, **changes: Any) -> "Op":
        kw = dict(results=self.results, operands=self.operands, attrs=self.attrs,
                  result_types=self.result_types, loc=self.loc)
        kw.update(changes)
        return type(self)(**kw)


class BackwardOp(Op):
    """A gradient op: consumes upstream gradients and saved forward values."""

    abstract = True
    is_backward = True


def attr_equal(a: Any, b: Any) -> bool:
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(attr_equal(x, y) for x, y in zip(a, b))
    if type(a) is bool or type(b) is bool:
        return type(a) is type(b) and a == b
    return a == b


def freeze(v: Any) -> Any:
    if isinstance(v, dict):
        return tuple((k, freeze(x)) for k, x in v.items())
    if isinstance(v, (list, tuple)):
        return tuple(freeze(x) for x in v)
    if isinstance(v, float):  # bit-exact: 0.0 and -0.0 differ (and print differently); nan equals nan
        return ("float", v.hex())
    return (type(v).__name__, v) if isinstance(v, (bool, int, float)) else v


def _items(value: Any, what: str, ok: Callable[[Any], bool], want: str) -> list:
    """``value`` as a list whose items pass ``ok``, or an ``ArgumentError`` naming ``what``."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise ArgumentError(f"{what} must be a list of {want}, got {type(value).__name__}")
    try:
        out = list(value)
    except TypeError:  # an Iterable that does not iterate: a 0-d NumPy array
        raise ArgumentError(f"{what} must be a list of {want}, got {shown(value)}") from None
    for v in out:
        if not ok(v):
            raise ArgumentError(f"{what} must be a list of {want}, got {shown(v)} in it")
    return out


def _is_str(v: Any) -> bool:
    return isinstance(v, str)


@dataclass
class GraphInput:
    name: str
    type: TensorType
    span: Optional[Span] = None
    type_span: Optional[Span] = None
    label: Optional[str] = None  # a person's name for it (docs/format.md "Labels"); see labels.py
    label_span: Optional[Span] = None


class Graph:
    """Inputs, ops in order, outputs and an optional name.

    ``validate()`` checks the whole graph (single assignment, use after
    definition, each op's signature and types, outputs) and fills in every op's
    result types; it raises ``VerifyError`` with *all* problems found.
    """

    def __init__(self, inputs: Iterable[GraphInput | tuple[str, TensorType]] = (),
                 ops: Iterable[Op] = (), outputs: Iterable[str] = (), name: Optional[str] = None,
                 source: Optional[Source] = None, output_labels: Optional[Iterable[Optional[str]]] = None) -> None:
        if name is not None and not isinstance(name, str):
            raise ArgumentError(f"a graph's name must be a str or None, got {type(name).__name__}")
        self.name = name
        self.inputs: list[GraphInput] = [
            i if isinstance(i, GraphInput) else GraphInput(*i) for i in _items(
                inputs, "Graph inputs", lambda i: isinstance(i, GraphInput) or (
                    isinstance(i, tuple) and len(i) == 2 and _is_str(i[0]) and isinstance(i[1], TensorType)),
                "GraphInput or (name, TensorType) pairs")]
        self.ops: list[Op] = _items(ops, "Graph ops", lambda o: isinstance(o, Op), "Op objects")
        self.outputs: list[str] = _items(outputs, "Graph outputs", _is_str, "value names")
        self.source = source
        self.output_spans: list[Optional[Span]] = [None] * len(self.outputs)
        from .labels import output_label_list
        self.output_labels: list[Optional[str]] = output_label_list(output_labels, len(self.outputs))
        self.output_label_spans: list[Optional[Span]] = [None] * len(self.outputs)
        self.name_span: Optional[Span] = None
        self.types: dict[str, TensorType] = {}
        self.trivia: Optional[Trivia] = None  # a parsed file's comments and blank lines, kept by to_text

    # -- queries -------------------------------------------------------------
    @property
    def input_names(self) -> list[str]:
        return [i.name for i in self.inputs]

    def type_of(self, name: str) -> TensorType:
        """The type of value ``name`` (after validation)."""
        return self.types[name]

    # -- validation ------------------------------------------------------------
    def diagnostics(self) -> list[Diagnostic]:
        from .verify import verify_graph
        return verify_graph(self)

    def validate(self) -> "Graph":
        diags = self.diagnostics()
        if diags:
            raise VerifyError(errors_of(diags))
        return self

    # -- printing ------------------------------------------------------------
    def to_text(self) -> str:
        """Canonical text: the header, inputs, ops, outputs, a statement a line; the comments and
        blank lines of a parsed graph move with their statements (see ``trivia.py``)."""
        lines = []
        if self.name is not None:
            lines.append(f"graph {self.name}")
        from .labels import label_text, output_line
        for i in self.inputs:
            lines.append(f"input {i.name}{label_text(i.label)} : {i.type}")
        for op in self.ops:
            if not op.result_types and self.types:
                types = [self.types.get(r) for r in op.results]
                if all(t is not None for t in types):
                    op.result_types = types
            lines.append(op.to_string())
        if self.outputs:
            lines.append(output_line(self))
        if self.trivia:
            from .trivia import render
            return render(self.trivia, self, lines)
        return "\n".join(lines) + "\n"

    def __str__(self) -> str:
        return self.to_text()

    def __repr__(self) -> str:
        return f"<Graph {self.name or ''} {len(self.inputs)} inputs, {len(self.ops)} ops, {len(self.outputs)} outputs>"

    def key(self) -> tuple:
        from .labels import output_labels_of
        return (self.name, tuple((i.name, i.type, i.label) for i in self.inputs), tuple(op.key() for op in self.ops),
                tuple(self.outputs), tuple(output_labels_of(self)))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Graph) and self.key() == other.key()

    __hash__ = None  # type: ignore[assignment]
