"""DType, TensorType and shape helpers.

A dimension is a positive ``int`` or ``None`` (printed ``?``: unknown until run
time).  Rank 0 prints as ``scalar``.
"""

from __future__ import annotations

import enum
import json
import math
import numbers
from dataclasses import dataclass
from typing import Any, Iterable, Optional, Sequence

import numpy as np

from ..errors import ArgumentError

__all__ = ["DType", "TensorType", "Dim", "Shape", "format_shape", "FLOAT_DTYPES", "INT_DTYPES",
           "NUMERIC_DTYPES", "ALL_DTYPES"]

Dim = Optional[int]
Shape = tuple[Dim, ...]


class DType(enum.Enum):
    Float32 = "Float32"
    Float64 = "Float64"
    Int32 = "Int32"
    Int64 = "Int64"
    Bool = "Bool"

    @property
    def numpy(self) -> np.dtype:
        return _NUMPY[self]

    @property
    def is_float(self) -> bool:
        return self in (DType.Float32, DType.Float64)

    @property
    def itemsize(self) -> int:
        return self.numpy.itemsize

    @classmethod
    def parse(cls, text: str) -> "DType":
        try:
            return cls(text)
        except ValueError:
            raise ArgumentError(f"unknown dtype '{text}'; expected one of "
                             + ", ".join(d.value for d in cls)) from None

    @classmethod
    def from_numpy(cls, dtype: np.dtype) -> "DType":
        for d, nd in _NUMPY.items():
            if nd == dtype:
                return d
        raise ArgumentError(f"NumPy dtype {dtype} has no gradir equivalent; expected one of "
                         + ", ".join(f"{nd} ({d.value})" for d, nd in _NUMPY.items()))

    def __str__(self) -> str:
        return self.value

    def __repr__(self) -> str:
        return f"DType.{self.value}"


_NUMPY = {
    DType.Float32: np.dtype(np.float32),
    DType.Float64: np.dtype(np.float64),
    DType.Int32: np.dtype(np.int32),
    DType.Int64: np.dtype(np.int64),
    DType.Bool: np.dtype(np.bool_),
}

FLOAT_DTYPES = (DType.Float32, DType.Float64)
INT_DTYPES = (DType.Int32, DType.Int64)
NUMERIC_DTYPES = FLOAT_DTYPES + INT_DTYPES
ALL_DTYPES = tuple(DType)


def format_shape(shape: Sequence[Dim]) -> str:
    if len(shape) == 0:
        return "scalar"
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


MAX_RANK = 64  # NumPy's limit
MAX_ELEMENTS = 1 << 48


def _prod_log2(shape: Sequence[Dim]) -> int:
    """log2 of the product of the known dimensions, rounded (no float overflow on huge ones)."""
    return round(sum(math.log2(d) for d in shape if d is not None))


def _prod(shape: Sequence[Dim]) -> int:
    n = 1
    for d in shape:
        if d is not None:
            n *= d
    return n


@dataclass(frozen=True)
class TensorType:
    """A dtype and a shape; ``None`` dimensions are unknown (``?``)."""

    dtype: DType
    shape: Shape

    def __init__(self, dtype: DType | str, shape: Iterable[Dim] = ()) -> None:
        if type(shape) is tuple and type(dtype) is DType and all(type(d) is int and d > 0 for d in shape):
            object.__setattr__(self, "dtype", dtype)
            object.__setattr__(self, "shape", shape)
            return
        if isinstance(dtype, str):
            dtype = DType.parse(dtype)
        elif not isinstance(dtype, DType):
            raise ArgumentError(f"a tensor type's dtype is a DType or its name, got {type(dtype).__name__}")
        try:
            dims = list(shape)
        except TypeError:
            raise ArgumentError(f"a shape is a sequence of dimensions, got {type(shape).__name__}") from None
        for d in dims:
            if not (d is None or d == "?" or (isinstance(d, numbers.Integral) and not isinstance(d, bool))):
                raise ArgumentError(f"dimension {d!r} is not a positive integer or '?'")
        shape = tuple(None if d is None or d == "?" else int(d) for d in dims)
        for d in shape:
            if d is not None and d <= 0:
                raise ArgumentError(f"dimension {d} is not a positive integer or '?'")
        object.__setattr__(self, "dtype", dtype)
        object.__setattr__(self, "shape", shape)

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def is_static(self) -> bool:
        return all(d is not None for d in self.shape)

    @property
    def numel(self) -> int | None:
        n = 1
        for d in self.shape:
            if d is None:
                return None
            n *= d
        return n

    @property
    def nbytes(self) -> int | None:
        n = self.numel
        return None if n is None else n * self.dtype.itemsize

    def limit_problem(self) -> Optional[str]:
        """Why this type is beyond what gradir runs (None if it is not): at most ``MAX_RANK``
        dimensions (NumPy's limit) and ``MAX_ELEMENTS`` elements (counting known dimensions)."""
        if self.rank > MAX_RANK:
            return f"rank {self.rank}; at most {MAX_RANK} dimensions are supported"
        n = 1
        for d in self.shape:
            if d is not None:
                n *= d
                if n > MAX_ELEMENTS:
                    log2 = _prod_log2(self.shape)
                    count = f"about 2^{log2}" if log2 > 90 else f"{_prod(self.shape)}"
                    return f"{count} elements; at most 2^48 are supported"
        return None

    def with_shape(self, shape: Iterable[Dim]) -> "TensorType":
        return TensorType(self.dtype, shape)

    def with_dtype(self, dtype: DType) -> "TensorType":
        return TensorType(dtype, self.shape)

    def __str__(self) -> str:
        return f"{self.dtype} {format_shape(self.shape)}"

    def __repr__(self) -> str:
        return f"TensorType({self.dtype.value!r}, {list(self.shape)!r})"


def format_attr_value(v: Any) -> str:
    """Canonical text of an attribute value (floats: shortest round-trip repr)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        try:
            return str(v)
        except ValueError:  # past Python's 4300-digit str limit (only ever in an invalid graph)
            return f"an int of {v.bit_length()} bits"
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(format_attr_value(x) for x in v) + "]"
    if v is None:
        return "none"
    return repr(v)
