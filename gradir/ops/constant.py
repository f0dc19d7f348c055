"""``Constant``: a tensor whose value is written in the text (see ``gradir.ir.constants``).

    t3 = Constant(value=0.5) : Float32 [2, 3]        # a number fills the declared shape
    t4 = Constant(value=[1, 2, 3]) : Int64 [3]      # a flat, row-major list, one element each

It has no operands, so nothing determines its type but the line itself: the type is required
(``DECLARED_TYPE``), and the value is checked against it (element count, range, dtype).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..ir.constants import MAX_CONSTANT_ELEMENTS, ConstantValueError, canonical_value, value_array
from ..ir.op import Attr, InferContext, Op, OpError
from ..ir.types import TensorType

__all__ = ["ConstantOp"]


class ConstantOp(Op):
    """A tensor written in the text: a number filling the declared (required) type, or a flat row-major list."""

    OPERANDS = ()
    ATTRS = (Attr("value", "tensor", doc=f"a number (or true/false) filling the type, or a flat row-major list "
                                         f"of exactly as many elements (at most {MAX_CONSTANT_ELEMENTS:,})"),)
    DECLARED_TYPE = True

    def infer(self, ctx: InferContext) -> list[TensorType]:
        t = ctx.declared(0)
        if not t.is_static:  # nothing binds a `?` at run time: a Constant has no inputs
            raise OpError(f"{ctx.name}: the type of a Constant must have a known shape, got {t}", result=0)
        try:
            value = canonical_value(ctx.attrs["value"], t)
        except ConstantValueError as e:
            ctx.fail(str(e), attr="value", element=-1 if e.element is None else e.element)
        # the canonical form (e.g. Float32 elements shortened) is what prints and compares, like a
        # coerced attribute: stored back as check_signature stores the others
        self.attrs["value"] = value
        return [t]

    def kernel_attrs(self) -> dict[str, Any]:
        """The kernel copies a cached read-only array (made once per op, not per run)."""
        value, t = self.attrs["value"], self.result_types[0] if self.result_types else None
        cached = self.__dict__.get("_array")
        if cached is None or cached[0] is not value or cached[1] != t:
            cached = (value, t, value_array(value, t))
            self._array = cached
        return {"array": cached[2]}

    @classmethod
    def example(cls, rng: Any, dtype: Any) -> tuple[list[Any], dict[str, Any]]:
        """Six numbers, a flat list (the declared type: ``reference``'s shape in ``dtype``)."""
        return [], {"value": [0.5, -1.0, 2.0, 3.0, 0.25, -4.0]}

    @classmethod
    def reference(cls, *, value: Any) -> Any:
        """The value as written: a flat list is one axis, a number a scalar."""
        return np.array(value, np.float64)


def constant_array(op: Op) -> np.ndarray:
    """The (read-only) array of a validated Constant op."""
    return op.kernel_attrs()["array"]
