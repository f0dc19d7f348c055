"""Op definitions by family; importing this package registers every op in ``gradir.ir.OPS``."""

from . import vjp  # noqa: F401  (first: its hook generates the backward ops of any op with a VJP)
from . import activation, constant, loss, lstm, math, shape  # noqa: F401
from ..ir import OPS

__all__ = ["OPS"]
