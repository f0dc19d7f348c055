"""LSTMGrad's backpropagation through time by NumPy's ufuncs (the path without compiled
kernels), and ``dR``'s GEMMs, which both paths share."""

from __future__ import annotations

from typing import Any

import numpy as np

from .common import view

__all__ = ["Grad", "Direction", "sum_dR"]


class Grad:
    """Operands, results and scratch of one LSTMGrad call."""

    def __init__(self, **kw: Any) -> None:
        self.__dict__.update(kw)


class Direction:
    """Backward through time for one direction, in chunks of consecutive steps.

    Per chunk ``j`` (in the order the backward visits them):

    * ``factors(j)`` fills ``da``'s slots with the factors that do not depend on the
      carried gradients, and ``K``/``F`` (bulk ufuncs over the whole chunk);
    * ``steps(j)`` runs the recurrence: per step one GEMM ``da·R`` and 6-7 small ufuncs;
    * ``finish(j)`` adds the chunk's peephole gradients while its data is in cache.

    Small problems are one chunk, so the per-step loop holds only the ufuncs that need
    the carried gradients; large ones use L2-sized chunks.
    """

    def __init__(self, k: Grad, d: int) -> None:
        self.k, self.d = k, d
        self.rev = k.direction == "reverse" or d == 1
        nb, h, dt, alive = k.nb, k.h, k.dtype, k.steps.alive
        self.da = k.dab[:, :, d]  # [S, B, 4H]; each step's [B, 4H] slice has contiguous rows
        self.G = k.iofc[:, d]
        self.CA = k.CAll[:, d]
        self.dHA = None if k.dHAll is None else k.dHAll[:, d]
        self.c0 = None if k.C0 is None else k.C0[d]
        self.inject = k.steps.ends(self.rev)  # rows that end at a step (forward direction with SL)
        self.extract = k.steps.starts(self.rev)  # rows that start at a step (reverse direction with SL)
        T = max(1, min(alive, k.chunk_bytes // max(1, nb * 4 * h * dt.itemsize)))
        chunks = [(lo, min(lo + T, alive)) for lo in range(0, alive, T)]
        self.chunks = chunks[::-1] if not self.rev else chunks
        self.Tb = np.empty((4, T, nb, h), dt)  # contiguous temporaries of the factors
        self.Kb = np.empty((T, nb, h), dt)
        self.Cpb = np.empty((T, nb, h), dt)
        self.Fb = np.empty((T, nb, h), dt) if k.P is not None else None
        self.Cp: np.ndarray | None = None  # C_{t-1} of the current chunk
        self.dP = np.zeros((3, h), dt)  # i, o, f

    # -- the three phases -----------------------------------------------------------
    def factors(self, j: int) -> None:
        k, h = self.k, self.k.h
        lo, hi = self.chunks[j]
        m, n = hi - lo, k.nb
        A = self.da[lo:hi]
        A4 = view(A, (m, n, 4, h))
        g = self.G[lo:hi]
        g4 = view(g, (m, n, 4, h))
        i, o, f, c = g4[:, :, 0], g4[:, :, 1], g4[:, :, 2], g4[:, :, 3]
        Cp = self.Cp = self._c_prev(lo, hi, self.Cpb)
        K = self.Kb[:m]
        v, u, w, tm = (buf[:m] for buf in self.Tb)
        # Thirteen bulk ufuncs that compute in contiguous temporaries and write each
        # strided gate block of da once (strided writes cost ~3x contiguous ones):
        #   τ = tanh(C_t)  u = o·τ  v = i·c̃  w = f·C_{t-1}
        #   A_i = c̃·i(1-i) = v - v·i      A_o = τ·o(1-o) = u - u·o      A_f = C_{t-1}·f(1-f) = w - w·f
        #   A_c = i·(1-c̃²) = i - v·c̃      K = o·(1-τ²) = o - u·τ  [+ P_o·A_o]
        #   F = f  [+ P_i·A_i + P_f·A_f]
        Ai, Ao, Af, Ac = A4[:, :, 0], A4[:, :, 1], A4[:, :, 2], A4[:, :, 3]
        np.tanh(self.CA[lo:hi], out=K)
        np.multiply(i, c, out=v)
        np.multiply(v, i, out=tm)
        np.subtract(v, tm, out=Ai)
        np.multiply(v, c, out=tm)
        np.subtract(i, tm, out=Ac)
        np.multiply(o, K, out=u)
        np.multiply(u, o, out=tm)
        np.subtract(u, tm, out=Ao)
        np.multiply(u, K, out=K)
        np.subtract(o, K, out=K)
        np.multiply(f, Cp, out=w)
        np.multiply(w, f, out=tm)
        np.subtract(w, tm, out=Af)
        if k.P is not None:
            p = k.P[self.d]
            p_i, p_o, p_f = p[:h], p[h: 2 * h], p[2 * h:]
            F = self.Fb[:m]
            np.multiply(Ao, p_o, out=tm)
            K += tm
            np.multiply(Ai, p_i, out=F)
            F += f
            np.multiply(Af, p_f, out=tm)
            F += tm

    def steps(self, j: int, dH: np.ndarray, dC: np.ndarray, tmp: np.ndarray) -> None:
        k, h, d = self.k, self.k.h, self.d
        lo, hi = self.chunks[j]
        m = hi - lo
        A = self.da[lo:hi]
        A4 = view(A, (m, k.nb, 4, h))
        K = self.Kb[:m]
        F = self.Fb[:m] if k.P is not None else view(self.G[lo:hi], (m, k.nb, 4, h))[:, :, 2]
        order = slice(None, None, -1) if not self.rev else slice(None)
        dhas = self.dHA[lo:hi][order] if self.dHA is not None else [None] * m
        Rd = k.R[d]
        dC3 = dC[:, None, :]
        inject, extract = self.inject, self.extract
        dHF, dCF = k.dHFinal, k.dCFinal
        mul, add, dot = np.multiply, np.add, np.dot
        # Positional out arguments and views made by zip (in C): this loop is the hot path
        # at small sizes, where each step costs a few microseconds.
        for t, a, ai, ao, afc, kt, ft, dha in zip(range(lo, hi)[order], A[order], A4[order, :, 0],
                                                  A4[order, :, 1], A4[order, :, 2:], K[order], F[order], dhas):
            if inject:
                rows = inject.get(t)
                if rows is not None:
                    if dHF is not None:
                        dH[rows] += dHF[d, rows]
                    if dCF is not None:
                        dC[rows] += dCF[d, rows]
            if dha is not None:
                add(dH, dha, dH)
            mul(dH, kt, tmp)
            add(dC, tmp, dC)
            mul(ao, dH, ao)
            mul(ai, dC, ai)
            mul(afc, dC3, afc)
            mul(dC, ft, dC)
            dot(a, Rd, dH)
            if extract:
                rows = extract.get(t)
                if rows is not None:
                    k.dH0[d, rows] = dH[rows]
                    k.dC0[d, rows] = dC[rows]

    def finish(self, j: int) -> None:
        k, h = self.k, self.k.h
        lo, hi = self.chunks[j]
        m, n = hi - lo, k.nb
        A4 = view(self.da[lo:hi], (m, n, 4, h))
        # Peephole gradients: dP_o += Σ da_o·C_t, dP_{i,f} += Σ da_{i,f}·C_{t-1}.
        self.dP[1] += np.einsum("tbh,tbh->h", A4[:, :, 1], self.CA[lo:hi])
        self.dP[0::2] += np.einsum("tbgh,tbh->gh", A4[:, :, 0::2], self.Cp)

    def run(self) -> None:
        k, dt, h, d = self.k, self.k.dtype, self.k.h, self.d
        S, nb, alive = k.S, k.nb, k.steps.alive
        if alive < S:
            self.da[alive:] = 0
        dH = np.zeros((nb, h), dt)
        dC = np.zeros((nb, h), dt)
        if not self.inject:  # every row's final state is at the first step the backward visits
            if k.dHFinal is not None:
                dH[...] = k.dHFinal[d]
            if k.dCFinal is not None:
                dC[...] = k.dCFinal[d]
        tmp = np.empty((nb, h), dt)
        for j in range(len(self.chunks)):
            self.factors(j)
            self.steps(j, dH, dC, tmp)
            self.finish(j)
        if not self.extract:  # every row starts at the last step the backward visits
            k.dH0[d] = dH
            k.dC0[d] = dC

    def _c_prev(self, lo: int, hi: int, buf: np.ndarray) -> np.ndarray:
        """``C_{t-1}`` (the cell state before step t) for steps ``lo..hi-1``, as ``[m, B, H]``."""
        S, m, CA, c0, extract = self.k.S, hi - lo, self.CA, self.c0, self.extract
        if not self.rev:
            if lo > 0:
                return CA[lo - 1: hi - 1]
            out = buf[:m]
            if c0 is None:
                out[0] = 0
            else:
                out[0] = c0
            out[1:] = CA[: hi - 1]
            return out
        fix = [t for t in range(lo, hi) if t in extract and t < S - 1] if c0 is not None else []
        if hi < S and not fix:
            return CA[lo + 1: hi + 1]
        out = buf[:m]
        top = min(hi, S - 1)
        out[: top - lo] = CA[lo + 1: top + 1]
        if hi == S:
            out[m - 1] = 0 if c0 is None else c0
        for t in fix:  # reverse direction with SL: rows that start at step t start from C0
            rows = extract[t]
            out[t - lo, rows] = c0[rows]
        return out


def sum_dR(k: Grad, d: int, rev: bool, steps_done: bool = False) -> None:
    """``dR[d] = Σ_t da_tᵀ·H_{t-1}`` as a few large GEMMs, with no scratch that grows with S;
    only the first step's ``H0`` term when ``steps_done`` (the rest is in ``dR`` already).

    Runs last: when D = 2 it overwrites parts of direction ``d``'s ``da`` it no longer needs."""
    S, nb, h, D = k.S, k.nb, k.h, k.D
    out = k.dR[d]
    da = k.dab[:, :, d]  # [S, B, 4H]; as 2-D rows (t, b) it has a uniform row stride
    HA = k.HAll[:, d]
    first_da = None
    if k.H0 is not None:  # each row's first processed step starts from H0: its da, taken now
        if not rev:
            start = np.zeros(nb, np.intp)
        elif k.steps.lengths is not None:
            start = k.steps.lengths - 1
        else:
            start = np.full(nb, S - 1, np.intp)
        first_da = da[start, np.arange(nb)]  # a copy
    first = not steps_done
    tmp = None

    def acc(t0: int, t1: int, hb: np.ndarray) -> None:
        """out (+)= Σ_{t0 <= t < t1} da_tᵀ·H_{t-1}, with the H_{t-1} rows in ``hb`` ([t1-t0, B, H])."""
        nonlocal first, tmp
        a2, b2 = view(da[t0:t1], ((t1 - t0) * nb, 4 * h)).T, view(hb, ((t1 - t0) * nb, h))
        if first:
            k.mm(a2, b2, out)
            first = False
        else:
            if tmp is None:
                tmp = np.empty_like(out)
            k.mm(a2, b2, out, tmp)

    # Steps whose predecessor is a step: t = 1..S-1 (forward) or 0..S-2 (reverse).
    lo, hi = (1, S) if not rev else (0, S - 1)
    shift = -1 if not rev else 1
    if hi > lo and D == 1 and not steps_done:
        acc(lo, hi, HA[lo + shift: hi + shift])
    elif hi > lo and not steps_done:
        # HAll[:, d] is not a 2-D view when D = 2, so H_{t-1} is copied, in chunks, into the first
        # H columns of da rows (uniform stride) that are no longer needed: for the second
        # direction, all of the first one's; for the first, those of its own steps already
        # summed (one step's H_{t-1} is a contiguous [B, H] and needs no copy, then the chunks
        # double).  Nothing more is allocated.
        spare, base = (k.dab[:, :, 0], 0) if d == 1 else (da, lo)
        cap = max(1, k.copy_bytes // max(1, nb * h * k.dtype.itemsize))
        t0 = lo
        if d == 0:
            acc(lo, lo + 1, HA[lo + shift: lo + 1 + shift])
            t0 = lo + 1
        while t0 < hi:
            room = S if d == 1 else t0 - lo  # spare steps
            t1 = min(hi, t0 + min(room, cap))
            hb = spare[base: base + t1 - t0, :, :h]
            np.copyto(hb, HA[t0 + shift: t1 + shift])
            acc(t0, t1, hb)
            t0 = t1
    if first:
        out[...] = 0
    if first_da is not None:
        if tmp is None:
            tmp = np.empty_like(out)
        k.mm(first_da.T, k.H0[d], out, tmp)
