"""``simplify``: ops that compute nothing disappear, and constant factors merge where that is exact.

* ``Identity``, a ``Reshape`` to the same shape, a ``Transpose`` to the same shape that moves only
  size-1 axes (or none), ``Scale`` by 1 and ``Neg(Neg(x))`` are dropped: their readers read the operand.
* ``Transpose(Transpose(x))`` and ``Reshape(Reshape(x))`` become one op (then dropped if a no-op).
* ``Mul`` by a constant that holds one number (floating point, the result shaped as the other
  operand) is that ``Scale``; ``Neg`` of a ``Scale`` and ``Scale`` of a ``Neg`` are one ``Scale``.
* ``Scale`` (or ``Neg``) of a ``MatMul`` or ``FusedMatMul`` that nothing else reads is the
  product's ``alpha`` (the kernel multiplies the product in place by the same number: the same
  bits).
* ``Scale(Scale(x, a), b)`` is ``Scale(x, a·b)`` only when one factor is a power of two and
  ``a·b`` is exact in the dtype: then the bits are the same, unless ``x·a`` overflows or is
  subnormal where ``x·a·b`` is not.  (The same holds for a ``Scale`` of a product whose ``alpha``
  is not 1.)
"""

from __future__ import annotations

import math
from typing import Optional

import numpy as np

from ...ir.op import Op
from ...ops.common import finite
from ...ops.constant import constant_array
from ...ir.types import TensorType
from .pipeline import Program, register_pass
from .rewrite import Sweep

__all__ = ["simplify", "transpose_perm", "exact_product"]


def transpose_perm(op: Op, rank: int) -> list[int]:
    perm = op.attrs.get("perm")
    return list(reversed(range(rank))) if perm is None else list(perm)


def _noop_transpose(t: TensorType, perm: list[int]) -> bool:
    """The same shape, and only size-1 axes move (a ``?`` axis counts as larger)."""
    moved = [p for p in perm if t.shape[p] != 1]
    return moved == sorted(moved) and all(t.shape[p] == t.shape[k] for k, p in enumerate(perm))


def _power_of_two(x: float) -> bool:
    return x != 0 and math.isfinite(x) and math.frexp(abs(x))[0] == 0.5


def _in(dtype: np.dtype, x: float) -> float:
    """``x`` rounded to ``dtype`` (a factor too large for it is inf, without a warning)."""
    with np.errstate(over="ignore"):
        return float(dtype.type(x))


def exact_product(a: float, b: float, dtype: np.dtype) -> Optional[float]:
    """``a·b`` when multiplying by it gives the bits of multiplying by ``a`` then ``b`` in ``dtype``
    (one of them a power of two, the product a normal number of the dtype), else None."""
    fa, fb = _in(dtype, a), _in(dtype, b)
    if not (_power_of_two(fa) or _power_of_two(fb)):
        return None
    prod = fa * fb
    info = np.finfo(dtype)
    if not math.isfinite(prod) or _in(dtype, prod) != prod or not float(info.tiny) <= abs(prod) <= float(info.max):
        return None
    return prod


def _one_number(op: Optional[Op]) -> Optional[float]:
    """The number a Constant holds in every element (floating point), else None."""
    if op is None:
        return None
    a = constant_array(op)
    if a.dtype.kind != "f" or a.size == 0:
        return None
    flat = a.reshape(-1)
    if not (flat.view(np.uint8).reshape(flat.size, -1) == flat[:1].view(np.uint8)).all():
        return None
    return float(flat[0])


@register_pass("simplify", "drop Identity, no-op Reshape/Transpose, Scale by 1 and Neg of Neg; merge Transpose "
                           "and Reshape chains; fold constant factors into one Scale or a product's alpha "
                           "where exact")
def simplify(p: Program) -> str:
    sw = Sweep(p)
    changed = 0
    for op in sw:
        name = op.op_name
        x = op.operands[0] if op.operands else None
        r = op.results[0] if op.results else None
        if name == "Identity":
            changed += sw.drop(op, x)
        elif name in ("Reshape", "Transpose"):
            changed += _layout(sw, op)
        elif name == "Neg":
            inner = sw.made_by(x, "Neg", "Scale")
            if inner is not None and inner.op_name == "Neg":
                changed += sw.drop(op, inner.operands[0])
            elif inner is not None:
                changed += _scale(sw, op, inner.operands[0], -inner.attrs["factor"])
            elif sw.made_by(x, "MatMul", "FusedMatMul") and sw.only_use(x) and sw.type(x).dtype.is_float:
                changed += _scale(sw, op, x, -1.0)  # the product's alpha, negated
        elif name == "Mul" and sw.type(r).dtype.is_float:
            for i in (0, 1):
                f = _one_number(sw.made_by(op.operands[1 - i], "Constant"))
                if f is not None and sw.type(op.operands[i]) == sw.type(r):
                    changed += _scale(sw, op, op.operands[i], f)
                    break
        elif name == "Scale":
            changed += _scale(sw, op, x, op.attrs["factor"])
    return sw.finish("simplified", changed)


def _layout(sw: Sweep, op: Op) -> int:
    """A Reshape or Transpose: merged with one it reads, dropped when it moves nothing."""
    x, r = op.operands[0], op.results[0]
    inner = sw.made_by(x, op.op_name)
    if op.op_name == "Reshape":
        attrs = dict(op.attrs)
        if inner is not None:
            x = inner.operands[0]
        tx, tr = sw.type(x), sw.type(r)
        noop = tx.is_static and tx.shape == tr.shape
    else:
        perm = transpose_perm(op, sw.type(x).rank)
        if inner is not None:
            p0 = transpose_perm(inner, len(perm))
            perm, x = [p0[k] for k in perm], inner.operands[0]
        attrs = {"perm": perm}
        noop = _noop_transpose(sw.type(x), perm)
    if noop and sw.can_drop(op, x):
        sw.drop(op, x)
        return 1
    if inner is None:
        sw.keep(op)
        return 0
    sw.release(op)
    sw.keep(sw.new(op.op_name, [x], attrs, r, like=op))
    return 1


def _scale(sw: Sweep, op: Op, x: str, f: float) -> int:
    """``op`` computes ``f·x`` (exactly, in the dtype): the simplest op that does; 1 if changed."""
    dtype = sw.type(x).dtype.numpy
    r = op.results[0]
    direct = x in op.operands  # op reads x itself (not through a Neg or Scale merged here)
    changed = op.op_name != "Scale" or not direct or op.attrs["factor"] != f
    inner = sw.made_by(x, "Scale", "Neg", "MatMul", "FusedMatMul")
    if inner is not None and inner.op_name == "Neg":
        x, f, changed, direct = inner.operands[0], -f, True, False
        inner = sw.made_by(x, "Scale", "MatMul", "FusedMatMul")
    if inner is not None and inner.op_name == "Scale":
        prod = exact_product(inner.attrs["factor"], f, dtype)
        if prod is not None:
            x, f, changed, direct = inner.operands[0], prod, True, False
            inner = None
    if _in(dtype, f) == 1.0 and sw.can_drop(op, x):
        sw.drop(op, x)
        return 1
    if (direct and inner is not None and inner.op_name in ("MatMul", "FusedMatMul") and sw.only_use(x)
            and dtype.kind == "f"):
        attrs = dict(inner.resolved_attrs()) if inner.op_name == "FusedMatMul" else {}
        alpha = attrs.get("alpha", 1.0)
        prod = f if alpha == 1.0 else exact_product(alpha, f, dtype)
        if prod is not None and finite(prod) is None:
            attrs["alpha"] = prod
            sw.release(op)
            sw.release(inner)
            sw.fold_into_producer(x, sw.new("FusedMatMul", list(inner.operands), attrs, r, like=inner))
            return 1
    if not changed:
        sw.keep(op)
        return 0
    sw.release(op)
    sw.keep(sw.new("Scale", [x], {"factor": f}, r, like=op))
    return 1
