"""Constant folding: ops whose operands are all Constants are evaluated at compile time.

The backend's kernels themselves compute the folded values (``gradir.backends.base.kernel_info``), so the
bits are those a run would produce.
Only small values are folded (operands and results of at most ``MAX_CONSTANT_ELEMENTS`` elements
each): a folded value is kept in the program, and a big one would cost memory and compile time to
save little.  An op whose kernel fails is left alone, so the run reports the failure at its line.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from ...backends.base import kernel_info
from ...ir.constants import MAX_CONSTANT_ELEMENTS, value_from_array
from ...ir.op import Op
from ...ops.constant import ConstantOp, constant_array
from ...ir.types import TensorType
from .pipeline import Program, register_pass

__all__ = ["fold_constants"]


def _small(t: Optional[TensorType]) -> bool:
    return t is not None and t.is_static and t.numel <= MAX_CONSTANT_ELEMENTS


def _evaluate(op: Op, arrays: list, types: list, backend: Any) -> Optional[list[np.ndarray]]:
    """``op``'s results computed by its kernel on ``backend``, or ``None`` when it cannot be folded."""
    info = kernel_info(backend, type(op))
    if info is None:
        return None
    try:
        with np.errstate(all="ignore"):
            res = info.fn(*arrays, out=None, **op.kernel_attrs())
    except Exception:  # noqa: BLE001 - left to the run, which locates the error
        return None
    res = list(res) if isinstance(res, tuple) else [res]
    out = [np.asarray(a) for a in res]
    if len(out) != len(types) or any(a.dtype != t.dtype.numpy or a.shape != t.shape for a, t in zip(out, types)):
        return None
    return out


def _constant(name: str, a: np.ndarray, t: TensorType, like: Op) -> ConstantOp:
    """A validated Constant holding ``a``: one number when every element has the same bits (compact
    in ``gradir plan``), else the full list."""
    flat = a.reshape(-1)
    if flat.size and (flat.view(np.uint8).reshape(flat.size, -1) == flat[:1].view(np.uint8)).all():
        value, _ = value_from_array(flat[0].reshape(()))
    else:
        value, _ = value_from_array(a)
    op = ConstantOp([name], [], {"value": value}, [t], loc=like.loc)
    op.check([])
    return op


@register_pass("fold-constants", f"evaluate ops whose operands are all Constants at compile time (operands and "
                                 f"results of at most {MAX_CONSTANT_ELEMENTS:,} elements)")
def fold_constants(p: Program) -> str:
    consts: dict[str, np.ndarray] = {}
    ops: list[Op] = []
    folded = 0
    for op in p.ops:
        if isinstance(op, ConstantOp):
            if _small(p.types.get(op.results[0])):
                consts[op.results[0]] = constant_array(op)
            ops.append(op)
            continue
        given = [v for v in op.operands if v is not None]
        types = [p.types.get(r) for r in op.results]
        if (not given or op.DECLARED_TYPE or not all(v in consts for v in given)
                or not all(_small(t) for t in types)):
            ops.append(op)
            continue
        res = _evaluate(op, [None if v is None else consts[v] for v in op.operands], types, p.backend)
        if res is None:
            ops.append(op)
            continue
        folded += 1
        for r, a, t in zip(op.results, res, types):
            c = _constant(r, a, t, op)
            consts[r] = constant_array(c)
            ops.append(c)
    p.ops = ops
    return f"folded {folded} op{'s' if folded != 1 else ''}"
