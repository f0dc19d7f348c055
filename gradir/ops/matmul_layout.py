"""``FusedMatMul``'s operand layouts (ONNX Runtime's ``com.microsoft`` op), in one place for its
type rule, its kernel, the compiler pass that makes it and its gradient rule.

``FusedMatMul(A, B, alpha, transA, transB, transBatchA, transBatchB)`` is ``alpha · (A' @ B')``,
NumPy ``matmul`` on the operands as their attributes lay them out.  For an operand of rank
``r >= 2`` (a vector is used as it is, its ``trans`` ignored):

* ``trans``: its last two axes are swapped;
* ``transBatch`` (rank >= 3): its first axis is its matrix row axis, its batch axes are axes
  ``1 .. r-2`` (a ``[B, M, K]`` operand is read as ``[M]`` matrices ``[B, K]``); with ``trans``
  too, the matrix is ``[K, B]``.

That is, the operand ``X'`` is ``Transpose(X, perm=operand_perm(r, trans, transBatch))``, which the
kernel passes to BLAS as a strided view: no transposed copy is made.
"""

from __future__ import annotations

from typing import Any, Optional

__all__ = ["promoted_cotangent", "operand_perm", "perm_to_flags", "fused_matmul_vjp"]


def operand_perm(rank: int, trans: bool, trans_batch: bool) -> Optional[list[int]]:
    """The axes permutation an operand of ``rank`` is read through (``None`` for a vector)."""
    if rank < 2:
        return None
    if trans_batch:
        batch, row, col = list(range(1, rank - 1)), 0, rank - 1
    else:
        batch, row, col = list(range(rank - 2)), rank - 2, rank - 1
    return batch + ([col, row] if trans else [row, col])


def perm_to_flags(perm: list[int]) -> Optional[tuple[int, int]]:
    """``(trans, transBatch)`` whose layout is ``perm``, or ``None`` when no flags give it."""
    r = len(perm)
    if r < 2:
        return None
    for tb in ((0, 1) if r >= 3 else (0,)):
        for t in (0, 1):
            if operand_perm(r, bool(t), bool(tb)) == list(perm):
                return t, tb
    return None


def _inverse(perm: list[int]) -> list[int]:
    inv = [0] * len(perm)
    for k, p in enumerate(perm):
        inv[p] = k
    return inv


def promoted_cotangent(e: Any, dc: str, va: bool, vb: bool) -> str:
    """A product's cotangent with the axes NumPy dropped for vector operands put back (``va``: A was a
    vector, promoted to a row; ``vb``: B, to a column), so both operands' gradients are matrix products."""
    if va and vb:
        return e.Unsqueeze(dc, axes=[0, 1])
    if va:
        return e.Unsqueeze(dc, axes=[-2])
    if vb:
        return e.Unsqueeze(dc, axes=[-1])
    return dc


def fused_matmul_vjp(e: Any, op: Any, cts: list, need: list) -> list:
    """The gradient rule of ``FusedMatMul`` (``e`` is ``gradrules.Emitter``).

    With ``C = alpha · A' @ B'``: ``dA' = alpha · dC @ B'ᵀ`` and ``dB' = alpha · A'ᵀ @ dC``, each one
    ``FusedMatMul`` whose flags absorb the transposes (no ``Transpose`` op for matrices and
    batches of them).  Vectors are promoted as ``MatMul``'s rule does; a ``transBatch`` operand is
    laid out by one explicit ``Transpose`` (and its gradient laid back by another).  Broadcast
    batch axes are summed away by autodiff's driver (``ReduceSumTo``)."""
    a, b = op.operands
    attrs = op.resolved_attrs()
    alpha = float(attrs["alpha"])
    dc = cts[0]
    ra, rb = e.rank(a), e.rank(b)
    va, vb = ra == 1, rb == 1
    dc = promoted_cotangent(e, dc, va, vb)
    # each operand as a matrix (batch) read with a plain trans flag: ta, tb
    ta = bool(attrs["transA"]) and not va
    tb = bool(attrs["transB"]) and not vb
    a2, b2 = (e.Unsqueeze(a, axes=[0]) if va else a), (e.Unsqueeze(b, axes=[-1]) if vb else b)
    perm_a = perm_b = None
    if attrs["transBatchA"] and not va:
        perm_a = operand_perm(ra, ta, True)
        a2, ta = e.transpose(a2, perm_a), False
    if attrs["transBatchB"] and not vb:
        perm_b = operand_perm(rb, tb, True)
        b2, tb = e.transpose(b2, perm_b), False

    def fmm(x: str, y: str, trans_x: bool, trans_y: bool) -> str:
        kw: dict = {}
        if trans_x:
            kw["transA"] = 1
        if trans_y:
            kw["transB"] = 1
        if alpha != 1.0:
            kw["alpha"] = alpha
        return e.FusedMatMul(x, y, **kw)

    da = db = None
    if need[0]:
        # dA' = dC @ B'ᵀ;  with transA, dA = dA'ᵀ = B' @ dCᵀ
        da = fmm(b2, dc, tb, True) if ta else fmm(dc, b2, False, not tb)
        if perm_a is not None:
            if e.shape(da) != e.shape(a2):  # broadcast batch axes: sum them before laying dA back
                da = e.ReduceSumTo(da, a2)
            da = e.transpose(da, _inverse(perm_a))
        if va:
            da = e.ReduceSum(da, axes=[-2])
    if need[1]:
        # dB' = A'ᵀ @ dC;  with transB, dB = dB'ᵀ = dCᵀ @ A'
        db = fmm(dc, a2, True, ta) if tb else fmm(a2, dc, not ta, False)
        if perm_b is not None:
            if e.shape(db) != e.shape(b2):
                db = e.ReduceSumTo(db, b2)
            db = e.transpose(db, _inverse(perm_b))
        if vb:
            db = e.ReduceSum(db, axes=[-1])
    return [da, db]
