"""Parsing a memory budget: ``512MiB``, ``1.5GiB``, ``2GB`` (SI: 10^9 bytes), ``1000`` (bytes), ``25%`` (of the
planned peak without a budget), or ``auto``.

Binary units (``KiB``, ``MiB``, ``GiB``, ``TiB``) are powers of 1024, SI units (``kB``/``KB``, ``MB``,
``GB``, ``TB``) powers of 1000, as ``ls``, ``df -H`` and the disk makers count; units are
case-insensitive and a space may separate the number from its unit.  A fractional size is rounded
down to whole bytes.  ``auto`` asks the planner for the knee of the peak-memory / time curve
(docs/memory.md).
"""

from __future__ import annotations

import math
import re
from typing import Optional, Union

from ...errors import ArgumentError, shown

__all__ = ["parse_budget", "format_budget", "Share", "ACCEPTED", "UNITS"]

UNITS = {"b": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
         "kb": 10 ** 3, "mb": 10 ** 6, "gb": 10 ** 9, "tb": 10 ** 12}

ACCEPTED = ("a positive number of bytes (1000), a size with a unit (512MiB, 1.5GiB, 64KiB, 2GB, 100MB; "
            "KiB/MiB/GiB/TiB are powers of 1024, kB/MB/GB/TB powers of 1000), a percentage of the planned peak "
            "without a budget (25%), or auto")

_SIZE = re.compile(r"\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([a-z]*)\s*")

_SHARE = re.compile(r"\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*%\s*")


class Share(float):
    """A budget given as a share of the plan's own peak without a budget (``25%`` is ``Share(0.25)``): the
    planner turns it into bytes once it has planned that peak."""

    def __repr__(self) -> str:
        return f"{float(self) * 100:g}%"

    __str__ = __repr__


# more than any machine holds: a typo, not a budget (and the MILP's numbers stay well inside a float)
MAX_BUDGET = 1 << 60


def parse_budget(value: object) -> Union[int, "Share", str, None]:
    """A budget in bytes (an ``int`` > 0), a ``Share`` of the peak without a budget (``"25%"``, above 0 and
    at most 100%), ``"auto"``, or None for None (no budget).

    Raises ``gradir.ArgumentError`` naming the accepted forms for anything else (zero, a negative
    size, an unknown unit, a bool, a float that is not finite)."""
    if value is None or isinstance(value, Share):
        return value
    if isinstance(value, bool):
        raise ArgumentError(f"memory budget must be {ACCEPTED}; got {shown(value)}")
    if isinstance(value, int):
        n = value
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise ArgumentError(f"memory budget must be {ACCEPTED}; got {shown(value)}")
        n = int(value)
    elif isinstance(value, str):
        text = value.strip().lower()
        if text == "auto":
            return "auto"
        share = _SHARE.fullmatch(text)
        if share is not None:
            p = float(share.group(1))
            if not 0 < p <= 100:
                raise ArgumentError(f"memory budget must be {ACCEPTED}; got {shown(value)} (a percentage above 0 "
                                    f"and at most 100)")
            return Share(p / 100)
        m = _SIZE.fullmatch(text)
        if m is None or m.group(2) not in UNITS and m.group(2) != "":
            unit = f" (unknown unit {m.group(2)!r})" if m is not None else ""
            raise ArgumentError(f"memory budget must be {ACCEPTED}; got {shown(value)}{unit}")
        number, unit = m.group(1), m.group(2) or "b"
        if len(number) > 30:
            raise ArgumentError(f"memory budget must be {ACCEPTED}; got {shown(value)}")
        scale = UNITS[unit]
        n = int(number) * scale if "." not in number else math.floor(float(number) * scale)
    else:
        raise ArgumentError(f"memory budget must be {ACCEPTED}; got a {type(value).__name__}")
    if n <= 0:
        raise ArgumentError(f"memory budget must be {ACCEPTED}; got {shown(value)} (it must be positive)")
    if n > MAX_BUDGET:
        raise ArgumentError(f"memory budget must be {ACCEPTED}; got {shown(value)} (more than 1 EiB)")
    return n


def format_budget(n: Optional[int], up: bool = False) -> str:
    """``n`` bytes in binary units with one decimal (``412.3 MiB``); ``up`` rounds up, so that the text,
    parsed back as a budget, is at least ``n`` (a least feasible budget a user can copy)."""
    if n is None:
        return "unknown"
    for unit, scale in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            tenths = -(-n * 10 // scale) if up else round(n * 10 / scale)
            while True:
                text = (f"{tenths // 10}.{tenths % 10}" if tenths % 10 else f"{tenths // 10}") + f" {unit}"
                if not up or parse_budget(text) >= n:  # (parsing rounds down: one tenth more if need be)
                    return text  # type: ignore[return-value]
                tenths += 1
    return f"{n} B"
