"""Op definitions by family; importing this package registers every op in ``gradir.ir.OPS``.

What an op author imports (docs/extending.md): ``Operand``, ``Attr`` and the base classes, e.g.
``from gradir.ops import CompositeOp, Operand``."""

from . import activation, constant, loss, lstm, math, shape  # noqa: F401
from ..ir import OPS, Attr, BackwardOp, Op, Operand
from .composite import CompositeOp

__all__ = ["OPS", "Op", "BackwardOp", "Operand", "Attr", "CompositeOp"]
