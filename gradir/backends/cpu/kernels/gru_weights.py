"""The weight gradients of one GRU direction, ``dW`` and ``dR``, from the compiled backward loop's
``da`` (``_jit_gru.backward_core``): products over every step's rows (``K = S·B``).

``dW = daᵀ·X`` and ``dR = Σ_t da_tᵀ·H_{t-1}``, except that the candidate gate's rows of ``dR`` take another
left operand: ``(da_h ⊙ r)ᵀ·H_{t-1}`` with ``linear_before_reset=1`` (``E`` holds ``da_h ⊙ r``), ``da_hᵀ·(r ⊙
H_{t-1})`` with 0 (``E`` holds ``r ⊙ H_{t-1}``).  Where the packed kernels are used (``_jit_gemm.FAST_LARGE``)
they run as ``_jit_goto.gemm2`` products, each block of ``daᵀ`` packed once for both of its products
(the LSTM's way: there 33 against 35 ms for OpenBLAS's two), with ``H0`` (or zeros) given beside
``HAll[:-1]`` rather than copied into one ``H_{t-1}`` array; every element is one fixed sum whatever the
split, and the rows of each product are split in two halves, one per core when the call has two.
Elsewhere (or with layouts those kernels do not take) ``blocked.matmul`` computes them from a copy of
``H_{t-1}``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import blocked, jit, parallel

__all__ = ["weight_grads", "MIN_MNK"]

MIN_MNK = blocked.GOTO_MIN_MNK  # products (rows x columns x reduction) below this size: blocked.matmul


def _flat(a: np.ndarray) -> np.ndarray | None:
    """``a`` ``[S, B, n]`` as a ``[S·B, n]`` view, or None."""
    v = a.view()
    try:
        v.shape = (a.shape[0] * a.shape[1], a.shape[2])
    except AttributeError:
        return None
    return v


def _goto(K: int, I: int, h: int, dt: np.dtype) -> Any:
    """``_jit_goto`` for products of ``K`` rows where it pays: its packing buffers and the two halves' thread
    hand-off cost more than small products take (at S,B,I,H = 10,4,16,32 GRUGrad took 0.54 ms with it,
    0.46 with NumPy's cores)."""
    if K * 3 * h * (I + h) < MIN_MNK:
        return None
    jg = jit.load("gemm")
    if jg is None or not jg.FAST_LARGE:
        return None
    jo = jit.load("goto")
    return jo if jo is not None and jo.fits2(I, h, dt) else None


def weight_grads(DA: np.ndarray, E: np.ndarray, X: np.ndarray, HAll: np.ndarray, h0: np.ndarray, lbr: int,
                 dW: np.ndarray, dR: np.ndarray, Hp: Any) -> None:
    """``dW`` ``[3H, I]`` and ``dR`` ``[3H, H]`` (module docstring): ``DA`` ``[S, B, 3H]`` and ``E`` ``[S, B, H]``
    C-contiguous, ``h0`` ``[B, H]`` (zeros when absent), ``Hp()`` a ``[S, B, H]`` scratch for the fallback."""
    S, nb, h3 = DA.shape
    h, I, dt = h3 // 3, X.shape[2], DA.dtype
    if S == 0:  # an empty sequence: no step, no gradient
        dW[...] = 0
        dR[...] = 0
        return
    DA2, E2 = DA.reshape(S * nb, h3), E.reshape(S * nb, h)
    X2 = _flat(X)
    X2 = jit.readable(X2 if X2 is not None else np.ascontiguousarray(X).reshape(S * nb, I))
    HA2 = _flat(HAll)
    jo = _goto(S * nb, I, h, dt)
    if (jo is not None and HA2 is not None and S >= 2 and HA2.strides[1] == HA2.itemsize
            and all(a.flags.c_contiguous and a.flags.aligned for a in (dW, dR, X2, h0))):
        HA2 = jit.readable(HA2)[: (S - 1) * nb]
        zr, hh = DA2[:, :2 * h].T, DA2[:, 2 * h:].T
        if lbr:  # (dR_h's left operand is E: a product of its own, with no first right operand)
            jobs = [(zr, X2, h0, HA2, dW[:2 * h], dR[:2 * h]), (hh, X2, None, None, dW[2 * h:], None),
                    (E2.T, X2[:, :0], h0, HA2, dW[2 * h:, :0], dR[2 * h:])]
        else:
            jobs = [(zr, X2, h0, HA2, dW[:2 * h], dR[:2 * h]), (hh, X2, E2, None, dW[2 * h:], dR[2 * h:])]

        def half(which: int) -> None:
            bufs = blocked.goto_buffers(jo, dt)
            for A, B1, B2, B2y, C1, C2 in jobs:
                m = (A.shape[0] // 2 + jo.MR - 1) // jo.MR * jo.MR
                r0, r1 = (0, m) if which == 0 else (m, A.shape[0])
                if B2 is None:
                    jo.gemm(A[r0:r1], B1, C1[r0:r1], *bufs)
                else:
                    jo.gemm2(A[r0:r1], B1, B2, C1[r0:r1], C2[r0:r1], *bufs, B2y=B2y)

        parallel.run_two(lambda stop: half(0), lambda stop: half(1), concurrent=parallel.threads_here() >= 2)
        return
    _into(dW, blocked.matmul(DA2.T, X2, out=dW if dW.flags.c_contiguous else None))
    H = Hp()  # H_{t-1} of every step (rows past their length have da = 0 there, whatever it holds)
    H[0] = h0
    H[1:] = HAll[:-1]
    H2 = H.reshape(S * nb, h)
    _into(dR[:2 * h], blocked.matmul(DA2[:, :2 * h].T, H2))
    _into(dR[2 * h:], blocked.matmul(E2.T, H2) if lbr else blocked.matmul(DA2[:, 2 * h:].T, E2))


def _into(out: np.ndarray, value: np.ndarray) -> None:
    if value is not out:
        out[...] = value
