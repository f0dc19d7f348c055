"""Op definitions by family; importing this package registers every op in ``gradir.ir.op.OPS``.

What an op author imports (docs/extending.md): ``Operand``, ``Attr`` and the base classes:
``ElementwiseOp`` (an element-wise op defined by a ``FORMULA``), ``CompositeOp`` (an op defined by a
decomposition into other ops), ``Op``/``BackwardOp`` (anything else)."""

import importlib as _importlib
import pkgutil as _pkgutil

from . import vjp  # noqa: F401  (first: its hook generates the backward ops of any op with a VJP)

# Every module here is imported, so a new family file registers its ops with no list to extend.
for _module in sorted(m.name for m in _pkgutil.iter_modules(__path__)):
    if not _module.startswith("_"):
        _importlib.import_module(f"{__name__}.{_module}")
from . import activation, constant, loss, lstm, math, shape  # noqa: E402,F401  (the families, for readers)
from ..ir.op import OPS, Attr, BackwardOp, Op, Operand  # noqa: E402
from .common import ElementwiseOp  # noqa: E402
from .composite import CompositeOp  # noqa: E402

__all__ = ["OPS", "Op", "BackwardOp", "Operand", "Attr", "ElementwiseOp", "CompositeOp"]
