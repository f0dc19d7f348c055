"""A compiled GEMM for few rows against a pre-packed right operand (numba + LLVM vectors).

The LSTM step loops multiply a small ``[B, K]`` block by the same weight matrix at every
time step (``dH_{t-1} = da_t·R`` backward, ``H_{t-1}·Rᵀ`` forward).  A BLAS packs that
weight matrix again on every call; with 32 rows and ``R`` of 1024x256 the packing is about
a sixth of the call: OpenBLAS reaches 78 GFLOP/s on one core there against 92 for large
products.  Here the weights are packed once per layer call (:func:`pack`) and every step
runs only the register-blocked micro-kernel: 97 GFLOP/s at that shape on one core (Zen 3;
``benchmarks/bench_gemm.py``).

Layout: :func:`pack` turns ``B`` ``[K, N]`` into panels ``[ceil(N/PW), K, PW]`` of ``PW``
columns (16 float32 or 8 float64: two AVX2 vectors), zero-padded.  :func:`gemm` then
computes ``C = A·B`` tile by tile: 6 rows by one panel (12 vector accumulators, 2 panel
loads and 6 broadcasts per ``k``; left-over rows in tiles of 4-5), fused multiply-adds in
``k`` order from zero, so every result is one fixed sum whatever the rows around it (no
dependence on threads or tiling).
Rows are visited in blocks whose ``A`` rows fit in L2, panel by panel.  :func:`gemm_rows`
runs the same kernel on a ``B`` used once, read in place (no packing; the small cell kernels).

The micro-kernel is LLVM IR written through a numba ``intrinsic`` (numba's own loops do
not keep a register tile: a numba-only version ran at 4 GFLOP/s).  It is inlined into
its callers, so ``gradir.backends.cpu.kernels.jit`` stamps every kernel cache with this file's hash too.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from .jit import readable

__all__ = ["ROWS", "FAST_LARGE", "panel_width", "pack", "gemm", "gemm_rows"]


def _fast_large() -> bool:
    """Whether this CPU is one where the kernel was measured faster than OpenBLAS on large
    products: x86-64 with AVX2 and FMA, and either without AVX-512 (measured on Zen 3) or an
    AMD core whose AVX-512 runs as two 256-bit halves (measured on Zen 4: 109 against 85
    GFLOP/s per core on the backward step's product, ``benchmarks/bench_gemm.py``).  On
    Intel's AVX-512 cores OpenBLAS's kernels use vectors twice as wide as these; elsewhere
    nothing was measured.  ``GRADIR_FAST_GEMM=1`` or ``0`` overrides the choice (it changes
    which kernel the LSTM loops call, so their last bits, never the thread count's promise)."""
    env = os.environ.get("GRADIR_FAST_GEMM", "").strip()
    if env in ("0", "1"):
        return env == "1"
    try:
        import llvmlite.binding as llvm
        from numba.core import config

        if config.CPU_NAME not in (None, "host"):  # numba told to compile for another CPU
            return False
        feats = llvm.get_host_cpu_features()
        if not (feats.get("avx2") and feats.get("fma")):
            return False
        return not feats.get("avx512f") or llvm.get_host_cpu_name().startswith("znver")
    except Exception:  # no feature list on this platform
        return False


# The LSTM kernels use this GEMM for their large per-step products only when this holds
# (small ones always: there a BLAS call's overhead is most of the time).
FAST_LARGE = _fast_large()

ROWS = 6  # rows per register tile
_L2_A_BYTES = 192 * 1024  # A rows of one row block (the panel being used sits beside them)
_OPTS = dict(nogil=True, cache=True, boundscheck=False, error_model="numpy")


def panel_width(dtype: np.dtype) -> int:
    """Columns per packed panel: two 256-bit vectors."""
    return 16 if np.dtype(dtype) == np.float32 else 8


def pack(B: np.ndarray) -> np.ndarray:
    """``B`` ``[K, N]`` (any strides, float32 or float64) as zero-padded panels ``[P, K, PW]``."""
    K, N = B.shape
    pw = panel_width(B.dtype)
    npan = -(-N // pw)
    out = np.empty((npan, K, pw), B.dtype)
    if B.flags.aligned and B.dtype.isnative and (B.strides[1] == B.itemsize or B.strides[0] == B.itemsize):
        # B read in the order of its memory (row by row, or column by column for a transposed
        # view): from memory, NumPy's copy panel by panel waited on it (0.5 against 0.13 ms for
        # an LSTM's 1 MB R at the start of LSTMGrad).  Compiled variants: row-major and any, per dtype.
        _pack(readable(B), out, B.strides[1] != B.itemsize)
        return out
    full = N // pw
    if full:
        out[:full] = B[:, : full * pw].reshape(K, full, pw).transpose(1, 0, 2)
    if full < npan:
        out[full] = 0
        out[full, :, : N - full * pw] = B[:, full * pw:]
    return out


@njit([f"void({t}[{lay}], {t}[:, :, ::1], boolean)" for t in ("float32", "float64") for lay in (":, ::1", ":, :")],
      **_OPTS)
def _pack(B, out, by_cols):  # type: ignore[no-untyped-def]
    """``pack``'s compiled copy: row by row, or column by column (``by_cols``: a transposed view)."""
    K, N = B.shape
    npan, _, pw = out.shape
    if by_cols:
        for j in range(npan * pw):
            for k in range(K):
                out[j // pw, k, j % pw] = B[k, j] if j < N else 0
        return
    for k in range(K):
        for p in range(npan):
            for c in range(pw):
                j = p * pw + c
                out[p, k, c] = B[k, j] if j < N else 0


def vectors(builder: Any, f32: bool) -> tuple[ir.VectorType, int, int, Any]:
    """The micro-kernels' vector type (two per panel row), its width, the element alignment
    (rows and panels need not be 32-byte aligned) and the vector multiply-add: ``fmuladd``,
    one rounding (an FMA instruction) where the CPU has FMA, which is where FAST_LARGE lets
    large products come here; elsewhere a multiply and an add rather than ``llvm.fma``'s libm
    call per element."""
    vw = 8 if f32 else 4
    vec = ir.VectorType(ir.FloatType() if f32 else ir.DoubleType(), vw)
    fma = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vec, [vec, vec, vec]),
                                         f"llvm.fmuladd.v{vw}f{32 if f32 else 64}")
    return vec, vw, 4 if f32 else 8, fma


def data(context: Any, builder: Any, ty: Any, value: Any) -> Any:
    """The data pointer of an array argument of an intrinsic."""
    return cgutils.create_struct_proxy(ty)(context, builder, value=value).data


def _make_tile(rows: int):  # type: ignore[no-untyped-def]
    """The micro-kernel for ``rows`` rows: ``C[i0:i0+rows, p·PW : p·PW+ncols] = A[i0:i0+rows]·panel p``,
    where element ``(k, c)`` of panel ``p`` is ``B[p·pstride + k·ldb + c]`` (packed: ``pstride =
    K·PW``, ``ldb = PW``; a row-major ``[K, N]`` matrix read in place: ``pstride = PW``, ``ldb``
    its row stride)."""

    @intrinsic
    def tile(typingctx, A, Bp, C, i0, p, K, lda, ldc, ncols, pstride, ldb):  # type: ignore[no-untyped-def]
        if not (isinstance(A, types.Array) and A.dtype in (types.float32, types.float64)
                and isinstance(Bp, types.Array) and Bp.dtype == A.dtype
                and isinstance(C, types.Array) and C.dtype == A.dtype):
            return None
        sig = types.void(A, Bp, C, *([types.intp] * 8))

        def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
            a_arr, b_arr, c_arr, i0v, pv, kv, ldav, ldcv, ncv, psv, ldbv = args
            vec, vw, al, fma = vectors(builder, signature.args[0].dtype == types.float32)
            pw = 2 * vw
            i32, i64 = ir.IntType(32), ir.IntType(64)
            a_data, b_data, c_data = (data(context, builder, t, v) for t, v in zip(signature.args, args[:3]))

            def c64(v: int) -> ir.Constant:
                return ir.Constant(i64, v)

            zero = ir.Constant(vec, [0.0] * vw)
            accs = [[cgutils.alloca_once_value(builder, zero) for _ in range(2)] for _ in range(rows)]
            arows = [builder.gep(a_data, [builder.mul(builder.add(i0v, c64(r)), ldav)]) for r in range(rows)]
            panel = builder.gep(b_data, [builder.mul(pv, psv)])
            splat = ir.Constant(ir.VectorType(i32, vw), [0] * vw)
            with cgutils.for_range(builder, kv) as loop:
                k = loop.index
                bk = builder.gep(panel, [builder.mul(k, ldbv)])
                bv = [builder.load(builder.bitcast(builder.gep(bk, [c64(vw * c)]), vec.as_pointer()), align=al)
                      for c in range(2)]
                for r in range(rows):
                    x = builder.load(builder.gep(arows[r], [k]))
                    xv = builder.insert_element(ir.Constant(vec, ir.Undefined), x, ir.Constant(i32, 0))
                    xv = builder.shuffle_vector(xv, ir.Constant(vec, ir.Undefined), splat)
                    for c in range(2):
                        builder.store(builder.call(fma, [xv, bv[c], builder.load(accs[r][c])]), accs[r][c])
            col0 = builder.mul(pv, c64(pw))
            full = builder.icmp_signed("==", ncv, c64(pw))
            with builder.if_else(full) as (then, otherwise):
                with then:
                    for r in range(rows):
                        crow = builder.gep(c_data, [builder.add(builder.mul(builder.add(i0v, c64(r)), ldcv), col0)])
                        for c in range(2):
                            ptr = builder.bitcast(builder.gep(crow, [c64(vw * c)]), vec.as_pointer())
                            builder.store(builder.load(accs[r][c]), ptr, align=al)
                with otherwise:  # the last, partial panel: element by element
                    for r in range(rows):
                        crow = builder.gep(c_data, [builder.add(builder.mul(builder.add(i0v, c64(r)), ldcv), col0)])
                        for c in range(2):
                            v = builder.load(accs[r][c])
                            for e in range(vw):
                                j = vw * c + e
                                with builder.if_then(builder.icmp_signed("<", c64(j), ncv)):
                                    builder.store(builder.extract_element(v, ir.Constant(i32, e)),
                                                  builder.gep(crow, [c64(j)]))
            return context.get_dummy_value()

        return sig, codegen

    return tile


_T1, _T2, _T3, _T4, _T5, _T6 = (_make_tile(r) for r in range(1, ROWS + 1))


@njit(**_OPTS)
def _tile(rows, A, B, C, i0, p, K, lda, ldc, nc, pstride, ldb):  # type: ignore[no-untyped-def]
    """The micro-kernel for ``rows`` (0-6) rows (each row count is its own intrinsic: its
    accumulators are registers, so the dispatch is spelled out)."""
    if rows == 6:
        _T6(A, B, C, i0, p, K, lda, ldc, nc, pstride, ldb)
    elif rows == 5:
        _T5(A, B, C, i0, p, K, lda, ldc, nc, pstride, ldb)
    elif rows == 4:
        _T4(A, B, C, i0, p, K, lda, ldc, nc, pstride, ldb)
    elif rows == 3:
        _T3(A, B, C, i0, p, K, lda, ldc, nc, pstride, ldb)
    elif rows == 2:
        _T2(A, B, C, i0, p, K, lda, ldc, nc, pstride, ldb)
    elif rows == 1:
        _T1(A, B, C, i0, p, K, lda, ldc, nc, pstride, ldb)


@njit(**_OPTS)
def _panels(A, B, C, pstride, ldb, npan):  # type: ignore[no-untyped-def]
    """``C[:, :npan·PW] = A·B`` panel by panel (B's layout as in the micro-kernel)."""
    M = A.shape[0]
    K = A.shape[1]
    N = C.shape[1]
    pw = 16 if A.itemsize == 4 else 8
    lda = A.strides[0] // A.itemsize
    ldc = C.strides[0] // C.itemsize
    mb = max(ROWS, (_L2_A_BYTES // max(1, K * A.itemsize)) // ROWS * ROWS)
    for ib in range(0, M, mb):
        ie = min(M, ib + mb)
        # 6-row tiles and 5-row ones: a tile of fewer than 4 rows has fewer than 8
        # accumulators, too few to hide the FMA latency, and one of 4 rows (8) ran 8% slower
        # than those of 5 and 6 on Zen 4; so n = 6a + 5b rows where that is possible (32 =
        # 2·6 + 4·5), else 6-row tiles and the 1-3 left-over rows taken together with the last
        # 6 as two tiles of 4-5 rows (8 = 4 + 4)
        n = ie - ib
        five = (ROWS - n % ROWS) % ROWS
        last1, last2 = 0, 0
        if 5 * five <= n:
            six = (n - 5 * five) // ROWS
        else:
            five = 0
            six, last1 = n // ROWS, n % ROWS
            if 0 < last1 < 4 and six > 0:
                six -= 1
                last1, last2 = (ROWS + last1 + 1) // 2, (ROWS + last1) // 2
        for p in range(npan):
            nc = min(pw, N - p * pw)
            i0 = ib
            for _ in range(six):
                _T6(A, B, C, i0, p, K, lda, ldc, nc, pstride, ldb)
                i0 += ROWS
            for _ in range(five):
                _T5(A, B, C, i0, p, K, lda, ldc, nc, pstride, ldb)
                i0 += 5
            _tile(last1, A, B, C, i0, p, K, lda, ldc, nc, pstride, ldb)
            _tile(last2, A, B, C, i0 + last1, p, K, lda, ldc, nc, pstride, ldb)


@njit(**_OPTS)
def gemm(A, Bp, C):  # type: ignore[no-untyped-def]
    """``C = A·B`` with ``Bp = pack(B)``: ``A`` ``[M, K]``, ``C`` ``[M, N]``, both with unit
    column stride (rows may be strided), one dtype; ``N`` at most ``Bp``'s padded width."""
    pw = Bp.shape[2]
    _panels(A, Bp, C, A.shape[1] * pw, pw, (C.shape[1] + pw - 1) // pw)


@njit(**_OPTS)
def gemm_rows(A, B, C):  # type: ignore[no-untyped-def]
    """``C = A·B`` with ``B`` ``[K, N]`` read in place (unit column stride): no packing, for a
    ``B`` used once (its full panels' rows are read with B's row stride; the last, partial
    panel is copied zero-padded, since a panel may not read past a row's end)."""
    K = A.shape[1]
    N = C.shape[1]
    pw = 16 if A.itemsize == 4 else 8
    full = N // pw
    if full:
        _panels(A, B, C, pw, B.strides[0] // B.itemsize, full)
    if full * pw < N:
        tail = np.zeros((1, K, pw), A.dtype)
        for k in range(K):
            for c in range(N - full * pw):
                tail[0, k, c] = B[k, full * pw + c]
        _panels(A, tail, C[:, full * pw:], K * pw, pw, 1)
