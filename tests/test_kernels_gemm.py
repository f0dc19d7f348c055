"""The packed-panel GEMM of the compiled LSTM step loops (gradir.backends.cpu.kernels._jit_gemm)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

from gradir.backends.cpu.kernels import jit

jg = jit.load("gemm")


def _bound(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """A rounding-error bound for ``A·B`` summed in A's dtype: K·eps·Σ|a||b|, per element."""
    K = A.shape[1]
    eps = np.finfo(A.dtype).eps
    return (K + 2) * eps * (np.abs(A).astype(np.float64) @ np.abs(B).astype(np.float64)) + np.finfo(A.dtype).tiny


def _strided(rng: np.random.Generator, rows: int, cols: int, dtype: type, pad: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """A ``[rows, cols]`` view with a row stride larger than ``cols`` (and its parent)."""
    parent = rng.standard_normal((rows, cols + pad)).astype(dtype)
    return parent, parent[:, 1: cols + 1]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gemm_matches_float64_products_on_random_shapes(dtype: type) -> None:
    """Every M (all row-tile sizes), K (0 included), N (full and partial panels), strided
    rows in A and C; C's neighbouring columns are left alone."""
    rng = np.random.default_rng(0)
    for _ in range(150):
        M, K, N = int(rng.integers(0, 40)), int(rng.integers(0, 70)), int(rng.integers(1, 50))
        _, A = _strided(rng, M, K, dtype)
        B = rng.standard_normal((K, N)).astype(dtype)
        Cp = np.full((M, N + 5), 7, dtype)
        C = Cp[:, 2: N + 2]
        jg.gemm(A, jg.pack(B), C)
        exact = A.astype(np.float64) @ B.astype(np.float64)
        assert np.all(np.abs(C - exact) <= _bound(A, B)), (M, K, N)
        assert np.all(Cp[:, :2] == 7) and np.all(Cp[:, N + 2:] == 7), (M, K, N)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gemm_rows_reads_b_in_place_with_the_same_bits(dtype: type) -> None:
    """``gemm_rows`` (B read in place, rows strided, the partial last panel copied) computes
    the same sums in the same order as ``gemm`` on the packed B: identical bits."""
    rng = np.random.default_rng(5)
    for _ in range(100):
        M, K, N = int(rng.integers(0, 30)), int(rng.integers(0, 60)), int(rng.integers(1, 70))
        _, A = _strided(rng, M, K, dtype)
        _, B = _strided(rng, K, N, dtype, pad=5)
        C = np.full((M, N), 7, dtype)
        jg.gemm_rows(A, B, C)
        packed = np.empty((M, N), dtype)
        jg.gemm(A, jg.pack(B), packed)
        assert np.array_equal(C, packed), (M, K, N)
        assert np.all(np.abs(C - A.astype(np.float64) @ B) <= _bound(A, B)), (M, K, N)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gemm_row_blocks(dtype: type) -> None:
    """Long K: rows are visited in several L2-sized blocks (6 rows per block when K is huge)."""
    rng = np.random.default_rng(1)
    for M, K, N in ((50, 2048, 40), (13, 9000, 17)):
        A = rng.standard_normal((M, K)).astype(dtype)
        B = rng.standard_normal((K, N)).astype(dtype)
        C = np.empty((M, N), dtype)
        jg.gemm(A, jg.pack(B), C)
        assert np.all(np.abs(C - A.astype(np.float64) @ B) <= _bound(A, B))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_each_row_is_one_fixed_sum(dtype: type) -> None:
    """A row's result does not depend on the rows computed with it (tile position, row
    block, M): the bits are the same alone and inside any batch, so splitting a batch
    between threads never changes a result."""
    rng = np.random.default_rng(2)
    M, K, N = 29, 300, 37
    A = rng.standard_normal((M, K)).astype(dtype)
    Bp = jg.pack(rng.standard_normal((K, N)).astype(dtype))
    full = np.empty((M, N), dtype)
    jg.gemm(A, Bp, full)
    for lo, hi in ((0, 1), (5, 6), (3, 17), (11, 29), (28, 29)):
        part = np.empty((hi - lo, N), dtype)
        jg.gemm(A[lo:hi], Bp, part)
        assert np.array_equal(part, full[lo:hi])
    # every row count, so every mix of 6-, 5- and smaller tiles (32 = 2·6 + 4·5, 8 = 4 + 4)
    for m in range(1, M + 1):
        part = np.empty((m, N), dtype)
        jg.gemm(A[:m], Bp, part)
        assert np.array_equal(part, full[:m]), m


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gemm_negative_row_strides_and_empty_shapes(dtype: type) -> None:
    """Rows in reverse order (negative row strides) in A, B and C; and M, K or N of zero."""
    rng = np.random.default_rng(6)
    A = rng.standard_normal((9, 21)).astype(dtype)[::-1]
    B = rng.standard_normal((21, 35)).astype(dtype)[::-1]
    Cp = np.zeros((9, 35), dtype)
    jg.gemm_rows(A, B, Cp[::-1])
    exact = A.astype(np.float64) @ B
    assert np.all(np.abs(Cp[::-1] - exact) <= _bound(A, B))
    C2 = np.zeros((9, 35), dtype)
    jg.gemm(A, jg.pack(B), C2[::-1])
    assert np.array_equal(C2, Cp)
    for M, K, N in ((0, 5, 7), (3, 0, 7), (3, 5, 0)):
        A = np.ones((M, K), dtype)
        B = np.ones((K, N), dtype)
        C = np.full((M, N), 7, dtype)
        jg.gemm(A, jg.pack(B), C)
        assert np.array_equal(C, np.full((M, N), K, dtype))
        C[...] = 7
        jg.gemm_rows(A, B, C)
        assert np.array_equal(C, np.full((M, N), K, dtype))


def test_gemm_keeps_ieee_special_values() -> None:
    """inf and NaN propagate as in a plain sum of products."""
    A = np.ones((3, 4), np.float32)
    B = np.ones((4, 18), np.float32)
    A[0, 1] = np.inf
    A[1, 2] = np.nan
    C = np.empty((3, 18), np.float32)
    jg.gemm(A, jg.pack(B), C)
    assert np.all(C[0] == np.inf) and np.all(np.isnan(C[1])) and np.all(C[2] == 4)


def test_pack_layout() -> None:
    B = np.arange(3 * 20, dtype=np.float32).reshape(3, 20)
    P = jg.pack(B)
    assert P.shape == (2, 3, 16)
    assert np.array_equal(P[0], B[:, :16])
    assert np.array_equal(P[1, :, :4], B[:, 16:]) and np.all(P[1, :, 4:] == 0)
    assert jg.pack(B.astype(np.float64)).shape == (3, 3, 8)
    assert np.array_equal(jg.pack(B.T.copy().T), P)  # any strides in


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_pack_reads_in_memory_order_with_one_compiled_variant(dtype: type) -> None:
    """Row-major operands and transposed views are packed by a compiled loop that reads them in
    memory order; the layout is the transposing copy's for every width (edge panels
    zero-padded), read-only operands included, and no layout compiles a variant of its own."""
    rng = np.random.default_rng(5)
    for K, N in [(1, 1), (3, 20), (17, 16), (64, 33), (1024, 256)]:
        B = rng.standard_normal((K, N)).astype(dtype)
        wide = np.zeros((K, 2 * N), dtype)
        wide[:, ::2] = B
        want = jg.pack(wide[:, ::2])  # strides that take NumPy's copy
        assert np.array_equal(jg.pack(B), want), (K, N)
        assert np.array_equal(jg.pack(B.T.copy().T), want), (K, N)  # a transposed view: column by column
        ro = B.copy()
        ro.flags.writeable = False
        assert np.array_equal(jg.pack(ro), want), (K, N)
        assert np.array_equal(jg.pack(B[::-1][::-1]), want), (K, N)
    assert len(jg._pack.signatures) == 4  # row-major and any layout, float32 and float64: none compiled on the way


def test_kernel_caches_follow_the_gemm_file_too() -> None:
    """The LSTM kernels inline the GEMM micro-kernel, and the packing of ``da`` (``_jit_goto``):
    an edit of _jit_gemm.py or _jit_goto.py must change the stamp that empties their numba
    caches (see test_core_stamp_empties_a_stale_kernel_cache)."""
    here = Path(jit.__file__).parent
    assert {"_jit_core.py", "_jit_gemm.py", "_jit_goto.py"} <= set(jit._BLOCKS)
    sha = hashlib.sha256(b"".join((here / f).read_bytes() for f in jit._BLOCKS))
    assert jit.core_digest() == sha.hexdigest()
    assert jit.core_digest() != hashlib.sha256((here / "_jit_core.py").read_bytes()).hexdigest()
