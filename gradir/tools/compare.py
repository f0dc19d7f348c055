"""Compare a run's outputs with reference arrays: ``gradir run FILE --compare REF.npz``.

The rule is NumPy's ``allclose``: an element passes when ``|a - r| <= atol + rtol * |r|`` (``a`` the
output, ``r`` the reference).  NaN equals NaN in the same place and an infinity equals the same
infinity (``assert_allclose``'s ``equal_nan``); any other non-finite mismatch fails.  The default
tolerances depend on the output's dtype and are those of ``torch.testing.assert_close``; integer and
boolean outputs must match exactly (integers are compared as integers, never through float64, where
``2**60`` and ``2**60 + 1`` are one number).  A reference in another dtype or shape fails (like
``assert_close``'s ``check_dtype``): a float64 NumPy reference for a Float32 output says so instead
of hiding a precision question.  Byte order is not part of the dtype here: a big-endian reference is
compared by value.
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass, field
from typing import Mapping, Optional

import numpy as np

from ..ir.types import DType, format_shape

__all__ = ["DEFAULT_TOLERANCES", "Comparison", "OutputCheck", "compare_outputs", "report_comparison",
           "tolerance", "format_table"]

# (rtol, atol) by dtype: torch.testing.assert_close's defaults; integers and booleans exactly.
DEFAULT_TOLERANCES: dict[DType, tuple[float, float]] = {
    DType.Float32: (1.3e-6, 1e-5),
    DType.Float64: (1e-7, 1e-7),
}


def tolerance(text: str) -> float:
    """An argparse type: a finite number >= 0."""
    try:
        x = float(text)
    except ValueError:
        x = math.nan
    if not (math.isfinite(x) and x >= 0):
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0, got {text!r}")
    return x


def format_table(rows: list[tuple[str, ...]], right: set[int]) -> str:
    """Rows of cells (the first is the header) as aligned columns, ``right`` the right-aligned ones, with a
    rule under the header."""
    widths = [max(len(r[k]) for r in rows) for k in range(len(rows[0]))]
    lines = []
    for j, r in enumerate(rows):
        lines.append("  ".join(x.rjust(w) if k in right else x.ljust(w)
                               for k, (x, w) in enumerate(zip(r, widths))).rstrip())
        if j == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _dtype_name(dt: np.dtype) -> str:
    try:
        return DType.from_numpy(dt).value
    except ValueError:
        return str(dt)


@dataclass
class OutputCheck:
    """One output against its reference.  ``max_rel`` divides by ``|r|`` (0 where both are 0, inf where
    only ``r`` is); ``worst`` is the index where ``|a - r| - (atol + rtol |r|)`` is largest: the element
    that fails by the most, or the one closest to failing."""

    name: str
    shape: tuple
    rtol: float
    atol: float
    max_abs: float = math.nan
    max_rel: float = math.nan
    worst: Optional[tuple] = None
    failed: int = 0  # elements outside the tolerance
    problem: Optional[str] = None  # missing, wrong shape or dtype: no element-wise comparison

    @property
    def ok(self) -> bool:
        return self.problem is None and self.failed == 0

    @property
    def status(self) -> str:
        if self.problem is not None:
            return f"FAIL ({self.problem})"
        if self.failed:
            n = math.prod(self.shape)
            return f"FAIL ({self.failed} of {n} element{'s' if n != 1 else ''})"
        return "pass"


@dataclass
class Comparison:
    checks: list[OutputCheck]
    extra: list[str] = field(default_factory=list)  # reference arrays that are not outputs

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    def table(self) -> str:
        rows = [("output", "shape", "max |a-r|", "max |a-r|/|r|", "worst at", "rtol", "atol", "status")]
        for c in self.checks:
            compared = c.problem is None
            rows.append((c.name, format_shape(c.shape),
                         f"{c.max_abs:.3g}" if compared else "-", f"{c.max_rel:.3g}" if compared else "-",
                         str(c.worst) if c.worst is not None else "-", f"{c.rtol:g}", f"{c.atol:g}", c.status))
        return format_table(rows, {2, 3, 5, 6})


def _compare_one(name: str, a: np.ndarray, r: Optional[np.ndarray], rtol: Optional[float],
                 atol: Optional[float]) -> OutputCheck:
    try:
        default = DEFAULT_TOLERANCES.get(DType.from_numpy(a.dtype), (0.0, 0.0))
    except ValueError:
        default = (0.0, 0.0)
    c = OutputCheck(name, a.shape, default[0] if rtol is None else rtol, default[1] if atol is None else atol)
    if r is None:
        c.problem = "missing from the reference"
        return c
    a, r = _native(a), _native(r)  # a big-endian reference holds the same values: compared by value
    if r.dtype != a.dtype:
        c.problem = f"the reference is {_dtype_name(r.dtype)}, the output {_dtype_name(a.dtype)}"
        return c
    if r.shape != a.shape:
        c.problem = f"the reference has shape {format_shape(r.shape)}"
        return c
    if a.size == 0:
        c.max_abs = c.max_rel = 0.0
        return c
    exact = a.dtype.kind not in "fc"
    a, r = a.reshape(-1), r.reshape(-1)  # flat: a rank-0 output's arithmetic would give NumPy scalars
    with np.errstate(invalid="ignore", over="ignore"):
        a64, r64 = a.astype(np.float64), r.astype(np.float64)
        equal = (a == r) if exact else (a64 == r64) | (np.isnan(a64) & np.isnan(r64))
        nonfinite = ~equal & ~(np.isfinite(a64) & np.isfinite(r64))  # NaN against a number, or an inf
        # integers: the difference computed exactly (through float64, 2**60 and 2**60 + 1 are one number)
        diff = _integer_distance(a, r) if a.dtype.kind in "iu" else np.abs(a64 - r64)
        diff[equal] = 0.0
        diff[nonfinite] = np.inf
        absr = np.abs(r64)
        allowed = c.atol + c.rtol * absr
        bad = nonfinite | (diff > allowed)
        if exact:
            bad &= ~equal  # a difference of 1 in 2**60 is above a zero tolerance, though not in float64
        rel = np.divide(diff, absr, out=np.where(diff > 0, np.inf, 0.0), where=(absr > 0) & ~nonfinite)
        excess = np.where(equal | nonfinite, -np.inf, diff - allowed)
        excess[nonfinite] = np.inf
    c.failed = int(np.count_nonzero(bad))
    c.max_abs, c.max_rel = float(diff.max()), float(rel.max())
    if c.max_abs > 0:
        c.worst = tuple(int(i) for i in np.unravel_index(int(np.argmax(excess)), c.shape))
    return c


def _native(x: np.ndarray) -> np.ndarray:
    """``x`` in the machine's byte order (a copy if it is not)."""
    return x if x.dtype.isnative else x.astype(x.dtype.newbyteorder("="))


def _integer_distance(a: np.ndarray, r: np.ndarray) -> np.ndarray:
    """``|a - r|`` of two integer arrays of one dtype, as float64 rounded from the exact difference (which
    is below 2**64, so it is exact as an unsigned 64-bit integer; the subtraction wraps, not overflows)."""
    wide = np.uint64 if a.dtype.kind == "u" else np.int64
    a, r = a.astype(wide), r.astype(wide)
    d = np.where(a >= r, a - r, r - a)
    return d.view(np.uint64).astype(np.float64) if d.dtype == np.int64 else d.astype(np.float64)


def compare_outputs(outputs: Mapping[str, np.ndarray], reference: Mapping[str, np.ndarray],
                    rtol: Optional[float] = None, atol: Optional[float] = None) -> Comparison:
    """Compare every output with the reference array of the same name; ``rtol``/``atol`` default by dtype
    (``DEFAULT_TOLERANCES``).  A missing reference fails; reference arrays that are not outputs are listed
    in ``extra``."""
    checks = [_compare_one(n, np.asarray(a), None if n not in reference else np.asarray(reference[n]), rtol, atol)
              for n, a in outputs.items()]
    return Comparison(checks, [n for n in reference if n not in outputs])


def report_comparison(outputs: Mapping[str, np.ndarray], reference: Mapping[str, np.ndarray], ref_path: str,
                      rtol: Optional[float], atol: Optional[float]) -> int:
    """Print the comparison table (stdout) and a verdict (stderr); the exit status: 1 if any output fails."""
    cmp = compare_outputs(outputs, reference, rtol, atol)
    if cmp.extra:
        print(f"gradir: warning: {ref_path} also holds {', '.join(cmp.extra)}, which "
              f"{'is not an output' if len(cmp.extra) == 1 else 'are not outputs'} of the graph (ignored)",
              file=sys.stderr)
    print(f"compared with {ref_path} (pass: |a - r| <= atol + rtol * |r|, a the output, r the reference)")
    print(cmp.table())
    bad = [c for c in cmp.checks if not c.ok]
    if bad:
        print(f"gradir: {len(bad)} of {len(cmp.checks)} output{'s' if len(cmp.checks) != 1 else ''} "
              f"{'does' if len(bad) == 1 else 'do'} not match {ref_path}: {', '.join(c.name for c in bad)}",
              file=sys.stderr)
        return 1
    return 0
