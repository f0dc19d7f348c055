"""Op definitions by family; importing this package registers every op in ``gradir.ir.OPS``.

An op author's names: ``ElementwiseOp`` (the base of element-wise ops defined by a ``FORMULA``),
``Operand`` and ``Attr`` (an op's signature)."""

from . import activation, constant, loss, lstm, math, shape  # noqa: F401
from ..ir import OPS, Attr, Operand
from .common import ElementwiseOp

__all__ = ["OPS", "ElementwiseOp", "Operand", "Attr"]
