"""The kernel of ``FusedElementwise`` (``gradir.ops.fused``): one compiled loop per group.

The loop's shape is the group's result shape.  Its axes are coalesced first (size-1 axes
dropped, neighbours merged where every operand is laid out alike), leaving an innermost axis
along which each operand either varies (stride 1) or is one value per row (broadcast), and
outer axes that each operand walks with its own element strides (0 where it is broadcast).
Work is cut into units of at most ``CHUNK`` elements of one row; the grid depends only on the
shape, units are dealt to threads in contiguous runs by ``parallel_rows``, and every element is
computed the same way wherever it runs: results do not depend on the thread count.

Without numba (or with ``GRADIR_JIT=0``) the members' own kernels run one after another, which
gives the unfused bits.
"""

from __future__ import annotations

import math
from typing import Any, Optional

import numpy as np

from ....ops.fused import FusedElementwiseOp
from ....ops.shape import ReduceSumToOp
from . import jit, parallel
from .registry import KERNELS, kernel
from ....ir import formula as formula_lang
from .fused_codegen import compiled_loop, formula_of, scalar_function
from .parallel import parallel_rows

__all__ = ["fused_elementwise", "CHUNK", "layout", "sum_layout", "SUM_MIN_STRIP", "prepare_body", "loopable",
           "element_function", "can_fuse"]

CHUNK = 1 << 15  # elements of one row per unit of work


def layout(shape: tuple, operand_shapes: list[tuple]) -> tuple[list[int], list[list[int]]]:
    """Coalesced ``(dims, strides)``: ``strides[k][d]`` is operand ``k``'s element stride along
    coalesced axis ``d`` of the loop (0 where it is broadcast).  At least one axis."""
    dims, strides, _ = _layout(shape, operand_shapes, 0)
    return dims, strides


def _layout(shape: tuple, operand_shapes: list[tuple], split: int) -> tuple[list[int], list[list[int]], int]:
    """``layout``, axis ``split`` (when > 0) never merged with the axes before it; also how many
    coalesced axes come from the axes before ``split``."""
    r = len(shape)
    strides = []
    for s in operand_shapes:
        s = (1,) * (r - len(s)) + tuple(s)
        st, acc = [0] * r, 1
        for d in range(r - 1, -1, -1):
            st[d] = acc if s[d] != 1 else 0
            acc *= s[d]
        strides.append(st)
    dims: list[int] = []
    cols: list[list[int]] = [[] for _ in operand_shapes]
    before = 0
    for d in range(r):
        if d == split:
            before = len(dims)
        if shape[d] == 1:
            continue
        if dims and d != split and all(c[-1] == st[d] * shape[d] for c, st in zip(cols, strides)):
            dims[-1] *= shape[d]
            for c, st in zip(cols, strides):
                c[-1] = st[d]
            continue
        dims.append(shape[d])
        for c, st in zip(cols, strides):
            c.append(st[d])
    if not dims:
        return [1], [[0] for _ in operand_shapes], 0
    return dims, cols, before


def sum_layout(shape: tuple, operand_shapes: list[tuple], lead: int) -> Optional[tuple[list[int], list[list[int]]]]:
    """The layout of a loop that sums over its ``lead`` leading axes: ``layout`` with those axes
    kept apart from the rest, which must coalesce into the one innermost axis (the columns each
    sum runs along); else None (the group is not fused with its sums)."""
    if not 0 < lead < len(shape) or math.prod(shape[:lead]) < 2 or math.prod(shape[lead:]) < 2:
        return None
    dims, strides, before = _layout(shape, operand_shapes, lead)
    return (dims, strides) if len(dims) == before + 1 else None


# Columns per unit of a loop with sums (each unit adds its columns over every row): at least this
# many.  Narrow strips read each row in short pieces 16 KB and more apart, which defeats the
# hardware's prefetching: one thread, Mul + Add + the sum on 512x4096, took 2.2 ms in strips of
# 256 columns, 0.85 in whole rows; two threads 0.50 ms in strips of 1024.
SUM_MIN_STRIP = 1024


def _interpret(body: Any, operands: tuple, outs: list, sums: list) -> None:
    """The members' own kernels, one after another (the unfused bits)."""
    vals = list(operands)
    for cls, args, attrs in body.instrs:
        vals.append(KERNELS[cls].fn(*(vals[a] for a in args), out=None, **attrs))
    for o, s in zip(outs, body.outputs):
        np.copyto(o, vals[s])
    for o, (s, shape) in zip(sums, body.sums):
        KERNELS[ReduceSumToOp].fn(vals[s], np.broadcast_to(np.zeros((), body.dtype), shape), out=o)


def _prepare(op: Any, types: Any) -> None:
    """Build (or load from the disk cache) the loop ``op`` will run, for its operands' shapes."""
    if not jit.enabled():
        return
    shapes = [tuple(types[v].shape) for v in op.operands]
    if any(d is None for s in shapes for d in s):
        return  # built at the first run
    prepare_body(op.body, shapes)


def prepare_body(body: Any, shapes: list[tuple]) -> None:
    """Build (or load) the loop of ``body`` for operands of ``shapes`` (static)."""
    lay = sum_layout(body.shape, shapes, body.lead) if body.sums else layout(body.shape, shapes)
    if lay is not None:
        compiled_loop(body, tuple(st[-1] != 0 for st in lay[1]))


# -- what the fusion pass asks (``gradir.backends.base.fusion``: the pass does not import this module) --

_LOOPABLE: dict[tuple[type, int], bool] = {}


def loopable(cls: type, n_operands: int) -> bool:
    """``cls`` has a formula (for ``n_operands``) that calls no transcendental function: a loop
    computes it as fast as its kernel, with its bits."""
    key = (cls, n_operands)
    ok = _LOOPABLE.get(key)
    if ok is None:
        text = formula_of(cls, n_operands)
        ok = _LOOPABLE[key] = text is not None and not formula_lang.is_transcendental(text)
    return ok


def element_function(cls: type, dtype: Any) -> Optional[str]:
    """The element function of ``cls``'s hand-written compiled kernel in ``dtype`` (a fused loop
    calls it and so gives that kernel's bits), or None."""
    return scalar_function(cls, dtype)


def can_fuse(cls: type, n_operands: int, dtype: Any) -> bool:
    """Whether a fused loop can compute ``cls`` in ``dtype`` with its kernel's bits and speed: its
    formula is cheap (``loopable``), its compiled kernel has an element function, or its kernel
    is generated from the formula (then it is this very loop)."""
    if loopable(cls, n_operands) or element_function(cls, dtype) is not None:
        return True
    info = KERNELS.get(cls)
    return info is not None and info.generated


@kernel(FusedElementwiseOp, prepare=_prepare, splits=True)
def fused_elementwise(*operands: np.ndarray, out: Any = None, body: Any) -> Any:
    """Run a fused group (``body``: ``gradir.ops.fused.FusedBody``); returns its results (the
    element-wise ones, then the sums)."""
    n_out = len(body.outputs) + len(body.sums)
    given: list[Optional[np.ndarray]] = list(out) if isinstance(out, tuple) else [out] if n_out == 1 \
        else [None] * n_out
    shape = body.shape
    shapes = [shape] * len(body.outputs) + [sh for _, sh in body.sums]
    if any(o is not None and o.shape != sh for o, sh in zip(given, shapes)) or any(
            np.broadcast_shapes(a.shape, shape) != shape for a in operands):
        raise ValueError(f"FusedElementwise: operands {[a.shape for a in operands]} do not broadcast to the "
                         f"loop's shape {list(shape)}")
    if any(a.dtype != body.dtype for a in operands):
        raise ValueError(f"FusedElementwise: operands {[str(a.dtype) for a in operands]} are not all "
                         f"{body.dtype}")
    outs = [o if o is not None and o.flags.c_contiguous and o.flags.writeable else np.empty(sh, body.dtype)
            for o, sh in zip(given, shapes)]
    if body.sums:
        _run_sums(body, operands, outs[:len(body.outputs)], outs[len(body.outputs):])
    else:
        _run(body, operands, outs)
    for o, g in zip(outs, given):
        if g is not None and g is not o:
            np.copyto(g, o)
    res = [g if g is not None else o for o, g in zip(outs, given)]
    return res[0] if n_out == 1 else tuple(res)


def _run(body: Any, operands: tuple, outs: list) -> None:
    """Fill ``outs`` (C-contiguous, the loop's shape) from ``operands``."""
    if body.numel == 0:
        return
    if not jit.enabled():
        _interpret(body, operands, outs, [])
        return
    shape, n_out = body.shape, len(outs)
    dims, strides = layout(shape, [a.shape for a in operands])
    loop = compiled_loop(body, tuple(st[-1] != 0 for st in strides))
    cols = dims[-1]
    rows = math.prod(dims[:-1])
    ch = min(cols, CHUNK)
    nch = -(-cols // ch)
    oshape = np.array(dims[:-1], np.int64)
    ostr = np.array([st[:-1] for st in strides], np.int64).reshape(len(operands), len(dims) - 1)
    flat_in = [jit.readable(np.ascontiguousarray(a).reshape(-1)) for a in operands]
    flat_out = [o.reshape(-1) for o in outs]
    unit_bytes = ch * body.dtype.itemsize * (len(operands) + n_out)

    def run(u0: int, u1: int) -> None:
        loop(u0, u1, nch, ch, cols, oshape, ostr, 0, *flat_in, *flat_out)

    parallel_rows(rows * nch, unit_bytes, run)


def _run_sums(body: Any, operands: tuple, outs: list, sums: list) -> None:
    """Fill ``outs`` (the loop's shape) and ``sums`` (the sums over the leading axes) from
    ``operands``: one strip of columns per thread (at least ``SUM_MIN_STRIP`` wide), each over
    every row (see ``fused_codegen._sums_source``)."""
    lay = sum_layout(body.shape, [a.shape for a in operands], body.lead)
    if lay is None or not jit.enabled():  # (None: only if called outside the pass's checks)
        _interpret(body, operands, outs, sums)
        return
    dims, strides = lay
    loop = compiled_loop(body, tuple(st[-1] != 0 for st in strides))
    cols = dims[-1]
    rows = math.prod(dims[:-1])
    oshape = np.array(dims[:-1], np.int64)
    ostr = np.array([st[:-1] for st in strides], np.int64).reshape(len(operands), len(dims) - 1)
    flat_in = [jit.readable(np.ascontiguousarray(a).reshape(-1)) for a in operands]
    flat_out = [o.reshape(-1) for o in outs] + [q.reshape(-1) for q in sums]
    # as few strips as keep every thread busy: a column's sum adds its rows in order whatever
    # strip it is in, so (unlike the element-wise loop's grid) the strips may follow the threads
    units = max(1, min(parallel.threads_here(), cols // SUM_MIN_STRIP))
    ch = (-(-cols // units) + 15) // 16 * 16
    units = -(-cols // ch)
    unit_bytes = rows * ch * body.dtype.itemsize * (len(operands) + len(outs))

    def run(u0: int, u1: int) -> None:
        loop(u0, u1, ch, cols, rows, oshape, ostr, 0, *flat_in, *flat_out)

    parallel_rows(units, unit_bytes, run)
