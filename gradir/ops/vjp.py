"""Backward ops generated from an element-wise op's ``VJP`` (``Op.VJP``): its gradient as data.

``VJP`` maps an operand name to the formula of that operand's cotangent, over the op's operand and
attribute names, ``dY`` (the upstream gradient) and ``Y`` (the forward result)::

    class SoftsignOp(...):
        OPERANDS = (Operand("X"),)
        FORMULA = "X / (1 + abs(X))"
        VJP = {"X": "dY / (1 + abs(X)) ** 2"}

When the op is registered, each entry becomes a backward op class registered beside it:
``SoftsignGrad(dY, X)`` (``<Op>Grad_<Operand>`` when there are several entries), whose operands are
``dY``, the forward operands and ``Y`` when the formula reads it, whose attributes are the op's and
whose ``FORMULA`` is the entry.  So it prints, parses, fuses and gets a kernel like any element-wise
op, and autodiff (``gradrules.gradient_rule``) emits it for an op with no hand-written rule; the
driver undoes broadcasting as for every rule.  The VJP is checked here, at class creation: a mistake
is an ``OpDefinitionError`` naming the op and its file, not a failure at the first ``grad``.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Optional

from ..errors import Diagnostic, OpDefinitionError, Span
from ..ir.op import ON_REGISTER, OPS, BackwardOp, InferContext, Op, Operand
from ..ir import formula
from ..ir.traits import formula_names
from ..ir.types import FLOAT_DTYPES, TensorType, format_shape
from .common import ElementwiseOp
from .math import broadcast_shapes

__all__ = ["VjpGradOp", "define_vjp_ops", "UPSTREAM", "RESULT"]

UPSTREAM = "dY"  # the upstream gradient, in a VJP formula and as the generated op's first operand
RESULT = "Y"  # the forward result, in a VJP formula (an operand of the generated op only where read)


class VjpGradOp(ElementwiseOp, BackwardOp):
    """Base of the generated backward ops: element-wise over operands of one float dtype that broadcast
    together (dY has the forward result's shape, the broadcast of the forward operands')."""

    abstract = True
    is_backward = True
    RESULTS = ("dX",)
    LINEAR_IN = (0,)  # a cotangent is linear in the upstream gradient
    FORWARD: type[Op]  # the op whose VJP entry this is
    WRT: str  # the operand of FORWARD whose cotangent it computes

    def infer(self, ctx: InferContext) -> list[TensorType]:
        ctx.dtype_in(0, FLOAT_DTYPES)
        shape: Optional[tuple] = ctx.type(0).shape
        for i in range(1, len(self.operands)):
            ctx.same_dtype(0, i)
            merged = broadcast_shapes(shape, ctx.type(i).shape)  # type: ignore[arg-type]
            if merged is None:
                ctx.fail(f"operand {self.operand_value(i)} has shape {format_shape(ctx.type(i).shape)}, which does "
                         f"not broadcast with {format_shape(shape)}", operand=i)
            shape = merged
        return [ctx.type(0).with_shape(shape)]


def _defined_at(cls: type) -> tuple[Optional[str], Optional[Span]]:
    """Where ``cls`` is being defined (for messages): the file and line of its ``class`` statement, from the
    innermost frame running code of the defining module (a file loaded without a ``sys.modules`` entry
    has one too), else the module's file."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_globals.get("__name__") == cls.__module__:
            return frame.f_code.co_filename, Span(frame.f_lineno, 1, 2)
        frame = frame.f_back  # type: ignore[assignment]
    return getattr(sys.modules.get(cls.__module__), "__file__", None), None


def _fail(cls: type, message: str) -> None:
    filename, span = _defined_at(cls)
    raise OpDefinitionError(Diagnostic(f"op {cls.op_name}: {message}", span, filename=filename))


def grad_op_name(cls: type, operand: str) -> str:
    """``<Op>Grad`` for an op with one VJP entry, ``<Op>Grad_<Operand>`` with several."""
    return f"{cls.op_name}Grad" if len(cls.VJP) == 1 else f"{cls.op_name}Grad_{operand}"


def _check(cls: type) -> dict[str, tuple[str, set[str]]]:
    """``cls.VJP`` checked: operand name -> (formula, the names it reads).  Raises ``OpDefinitionError``."""
    vjp = cls.VJP
    if not isinstance(vjp, Mapping) or not vjp:
        _fail(cls, f"VJP must be a dict of operand name -> formula (a str), got {vjp!r}")
    if cls.ELEMENTWISE is None:
        _fail(cls, "VJP is for element-wise ops (ELEMENTWISE): its formulas are evaluated element by element")
    if len(cls.RESULTS) != 1:
        _fail(cls, f"VJP is for ops with one result, and {cls.op_name} has {len(cls.RESULTS)}")
    operands = [o.name for o in cls.OPERANDS]
    if any(o.variadic or o.optional for o in cls.OPERANDS):
        _fail(cls, "VJP is for ops whose operands are all required (no optional or variadic operand)")
    taken = [n for n in operands + [a.name for a in cls.ATTRS] if n in (UPSTREAM, RESULT)]
    if taken:
        _fail(cls, f"an operand or attribute named {taken[0]!r}: in a VJP formula {UPSTREAM} is the upstream "
                   f"gradient and {RESULT} the forward result; rename it")
    allowed = formula_names(cls) | {UPSTREAM, RESULT}
    out: dict[str, tuple[str, set[str]]] = {}
    for key, text in vjp.items():
        if key not in operands:
            _fail(cls, f"VJP has an entry for {key!r}, which is not an operand of {cls.op_name} (its operands: "
                       f"{', '.join(operands) or 'none'})")
        if not isinstance(text, str):
            _fail(cls, f"VJP[{key!r}] must be a formula (a str), got {text!r}")
        try:
            code = compile(text, f"<{cls.op_name}.VJP[{key!r}]>", "eval")
        except SyntaxError as e:
            _fail(cls, f"VJP[{key!r}] is not a formula: {e.msg} at column {e.offset}: {text!r}")
        unknown = sorted(set(code.co_names) - allowed)
        if unknown:
            _fail(cls, f"VJP[{key!r}] uses {', '.join(map(repr, unknown))}, which is not an operand, an attribute, "
                       f"{UPSTREAM}, {RESULT} or a formula function: {text!r}")
        filename, span = _defined_at(cls)
        names = operands + [a.name for a in cls.ATTRS] + [UPSTREAM, RESULT]
        formula.check(text, names, where=f"op {cls.op_name}: VJP[{key!r}]", filename=filename,
                      line=span.line if span is not None else None)  # what else the language refuses (arity, ...)
        out[key] = (text, set(code.co_names))
    return out


def define_vjp_ops(cls: type[Op]) -> None:
    """The ``ON_REGISTER`` hook: for an op class with a ``VJP``, check it and register one generated
    backward op per entry (``cls.VJP_OPS``: operand name -> that class)."""
    if cls.VJP is None:
        return
    checked = _check(cls)
    names = {k: grad_op_name(cls, k) for k in checked}
    for key, name in names.items():
        if name in OPS:
            _fail(cls, f"its VJP entry for {key!r} makes the backward op {name}, but an op {name} already exists")
    made: dict[str, type[Op]] = {}
    broadcast = cls.BROADCASTS or cls.ELEMENTWISE == "broadcast"
    try:
        for key, (text, reads) in checked.items():
            operands = ((Operand(UPSTREAM, doc="upstream gradient (of the forward result)"),)
                        + tuple(Operand(o.name, doc=f"{cls.op_name}'s operand") for o in cls.OPERANDS)
                        + ((Operand(RESULT, doc=f"{cls.op_name}'s result"),) if RESULT in reads else ()))
            body = {
                "__doc__": f"The gradient of {cls.op_name} with respect to {key}: d{key} = {text} "
                           f"(generated from {cls.op_name}.VJP).",
                "__module__": cls.__module__, "OPERANDS": operands, "RESULTS": (f"d{key}",), "ATTRS": cls.ATTRS,
                "FORMULA": text, "ELEMENTWISE": "broadcast" if broadcast else "same", "BROADCASTS": broadcast,
                "FORWARD": cls, "WRT": key,
            }
            if cls.__module__.startswith("gradir."):  # a built-in op's: ONNX Runtime has no such op
                body["NO_ONNX"] = (f"a backward op gradir generates from {cls.op_name}'s VJP: ONNX and ONNX Runtime "
                                   f"have no such op")
            made[key] = type(f"{names[key]}Op", (VjpGradOp,), body)
    except BaseException:
        for g in made.values():
            OPS.pop(g.op_name, None)
        raise
    cls.VJP_OPS = made


ON_REGISTER.append(define_vjp_ops)
