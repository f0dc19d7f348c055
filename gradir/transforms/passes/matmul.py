"""Rewrites of matrix products (``FusedMatMul``'s layouts: ``gradir.ops.matmul_layout``).

* ``fold-transpose-matmul``: a ``Transpose`` feeding a floating-point ``MatMul`` (or
  ``FusedMatMul``) becomes the product's ``transA``/``transB``/``transBatchA``/``transBatchB``
  where one layout says the same, so the kernel reads the operand in place and no transposed copy
  is made.  The ``Transpose`` itself goes (``dce``) when nothing else reads it.
* ``flatten-batched-matmul``: a batched product whose only reader sums it over all its batch
  axes (``ReduceSumTo``, the weight gradient of a batched ``MatMul``) is one 2-D product over the
  flattened rows: ``Σ_b A_bᵀ·B_b = Aᵀ·B`` with ``A`` and ``B`` reshaped to ``[batch·rows, cols]``
  (a ``Reshape`` of each operand, which the layouts make contiguous), then one ``FusedMatMul``.
* ``fold-product-transpose``: a ``Transpose`` of the last two axes of a product that only it reads
  is the product of the swapped operands, each transposed: ``(A·B)ᵀ = Bᵀ·Aᵀ`` (flags only, no
  copy).  A tied embedding's gradient is one: the projection ``h · Wᵀ`` gives ``hᵀ·dY`` [C, V],
  which the gradient of the ``Transpose`` copied to the table's [V, C] (159 ms of a 7 s GPT-block
  step on a loaded machine); ``dYᵀ·h`` writes [V, C] directly.

The sums are the same products added in another order (the 2-D product sums each element in one
BLAS call; the batched one per batch, then across), so results agree to rounding: the tests hold
them within 2·K·eps·Σ|a·b|.  A transposed operand read in place gives the product's bits where
BLAS runs the same kernel for both layouts (large matrices, OpenBLAS); a matrix-vector shape or a
small product can take another kernel (gemv, a small-matrix kernel) that sums in another order.
"""

from __future__ import annotations

from typing import Optional

from ...ir.op import Op
from ...ops.matmul_layout import operand_perm, perm_to_flags
from .pipeline import Program, register_pass
from .rewrite import Sweep
from .simplify import transpose_perm

__all__ = ["fold_transpose_matmul", "flatten_batched_matmul", "fold_product_transpose"]

_FLAGS = {0: ("transA", "transBatchA"), 1: ("transB", "transBatchB")}


def _attrs(op: Op) -> dict:
    return dict(op.resolved_attrs()) if op.op_name == "FusedMatMul" else {
        "alpha": 1.0, "transA": 0, "transB": 0, "transBatchA": 0, "transBatchB": 0}


def _perm(attrs: dict, side: int, rank: int) -> Optional[list[int]]:
    t, tb = _FLAGS[side]
    return operand_perm(rank, bool(attrs[t]), bool(attrs[tb]))


@register_pass("fold-transpose-matmul", "a Transpose feeding a MatMul becomes a FusedMatMul transA/transB/"
                                        "transBatch flag: the operand is read in place, no transposed copy")
def fold_transpose_matmul(p: Program) -> str:
    sw = Sweep(p)
    folded = 0
    for op in sw:
        if op.op_name not in ("MatMul", "FusedMatMul") or not sw.type(op.results[0]).dtype.is_float:
            continue
        attrs, operands, n = _attrs(op), list(op.operands), 0
        for side in (0, 1):
            while True:  # a chain of Transposes folds one by one
                tr = sw.made_by(operands[side], "Transpose")
                rank = sw.type(operands[side]).rank
                q = _perm(attrs, side, rank)
                if tr is None or q is None:
                    break
                p0 = transpose_perm(tr, rank)
                flags = perm_to_flags([p0[k] for k in q])
                if flags is None:
                    break
                attrs[_FLAGS[side][0]], attrs[_FLAGS[side][1]] = flags
                operands[side] = tr.operands[0]
                n += 1
        if not n:
            continue
        folded += n
        sw.release(op)
        sw.keep(sw.new("FusedMatMul", operands, _clean(attrs), op.results[0], like=op))
    return sw.finish("folded", folded, "Transpose")


def _clean(attrs: dict) -> dict:
    """The attributes that differ from their defaults (the printed form)."""
    return {k: v for k, v in attrs.items() if v != (1.0 if k == "alpha" else 0)}


def _flat_layout(perm: list[int], keep_row: bool) -> Optional[tuple[bool, bool]]:
    """How an operand laid out by ``perm`` flattens (batch axes and the contracted axis merged into
    one axis of rows, in order, by a Reshape of its storage): ``(kept axis first, ok)`` or None.
    ``keep_row``: the kept axis is the matrix row (A) or column (B)."""
    batch = perm[:-2]
    kept, contracted = (perm[-2], perm[-1]) if keep_row else (perm[-1], perm[-2])
    run = batch + [contracted]
    r = len(perm)
    if kept == 0 and run == list(range(1, r)):
        return True, True
    if kept == r - 1 and run == list(range(r - 1)):
        return False, True
    return None


@register_pass("flatten-batched-matmul", "a batched MatMul summed over its batch axes (ReduceSumTo) becomes one "
                                         "2-D product over the flattened rows")
def flatten_batched_matmul(p: Program) -> str:
    sw = Sweep(p)
    flattened = 0
    for op in sw:
        if op.op_name != "ReduceSumTo":
            continue
        x, like = op.operands
        mm = sw.made_by(x, "MatMul", "FusedMatMul")
        if mm is None or not sw.only_use(x) or not sw.type(x).dtype.is_float:
            continue
        a, b = mm.operands
        ta, tb, tx, ty = sw.type(a), sw.type(b), sw.type(x), sw.type(op.results[0])
        if not (ta.is_static and tb.is_static and ty.is_static) or ta.rank < 3 or ta.rank != tb.rank:
            continue
        attrs = _attrs(mm)
        pa, pb = _perm(attrs, 0, ta.rank), _perm(attrs, 1, tb.rank)
        la, lb = [ta.shape[k] for k in pa], [tb.shape[k] for k in pb]
        m, n = tx.shape[-2], tx.shape[-1]
        # every batch axis summed (no broadcasting between the operands), the matrix axes kept
        if la[:-2] != lb[:-2] or list(ty.shape[-2:]) != [m, n] or any(d != 1 for d in ty.shape[:-2]):
            continue
        fa, fb = _flat_layout(pa, True), _flat_layout(pb, False)
        if fa is None or fb is None:
            continue
        rows = la[-1]  # batch · contracted
        for d in la[:-2]:
            rows *= d
        a2 = sw.new("Reshape", [a], {"shape": [m, rows] if fa[0] else [rows, m]}, like=mm)
        b2 = sw.new("Reshape", [b], {"shape": [n, rows] if fb[0] else [rows, n]}, like=mm)
        new = dict(alpha=attrs["alpha"], transA=int(not fa[0]), transB=int(fb[0]))
        sw.release(op)
        sw.release(mm)
        sw.keep(a2)
        sw.keep(b2)
        r = op.results[0]
        if ty.rank == 2:
            sw.keep(sw.new("FusedMatMul", [a2.results[0], b2.results[0]], _clean(new), r, like=mm))
        else:
            prod = sw.new("FusedMatMul", [a2.results[0], b2.results[0]], _clean(new), like=mm)
            sw.keep(prod)
            sw.keep(sw.new("Reshape", [prod.results[0]], {"shape": list(ty.shape)}, r, like=op))
        flattened += 1
    return sw.finish("flattened", flattened, "batched product")


@register_pass("fold-product-transpose", "a Transpose of a product's last two axes becomes the product of the swapped, "
                                         "transposed operands ((A B)^T = B^T A^T): no copy")
def fold_product_transpose(p: Program) -> str:
    sw = Sweep(p)
    folded = 0
    for op in sw:
        if op.op_name != "Transpose":
            continue
        x = op.operands[0]
        mm = sw.made_by(x, "MatMul", "FusedMatMul")
        if mm is None or not sw.only_use(x) or not sw.type(x).dtype.is_float:
            continue
        rank = sw.type(x).rank
        a, b = mm.operands
        attrs = _attrs(mm)
        if rank < 2 or attrs["transBatchA"] or attrs["transBatchB"] or \
                transpose_perm(op, rank) != list(range(rank - 2)) + [rank - 1, rank - 2] or \
                sw.type(a).rank < 2 or sw.type(b).rank < 2:
            continue  # 1-D operands (promoted) and batch-transposed layouts: left as they are
        new = dict(alpha=attrs["alpha"], transA=1 - attrs["transB"], transB=1 - attrs["transA"])
        sw.release(mm)
        sw.fold_into_producer(x, sw.new("FusedMatMul", [b, a], _clean(new), op.results[0], like=mm))
        folded += 1
    return sw.finish("folded", folded, "transposed product")
