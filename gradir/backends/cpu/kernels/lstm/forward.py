"""LSTMTraining: ONNX's LSTM forward over a sequence (gate order i, o, f, c), keeping what
LSTMGrad needs (every step's H, C and gate activations)."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from .. import blocked, jit, parallel
from . import common
from .common import Steps, check_dtype, check_layer_attrs, expect, result, seq_lengths, split_wanted, view

__all__ = ["lstm_training"]


def _halve_sigmoid_rows(M: np.ndarray, h: int) -> np.ndarray:
    """Copy of ``M`` (``[4H, ...]`` or ``[4H]``) with the i, o, f rows halved."""
    M = np.array(M, copy=True)
    M[: 3 * h] *= 0.5
    return M


_BLOCK_ELEMENTS = 1 << 21  # gate elements per compiled call of the whole loop


def _mask_step(steps: Steps, t: int, ht: np.ndarray, ct: np.ndarray, g: np.ndarray, r0: int, r1: int) -> None:
    """Zero the rows ``r0 .. r1-1`` (``ht``, ``ct``, ``g`` hold just those) that have no step ``t``."""
    m = steps.partial.get(t)
    if m is not None:  # rows with t >= SL[b] do not exist at this step
        m = m[r0:r1]
        ht *= m
        ct *= m
        g *= m


def _forward_direction(X: np.ndarray, Wd: np.ndarray, Rd: np.ndarray, bd: np.ndarray | None,
                       pd: np.ndarray | None, h0: np.ndarray | None, c0: np.ndarray | None,
                       steps: Steps, rev: bool, HA: np.ndarray, CA: np.ndarray, G: np.ndarray,
                       hfin: np.ndarray, cfin: np.ndarray) -> None:
    """One direction.  ``HA``/``CA`` ``[S, B, H]`` and ``G`` ``[S, B, 4H]`` are (strided) views of
    the results whose per-step slices are contiguous."""
    S, nb, _ = X.shape
    h = Rd.shape[1]
    dt = X.dtype
    # compiled operands: C-contiguous (one machine-code variant, the same GEMM for every layout)
    h0 = None if h0 is None else jit.readable(np.ascontiguousarray(h0))
    c0 = None if c0 is None else jit.readable(np.ascontiguousarray(c0))
    # Pre-activations with the sigmoid blocks halved: a tanh of all four blocks then
    # gives tanh(a_c) and, after ½·t + ½, the three sigmoids.
    WsT = _halve_sigmoid_rows(Wd, h).T
    RsT = _halve_sigmoid_rows(Rd, h).T
    if G.flags.c_contiguous:  # in blocks over the cores this call was given (``blocked``)
        blocked.matmul(view(X, (S * nb, X.shape[2])), WsT, out=view(G, (S * nb, 4 * h)))
    else:
        blocked.matmul(X, WsT, out=G)
    bias = _halve_sigmoid_rows(bd[: 4 * h] + bd[4 * h:], h) if bd is not None else None
    if pd is not None:
        pi, po, pf = (0.5 * pd[k * h: (k + 1) * h] for k in range(3))
    # Float64 compiled code calls libm's scalar tanh: faster than NumPy's passes for small
    # steps, slower than its SIMD tanh for large ones (290 vs 253 ms at B=64, H=256)
    jl = jit.load("lstm") if dt == np.float32 or nb * 4 * h <= common.WHOLE_LOOP_MAX else None
    if jl is not None:  # the compiled step adds the bias itself
        p_half = (0.5 * pd).astype(dt) if pd is not None else np.zeros(1, dt)
        b_step = bias.astype(dt) if bias is not None else np.zeros(1, dt)
    elif bias is not None:
        G += bias

    starts = steps.starts(rev) if (h0 is not None or c0 is not None) else {}
    order = range(S - 1, -1, -1) if rev else range(S)

    def loop(r0: int, r1: int, stop: threading.Event | None = None) -> None:
        """The step loop of batch rows ``r0 .. r1-1`` (independent of the other rows)."""
        m = r1 - r0
        zeros = np.zeros((m, h), dt)
        hp = h0[r0:r1] if h0 is not None else zeros
        cp = c0[r0:r1] if c0 is not None else zeros
        tmp4 = np.empty((m, 4 * h), dt)
        tmp = np.empty((m, h), dt)
        hbuf = cbuf = None
        if jl is not None and RsTp is not None and not starts and not steps.partial and steps.alive == S:
            # every row valid at every step: the whole loop compiled, in blocks of visits (a
            # Ctrl-C, ``stop``, is seen between them)
            block = max(1, _BLOCK_ELEMENTS // max(1, m * 4 * h))
            hv, cv = jit.readable(np.ascontiguousarray(hp)), jit.readable(np.ascontiguousarray(cp))
            for k0 in range(0, S, block):
                if stop is not None and stop.is_set():
                    return
                jl.forward_loop(rev, k0, min(S, k0 + block), r0, r1, G, tmp4, RsTp, b_step, bias is not None,
                                hv, cv, HA, CA, p_half, pd is not None)
            return
        for t in order:
            if stop is not None and stop.is_set():
                return
            if t >= steps.alive:  # valid for no row
                HA[t, r0:r1] = 0
                CA[t, r0:r1] = 0
                G[t, r0:r1] = 0
                continue
            rows = starts.get(t)
            if rows is not None and t < steps.alive - 1:
                rows = rows[(rows >= r0) & (rows < r1)] - r0  # this loop's rows among them
            if rows is not None and rows.size and t < steps.alive - 1:
                # Reverse direction: these rows start here, from H0/C0 rather than step t+1.
                if hbuf is None:
                    hbuf, cbuf = np.empty((m, h), dt), np.empty((m, h), dt)
                np.copyto(hbuf, hp)
                np.copyto(cbuf, cp)
                hbuf[rows] = h0[r0:r1][rows] if h0 is not None else 0
                cbuf[rows] = c0[r0:r1][rows] if c0 is not None else 0
                hp, cp = hbuf, cbuf
            g = G[t, r0:r1]
            ct, ht = CA[t, r0:r1], HA[t, r0:r1]
            if RsTp is not None and hp.strides[1] == hp.itemsize:
                jg.gemm(hp, RsTp, tmp4)
            else:
                np.matmul(hp, RsT, out=tmp4)
            if jl is not None:  # the whole element-wise step fused (numba)
                jl.forward_step(g, tmp4, b_step, bias is not None, jit.readable(cp), ct, ht, p_half, pd is not None)
                _mask_step(steps, t, ht, ct, g, r0, r1)
                hp, cp = ht, ct
                continue
            g += tmp4
            gi, go, gf, gc = g[:, :h], g[:, h: 2 * h], g[:, 2 * h: 3 * h], g[:, 3 * h:]
            if pd is None:
                np.tanh(g, out=g)
                s = g[:, : 3 * h]
                s *= 0.5
                s += 0.5
            else:
                np.multiply(cp, pi, out=tmp)
                gi += tmp
                np.multiply(cp, pf, out=tmp)
                gf += tmp
                np.tanh(gi, out=gi)
                gfc = g[:, 2 * h:]
                np.tanh(gfc, out=gfc)
                for s in (gi, gf):
                    s *= 0.5
                    s += 0.5
            np.multiply(gf, cp, out=ct)
            np.multiply(gi, gc, out=tmp)
            ct += tmp
            if pd is not None:
                np.multiply(ct, po, out=tmp)
                go += tmp
                np.tanh(go, out=go)
                go *= 0.5
                go += 0.5
            np.tanh(ct, out=tmp)
            np.multiply(go, tmp, out=ht)
            _mask_step(steps, t, ht, ct, g, r0, r1)
            hp, cp = ht, ct

    # Large batches on the compiled path: two half-batch loops, each with single-threaded BLAS,
    # side by side when the call was given two cores (as in LSTMGrad, see lstm_grad).
    with parallel.own_blas_threads(split_wanted(jl, nb, h)) as blas:
        # Each loop's GEMM H_{t-1}·Rᵀ by the packed-R kernel (one thread; 91 vs 72 GFLOP/s for
        # OpenBLAS at 32x256 by 256x1024) where the loop is small, or has a core to itself on a
        # CPU where that kernel beats BLAS (``_jit_gemm.FAST_LARGE``).
        jg = jl.gemm_module if jl is not None else None  # (jl's own: jit may be switched off meanwhile)
        small = nb * 4 * h <= common.WHOLE_LOOP_MAX
        RsTp = jg.pack(RsT) if jg is not None and (small or (blas.ok and jg.FAST_LARGE)) else None
        if blas.ok:
            half = nb // 2
            parallel.run_two(lambda stop: loop(0, half, stop), lambda stop: loop(half, nb, stop),
                             concurrent=blas.threads >= 2)
        else:
            loop(0, nb)
    if rev:
        hfin[...] = HA[0]
        cfin[...] = CA[0]
    elif steps.lengths is not None:
        last, rows = steps.lengths - 1, np.arange(nb)
        hfin[...] = HA[last, rows]
        cfin[...] = CA[last, rows]
    else:
        hfin[...] = HA[S - 1]
        cfin[...] = CA[S - 1]



def lstm_training(X: np.ndarray, W: np.ndarray, R: np.ndarray, B: np.ndarray | None = None,
                  SL: np.ndarray | None = None, H0: np.ndarray | None = None,
                  C0: np.ndarray | None = None, P: np.ndarray | None = None, *, out: Any = None,
                  hidden_size: int, direction: str = "forward", activations: Any = None,
                  clip: float | None = None, input_forget: int = 0) -> tuple[np.ndarray, ...]:
    """ONNX LSTM forward; returns ``(HAll [S,D,B,H], HFinal, CFinal [D,B,H], CAll [S,D,B,H], iofc [S,D,B,4H])``."""
    D = check_layer_attrs("LSTMTraining", direction, activations, clip, input_forget)
    dt = check_dtype("LSTMTraining", X, W, R, B, H0, C0, P)
    X = np.ascontiguousarray(X)
    S, nb, I = X.shape
    h = hidden_size
    expect("LSTMTraining", ("W", W, (D, 4 * h, I)), ("R", R, (D, 4 * h, h)), ("B", B, (D, 8 * h)),
            ("H0", H0, (D, nb, h)), ("C0", C0, (D, nb, h)), ("P", P, (D, 3 * h)))
    steps = Steps(seq_lengths("LSTMTraining", SL, S, nb), S, dt)
    HAll = result(out, 0, (S, D, nb, h), dt)
    HFinal = result(out, 1, (D, nb, h), dt)
    CFinal = result(out, 2, (D, nb, h), dt)
    CAll = result(out, 3, (S, D, nb, h), dt)
    iofc = result(out, 4, (S, D, nb, 4 * h), dt)
    for d in range(D):
        _forward_direction(
            X, W[d], R[d], None if B is None else B[d], None if P is None else P[d],
            None if H0 is None else H0[d], None if C0 is None else C0[d], steps,
            direction == "reverse" or d == 1, HAll[:, d], CAll[:, d], iofc[:, d], HFinal[d], CFinal[d])
    return HAll, HFinal, CFinal, CAll, iofc
