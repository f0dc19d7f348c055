"""LSTMTraining: ONNX's LSTM forward over a sequence (gate order i, o, f, c), keeping what
LSTMGrad needs (every step's H, C and gate activations)."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from .. import blocked, jit, parallel
from . import common
from .common import Steps, check_dtype, check_layer_attrs, expect, result, seq_lengths, split_wanted, view

__all__ = ["ForwardDirection", "initial_state", "lstm_training"]


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


class ForwardDirection:
    """One direction's forward, run over windows of steps ``[lo, hi)`` (``run``): the whole sequence
    (LSTMTraining) or, from a checkpointed state, a segment of it (the checkpointed ops).  The gates'
    input product ``X·Wᵀ`` is computed per fixed chunk of ``T0`` steps (``T0`` a function of the shapes
    alone; windows are unions of chunks) and each step from the state it is given, so a segment
    computed again from its entering state has the bits of the whole sequence's run.  Used as a
    context (``with``): the BLAS threads and the packed ``Rᵀ`` are set up once for every window."""

    def __init__(self, X: np.ndarray, Wd: np.ndarray, Rd: np.ndarray, bd: np.ndarray | None,
                 pd: np.ndarray | None, h0: np.ndarray | None, c0: np.ndarray | None, steps: Steps,
                 rev: bool, T0: int, wanted: bool | None = None) -> None:
        S, nb, _ = X.shape
        h = Rd.shape[1]
        dt = X.dtype
        self.X, self.steps, self.rev, self.T0, self.S, self.nb, self.h, self.dt = X, steps, rev, T0, S, nb, h, dt
        self.pd = pd
        # compiled operands: C-contiguous (one machine-code variant, the same GEMM for every layout)
        self.h0 = None if h0 is None else jit.readable(np.ascontiguousarray(h0))
        self.c0 = None if c0 is None else jit.readable(np.ascontiguousarray(c0))
        # Pre-activations with the sigmoid blocks halved: a tanh of all four blocks then
        # gives tanh(a_c) and, after ½·t + ½, the three sigmoids.
        self.WsT = _halve_sigmoid_rows(Wd, h).T
        self.RsT = _halve_sigmoid_rows(Rd, h).T
        self.bias = _halve_sigmoid_rows(bd[: 4 * h] + bd[4 * h:], h) if bd is not None else None
        # Float64 compiled code calls libm's scalar tanh: faster than NumPy's passes for small
        # steps, slower than its SIMD tanh for large ones (290 vs 253 ms at B=64, H=256)
        self.jl = jit.load("lstm") if dt == np.float32 or nb * 4 * h <= common.WHOLE_LOOP_MAX else None
        if self.jl is not None:  # the compiled step adds the bias itself
            self.p_half = (0.5 * pd).astype(dt) if pd is not None else np.zeros(1, dt)
            self.b_step = self.bias.astype(dt) if self.bias is not None else np.zeros(1, dt)
        self.starts = steps.starts(rev) if (h0 is not None or c0 is not None) else {}
        # whether to run as two half-batch loops, decided before any caller holds BLAS (the same
        # decision as LSTMTraining's, whoever calls)
        self.wanted = split_wanted(self.jl, nb, h) if wanted is None else wanted

    def __enter__(self) -> "ForwardDirection":
        # Large batches on the compiled path: two half-batch loops, each with single-threaded BLAS,
        # side by side when the call was given two cores (as in LSTMGrad, see lstm_grad).
        self._blas_ctx = parallel.own_blas_threads(self.wanted)
        self.blas = self._blas_ctx.__enter__()
        # Each loop's GEMM H_{t-1}·Rᵀ by the packed-R kernel (one thread; 91 vs 72 GFLOP/s for
        # OpenBLAS at 32x256 by 256x1024) where the loop is small, or has a core to itself on a
        # CPU where that kernel beats BLAS (``_jit_gemm.FAST_LARGE``).
        jl = self.jl
        self.jg = jl.gemm_module if jl is not None else None  # (jl's own: jit may be switched off meanwhile)
        small = self.nb * 4 * self.h <= common.WHOLE_LOOP_MAX
        self.RsTp = (self.jg.pack(self.RsT) if self.jg is not None and (small or (self.blas.ok and self.jg.FAST_LARGE))
                     else None)
        return self

    def __exit__(self, *exc: object) -> None:
        self._blas_ctx.__exit__(*exc)

    def gates(self, lo: int, hi: int, G: np.ndarray) -> None:
        """``G`` (steps ``lo .. hi-1``) = ``X·Wᵀ`` (sigmoid rows halved), one product per fixed chunk."""
        X, nb, h, T0 = self.X, self.nb, self.h, self.T0
        for c0 in range(lo - lo % T0, hi, T0):
            a, b = max(lo, c0), min(hi, c0 + T0)
            x, g = X[a:b], G[a - lo: b - lo]
            if g.flags.c_contiguous:  # in blocks over the cores this call was given (``blocked``)
                blocked.matmul(view(x, ((b - a) * nb, X.shape[2])), self.WsT, out=view(g, ((b - a) * nb, 4 * h)))
            else:
                blocked.matmul(x, self.WsT, out=g)
            if self.jl is None and self.bias is not None:
                g += self.bias

    def run(self, lo: int, hi: int, HA: np.ndarray, CA: np.ndarray, G: np.ndarray, hs: np.ndarray,
            cs: np.ndarray) -> None:
        """Steps ``lo .. hi-1`` (in the direction's order) into ``HA``/``CA`` ``[hi-lo, B, H]`` and ``G``
        ``[hi-lo, B, 4H]`` (views whose per-step slices are contiguous), from the carried state
        ``hs``/``cs`` ``[B, H]`` (the state before the window's first step), which become the state
        after its last step."""
        S, nb, h, dt, rev, steps, jl = self.S, self.nb, self.h, self.dt, self.rev, self.steps, self.jl
        h0, c0, starts, RsT, RsTp, jg, pd = self.h0, self.c0, self.starts, self.RsT, self.RsTp, self.jg, self.pd
        n = hi - lo
        self.gates(lo, hi, G)
        if pd is not None:
            pi, po, pf = (0.5 * pd[k * h: (k + 1) * h] for k in range(3))
        order = range(hi - 1, lo - 1, -1) if rev else range(lo, hi)

        def loop(r0: int, r1: int, stop: threading.Event | None = None) -> None:
            """The step loop of batch rows ``r0 .. r1-1`` (independent of the other rows)."""
            m = r1 - r0
            hp = jit.readable(np.array(hs[r0:r1]))
            cp = jit.readable(np.array(cs[r0:r1]))
            tmp4 = np.empty((m, 4 * h), dt)
            tmp = np.empty((m, h), dt)
            hbuf = cbuf = None
            if jl is not None and RsTp is not None and not starts and not steps.partial and steps.alive == S:
                # every row valid at every step: the whole loop compiled, in blocks of visits (a
                # Ctrl-C, ``stop``, is seen between them)
                block = max(1, _BLOCK_ELEMENTS // max(1, m * 4 * h))
                for k0 in range(0, n, block):
                    if stop is not None and stop.is_set():
                        return
                    jl.forward_loop(rev, k0, min(n, k0 + block), r0, r1, G, tmp4, RsTp, self.b_step,
                                    self.bias is not None, hp, cp, HA, CA, self.p_half, pd is not None)
                last = 0 if rev else n - 1
                hs[r0:r1] = HA[last, r0:r1]
                cs[r0:r1] = CA[last, r0:r1]
                return
            for t in order:
                if stop is not None and stop.is_set():
                    return
                w = t - lo
                if t >= steps.alive:  # valid for no row
                    HA[w, r0:r1] = 0
                    CA[w, r0:r1] = 0
                    G[w, r0:r1] = 0
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
                g = G[w, r0:r1]
                ct, ht = CA[w, r0:r1], HA[w, r0:r1]
                if RsTp is not None and hp.strides[1] == hp.itemsize:
                    jg.gemm(hp, RsTp, tmp4)
                else:
                    np.matmul(hp, RsT, out=tmp4)
                if jl is not None:  # the whole element-wise step fused (numba)
                    jl.forward_step(g, tmp4, self.b_step, self.bias is not None, jit.readable(cp), ct, ht,
                                    self.p_half, pd is not None)
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
            hs[r0:r1] = hp
            cs[r0:r1] = cp

        if self.blas.ok:
            half = nb // 2
            parallel.run_two(lambda stop: loop(0, half, stop), lambda stop: loop(half, nb, stop),
                             concurrent=self.blas.threads >= 2)
        else:
            loop(0, nb)


def initial_state(a: np.ndarray | None, nb: int, h: int, dt: np.dtype) -> np.ndarray:
    """The state a direction starts from: ``H0[d]``/``C0[d]`` copied, or zeros."""
    return np.zeros((nb, h), dt) if a is None else np.array(a, dt)


def _forward_direction(X: np.ndarray, Wd: np.ndarray, Rd: np.ndarray, bd: np.ndarray | None,
                       pd: np.ndarray | None, h0: np.ndarray | None, c0: np.ndarray | None,
                       steps: Steps, rev: bool, HA: np.ndarray, CA: np.ndarray, G: np.ndarray,
                       hfin: np.ndarray, cfin: np.ndarray, T0: int) -> None:
    """One direction over the whole sequence.  ``HA``/``CA`` ``[S, B, H]`` and ``G`` ``[S, B, 4H]`` are
    (strided) views of the results whose per-step slices are contiguous."""
    S, nb, _ = X.shape
    h = Rd.shape[1]
    hs, cs = initial_state(h0, nb, h, X.dtype), initial_state(c0, nb, h, X.dtype)
    with ForwardDirection(X, Wd, Rd, bd, pd, h0, c0, steps, rev, T0) as fd:
        fd.run(0, S, HA, CA, G, hs, cs)
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
    T0 = common.chunk_steps(S, nb, D, h, dt)
    for d in range(D):
        _forward_direction(
            X, W[d], R[d], None if B is None else B[d], None if P is None else P[d],
            None if H0 is None else H0[d], None if C0 is None else C0[d], steps,
            direction == "reverse" or d == 1, HAll[:, d], CAll[:, d], iofc[:, d], HFinal[d], CFinal[d], T0)
    return HAll, HFinal, CFinal, CAll, iofc
