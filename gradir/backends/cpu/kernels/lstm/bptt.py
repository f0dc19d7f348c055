"""LSTMGrad's backpropagation through time by NumPy's ufuncs (the path without compiled kernels)."""

from __future__ import annotations

from typing import Any

import numpy as np

from .common import view

__all__ = ["Grad", "Direction"]


class Grad:
    """Operands, results and scratch of one LSTMGrad call."""

    def __init__(self, **kw: Any) -> None:
        self.__dict__.update(kw)


class Direction:
    """Backward through time for one direction by NumPy's ufuncs, window by window (``Sweep``: the
    fixed chunks of T0 steps in visit order), each window in pieces of consecutive steps.

    Per piece (in the order the backward visits them):

    * ``factors`` fills ``da``'s slots with the factors that do not depend on the carried
      gradients, and ``K``/``F`` (bulk ufuncs over the whole piece);
    * ``steps`` runs the recurrence: per step one GEMM ``da·R`` and 6-7 small ufuncs;
    * ``finish`` adds the piece's peephole gradients while its data is in cache.

    The pieces are L2-sized (a function of the shapes alone), cut from each window's first step.
    Arrays of a window are indexed from its first step ``base`` (``t - base``).
    """

    def __init__(self, k: Grad, d: int, T0: int) -> None:
        self.k, self.d = k, d
        self.rev = k.direction == "reverse" or d == 1
        nb, h, dt = k.nb, k.h, k.dtype
        self.inject = k.steps.ends(self.rev)  # rows that end at a step (forward direction with SL)
        self.extract = k.steps.starts(self.rev)  # rows that start at a step (reverse direction with SL)
        T = self.T = max(1, min(T0, k.chunk_bytes // max(1, nb * 4 * h * dt.itemsize)))
        self.Tb = np.empty((4, T, nb, h), dt)  # contiguous temporaries of the factors
        self.Kb = np.empty((T, nb, h), dt)
        self.Cpb = np.empty((T, nb, h), dt)
        self.Fb = np.empty((T, nb, h), dt) if k.P is not None else None
        self.Cp: np.ndarray | None = None  # C_{t-1} of the current piece
        self.dP = np.zeros((3, h), dt)  # i, o, f
        self.dH = np.zeros((nb, h), dt)
        self.dC = np.zeros((nb, h), dt)
        self.tmp = np.empty((nb, h), dt)
        if not self.inject:  # every row's final state is at the first step the backward visits
            if k.dHFinal is not None:
                self.dH[...] = k.dHFinal[d]
            if k.dCFinal is not None:
                self.dC[...] = k.dCFinal[d]

    def window(self, lo: int, hi: int, base: int, G: np.ndarray, CA: np.ndarray, dHA: np.ndarray | None,
               da: np.ndarray) -> None:
        """Steps ``lo .. hi-1`` (all valid for some row); ``G``, ``CA``, ``dHA`` ``[n, D, B, ·]`` and ``da``
        ``[n, B, D, 4H]`` from step ``base``."""
        d = self.d
        self.base, self.G, self.CA, self.da = base, G[:, d], CA[:, d], da[:, :, d]
        self.dHA = None if dHA is None else dHA[:, d]
        pieces = [(a, min(a + self.T, hi)) for a in range(lo, hi, self.T)]
        for a, b in (pieces if self.rev else pieces[::-1]):
            self.factors(a, b)
            self.steps(a, b)
            self.finish(a, b)

    def done(self) -> None:
        if not self.extract:  # every row starts at the last step the backward visits
            self.k.dH0[self.d] = self.dH
            self.k.dC0[self.d] = self.dC

    # -- the three phases -----------------------------------------------------------
    def factors(self, lo: int, hi: int) -> None:
        k, h, w = self.k, self.k.h, self.base
        m, n = hi - lo, k.nb
        A = self.da[lo - w: hi - w]
        A4 = view(A, (m, n, 4, h))
        g = self.G[lo - w: hi - w]
        g4 = view(g, (m, n, 4, h))
        i, o, f, c = g4[:, :, 0], g4[:, :, 1], g4[:, :, 2], g4[:, :, 3]
        Cp = self.Cp = self._c_prev(lo, hi, self.Cpb)
        K = self.Kb[:m]
        v, u, wt, tm = (buf[:m] for buf in self.Tb)
        # Thirteen bulk ufuncs that compute in contiguous temporaries and write each
        # strided gate block of da once (strided writes cost ~3x contiguous ones):
        #   τ = tanh(C_t)  u = o·τ  v = i·c̃  w = f·C_{t-1}
        #   A_i = c̃·i(1-i) = v - v·i      A_o = τ·o(1-o) = u - u·o      A_f = C_{t-1}·f(1-f) = w - w·f
        #   A_c = i·(1-c̃²) = i - v·c̃      K = o·(1-τ²) = o - u·τ  [+ P_o·A_o]
        #   F = f  [+ P_i·A_i + P_f·A_f]
        Ai, Ao, Af, Ac = A4[:, :, 0], A4[:, :, 1], A4[:, :, 2], A4[:, :, 3]
        np.tanh(self.CA[lo - w: hi - w], out=K)
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
        np.multiply(f, Cp, out=wt)
        np.multiply(wt, f, out=tm)
        np.subtract(wt, tm, out=Af)
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

    def steps(self, lo: int, hi: int) -> None:
        k, h, d, w = self.k, self.k.h, self.d, self.base
        dH, dC, tmp = self.dH, self.dC, self.tmp
        m = hi - lo
        A = self.da[lo - w: hi - w]
        A4 = view(A, (m, k.nb, 4, h))
        K = self.Kb[:m]
        F = self.Fb[:m] if k.P is not None else view(self.G[lo - w: hi - w], (m, k.nb, 4, h))[:, :, 2]
        order = slice(None, None, -1) if not self.rev else slice(None)
        dhas = self.dHA[lo - w: hi - w][order] if self.dHA is not None else [None] * m
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

    def finish(self, lo: int, hi: int) -> None:
        k, h, w = self.k, self.k.h, self.base
        m, n = hi - lo, k.nb
        A4 = view(self.da[lo - w: hi - w], (m, n, 4, h))
        # Peephole gradients: dP_o += Σ da_o·C_t, dP_{i,f} += Σ da_{i,f}·C_{t-1}.
        self.dP[1] += np.einsum("tbh,tbh->h", A4[:, :, 1], self.CA[lo - w: hi - w])
        self.dP[0::2] += np.einsum("tbgh,tbh->gh", A4[:, :, 0::2], self.Cp)

    def _c_prev(self, lo: int, hi: int, buf: np.ndarray) -> np.ndarray:
        """``C_{t-1}`` (the cell state before step t) for steps ``lo..hi-1``, as ``[m, B, H]``."""
        S, m, CA, c0, extract, w = self.k.S, hi - lo, self.CA, self.k.C0, self.extract, self.base
        c0 = None if c0 is None else c0[self.d]
        if not self.rev:
            if lo > 0:
                return CA[lo - 1 - w: hi - 1 - w]
            out = buf[:m]
            if c0 is None:
                out[0] = 0
            else:
                out[0] = c0
            out[1:] = CA[: hi - 1 - w]
            return out
        fix = [t for t in range(lo, hi) if t in extract and t < S - 1] if c0 is not None else []
        if hi < S and not fix:
            return CA[lo + 1 - w: hi + 1 - w]
        out = buf[:m]
        top = min(hi, S - 1)
        out[: top - lo] = CA[lo + 1 - w: top + 1 - w]
        if hi == S:
            out[m - 1] = 0 if c0 is None else c0
        for t in fix:  # reverse direction with SL: rows that start at step t start from C0
            rows = extract[t]
            out[t - lo, rows] = c0[rows]
        return out
