"""What Conv's and ConvGrad's compiled paths allocate beside their results (``KernelInfo.scratch``) and keep on
their threads for the next call (``KernelInfo.kept``): the im2col columns of a block of images and their
gradient (``conv._scratch``, named buffers grown as needed), one set per core the step runs on; ConvGrad's
per-block partial dW and row sums for the call only.  The same branches as ``conv._conv_fast`` and
``conv._conv_grad_fast``, from the types alone."""

from __future__ import annotations

import math
from typing import Any

from ....ops.conv import window
from . import jit

__all__ = ["conv_scratch", "conv_grad_scratch"]


def _shapes(x: Any, w: Any, attrs: Any) -> tuple | None:
    """(n, c, m, k, p, group, itemsize, geometry) of a convolution of ``x`` by ``w``, or None (not static)."""
    if x is None or w is None or not x.is_static or not w.is_static or not 1 <= x.rank - 2 <= 3:
        return None
    geo = window(tuple(x.shape[2:]), attrs, tuple(w.shape[2:]))
    n, c = x.shape[:2]
    return n, c, w.shape[0], math.prod(geo.kernel), math.prod(geo.out), attrs.get("group", 1), x.dtype.itemsize, geo


def _fast() -> Any:
    return jit.load("conv")


def _buffers(x: Any, w: Any, attrs: Any, block_bytes: int, grad: bool) -> tuple[dict[str, int], int]:
    """(kept buffers by name, bytes for this call only), for one core."""
    s = _shapes(x, w, attrs)
    if s is None:
        return {}, 0
    n, c, m, k, p, group, isz, geo = s
    jc = _fast() if x.dtype.numpy.kind == "f" and x.dtype.itemsize in (4, 8) else None
    if jc is None:  # the NumPy path: every image's columns at once
        return {}, n * c * k * p * isz * (2 if grad else 1)
    if c == group == m:  # depthwise: a direct loop
        return {}, (c * k + c) * 8 if grad else 0
    per = max(1, min(n, block_bytes // max(1, c * k * p * isz)))
    blocks = -(-n // per)
    cgk, mg = c // group * k, m // group
    if not grad:
        if jc.FAST_LARGE and (p * isz) % 4096:
            return {"cols": c * k * p * isz}, 0
        point = all(g == 1 for g in geo.kernel) and all(s == 1 for s in geo.strides) and not any(geo.begin) \
            and tuple(geo.out) == tuple(x.shape[2:])
        return ({} if point else {"cols": c * k * per * p * isz}), 0
    call = blocks * group * mg * cgk * isz + n * m * 8 + group * mg * cgk * isz  # parts, sums, their sum
    if jc.FAST_LARGE:
        pw = 16 if isz == 4 else 8
        return {"colt": group * -(-cgk // pw) * p * pw * isz, "dcols": c * k * p * isz, "tmp": mg * cgk * isz}, call
    q = per * p
    kept = {"cols": c * k * q * isz, "dcols": c * k * q * isz}
    if per > 1:
        kept["dyb"] = m * q * isz
    return kept, call


def _cores(x: Any, w: Any, attrs: Any, block_bytes: int, width: int) -> int:
    s = _shapes(x, w, attrs)
    if s is None:
        return 1
    n, c, _m, k, p, _g, isz, _geo = s
    per = max(1, min(n, block_bytes // max(1, c * k * p * isz)))
    return max(1, min(width, -(-n // per)))


def conv_scratch(block_bytes: int, width: Any, operands: Any, results: Any, attrs: Any, kept: bool = False) -> Any:
    """Conv's scratch in bytes (``kept``: by buffer name, for one core, what it keeps)."""
    x, w = operands[0], operands[1]
    names, call = _buffers(x, w, attrs, block_bytes, grad=False)
    if kept:
        return names
    return sum(names.values()) * _cores(x, w, attrs, block_bytes, width(operands, results, attrs)) + call


def conv_grad_scratch(block_bytes: int, width: Any, operands: Any, results: Any, attrs: Any,
                      kept: bool = False) -> Any:
    """ConvGrad's (operands dY, X, W)."""
    x, w = operands[1], operands[2]
    names, call = _buffers(x, w, attrs, block_bytes, grad=True)
    if kept:
        return names
    return sum(names.values()) * _cores(x, w, attrs, block_bytes, width(operands, results, attrs)) + call
