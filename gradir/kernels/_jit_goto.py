"""A compiled GEMM with both operands packed (the Goto/BLIS loop order), for large products
whose left operand is a transposed view: the weight gradients ``Xᵀ·dY`` of a layer.

``_jit_gemm`` reads ``A`` in place and packs all of ``B`` once: right for the LSTM loops' short
products, whose ``B`` is small.  A weight gradient's ``A`` is a transposed view (its rows are
columns in memory) and both operands are large, so here (``gemm``):

- ``B`` is packed a ``KC x NC`` block at a time into panels of ``PW`` columns (16 float32 or 8
  float64), ``A`` an ``MC x KC`` block at a time into tiles of 6 rows, ``k`` by ``k`` (for a
  transposed ``A`` the 6 values of one ``k`` are next to each other in memory: a cheap copy);
- the micro-kernel (LLVM IR through a numba ``intrinsic``, as in ``_jit_gemm``) computes a 6 x
  PW tile with 12 vector accumulators, fused multiply-adds in ``k`` order from zero; across
  ``KC`` blocks it stores the tile and loads it back, which changes no bit.  Every element of
  ``C`` is one fixed chain of FMAs over ``k``, whatever the blocking, the rows or columns around
  it and the thread that computes it: the bits depend on nothing but the operands.

Measured on Zen 4 (one core, float32): ``Hᵀ·dY`` at 4096x512 by 512x1024 ran at 111 GFLOP/s
against OpenBLAS's 99-100, ``Xᵀ·dZ`` at 1024x512 by 512x4096 at 110 against 98-104; on two cores,
one half each, 211 and 208 against 189-190 GFLOP/s for OpenBLAS's single-threaded halves.
The buffers (``MC x KC`` and ``KC x NC``) are the caller's, reused from call to call.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from ._jit_gemm import data, vectors

__all__ = ["MR", "MC", "KC", "NC", "gemm", "buffers"]

MR = 6  # rows per register tile
MC = 96  # rows of A per packed block: 96 x KC x 4 bytes = 192 KB sits in L2 beside B's panel
KC = 512  # the reduction per block: a panel of B (KC x 16 float32, 32 KB) is read from L1/L2
NC = 4096  # columns of B per packed block (8 MB of float32 at most, read from L3)
_OPTS = dict(nogil=True, cache=True, boundscheck=False, error_model="numpy")


def buffers(dtype: np.dtype) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Packing buffers for ``gemm`` in ``dtype``: A's block, B's block, one edge tile."""
    pw = 16 if np.dtype(dtype) == np.float32 else 8
    return (np.empty((MC + MR - 1) // MR * MR * KC, dtype), np.empty((NC + pw - 1) // pw * pw * KC, dtype),
            np.empty((MR, pw), dtype))


@intrinsic
def _micro(typingctx, Ap, a_off, Bp, b_off, C, c_off, ldc, kc, acc):  # type: ignore[no-untyped-def]
    """``C[c_off + r·ldc + c] (+)= Σ_k Ap[a_off + 6k + r] · Bp[b_off + PW·k + c]`` for the 6 x PW
    tile (loaded from ``C`` first when ``acc`` is not 0, else from zero)."""
    if not (isinstance(Ap, types.Array) and Ap.dtype in (types.float32, types.float64)
            and isinstance(Bp, types.Array) and Bp.dtype == Ap.dtype
            and isinstance(C, types.Array) and C.dtype == Ap.dtype):
        return None
    sig = types.void(Ap, types.intp, Bp, types.intp, C, types.intp, types.intp, types.intp, types.intp)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        ap_arr, a_off, bp_arr, b_off, c_arr, c_off, ldc, kc, accf = args
        vec, vw, al, fma = vectors(builder, signature.args[0].dtype == types.float32)
        i32, i64 = ir.IntType(32), ir.IntType(64)
        a_data, b_data, c_data = (data(context, builder, signature.args[j], args[j]) for j in (0, 2, 4))

        def c64(v: int) -> ir.Constant:
            return ir.Constant(i64, v)

        zero = ir.Constant(vec, [0.0] * vw)
        crow = [builder.gep(c_data, [builder.add(c_off, builder.mul(c64(r), ldc))]) for r in range(MR)]
        cptr = [[builder.bitcast(builder.gep(crow[r], [c64(vw * c)]), vec.as_pointer()) for c in range(2)]
                for r in range(MR)]
        accs = [[cgutils.alloca_once_value(builder, zero) for _ in range(2)] for _ in range(MR)]
        with builder.if_then(builder.icmp_signed("!=", accf, c64(0))):
            for r in range(MR):
                for c in range(2):
                    builder.store(builder.load(cptr[r][c], align=al), accs[r][c])
        abase = builder.gep(a_data, [a_off])
        bbase = builder.gep(b_data, [b_off])
        splat = ir.Constant(ir.VectorType(i32, vw), [0] * vw)
        with cgutils.for_range(builder, kc) as loop:
            k = loop.index
            bk = builder.gep(bbase, [builder.mul(k, c64(2 * vw))])
            ak = builder.gep(abase, [builder.mul(k, c64(MR))])
            bv = [builder.load(builder.bitcast(builder.gep(bk, [c64(vw * c)]), vec.as_pointer()), align=al)
                  for c in range(2)]
            for r in range(MR):
                x = builder.load(builder.gep(ak, [c64(r)]))
                xv = builder.insert_element(ir.Constant(vec, ir.Undefined), x, ir.Constant(i32, 0))
                xv = builder.shuffle_vector(xv, ir.Constant(vec, ir.Undefined), splat)
                for c in range(2):
                    builder.store(builder.call(fma, [xv, bv[c], builder.load(accs[r][c])]), accs[r][c])
        for r in range(MR):
            for c in range(2):
                builder.store(builder.load(accs[r][c]), cptr[r][c], align=al)
        return context.get_dummy_value()

    return sig, codegen


@njit(**_OPTS)
def _pack_a(A, Ap3, mc, k0, kc):  # type: ignore[no-untyped-def]
    """``Ap3[t, k, r] = A[6t + r, k0 + k]`` for the block's ``mc`` rows (zero rows past them)."""
    mt = (mc + MR - 1) // MR
    along_k = A.strides[1] <= A.strides[0]
    for t in range(mt):
        i = t * MR
        if i + MR <= mc and along_k:  # each row read along k
            for r in range(MR):
                row = A[i + r, k0:k0 + kc]
                for k in range(kc):
                    Ap3[t, k, r] = row[k]
        elif i + MR <= mc:  # a transposed A: the 6 values of one k are adjacent
            for k in range(kc):
                for r in range(MR):
                    Ap3[t, k, r] = A[i + r, k0 + k]
        else:
            for k in range(kc):
                for r in range(MR):
                    Ap3[t, k, r] = A[i + r, k0 + k] if i + r < mc else 0


@njit(**_OPTS)
def _pack_b(B, Bp3, k0, kc, j0, nc):  # type: ignore[no-untyped-def]
    """``Bp3[p, k, c] = B[k0 + k, j0 + p·PW + c]`` for the block's ``nc`` columns (zero past them)."""
    pw = Bp3.shape[2]
    npan = (nc + pw - 1) // pw
    full = nc // pw
    along_n = B.strides[1] <= B.strides[0]
    if along_n:  # each row of B read once, across the panels
        for k in range(kc):
            row = B[k0 + k, j0:j0 + full * pw]
            for p in range(full):
                for c in range(pw):
                    Bp3[p, k, c] = row[p * pw + c]
    else:  # a transposed B: each column read along k
        for p in range(full):
            for c in range(pw):
                col = B[k0:k0 + kc, j0 + p * pw + c]
                for k in range(kc):
                    Bp3[p, k, c] = col[k]
    for p in range(full, npan):
        for k in range(kc):
            for c in range(pw):
                j = p * pw + c
                Bp3[p, k, c] = B[k0 + k, j0 + j] if j < nc else 0


# One machine-code variant per dtype, compiled (or loaded from numba's cache) at import: operands
# of any layout (transposed views, column slices) all take it, so no run compiles a new one.
_SIGS = [f"void({t}[:, :], {t}[:, :], {t}[:, :], {t}[::1], {t}[::1], {t}[:, ::1])" for t in ("float32", "float64")]


@njit(_SIGS, **_OPTS)
def gemm(A, B, C, Ap, Bp, tmp):  # type: ignore[no-untyped-def]
    """``C = A·B``: ``A`` ``[M, K]`` and ``B`` ``[K, N]`` with any strides, ``C`` ``[M, N]`` with
    unit column stride, one dtype; ``Ap``, ``Bp``, ``tmp`` from ``buffers``."""
    M, K = A.shape
    N = B.shape[1]
    pw = tmp.shape[1]
    ldc = C.strides[0] // C.itemsize
    for j0 in range(0, N, NC):
        nc = min(NC, N - j0)
        npan = (nc + pw - 1) // pw
        for k0 in range(0, K, KC):
            kc = min(KC, K - k0)
            accf = 1 if k0 > 0 else 0
            _pack_b(B, Bp[:npan * kc * pw].reshape((npan, kc, pw)), k0, kc, j0, nc)
            for i0 in range(0, M, MC):
                mc = min(MC, M - i0)
                mt = (mc + MR - 1) // MR
                _pack_a(A[i0:i0 + mc], Ap[:mt * kc * MR].reshape((mt, kc, MR)), mc, k0, kc)
                for p in range(npan):
                    jj = j0 + p * pw
                    ncols = min(pw, N - jj)
                    for t in range(mt):
                        i = i0 + t * MR
                        rows = min(MR, mc - t * MR)
                        if ncols == pw and rows == MR:
                            _micro(Ap, t * kc * MR, Bp, p * kc * pw, C, i * ldc + jj, ldc, kc, accf)
                            continue
                        for r in range(MR):  # an edge tile: through ``tmp``
                            for c in range(pw):
                                tmp[r, c] = C[i + r, jj + c] if accf and r < rows and c < ncols else 0
                        _micro(Ap, t * kc * MR, Bp, p * kc * pw, tmp, 0, pw, kc, accf)
                        for r in range(rows):
                            for c in range(ncols):
                                C[i + r, jj + c] = tmp[r, c]
