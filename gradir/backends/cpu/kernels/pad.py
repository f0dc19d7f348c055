"""Kernels of ``Pad`` and ``PadGrad`` (``gradir/ops/pad.py``), in NumPy.

Pad crops (negative pads) by slicing, then pads with ``np.pad`` in the op's mode (ONNX's reflect is NumPy's).
PadGrad is the adjoint, axis by axis: each axis's kept positions copied back, then its mirrored or repeated
ones added onto the index they read (``ops.pad.axis_map``), one slice at a time in position order, so the
bits are fixed (no thread split).
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from ....ops.pad import PadGradOp, PadOp, axis_map, resolve_pads
from .registry import kernel

__all__ = ["pad", "pad_grad"]


def _put(out: Optional[np.ndarray], a: np.ndarray) -> np.ndarray:
    if out is None:
        return a
    np.copyto(out, a)
    return out


@kernel(PadOp)
def pad(data: np.ndarray, *, mode: str, pads: Any, constant_value: float = 0.0, axes: Any = None,
        out: Optional[np.ndarray] = None) -> np.ndarray:
    """output (docs/ops.md)."""
    begin, end = resolve_pads(data.ndim, pads, axes)
    crop = tuple(slice(max(-b, 0), n - max(-e, 0)) for n, b, e in zip(data.shape, begin, end))
    widths = [(max(b, 0), max(e, 0)) for b, e in zip(begin, end)]
    x = data[crop]
    if mode == "constant":
        y = np.pad(x, widths, mode="constant", constant_values=np.array(constant_value).astype(data.dtype))
    else:
        y = np.pad(x, widths, mode=mode)
    return _put(out, y)


@kernel(PadGradOp)
def pad_grad(dY: np.ndarray, *, mode: str, pads: Any, axes: Any = None, out: Optional[np.ndarray] = None) -> np.ndarray:
    """dX (docs/ops.md): the axes undone one after the other, last first."""
    begin, end = resolve_pads(dY.ndim, pads, axes)
    g = dY
    for k in reversed(range(dY.ndim)):
        b, e = begin[k], end[k]
        if b == 0 and e == 0:
            continue
        n = dY.shape[k] - b - e
        src = axis_map(n, b, e, mode)
        lo, size, pb = max(-b, 0), n + min(b, 0) + min(e, 0), max(b, 0)
        at = (lambda i: (slice(None),) * k + (i,))  # noqa: E731 - index i along axis k
        acc = np.zeros(g.shape[:k] + (n,) + g.shape[k + 1:], dY.dtype)
        acc[at(slice(lo, lo + size))] = g[at(slice(pb, pb + size))]  # the positions that read themselves
        for j in list(range(pb)) + list(range(pb + size, len(src))):  # the mirrored or repeated ones, in order
            if src[j] >= 0:
                acc[at(src[j])] += g[at(j)]
        g = acc
    return _put(out, g if g is not dY else g.copy())
