"""Constant values written in the text: checking them against a dtype, their canonical form, arrays.

A ``Constant``'s ``value`` attribute is a number (or ``true``/``false``) that fills the declared
shape, or a flat, row-major list with exactly as many elements as the type has.  The value is
kept as Python scalars (a scalar, or a tuple of them), *canonical for the dtype*:

* Float32 elements are the shortest decimal that reads back to the same float32 (``0.1``, not
  ``0.10000000149011612``), so that ``fmt`` prints them short and a graph built from a float32
  array prints and compares like the same text;
* Float64 elements are Python floats (``repr`` is already the shortest round-trip text);
* integers given for a float dtype become floats (``1`` prints ``1.0``);
* Int32/Int64 elements are ints within the dtype's range; Bool elements are ``true``/``false``
  (``0``/``1`` are refused: a Bool is not a number in the text).

Lists are limited to ``MAX_CONSTANT_ELEMENTS`` elements: a file is a program, and bulk data
belongs in its inputs (``gradir run --inputs``).  A scalar fill may fill any allowed shape.
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Optional

import numpy as np

from ..errors import ConstantValueError
from .types import DType, TensorType, format_attr_value

__all__ = ["MAX_CONSTANT_ELEMENTS", "ConstantValueError", "coerce_value", "canonical_value", "value_array",
           "value_from_array"]

MAX_CONSTANT_ELEMENTS = 65536

_INT_RANGE = {DType.Int32: (-(1 << 31), (1 << 31) - 1), DType.Int64: (-(1 << 63), (1 << 63) - 1)}


def _is_scalar(v: Any) -> bool:
    return isinstance(v, (bool, np.bool_)) or (isinstance(v, numbers.Real) and not isinstance(v, str))


def _show(v: Any) -> str:
    return format_attr_value(v)


def coerce_value(value: Any) -> Any:
    """The dtype-independent check (an attribute of kind ``tensor``): a number or boolean, or a flat
    list of them, as a Python scalar or a tuple.  Raises ``ValueError``."""
    if isinstance(value, (list, tuple)):
        if len(value) > MAX_CONSTANT_ELEMENTS:
            raise ValueError(f"has {len(value):,} elements; a list value has at most {MAX_CONSTANT_ELEMENTS:,} "
                             f"(larger data belongs in a graph input)")
        out = []
        for k, v in enumerate(value):
            if isinstance(v, (list, tuple)):
                raise ValueError("is a nested list; a value is a flat, row-major list of numbers")
            if not _is_scalar(v):
                raise ValueError(f"list element {k} is {_show(v)}; expected a number, true or false")
            out.append(_plain(v))
        return tuple(out)
    if not _is_scalar(value):
        raise ValueError(f"expects a number, true/false or a flat list of them, got {_show(value)}")
    return _plain(value)


def _plain(v: Any) -> Any:
    """NumPy scalars as Python ones (bool before int: ``bool`` is an ``int``)."""
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if isinstance(v, numbers.Integral):
        return int(v)
    return float(v)


def _element(v: Any, dtype: DType, k: Optional[int]) -> Any:
    """One element made canonical for ``dtype``, or ``ConstantValueError`` naming element ``k``."""
    where = "value " if k is None else f"value element {k}: "
    if dtype is DType.Bool:
        if type(v) is not bool:
            raise ConstantValueError(f"{where}{_show(v)} is not a Bool; write true or false", k)
        return v
    if type(v) is bool:
        raise ConstantValueError(f"{where}{_show(v)} is a boolean; {dtype} constants need numbers", k)
    if dtype in _INT_RANGE:
        if not isinstance(v, int):
            raise ConstantValueError(f"{where}{_show(v)} is not an integer; {dtype} constants need integers", k)
        lo, hi = _INT_RANGE[dtype]
        if not lo <= v <= hi:
            raise ConstantValueError(f"{where}{v} does not fit {dtype} ({lo}..{hi})", k)
        return v
    try:
        x = float(v)
    except OverflowError:
        raise ConstantValueError(f"{where}{_show(v)[:24]} does not fit {dtype}", k) from None
    if dtype is DType.Float64:
        return x
    with np.errstate(over="ignore"):
        f = np.float32(x)
    if math.isinf(f) and not math.isinf(x):
        raise ConstantValueError(f"{where}{_show(x)} does not fit Float32 (largest finite: "
                                 f"{float(np.finfo(np.float32).max):.9g})", k)
    return float(str(f))  # the shortest text that reads back to this float32


def canonical_value(value: Any, t: TensorType) -> Any:
    """``value`` (already through ``coerce_value``) checked against type ``t`` (static) and made canonical."""
    if isinstance(value, tuple):
        n = t.numel
        if len(value) != n:
            raise ConstantValueError(f"value has {len(value)} element{'s' if len(value) != 1 else ''} but type "
                                     f"{t} has {n}; give exactly {n}, or one number to fill it")
        fast = _fast_floats(value, t.dtype) if t.dtype.is_float else None
        if fast is not None:
            return fast
        return tuple(_element(v, t.dtype, k) for k, v in enumerate(value))
    return _element(value, t.dtype, None)


def _fast_floats(value: tuple, dtype: DType) -> Optional[tuple]:
    """A float list made canonical at once (6x faster than element by element for a big list), or
    ``None`` when some element needs ``_element``'s own check and message."""
    if not all(type(v) is float or type(v) is int for v in value):
        return None
    try:
        x = np.array(value, dtype=np.float64)
    except OverflowError:
        return None
    if dtype is DType.Float64:
        return tuple(x.tolist())
    with np.errstate(over="ignore"):
        f = x.astype(np.float32)
    if (np.isinf(f) & ~np.isinf(x)).any():
        return None
    return tuple(float(str(v)) for v in f)


def value_array(value: Any, t: TensorType) -> np.ndarray:
    """The read-only array a canonical ``value`` of type ``t`` stands for."""
    if isinstance(value, tuple):
        a = np.array(value, dtype=t.dtype.numpy).reshape(t.shape)
    else:
        a = np.full(t.shape, value, dtype=t.dtype.numpy)
    a.flags.writeable = False
    return a


def value_from_array(a: np.ndarray) -> tuple[Any, TensorType]:
    """A Constant's value and type for an array (its dtype must be one of gradir's).  A rank-0
    array gives a scalar value; any other a list (so the text shows the data it came from)."""
    dtype = DType.from_numpy(a.dtype)
    t = TensorType(dtype, a.shape)
    if a.ndim == 0:
        return canonical_value(_plain(a.item()), t), t
    return canonical_value(tuple(_plain(v) for v in a.ravel().tolist()), t), t
