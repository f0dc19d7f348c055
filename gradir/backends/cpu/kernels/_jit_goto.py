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
The buffers (``MC x KC`` and ``KC x NC``, with padding) are the caller's, reused from call to call.  Tiles and
panels are packed ``_PAD`` elements apart (at multiples of 4 KB, one ``k``'s values of every tile
shared one L1 set: packing A for one LSTM half went from 1.55 to 0.89 ms), with 8-wide vector
copies where the source is contiguous.  ``gemm2`` computes two products of one ``A`` (an LSTM's
``dW = daᵀ·X`` and ``dR = daᵀ·H_{t-1}``), packing each block of ``A`` once for both, or none of
it when ``A`` was packed ahead (``Apre``, ``prepacked_size``): an LSTM's step loops write each
step's ``da`` straight into that layout (``stream_packed``), and the product only reads it.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from ._jit_core import INLINE, prefetch_span, stream32, vector_copy
from ._jit_gemm import data, vectors

__all__ = ["MR", "MC", "KC", "NC", "gemm", "gemm_acc", "gemm2", "fits2", "buffers", "prepacked_size", "stream_packed",
           "unpacked"]

MR = 6  # rows per register tile
MC = 96  # rows of A per packed block: 96 x KC x 4 bytes = 192 KB sits in L2 beside B's panel
KC = 512  # the reduction per block: a panel of B (KC x 16 float32, 32 KB) is read from L1/L2
NC = 4096  # columns of B per packed block (8 MB of float32 at most, read from L3)
_OPTS = dict(nogil=True, cache=True, boundscheck=False, error_model="numpy")


def buffers(dtype: np.dtype) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Packing buffers for ``gemm`` in ``dtype``: A's block, B's block, one edge tile."""
    pw = 16 if np.dtype(dtype) == np.float32 else 8
    return (np.empty((MC + MR - 1) // MR * (MR * KC + _PAD), dtype),
            np.empty((NC + pw - 1) // pw * (pw * KC + _PAD), dtype), np.empty((MR, pw), dtype))


# Rows (values of k) ahead that packing asks for: the operands come from memory, and each k's
# piece of a transposed A is in a page of its own, where the hardware's prefetchers do not
# follow (an LSTM's gemm2: 33.5 -> 32.9 ms on two threads, measured alternating; 8 and 16 alike).
_AHEAD = 16

# Elements between packed tiles (and panels): without them every tile (panel) starts at a
# multiple of 4 KB, so one k's 6 (16) values of all of them share one set of the L1 cache
# (8 ways) and packing misses it all the time.  They also take the 2 values a tile's last
# ``_copy8`` writes past it.
_PAD = 16


def prepacked_size(M: int, K: int) -> int:
    """Elements of an ``[M, K]`` left operand packed ahead (``gemm2``'s ``Apre``): for each
    block of ``KC`` values of ``k`` (the last one shorter), the ``nt = ceil(M/6)`` tiles of the
    block one after the other, ``6·kc`` elements each (tile ``T`` of block ``b``, ``kc`` wide, at
    ``6·(b·nt·KC + T·kc)``; its ``k``-th 6 values at ``6k`` within), zeros for rows past ``M``:
    ``6·nt·K``, at most ``5K`` more than ``A``.  (No padding between tiles: it is read one tile
    after the other, never across them as ``_pack_a`` writes.)"""
    return MR * ((M + MR - 1) // MR) * K


def unpacked(pk: np.ndarray, M: int, K: int, k0: int, k1: int) -> np.ndarray:
    """Values ``k0 .. k1-1`` of ``k`` of an ``[M, K]`` operand packed ahead (``prepacked_size``),
    as the rows of a new ``[k1-k0, M]`` array (the operand's transpose)."""
    nt = (M + MR - 1) // MR
    out = np.empty((k1 - k0, nt * MR), pk.dtype)
    k = k0
    while k < k1:
        kb, kk = divmod(k, KC)
        kc = min(KC, K - kb * KC)
        n = min(k1 - k, kc - kk)
        base = kb * nt * MR * KC
        blk = pk[base: base + nt * MR * kc].reshape(nt, MR * kc)[:, MR * kk: MR * (kk + n)]
        out[k - k0: k - k0 + n] = blk.reshape(nt, n, MR).transpose(1, 0, 2).reshape(n, nt * MR)
        k += n
    return out[:, :M]


# ``_copy8(dst, d_off, src, s_off)``: 8 values as one unaligned vector load and store
_copy8 = vector_copy(8, 8, nontemporal=False)


def _joined(first: int):  # type: ignore[no-untyped-def]
    """An intrinsic ``join(dst, d_off, src, o1, o2)``: the 32-byte vector whose first ``first``
    values are ``src[o1:]``'s and the rest ``src[o2:]``'s (at the same places: two unaligned
    loads and a blend), stored to ``dst[d_off:]`` by a non-temporal store (32-byte aligned)."""
    def typer(typingctx, dst, d_off, src, o1, o2):  # type: ignore[no-untyped-def]
        if not (isinstance(dst, types.Array) and isinstance(src, types.Array) and dst.dtype == src.dtype
                and dst.dtype in (types.float32, types.float64)):
            return None
        sig = types.void(dst, types.intp, src, types.intp, types.intp)

        def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
            d_arr, d_off, s_arr, o1, o2 = args
            f32 = signature.args[0].dtype == types.float32
            lanes = 8 if f32 else 4
            vec = ir.VectorType(ir.FloatType() if f32 else ir.DoubleType(), lanes)
            al = 4 if f32 else 8
            d_data, s_data = data(context, builder, signature.args[0], d_arr), data(context, builder,
                                                                                  signature.args[2], s_arr)
            a, b = (builder.load(builder.bitcast(builder.gep(s_data, [o]), vec.as_pointer()), align=al)
                    for o in (o1, o2))
            f = min(first, lanes)  # (float64's join4 and join6 are typed, never run)
            mask = ir.Constant(ir.VectorType(ir.IntType(32), lanes), [*range(f), *range(lanes + f, 2 * lanes)])
            st = builder.store(builder.shuffle_vector(a, b, mask),
                               builder.bitcast(builder.gep(d_data, [d_off]), vec.as_pointer()), align=32)
            st.set_metadata("nontemporal", builder.module.add_metadata([ir.Constant(ir.IntType(32), 1)]))
            return context.get_dummy_value()

        return sig, codegen

    typer.__name__ = f"join{first}"
    return intrinsic(typer)


_join2, _join4, _join6 = _joined(2), _joined(4), _joined(6)


@njit(**INLINE)
def stream_packed(rows, m, k, src, M, pk, K):  # type: ignore[no-untyped-def]
    """Rows ``rows .. rows+m-1`` of ``src`` (``[*, 1, L]``, ``L >= M``: an LSTM step's ``da``,
    in cache) as values ``k .. k+m-1`` of ``k`` of the packed left operand ``pk`` (``[M, K]``
    transposed, ``prepacked_size``'s layout), by non-temporal stores: each tile's
    piece (``6m`` values, contiguous) is written in order, a 32-byte vector at a time, each
    vector made in registers from two rows (four rows' 6 values are three float32 vectors, six
    float64 ones).  Reads go up to 6 values past a row's first ``M`` and 6 before a row's start
    (into the row's tail or the next row, and the previous row's tail; the values are unused).
    ``pk`` 32-byte aligned, ``k`` and ``m`` multiples of 4 (so is every piece of every tile,
    ``KC`` being one)."""
    L = src.shape[2]
    nt, full = (M + MR - 1) // MR, M // MR
    for t in range(nt):
        c = t * MR
        r = 0
        while r < m:  # the rows' values of k by block of KC
            kb, kk = (k + r) // KC, (k + r) % KC
            n = min(m - r, KC - kk)
            d = MR * (kb * nt * KC + t * min(KC, K - kb * KC) + kk)
            if t < full:
                for g in range(r, r + n, 4):
                    s = (rows + g) * L + c
                    if pk.itemsize == 4:
                        _join6(pk, d, src, s, s + L - 6)
                        _join4(pk, d + 8, src, s + L + 2, s + 2 * L - 4)
                        _join2(pk, d + 16, src, s + 2 * L + 4, s + 3 * L - 2)
                    else:
                        stream32(pk, d, src, s)
                        _join2(pk, d + 4, src, s + 4, s + L - 2)
                        stream32(pk, d + 8, src, s + L + 2)
                        stream32(pk, d + 12, src, s + 2 * L)
                        _join2(pk, d + 16, src, s + 2 * L + 4, s + 3 * L - 2)
                        stream32(pk, d + 20, src, s + 3 * L + 2)
                    d += 4 * MR
            else:  # the last tile, part of it past M: value by value, zeros there
                for q in range(n):
                    for j in range(MR):
                        pk[d + MR * q + j] = src[rows + r + q, 0, c + j] if c + j < M else 0
            r += n


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
def _pack_a(A, Ap, mc, k0, kc, ts):  # type: ignore[no-untyped-def]
    """``Ap[t·ts + 6k + r] = A[6t + r, k0 + k]`` for the block's ``mc`` rows (zero rows past them)."""
    mt = (mc + MR - 1) // MR
    full = mc // MR
    if A.strides[0] == A.itemsize:
        # A transposed: one k's values are adjacent, so each k's are read once, 8 at a time into
        # a tile's 6 slots (the next k's copy overwrites the 2 extra; the last k's go into the
        # tile's padding).  Tiles whose 8 would pass the block's rows are copied one by one.
        lda = A.strides[1] // A.itemsize
        nv = (mc - 8) // MR + 1 if mc >= 8 else 0
        for k in range(kc):
            src = (k0 + k) * lda
            if k + _AHEAD < kc:  # each k's values are in a page of their own (an LSTM's da: 4 KB rows)
                prefetch_span(A, src + _AHEAD * lda, mc)
            for t in range(nv):
                _copy8(Ap, t * ts + k * MR, A, src + t * MR)
            for t in range(nv, full):
                for r in range(MR):
                    Ap[t * ts + k * MR + r] = A[t * MR + r, k0 + k]
    elif A.strides[1] > A.strides[0]:  # transposed, spaced out: still one k's values at a time
        for k in range(kc):
            for t in range(full):
                for r in range(MR):
                    Ap[t * ts + k * MR + r] = A[t * MR + r, k0 + k]
    else:  # each row read along k
        for t in range(full):
            for r in range(MR):
                row = A[t * MR + r, k0:k0 + kc]
                for k in range(kc):
                    Ap[t * ts + k * MR + r] = row[k]
    for t in range(full, mt):  # the edge tile
        for k in range(kc):
            for r in range(MR):
                i = t * MR + r
                Ap[t * ts + k * MR + r] = A[i, k0 + k] if i < mc else 0


@njit(**_OPTS)
def _pack_b(B, Bp, k0, kc, j0, nc, pw, ps, p0, kd):  # type: ignore[no-untyped-def]
    """``Bp[(p0 + p)·ps + PW·(kd + k) + c] = B[k0 + k, j0 + p·PW + c]`` for the block's ``nc``
    columns (zero past them)."""
    Bp = Bp[kd * pw:]
    npan = (nc + pw - 1) // pw
    full = nc // pw
    if B.strides[1] == B.itemsize:  # each row of B read once, across the panels, 8 values at a time
        ldb = B.strides[0] // B.itemsize
        for k in range(kc):
            src = (k0 + k) * ldb + j0
            if k + _AHEAD < kc:
                prefetch_span(B, src + _AHEAD * ldb, nc)
            for p in range(full):
                for c in range(0, pw, 8):
                    _copy8(Bp, (p0 + p) * ps + k * pw + c, B, src + p * pw + c)
    elif B.strides[1] <= B.strides[0]:  # rows with spaced-out columns: still row by row
        for k in range(kc):
            for p in range(full):
                for c in range(pw):
                    Bp[(p0 + p) * ps + k * pw + c] = B[k0 + k, j0 + p * pw + c]
    else:  # each column read along k
        for p in range(full):
            for c in range(pw):
                col = B[k0:k0 + kc, j0 + p * pw + c]
                for k in range(kc):
                    Bp[(p0 + p) * ps + k * pw + c] = col[k]
    for p in range(full, npan):
        for k in range(kc):
            for c in range(pw):
                j = p * pw + c
                Bp[(p0 + p) * ps + k * pw + c] = B[k0 + k, j0 + j] if j < nc else 0


@njit(**_OPTS)
def _tiles(Ap, ts, Bp, p_off, C, i0, mc, jj, ncols, kc, accf, tmp):  # type: ignore[no-untyped-def]
    """The packed A block's tiles (rows ``i0 .. i0+mc-1``) times one packed panel of B (at
    ``p_off``), into ``C``'s columns ``jj .. jj+ncols-1``."""
    pw = tmp.shape[1]
    ldc = C.strides[0] // C.itemsize
    mt = (mc + MR - 1) // MR
    for t in range(mt):
        i = i0 + t * MR
        rows = min(MR, mc - t * MR)
        if ncols == pw and rows == MR:
            _micro(Ap, t * ts, Bp, p_off, C, i * ldc + jj, ldc, kc, accf)
            continue
        for r in range(MR):  # an edge tile: through ``tmp``
            for c in range(pw):
                tmp[r, c] = C[i + r, jj + c] if accf and r < rows and c < ncols else 0
        _micro(Ap, t * ts, Bp, p_off, tmp, 0, pw, kc, accf)
        for r in range(rows):
            for c in range(ncols):
                C[i + r, jj + c] = tmp[r, c]


# One machine-code variant per dtype (``compile_eager``): operands of any layout (transposed
# views, column slices) all take it, so no run compiles a new one.
_SIGS = [f"void({t}[:, :], {t}[:, :], {t}[:, :], {t}[::1], {t}[::1], {t}[:, ::1])" for t in ("float32", "float64")]


@njit(**_OPTS)
def gemm(A, B, C, Ap, Bp, tmp):  # type: ignore[no-untyped-def]
    """``C = A·B``: ``A`` ``[M, K]`` and ``B`` ``[K, N]`` with any strides, ``C`` ``[M, N]`` with
    unit column stride, one dtype; ``Ap``, ``Bp``, ``tmp`` from ``buffers``."""
    N = B.shape[1]
    for j0 in range(0, N, NC):  # blocks of NC columns: ``_products`` with no second product
        j1 = min(N, j0 + NC)
        _products(A, B[:, j0:j1], B[:, j0:j0], B[:0, j0:j0], C[:, j0:j1], C[:, j0:j0], Ap, Bp, tmp, Ap[:0], 0, 0, 0)


def gemm_acc(A: np.ndarray, B: np.ndarray, C: np.ndarray, Ap: np.ndarray, Bp: np.ndarray, tmp: np.ndarray) -> None:
    """``C += A·B`` (``gemm``'s operands): each element's chain of fused multiply-adds starts from its value in
    ``C`` instead of zero, so products over consecutive pieces of ``k`` added this way give the bits of one
    product over all of them (an LSTM's weight gradients, chunk by chunk: ``lstm.sweep``)."""
    (M, K), N = A.shape, B.shape[1]
    if B.shape[0] != K or C.shape != (M, N) or (C.shape[1] > 1 and C.shape[0] and C.strides[1] != C.itemsize):
        raise ValueError(f"gemm_acc: shapes {A.shape}, {B.shape} -> {C.shape} (or output strides) it does not take")
    for j0 in range(0, N, NC):
        j1 = min(N, j0 + NC)
        _products(A, B[:, j0:j1], B[:, j0:j0], B[:0, j0:j0], C[:, j0:j1], C[:, j0:j0], Ap, Bp, tmp, Ap[:0], 0, 0, 1)


_SIGS2 = [f"void({t}[:, :], {t}[:, :], {t}[:, :], {t}[:, :], {t}[:, :], {t}[:, :], {t}[::1], {t}[::1], "
          f"{t}[:, ::1], {t}[::1], intp, intp, intp)" for t in ("float32", "float64")]


def gemm2(A: np.ndarray, B1: np.ndarray, B2: np.ndarray, C1: np.ndarray, C2: np.ndarray, Ap: np.ndarray,
          Bp: np.ndarray, tmp: np.ndarray, B2y: np.ndarray | None = None, Apre: np.ndarray | None = None,
          nt: int = 0, t0: int = 0, acc: bool = False) -> None:
    """``C1 = A·B1`` and ``C2 = A·B2`` (with ``acc``: ``+=``, as ``gemm_acc``) with each block of ``A``
    packed once for both (an LSTM's ``dW = daᵀ·X`` and ``dR = daᵀ·H_{t-1}``): the bits of two ``gemm``
    calls.  With ``B2y``,
    ``B2``'s rows are those of ``B2`` then those of ``B2y`` (an LSTM's ``H0`` beside ``HAll``,
    with no copy).  ``C1`` and ``C2`` need unit column strides and ``B1`` and ``B2`` at most
    ``NC`` columns together (``fits2``): checked here, since the compiled loop trusts them.
    With ``Apre``, ``A`` is not read (only its shape is used): its blocks are already packed in
    ``Apre`` (``prepacked_size``'s layout for a left operand of ``nt`` tiles), ``A``'s rows
    being that operand's from tile ``t0`` on."""
    if B2y is None:
        B2y = B2[:0]
    if Apre is None:
        Apre, nt, t0 = Bp[:0], 0, 0
    elif (Apre.dtype != A.dtype or t0 < 0 or (t0 + (A.shape[0] + MR - 1) // MR > nt)
          or Apre.size < prepacked_size(nt * MR, A.shape[1])):
        raise ValueError(f"gemm2: a packed operand of {Apre.size} elements, {nt} tiles from {t0}, does not "
                         f"hold A {A.shape}")
    (M, K), (K1, N1), (K2, N2) = A.shape, B1.shape, B2.shape
    if (K1 != K or K2 + B2y.shape[0] != K or B2y.shape[1] != N2 or C1.shape != (M, N1) or C2.shape != (M, N2)
            or not fits2(N1, N2, A.dtype)
            or any(c.strides[1] != c.itemsize for c in (C1, C2) if c.shape[1] > 1 and c.shape[0])):
        raise ValueError(f"gemm2: shapes {A.shape}, {B1.shape}, {B2.shape} + {B2y.shape} -> {C1.shape}, "
                         f"{C2.shape} (or output strides) it does not take")
    _products(A, B1, B2, B2y, C1, C2, Ap, Bp, tmp, Apre, nt, t0, 1 if acc else 0)


@njit(**_OPTS)
def _products(A, B1, B2, B2y, C1, C2, Ap, Bp, tmp, Apre, nt, t0, acc):  # type: ignore[no-untyped-def]
    """``C1 = A·B1`` and ``C2 = A·[B2; B2y]`` for at most ``NC`` columns together: the loop of
    ``gemm`` (per block of columns, with an empty second product) and ``gemm2`` (``A``'s blocks
    taken from ``Apre`` when it is not empty); ``acc``: added to ``C1`` and ``C2`` (``gemm_acc``)."""
    M, K = A.shape
    N1, N2 = B1.shape[1], B2.shape[1]
    K2 = B2.shape[0]
    pw = tmp.shape[1]
    np1, np2 = (N1 + pw - 1) // pw, (N2 + pw - 1) // pw
    for k0 in range(0, K, KC):
        kc = min(KC, K - k0)
        accf = 1 if k0 > 0 or acc else 0
        ts, ps = kc * MR + _PAD, kc * pw + _PAD
        _pack_b(B1, Bp, k0, kc, 0, N1, pw, ps, 0, 0)
        if k0 < K2:
            _pack_b(B2, Bp, k0, min(kc, K2 - k0), 0, N2, pw, ps, np1, 0)
        if k0 + kc > K2:
            s0 = max(k0, K2)
            _pack_b(B2y, Bp, s0 - K2, k0 + kc - s0, 0, N2, pw, ps, np1, s0 - k0)
        for i0 in range(0, M, MC):
            mc = min(MC, M - i0)
            if Apre.size:
                ta = kc * MR
                Ab = Apre[k0 * nt * MR + (t0 + i0 // MR) * ta:]
            else:
                ta = ts
                _pack_a(A[i0:i0 + mc], Ap, mc, k0, kc, ts)
                Ab = Ap
            for p in range(np1):
                _tiles(Ab, ta, Bp, p * ps, C1, i0, mc, p * pw, min(pw, N1 - p * pw), kc, accf, tmp)
            for p in range(np2):
                _tiles(Ab, ta, Bp, (np1 + p) * ps, C2, i0, mc, p * pw, min(pw, N2 - p * pw), kc, accf, tmp)


def compile_eager() -> None:
    """Compile (or load from numba's cache) ``gemm``'s and ``gemm2``'s one variant per dtype, and
    allow no other.  ``jit.load`` calls it after checking the cache's stamp: compiled at import,
    the variants would be written to a cache that the check then empties when it finds no
    stamp, so the first two processes on a new machine would each compile them (10 s)."""
    for f, sigs in ((gemm, _SIGS), (_products, _SIGS2)):
        for sig in sigs:
            f.compile(sig)
        f.disable_compile()


def fits2(n1: int, n2: int, dtype: np.dtype) -> bool:
    """Whether ``gemm2``'s two right operands (``n1`` and ``n2`` columns) fit one packed block."""
    pw = 16 if np.dtype(dtype) == np.float32 else 8
    return -(-n1 // pw) + -(-n2 // pw) <= (NC + pw - 1) // pw
