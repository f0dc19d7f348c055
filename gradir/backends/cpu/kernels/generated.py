"""Kernels generated from an op's ``FORMULA`` (for ops with a formula and no hand-written kernel).

Two paths, both from the one formula (``gradir.ir.formula``):

* **Compiled** (Float32 and Float64, when the compiled kernels are on): the loop the fusion pass
  builds for a group, here for the op alone (a one-member ``FusedBody``, ``fused_codegen``): the
  formula translated to numba, each element rounded as in a fused group, the source cached on
  disk and the machine code in numba's cache.  A fused group containing the op computes it with
  the same translated expression, fenced the same way, so fused and unfused give the same bits.
  The loop's grid depends only on the shape, so the bits do not depend on the thread count.
* **NumPy** (other dtypes, operands of several dtypes or a result of another dtype than theirs,
  e.g. ``Where``'s Bool condition or ``Equal``'s Bool result, or the compiled kernels off): the
  formula evaluated in the dtype of the first floating-point operand (else the first operand's;
  numbers and attributes rounded to it), into a result of the dtype the formula gives, in row
  chunks of the result like the other element-wise kernels.  Such ops are not fused (the fusion
  pass takes only ops whose operands and result share one float dtype).  A fused group then runs its
  members' kernels one after another (``fused._interpret``), so it gives these bits too.

Both write into ``out`` when given; ``out`` may be one of the operands (each chunk of the result
is computed from the same chunk of the operands before it is written).
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from ....ir import formula
from ....ir.types import DType, TensorType
from . import jit
from .registry import KernelInfo
from .parallel import parallel_rows

__all__ = ["generated_kernel", "COMPILED_DTYPES"]

COMPILED_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
_DTYPES = {np.dtype(np.float32): DType.Float32, np.dtype(np.float64): DType.Float64}


def _attrs(cls: type, given: dict[str, Any]) -> dict[str, Any]:
    """The op's attributes with defaults filled in (a kernel is called with them all by the runtime;
    a direct call may leave some out)."""
    out = {}
    for a in cls.ATTRS:
        if a.name in given:
            out[a.name] = given[a.name]
        elif not a.required:
            out[a.name] = a.default
        else:
            raise TypeError(f"{cls.op_name}: attribute {a.name!r} is required")
    unknown = set(given) - set(out)
    if unknown:
        raise TypeError(f"{cls.op_name}: unknown attribute{'s' if len(unknown) > 1 else ''} {sorted(unknown)}")
    return out


def _body(cls: type, attrs: dict[str, Any], shapes: list[tuple], dtype: np.dtype) -> Any:
    """The one-member ``FusedBody`` computing ``cls`` on operands of ``shapes``."""
    from ....ops.fused import FusedBody
    names = [f"x{k}" for k in range(len(shapes))]
    shape = np.broadcast_shapes(*shapes)
    op = cls(["y"], names, attrs)
    return FusedBody([op], names, ["y"], TensorType(_DTYPES[dtype], list(shape)))


def _compiled(cls: type, operands: tuple, out: Optional[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    from .fused import fused_elementwise
    body = _body(cls, attrs, [a.shape for a in operands], operands[0].dtype)
    return fused_elementwise(*operands, out=out, body=body)


def _eval_dtype(operands: tuple) -> np.dtype:
    """The dtype the formula is computed in: the first floating-point operand's, else the first's."""
    for a in operands:
        if a.dtype.kind == "f":
            return a.dtype
    return operands[0].dtype if operands else np.dtype(np.float64)


_RESULT_DTYPES: dict[tuple, np.dtype] = {}


def result_dtype(cls: type, dtypes: tuple, attrs: dict[str, Any]) -> np.dtype:
    """The dtype ``cls.FORMULA`` gives for operands of ``dtypes`` (evaluated once on empty arrays:
    a comparison gives Bool, arithmetic the operands' dtype)."""
    key = (cls, tuple(np.dtype(d) for d in dtypes))
    got = _RESULT_DTYPES.get(key)
    if got is None:
        env = dict(attrs)
        env.update((o.name, np.empty(0, d)) for o, d in zip(cls.OPERANDS, dtypes))
        got = np.asarray(formula.evaluate(cls.FORMULA, env, _eval_dtype(tuple(np.empty(0, d) for d in dtypes)))).dtype
        _RESULT_DTYPES[key] = got
    return got


def _numpy(cls: type, operands: tuple, out: Optional[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    names = [o.name for o in cls.OPERANDS]
    dtype = _eval_dtype(operands)
    shape = np.broadcast_shapes(*(a.shape for a in operands))
    if out is None:
        out = np.empty(shape, result_dtype(cls, tuple(a.dtype for a in operands), attrs))
    elif out.shape != shape:
        raise ValueError(f"{cls.op_name}: out has shape {out.shape}, the result {shape}")

    def compute(o: np.ndarray, arrays: list[np.ndarray]) -> None:
        env = dict(attrs)
        env.update(zip(names, arrays))
        np.copyto(o, formula.evaluate(cls.FORMULA, env, dtype), casting="unsafe")

    if out.ndim == 0 or out.size < (1 << 16) or out.shape[0] == 1:
        compute(out, list(operands))
        return out
    # row chunks along axis 0 of the result; operands broadcast along it are passed whole
    whole = [a.ndim < out.ndim or a.shape[0] == 1 for a in operands]
    row_bytes = out.itemsize * (out.size // out.shape[0]) * (len(operands) + 1)

    def body(lo: int, hi: int) -> None:
        compute(out[lo:hi], [a if w else a[lo:hi] for a, w in zip(operands, whole)])

    parallel_rows(out.shape[0], row_bytes, body)
    return out


def _check(cls: type, operands: tuple) -> None:
    n = len(cls.OPERANDS)
    if len(operands) != n:
        raise TypeError(f"{cls.op_name} takes {n} operand{'s' if n != 1 else ''}, got {len(operands)}")
    if any(a is None for a in operands):
        raise TypeError(f"{cls.op_name}: every operand is required")


def _loop_dtype(cls: type, dtypes: tuple, attrs: dict[str, Any]) -> Optional[np.dtype]:
    """The compiled loop's dtype when one can compute ``cls`` (every operand and the result of one
    compiled dtype), else None (the NumPy path)."""
    if not dtypes or dtypes[0] not in COMPILED_DTYPES or any(d != dtypes[0] for d in dtypes):
        return None
    return dtypes[0] if result_dtype(cls, dtypes, attrs) == dtypes[0] else None


def generated_kernel(cls: type) -> KernelInfo:
    """The kernel made from ``cls.FORMULA`` (see the module docstring)."""

    def fn(*operands: np.ndarray, out: Optional[np.ndarray] = None, **given: Any) -> np.ndarray:
        operands = tuple(None if a is None else np.asarray(a) for a in operands)
        _check(cls, operands)
        attrs = _attrs(cls, given)
        if jit.enabled() and _loop_dtype(cls, tuple(a.dtype for a in operands), attrs) is not None:
            return _compiled(cls, operands, out, attrs)
        return _numpy(cls, operands, out, attrs)

    def prepare(op: Any, types: Any) -> None:
        """Build (or load from the disk cache) the loop ``op`` will run, at compile time."""
        if not jit.enabled():
            return
        ts = [types.get(v) for v in op.operands]
        if any(t is None or not t.is_static for t in ts):
            return
        attrs = _attrs(cls, dict(op.attrs))
        dtype = _loop_dtype(cls, tuple(np.dtype(t.dtype.numpy) for t in ts), attrs)
        if dtype is None:
            return
        from .fused import prepare_body
        shapes = [tuple(t.shape) for t in ts]
        prepare_body(_body(cls, attrs, shapes, dtype), shapes)

    fn.__name__ = fn.__qualname__ = cls.op_name
    fn.__doc__ = f"{cls.op_name}: generated from its formula ``{cls.FORMULA}`` (gradir.backends.cpu.kernels.generated)."
    return KernelInfo(cls.op_name, fn, inplace=True, splits=True, prepare=prepare, op=cls, generated=True)
