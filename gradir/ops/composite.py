"""Composite ops: an op defined by a decomposition into other ops (a small builder function).

    class SwishOp(CompositeOp):
        \"\"\"X * sigmoid(alpha * X).\"\"\"
        OPERANDS = (Operand("X"),)
        ATTRS = (Attr("alpha", "float", 1.0),)

        @staticmethod
        def decompose(b, X, *, alpha):
            return b.Mul(X, b.Sigmoid(X * alpha))

``decompose(b, *operands, **attrs)`` gets a ``GraphBuilder`` ``b`` and one builder ``Value`` per operand
(``None`` for an omitted optional one) and the op's attributes (defaults filled in) as keywords, and returns
the result value (a tuple of them for an op of several results).  Everything else comes from it:

* the type rule: the decomposition is built on the operand types (once per types and attributes: cached);
  what it cannot build on (an integer operand to ``Sigmoid``) is the composite op's type error;
* kernel and fusion: ``expand_composites`` replaces each composite op by its decomposition before the compiler
  passes (``compile``, ``gradir plan``, ``dot --plan``, sharding), so the fusion pass sees the primitives;
* the gradient: the op's rule differentiates the decomposition (the backward graph holds primitives only;
  the forward part of ``gradir grad``'s graph keeps the composite op as written);
* ONNX: ``export_onnx`` writes the decomposition (standard ONNX ops that any runtime runs), so importing the
  export gives the primitives back.

``check``, ``fmt`` and ``dot`` show the op as written.  docs/extending.md is the user's page.
"""

from __future__ import annotations

import inspect
import traceback
from typing import Any, Callable, ClassVar, Mapping, Optional, Sequence

from ..errors import Diagnostic, GradirError, OpDefinitionError, OpError
from ..ir.op import OPS, VALUE_NAME, InferContext, Op, defined_in, freeze
from ..ir.types import TensorType

__all__ = ["CompositeOp", "expand_composites", "has_composites"]


class CompositeOp(Op):
    """Base of ops defined by ``decompose(b, *operands, **attrs)`` (see the module docstring)."""

    abstract = True
    decompose: ClassVar[Callable[..., Any]]
    # (operand types, attributes) -> the validated decomposition graph, per class
    _decompositions: ClassVar[dict]

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        if cls.__dict__.get("abstract", False):
            return
        try:
            _check_decompose(cls)
        except OpDefinitionError:
            OPS.pop(cls.op_name, None)  # not half-registered
            raise
        cls._decompositions = {}  # its gradient: ``gradrules.gradient_rule`` differentiates the decomposition

    def infer(self, ctx: InferContext) -> list[TensorType]:
        g = self.decomposition(ctx.types[:max(len(self.operands), len(ctx.types))], self.attrs)
        return [g.types[o] for o in g.outputs]

    @classmethod
    def example(cls, rng: Any, dtype: Any) -> tuple[list[Any], dict[str, Any]]:
        """The conformance suite's instance: one standard-normal array of shape (4, 5) in ``dtype`` per
        required operand (``None`` for an optional one), the attributes' defaults.  An op whose
        decomposition needs other shapes or values defines its own."""
        arrays = [None if o.optional else rng.standard_normal((4, 5)).astype(dtype) for o in cls.OPERANDS]
        return arrays, {}

    @classmethod
    def reference(cls, *arrays: Any, **attrs: Any) -> Any:
        """The results in float64: the decomposition evaluated op by op with each op's own float64
        ``reference`` (never gradir's kernels, which the conformance suite holds to it).  It checks how
        gradir compiles, fuses, shards and exports the op, not the decomposition itself: an op with an
        independent formula defines its own."""
        import numpy as np
        from ..ir.types import DType
        from .constant import ConstantOp, constant_array
        given = [np.asarray(a) for a in arrays if a is not None]
        given = [a.astype(np.float64) if a.dtype.kind == "f" else a for a in given]  # integers stay
        it = iter(given)
        types = [None if a is None else (lambda v: TensorType(DType.from_numpy(v.dtype), v.shape))(next(it))
                 for a in arrays]
        full = {a.name: a.coerce(attrs[a.name]) if a.name in attrs else a.default for a in cls.ATTRS}
        g = expand_composites(cls.decomposition(types, full))
        env: dict[str, Any] = dict(zip(g.input_names, given))
        for op in g.ops:
            if isinstance(op, ConstantOp):
                out: Any = constant_array(op)
            else:
                out = type(op).reference(*[None if v is None else env[v] for v in op.operands], **op.attrs)
            outs = list(out) if len(op.results) > 1 else [out]
            env.update(zip(op.results, (np.asarray(v) for v in outs)))
        results = [env[o].astype(np.float64) if env[o].dtype.kind == "f" else env[o] for o in g.outputs]
        return results[0] if len(results) == 1 else tuple(results)

    @classmethod
    def decomposition(cls, types: Sequence[Optional[TensorType]], attrs: Mapping[str, Any]) -> Any:
        """The decomposition built on operand ``types`` (``None``: an omitted operand) and ``attrs`` (coerced,
        complete): a validated ``Graph`` whose inputs are the given operands in order and whose outputs are
        the op's results.  Raises ``OpError`` (the op's type error) when it cannot be built."""
        while types and types[-1] is None:
            types = types[:-1]
        key = (tuple(types), freeze(dict(attrs)))
        cached = cls._decompositions.get(key)
        if cached is None:
            if cls in _BUILDING:  # its decomposition uses the op itself: it would never end
                raise OpError(f"the decomposition of {cls.op_name} uses {cls.op_name} itself; a composite op must "
                              f"decompose into other ops")
            _BUILDING.add(cls)
            try:
                cached = cls._decompositions[key] = _build(cls, types, attrs)
            finally:
                _BUILDING.discard(cls)
        return cached


_BUILDING: set = set()  # the composite ops whose decomposition is being built (a decomposition using its own op)


def _check_decompose(cls: type[CompositeOp]) -> None:
    """``decompose`` exists and takes the builder, one value per operand and the attributes as keywords."""
    where = defined_in(cls)
    filename = None if where.endswith("(built in)") else where
    fn = getattr(cls, "decompose", None)
    params = ["b"] + [o.name for o in cls.OPERANDS] + (["*"] + [a.name for a in cls.ATTRS] if cls.ATTRS else [])
    want = f"decompose({', '.join(params)})"
    if not callable(fn):
        raise OpDefinitionError(Diagnostic(f"composite op {cls.op_name} (class {cls.__name__}) has no decompose "
                                           f"function; define @staticmethod {want} returning its result",
                                           filename=filename))
    try:
        sig = inspect.signature(fn)
        sig.bind(None, *[None] * len(cls.OPERANDS), **{a.name: None for a in cls.ATTRS})
    except (TypeError, ValueError) as e:
        raise OpDefinitionError(Diagnostic(f"composite op {cls.op_name}: decompose cannot be called as {want}: "
                                           f"{e}", filename=filename)) from None


def _user_line(fn: Any, tb: Any) -> str:
    """``file:line`` of the deepest traceback entry in the file that defines ``fn`` ('' if none)."""
    code = getattr(inspect.unwrap(fn), "__code__", None)
    if code is None or tb is None:
        return ""
    lines = [f for f in traceback.extract_tb(tb) if f.filename == code.co_filename]
    return f" ({lines[-1].filename}:{lines[-1].lineno})" if lines else ""


def _build(cls: type[CompositeOp], types: Sequence[Optional[TensorType]], attrs: Mapping[str, Any]) -> Any:
    from .builder import GraphBuilder, Value
    b = GraphBuilder(cls.op_name)
    values = [None if t is None else b.input(t) for t in types]
    if not (cls.OPERANDS and cls.OPERANDS[-1].variadic):  # omitted trailing optional operands are None too
        values += [None] * (len(cls.OPERANDS) - len(values))
    name = cls.op_name
    try:
        out = cls.decompose(b, *values, **dict(attrs))
    except GradirError as e:
        raise OpError(f"{name}: its decomposition does not build on these operands "
                      f"({', '.join(str(t) for t in types if t is not None)}): {'; '.join(e.messages)}") from None
    except Exception as e:  # a bug in the user's decompose: say where, never a traceback
        raise OpError(f"{name}: its decompose function failed{_user_line(cls.decompose, e.__traceback__)}: "
                      f"{type(e).__name__}: {e}") from None
    results = list(out) if isinstance(out, (tuple, list)) else [out]
    n = cls.num_results(attrs)
    if len(results) != n or not all(isinstance(v, Value) and v.builder is b for v in results):
        got = ", ".join(type(v).__name__ for v in results)
        raise OpError(f"{name}: decompose must return {'the result value' if n == 1 else f'{n} result values'} "
                      f"made with its builder b, got {got or 'nothing'}")
    inputs = {v.name for v in values if v is not None}
    seen: set[str] = set()
    final = []
    for v in results:
        if v.name in inputs or v.name in seen:  # a result that is an operand, or repeated: a value of its own
            v = b.Identity(v)
        seen.add(v.name)
        final.append(v)
    b.output(*final)
    try:
        return b.build()
    except GradirError as e:  # pragma: no cover - every op was checked as it was added
        raise OpError(f"{name}: its decomposition is not a valid graph: {'; '.join(e.messages)}") from None


def has_composites(graph: Any) -> bool:
    return any(isinstance(op, CompositeOp) for op in graph.ops)


def expand_composites(graph: Any) -> Any:
    """``graph`` (validated) with each composite op replaced by its decomposition, recursively: the same
    inputs, outputs and result names, new values numbered after the graph's largest name.  The graph
    itself when it has no composite op."""
    if not has_composites(graph):
        return graph
    from ..ir.graph import Graph, GraphInput
    types = dict(graph.types)
    top = max([int(n[1:]) for n in types if VALUE_NAME.match(n)] + [-1]) + 1
    counter = iter(range(top, 1 << 62))

    def fresh() -> str:
        return f"t{next(counter)}"

    ops: list[Op] = []
    for op in graph.ops:
        if isinstance(op, CompositeOp):
            ops.extend(_expand(op, types, fresh))
        else:
            ops.append(op.copy())
    g = Graph([GraphInput(i.name, i.type, label=i.label) for i in graph.inputs], ops, list(graph.outputs),
              name=graph.name, source=graph.source, output_labels=list(graph.output_labels))
    return g.validate()


def _expand(op: CompositeOp, types: dict[str, TensorType], fresh: Callable[[], str]) -> list[Op]:
    g = type(op).decomposition([None if v is None else types[v] for v in op.operands], op.attrs)
    given = [v for v in op.operands if v is not None]
    rename = {i.name: v for i, v in zip(g.inputs, given)}
    rename.update(zip(g.outputs, op.results))
    out: list[Op] = []
    for sub in g.ops:
        for r in sub.results:
            if r not in rename:
                rename[r] = fresh()
            types[rename[r]] = g.types[r]
        new = sub.copy(results=[rename[r] for r in sub.results],
                       operands=[None if v is None else rename[v] for v in sub.operands],
                       result_types=[g.types[r] for r in sub.results], loc=None)
        out.extend(_expand(new, types, fresh) if isinstance(new, CompositeOp) else [new])
    return out
