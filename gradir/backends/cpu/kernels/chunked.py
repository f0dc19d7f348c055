"""The kernel of ``Chunked`` (``gradir.ops.chunked``): a row-independent region run block of rows by
block of rows, each member by its own kernel on its operands' blocks.

Blocks are dealt out to ``lanes`` (block ``i`` to lane ``i % lanes``, a fixed number from the shapes);
each lane runs its blocks in order on one core and adds its blocks' partial sums into its own sum; the
lanes' sums are then added in lane order.  One thread runs the lanes one after another, two run them
side by side: the same additions in the same order, so the same bits whatever the cores.  A block's
products go to the same kernels as whole ones (``blocked.matmul``: their bits follow the block's shapes,
which are the same in every run).

A row-indexed result is written block by block into its buffer after the block's members have all run:
when the runtime gives it the buffer of a dying operand of the same shape (in place: the gradient of
the projection's input over the input), each block reads its rows of the operand before its rows of the
result are written, and no block reads another's rows.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from ....ir.op import OPS
from ....ir.types import TensorType
from ....ops.chunked import ChunkedOp, ChunkLayout, Instr
from ....ops.fused import FusedBody
from . import fused, parallel
from .registry import KERNELS, kernel

__all__ = ["chunked"]


def _fused_body(lay: ChunkLayout, ins: Instr, n: int) -> FusedBody:
    """The fused loop of a ``FusedElementwise`` member for a block of ``n`` rows (kept on the layout)."""
    cache = lay.__dict__.setdefault("_bodies", {})
    key = (id(ins.op), n)
    body = cache.get(key)
    if body is None:
        op: Any = ins.op
        t = op.loop_type
        loop = TensorType(t.dtype, lay.block_shape(op.results[0], n))
        body = cache[key] = FusedBody(op.members, op.operands, op.results, loop)
    return body


def _call(lay: ChunkLayout, ins: Instr, args: list, n: int) -> Any:
    op = ins.op
    if op.op_name == "FusedElementwise":
        return fused.fused_elementwise(*args, body=_fused_body(lay, ins, n))
    cls = OPS["ReduceSum"] if ins.kind == "sum" and op.op_name == "ReduceMean" else type(op)
    if ins.kind == "kernel" and op.op_name in _PRODUCTS and args[0].ndim > 2:
        # a batch of row blocks times one matrix: one 2-D product over the rows (NumPy would call BLAS
        # once per matrix of the batch, several times slower), as the whole product's kernel does
        a = args[0]
        res = KERNELS[cls].fn(a.reshape(-1, a.shape[-1]), *args[1:], **op.kernel_attrs())
        return res.reshape(a.shape[:-1] + res.shape[-1:])
    return KERNELS[cls].fn(*args, **op.kernel_attrs())


_PRODUCTS = ("MatMul", "FusedMatMul")


def _run_block(lay: ChunkLayout, whole: dict[str, np.ndarray], outs: dict[str, Optional[np.ndarray]],
               acc: dict[str, np.ndarray], i: int) -> None:
    lo = i * lay.block
    hi = min(lay.rows, lo + lay.block)
    n = hi - lo
    env: dict[str, np.ndarray] = {}

    def get(v: str, rows: bool) -> np.ndarray:
        if v in env:
            return env[v]
        if not rows:
            return whole[v]
        p = lay.periods[v]
        return whole[v][lo // p:hi // p]

    for ins in lay.instrs:
        op = ins.op
        args = [None if v is None else get(v, rows) for v, rows in zip(op.operands, ins.rows)]
        if ins.kind == "view":
            r = op.results[0]
            env[r] = np.reshape(args[0], lay.block_shape(r, n))
            continue
        res = _call(lay, ins, args, n)
        results = res if isinstance(res, tuple) else (res,)
        for v, a in zip(op.results, results):
            if v in lay.sums:
                if v in acc:
                    np.add(acc[v], a, out=acc[v])
                else:
                    acc[v] = np.array(a, dtype=lay.types[v].dtype.numpy, copy=True)
            else:
                env[v] = a
    for v, o in outs.items():
        if o is not None and v not in lay.sums:
            p = lay.periods[v]
            np.copyto(o[lo // p:hi // p], env[v])


@kernel(ChunkedOp, blas=True, inplace=True,
        width=lambda operands, results, attrs: attrs["layout"].lanes if attrs.get("layout") else 1)
def chunked(*operands: np.ndarray, out: Any = None, layout: ChunkLayout) -> Any:
    """Run the region (``layout``) over its blocks; returns its results in order."""
    lay = layout
    n_out = len(lay.outputs)
    given: list[Optional[np.ndarray]] = list(out) if isinstance(out, tuple) else [out] if n_out == 1 \
        else [None] * n_out
    outs: dict[str, Optional[np.ndarray]] = {}
    for v, g in zip(lay.outputs, given):
        t = lay.types[v]
        if g is None and v not in lay.sums:
            g = np.empty(tuple(int(d) for d in t.shape), t.dtype.numpy)
        outs[v] = g
    whole = dict(zip(lay.inputs, operands))
    lanes = lay.lanes
    accs: list[dict[str, np.ndarray]] = [{} for _ in range(lanes)]
    n_blocks = lay.n_blocks

    def lane(k: int) -> None:
        with parallel.cores(1):
            for i in range(k, n_blocks, lanes):
                _run_block(lay, whole, outs, accs[k], i)

    parallel.run_blocks(lanes, lane)
    for v, kind in lay.sums.items():
        if v not in outs:
            continue
        total = accs[0][v]
        for a in accs[1:]:
            if v in a:
                np.add(total, a[v], out=total)
        if kind == "mean":
            count = next(i.count for i in lay.instrs if v in i.op.results)
            np.divide(total, total.dtype.type(count), out=total)
        o = outs[v]
        if o is None:
            outs[v] = total
        else:
            np.copyto(o, total)
    res = [outs[v] for v in lay.outputs]
    return res[0] if n_out == 1 else tuple(res)
