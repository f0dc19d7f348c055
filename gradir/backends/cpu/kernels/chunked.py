"""The kernel of ``Chunked`` (``gradir.ops.chunked``): a row-independent region run block of rows by
block of rows, each member by its own kernel on its operands' blocks.

The rows are cut into ``lanes`` contiguous runs of pieces of ``sub`` rows (both fixed by the shapes); each
lane runs its rows on one core, ``block`` rows at a time, and adds its pieces' partial sums into its own
sum, piece after piece; the lanes' sums are then added in lane order.  One thread runs the lanes one
after another, two run them side by side: the same additions in the same order, so the same bits
whatever the cores, and whatever ``block`` (the budget's choice).  A row's values come from the same
kernels on the same row whatever the block: the products of a block by one matrix run on the packed-panel
GEMM, whose elements are each one fixed sum over K, or on BLAS on the piece (the sums' products).

A row-indexed result is written block by block straight into its buffer; were that buffer an operand's
(a caller's ``out``), the block is staged and written after the block's members have all run: each block
reads its rows of the operand before its rows of the result are written, and no block reads another's
rows.  (The kernel is not marked ``inplace``; it declares those pairs, ``_donate``: the plan writes such a
result over an operand that dies at the region, the gradient ``dH`` over ``HAll`` of a checkpointed LSTM LM.)
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from ....ir.op import OPS
from ....ir.types import TensorType
from ....ops.chunked import ChunkedOp, ChunkLayout, Instr
from ....ops.fused import FusedBody
from . import blocked, fused, jit, loss, parallel
from .registry import KERNELS, kernel

__all__ = ["chunked"]


def _fused_body(lay: ChunkLayout, ins: Instr, n: int) -> FusedBody:
    """The fused loop of a ``FusedElementwise`` member for a block of ``n`` rows (kept on the layout)."""
    cache = lay.__dict__.setdefault("_bodies", {})
    key = (ins.op.results[0], n)  # (names, not ids: a layout may be unpickled)
    body = cache.get(key)
    if body is None:
        op: Any = ins.op
        t = op.loop_type
        loop = TensorType(t.dtype, lay.block_shape(op.results[0], n))
        body = cache[key] = FusedBody(op.members, op.operands, op.results, loop)
    return body


def _call(lay: ChunkLayout, ins: Instr, args: list, n: int, out: Optional[np.ndarray] = None,
          packed: Any = None) -> Any:
    """Run member ``ins`` on a block of ``n`` rows (into ``out``, the block of its result, if given); ``packed``
    is what the call prepared for it: a product's packed B (``_pack``), a cross-entropy gradient's scale."""
    op = ins.op
    if op.op_name == "FusedElementwise":
        return fused.fused_elementwise(*args, out=out, body=_fused_body(lay, ins, n))
    if op.op_name == "SoftmaxCrossEntropyLossGrad" and not ins.rows[0]:
        # a reduced dY: scaled once over every row's targets (``_ce_scale``), then each block as a "sum"
        attrs = dict(op.kernel_attrs(), reduction="sum")
        return KERNELS[type(op)].fn(packed, *args[1:], out=out, **attrs)
    cls = OPS["ReduceSum"] if ins.kind == "sum" and op.op_name == "ReduceMean" else type(op)
    if ins.kind == "kernel" and op.op_name in _PRODUCTS:
        # one 2-D product over the block's rows (NumPy would call BLAS once per matrix of a batch,
        # several times slower), as the whole product's kernel does
        a = args[0]
        a2 = a.reshape(-1, a.shape[-1])
        if packed is not None:  # the packed-panel GEMM, B packed once for every block
            jg, bp, cols = packed
            o2 = out.reshape(-1, cols) if out is not None else np.empty((a2.shape[0], cols), a.dtype)
            jg.gemm(jit.readable(a2), bp, o2)
            alpha = op.attrs.get("alpha", 1.0)
            if alpha != 1.0:
                np.multiply(o2, o2.dtype.type(alpha), out=o2)
        else:
            o2 = KERNELS[cls].fn(a2, *args[1:], out=None if out is None else out.reshape(a2.shape[0], -1),
                                 **op.kernel_attrs())
        return o2.reshape(a.shape[:-1] + o2.shape[-1:]) if out is None else out
    return KERNELS[cls].fn(*args, out=out, **op.kernel_attrs())


_PRODUCTS = ("MatMul", "FusedMatMul")


def _pack(ins: Instr, whole: dict[str, np.ndarray]) -> Any:
    """``(gemm module, packed B, columns)`` when a product's blocks should run on the packed-panel GEMM
    (``blocked``'s rule for row blocks: a short reduction, a small B), else None.  Its elements are each one
    fixed sum over K whatever the rows of the block: the bits follow the shapes."""
    op = ins.op
    if ins.kind != "kernel" or op.op_name not in _PRODUCTS or op.attrs.get("transA", 0):
        return None
    a, b = whole.get(op.operands[0]), whole[op.operands[1]]
    b2 = b.T if op.attrs.get("transB", 0) else b
    K, N = b2.shape
    if (b.dtype not in (np.float32, np.float64) or (a is not None and a.dtype != b.dtype)
            or K > blocked.PACKED_MAX_K or K * N * b.itemsize > blocked.PACKED_MAX_B_BYTES):
        return None
    jg = jit.load("gemm")
    if jg is None or not jg.FAST_LARGE:
        return None
    return jg, jg.pack(b2), N


def _run_block(lay: ChunkLayout, whole: dict[str, np.ndarray], outs: dict[str, Optional[np.ndarray]],
               direct: set[str], packs: dict[int, Any], acc: dict[str, np.ndarray], scratch: dict[str, np.ndarray],
               lo: int, hi: int) -> None:
    """Rows ``[lo, hi)`` (whole pieces of ``lay.sub`` rows): every member on the block; a sum piece by piece."""
    n = hi - lo
    env: dict[str, np.ndarray] = {}

    def get(v: str, rows: bool) -> np.ndarray:
        if v in env:
            return env[v]
        if not rows:
            return whole[v]
        p = lay.periods[v]
        return whole[v][lo // p:hi // p]

    for k, ins in enumerate(lay.instrs):
        op = ins.op
        args = [None if v is None else get(v, rows) for v, rows in zip(op.operands, ins.rows)]
        if ins.kind == "view":
            r = op.results[0]
            env[r] = np.reshape(args[0], lay.block_shape(r, n))
            continue
        if ins.kind == "sum":  # one partial sum per piece, added in order: the bits of any block size
            v = op.results[0]
            for s_lo in range(0, n, lay.sub):
                s_hi = min(n, s_lo + lay.sub)
                piece = [a if a is None or not rows else a[s_lo // lay.periods[u]:s_hi // lay.periods[u]]
                         for a, rows, u in zip(args, ins.rows, op.operands)]
                part = _call(lay, ins, piece, s_hi - s_lo, scratch.get(v), packs.get(k))
                if v in acc:
                    np.add(acc[v], part, out=acc[v])
                else:
                    acc[v] = np.array(part, dtype=lay.types[v].dtype.numpy, copy=True)
            continue
        target = None
        if len(op.results) == 1:
            r = op.results[0]
            if r in direct:  # written straight into the result's buffer
                o = outs[r]
                assert o is not None
                target = o[lo // lay.periods[r]:hi // lay.periods[r]]
            elif r in scratch:  # the lane's buffer for it, reused block after block (no page faults)
                target = scratch[r][:n // lay.periods[r]]
        res = _call(lay, ins, args, n, target, packs.get(k))
        for v, a in zip(op.results, res if isinstance(res, tuple) else (res,)):
            env[v] = a
    for v, o in outs.items():
        if o is not None and v not in lay.sums and v not in direct:
            p = lay.periods[v]
            np.copyto(o[lo // p:hi // p], env[v])


def _ce_scale(lay: ChunkLayout, op: Any, whole: dict[str, np.ndarray]) -> np.ndarray:
    """The factor ``SoftmaxCrossEntropyLossGrad`` multiplies every row by for a reduced ``dY``: ``dY`` ("sum"), or
    ``dY`` over the targets not ignored (their weights' sum, left to right): the kernel's own formula, so a
    block run as "sum" with it gives the whole kernel's bits."""
    dy, label = whole[op.operands[0]], whole[op.operands[2]]
    weight = whole.get(op.operands[3]) if len(op.operands) > 3 and op.operands[3] is not None else None
    shape = tuple(int(d) for d in lay.types[op.operands[1]].shape)  # log_prob's: made block by block
    dtype = dy.dtype
    s = dy[()]
    if op.attrs.get("reduction", "mean") == "mean":
        ignore = op.attrs.get("ignore_index")
        lab, keep = loss.targets("SoftmaxCrossEntropyLossGrad", label, shape[0], shape[1],
                                 -1 if ignore is None else ignore, "log_prob")
        if weight is not None:
            chosen = weight[lab[keep]]
            total = np.cumsum(chosen, dtype=dtype)[-1] if chosen.size else dtype.type(0)
        else:
            total = dtype.type(np.count_nonzero(keep))
        if total != 0:
            s = np.divide(s, total, dtype=dtype)
    return np.asarray(s, dtype)


def _scratch(lay: ChunkLayout, direct: set[str]) -> dict[str, np.ndarray]:
    """A lane's buffers: a full block of each value its members make one at a time (single-result
    kernels), and each partial sum."""
    out: dict[str, np.ndarray] = {}
    for ins in lay.instrs:
        if ins.kind == "view" or len(ins.op.results) != 1 or ins.op.results[0] in direct:
            continue
        v = ins.op.results[0]
        t = lay.types[v]
        shape = tuple(int(d) for d in t.shape) if v in lay.sums else lay.block_shape(v, lay.block)
        if len(shape):
            out[v] = np.empty(shape, t.dtype.numpy)
    return out


def _donate(operands: Any, results: Any, attrs: Any) -> list[tuple[int, int]]:
    """``KernelInfo.donate``: a row-indexed result may be written over a row-indexed operand of the same type
    that every member reads by its rows only (a block's rows of it are read by that block alone, before the
    block's rows of the result are written: staged, see ``_run_block``)."""
    lay: Optional[ChunkLayout] = attrs.get("layout")
    if lay is None:
        return []
    whole = {v for ins in lay.instrs for v, rows in zip(ins.op.operands, ins.rows) if v is not None and not rows}
    return [(j, i) for j, r in enumerate(lay.outputs) if r not in lay.sums and r in lay.periods
            for i, v in enumerate(lay.inputs) if v in lay.periods and v not in whole
            and lay.types[v] == lay.types[r] and lay.periods[v] == lay.periods[r]]


@kernel(ChunkedOp, blas=True, donate=_donate,
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
    # a result written in place over an operand is staged per block (the block's members read the
    # operand's rows first); the others are written straight into their buffers
    # (a result that is a view of a member's block, ``dH = Reshape(dH2)``, is copied from it: only a member's
    # own kernel writes straight into a buffer)
    viewed = {ins.op.results[0] for ins in lay.instrs if ins.kind == "view"}
    direct = {v for v, o in outs.items() if o is not None and v not in lay.sums and v not in viewed
              and not any(np.shares_memory(o, x) for x in operands if isinstance(x, np.ndarray))}
    packs = {k: pk for k, ins in enumerate(lay.instrs) if (pk := _pack(ins, whole)) is not None}
    for k, ins in enumerate(lay.instrs):  # (per call: two runs of one plan may run at once)
        if ins.op.op_name == "SoftmaxCrossEntropyLossGrad" and not ins.rows[0]:
            packs[k] = _ce_scale(lay, ins.op, whole)
    spans = lay.lane_rows()
    accs: list[dict[str, np.ndarray]] = [{} for _ in spans]

    def lane(k: int) -> None:
        scratch = _scratch(lay, direct)
        lo, hi = spans[k]
        with parallel.cores(1):
            for b in range(lo, hi, lay.block):
                _run_block(lay, whole, outs, direct, packs, accs[k], scratch, b, min(hi, b + lay.block))

    parallel.run_blocks(len(spans), lane)
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
