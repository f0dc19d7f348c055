"""Kernels of ``Pad`` and ``PadGrad`` (``gradir/ops/pad.py``), in NumPy.

Pad crops (negative pads) by slicing, then pads with ``np.pad`` in the op's mode (ONNX's reflect is NumPy's).
PadGrad is the adjoint, axis by axis: each axis's positions added back onto the index they read
(``ops.pad.axis_map``) with ``np.add.at``, in position order, so the bits are fixed (no thread split).
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
        src = np.array(axis_map(n, b, e, mode), np.int64)
        keep = src >= 0
        moved = np.moveaxis(g, k, 0)
        acc = np.zeros((n,) + moved.shape[1:], dY.dtype)
        np.add.at(acc, src[keep], moved[keep])
        g = np.moveaxis(acc, 0, k)
    return _put(out, np.ascontiguousarray(g) if g is not dY else g.copy())
