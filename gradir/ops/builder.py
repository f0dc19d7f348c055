"""``GraphBuilder``: build a graph from Python, one method per registered op.

    b = GraphBuilder("mlp")
    x = b.input("Float32", [4, 16])
    w = b.input("Float32", [16, 8])
    y = b.Softmax(x @ w, axis=-1)
    b.output(y)
    g = b.build()            # a validated Graph; g.to_text() is canonical

Values are named ``t0, t1, ...`` in the order they are made (inputs and op
results alike), so the same graph written as text in the same order parses to an
equal ``Graph`` that prints identically.

The op methods are generated from the registry (``gradir.OPS``): each takes the
operands positionally (``None`` for an omitted optional operand) and the
attributes as keywords, and has a signature and docstring built from the op's
declaration, so a newly registered op gets a method with no extra code.  Every
call is checked at once; a mistake raises ``BuilderError`` (a ``VerifyError``)
at the offending call, naming the op, the operand or attribute, and what was
expected versus given.

Operators on values: ``a + b``, ``a - b``, ``a * b``, ``a / b`` (``Add``, ``Sub``,
``Mul``, ``Div`` with broadcasting), ``a @ b`` (``MatMul``), ``-a`` (``Neg``);
``a * 2.0``, ``2.0 * a`` and ``a / 2.0`` become ``Scale`` on floating-point values (one
element-wise op); any other Python number meets a value through a rank-0 ``Constant`` of the
value's dtype (``a + 1.0``, ``1 - a``, ``2 * i`` for an integer ``i``).  ``b.constant(array)``
makes a ``Constant`` from a NumPy array (or ``b.constant(0.5, "Float32", [2, 3])`` a fill).
"""

from __future__ import annotations

import inspect
import re
from typing import Any, Callable, Iterable, Optional, Sequence, Union

import numpy as np

from ..ir.constants import MAX_CONSTANT_ELEMENTS, ConstantValueError, canonical_value, coerce_value, value_from_array
from ..errors import ArgumentError, BuilderError, Diagnostic, shown
from ..ir.graph import Graph, GraphInput
from ..ir.op import ON_REGISTER, OPS, REQUIRED, Op, OpError, OpErrors, format_attr_value
from ..ir.types import DType, TensorType

__all__ = ["GraphBuilder", "Value", "BuilderError"]

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


class Value:
    """A value in a graph being built: its name (``t3``) and type."""

    __slots__ = ("builder", "name", "type")
    __array_ufunc__ = None  # ``ndarray * value`` defers to Value (and fails with a clear message)

    def __init__(self, builder: "GraphBuilder", name: str, type: TensorType) -> None:
        self.builder = builder
        self.name = name
        self.type = type

    @property
    def dtype(self) -> DType:
        return self.type.dtype

    @property
    def shape(self) -> tuple:
        return self.type.shape

    @property
    def rank(self) -> int:
        return self.type.rank

    def __repr__(self) -> str:
        return f"<Value {self.name} : {self.type}>"

    def __str__(self) -> str:
        return self.name

    # -- operators -------------------------------------------------------------
    def _binary(self, op: str, other: Any, symbol: str, reverse: bool = False) -> "Value":
        if _is_number(other):
            shown = format_attr_value(other)
            expr = f"{shown} {symbol} {self.name}" if reverse else f"{self.name} {symbol} {shown}"
            other = self.builder._constant(other, TensorType(self.dtype, ()), expr)
        elif not isinstance(other, Value):
            expr = (f"{_describe(other)} {symbol} {self.name}" if reverse else
                    f"{self.name} {symbol} {_describe(other)}")
            raise self.builder._error(f"{expr}: both sides of {symbol} must be gradir values or Python numbers "
                                      "(make an array a Constant with b.constant(array), or an input)")
        a, b = (other, self) if reverse else (self, other)
        return self.builder._apply(op, (a, b), {}, f"{a.name} {symbol} {b.name}")

    def _scale(self, other: Any, symbol: str, invert: bool = False) -> "Value":
        factor = float(other)
        if invert:
            if factor == 0.0:
                raise self.builder._error(f"{self.name} / 0: division by zero")
            factor = 1.0 / factor
        return self.builder._apply("Scale", (self,), {"factor": factor},
                                   f"{self.name} {symbol} {format_attr_value(float(other))}")

    def __add__(self, other: Any) -> "Value":
        return self._binary("Add", other, "+")

    def __radd__(self, other: Any) -> "Value":
        return self._binary("Add", other, "+", reverse=True)

    def __sub__(self, other: Any) -> "Value":
        return self._binary("Sub", other, "-")

    def __rsub__(self, other: Any) -> "Value":
        return self._binary("Sub", other, "-", reverse=True)

    def __mul__(self, other: Any) -> "Value":
        if _is_number(other) and self.dtype.is_float:
            return self._scale(other, "*")
        return self._binary("Mul", other, "*")

    def __rmul__(self, other: Any) -> "Value":
        if _is_number(other) and self.dtype.is_float:
            return self._scale(other, "*")
        return self._binary("Mul", other, "*", reverse=True)

    def __truediv__(self, other: Any) -> "Value":
        if _is_number(other) and self.dtype.is_float:
            return self._scale(other, "/", invert=True)
        return self._binary("Div", other, "/")

    def __rtruediv__(self, other: Any) -> "Value":
        return self._binary("Div", other, "/", reverse=True)

    def __matmul__(self, other: Any) -> "Value":
        return self._binary("MatMul", other, "@")

    def __rmatmul__(self, other: Any) -> "Value":
        return self._binary("MatMul", other, "@", reverse=True)

    def __neg__(self) -> "Value":
        return self.builder._apply("Neg", (self,), {}, f"-{self.name}")

    def __bool__(self) -> bool:
        raise self.builder._error(f"{self.name} has no truth value: it is a symbolic graph value, not an array")


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _describe(x: Any) -> str:
    if isinstance(x, Value):
        return f"{x.name} ({x.type})"
    return f"{shown(x, 40)} ({type(x).__name__})"


class GraphBuilder:
    """Build a ``Graph`` op by op; see the module docstring.

    ``GraphBuilder(name=None)``: ``name`` becomes the ``graph NAME`` header.
    """

    def __init__(self, name: Optional[str] = None) -> None:
        if name is not None and not (isinstance(name, str) and _IDENT.match(name)):
            raise BuilderError(f"GraphBuilder: graph name {shown(name)} is not an identifier "
                               "(letters, digits and _, not starting with a digit)")
        self.name = name
        self._inputs: list[GraphInput] = []
        self._ops: list[Op] = []
        self._outputs: list[str] = []
        self._output_labels: list[Optional[str]] = []
        self._types: dict[str, TensorType] = {}
        self._next = 0
        # what _label checks, kept as each input and output is added: checking a label is then one look-up,
        # not a pass over every input and output (which made 20,000 labelled outputs take minutes)
        self._owners: dict[str, str] = {}  # label -> the value it names
        self._input_labels: dict[str, str] = {}  # input value name -> its label
        self._output_set: set[str] = set()

    def __repr__(self) -> str:
        return (f"<GraphBuilder {self.name or ''} {len(self._inputs)} inputs, {len(self._ops)} ops, "
                f"{len(self._outputs)} outputs>")

    def _fresh(self) -> str:
        name = f"t{self._next}"
        self._next += 1
        return name

    @property
    def num_ops(self) -> int:
        """How many ops the graph has so far (an op made by the next call is ``ops[num_ops]``)."""
        return len(self._ops)

    @property
    def inputs(self) -> list[GraphInput]:
        """The inputs declared so far (copies)."""
        return [GraphInput(i.name, i.type, label=i.label) for i in self._inputs]

    # -- graph structure ------------------------------------------------------------
    def input(self, dtype: Union[str, DType, TensorType], shape: Optional[Iterable] = None, *,
              label: Optional[str] = None) -> Value:
        """Declare a graph input: ``b.input("Float32", [4, 16])`` (``None`` or ``"?"`` for an
        unknown dimension, ``[]`` for a scalar), or ``b.input(TensorType(...))``; ``label="x"``
        gives it a label (docs/format.md, "Labels")."""
        label = self._label(label, "input()")
        if isinstance(dtype, TensorType):
            if shape is not None:
                raise self._error("input(): give either a TensorType or a dtype and a shape, not both")
            t = dtype
        else:
            if shape is None:
                example = shown(dtype.value if isinstance(dtype, DType) else dtype)
                raise self._error(f"input({shown(dtype)}): the shape is missing, e.g. input({example}, [4, 16]) "
                                  "(use [] for a scalar)")
            try:
                t = TensorType(dtype, list(shape))
            except (ValueError, TypeError) as e:
                raise self._error(f"input({shown(dtype)}, {shown(shape)}): {e}") from None
        v = Value(self, self._fresh(), t)
        self._inputs.append(GraphInput(v.name, t, label=label))
        self._types[v.name] = t
        if label is not None:
            self._owners[label] = v.name
            self._input_labels[v.name] = label
        return v

    def _label(self, label: Any, where: str, value: Optional[str] = None) -> Optional[str]:
        """``label`` checked: a usable label not yet taken (an output of an input may repeat its label)."""
        from ..ir.labels import check_label_arg
        try:
            label = check_label_arg(label, where)
        except ArgumentError as e:
            raise self._error(str(e)) from None
        if label is None:
            return None
        owners = self._owners
        if label in owners and owners[label] != value:
            raise self._error(f"{where}: label {label!r} is already the label of {owners[label]}; labels are "
                              "unique per graph")
        mine = self._input_labels.get(value) if value is not None else None
        if value is not None and mine not in (None, label):
            raise self._error(f"{where}: {value} is an input labelled {mine!r}; an output of an input may only "
                              "repeat its label")
        if label != value and label in self._types:
            raise self._error(f"{where}: label {label!r} is the name of another value")
        return label

    def output(self, *values: Union[Value, Sequence[Value]], label: Optional[str] = None) -> None:
        """Mark values as graph outputs, in order (a tuple of results counts as its items);
        ``label="y"`` labels the one value given."""
        flat: list = []
        for v in values:
            flat.extend(v if isinstance(v, (list, tuple)) else [v])
        if not flat:
            raise self._error("output(): give at least one value")
        if label is not None and len(flat) != 1:
            raise self._error(f"output(): a label names one value; {len(flat)} were given (call output() once for "
                              "each labelled value)")
        for v in flat:
            self._check_value(v, "output()", "value")
            if v.name in self._output_set:
                raise self._error(f"output(): {v.name} is already an output; each value is listed once")
            lb = self._label(label, "output()", v.name)
            self._outputs.append(v.name)
            self._output_labels.append(lb)
            self._output_set.add(v.name)
            if lb is not None:
                self._owners[lb] = v.name

    def constant(self, value: Any, dtype: Union[str, DType, None] = None, shape: Optional[Iterable] = None) -> Value:
        """A ``Constant``: ``b.constant(np.array(...))`` (dtype and shape from the array), or a Python
        number filling ``shape`` (default: a scalar) or a nested list, with ``dtype`` given:
        ``b.constant(0.5, "Float32", [2, 3])``, ``b.constant([[1, 2], [3, 4]], "Int64")``."""
        call = f"constant({_describe(value)})"
        if isinstance(value, (np.ndarray, np.generic)):
            if dtype is not None or shape is not None:
                raise self._error(f"{call}: an array brings its own dtype and shape; convert it (astype, "
                                  "reshape) instead of passing dtype or shape")
            try:
                DType.from_numpy(value.dtype)
            except ValueError:
                raise self._error(f"{call}: NumPy dtype {value.dtype} has no gradir dtype (Float32, Float64, "
                                  "Int32, Int64, Bool)") from None
            if value.size > MAX_CONSTANT_ELEMENTS:
                raise self._error(f"{call}: the array has {value.size:,} elements; a Constant holds at most "
                                  f"{MAX_CONSTANT_ELEMENTS:,} (pass larger data as a graph input)")
            try:
                v, t = value_from_array(np.asarray(value))
            except ConstantValueError as e:
                raise self._error(f"{call}: {e}") from None
            return self._constant(v, t, call, checked=True)
        if dtype is None:
            raise self._error(f"{call}: give the dtype of a Python value, e.g. b.constant(0.5, \"Float32\") "
                              "(an array brings its own)")
        try:
            if isinstance(value, (list, tuple)):
                if shape is not None:
                    raise self._error(f"{call}: a list gives the shape itself; pass shape only with a number")
                nested = np.array(value, dtype=object)  # the shape of a nested list
                value = list(nested.reshape(-1))
                if any(isinstance(v, (list, tuple)) for v in value):
                    raise self._error(f"{call}: the nested list is ragged (its rows differ in length)")
                t = TensorType(dtype, nested.shape)
            else:
                t = TensorType(dtype, list(shape) if shape is not None else [])
        except (ValueError, TypeError) as e:
            raise self._error(f"{call}: {e}") from None
        return self._constant(value, t, call)

    def _constant(self, value: Any, t: TensorType, call: str, checked: bool = False) -> Value:
        """Add ``Constant(value) : t`` (its type is declared, not inferred: no ``_apply``)."""
        if not checked:
            try:
                value = canonical_value(coerce_value(value), t)
            except ValueError as e:
                raise self._error(f"{call}: {e}") from None
        op = OPS["Constant"]([self._fresh()], [], {"value": value}, [t])
        try:
            op.check([])
        except (OpError, OpErrors) as e:
            errs = e.errors if isinstance(e, OpErrors) else [e]
            raise self._error([f"{call}: {x.message}" for x in errs]) from None
        self._ops.append(op)
        self._types[op.results[0]] = t
        return Value(self, op.results[0], t)

    def build(self) -> Graph:
        """The validated ``Graph`` (a copy: the builder may keep growing)."""
        if not self._outputs:
            raise self._error("build(): the graph has no outputs; call output(value) first")
        g = Graph([GraphInput(i.name, i.type, label=i.label) for i in self._inputs], [op.copy() for op in self._ops],
                  list(self._outputs), name=self.name, output_labels=list(self._output_labels))
        return g.validate()

    # -- ops -------------------------------------------------------------------
    def apply(self, op_name: str, *operands: Optional[Value], **attrs: Any) -> Union[Value, tuple[Value, ...]]:
        """Add the op ``op_name``; the generated methods (``b.Relu(x)``) call this."""
        if not isinstance(op_name, str):
            raise self._error(f"apply(): the op name is a str like 'Relu', got {_describe(op_name)}")
        if op_name not in OPS:
            import difflib
            hint = difflib.get_close_matches(op_name, list(OPS), n=1)
            raise self._error(f"unknown op '{op_name}'" + (f"; did you mean '{hint[0]}'?" if hint else ""))
        return self._apply(op_name, operands, attrs, None)

    def _error(self, messages: Union[str, list[str]]) -> BuilderError:
        """A ``BuilderError`` whose diagnostics name this builder (``<GraphBuilder mlp>: error: ...``)."""
        where = f"<GraphBuilder {self.name}>" if self.name else "<GraphBuilder>"
        if isinstance(messages, str):
            messages = [messages]
        return BuilderError([Diagnostic(m, filename=where) for m in messages])

    def _check_value(self, v: Any, where: str, what: str) -> None:
        if not isinstance(v, Value):
            hint = ""
            if _is_number(v):
                hint = f" (make it a Constant: b.constant({v!r}, DTYPE))"
            raise self._error(f"{where}: {what} must be a gradir Value, got {_describe(v)}{hint}")
        if v.builder is not self:
            raise self._error(f"{where}: {what} {v.name} belongs to a different GraphBuilder")

    def _apply(self, op_name: str, operands: Sequence[Optional[Value]], attrs: dict,
               call: Optional[str]) -> Union[Value, tuple[Value, ...]]:
        cls = OPS[op_name]
        if cls.DECLARED_TYPE:  # its type is not inferable from operands: the builder has a method that takes it
            raise self._error(f"{op_name}: its type is declared, not inferred; use b.constant(array) or "
                              f"b.constant(value, dtype, shape)")
        if call is None:
            shown = [("_" if v is None else v.name if isinstance(v, Value) else repr(v)) for v in operands]
            shown += [f"{k}={format_attr_value(v) if not isinstance(v, Value) else v.name}" for k, v in attrs.items()]
            call = f"{op_name}({', '.join(shown)})"
        names: list[Optional[str]] = []
        for i, v in enumerate(operands):
            what = f"operand {_operand_label(cls, i)}"
            if v is None:
                names.append(None)
                continue
            self._check_value(v, call, what)
            names.append(v.name)
        for k, v in attrs.items():
            if isinstance(v, Value):
                raise self._error(f"{call}: attribute {k} must be a constant, got the value {v.name}; "
                                   f"values are operands (positional arguments)")
        try:
            n = cls.num_results(cls(["t0"], names, attrs).resolved_attrs())
        except Exception:  # attributes the count depends on are bad: check() below says how
            n = len(cls.RESULTS)
        try:
            op = cls([f"t{self._next + k}" for k in range(n)], names, attrs)
            types = op.check([None if v is None else self._types[v] for v in op.operands])
        except OpErrors as e:  # arity, attributes
            raise self._error([f"{call}: {x.message}" for x in e.errors]) from None
        except OpError as e:  # a type rule: show the operand types it saw
            given = ", ".join(f"{v} : {self._types[v]}" for v in dict.fromkeys(n for n in names if n is not None))
            raise self._error([f"{call}: {e.message} (operands: {given})"]) from None
        self._next += n
        op.result_types = list(types)
        self._ops.append(op)
        out = []
        for r, t in zip(op.results, types):
            self._types[r] = t
            out.append(Value(self, r, t))
        return out[0] if n == 1 else tuple(out)

    def __getattr__(self, name: str) -> Callable[..., Any]:
        # ops registered after this module was imported get their method on first use
        if name in OPS:
            method = _make_method(OPS[name])
            setattr(GraphBuilder, name, method)
            return method.__get__(self, GraphBuilder)
        import difflib
        hint = difflib.get_close_matches(name, list(OPS), n=1) if not name.startswith("_") else []
        raise AttributeError(f"'GraphBuilder' object has no attribute '{name}'"
                             + (f"; did you mean the op '{hint[0]}'?" if hint else ""))

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(OPS))


def _operand_label(cls: type[Op], i: int) -> str:
    sig = cls.OPERANDS
    if i < len(sig):
        return sig[i].name
    if sig and sig[-1].variadic:
        return f"{sig[-1].name}{i - len(sig) + 2}"
    return f"#{i + 1}"


def _make_method(cls: type[Op]) -> Callable[..., Any]:
    op_name = cls.op_name

    def method(self: GraphBuilder, *operands: Optional[Value], **attrs: Any) -> Any:
        return self._apply(op_name, operands, attrs, None)

    params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_ONLY)]
    sig = cls.OPERANDS
    for k, o in enumerate(sig):
        if o.variadic:
            params.append(inspect.Parameter(o.name, inspect.Parameter.VAR_POSITIONAL))
            continue
        # an optional operand followed by a required one cannot have a Python default
        tail_optional = all(x.optional for x in sig[k:])
        default = None if tail_optional else inspect.Parameter.empty
        params.append(inspect.Parameter(o.name, inspect.Parameter.POSITIONAL_ONLY, default=default))
    for a in cls.ATTRS:
        default = inspect.Parameter.empty if a.default is REQUIRED else a.default
        if isinstance(default, tuple):
            default = list(default)
        params.append(inspect.Parameter(a.name, inspect.Parameter.KEYWORD_ONLY, default=default))
    method.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    method.__name__ = op_name
    method.__qualname__ = f"GraphBuilder.{op_name}"
    method.__doc__ = _docstring(cls)
    return method


def _docstring(cls: type[Op]) -> str:
    lines = [(cls.__doc__ or cls.op_name).strip().split("\n")[0], "", f"IR: ``{cls.signature()}``"]
    if cls.OPERANDS:
        lines += ["", "Operands (positional; ``None`` omits an optional one):"]
        for o in cls.OPERANDS:
            flags = "variadic" if o.variadic else ("optional" if o.optional else "required")
            lines.append(f"    {o.name} ({flags}){': ' + o.doc if o.doc else ''}")
    if cls.ATTRS:
        lines += ["", "Attributes (keywords):"]
        for a in cls.ATTRS:
            default = "required" if a.required else ("absent" if a.default is None
                                                     else f"default {format_attr_value(a.default)}")
            lines.append(f"    {a.name}: {a.describe()}, {default}{'; ' + a.doc if a.doc else ''}")
    n = len(cls.RESULTS)
    lines += ["", "Returns a Value" if n == 1 else
              (f"Returns a tuple of {n} Values ({', '.join(cls.RESULTS)})" if n else
               "Returns a tuple of Values (one per result)")]
    return "\n".join(lines) + "\n"


def _add_method(cls: type[Op]) -> None:
    setattr(GraphBuilder, cls.op_name, _make_method(cls))


# a method for every op registered so far, and for each op registered later (the families this package
# imports after this module, a user's op file) as it is registered
for _cls in list(OPS.values()):
    _add_method(_cls)
del _cls
ON_REGISTER.append(_add_method)
