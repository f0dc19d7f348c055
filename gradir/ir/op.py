"""Ops: ``Op``/``BackwardOp`` (signatures and traits as class data, one generic checker) and the
op registry ``OPS``.

Values are named ``tN``.  An op declares its operands, results and attributes
as class-level data; one generic checker (``Op.check``) validates operand count,
``_`` placement, attribute names/kinds/ranges and then runs the op's own type
rule (``infer``), which raises ``OpError`` naming the operand or attribute at
fault.  Subclasses are registered by class name without the ``Op`` suffix.

The pieces live beside it: ``attrs.py`` (``Operand``, ``Attr``), ``infer.py`` (``InferContext``),
``oploc.py`` (``OpLoc``), ``graph.py`` (``Graph``, ``GraphInput``).  The names they define that an op
author needs are importable from here too.
"""

from __future__ import annotations

import difflib
import re
from typing import Any, Callable, ClassVar, Mapping, Optional, Sequence

from .attrs import INT_ATTR_LIMIT, REQUIRED, Attr, Operand, attr_equal, checked_items, freeze, is_str
from ..errors import ArgumentError, Diagnostic, OpDefinitionError, OpError, OpErrors, VerifyError
from .infer import InferContext, unify_dim, unify_shapes
from .onnxmap import OnnxMap
from .oploc import OpLoc
from .types import TensorType, format_attr_value

__all__ = ["Operand", "Attr", "REQUIRED", "INT_ATTR_LIMIT", "Op", "BackwardOp", "OpLoc", "OpError",
           "InferContext", "OPS", "lookup_op", "format_attr_value", "VALUE_NAME", "attr_equal", "freeze",
           "unify_dim", "unify_shapes", "defined_in"]

VALUE_NAME = re.compile(r"t[0-9]+\Z")
# the shape of the operands of ``Op.example``'s default (element-wise ops): 4 rows split into 1, 2 or 4 shards
EXAMPLE_SHAPE = (4, 5)

OPS: dict[str, type["Op"]] = {}

# Called with each op class as it is registered, after it is in ``OPS`` (``gradir/ops/vjp.py`` adds the
# one that generates the backward ops of a ``VJP``): the layers above derive ops from an op's class
# data without this module importing them.  A hook that raises unregisters the class (and must undo
# what it registered itself), so the definition can be fixed and run again.
ON_REGISTER: list[Callable[[type["Op"]], None]] = []
# Tables the layers above keep beside ``OPS`` (the gradient rules by op name, ...), registered by their
# modules: a failed load of a user's op file restores each to what it held (``ops/userops.py``), without
# the op layer importing the layers that keep them.
REGISTRIES: list[dict] = []


def lookup_op(name: str) -> Optional[type["Op"]]:
    return OPS.get(name)


def defined_in(cls: type) -> str:
    """Where an op class is defined, for messages: its file, or its module when it has none; a built-in
    op says so (``gradir.ops.activation (built in)``)."""
    module = cls.__module__
    if module == "gradir" or module.startswith("gradir."):
        return f"{module} (built in)"
    import sys
    return getattr(sys.modules.get(module), "__file__", None) or module


def _definition_error(cls: type, message: str) -> OpDefinitionError:
    """An ``OpDefinitionError`` about ``cls`` whose diagnostic names the file that defines it."""
    where = defined_in(cls)
    return OpDefinitionError(Diagnostic(message, filename=None if where.endswith("(built in)") else where))


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
    # and the functions of ``gradir.ir.traits.FORMULA_FUNCTIONS``), from which a fusion pass can generate a
    # loop; a test checks it against the kernel.
    FORMULA: ClassVar[Optional[str]] = None
    BROADCASTS: ClassVar[bool] = False  # operand shapes broadcast (so a gradient may need ReduceSumTo)
    # The operands the result is linear in, the others held fixed: each on its own (Mul, MatMul: bilinear),
    # or with LINEAR_JOINTLY all of them together (Add, Sub: f(2a, 2b) = 2 f(a, b), but not in a alone).
    LINEAR_IN: ClassVar[tuple[int, ...]] = ()
    LINEAR_JOINTLY: ClassVar[bool] = False
    # Sums (or averages) over axes.  With an ``axes``/``keepdims`` signature its sharding placement is
    # derived (the ``reduce`` rule): over a split axis the shards' results add up when the op is linear
    # in its operand (``LINEAR_IN``), and ``AVERAGES`` makes the shard graph divide by the global count.
    REDUCTION: ClassVar[bool] = False
    AVERAGES: ClassVar[bool] = False  # a reduction that divides its sum by the count of reduced elements
    # Moves, views or repeats the elements of operand 0; computes nothing (so it is linear in it: the
    # sharding rules pass a partial sum through).
    SHAPE_ONLY: ClassVar[bool] = False
    # The result is the operand's elements in the same order, reshaped: with static shapes the schedule
    # runs it as a view of the operand's buffer (no copy).
    VIEW: ClassVar[bool] = False
    # A matrix product of operands 0 and 1 (NumPy matmul of the operands as laid out by ``transA``/
    # ``transB`` when the op has them): the cost model counts its FLOPs and BLAS blocks.
    PRODUCT: ClassVar[bool] = False
    # The op normalizes over every axis from its ``axis`` attribute on, flattened into one (the
    # pre-opset-13 softmax gradients), not over ``axis`` alone: a split among them refuses.
    FLATTENED: ClassVar[bool] = False
    # The ONNX Runtime gradient op this forward op's rule emits.  Without a hand rule (``gradrules.RULES``)
    # autodiff derives one from it: ``GRADIENT(dY, <GRADIENT_OPERANDS>..., <the op's attributes GRADIENT
    # declares>)``, where ``GRADIENT_OPERANDS`` names the forward operands or results read after dY
    # (``None``: those whose names the gradient op's operands have).
    GRADIENT: ClassVar[Optional[str]] = None
    GRADIENT_OPERANDS: ClassVar[Optional[tuple[str, ...]]] = None
    # The gradient of an element-wise op as data (autodiff derives it when the op has no rule): operand
    # name -> the formula of its cotangent, over the operand and attribute names, ``dY`` (the upstream
    # gradient) and ``Y`` (the forward result).  Each entry becomes a generated backward op ``<Op>Grad``
    # (``<Op>Grad_<Operand>`` when there are several), registered beside the op (``vjp.py``).
    VJP: ClassVar[Optional[dict[str, str]]] = None
    VJP_OPS: ClassVar[Mapping[str, type["Op"]]] = {}  # operand name -> its generated backward op (set by vjp.py)
    # Results (indices) that no gradient can flow back from: a path from one to an output is an error
    # naming it.  Operands (indices) the op is not differentiable in: a gradient asked through one is an error.
    NO_GRADIENT_RESULTS: ClassVar[tuple[int, ...]] = ()
    NO_GRADIENT_OPERANDS: ClassVar[tuple[int, ...]] = ()
    # (fused op, the attribute that tells siblings apart, the fused op's list attribute): siblings over
    # the same operands and other attributes fuse into one op (the fusion pass)
    FUSES_INTO: ClassVar[Optional[tuple[str, str, str]]] = None
    # The placement rule (``gradir.distributed.rules.RULES``) that says how the op's results are placed
    # (replicated, split along an axis, partial sums) given its operands' placements, or refuses.  Only
    # where it is not derived (``gradir.distributed.rules.placement_rule``: element-wise ops and reductions).
    SHARDING: ClassVar[Optional[str]] = None
    # Split along axis ``shard_axis``, the op must know its slice's global rows (Dropout's mask, MaxPool's Indices
    # are positions in the whole tensor): the shard graph sets its optional operand ``shard_rows`` and its
    # attribute ``shard_axis`` (``gradir.distributed.shardgraph``) where ``needs_shard_rows()``.
    SHARD_ROWS: ClassVar[bool] = False
    # The op's ONNX counterpart as data (``gradir.ir.onnxmap.OnnxMap``: name, domain, attribute renames, operand
    # order), from which export and import derive their handlers.  Read from the class itself, never
    # inherited (``onnxmap.onnx_map``): a subclass is another op, with another name.  ``None``: no
    # counterpart that is data; then the op has a hand-written exporter (``gradir.interop.onnx``), or says in
    # ``NO_ONNX`` why ONNX has no such op (it exports only in the ``ai.gradir`` domain, ``--custom-domain``).
    ONNX: ClassVar[Optional[OnnxMap]] = None
    NO_ONNX: ClassVar[Optional[str]] = None

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        if cls.__dict__.get("abstract", False):
            return
        cls.abstract = False
        name = cls.__name__
        if not name.endswith("Op") or name == "Op":
            raise _definition_error(cls, f"op class {name} must be named after its op, ending in 'Op' (class "
                                         "SoftsignOp defines the op Softsign)")
        cls.op_name = name[:-2]
        if cls.op_name in OPS:
            raise _definition_error(cls, f"op {cls.op_name} (class {name}) is already defined by "
                                         f"{defined_in(OPS[cls.op_name])}; give the class another name")
        variadic = [k for k, o in enumerate(cls.OPERANDS) if o.variadic]
        if variadic and variadic != [len(cls.OPERANDS) - 1]:
            raise _definition_error(cls, f"op {cls.op_name}: only the last operand may be variadic")
        names = [o.name for o in cls.OPERANDS] + [a.name for a in cls.ATTRS]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise _definition_error(cls, f"op {cls.op_name}: {', '.join(map(repr, twice))} names two of its operands "
                                         f"and attributes; each needs a name of its own")
        OPS[cls.op_name] = cls
        try:
            for hook in ON_REGISTER:
                hook(cls)
        except BaseException:
            del OPS[cls.op_name]
            raise

    def __init__(self, results: Sequence[str], operands: Sequence[Optional[str]],
                 attrs: Optional[Mapping[str, Any]] = None,
                 result_types: Optional[Sequence[Optional[TensorType]]] = None,
                 loc: Optional[OpLoc] = None) -> None:
        if self.abstract:
            raise TypeError(f"{type(self).__name__} is abstract")
        self.results: list[str] = checked_items(results, f"{self.op_name}: results", is_str, "value names")
        self.operands: list[Optional[str]] = checked_items(operands, f"{self.op_name}: operands",
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

    def needs_shard_rows(self) -> bool:
        """Whether this op, split, needs its shard's rows (``SHARD_ROWS``; a Dropout only when it draws)."""
        return self.SHARD_ROWS

    # -- signature helpers -------------------------------------------------
    @classmethod
    def attr_spec(cls, name: str) -> Optional[Attr]:
        for a in cls.ATTRS:
            if a.name == name:
                return a
        return None

    @classmethod
    def operand_spec(cls, i: int) -> Operand:
        """The signature entry of operand ``i`` (a variadic last operand covers every later one)."""
        if not cls.OPERANDS:
            raise IndexError(f"{cls.op_name} takes no operands")
        return cls.OPERANDS[min(i, len(cls.OPERANDS) - 1)]

    @classmethod
    def num_results(cls, attrs: Mapping[str, Any]) -> int:
        return len(cls.RESULTS)

    @classmethod
    def result_names(cls, attrs: Mapping[str, Any]) -> tuple[str, ...]:
        return cls.RESULTS

    @classmethod
    def flops(cls, operands: Sequence[Optional[TensorType]], results: Sequence[Optional[TensorType]],
              attrs: Mapping[str, Any]) -> float:
        """Multiply-add FLOPs of the matrix products inside the op, for the cost model (``PRODUCT`` ops are
        counted there; an op with products of its own, the LSTM layers, says here); 0 by default."""
        return 0.0

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
        operand_types = checked_items(operand_types, f"{self.op_name}.validate(): operand_types",
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

    # -- conformance data: an example and a float64 reference (tests/conformance reads them) ----------
    @classmethod
    def example(cls, rng: Any, dtype: Any) -> tuple[list[Any], dict[str, Any]]:
        """A small valid instance of the op: its operand arrays (``None`` for an omitted optional one)
        and its attributes, drawn from the NumPy generator ``rng``, floating-point operands in ``dtype``.

        The conformance suite runs every concern (kernel, gradient, fusion, sharding, ONNX) on it, so
        each op has one.  The default serves an element-wise op with a ``FORMULA``: one standard-normal
        array of shape ``EXAMPLE_SHAPE`` per operand (two for a variadic one), no attributes (so an op
        with a required attribute, or a formula defined only on part of the reals, writes its own).
        Dimensions are at least 4 along the axis a sharded run splits (1, 2 and 4 shards)."""
        if cls.FORMULA is None:
            raise NotImplementedError(f"{cls.op_name} has no FORMULA, so no default example: define "
                                      f"{cls.__name__}.example(rng, dtype)")
        n = len(cls.OPERANDS) + (1 if cls.OPERANDS and cls.OPERANDS[-1].variadic else 0)
        return [rng.standard_normal(EXAMPLE_SHAPE).astype(dtype) for _ in range(n)], {}

    @classmethod
    def reference(cls, *arrays: Any, **attrs: Any) -> Any:
        """The op's results computed in float64 from ``arrays`` (its operands, ``None`` for an omitted
        one) and ``attrs`` (every attribute, defaults filled in): one array, or a tuple for an op with
        several results.  Written independently of the kernels, which the conformance suite holds to it.

        The default evaluates an element-wise op's ``FORMULA`` in float64 (broadcast to the operands'
        shape); an op without one defines its own (``gradir.ops.references`` has the long ones)."""
        import numpy as np
        from .traits import evaluate_formula
        if cls.FORMULA is None:
            raise NotImplementedError(f"{cls.op_name} has no FORMULA, so no default reference: define "
                                      f"{cls.__name__}.reference(*arrays, **attrs)")
        named = {o.name: np.asarray(a, np.float64) for o, a in zip(cls.OPERANDS, arrays)}
        shape = np.broadcast_shapes(*(np.shape(a) for a in arrays))
        return np.array(np.broadcast_to(evaluate_formula(cls, named, attrs), shape), np.float64)


class BackwardOp(Op):
    """A gradient op: consumes upstream gradients and saved forward values."""

    abstract = True
    is_backward = True

