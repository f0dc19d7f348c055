"""Compiled LSTM kernels (loaded through ``gradir.backends.cpu.kernels.jit.load("lstm")``; numba).

The backward's step loop of ``LSTMGrad``: per step and batch row, one fused pass over the
hidden units computes every gate gradient ``da`` from the stored forward values and the
carried ``dH``/``dC`` (``tanh(C_t)`` included), updates ``dC`` and accumulates ``dP`` and
``dB``; then ``dH_{t-1} = da_t·R``.  ``bptt`` runs the loop, a range of steps per call, with
that GEMM done by ``_jit_gemm.gemm`` against ``R`` packed once (single-threaded: small
problems, and the two half-batch loops of large ones, one per core); ``bptt_step`` does one
step's element-wise work and leaves the GEMM to the caller (large batches on one loop:
NumPy's threaded BLAS).  ``bptt`` asks for the next step's operands (prefetch) before a step's
GEMMs, and the two half-batch loops of large problems on the packed path also compute their
steps' rows of dX there (``has_dX``: ``dX`` ``[S, B, I]``, ``Wp = pack(W[d])``) and make each
step's ``da`` in a ring that stays in cache, streamed to ``da`` after the step's GEMMs (``stream``).

Operand conventions (everything C-contiguous, one dtype, float32 or float64):
``G`` ``[S, D, B, 4H]`` post-activation gates (i, o, f, c̃), ``CA`` ``[S, D, B, H]``,
``dHA`` ``[S, D, B, H]`` (a ``[1, 1, 1, 1]`` dummy when absent), ``c0``/``dHF``/``dCF``
``[D, B, H]`` (zeros or dummies when absent), ``P`` ``[D, 3H]`` (zeros when absent),
``R`` ``[D, 4H, H]``, ``da`` ``[S, B, D, 4H]`` (the scratch), ``dP`` ``[D, 3H]`` and
``db`` ``[D, 4H]`` accumulators, ``dH``/``dC`` ``[B, H]`` the carried gradients.
Per row: ``lengths[b]`` (valid steps are ``t < lengths[b]``), ``first[b]`` (the row's first
forward step, where it starts from H0/C0 and where dH0/dC0 are taken) and ``last[b]`` (its
last forward step, where dHFinal/dCFinal enter).

Every sum (dP, dB) is accumulated in one fixed order (steps in visit order, then rows),
so results do not depend on thread counts.  float32 ``tanh`` is vectorizable (built on
``exp2_32``, < 1.5 ulp); float64 uses libm's ``tanh``.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, types
from numba.extending import overload

from ._jit_core import ELEMENTWISE, INLINE, LOG2E, exp2_32, prefetch_span, store_fence, stream32
from . import _jit_gemm as gemm_module  # the LSTM kernels' GEMM (``pack``, ``FAST_LARGE`` too)
from ._jit_gemm import gemm, gemm_rows
from ._jit_goto import stream_packed

__all__ = ["bptt", "bptt_step", "cell_backward", "cell_forward", "cell_forward_small", "cell_grads_small",
           "forward_step", "gemm_module", "tanh"]

# tanh(x) = x + x·x²·p(x²) on |x| < 0.625 (least-squares fit, < 0.8 ulp in float32);
# above, 1 - 2/(1 + e^{2|x|}) with the sign restored (no cancellation there).
_T5 = np.float32(0.0022941734401563047)
_T4 = np.float32(-0.008340863341871011)
_T3 = np.float32(0.021765884629080988)
_T2 = np.float32(-0.05395842886692965)
_T1 = np.float32(0.133332956944611)
_T0 = np.float32(-0.3333333298819404)
_TSMALL = np.float32(0.625)
_TWO_LOG2E = np.float32(2.0 * LOG2E)
_ONE = np.float32(1.0)
_TWO = np.float32(2.0)
_HALF = np.float32(0.5)


@njit(**INLINE)
def tanh32(x):  # type: ignore[no-untyped-def]
    ax = abs(x)
    e = exp2_32(_TWO_LOG2E * ax)  # clamped inside: finite, so the quotient is 0 for large |x|
    big = _ONE - _TWO / (_ONE + e)
    u = x * x
    p = _T5 * u + _T4
    p = p * u + _T3
    p = p * u + _T2
    p = p * u + _T1
    p = p * u + _T0
    small = ax + ax * u * p
    r = small if ax < _TSMALL else big
    return r if x >= 0 else -r


def tanh(x):  # pragma: no cover - replaced by the overload inside compiled code
    raise NotImplementedError


@overload(tanh, **INLINE)
def _tanh_overload(x):  # type: ignore[no-untyped-def]
    if x == types.float32:
        return lambda x: tanh32(x)
    return lambda x: math.tanh(x)


@njit(**ELEMENTWISE)
def _row(g, ct, cp, dh, dc, p, a, h):  # type: ignore[no-untyped-def]
    """One batch row: gate gradients ``a`` (4H) and ``dc`` <- dC_{t-1}, from the gates ``g``,
    ``C_t``, ``C_{t-1}``, the carried ``dh``/``dc`` and the peepholes ``p``."""
    for j in range(h):
        gi = g[j]
        go = g[h + j]
        gf = g[2 * h + j]
        gc = g[3 * h + j]
        c = ct[j]
        cq = cp[j]
        hj = dh[j]
        cj = dc[j]
        pi = p[j]
        po = p[h + j]
        pf = p[2 * h + j]
        tau = tanh(c)
        ao = hj * tau * (go - go * go)
        dct = cj + hj * (go - go * tau * tau) + ao * po
        ai = dct * gc * (gi - gi * gi)
        af = dct * cq * (gf - gf * gf)
        ac = dct * (gi - gi * gc * gc)
        dc[j] = dct * gf + ai * pi + af * pf
        a[j] = ai
        a[h + j] = ao
        a[2 * h + j] = af
        a[3 * h + j] = ac


@njit(**ELEMENTWISE)
def _elementwise(t, tp, d, r0, G, CA, dHA, has_dHA, c0, dHF, has_dHF, dCF, has_dCF, P, lengths, first, last,
                 da, dH, dC, dP, db):  # type: ignore[no-untyped-def]
    """Step ``t`` of direction ``d`` (``tp``: the forward step before it, for C_{t-1}) for the
    batch rows ``r0 .. r0 + len(dH) - 1`` (``dH``/``dC`` hold just those rows): writes their
    ``da[b, d]`` (``da``: step ``t``'s ``[B, D, 4H]``), adds dHAll/finals into ``dH``/``dC``, updates
    ``dC`` to dC_{t-1}."""
    h = dH.shape[1]
    for r in range(dH.shape[0]):
        b = r0 + r
        a = da[b, d]
        if t >= lengths[b]:  # the row has no step t
            for j in range(4 * h):
                a[j] = 0
            for j in range(h):
                dC[r, j] = 0
            continue
        dh = dH[r]
        dc = dC[r]
        if has_dHA:
            x = dHA[t, d, b]
            for j in range(h):
                dh[j] += x[j]
        if t == last[b]:
            if has_dHF:
                x = dHF[d, b]
                for j in range(h):
                    dh[j] += x[j]
            if has_dCF:
                x = dCF[d, b]
                for j in range(h):
                    dc[j] += x[j]
        ct = CA[t, d, b]
        cp = c0[d, b] if t == first[b] else CA[tp, d, b]
        _row(G[t, d, b], ct, cp, dh, dc, P[d], a, h)
        # The sums in loops of their own: with them in _row's loop, LLVM gives up vectorizing
        # (too many possible aliasings to check).  Indexed in place, not through row views:
        # 14.4 instead of 15.4 us per step of 32 rows at H = 256 (in cache), the same bits.
        for j in range(h):
            dP[d, j] += da[b, d, j] * cp[j]
        for j in range(h):
            dP[d, h + j] += da[b, d, h + j] * ct[j]
        for j in range(h):
            dP[d, 2 * h + j] += da[b, d, 2 * h + j] * cp[j]
        for j in range(4 * h):
            db[d, j] += da[b, d, j]


@njit(**ELEMENTWISE)
def _extract(t, d, r0, first, dH, dC, dH0, dC0):  # type: ignore[no-untyped-def]
    """dH0/dC0 of the rows (from ``r0``, as in ``_elementwise``) whose first forward step is
    ``t`` (dH, dC are then dH_{t-1}, dC_{t-1})."""
    for r in range(dH.shape[0]):
        if first[r0 + r] == t:
            dH0[d, r0 + r] = dH[r]
            dC0[d, r0 + r] = dC[r]


@njit(**ELEMENTWISE)
def bptt_step(t, tp, prev, d, r0, G, CA, dHA, has_dHA, c0, dHF, has_dHF, dCF, has_dCF, P, lengths, first,
              last, da, dH, dC, dP, db, dH0, dC0):  # type: ignore[no-untyped-def]
    """One step's element-wise work for the batch rows from ``r0`` (as in ``_elementwise``);
    first takes dH0/dC0 for the rows that started at the previously visited step ``prev``
    (-1: none).  The caller then sets ``dH = da[t, rows, d]·R[d]``."""
    if prev >= 0:
        _extract(prev, d, r0, first, dH, dC, dH0, dC0)
    _elementwise(t, tp, d, r0, G, CA, dHA, has_dHA, c0, dHF, has_dHF, dCF, has_dCF, P, lengths, first, last,
                 da[t], dH, dC, dP, db)


@njit(**INLINE)
def _prefetch_step(t, rev, d, r0, m, G, CA, dHA, has_dHA, da, pda, dX, has_dX):  # type: ignore[no-untyped-def]
    """Asks for step ``t``'s rows ``r0 .. r0+m-1`` of the gates, ``C_{t-1}``, ``dHAll``, ``da``
    and ``dX`` before this step's GEMMs, which leave the memory bus idle: the next step's
    element-wise pass then reads them from cache, not from memory (at 100,64,256,256 on Zen 4
    that pass took 4.4 ms with its operands in memory, 2.0 with them in cache)."""
    S, D, B = G.shape[0], G.shape[1], G.shape[2]
    h = CA.shape[3]
    prefetch_span(G, ((t * D + d) * B + r0) * 4 * h, m * 4 * h)
    tp = t + 1 if rev else t - 1
    if 0 <= tp < S:
        prefetch_span(CA, ((tp * D + d) * B + r0) * h, m * h)
    if has_dHA:
        prefetch_span(dHA, ((t * D + d) * B + r0) * h, m * h)
    if pda:
        for r in range(m):
            prefetch_span(da, ((t * B + r0 + r) * D + d) * 4 * h, 4 * h)
    if has_dX:
        ni = dX.shape[2]
        prefetch_span(dX, (t * B + r0) * ni, m * ni)


@njit(**INLINE)
def _stream_rows(t, d, r0, m, ring, da):  # type: ignore[no-untyped-def]
    """Step ``t``'s rows ``r0 .. r0+m-1`` of ``da`` from ``ring`` by non-temporal stores (32 bytes
    each; ``da``'s rows 32-byte aligned)."""
    B, D, h4, L = da.shape[1], da.shape[2], da.shape[3], ring.shape[2]
    vw = 32 // da.itemsize
    for r in range(m):
        dst = ((t * B + r0 + r) * D + d) * h4
        src = ((r0 + r) * D + d) * L
        for j in range(0, h4, vw):
            stream32(da, dst + j, ring, src + j)


@njit(**ELEMENTWISE)
def bptt(rev, d, r0, k0, k1, G, CA, dHA, has_dHA, c0, dHF, has_dHF, dCF, has_dCF, P, lengths, first, last,
         Rp, da, dH, dC, dP, db, dH0, dC0, Wp, dX, has_dX, ring, stream, pk):  # type: ignore[no-untyped-def]
    """Visits ``k0 .. k1-1`` of the step loop of direction ``d`` (visit ``k`` is step
    ``alive-1-k``, or ``k`` when ``rev``) for the batch rows from ``r0`` (as in
    ``_elementwise``), GEMMs included: ``dH_{t-1} = da_t·R[d]`` by ``_jit_gemm.gemm`` with
    ``Rp = pack(R[d])`` (``[panels, 4H, PW]``), and when ``has_dX`` the step's rows of
    ``dX = da·W`` too (``dX`` ``[S, B, I]``, ``Wp = pack(W[d])``; one direction only), while
    ``da_t`` is still in cache: the same kernel, so the same bits as one GEMM over all steps
    afterwards.  With ``stream``, each step's ``da`` is made in ``ring`` (``[B, D, L]``, ``L`` a
    little more than 4H; this loop's own, which stays in cache), used there by the GEMMs, then written to ``da`` by
    non-temporal stores (``da``'s rows 32-byte aligned): ``da``'s lines are then neither read
    from memory before they are written nor asked for ahead, and the element-wise pass writes
    to cache (at 100,64,256,256 on Zen 4: the pass 2.3-2.4 instead of 3.0-4.1 ms per thread, its
    prefetches 0.47 instead of 0.7, the stores 0.45).  Calls for consecutive ranges continue
    the same loop (``dH``/``dC`` carry the gradients).  With ``stream`` and a non-empty ``pk``
    (one direction), ``da`` is streamed not to ``da`` but to ``pk``, packed for the weight
    gradients' product (``_jit_goto.stream_packed``: ``daᵀ``, ``[4H, S·B]``, in 6-row tiles),
    which then packs nothing of it (at 100,64,256,256: the stores 0.6-0.8 instead of 0.4-0.45
    ms per thread, the product 0.7-1.0 ms shorter)."""
    S = G.shape[0]
    m = dH.shape[0]
    alive = 0
    for b in range(lengths.shape[0]):
        alive = max(alive, lengths[b])
    for k in range(k0, min(k1, alive)):
        t = k if rev else alive - 1 - k
        tp = t + 1 if rev else t - 1
        if tp < 0 or tp >= S:
            tp = t  # only used for rows whose first step is t (they read c0)
        dat = ring if stream else da[t]
        _elementwise(t, tp, d, r0, G, CA, dHA, has_dHA, c0, dHF, has_dHF, dCF, has_dCF, P, lengths, first, last,
                     dat, dH, dC, dP, db)
        if k + 1 < alive:
            _prefetch_step(k + 1 if rev else alive - 2 - k, rev, d, r0, m, G, CA, dHA, has_dHA, da, not stream,
                           dX, has_dX)
        a = dat[r0:r0 + m, d, :G.shape[3]]  # (``ring``'s rows are longer than 4H)
        gemm(a, Rp, dH)
        if has_dX:
            gemm(a, Wp, dX[t, r0:r0 + m])
        if stream and pk.size:
            stream_packed(r0, m, t * G.shape[2] + r0, ring, G.shape[3], pk, S * G.shape[2])
        elif stream:
            _stream_rows(t, d, r0, m, ring, da)
        _extract(t, d, r0, first, dH, dC, dH0, dC0)
    if stream:
        store_fence()  # the streamed rows visible to the thread that reads da next


@njit(**ELEMENTWISE)
def forward_step(g, gr, bias, has_b, cp, ct, ht, p, has_p):  # type: ignore[no-untyped-def]
    """One forward step of LSTMTraining after its recurrent GEMM, fused: ``g`` ``[B, 4H]``
    holds ``X_t·Wᵀ``, ``bias`` ``[4H]`` the summed biases when ``has_b``, and ``gr``
    ``H_{t-1}·Rᵀ`` (blocks i, o, f, c, the sigmoid blocks halved, so
    ``σ(a) = ½·tanh(a/2) + ½``; each pre-activation is ``(X_t·Wᵀ + b) + H_{t-1}·Rᵀ``);
    ``p`` ``[3H]`` the halved peepholes (i, o, f) when ``has_p``.  Writes the post-activation
    gates into ``g``, ``C_t`` into ``ct`` and ``H_t`` into ``ht``, from ``C_{t-1}`` in ``cp``.
    (Adding the bias here rather than in a pass over all steps' ``X·Wᵀ`` saves a memory-bound
    pass: 11 ms at S,B,H = 100,64,256.)"""
    h = ct.shape[1]
    # the gates go through a private row: writing them straight back into ``g`` (read at
    # other offsets of the same row) keeps LLVM from vectorizing the loop (measured 10x)
    tmp = np.empty(4 * h, g.dtype)
    pre = np.empty(4 * h, g.dtype)  # X_t·Wᵀ + b
    for b in range(g.shape[0]):
        gb = g[b]
        if has_b:
            for j in range(4 * h):
                pre[j] = gb[j] + bias[j]
        else:
            for j in range(4 * h):
                pre[j] = gb[j]
        rb = gr[b]
        cpb = cp[b]
        ctb = ct[b]
        htb = ht[b]
        for j in range(h):
            c_prev = cpb[j]
            ai = pre[j] + rb[j]
            ao = pre[h + j] + rb[h + j]
            af = pre[2 * h + j] + rb[2 * h + j]
            ac = pre[3 * h + j] + rb[3 * h + j]
            if has_p:
                ai = ai + c_prev * p[j]
                af = af + c_prev * p[2 * h + j]
            gi = tanh(ai) * _HALF + _HALF
            gf = tanh(af) * _HALF + _HALF
            gc = tanh(ac)
            c = gf * c_prev + gi * gc
            if has_p:
                ao = ao + c * p[h + j]
            go = tanh(ao) * _HALF + _HALF
            tmp[j] = gi
            tmp[h + j] = go
            tmp[2 * h + j] = gf
            tmp[3 * h + j] = gc
            ctb[j] = c
            htb[j] = go * tanh(c)
        for j in range(4 * h):
            gb[j] = tmp[j]



@njit(**ELEMENTWISE)
def forward_loop(rev, k0, k1, r0, r1, G, tmp4, RsTp, bias, has_b, h0, c0, HA, CA, p, has_p):  # type: ignore[no-untyped-def]
    """Visits ``k0 .. k1-1`` of LSTMTraining's step loop (visit ``k`` is step ``k``, or ``S-1-k``
    when ``rev``) for the batch rows ``r0 .. r1-1``, GEMMs included: ``G``, ``HA``, ``CA`` are the
    ``[S, B, ·]`` results, ``RsTp = pack(Rᵀ)`` with the sigmoid rows halved, ``h0``/``c0``
    ``[r1-r0, H]`` the rows' states before the first step, ``tmp4`` ``[r1-r0, 4H]`` scratch.  The
    same work as a Python loop of ``gemm`` and ``forward_step`` calls (every row valid at every
    step), without that loop's interpreter time between the compiled calls."""
    S = G.shape[0]
    for k in range(k0, k1):
        t = S - 1 - k if rev else k
        if k == 0:
            hp = h0
            cp = c0
        else:
            tp = t + 1 if rev else t - 1
            hp = HA[tp][r0:r1]
            cp = CA[tp][r0:r1]
        gemm(hp, RsTp, tmp4)
        forward_step(G[t][r0:r1], tmp4, bias, has_b, cp, CA[t][r0:r1], HA[t][r0:r1], p, has_p)

# -- LSTMCell and GradLSTMCellInput (PyTorch gate order i, f, g, o) ----------------------------
@njit(**INLINE)
def _cell_unit(a, hw, bias, j, h):  # type: ignore[no-untyped-def]
    """Gates i, f, g, o of hidden unit ``j`` from ``X·W_ihᵀ`` (``a``), ``H·W_hhᵀ`` (``hw``) and the
    bias (one row each); sigmoids as ``½·tanh(x/2) + ½``, as the NumPy kernels compute them."""
    pi = (a[j] + hw[j]) + bias[j]
    pf = (a[h + j] + hw[h + j]) + bias[h + j]
    pg = (a[2 * h + j] + hw[2 * h + j]) + bias[2 * h + j]
    po = (a[3 * h + j] + hw[3 * h + j]) + bias[3 * h + j]
    gi = tanh(pi * _HALF) * _HALF + _HALF
    gf = tanh(pf * _HALF) * _HALF + _HALF
    gg = tanh(pg)
    go = tanh(po * _HALF) * _HALF + _HALF
    return gi, gf, gg, go


@njit(**ELEMENTWISE)
def cell_forward(a, hw, bias, C, hn, cn):  # type: ignore[no-untyped-def]
    """LSTMCell after its two GEMMs, in one pass: ``a`` ``[B, 4H]`` holds ``X·W_ihᵀ``, ``hw``
    ``H·W_hhᵀ``, ``bias`` ``[4H]``; writes ``H'`` into ``hn`` and ``C'`` into ``cn``."""
    h = C.shape[1]
    for b in range(C.shape[0]):
        ab, hb, cb, hnb, cnb = a[b], hw[b], C[b], hn[b], cn[b]
        for j in range(h):
            gi, gf, gg, go = _cell_unit(ab, hb, bias, j, h)
            c = gf * cb[j] + gi * gg
            cnb[j] = c
            hnb[j] = go * tanh(c)


@njit(**ELEMENTWISE)
def cell_backward(a, hw, bias, C, dH, dCn, has_dCn, da, want_da, dCp, want_dCp):  # type: ignore[no-untyped-def]
    """Every element-wise part of GradLSTMCellInput in one pass (``a``, ``hw``, ``bias`` as in
    ``cell_forward``; ``dH``/``dCn`` the gradients reaching H'/C'): the gate gradients into
    ``da`` ``[B, 4H]`` when ``want_da`` and ``dC = dCn + dH ⊙ o ⊙ (1 - tanh²(C'))`` times the
    forget gate (the gradient of C) into ``dCp`` when ``want_dCp``."""
    h = C.shape[1]
    row = np.empty(4 * h, a.dtype)  # private: see forward_step
    for b in range(C.shape[0]):
        ab, hb, cb, dhb = a[b], hw[b], C[b], dH[b]
        for j in range(h):
            gi, gf, gg, go = _cell_unit(ab, hb, bias, j, h)
            c_prev = cb[j]
            tau = tanh(gf * c_prev + gi * gg)
            dh = dhb[j]
            dc = dh * go * (_ONE - tau * tau)
            if has_dCn:
                dc = dc + dCn[b, j]
            row[j] = gi * (_ONE - gi) * gg * dc
            row[h + j] = gf * (_ONE - gf) * c_prev * dc
            row[2 * h + j] = (_ONE - gg * gg) * gi * dc
            row[3 * h + j] = go * (_ONE - go) * tau * dh
            if want_dCp:
                dCp[b, j] = dc * gf
        if want_da:
            dab = da[b]
            for j in range(4 * h):
                dab[j] = row[j]


# -- small cells: the whole kernel in one call (GEMMs by _jit_gemm) --------------------------
@njit(**ELEMENTWISE)
def _pack_rows(W):  # type: ignore[no-untyped-def]
    """``pack(Wᵀ)`` (``_jit_gemm`` panels of W's rows): ``out[p, k, c] = W[p·PW + c, k]``, zero-padded."""
    n, K = W.shape
    pw = 16 if W.itemsize == 4 else 8
    npan = (n + pw - 1) // pw
    out = np.zeros((npan, K, pw), W.dtype)
    for j in range(n):
        for k in range(K):
            out[j // pw, k, j % pw] = W[j, k]
    return out


@njit(**ELEMENTWISE)
def _cell_gemms(X, H, W_ih, W_hh):  # type: ignore[no-untyped-def]
    """``X·W_ihᵀ`` and ``H·W_hhᵀ`` (``[B, 4H]`` each), computed transposed (``W·Xᵀ``: W is the
    kernel's row operand as it is, and only the few rows of X and H are packed), then turned."""
    nb = X.shape[0]
    g4 = W_ih.shape[0]
    aT = np.empty((g4, nb), X.dtype)
    hT = np.empty((g4, nb), X.dtype)
    gemm(W_ih, _pack_rows(X), aT)
    gemm(W_hh, _pack_rows(H), hT)
    a = np.empty((nb, g4), X.dtype)
    hw = np.empty((nb, g4), X.dtype)
    for b in range(nb):
        for g in range(g4):
            a[b, g] = aT[g, b]
            hw[b, g] = hT[g, b]
    return a, hw


@njit(**ELEMENTWISE)
def cell_forward_small(X, H, C, W_ih, W_hh, bias, hn, cn):  # type: ignore[no-untyped-def]
    """LSTMCell in one call (its two GEMMs included), for small cells."""
    a, hw = _cell_gemms(X, H, W_ih, W_hh)
    cell_forward(a, hw, bias, C, hn, cn)


@njit(**ELEMENTWISE)
def cell_grads_small(X, H, C, W_ih, W_hh, bias, dH, dCn, has_dCn, want,
                     r0, r1, r2, r3, r4, r5):  # type: ignore[no-untyped-def]
    """Every requested GradLSTMCellInput result in one call, for small cells: ``want[k]``
    says whether input ``k``'s gradient goes into ``r<k>`` (dX, dH, dC, dW_ih, dW_hh, dBias).
    The shared work (the cell's GEMMs, the gate gradients ``da``) is the same whatever is
    requested, so each result has the same bits alone or fused."""
    a, hw = _cell_gemms(X, H, W_ih, W_hh)
    want_da = want[0] or want[1] or want[3] or want[4] or want[5]
    da = np.empty_like(a)
    cell_backward(a, hw, bias, C, dH, dCn, has_dCn, da, want_da, r2, want[2])
    if want[0]:
        gemm_rows(da, W_ih, r0)
    if want[1]:
        gemm_rows(da, W_hh, r1)
    if want[3] or want[4]:  # daᵀ·X and daᵀ·H, with daᵀ (a copy) as the row operand
        daT = np.empty((da.shape[1], da.shape[0]), da.dtype)
        for b in range(da.shape[0]):
            for g in range(da.shape[1]):
                daT[g, b] = da[b, g]
        if want[3]:
            gemm_rows(daT, X, r3)
        if want[4]:
            gemm_rows(daT, H, r4)
    if want[5]:
        for g in range(r5.shape[0]):
            r5[g] = 0
        for b in range(da.shape[0]):
            for g in range(r5.shape[0]):
                r5[g] += da[b, g]
