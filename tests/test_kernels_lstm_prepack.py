"""``gemm2`` taking its left operand packed ahead (``Apre``, ``_jit_goto.stream_packed``), and LSTMGrad
with a non-finite first step."""

from __future__ import annotations

import numpy as np
import pytest
from test_kernels_lstm import force_path, make_layer, run_forward, run_grad, upstream

import gradir.backends.cpu.kernels._jit_gemm as jit_gemm
from gradir.backends.cpu.kernels import jit
from gradir.backends.cpu.kernels.lstm import sweep as lstm_sweep

jo = jit.load("goto")
pytestmark = pytest.mark.skipif(jo is None, reason="compiled kernels off (GRADIR_JIT=0) or numba missing")


def ref_pack(A: np.ndarray) -> np.ndarray:
    """``A`` ``[M, K]`` in ``prepacked_size``'s layout, by NumPy."""
    M, K = A.shape
    MR, KC = jo.MR, jo.KC
    nt = -(-M // MR)
    out = np.full(jo.prepacked_size(M, K), np.nan, A.dtype)  # every element written: checked below
    for kb in range(-(-K // KC)):
        kc = min(KC, K - kb * KC)
        ts, base = MR * kc, kb * nt * MR * KC
        for t in range(nt):
            tile = np.zeros((kc, MR), A.dtype)
            rows = A[t * MR: (t + 1) * MR, kb * KC: kb * KC + kc]
            tile[:, : rows.shape[0]] = rows.T
            out[base + t * ts: base + (t + 1) * ts] = tile.ravel()
    assert not np.isnan(out).any()
    return out


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_packed_ahead_gives_the_bits_of_a_packed_by_the_product(dtype: type) -> None:
    """``gemm2(..., Apre=...)`` reads A's blocks from the operand packed ahead (A itself is not
    read: NaN here), for the whole of A and for the two halves an LSTM's threads take, with
    several blocks of k and an edge tile: the bits of ``gemm2`` packing A itself.  ``unpacked``
    gives back A's columns; a packed operand too small for A is refused."""
    rng = np.random.default_rng(5)
    buffers = jo.buffers(dtype)
    for M, K, N1, N2 in ((1024, 2 * jo.KC + 64, 40, 33), (100, 37, 16, 5), (6, jo.KC, 3, 17)):
        A = rng.standard_normal((M, K)).astype(dtype)
        B1, B2 = rng.standard_normal((K, N1)).astype(dtype), rng.standard_normal((K, N2)).astype(dtype)
        pk = ref_pack(A)
        nt = -(-M // jo.MR)
        W1, W2 = np.empty((M, N1), dtype), np.empty((M, N2), dtype)
        jo.gemm2(A, B1, B2, W1, W2, *buffers)
        blind = np.full_like(A, np.nan)
        m = (M // 2 + jo.MR - 1) // jo.MR * jo.MR
        for r0, r1 in ((0, M), (0, m), (m, M)):
            C1, C2 = np.full((r1 - r0, N1), 7, dtype), np.full((r1 - r0, N2), 7, dtype)
            jo.gemm2(blind[r0:r1], B1, B2, C1, C2, *buffers, Apre=pk, nt=nt, t0=r0 // jo.MR)
            assert np.array_equal(C1, W1[r0:r1]) and np.array_equal(C2, W2[r0:r1]), (M, K, r0)
        for k0, k1 in ((0, K), (K // 3, K // 3 + 5), (K - 1, K)):
            assert np.array_equal(jo.unpacked(pk, M, K, k0, k1), A[:, k0:k1].T)
        with pytest.raises(ValueError, match="packed operand"):
            jo.gemm2(blind, B1, B2, W1, W2, *buffers, Apre=pk[:-1], nt=nt, t0=0)
        with pytest.raises(ValueError, match="packed operand"):
            jo.gemm2(blind[:1], B1, B2, W1[:1], W2[:1], *buffers, Apre=pk, nt=nt, t0=nt)  # past its tiles


@pytest.mark.skipif(not jit_gemm.FAST_LARGE, reason="the step loops stream da only on the packed-kernel path "
                    "(_jit_gemm.FAST_LARGE)")
@pytest.mark.parametrize("direction", ["forward", "reverse"])
def test_a_non_finite_first_step_without_h0_makes_no_nan_in_dr(monkeypatch, direction):
    """No H0 and a non-finite ``da`` at the first step: dR has no H0 term (zeros times Inf would be
    NaN), and dX after the loops has the bits of dX in the loops.  (LSTMGrad's weight gradients are
    per-chunk products since issue #33; the loops no longer write ``da`` into ``gemm2``'s packed
    operand, which ``test_a_packed_ahead_gives_the_bits_of_a_packed_by_the_product`` still checks.)"""
    force_path(monkeypatch, "halves")
    monkeypatch.setattr(jit, "_on", True)
    rng = np.random.default_rng(9)
    S, nb, I, H = 6, 8, 5, 8
    ops = make_layer(rng, S, nb, I, H, direction, dtype=np.float32)
    up = upstream(rng, S, nb, H, 1, "all", dtype=np.float32)
    up["dHAll"][0 if direction == "forward" else S - 1, 0, 3, 2] = np.inf
    fwd = run_forward(ops, H, direction)
    with np.errstate(all="ignore"):
        got = run_grad(ops, fwd, up, H, direction)
        monkeypatch.setattr(lstm_sweep, "DX_IN_LOOP", False)
        want = run_grad(ops, fwd, up, H, direction)
    assert not np.isnan(got[2]).any()
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)
