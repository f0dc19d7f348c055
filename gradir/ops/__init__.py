"""Op definitions by family; importing this package registers every op in ``gradir.ir.OPS``."""

from . import activation, constant, loss, lstm, math, shape  # noqa: F401
from ..ir import OPS

__all__ = ["OPS"]
