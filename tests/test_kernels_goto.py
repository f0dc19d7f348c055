"""The GEMM with both operands packed (gradir.backends.cpu.kernels._jit_goto) and its use by
``blocked.matmul`` for products whose left operand is a transposed view."""

from __future__ import annotations

import numpy as np
import pytest

from gradir.backends.cpu.kernels import blocked, jit, parallel
from test_kernels_gemm import _bound

jo = jit.load("goto")
pytestmark = pytest.mark.skipif(jo is None, reason="compiled kernels off (GRADIR_JIT=0) or numba missing")
jg = jit.load("gemm")


def _operand(rng: np.random.Generator, rows: int, cols: int, dtype: type, transposed: bool) -> np.ndarray:
    """A ``[rows, cols]`` operand: a transposed view, or rows strided inside a wider parent."""
    if transposed:
        return rng.standard_normal((cols, rows)).astype(dtype).T
    return rng.standard_normal((rows, cols + 3)).astype(dtype)[:, 1: cols + 1]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_same_bits_as_the_packed_panel_kernel_on_random_shapes(dtype: type) -> None:
    """Every layout of A and B, edge tiles in both directions, several blocks along M (MC), K (KC)
    and N (NC): each element is the same chain of FMAs in k order from zero as ``_jit_gemm``'s
    (A there made row-major first), so the bits are identical, and within the float64 bound."""
    rng = np.random.default_rng(0)
    buffers = jo.buffers(dtype)
    sizes = [(1, 1, 1), (7, 5, 17), (97, 513, 33), (200, 1030, 70), (13, 40, jo.NC + 40), (jo.MC * 2 + 5, 3, 16)]
    sizes += [(int(rng.integers(1, 130)), int(rng.integers(1, 1100)), int(rng.integers(1, 90))) for _ in range(12)]
    for k, (M, K, N) in enumerate(sizes):
        A = _operand(rng, M, K, dtype, transposed=k % 2 == 0)
        B = _operand(rng, K, N, dtype, transposed=k % 3 == 0)
        Cp = np.full((M, N + 4), 7, dtype)
        C = Cp[:, 2: N + 2]
        jo.gemm(A, B, C, *buffers)
        want = np.empty((M, N), dtype)
        jg.gemm(np.ascontiguousarray(A), jg.pack(B), want)
        assert np.array_equal(C, want), (M, K, N)
        assert np.all(np.abs(C - A.astype(np.float64) @ B.astype(np.float64)) <= _bound(A, B)), (M, K, N)
        assert np.all(Cp[:, :2] == 7) and np.all(Cp[:, N + 2:] == 7), (M, K, N)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_two_products_sharing_a_gives_the_bits_of_two(dtype: type) -> None:
    """``gemm2`` (an LSTM's dW and dR with each block of daᵀ packed once) writes exactly what two
    ``gemm`` calls write, and nothing beside its outputs; ``fits2`` bounds the columns."""
    rng = np.random.default_rng(1)
    buffers = jo.buffers(dtype)
    for k, (M, K, N1, N2) in enumerate([(1, 1, 1, 1), (97, 1100, 40, 17), (200, 513, 256, 256), (13, 7, 16, 3),
                                        (jo.MC + 7, 2 * jo.KC + 3, 70, 33)]):
        A = _operand(rng, M, K, dtype, transposed=k % 2 == 0)
        B1 = _operand(rng, K, N1, dtype, transposed=k == 3)
        B2 = _operand(rng, K, N2, dtype, transposed=False)
        P1, P2 = np.full((M, N1 + 4), 7, dtype), np.full((M, N2 + 4), 7, dtype)
        C1, C2 = P1[:, 2: N1 + 2], P2[:, 2: N2 + 2]
        jo.gemm2(A, B1, B2, C1, C2, *buffers)
        for C, B, P, N in ((C1, B1, P1, N1), (C2, B2, P2, N2)):
            want = np.empty((M, N), dtype)
            jo.gemm(A, B, want, *buffers)
            assert np.array_equal(C, want), (M, K, N1, N2)
            assert np.all(P[:, :2] == 7) and np.all(P[:, N + 2:] == 7)
    assert jo.fits2(256, 256, np.dtype(dtype)) and not jo.fits2(jo.NC, 1, np.dtype(dtype))
    # what the compiled loop would trust: refused with a clear error, nothing written
    A, B = np.ones((6, 4), dtype), np.ones((4, 16), dtype)
    P = np.zeros((6, 32), dtype)
    wide = np.ones((4, jo.NC), dtype)
    for args in ((A, B, B, P[:, ::2], np.zeros((6, 16), dtype)), (A, wide, B, np.zeros((6, jo.NC), dtype), P[:, :16]),
                 (A, B[:3], B, P[:, :16], P[:, 16:])):
        with pytest.raises(ValueError, match="gemm2"):
            jo.gemm2(*args, *buffers)
    assert not P.any()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_second_product_over_two_operands_is_one_over_their_rows(dtype: type) -> None:
    """``gemm2(..., B2y=...)``: the second product's rows are ``B2``'s then ``B2y``'s (an LSTM's
    ``H0`` beside ``HAll``), with every split against the blocks of k: the bits of one product
    over the two stacked; the rows must add up to A's columns."""
    rng = np.random.default_rng(3)
    buffers = jo.buffers(dtype)
    M, K, N1, N2 = 20, 2 * jo.KC + 70, 40, 33
    A = _operand(rng, M, K, dtype, transposed=True)
    B1 = _operand(rng, K, N1, dtype, transposed=False)
    B2 = rng.standard_normal((K, N2)).astype(dtype)
    for cut in (0, 1, 64, jo.KC - 1, jo.KC, jo.KC + 1, K - 64, K):
        C1, C2 = np.empty((M, N1), dtype), np.empty((M, N2), dtype)
        jo.gemm2(A, B1, B2[:cut], C1, C2, *buffers, B2y=B2[cut:])
        W1, W2 = np.empty((M, N1), dtype), np.empty((M, N2), dtype)
        jo.gemm2(A, B1, B2, W1, W2, *buffers)
        assert np.array_equal(C1, W1) and np.array_equal(C2, W2), cut
    with pytest.raises(ValueError, match="gemm2"):
        jo.gemm2(A, B1, B2[:64], C1, C2, *buffers, B2y=B2[65:])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_products_added_piece_by_piece_give_the_bits_of_one_product(dtype: type) -> None:
    """``gemm_acc`` and ``gemm2(acc=True)`` continue each element's chain of FMAs from its value in C: a
    product over k split into pieces (one across a KC block, one an edge of a few k), the first by ``gemm``
    and the rest added, is one ``gemm`` over all of k, bit for bit, in any row split (an LSTM's weight
    gradients, chunk by chunk).  Shapes it does not take are refused."""
    rng = np.random.default_rng(4)
    buffers = jo.buffers(dtype)
    for M, K, N1, N2, cuts in ((100, 2 * jo.KC + 40, 33, 17, (7, jo.KC + 3)), (13, 9, 5, 16, (1, 2, 8))):
        A = _operand(rng, M, K, dtype, True)
        B1, B2 = (_operand(rng, K, n, dtype, False) for n in (N1, N2))
        W1, W2 = np.empty((M, N1), dtype), np.empty((M, N2), dtype)
        jo.gemm(A, B1, W1, *buffers)
        jo.gemm(A, B2, W2, *buffers)
        edges = [0, *cuts, K]
        C1, C2 = np.full((M, N1), np.nan, dtype), np.full((M, N2), np.nan, dtype)
        jo.gemm(A[:, : edges[1]], B1[: edges[1]], C1, *buffers)
        jo.gemm(A[:, : edges[1]], B2[: edges[1]], C2, *buffers)
        for i, (k0, k1) in enumerate(zip(edges[1:], edges[2:])):
            for r0, r1 in ((0, M // 2), (M // 2, M)):  # two row halves, as an LSTM's two threads
                if i % 2:
                    jo.gemm_acc(A[r0:r1, k0:k1], B1[k0:k1], C1[r0:r1], *buffers)
                    jo.gemm_acc(A[r0:r1, k0:k1], B2[k0:k1], C2[r0:r1], *buffers)
                else:
                    jo.gemm2(A[r0:r1, k0:k1], B1[k0:k1], B2[k0:k1], C1[r0:r1], C2[r0:r1], *buffers, acc=True)
        assert np.array_equal(C1, W1) and np.array_equal(C2, W2), (M, K)
    with pytest.raises(ValueError, match="gemm_acc"):
        jo.gemm_acc(A, B1[:-1], C1, *buffers)


def test_special_values_and_empty_reductions() -> None:
    a = np.zeros((8, 20), np.float32)
    a[0, 0], a[1, 1], a[2, 2] = np.inf, np.nan, -0.0
    b = np.ones((20, 18), np.float32)
    c = np.empty((8, 18), np.float32)
    jo.gemm(a, b, c, *jo.buffers(np.float32))
    assert np.all(np.isposinf(c[0])) and np.all(np.isnan(c[1])) and np.all(c[2:] == 0)
    empty = np.full((5, 6), 3.0, np.float32)
    jo.gemm(np.zeros((5, 0), np.float32), np.zeros((0, 6), np.float32), empty, *jo.buffers(np.float32))
    assert np.all(empty == 3.0)  # K = 0: nothing to add, C left as it was (blocked.matmul never calls it so)


@pytest.mark.skipif(jg is None or not jg.FAST_LARGE, reason="the packed kernels are used only where "
                    "_jit_gemm.FAST_LARGE (measured faster than OpenBLAS there)")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("M, K, N", [(600, 160, 1030), (2000, 100, 200)])
def test_weight_gradient_products_take_it_with_the_same_bits_for_every_thread_count(monkeypatch, dtype, M, K, N):
    """A transposed left operand and K <= GOTO_MAX_K: ``blocked.matmul`` splits the product into one
    block per thread (columns when B is the wider operand, else rows), and the bits are the same
    for 1 to 4 threads and equal to the whole product in one call."""
    monkeypatch.setattr(blocked, "GOTO_MIN_MNK", 1)
    rng = np.random.default_rng(1)
    a = rng.standard_normal((K, M)).astype(dtype).T
    b = rng.standard_normal((K, N)).astype(dtype)
    whole = np.empty((M, N), dtype)
    jo.gemm(a, b, whole, *jo.buffers(dtype))
    calls = []
    real = blocked._goto

    def spy(*args):  # type: ignore[no-untyped-def]
        calls.append(args[3].shape)
        return real(*args)
    monkeypatch.setattr(blocked, "_goto", spy)
    saved = parallel.get_threads()
    try:
        for n in (1, 2, 3, 4):
            parallel.set_threads(n)
            with parallel.blas_limit(1):
                got = blocked.matmul(a, b)
            assert np.array_equal(got, whole), n
    finally:
        parallel.set_threads(saved)
    assert len(calls) == 4
    monkeypatch.setattr(blocked, "GOTO_MAX_K", 0)  # off: OpenBLAS's blocks, other bits, same numbers
    plain = blocked.matmul(a, b)
    assert np.all(np.abs(plain - whole) <= 2 * _bound(a, b))


def test_row_major_products_and_long_reductions_keep_blas(monkeypatch):
    monkeypatch.setattr(blocked, "GOTO_MIN_MNK", 1)
    rng = np.random.default_rng(2)
    a = rng.standard_normal((64, 700)).astype(np.float32)
    b = rng.standard_normal((700, 64)).astype(np.float32)
    out = np.empty((64, 64), np.float32)
    assert blocked._goto_kernel(a, b, out) is None  # row-major A
    assert blocked._goto_kernel(np.ascontiguousarray(a.T).T, b, out) is None  # K = 700 > GOTO_MAX_K
    assert blocked._goto_kernel(a[:, :512].T.copy().T, b[:512], out) is (jo if jg.FAST_LARGE else None)


def test_unaligned_operands_keep_blas(monkeypatch):
    """The kernel has one signature per dtype, for aligned arrays: an unaligned operand (a view
    at an odd byte offset) goes to NumPy's BLAS, with the right numbers."""
    monkeypatch.setattr(blocked, "GOTO_MIN_MNK", 1)
    raw = np.zeros(64 * 40 * 4 + 1, np.uint8)
    a = np.frombuffer(raw.data, np.float32, 64 * 40, offset=1).reshape(40, 64).T  # [64, 40], unaligned
    b = np.ones((40, 32), np.float32)
    assert not a.flags.aligned and blocked._goto_kernel(a, b, None) is None
    assert np.array_equal(blocked.matmul(a, b), np.zeros((64, 32), np.float32))
