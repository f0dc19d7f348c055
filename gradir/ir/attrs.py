"""Op signatures as data: ``Operand``, ``Attr`` (kinds, defaults, ranges, coercion) and the
helpers that compare and freeze attribute values."""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Optional

import numpy as np

from ..errors import ArgumentError, shown
from .types import format_attr_value

__all__ = ["REQUIRED", "Operand", "Attr", "INT_ATTR_LIMIT", "SAMPLES", "attr_equal", "freeze", "checked_items",
           "is_str"]


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()


@dataclass(frozen=True)
class Operand:
    name: str
    optional: bool = False
    variadic: bool = False  # one or more; only the last operand may be variadic
    doc: str = ""
    # How example values for this operand are drawn when a person runs a graph without giving it
    # (``gradir run`` demo inputs, ``--generate-missing``), as data: "" (floats N(0, 1), integers 0..9),
    # "weights" (U(±1/√hidden_size), as PyTorch initializes LSTM weights: N(0, 1) saturates every gate),
    # "lengths" (sequence lengths, integers 1..S for S the first dimension of the op's first operand),
    # "classes" (class labels, integers 0..C-1 for C the dimension 1 of the operand before it).
    sample: str = ""


SAMPLES = ("", "weights", "lengths", "classes")

INT_ATTR_LIMIT = 1 << 63  # int attributes are 64-bit, as in ONNX


ATTR_KINDS = ("int", "float", "str", "bool", "ints", "floats", "strs", "tensor")


@dataclass(frozen=True)
class Attr:
    """An attribute: ``kind`` is one of int, float, str, bool, ints, floats, strs, or tensor (a number,
    boolean or flat list of them, checked against the op's dtype by the op: see ``gradir.ir.constants``).

    ``default`` is ``REQUIRED`` (must be given) or a value; ``None`` means
    "absent" (e.g. ``perm`` defaults to reversed axes).  ``choices``/``min``/
    ``max`` constrain the value (each element for list kinds); ``check`` returns an
    error message or ``None``.
    """

    name: str
    kind: str
    default: Any = REQUIRED
    choices: Optional[tuple] = None
    min: Optional[float] = None
    max: Optional[float] = None
    check: Optional[Callable[[Any], Optional[str]]] = None
    doc: str = ""
    # maps an accepted spelling to the canonical one (applied before ``check``; the printer shows the result)
    normalize: Optional[Callable[[Any], Any]] = None

    def __post_init__(self) -> None:
        if self.kind not in ATTR_KINDS:
            raise ValueError(f"Attr({self.name!r}): kind {self.kind!r} is not one of {', '.join(ATTR_KINDS)}")

    @property
    def required(self) -> bool:
        return self.default is REQUIRED

    def describe(self) -> str:
        kind = {"ints": "list of int", "floats": "list of float", "strs": "list of str",
                "tensor": "number, true/false or flat list of them"}.get(self.kind, self.kind)
        parts = [kind]
        if self.choices:
            parts.append("one of " + ", ".join(format_attr_value(c) for c in self.choices))
        if self.min is not None and self.max is not None:
            parts.append(f"{format_attr_value(self.min)}..{format_attr_value(self.max)}")
        elif self.min is not None:
            parts.append(f">= {format_attr_value(self.min)}")
        return ", ".join(parts)

    def coerce(self, value: Any) -> Any:
        """Return ``value`` converted to this attribute's kind, or raise ValueError."""
        k = self.kind
        if value is None:
            if self.default is None:
                return None
            raise ValueError(f"expects a {self.describe()}")
        if k in ("ints", "floats", "strs"):
            if not isinstance(value, (list, tuple)):
                raise ValueError(f"expects a list, got {format_attr_value(value)}")
            elem = Attr(self.name, k[:-1], default=REQUIRED, choices=self.choices, min=self.min, max=self.max)
            out = []
            for v in value:
                try:
                    out.append(elem.coerce(v))
                except ValueError as e:
                    raise ValueError(f"list element {format_attr_value(v)}: {e}") from None
            value = tuple(out)
        elif k == "int":  # numbers.Integral also admits NumPy integers
            if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
                raise ValueError(f"expects an integer, got {format_attr_value(value)}")
            value = int(value)
            if not -INT_ATTR_LIMIT <= value < INT_ATTR_LIMIT:  # before any op's rule puts it in a message
                raise ValueError(f"expects a 64-bit integer, got {format_attr_value(value)}")
        elif k == "float":
            if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
                raise ValueError(f"expects a number, got {format_attr_value(value)}")
            try:
                value = float(value)
            except OverflowError:  # an int too large for a float
                raise ValueError(f"expects a number within the Float64 range, got {format_attr_value(value)}") \
                    from None
        elif k == "str":
            if not isinstance(value, str):
                raise ValueError(f"expects a string, got {format_attr_value(value)}")
        elif k == "bool":
            if not isinstance(value, bool):
                raise ValueError(f"expects true or false, got {format_attr_value(value)}")
        elif k == "tensor":
            from .constants import coerce_value
            value = coerce_value(value)
        else:  # pragma: no cover - programming error
            raise AssertionError(k)
        if k in ("int", "float", "str"):
            if self.choices is not None and value not in self.choices:
                raise ValueError(f"must be one of {', '.join(format_attr_value(c) for c in self.choices)}, "
                                 f"got {format_attr_value(value)}")
            if self.min is not None and value < self.min:
                raise ValueError(self._range_msg(value))
            if self.max is not None and value > self.max:
                raise ValueError(self._range_msg(value))
        if self.normalize is not None:
            value = self.normalize(value)
        if self.check is not None:
            msg = self.check(value)
            if msg:
                raise ValueError(msg)
        return value

    def _range_msg(self, value: Any) -> str:
        if self.max is None:
            return f"must be >= {format_attr_value(self.min)}, got {format_attr_value(value)}"
        return (f"must be in {format_attr_value(self.min)}..{format_attr_value(self.max)}, "
                f"got {format_attr_value(value)}")



def attr_equal(a: Any, b: Any) -> bool:
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(attr_equal(x, y) for x, y in zip(a, b))
    if type(a) is bool or type(b) is bool:
        return type(a) is type(b) and a == b
    return a == b


def freeze(v: Any) -> Any:
    if isinstance(v, dict):
        return tuple((k, freeze(x)) for k, x in v.items())
    if isinstance(v, (list, tuple)):
        return tuple(freeze(x) for x in v)
    if isinstance(v, float):  # bit-exact: 0.0 and -0.0 differ (and print differently); nan equals nan
        return ("float", v.hex())
    return (type(v).__name__, v) if isinstance(v, (bool, int, float)) else v


def checked_items(value: Any, what: str, ok: Callable[[Any], bool], want: str) -> list:
    """``value`` as a list whose items pass ``ok``, or an ``ArgumentError`` naming ``what``."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise ArgumentError(f"{what} must be a list of {want}, got {type(value).__name__}")
    try:
        out = list(value)
    except TypeError:  # an Iterable that does not iterate: a 0-d NumPy array
        raise ArgumentError(f"{what} must be a list of {want}, got {shown(value)}") from None
    for v in out:
        if not ok(v):
            raise ArgumentError(f"{what} must be a list of {want}, got {shown(v)} in it")
    return out


def is_str(v: Any) -> bool:
    return isinstance(v, str)


