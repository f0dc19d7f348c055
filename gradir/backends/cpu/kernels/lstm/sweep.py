"""LSTMGrad's backward through time chunk by chunk (``Sweep``), shared by LSTMGrad and the checkpointed
backward (``checkpointed.py``).

The steps go in fixed chunks of ``T0`` steps (``common.chunk_steps``: a function of the shapes alone),
each direction's chunks in the order its backward visits them.  Per chunk: the step loops write the
chunk's gate gradients ``da`` (a scratch of ``T0 + 1`` steps, the only one that grows with the
problem, bounded by the chunk), then its rows of ``dX = da·W`` and its terms of the weight gradients
(``daᵀ·X``, ``daᵀ·H_{t∓1}``, with the ``H0`` terms of rows that start in it): where the packed kernels
are used (``accumulating``) added straight into dW and dR, each element's chain of fused multiply-adds
going on from chunk to chunk; elsewhere each chunk's partial products fresh, then added to the sums in the
chunks' order; ``dB`` and ``dP`` are summed step by step (compiled) or
per chunk (NumPy) in the same order.  A chunk reads the forward's values only through a *window*:
the chunk's steps and the one step before them in the forward's order (``C_{t∓1}``, ``H_{t∓1}``),
given as arrays whose index 0 is step ``base``; LSTMGrad passes views of HAll, CAll and iofc, the
checkpointed backward its recomputed segment, and both get the same bits.
"""

from __future__ import annotations

import math
import threading
from typing import Any

import numpy as np

from .. import blocked, jit, parallel
from . import common
from .bptt import Direction, Grad
from .common import this_thread, view

__all__ = ["Sweep", "visit_chunks", "window", "accumulating"]

# Elements of ``da`` (steps x rows x 4H) per compiled call of the step loop: between calls a Ctrl-C
# stops the loops.
BLOCK_ELEMENTS = 1 << 21
# dX's rows computed by the step loops (False: one product per chunk afterwards; the same bits, tests)
DX_IN_LOOP = True
# da streamed to memory from a ring in cache by the step loops (False: written in place; the same bits)
STREAM = True

# A chunk's products (rows x 4H x (I + H)) from this size on are added straight into dW and dR by the packed
# kernels (``accumulating``); below it, packing costs more than it saves (tests force either way)
ACC_MIN_MNK = blocked.GOTO_MIN_MNK

_scratch_local = threading.local()
_SCRATCH_MAX_BYTES = 256 << 20


def scratch(shape: tuple, dtype: np.dtype, name: str = "buf") -> np.ndarray:
    """A ``shape`` array of the calling thread's buffer ``name`` (kept for its next call), at a 64-byte
    boundary (the step loops' non-temporal stores need rows 32-byte aligned)."""
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes > _SCRATCH_MAX_BYTES:
        buf = np.empty(nbytes + 64, np.uint8)
    else:
        buf = getattr(_scratch_local, name, None)
        if buf is None or buf.nbytes < nbytes + 64:
            buf = np.empty(nbytes + 64, np.uint8)
            setattr(_scratch_local, name, buf)
    off = -buf.ctypes.data % 64
    return view(buf[off: off + nbytes].view(dtype), shape)


def release() -> None:
    """Drop the calling thread's kept buffers."""
    _scratch_local.buf = None
    _scratch_local.ring = None


def accumulating(nb: int, T0: int, I: int, h: int, dtype: Any) -> Any:
    """``_jit_goto`` when the weight gradients are summed by adding each chunk's products straight into dW
    and dR (``_jit_goto.gemm_acc``/``gemm2(acc=True)``: every element one chain of fused multiply-adds over
    all the steps' rows, in the chunks' order, whatever the chunking or the split of rows between
    threads), else None: then each chunk's partial product is made fresh in a buffer and added (NumPy's
    BLAS, or compiled kernels off).  Where the packed kernels are used (``_jit_gemm.FAST_LARGE``), the JIT
    is on and a chunk's products are large enough to pay for packing (``blocked.GOTO_MIN_MNK``).  A
    function of the shapes and the machine: LSTMGrad and the checkpointed backward take the same one."""
    dt = np.dtype(dtype)
    if dt not in (np.float32, np.float64) or T0 * nb * 4 * h * (I + h) < ACC_MIN_MNK:
        return None
    jl = jit.load("lstm")
    if jl is None or not jl.gemm_module.FAST_LARGE:
        return None
    jo = jit.load("goto")
    return jo if jo is not None and jo.fits2(I, h, dt) else None


def visit_chunks(S: int, T0: int, rev: bool) -> list[tuple[int, int]]:
    """The fixed chunks ``[lo, hi)`` of a direction in its backward's order (last first, or first
    first for the reverse direction)."""
    chunks = [(lo, min(S, lo + T0)) for lo in range(0, S, T0)]
    return chunks if rev else chunks[::-1]


def window(lo: int, hi: int, S: int, rev: bool) -> tuple[int, int]:
    """The steps ``[base, top)`` a chunk reads: its own and the one before it in the forward's order."""
    return (lo - 1 if lo > 0 else lo, hi) if not rev else (lo, hi + 1 if hi < S else hi)


def _matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray, tmp: np.ndarray | None = None,
            product=np.matmul) -> None:  # type: ignore[no-untyped-def]
    """``out = a·b``, or ``out += a·b`` through ``tmp`` (shaped like ``out``) when it is given."""
    product(a, b, out=out if tmp is None else tmp)
    if tmp is not None:
        np.add(out, tmp, out=out)


def _matmul_blocks(a: np.ndarray, b: np.ndarray, out: np.ndarray, tmp: np.ndarray | None = None) -> None:
    """``_matmul`` with the product in blocks over the cores this call was given (``blocked``)."""
    _matmul(a, b, out, tmp, product=blocked.matmul)


def _matmul_halves(two: bool):  # type: ignore[no-untyped-def]
    """A ``_matmul`` that computes the top and bottom halves of ``out``'s rows as two GEMMs, on two
    threads when ``two`` (BLAS held to one thread by the caller), else one after the other."""
    def mm(a: np.ndarray, b: np.ndarray, out: np.ndarray, tmp: np.ndarray | None = None) -> None:
        m = a.shape[0] // 2
        if m == 0:
            _matmul(a, b, out, tmp)
            return
        t0, t1 = (None, None) if tmp is None else (tmp[:m], tmp[m:])
        parallel.run_two(lambda stop: _matmul(a[:m], b, out[:m], t0), lambda stop: _matmul(a[m:], b, out[m:], t1),
                         concurrent=two)
    return mm


class Sweep:
    """The backward of one LSTMGrad-like call: ``begin(d)``, ``chunk(...)`` for each of direction
    ``d``'s chunks in ``visit_chunks`` order, ``end(d)``; then ``finish()`` writes dB and dP.  Used
    as a context (``with``): the BLAS threads are set up once (see ``lstm_grad``)."""

    def __init__(self, k: Grad, wanted: bool | None = None) -> None:
        self.k = k
        S, nb, h, D, dt = k.S, k.nb, k.h, k.D, k.dtype
        self.T0 = common.chunk_steps(S, nb, D, h, dt)
        self.jl = jit.load("lstm")
        self.lengths = k.steps.lengths if k.steps.lengths is not None else np.full(nb, S, np.intp)
        self.dP = [np.zeros((D, 3 * h), dt), np.zeros((D, 3 * h), dt)]  # per half of the batch
        self.db = [np.zeros((D, 4 * h), dt), np.zeros((D, 4 * h), dt)]
        self.dHA = None if k.dHAll is None else np.ascontiguousarray(k.dHAll)
        self.wanted = common.split_wanted(self.jl, nb, h) if wanted is None else wanted
        self._part: np.ndarray | None = None  # a chunk's partial product of dW, then of dR (``_products``)
        jo = accumulating(nb, self.T0, k.I, h, dt) if self.jl is not None else None
        # (the products go straight into dW and dR: they must take the compiled kernel's layout)
        self.jo = jo if jo is not None and all(a.flags.c_contiguous and a.flags.aligned
                                               for a in (k.dW, k.dR)) else None

    def __enter__(self) -> "Sweep":
        k = self.k
        # Large problems on the compiled path run as two halves (see ``lstm_grad``).
        self._ctx = parallel.own_blas_threads(self.wanted)
        blas = self._ctx.__enter__()
        k.split = blas.ok
        k.two = k.split and blas.threads >= 2
        k.mm = _matmul_halves(k.two) if k.split else _matmul_blocks
        return self

    def __exit__(self, *exc: object) -> None:
        self._ctx.__exit__(*exc)

    # -- a direction ------------------------------------------------------------------------------
    def begin(self, d: int) -> None:
        k, jl = self.k, self.jl
        nb, h, D, dt = k.nb, k.h, k.D, k.dtype
        self.d, self.rev = d, k.direction == "reverse" or d == 1
        self.first_dW = True
        self.first = (self.lengths - 1) if self.rev else np.zeros(nb, np.intp)
        self.last = np.zeros(nb, np.intp) if self.rev else self.lengths - 1
        self.Wp = None
        self.dX_loop = False
        if jl is None:
            self.direc = Direction(k, d, self.T0)
            return
        jg = jl.gemm_module
        # The whole loop compiled, its GEMMs by the packed-R kernel (single-threaded): small
        # problems, and the two half-batch loops of large ones where that kernel beats BLAS
        # (``_jit_gemm.FAST_LARGE``).  Otherwise a compiled call per step, then NumPy's BLAS.
        self.whole = ((nb * 4 * h <= common.WHOLE_LOOP_MAX or (k.split and jg.FAST_LARGE))
                      and not getattr(this_thread, "per_step", False))
        # dX's rows too, step by step while da_t is in cache, where dX would be the packed-panel
        # kernel's afterwards (the same kernel: the same bits)
        self.dX_loop = DX_IN_LOOP and self.whole and D == 1 and k.split and jg.FAST_LARGE and k.dX.flags.c_contiguous
        self.Rp = jg.pack(k.R[d]) if self.whole else None
        self.Wp = jg.pack(view(k.W[d], (4 * h, k.I))) if (self.dX_loop or (k.split and jg.FAST_LARGE)) else None
        self.dH = np.zeros((nb, h), dt)
        self.dC = np.zeros((nb, h), dt)
        self.stream = STREAM and self.whole and k.split and jg.FAST_LARGE and 4 * h * dt.itemsize % 32 == 0
        # (ring rows 64 bytes longer than 4H: rows 4 KB apart would all fall in one set of the L1 cache)
        self.rings = (scratch((2, nb, D, 4 * h + 64 // dt.itemsize), dt, "ring") if self.stream
                      else np.zeros((2, 1, 1, 1), dt))
        dummy = np.zeros((1, 1, 1, 1), dt)
        self.args_const = (
            jit.readable(np.ascontiguousarray(k.C0)) if k.C0 is not None else np.zeros((D, nb, h), dt),
            jit.readable(np.ascontiguousarray(k.dHFinal)) if k.dHFinal is not None else dummy[0],
            k.dHFinal is not None,
            jit.readable(np.ascontiguousarray(k.dCFinal)) if k.dCFinal is not None else dummy[0],
            k.dCFinal is not None,
            jit.readable(np.ascontiguousarray(k.P)) if k.P is not None else np.zeros((D, 3 * h), dt))
        self.dummy = dummy

    def end(self, d: int) -> None:
        if self.jl is None:
            self.direc.done()
            self.dP[0][d] = view(self.direc.dP, (3 * self.k.h,))

    def finish(self) -> None:
        k, h = self.k, self.k.h
        dP, db = self.dP[0], self.db[0]
        if self.jl is not None and k.split:
            dP += self.dP[1]
            db += self.db[1]
        k.dP[...] = dP
        k.dB[:, : 4 * h] = db
        k.dB[:, 4 * h:] = db

    # -- a chunk ------------------------------------------------------------------------------------
    def chunk(self, lo: int, hi: int, G: np.ndarray, CA: np.ndarray, HA: np.ndarray) -> None:
        """Chunk ``[lo, hi)`` of the current direction; ``G``, ``CA``, ``HA`` its window (``window``:
        steps ``base .. top-1``, ``[top-base, D, B, ·]``, C-contiguous)."""
        k, d = self.k, self.d
        S, nb, h, D, dt = k.S, k.nb, k.h, k.D, k.dtype
        base, top = window(lo, hi, S, self.rev)
        n = top - base
        alive = k.steps.alive
        c_hi = min(hi, alive)
        if c_hi <= lo:  # no row reaches these steps: da = 0
            if d == 0:
                k.dX[lo:hi] = 0
            return
        da = scratch((n, nb, D, 4 * h), dt)
        dHA = self.dHA[base:top] if self.dHA is not None else None
        if self.jl is None:
            self.direc.window(lo, c_hi, base, G, CA, dHA, da)
        else:
            self._compiled(lo, c_hi, base, n, G, CA, dHA, da)
        if d == 0 and c_hi < hi:
            k.dX[c_hi:hi] = 0
        self._products(lo, c_hi, base, da, HA)

    def _compiled(self, lo: int, c_hi: int, base: int, n: int, G: np.ndarray, CA: np.ndarray,
                  dHA: np.ndarray | None, da: np.ndarray) -> None:
        k, jl, d, rev = self.k, self.jl, self.d, self.rev
        nb, h = k.nb, k.h
        alive = k.steps.alive
        lengths, first, last = self.lengths - base, self.first - base, self.last - base
        has_dHA = dHA is not None
        c0, dHF, has_dHF, dCF, has_dCF, P = self.args_const
        args = (jit.readable(G), jit.readable(CA), jit.readable(dHA) if has_dHA else self.dummy, has_dHA, c0, dHF,
                has_dHF, dCF, has_dCF, P, lengths, first, last)
        dXw = jit.readable(k.dX[base: base + n]) if self.dX_loop else self.dummy[0]
        stream = self.stream and da.ctypes.data % 32 == 0
        k0, k1 = (lo - base, c_hi - base) if rev else (alive - c_hi, alive - lo)
        block = max(1, BLOCK_ELEMENTS // max(1, nb * 4 * h))
        empty = np.zeros(0, k.dtype)

        def loops(half: int, r0: int, r1: int, stop: threading.Event) -> None:
            dH, dC, dP, db = self.dH[r0:r1], self.dC[r0:r1], self.dP[half], self.db[half]
            if self.whole:
                for a in range(k0, k1, block):
                    if stop.is_set():
                        return
                    jl.bptt(rev, d, r0, a, min(k1, a + block), *args, self.Rp, da, dH, dC, dP, db, k.dH0, k.dC0,
                            self.Wp if self.dX_loop else self.Rp, dXw, self.dX_loop, self.rings[half], stream, empty)
                return
            Rd = k.R[d]
            prev = -1
            for t_abs in (range(lo, c_hi) if rev else range(c_hi - 1, lo - 1, -1)):
                if stop.is_set():
                    return
                t = t_abs - base
                tp = t + 1 if rev else t - 1
                if tp < 0 or tp >= n:
                    tp = t
                jl.bptt_step(t, tp, prev, d, r0, *args, da, dH, dC, dP, db, k.dH0, k.dC0)
                np.matmul(da[t, r0:r1, d], Rd, out=dH)
                prev = t
            rows = first[r0:r1] == prev
            k.dH0[d, r0:r1][rows] = dH[rows]
            k.dC0[d, r0:r1][rows] = dC[rows]

        if not k.split:
            loops(0, 0, nb, threading.Event())
        else:
            m = nb // 2
            parallel.run_two(lambda stop: loops(0, 0, m, stop), lambda stop: loops(1, m, nb, stop),
                             concurrent=k.two)

    def _products(self, lo: int, c_hi: int, base: int, da: np.ndarray, HA: np.ndarray) -> None:
        """dX's rows and the weight gradients' partial products of steps ``lo .. c_hi-1``."""
        k, d, rev = self.k, self.d, self.rev
        S, nb, h, D, dt, I = k.S, k.nb, k.h, k.D, k.dtype, k.I
        n = da.shape[0]
        da2 = view(da, (n * nb, D * 4 * h))[:, d * 4 * h: (d + 1) * 4 * h]
        rows = slice((lo - base) * nb, (c_hi - base) * nb)
        dac = da2[rows]
        X2 = view(k.X, (S * nb, I))[lo * nb: c_hi * nb]
        dX2 = view(k.dX, (S * nb, I))[lo * nb: c_hi * nb]
        Wd = view(k.W[d], (4 * h, I))
        jg = self.jl.gemm_module if self.jl is not None else None
        if not self.dX_loop:
            if d == 0:
                if self.Wp is not None and jg is not None:
                    m = dac.shape[0] // 2
                    parallel.run_two(lambda stop: jg.gemm(dac[:m], self.Wp, dX2[:m]),
                                     lambda stop: jg.gemm(dac[m:], self.Wp, dX2[m:]), concurrent=k.two)
                else:
                    k.mm(dac, Wd, dX2)
            else:
                k.mm(dac, Wd, dX2, np.empty_like(dX2))  # the second direction's terms added
        if self.jl is None:  # dB's sums (the compiled loops sum them step by step)
            part = np.matmul(np.ones(dac.shape[0], dt), dac) if dac.shape[0] >= 1024 else np.add.reduce(dac, axis=0)
            self.db[0][d] += part
        fresh = self.first_dW
        self.first_dW = False
        dW, dR = k.dW[d], k.dR[d]
        # steps whose H_{t∓1} is a step: t >= 1 (forward) or t <= S-2 (reverse): their rows of da and H_{t∓1}
        a, b = (max(lo, 1), c_hi) if not rev else (lo, min(c_hi, S - 1))
        prev = None
        if b > a:
            s = 1 if rev else -1
            hp = HA[a + s - base: b + s - base, d]
            if D == 1:
                hp2 = view(hp, ((b - a) * nb, h))
            else:
                hp2 = np.empty(((b - a) * nb, h), dt)
                view(hp2, (b - a, nb, h))[...] = hp
            prev = (da2[(a - base) * nb: (b - base) * nb], hp2)
        first = None  # each row's first step starts from H0: its da row and H0's
        if k.H0 is not None:
            starts = np.flatnonzero((self.first >= lo) & (self.first < c_hi))
            if starts.size:
                first = (da[self.first[starts] - base, starts, d], k.H0[d][starts])
        if self.jo is not None:
            self._accumulate(dac, X2, prev, (a, b) == (lo, c_hi), first, fresh)
            return
        # the weight gradients: this chunk's partial products, fresh, then added; dW's and dR's one after the
        # other through one buffer (the same products and additions: the same bits, half the scratch)
        if not fresh and self._part is None:
            self._part = np.empty(4 * h * max(I, h), dt)
        pW = dW if fresh else view(self._part[: 4 * h * I], (4 * h, I))
        k.mm(dac.T, X2, pW)
        if not fresh:
            dW += pW
        pR = dR if fresh else view(self._part[: 4 * h * h], (4 * h, h))
        if prev is not None:
            k.mm(prev[0].T, prev[1], pR)
        else:
            pR[...] = 0
        if first is not None:
            k.mm(first[0].T, first[1], pR, np.empty_like(pR))
        if not fresh:
            dR += pR

    def _accumulate(self, dac: np.ndarray, X2: np.ndarray, prev: tuple | None, whole: bool, first: tuple | None,
                    fresh: bool) -> None:
        """The weight gradients' terms of a chunk (``dac``: its rows of da) added straight into dW and dR
        (``accumulating``: no partial product, no buffer): ``daᵀ·X`` and ``daᵀ·H_{t∓1}`` (``prev``: the rows of
        da and H_{t∓1} of the steps that have one) as one ``gemm2`` (each block of ``daᵀ`` packed once for
        both) where every step of the chunk has one (``whole``), then the ``H0`` terms of rows that start
        here (``first``); the rows of dW and dR in two halves, one per core when the call has two."""
        k, d, jo = self.k, self.d, self.jo
        dW, dR = k.dW[d], k.dR[d]
        if fresh:  # every element's chain starts from zero
            dW[...] = 0
            dR[...] = 0
        Xr = jit.readable(X2)
        jobs: list[tuple] = []
        if prev is not None and whole:
            jobs.append((dac.T, Xr, jit.readable(prev[1]), dW, dR))
        else:
            jobs.append((dac.T, Xr, None, dW, None))
            if prev is not None:
                jobs.append((prev[0].T, jit.readable(prev[1]), None, dR, None))
        if first is not None:
            jobs.append((first[0].T, np.ascontiguousarray(first[1]), None, dR, None))
        mr = jo.MR

        def half(which: int) -> None:
            bufs = blocked.goto_buffers(jo, k.dtype)
            for A, B1, B2, C1, C2 in jobs:
                m = (A.shape[0] // 2 + mr - 1) // mr * mr
                r0, r1 = (0, m) if which == 0 else (m, A.shape[0])
                if r1 <= r0:
                    continue
                if B2 is None:
                    jo.gemm_acc(A[r0:r1], B1, C1[r0:r1], *bufs)
                else:
                    jo.gemm2(A[r0:r1], B1, B2, C1[r0:r1], C2[r0:r1], *bufs, acc=True)

        parallel.run_two(lambda stop: half(0), lambda stop: half(1), concurrent=parallel.threads_here() >= 2)
