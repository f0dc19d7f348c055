"""Matrix products split into blocks fixed by their shapes, each block one single-threaded BLAS
call, the blocks shared out over the cores a kernel was given (``parallel.run_blocks``).

Why: OpenBLAS's threaded GEMM does not always give the same bits for each thread count (here
``3x1000 · 1000x1000`` differed between one and two threads), and a single-threaded call on
some of a product's rows does not always give the bits of the same rows in the whole product
(``513x257 · 257x129`` and ``200³`` split into row blocks differed; most large shapes did not).
So the split is a function of the shapes alone (never of the thread count), and every block
is computed by single-threaded BLAS (held by the runtime for the whole run; ``matmul`` holds it
too when called outside a run).  A block's bits are then the same whoever computes it and
however many threads share the blocks: results are identical for every thread count and
every allotment of cores, and a product uses every core it is given, all of its length.

Measured on 2 cores (AMD EPYC, AVX-512, OpenBLAS 0.3.31): two single-threaded halves ran as
fast as OpenBLAS's two threads on the whole (6400x256 · 256x512: 99 vs 100 GFLOP/s; more in
docs/performance.md).

The partition: the product's rows (batch dimensions flattened into them when the right
operand is one matrix), else its columns, else its leading batch dimension, in a power of two
of near-equal blocks (2 or 4 threads then share them evenly), each at least
``MIN_BLOCK_ROWS`` rows (or columns: the other operand is packed again for every block) and
``MIN_BLOCK_FLOPS``, at most ``MAX_BLOCKS``.
"""

from __future__ import annotations

import math
import threading
from typing import Optional

import numpy as np

from . import jit, parallel

__all__ = ["matmul", "partition", "MAX_BLOCKS"]

MAX_BLOCKS = 8
MIN_BLOCK_ROWS = 256  # rows (or columns) per block: the other operand is packed once per block
MIN_BLOCK_FLOPS = 64 * 10**6  # ~0.7 ms on one core: a pool round trip is ~0.1 ms
_ALIGN = 16  # block edges at multiples of this many rows (whole register tiles)
# OpenBLAS runs a GEMM of at most this many multiply-adds (m·n·k) on one thread whatever its
# thread count (interface/gemm.c: SMP_THRESHOLD_MIN 65536 x GEMM_MULTITHREAD_THRESHOLD 4), so
# such a product needs no hold: outside a run, holding BLAS to one thread and giving it back
# cost ~20 µs a call (two libraries), more than a small LSTM step's GEMMs take.
SINGLE_THREADED_MNK = 65536 * 4


# Preferred least block sizes.  Each block's BLAS call packs all of the operand the blocks share
# again (row blocks: B; column blocks: A), so small blocks cost time: on these 2 cores the MLP's
# 512x1024 by 1024x4096 ran at 179-181 GFLOP/s in 2 row blocks, 159-163 in 4 and 136-138 in 8,
# and 1024x512 by 512x4096 at 183-185 in 2 against 175-176 in 4 (interleaved runs).  A product
# still gets 2 blocks where the old least size (MIN_BLOCK_ROWS) allows them, so that it uses two
# cores.  Counts follow the shapes only, never the machine: the bits of a product are the same
# on every machine with the same BLAS, whatever its cores (float64 BLAS blocks differ in the last
# bit with the split).
PREFERRED_BLOCK_ROWS = 512
PREFERRED_BLOCK_COLS = 2048


def _pow2_blocks(extent: int, flops: float, preferred: int = MIN_BLOCK_ROWS) -> int:
    most = min(MAX_BLOCKS, extent // MIN_BLOCK_ROWS, int(flops // MIN_BLOCK_FLOPS))
    n = max(min(2, most), min(most, extent // preferred))
    return 1 << (n.bit_length() - 1) if n >= 2 else 1


def _bounds(extent: int, n: int, align: int) -> list[int]:
    """``n`` near-equal ranges over ``extent``, inner edges on multiples of ``align``."""
    edges = [0]
    for k in range(1, n):
        e = (extent * k // n) // align * align
        edges.append(max(e, edges[-1]))
    edges.append(extent)
    return edges


def partition(a_shape: tuple, b_shape: tuple) -> tuple[str, int]:
    """How ``matmul`` splits ``a_shape · b_shape``: ``(axis, blocks)``, axis ``"rows"``,
    ``"cols"``, ``"batch"`` or ``""`` (one call).  ``None`` dims (unknown) count as 1."""
    a = tuple(1 if d is None else d for d in a_shape)
    b = tuple(1 if d is None else d for d in b_shape)
    if len(a) < 2 or len(b) < 2 or 0 in a or 0 in b:
        return "", 1
    K, N = b[-1 - 1], b[-1]
    try:
        batch = np.broadcast_shapes(a[:-2], b[:-2])
    except ValueError:  # shapes that do not multiply as given (a layout the caller did not undo)
        return "", 1
    M = a[-2]
    flops = 2.0 * math.prod(batch) * M * K * N
    if len(b) == 2 or math.prod(b[:-2]) == 1:
        rows = math.prod(a[:-1])
        n_rows = _pow2_blocks(rows, flops, PREFERRED_BLOCK_ROWS)
        n_cols = _pow2_blocks(N, flops, PREFERRED_BLOCK_COLS)
        # Row blocks each pack all of B (K·N) again, column blocks all of A (rows·K): a wide,
        # short product goes in column blocks (512x1024 by 1024x4096: 184-185 against 179-181
        # GFLOP/s; 512x4096 by 4096x1024 stays faster in rows, 181-182 against 175)
        if n_cols > 1 and (n_rows <= 1 or N >= 4 * rows):
            return "cols", n_cols
        if n_rows > 1:
            return "rows", n_rows
        return "", 1
    if batch and batch[0] >= 2:
        n = min(MAX_BLOCKS, batch[0], int(flops // MIN_BLOCK_FLOPS))
        n = 1 << (n.bit_length() - 1) if n >= 2 else 1
        return ("batch", n) if n > 1 else ("", 1)
    return "", 1


def _as2d(x: np.ndarray, rows: int, cols: int) -> Optional[np.ndarray]:
    """``x`` viewed as ``[rows, cols]`` without a copy, or None."""
    v = x.view()
    try:
        v.shape = (rows, cols)
    except AttributeError:
        return None
    return v


def matmul(a: np.ndarray, b: np.ndarray, out: Optional[np.ndarray] = None) -> np.ndarray:
    """``np.matmul(a, b, out=out)`` computed in blocks fixed by the shapes (module docstring),
    on ``parallel.threads_here()`` threads, with single-threaded BLAS."""
    if parallel.blas_single() or (_one_thread_anyway(a, b) and parallel.openblas_only()):
        return _matmul(a, b, out)
    with parallel.blas_limit(1):
        return _matmul(a, b, out)


def _one_thread_anyway(a: np.ndarray, b: np.ndarray) -> bool:
    """A matrix-matrix product (each matrix of a batch) that OpenBLAS computes on one thread."""
    if a.ndim < 2 or b.ndim < 2 or a.shape[-2] < 2 or b.shape[-1] < 2:
        return False  # vectors go to GEMV, whose thresholds differ
    return a.shape[-2] * a.shape[-1] * b.shape[-1] <= SINGLE_THREADED_MNK


# The packed-panel kernel (``_jit_gemm``) takes a row block where it was measured faster than
# single-threaded OpenBLAS (``_jit_gemm.FAST_LARGE``): a short reduction (its panels are not
# blocked over K) and a right operand small enough to pack once for every block.  On Zen 4, one
# core: 3200x256 by 256x512 103-109 against 98-101 GFLOP/s; with K = 1024 and more, or a 16 MB
# right operand (its packing alone takes ~9 ms), OpenBLAS is faster.
PACKED_MAX_K = 512
PACKED_MAX_B_BYTES = 1 << 20


def _packed_kernel(a2: np.ndarray, b2: np.ndarray, o2: np.ndarray):  # type: ignore[no-untyped-def]
    """The compiled GEMM module when it should compute ``a2 · b2`` (row blocks), else None.
    Each element is one fixed sum over K whatever the rows of its block: the bits depend on
    the shapes only, as with BLAS's blocks."""
    K, N = b2.shape
    if (K > PACKED_MAX_K or K * N * b2.itemsize > PACKED_MAX_B_BYTES or a2.dtype != b2.dtype
            or o2.dtype != a2.dtype or a2.dtype not in (np.float32, np.float64)
            or a2.strides[1] != a2.itemsize or o2.strides[1] != o2.itemsize or not o2.flags.writeable):
        return None
    jg = jit.load("gemm")
    return jg if jg is not None and jg.FAST_LARGE else None


# Large products whose left operand is a transposed view (a layer's weight gradient ``Xᵀ·dY``)
# and whose reduction is at most this long go to ``_jit_goto`` (both operands packed) where the
# packed kernels are used (``_jit_gemm.FAST_LARGE``): on Zen 4, two cores, 4096x512 by 512x1024
# ran at 211 against 189 GFLOP/s for single-threaded OpenBLAS blocks, 1024x512 by 512x4096 at
# 208 against 190.  Longer reductions (the LSTM's 6400) were no faster, and products with a
# row-major A 0.97-1.02x (docs/performance.md).  Its bits depend on the operands only, not on
# any split, so its blocks follow the threads given (one each), not the shapes.
GOTO_MAX_K = 512
GOTO_MIN_MNK = 1 << 24  # ~34 MFLOP: below, a thread's buffers are not worth filling
_goto_local = threading.local()


def _goto_kernel(a2: np.ndarray, b2: np.ndarray, o2: Optional[np.ndarray]):  # type: ignore[no-untyped-def]
    """The ``_jit_goto`` module when it should compute ``a2 · b2`` into ``o2`` (None: a new
    array) (see ``GOTO_MAX_K``), else None."""
    (M, K), N = a2.shape, b2.shape[1]
    if (K > GOTO_MAX_K or K == 0 or M * K * N < GOTO_MIN_MNK or a2.dtype != b2.dtype
            or a2.dtype not in (np.float32, np.float64) or a2.strides[0] != a2.itemsize
            or not (a2.flags.aligned and b2.flags.aligned)):  # (the kernel's one signature per dtype)
        return None
    if o2 is not None and (o2.shape != (M, N) or o2.dtype != a2.dtype or o2.strides[1] != o2.itemsize
                           or not o2.flags.writeable or not o2.flags.aligned):
        return None
    jg = jit.load("gemm")
    return jit.load("goto") if jg is not None and jg.FAST_LARGE else None


def warm(dtype: object) -> None:
    """``warm`` hook of the product kernels (see ``gradir.backends.cpu.kernels``): load ``_jit_goto`` where
    products may use it, so that a graph's first run does not pay for it."""
    if np.dtype(dtype) in (np.float32, np.float64):  # type: ignore[call-overload]
        jg = jit.load("gemm")
        if jg is not None and jg.FAST_LARGE:
            jit.load("goto")


def goto_buffers(jo, dtype: np.dtype):  # type: ignore[no-untyped-def]
    """The calling thread's packing buffers for ``_jit_goto`` (``jo``) in ``dtype``, kept for
    its next products (8 MB in float32)."""
    bufs = getattr(_goto_local, dtype.str, None)
    if bufs is None:
        bufs = jo.buffers(dtype)
        setattr(_goto_local, dtype.str, bufs)
    return bufs


def _goto(jo, a2: np.ndarray, b2: np.ndarray, o2: np.ndarray) -> None:  # type: ignore[no-untyped-def]
    """``o2 = a2 · b2`` by ``_jit_goto``, one block per thread given: columns when B is the
    larger operand (each block packs all of A again), else rows (each packs all of B)."""
    M, N = o2.shape
    n = max(1, parallel.threads_here())
    cols = N > M
    edges = _bounds(N if cols else M, min(n, max(1, (N if cols else M) // 64)), 16 if cols else 6)
    ar, br = jit.readable(a2), jit.readable(b2)

    def block(i: int) -> None:
        lo, hi = edges[i], edges[i + 1]
        bufs = goto_buffers(jo, a2.dtype)
        if cols:
            jo.gemm(ar, br[:, lo:hi], o2[:, lo:hi], *bufs)
        else:
            jo.gemm(ar[lo:hi], br, o2[lo:hi], *bufs)

    parallel.run_blocks(len(edges) - 1, block)


def _matmul(a: np.ndarray, b: np.ndarray, out: Optional[np.ndarray]) -> np.ndarray:
    if a.ndim == 2 and b.ndim == 2 and a.shape[0] * a.shape[1] * b.shape[-1] < GOTO_MIN_MNK:
        # one call whatever follows (``partition`` gives no split below 2 x MIN_BLOCK_FLOPS, and
        # ``_goto_kernel`` takes nothing this small): spared their checks, a small LSTM's products
        return np.matmul(a, b, out=out)
    if a.ndim == 2 and b.ndim == 2 and a.strides[0] == a.itemsize and a.shape[1] == b.shape[0]:
        jo = _goto_kernel(a, b, out)
        if jo is not None:
            o = out if out is not None else np.empty((a.shape[0], b.shape[1]), a.dtype)
            _goto(jo, a, b, o)
            return o
    axis, n = partition(a.shape, b.shape)
    if axis == "":
        return np.matmul(a, b, out=out)
    if out is None:
        shape = np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (a.shape[-2], b.shape[-1])
        out = np.empty(shape, np.result_type(a, b))
    K, N = b.shape[-2], b.shape[-1]
    if axis in ("rows", "cols"):
        rows = math.prod(a.shape[:-1])
        a2, o2 = _as2d(a, rows, K), _as2d(out, rows, N)
        b2 = _as2d(b, K, N)
        if a2 is None or o2 is None or b2 is None:
            return np.matmul(a, b, out=out)
        if axis == "rows":
            edges = _bounds(rows, n, _ALIGN)
            jg = _packed_kernel(a2, b2, o2)
            if jg is not None:  # b packed once, read by every block
                bp, ar = jg.pack(b2), jit.readable(a2)

                def packed_block(i: int) -> None:
                    lo, hi = edges[i], edges[i + 1]
                    jg.gemm(ar[lo:hi], bp, o2[lo:hi])
                parallel.run_blocks(n, packed_block)
                return out

            def block(i: int) -> None:
                lo, hi = edges[i], edges[i + 1]
                np.matmul(a2[lo:hi], b2, out=o2[lo:hi])
        else:
            edges = _bounds(N, n, 64)

            def block(i: int) -> None:
                lo, hi = edges[i], edges[i + 1]
                np.matmul(a2, b2[:, lo:hi], out=o2[:, lo:hi])
        parallel.run_blocks(n, block)
        return out
    # batch: blocks of the result's leading dimension; an operand broadcast along it goes whole
    edges = _bounds(out.shape[0], n, 1)
    nd = out.ndim

    def part(x: np.ndarray, lo: int, hi: int) -> np.ndarray:
        return x if x.ndim < nd or x.shape[0] == 1 else x[lo:hi]

    def batch_block(i: int) -> None:
        lo, hi = edges[i], edges[i + 1]
        np.matmul(part(a, lo, hi), part(b, lo, hi), out=out[lo:hi])

    parallel.run_blocks(n, batch_block)
    return out
