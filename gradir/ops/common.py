"""Building blocks shared by the op families: base classes with a type rule.

``ElementwiseOp`` is the base of element-wise ops defined by their ``FORMULA`` (built-in or a
user's): the class is all there is to write.  Its defaults: ``ELEMENTWISE`` "same" for one operand,
else "broadcast" (``BROADCASTS``); the operands share one dtype of ``DTYPES`` (the float dtypes
unless the op says otherwise) and the result has their broadcast shape.  The ``FORMULA`` (and a
``VJP``, when the op has one) is checked when the class is created: a bad one is an
``OpDefinitionError`` naming the op and the file that defines it, and the op is not registered.
"""

from __future__ import annotations

import inspect
import math
import sys
from typing import Any, Optional, Sequence

from ..ir import formula
from ..errors import OpDefinitionError
from ..ir.op import Attr, BackwardOp, InferContext, Op, Operand
from ..ir.types import ALL_DTYPES, FLOAT_DTYPES, NUMERIC_DTYPES, Dim, TensorType, format_shape

__all__ = ["ElementwiseOp", "UnaryOp", "BinaryActivationGradOp", "ALPHA_LEAKY", "ALPHA_QUICKGELU", "axis_attr",
           "broadcast_shapes", "Operand", "Attr"]


ALPHA_MAX = 1e38  # Float32 kernels use alpha·log2(e) and alpha·x: both must stay finite


def finite(value: float) -> str | None:
    """Kernels compute in the operands' dtype: the attribute must be usable in Float32 too."""
    if math.isfinite(value) and abs(value) <= ALPHA_MAX:
        return None
    return f"must be a finite number with |alpha| <= {ALPHA_MAX:g}, got {value}"


ALPHA_LEAKY = Attr("alpha", "float", 0.01, check=finite, doc="slope for x <= 0 (finite, |alpha| <= 1e38)")
ALPHA_QUICKGELU = Attr("alpha", "float", 1.702, check=finite, doc="sigmoid scale (finite, |alpha| <= 1e38)")


def axis_attr(default: int) -> Attr:
    return Attr("axis", "int", default, doc="axis (negative counts from the end)")


def broadcast_shapes(a: Sequence[Dim], b: Sequence[Dim]) -> Optional[tuple]:
    """NumPy broadcasting with ``?`` dims; ``None`` if the shapes cannot broadcast."""
    n = max(len(a), len(b))
    a = (1,) * (n - len(a)) + tuple(a)
    b = (1,) * (n - len(b)) + tuple(b)
    out: list[Dim] = []
    for x, y in zip(a, b):
        if x == y:
            out.append(x)
        elif x == 1:
            out.append(y)
        elif y == 1:
            out.append(x)
        elif x is None:
            out.append(y)
        elif y is None:
            out.append(x)
        else:
            return None
    return tuple(out)


def _defined_at(cls: type) -> tuple[Optional[str], Optional[int]]:
    """The file and line that define ``cls`` (for messages; None when unknown)."""
    mod = sys.modules.get(cls.__module__)
    filename = getattr(mod, "__file__", None)
    line = None
    try:
        filename = inspect.getsourcefile(cls) or filename
        line = inspect.getsourcelines(cls)[1]
    except (OSError, TypeError):
        pass
    return filename, line


class ElementwiseOp(Op):
    """An element-wise op defined by its ``FORMULA`` (see the module docstring)."""

    abstract = True
    DTYPES: tuple = FLOAT_DTYPES

    def __init_subclass__(cls, **kw: Any) -> None:
        if not cls.__dict__.get("abstract", False):
            cls._check_definition()
            if cls.FORMULA is not None and "ELEMENTWISE" not in _declared(cls):
                cls.ELEMENTWISE = "same" if len(cls.OPERANDS) == 1 else "broadcast"
                if "BROADCASTS" not in _declared(cls):
                    cls.BROADCASTS = cls.ELEMENTWISE == "broadcast"
        super().__init_subclass__(**kw)

    @classmethod
    def _check_definition(cls) -> None:
        """``FORMULA`` well-formed over the op's names (``OpDefinitionError`` if not,
        located at the class's file and line: looked up only then, it reads the source)."""
        try:
            cls._check_texts(None, None)
        except OpDefinitionError:
            cls._check_texts(*_defined_at(cls))
            raise

    @classmethod
    def _check_texts(cls, filename: Optional[str], line: Optional[int]) -> None:
        name = cls.__name__[:-2] if cls.__name__.endswith("Op") else cls.__name__
        operands = [o.name for o in cls.OPERANDS]
        attrs = [a.name for a in cls.ATTRS]
        if cls.FORMULA is None:
            raise formula.fail(f"op {name}", "an ElementwiseOp needs a FORMULA (its kernels, fusion and reference "
                               "come from it); an op computed otherwise derives from gradir.ops.Op", filename, line)
        formula.check(cls.FORMULA, operands + attrs, where=f"op {name}: FORMULA", filename=filename, line=line)
        # VJP is checked where its backward ops are made (``ops/vjp.py``, an ``ON_REGISTER`` hook)

    def infer(self, ctx: InferContext) -> list[TensorType]:
        return infer_broadcast(self, ctx, self.DTYPES)


def _declared(cls: type) -> set[str]:
    """The class attributes ``cls`` or a base below ``ElementwiseOp`` declares itself."""
    out: set[str] = set()
    for base in cls.__mro__:
        if base is ElementwiseOp:
            break
        out.update(base.__dict__)
    return out


class UnaryOp(ElementwiseOp):
    """Element-wise op on one tensor; result has the operand's type."""

    abstract = True
    OPERANDS = (Operand("X"),)
    DTYPES: tuple = FLOAT_DTYPES

    def infer(self, ctx: InferContext) -> list[TensorType]:
        ctx.dtype_in(0, self.DTYPES)
        return [ctx.type(0)]


class BinaryActivationGradOp(BackwardOp, ElementwiseOp):
    """ORT activation gradient: (dY, X-or-Y) of identical shape and float dtype -> dX."""

    abstract = True
    OPERANDS = (Operand("dY", doc="upstream gradient"), Operand("X", doc="forward input"))
    RESULTS = ("dX",)

    def infer(self, ctx: InferContext) -> list[TensorType]:
        ctx.dtype_in(0, FLOAT_DTYPES)
        return [ctx.unify(0, 1)]


# re-exported for families
__all__ += ["ALL_DTYPES", "NUMERIC_DTYPES", "FLOAT_DTYPES"]


def infer_broadcast(op: Op, ctx: InferContext, dtypes: tuple) -> list[TensorType]:
    """The type of an element-wise op over any number of operands: one dtype of ``dtypes``, NumPy broadcasting
    (an operand that does not broadcast is the located error)."""
    ctx.dtype_in(0, dtypes)
    shape = ctx.type(0).shape
    for i in range(1, len(op.operands)):
        ctx.same_dtype(0, i)
        merged = broadcast_shapes(shape, ctx.type(i).shape)
        if merged is None:
            ctx.fail(f"shapes {format_shape(shape)} and {format_shape(ctx.type(i).shape)} "
                     f"({op.operand_value(i)}) cannot be broadcast together", operand=i)
        shape = merged
    return [TensorType(ctx.type(0).dtype, shape)]


__all__ += ["infer_broadcast"]
