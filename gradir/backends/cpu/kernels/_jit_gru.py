"""Compiled per-direction GRU cores (loaded through ``jit.load("gru")``; numba), gate order z, r, h.

``forward_core`` and ``backward_core`` have the signatures of the NumPy cores of ``kernels/gru.py`` (the
wrapper there handles directions, reversal and the ``[S, D, B, ·]`` layouts) and the same semantics: the
forward time order, rows valid at steps ``0 .. SL[b]-1`` (past them ``H`` passes through, ``HAll``/``ZRH``
are zero and ``dHAll`` is ignored).  They decline ``clip`` (``takes``): the NumPy cores do it.

What makes them fast is what made the LSTM's fast (docs/performance.md): the input products over every
step are one GEMM each (``X·Wᵀ`` before the forward loop, in blocks fixed by the shapes: ``blocked.matmul``;
``dW = daᵀ·X`` and ``dR`` after the backward one: ``gru_weights``); each step loop is one compiled call per block of
steps whose recurrent products run by ``_jit_gemm.gemm`` against weights packed once per call, and
large batches run as two independent half-batch loops, one per core when the call has two.  The backward
loop also computes its step's rows of ``dX = da·W`` while ``da`` is in cache, and sums ``dB``.

Per step, ``linear_before_reset=0`` needs two dependent products (``H·R_zrᵀ``, then ``(r⊙H)·R_hᵀ``
forward; ``da_h·R_h``, then ``[da_z, da_r]·R_zr`` backward) and ``linear_before_reset=1`` one (``H·Rᵀ``
forward; ``[da_z, da_r, da_h⊙r]·R`` backward).  The backward of ``linear_before_reset=1`` needs
``H_{t-1}·R_hᵀ``, which ORT's ``ZRH`` does not keep and ``GRUGrad``'s operands cannot carry: it is
recomputed, but off the recurrence (it depends on ``HAll`` only), in the step's loop before the
element-wise pass, a product of the same size as the one ORT recomputes, at the packed kernel's speed.

Sums are in fixed orders (each GEMM result one chain over ``k``; ``dB`` over steps in visit order, then
rows, per half, then the halves) and the half-batch split depends on the batch size only, so the bits do
not depend on the thread count.  Sigmoids are ``½·tanh(a/2) + ½`` as in the NumPy cores; float32 ``tanh``
is ``_jit_lstm``'s vectorizable one.
"""

from __future__ import annotations

import math
import threading
from typing import Any

import numpy as np
from numba import njit

from . import blocked, parallel
from ._jit_core import ELEMENTWISE, INLINE, prefetch_span
from ._jit_gemm import gemm, pack
from ._jit_lstm import tanh
from .gru_weights import weight_grads
from .jit import readable

__all__ = ["takes", "forward_core", "backward_core", "SPLIT_MIN_ROWS"]

_HALF = np.float32(0.5)
_ONE = np.float32(1.0)
# From this many batch rows the step loops run as two independent halves (a function of the shape
# only, so the bits are the same on one core or two).
SPLIT_MIN_ROWS = 16
# Elements of a step's gates (rows x 3H) times steps per compiled call: a Ctrl-C is seen between calls.
_BLOCK_ELEMENTS = 1 << 21


def takes(dtype: np.dtype, clip: Any) -> bool:
    """Whether these cores compute the op: float32/float64 without ``clip``."""
    return clip is None and np.dtype(dtype) in (np.float32, np.float64)


@njit(**INLINE)
def _ask(a, r0, m):  # type: ignore[no-untyped-def]
    """Asks for rows ``r0 .. r0+m-1`` of ``a`` (each contiguous) ahead, without waiting (``prefetch``): the
    step loops ask for the next step's operands before a step's products, which leave the memory bus idle."""
    for r in range(m):
        prefetch_span(a[r0 + r], 0, a.shape[1])


# -- forward ------------------------------------------------------------------------------------
@njit(**ELEMENTWISE)
def _fwd_lbr1(t, r0, g, ha, hc, q, bias, rbh, lengths, row):  # type: ignore[no-untyped-def]
    """One step, ``linear_before_reset=1``, rows ``r0 ..``: ``g`` = ``G[t]`` (``X_t·Wᵀ``, gates out),
    ``ha`` = ``HAll[t]``, ``hc`` the rows' ``H_{t-1}`` (updated to ``H_t``), ``q`` = ``hc·Rᵀ``."""
    h = hc.shape[1]
    for r in range(hc.shape[0]):
        b = r0 + r
        gb = g[b]
        hb = ha[b]
        if t >= lengths[b]:
            for j in range(3 * h):
                gb[j] = 0
            for j in range(h):
                hb[j] = 0
            continue
        qb = q[r]
        hp = hc[r]
        # z and r in one loop, h̃ in another: one loop for the three took twice as long (8.3 against 4.4 ms
        # for 100 steps of 32 rows at H = 256, one core)
        for j in range(2 * h):
            row[j] = tanh(((gb[j] + bias[j]) + qb[j]) * _HALF) * _HALF + _HALF
        for j in range(h):
            row[2 * h + j] = tanh((gb[2 * h + j] + bias[2 * h + j]) + (qb[2 * h + j] + rbh[j]) * row[h + j])
        for j in range(h):
            hh = row[2 * h + j]
            hn = hh + row[j] * (hp[j] - hh)
            hp[j] = hn
            hb[j] = hn
        for j in range(3 * h):
            gb[j] = row[j]


@njit(**ELEMENTWISE)
def _fwd_lbr0_zr(t, r0, g, hc, q, bias, lengths, rh):  # type: ignore[no-untyped-def]
    """``linear_before_reset=0``, first half of a step: the gates z, r into ``q[:, :2H]`` (which held
    ``H_{t-1}·R_zrᵀ``) and ``rh = r ⊙ H_{t-1}`` (zeros for rows without step ``t``)."""
    h = hc.shape[1]
    for r in range(hc.shape[0]):
        b = r0 + r
        rhb = rh[r]
        if t >= lengths[b]:
            for j in range(h):
                rhb[j] = 0
            continue
        gb = g[b]
        qb = q[r]
        hp = hc[r]
        for j in range(2 * h):
            qb[j] = tanh(((gb[j] + bias[j]) + qb[j]) * _HALF) * _HALF + _HALF
        for j in range(h):
            rhb[j] = qb[h + j] * hp[j]


@njit(**ELEMENTWISE)
def _fwd_lbr0_h(t, r0, g, ha, hc, q, bias, lengths, row):  # type: ignore[no-untyped-def]
    """Second half: ``q[:, 2H:]`` holds ``(r⊙H_{t-1})·R_hᵀ``; writes the gates, ``HAll[t]`` and ``H_t``."""
    h = hc.shape[1]
    for r in range(hc.shape[0]):
        b = r0 + r
        gb = g[b]
        hb = ha[b]
        if t >= lengths[b]:
            for j in range(3 * h):
                gb[j] = 0
            for j in range(h):
                hb[j] = 0
            continue
        qb = q[r]
        hp = hc[r]
        for j in range(h):
            hh = tanh((gb[2 * h + j] + bias[2 * h + j]) + qb[2 * h + j])
            row[j] = hh
        for j in range(h):
            hh = row[j]
            hn = hh + qb[j] * (hp[j] - hh)
            hp[j] = hn
            hb[j] = hn
        for j in range(2 * h):
            gb[j] = qb[j]
        for j in range(h):
            gb[2 * h + j] = row[j]


@njit(**ELEMENTWISE)
def forward_loop(k0, k1, alive, r0, G, HA, hc, q, rh, row, P1, P2, bias, rbh, lengths, lbr):  # type: ignore[no-untyped-def]
    """Steps ``k0 .. k1-1`` of the forward loop for the rows ``r0 .. r0+len(hc)-1`` (``hc`` their
    carried ``H``), products included: ``P1 = pack(Rᵀ)`` (``linear_before_reset=1``) or ``pack(R_zrᵀ)``
    and ``P2 = pack(R_hᵀ)``; ``q`` ``[m, 3H]``, ``rh`` ``[m, H]`` and ``row`` ``[3H]`` scratch."""
    m = hc.shape[0]
    h = hc.shape[1]
    for t in range(k0, k1):
        if t >= alive:  # no row has this step
            for r in range(m):
                for j in range(3 * h):
                    G[t, r0 + r, j] = 0
                for j in range(h):
                    HA[t, r0 + r, j] = 0
            continue
        if t + 1 < alive:
            _ask(G[t + 1], r0, m)
            _ask(HA[t + 1], r0, m)
        if lbr:
            gemm(hc, P1, q)
            _fwd_lbr1(t, r0, G[t], HA[t], hc, q, bias, rbh, lengths, row)
        else:
            gemm(hc, P1, q[:, :2 * h])
            _fwd_lbr0_zr(t, r0, G[t], hc, q, bias, lengths, rh)
            gemm(rh, P2, q[:, 2 * h:])
            _fwd_lbr0_h(t, r0, G[t], HA[t], hc, q, bias, lengths, row)


def _halves(nb: int) -> list[tuple[int, int]]:
    """The step loops' row ranges: two halves from ``SPLIT_MIN_ROWS`` rows on (shape only)."""
    if nb < SPLIT_MIN_ROWS:
        return [(0, nb)]
    return [(0, nb // 2), (nb // 2, nb)]


def _run(ranges: list[tuple[int, int]], body: Any) -> None:
    """``body(i, r0, r1, stop)`` for each row range, side by side when this call was given two cores."""
    if len(ranges) == 1:
        body(0, *ranges[0], threading.Event())
        return
    parallel.run_two(lambda stop: body(0, *ranges[0], stop), lambda stop: body(1, *ranges[1], stop),
                     concurrent=parallel.threads_here() >= 2)


def _lengths(SL: Any, S: int, nb: int) -> np.ndarray:
    return np.full(nb, S, np.int64) if SL is None else np.ascontiguousarray(SL, np.int64)


def _biases(wb: Any, rb: Any, lbr: int, h: int, dt: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """The bias added to ``X_t·Wᵀ`` per gate, and (``linear_before_reset=1``) ``Rb_h`` apart."""
    if wb is None:
        return np.zeros(3 * h, dt), np.zeros(h, dt)
    bias = np.array(wb, dt)
    bias[:2 * h] += rb[:2 * h]
    if not lbr:
        bias[2 * h:] += rb[2 * h:]
    return bias, (np.array(rb[2 * h:], dt) if lbr else np.zeros(h, dt))


def forward_core(X: np.ndarray, Wd: np.ndarray, Rd: np.ndarray, wb: Any, rb: Any, SL: Any, h0: Any, lbr: int,
                 clip: Any, HAll: np.ndarray, HFinal: np.ndarray, ZRH: np.ndarray) -> None:
    """One direction of GRUTraining in the forward time order (module docstring)."""
    S, nb, I = X.shape
    h = Rd.shape[1]
    dt = X.dtype
    G = ZRH
    # X·Wᵀ for every step: one product, in blocks fixed by the shapes
    G2 = G.reshape(S * nb, 3 * h) if G.flags.c_contiguous else None
    if G2 is not None and X.flags.c_contiguous:
        blocked.matmul(X.reshape(S * nb, I), Wd.T, out=G2)
    else:
        blocked.matmul(X, Wd.T, out=G)
    bias, rbh = _biases(wb, rb, lbr, h, dt)
    lengths = _lengths(SL, S, nb)
    alive = int(lengths.max(initial=0))
    if lbr:
        P1, P2 = pack(Rd.T), np.zeros((1, 1, 1), dt)
    else:
        P1, P2 = pack(Rd[:2 * h].T), pack(Rd[2 * h:].T)
    P1, P2 = readable(P1), readable(P2)
    block = max(1, _BLOCK_ELEMENTS // max(1, nb * 3 * h))

    def body(i: int, r0: int, r1: int, stop: threading.Event) -> None:
        m = r1 - r0
        hc = np.zeros((m, h), dt) if h0 is None else np.array(h0[r0:r1], dt)
        q, rh, row = np.empty((m, 3 * h), dt), np.empty((m, h), dt), np.empty(3 * h, dt)
        for k0 in range(0, S, block):
            if stop.is_set():
                return
            forward_loop(k0, min(S, k0 + block), alive, r0, G, HAll, hc, q, rh, row, P1, P2, bias, rbh,
                         lengths, lbr)
        HFinal[r0:r1] = hc

    _run(_halves(nb), body)


# -- backward -----------------------------------------------------------------------------------
@njit(**ELEMENTWISE)
def _bwd_lbr1(t, r0, zrh, hp, dHA, has_dHA, lengths, q, rbh, dh, dhz, ap, da, e):  # type: ignore[no-untyped-def]
    """``linear_before_reset=1``, one step's element-wise pass for the rows ``r0 ..``: ``q = H_{t-1}·R_hᵀ``;
    writes ``da[b] = (da_z, da_r, da_h)``, ``e[b] = da_h ⊙ r``, the product's operand ``ap`` =
    ``(da_z, da_r, da_h ⊙ r)`` and ``dhz = dH ⊙ z`` (``dH``, rows without step ``t``: passed through)."""
    h = dh.shape[1]
    for r in range(dh.shape[0]):
        b = r0 + r
        dhr = dh[r]
        dzr = dhz[r]
        apr = ap[r]
        dab = da[b]
        eb = e[b]
        if t >= lengths[b]:
            for j in range(h):
                dzr[j] = dhr[j]
                eb[j] = 0
            for j in range(3 * h):
                apr[j] = 0
                dab[j] = 0
            continue
        if has_dHA:
            x = dHA[b]
            for j in range(h):
                dhr[j] += x[j]
        g = zrh[b]
        hpb = hp[r]
        qb = q[r]
        for j in range(h):
            z = g[j]
            rr = g[h + j]
            hh = g[2 * h + j]
            d = dhr[j]
            az = d * (hpb[j] - hh) * (z - z * z)
            ah = d * (_ONE - z) * (_ONE - hh * hh)
            ar = ah * (qb[j] + rbh[j]) * (rr - rr * rr)
            dab[j] = az
            dab[h + j] = ar
            dab[2 * h + j] = ah
            eb[j] = ah * rr
            dzr[j] = d * z
        for j in range(3 * h):
            apr[j] = dab[j]
        for j in range(h):
            apr[2 * h + j] = eb[j]


@njit(**ELEMENTWISE)
def _bwd_lbr0_zh(t, r0, zrh, hp, dHA, has_dHA, lengths, dh, dhz, da):  # type: ignore[no-untyped-def]
    """``linear_before_reset=0``, first pass: ``da_z``, ``da_h`` into ``da[b]`` and ``dhz = dH ⊙ z``."""
    h = dh.shape[1]
    for r in range(dh.shape[0]):
        b = r0 + r
        dhr = dh[r]
        dzr = dhz[r]
        dab = da[b]
        if t >= lengths[b]:
            for j in range(h):
                dzr[j] = dhr[j]
            for j in range(3 * h):
                dab[j] = 0
            continue
        if has_dHA:
            x = dHA[b]
            for j in range(h):
                dhr[j] += x[j]
        g = zrh[b]
        hpb = hp[r]
        for j in range(h):
            z = g[j]
            hh = g[2 * h + j]
            d = dhr[j]
            dab[j] = d * (hpb[j] - hh) * (z - z * z)
            dab[2 * h + j] = d * (_ONE - z) * (_ONE - hh * hh)
            dzr[j] = d * z


@njit(**ELEMENTWISE)
def _bwd_lbr0_r(t, r0, zrh, hp, lengths, q, dhz, da, e):  # type: ignore[no-untyped-def]
    """Second pass: ``q = da_h·R_h`` (the gradient of ``r ⊙ H_{t-1}``): ``da_r``, ``e[b] = r ⊙ H_{t-1}``,
    and ``dhz += q ⊙ r``."""
    h = dhz.shape[1]
    for r in range(dhz.shape[0]):
        b = r0 + r
        eb = e[b]
        if t >= lengths[b]:
            for j in range(h):
                eb[j] = 0
            continue
        g = zrh[b]
        hpb = hp[r]
        qb = q[r]
        dab = da[b]
        dzr = dhz[r]
        for j in range(h):
            rr = g[h + j]
            dab[h + j] = qb[j] * hpb[j] * (rr - rr * rr)
            eb[j] = rr * hpb[j]
            dzr[j] += qb[j] * rr


@njit(**INLINE)
def _next(t, r0, m, ZRH, HA, dHA, has_dHA, DA, E, dX, has_dX):  # type: ignore[no-untyped-def]
    """Asks for what step ``t`` reads and writes (``_ask``)."""
    _ask(ZRH[t], r0, m)
    if t > 0:
        _ask(HA[t - 1], r0, m)
    if has_dHA:
        _ask(dHA[t], r0, m)
    _ask(DA[t], r0, m)
    _ask(E[t], r0, m)
    if has_dX:
        _ask(dX[t], r0, m)


@njit(**ELEMENTWISE)
def backward_loop(k0, k1, alive, r0, ZRH, HA, h0, dHA, has_dHA, lengths, DA, E, dX, has_dX, Wp, P1, P2, P3, rbh,
                  dh, dhz, q, ap, tmp, db, dbr, lbr):  # type: ignore[no-untyped-def]
    """Visits ``k0 .. k1-1`` (step ``alive-1-k``) of the backward loop for the rows ``r0 .. r0+m-1``
    (``dh`` ``[m, H]`` their carried ``dH``), products included: ``P1 = pack(R)`` (``linear_before_reset=1``)
    or ``pack(R_zr)``, ``P2 = pack(R_h)``, ``P3 = pack(R_hᵀ)``; ``dX``'s rows by ``Wp = pack(W)`` when
    ``has_dX``; ``db`` ``[3H]`` and ``dbr`` ``[H]`` (``Σ da_h ⊙ r``) accumulate."""
    m = dh.shape[0]
    h = dh.shape[1]
    for k in range(k0, k1):
        t = alive - 1 - k
        hp = h0[r0:r0 + m] if t == 0 else HA[t - 1, r0:r0 + m]
        dHAt = dHA[t] if has_dHA else dHA[0]
        if lbr:
            gemm(hp, P3, q)
            _bwd_lbr1(t, r0, ZRH[t], hp, dHAt, has_dHA, lengths, q, rbh, dh, dhz, ap, DA[t], E[t])
            if t > 0:
                _next(t - 1, r0, m, ZRH, HA, dHA, has_dHA, DA, E, dX, has_dX)
            gemm(ap, P1, tmp)
        else:
            _bwd_lbr0_zh(t, r0, ZRH[t], hp, dHAt, has_dHA, lengths, dh, dhz, DA[t])
            if t > 0:
                _next(t - 1, r0, m, ZRH, HA, dHA, has_dHA, DA, E, dX, has_dX)
            gemm(DA[t, r0:r0 + m, 2 * h:], P2, q)
            _bwd_lbr0_r(t, r0, ZRH[t], hp, lengths, q, dhz, DA[t], E[t])
            gemm(DA[t, r0:r0 + m, :2 * h], P1, tmp)
        for r in range(m):
            for j in range(h):
                dh[r, j] = dhz[r, j] + tmp[r, j]
        if has_dX:
            gemm(DA[t, r0:r0 + m], Wp, dX[t, r0:r0 + m])
        for r in range(m):
            for j in range(3 * h):
                db[j] += DA[t, r0 + r, j]
        if lbr:
            for r in range(m):
                for j in range(h):
                    dbr[j] += E[t, r0 + r, j]


_scratch_local = threading.local()


def _scratch(name: str, shape: tuple, dt: np.dtype) -> np.ndarray:
    """A ``shape`` array of the calling thread's buffer ``name``, kept for its next call (a fresh
    20 MB buffer costs milliseconds of page faults)."""
    n = math.prod(shape) * dt.itemsize
    buf = getattr(_scratch_local, name, None)
    if buf is None or buf.nbytes < n:
        buf = np.empty(n, np.uint8)
        if n <= 256 << 20:
            setattr(_scratch_local, name, buf)
    return buf[:n].view(dt).reshape(shape)


def backward_core(X: np.ndarray, Wd: np.ndarray, Rd: np.ndarray, wb: Any, rb: Any, SL: Any, h0: Any,
                  HAll: np.ndarray, ZRH: np.ndarray, dHAll: Any, dHFinal: Any, lbr: int, clip: Any,
                  dX: np.ndarray, dW: np.ndarray, dR: np.ndarray, dB: np.ndarray, dH0: np.ndarray) -> None:
    """One direction of GRUGrad in the forward time order (module docstring)."""
    S, nb, I = X.shape
    h = Rd.shape[1]
    dt = X.dtype
    X, HAll, ZRH = readable(X), readable(HAll), readable(ZRH)
    DA = _scratch("da", (S, nb, 3 * h), dt)
    E = _scratch("e", (S, nb, h), dt)
    lengths = _lengths(SL, S, nb)
    alive = int(lengths.max(initial=0))
    DA[alive:] = 0
    E[alive:] = 0
    _, rbh = _biases(wb, rb, lbr, h, dt)
    h0c = np.zeros((nb, h), dt) if h0 is None else readable(np.ascontiguousarray(h0, dt))
    dHA = readable(dHAll) if dHAll is not None else np.zeros((1, nb, h), dt)
    if lbr:
        P1, P2, P3 = pack(Rd), np.zeros((1, 1, 1), dt), pack(Rd[2 * h:].T)
    else:
        P1, P2, P3 = pack(Rd[:2 * h]), pack(Rd[2 * h:]), np.zeros((1, 1, 1), dt)
    in_loop = dX.strides[2] == dX.itemsize
    Wp = readable(pack(Wd)) if in_loop else np.zeros((1, 1, 1), dt)
    dXl = dX if in_loop else np.zeros((1, 1, 1), dt)
    if in_loop and alive < S:
        dX[alive:] = 0
    block = max(1, _BLOCK_ELEMENTS // max(1, nb * 3 * h))
    ranges = _halves(nb)
    sums = [(np.zeros(3 * h, dt), np.zeros(h, dt)) for _ in ranges]

    def body(i: int, r0: int, r1: int, stop: threading.Event) -> None:
        m = r1 - r0
        dh = np.zeros((m, h), dt) if dHFinal is None else np.array(dHFinal[r0:r1], dt)
        dhz, q, tmp = np.empty((m, h), dt), np.empty((m, h), dt), np.empty((m, h), dt)
        ap = np.empty((m, 3 * h), dt)
        for k0 in range(0, alive, block):
            if stop.is_set():
                return
            backward_loop(k0, min(alive, k0 + block), alive, r0, ZRH, HAll, h0c, dHA, dHAll is not None, lengths,
                          DA, E, dXl, in_loop, Wp, P1, P2, P3, rbh, dh, dhz, q, ap, tmp, *sums[i], lbr)
        dH0[r0:r1] = dh

    _run(ranges, body)
    if not in_loop:
        dX[...] = blocked.matmul(DA.reshape(S * nb, 3 * h), Wd).reshape(S, nb, I)
    weight_grads(DA, E, X, HAll, h0c, lbr, dW, dR, lambda: _scratch("hp", (S, nb, h), dt))
    db = sums[0][0] if len(sums) == 1 else sums[0][0] + sums[1][0]
    dB[:3 * h] = db
    dB[3 * h:5 * h] = db[:2 * h]
    if lbr:
        dB[5 * h:] = sums[0][1] if len(sums) == 1 else sums[0][1] + sums[1][1]
    else:
        dB[5 * h:] = db[2 * h:]
