"""Op definitions by family; importing this package registers every op in ``gradir.ir.op.OPS``.

What an op author imports (docs/extending.md): ``Operand``, ``Attr`` and the base classes:
``ElementwiseOp`` (an element-wise op defined by a ``FORMULA``), ``CompositeOp`` (an op defined by a
decomposition into other ops), ``Op``/``BackwardOp`` (anything else)."""

from . import vjp  # noqa: F401  (first: its hook generates the backward ops of any op with a VJP)
from . import activation, constant, loss, lstm, math, norm, shape  # noqa: F401
from ..ir.op import OPS, Attr, BackwardOp, Op, Operand
from .common import ElementwiseOp
from .composite import CompositeOp

__all__ = ["OPS", "Op", "BackwardOp", "Operand", "Attr", "ElementwiseOp", "CompositeOp"]
