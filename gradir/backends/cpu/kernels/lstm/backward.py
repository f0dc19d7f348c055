"""LSTMGrad: exact backpropagation through time of LSTMTraining, its step loops compiled
(``_jit_lstm.py``) or by NumPy's ufuncs (``bptt.py``), then large GEMMs over all steps."""

from __future__ import annotations

import math
import threading
from typing import Any

import numpy as np

from .. import blocked, jit, parallel
from . import common
from .bptt import Direction, Grad, sum_dR
from .common import (Steps, check_dtype, check_layer_attrs, expect, result, seq_lengths, split_wanted, this_thread,
                     view)

__all__ = ["lstm_grad", "release_scratch"]

# Target size of a chunk of da in the backward (its working set then fits L2; measured best).
_CHUNK_BYTES = 1 << 19
# Bound on each chunk of H_{t-1} copied (into spent rows of da) for dR when HAll is not a 2-D
# view (D = 2).
_COPY_BYTES = 8 << 20


# The backward's [S, B, D, 4H] scratch is reused between calls on the same thread: a
# fresh 26 MB buffer costs ~2-3 ms of page faults (measured here; docs/performance.md).  Buffers above
# _SCRATCH_MAX_BYTES are not kept; ``release_scratch()`` drops the calling thread's buffer.
_SCRATCH_MAX_BYTES = 256 << 20
_scratch_local = threading.local()


def _scratch(shape: tuple, dtype: np.dtype, name: str = "buf") -> np.ndarray:
    """A ``shape`` array of the calling thread's buffer ``name`` (kept for its next call), at a
    64-byte boundary (the step loops' non-temporal stores need rows 32-byte aligned)."""
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


def release_scratch() -> None:
    """Free the LSTMGrad scratch buffers kept by the calling thread (``da`` and the step loops'
    rings; not the products' packing buffers, a fixed 8 MB per thread: ``blocked.goto_buffers``)."""
    _scratch_local.buf = None
    _scratch_local.ring = None


# Elements of ``da`` (steps x rows x 4H) per compiled call of the step loop (about 16 ms of work
# per call at 100,64,256,256): between calls a Ctrl-C stops the loops.
_BLOCK_ELEMENTS = 1 << 21
# dX's rows computed by the step loops (False: one product afterwards; the same bits, tests)
DX_IN_LOOP = True
# da streamed to memory from a ring in cache by the step loops (False: written in place; the
# same bits, tests)
STREAM = True
# and, where the weight gradients' product takes it whole (one direction, B a multiple of 8, no
# step past every row's length), not to ``da`` but straight into that product's packed form
# (False: ``da`` packed by the product; the same bits, tests)
PREPACK = True


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
    """A ``_matmul`` that computes the top and bottom halves of ``out``'s rows as two GEMMs,
    on two threads when ``two`` (BLAS held to one thread by the caller), else one after the other."""
    def mm(a: np.ndarray, b: np.ndarray, out: np.ndarray, tmp: np.ndarray | None = None) -> None:
        m = a.shape[0] // 2
        if m == 0:
            _matmul(a, b, out, tmp)
            return
        t0, t1 = (None, None) if tmp is None else (tmp[:m], tmp[m:])
        parallel.run_two(lambda stop: _matmul(a[:m], b, out[:m], t0), lambda stop: _matmul(a[m:], b, out[m:], t1),
                         concurrent=two)
    return mm


def _packed_halves(jg: Any, a: np.ndarray, b: np.ndarray, out: np.ndarray, two: bool) -> None:
    """``out = a·b`` by the packed-panel kernel (``_jit_gemm``): ``b`` packed once, the top and
    bottom halves of ``out``'s rows on two threads when ``two``.  At dX's shape (6400x1024 by
    1024x256) 188 GFLOP/s on two cores, OpenBLAS 174-176 as two single-threaded halves.
    ``a`` and ``out`` need unit column strides."""
    bp = jg.pack(b)
    m = a.shape[0] // 2
    parallel.run_two(lambda stop: jg.gemm(a[:m], bp, out[:m]), lambda stop: jg.gemm(a[m:], bp, out[m:]),
                     concurrent=two)


def _rev(k: Grad, d: int) -> bool:
    """Whether direction ``d`` of the layer runs backward in time (reverse, or bidirectional's second)."""
    return k.direction == "reverse" or d == 1


def _compiled_steps(jl: Any, k: Grad, then: tuple | None = None) -> np.ndarray:
    """The step loops of every direction by the compiled kernels; returns dB's 4H sums ``[D·4H]``.
    When the two half-batch chains run side by side (``k.two``), ``then``'s two functions run
    right after them, one on each (the halves of the weight gradients' product, which need
    every step's ``da``: each chain waits for the other there, rather than both returning)."""
    jg = jl.gemm_module
    S, nb, h, D, dt = k.S, k.nb, k.h, k.D, k.dtype
    dummy = np.zeros((1, 1, 1, 1), dt)
    dummy3 = dummy[0]
    has_dHA, has_dHF, has_dCF = k.dHAll is not None, k.dHFinal is not None, k.dCFinal is not None
    # operands as C-contiguous arrays that numba types as writeable (jit.readable: no copy)
    dHA = jit.readable(np.ascontiguousarray(k.dHAll)) if has_dHA else dummy
    dHF = jit.readable(np.ascontiguousarray(k.dHFinal)) if has_dHF else dummy3
    dCF = jit.readable(np.ascontiguousarray(k.dCFinal)) if has_dCF else dummy3
    c0 = jit.readable(np.ascontiguousarray(k.C0)) if k.C0 is not None else np.zeros((D, nb, h), dt)
    P = jit.readable(np.ascontiguousarray(k.P)) if k.P is not None else np.zeros((D, 3 * h), dt)
    iofc, CAll, R = (jit.readable(a) for a in (k.iofc, k.CAll, k.R))
    lengths = k.steps.lengths if k.steps.lengths is not None else np.full(nb, S, np.intp)
    alive = k.steps.alive
    da = k.dab
    if alive < S:
        da[alive:] = 0
    dP = k.dP2 = np.zeros((D, 3 * h), dt)
    db = np.zeros((D, 4 * h), dt)
    # The whole loop compiled, its GEMMs by the packed-R kernel (single-threaded): small
    # problems, and the two half-batch loops of large ones where that kernel beats BLAS
    # (``_jit_gemm.FAST_LARGE``).  Otherwise a compiled call per step, then NumPy's BLAS.
    whole = ((nb * 4 * h <= common.WHOLE_LOOP_MAX or (k.split and jg.FAST_LARGE))
             and not getattr(this_thread, "per_step", False))
    firsts = [lengths - 1 if _rev(k, d) else np.zeros(nb, np.intp) for d in range(D)]
    lasts = [np.zeros(nb, np.intp) if _rev(k, d) else lengths - 1 for d in range(D)]
    # dX's rows too, step by step while da_t is in cache, where dX would be the packed-panel
    # kernel's afterwards (the same kernel: the same bits)
    dX = k.dX
    k.dX_done = DX_IN_LOOP and whole and D == 1 and k.split and jg.FAST_LARGE and dX.flags.c_contiguous
    dXl = jit.readable(dX) if k.dX_done else dummy3
    # R[d] (and W) packed: by the two chains, one each, when they run side by side
    sources = ([R[d] for d in range(D)] if whole else []) + ([view(k.W, (4 * h, k.I))] if k.dX_done else [])
    packed: list = [None] * len(sources)
    meet = threading.Barrier(2) if k.split and k.two else None
    # each step's da made in a ring that stays in cache, then streamed to ``da`` (``_jit_lstm.bptt``)
    stream = (STREAM and whole and k.split and jg.FAST_LARGE and 4 * h * dt.itemsize % 32 == 0
              and da.ctypes.data % 32 == 0)
    # (rows 64 bytes longer than 4H: 4 KB apart, the rows of a step all fall in one set of the
    # L1 cache, and reading them across, as the packing does, misses it every time)
    rings = _scratch((2, nb, D, 4 * h + 64 // dt.itemsize), dt, "ring") if stream else np.zeros((2, 1, 1, 1), dt)
    # ... or into the weight gradients' product's packed left operand (``lstm_grad`` made it)
    k.pk_used = stream and k.pk is not None and k.dX_done  # (dX after the loops would read da)
    pk = k.pk if k.pk_used else np.zeros(0, dt)
    if meet is None:
        packed[:] = [jg.pack(b) for b in sources]
    # visits per compiled call: a Ctrl-C (``stop``) is seen between calls
    block = max(1, _BLOCK_ELEMENTS // max(1, nb * 4 * h))

    def loops(r0: int, r1: int, dP: np.ndarray, db: np.ndarray, stop: threading.Event, ring: np.ndarray) -> bool:
        """Backward through time of batch rows r0..r1-1 (independent of the other rows); False
        when stopped."""
        dH = np.empty((r1 - r0, h), dt)
        dC = np.empty((r1 - r0, h), dt)
        wp = packed[D] if k.dX_done else packed[0] if whole else None
        for d in range(D):
            rev, first = _rev(k, d), firsts[d]
            args = (iofc, CAll, dHA, has_dHA, c0, dHF, has_dHF, dCF, has_dCF, P, lengths, first, lasts[d])
            dH.fill(0)
            dC.fill(0)
            if whole:
                for k0 in range(0, alive, block):
                    if stop.is_set():
                        return False
                    jl.bptt(rev, d, r0, k0, k0 + block, *args, packed[d], da, dH, dC, dP, db, k.dH0, k.dC0,
                            wp, dXl, k.dX_done, ring, stream, pk)
                continue
            Rd = R[d]
            prev = -1
            for n in range(alive):
                if stop.is_set():
                    return False
                t = n if rev else alive - 1 - n
                tp = t + 1 if rev else t - 1
                if tp < 0 or tp >= S:
                    tp = t
                jl.bptt_step(t, tp, prev, d, r0, *args, da, dH, dC, dP, db, k.dH0, k.dC0)
                np.matmul(da[t, r0:r1, d], Rd, out=dH)
                prev = t
            rows = first[r0:r1] == prev
            k.dH0[d, r0:r1][rows] = dH[rows]
            k.dC0[d, r0:r1][rows] = dC[rows]
        return True

    def chain(half: int, r0: int, r1: int, dP: np.ndarray, db: np.ndarray, stop: threading.Event) -> None:
        """``loops``; side by side, first this chain's share of the packing, and after the
        loops its function of ``then``, each time once both chains got there (``meet``)."""
        if meet is None:
            loops(r0, r1, dP, db, stop, rings[half])
            return
        try:
            for i in range(half, len(sources), 2):
                packed[i] = jg.pack(sources[i])
            meet.wait()
            if not loops(r0, r1, dP, db, stop, rings[half]):
                meet.abort()
                return
            if then is not None:
                meet.wait()
                then[half]()
        except threading.BrokenBarrierError:
            return  # the other chain stopped or failed: run_two raises its error
        except BaseException:
            meet.abort()
            raise

    try:
        if not k.split:
            chain(0, 0, nb, dP, db, threading.Event())
            return view(db, (D * 4 * h,))
        # Two chains of half the batch rows each (see lstm_grad).
        m = nb // 2
        dP1, db1 = np.zeros_like(dP), np.zeros_like(db)
        parallel.run_two(lambda stop: chain(0, 0, m, dP, db, stop), lambda stop: chain(1, m, nb, dP1, db1, stop),
                         concurrent=k.two, on_stop=None if meet is None else meet.abort)
        dP += dP1
        db += db1
        return view(db, (D * 4 * h,))
    finally:
        k.Wp = packed[D] if k.dX_done else None


def _weights_kernel(jl: Any, k: Grad, dW: np.ndarray, dR: np.ndarray):  # type: ignore[no-untyped-def]
    """``_jit_goto`` when dW and dR should be one product (``_weights_goto``), else None."""
    if jl is None or not (k.split and jl.gemm_module.FAST_LARGE and k.D == 1 and k.S >= 2):
        return None
    if not all(a.flags.c_contiguous and a.flags.aligned for a in (k.dab, k.X, k.HAll, dW, dR)):
        return None
    jo = jit.load("goto")
    return jo if jo is not None and jo.fits2(k.I, k.h, k.dtype) else None


def _weights_goto(jo: Any, k: Grad, da2: np.ndarray, X2: np.ndarray, dW2: np.ndarray, dR2: np.ndarray,
                  fold: bool = True) -> tuple[tuple, int | None]:
    """``dW = daᵀ·X`` and ``dR = Σ_t da_tᵀ·H_{t∓1}`` as one product ``daᵀ·[X | H_{t∓1}]``
    (``_jit_goto.gemm2``: each block of ``daᵀ`` packed once for both), as two functions that
    compute the halves of the 4H rows (for two threads), and the step the product leaves out
    (None: none).  One direction.  Where every row's first step is the same one (forward, or
    reverse without sequence lengths) and ``fold``, that step's ``H_{t∓1}`` is ``H0`` (or zeros),
    given beside ``HAll`` with no copy, so the product is the whole of both; otherwise it leaves
    out that step (``_weights_rest`` adds dW's term, ``sum_dR`` the ``H0`` terms).  Where
    OpenBLAS computed dW and dR as two products (17.5 and 17.7 ms at 100,64,256,256 on Zen 4,
    two cores), 33.0-33.4 ms; every element is one fixed sum whatever the split (``_jit_goto``)."""
    S, nb, h = k.S, k.nb, k.h
    rev = _rev(k, 0)
    HA2 = jit.readable(view(k.HAll, (S * nb, h)))
    X2r = jit.readable(X2)
    b2y, rest = None, None
    if fold and (not rev or k.steps.lengths is None):  # the first step's H_{t∓1} is H0
        h0 = jit.readable(np.ascontiguousarray(k.H0[0])) if k.H0 is not None else np.zeros((nb, h), k.dtype)
        a, b1 = da2.T, X2r
        b2, b2y = (HA2[nb:], h0) if rev else (h0, HA2[: (S - 1) * nb])
    elif rev:  # the steps whose H_{t+1} is a step
        a, b1, b2, rest = da2[: (S - 1) * nb].T, X2r[: (S - 1) * nb], HA2[nb:], S - 1
    else:  # the steps whose H_{t-1} is a step
        a, b1, b2, rest = da2[nb:].T, X2r[nb:], HA2[: (S - 1) * nb], 0
    m = (a.shape[0] // 2 + jo.MR - 1) // jo.MR * jo.MR

    def half(r0: int, r1: int) -> None:
        # daᵀ already packed by the step loops (``PREPACK``) when it is the whole operand
        pre = dict(Apre=k.pk, nt=(4 * h + jo.MR - 1) // jo.MR, t0=r0 // jo.MR) if k.pk_used and fold else {}
        jo.gemm2(a[r0:r1], b1, b2, dW2[r0:r1], dR2[r0:r1], *blocked.goto_buffers(jo, da2.dtype), B2y=b2y, **pre)

    return (lambda: half(0, m), lambda: half(m, a.shape[0])), rest


def _first_step_finite(k: Grad, da2: np.ndarray) -> bool:
    """Whether every row's ``da`` at its first step (where a missing ``H0`` is zeros) is finite:
    folded into the product, a non-finite one times those zeros would make NaNs in dR that the
    other paths (which leave the term out) do not make."""
    t = k.S - 1 if _rev(k, 0) else 0
    return bool(np.isfinite(_da_rows(k, da2, t * k.nb, (t + 1) * k.nb)).all())


def _da_rows(k: Grad, da2: np.ndarray, r0: int, r1: int) -> np.ndarray:
    """Rows ``r0 .. r1-1`` of ``da`` (``[S·B, 4H]``): from the product's packed operand where the
    step loops wrote ``da`` only there (``PREPACK``)."""
    if not k.pk_used:
        return da2[r0:r1]
    return k.jo.unpacked(k.pk, 4 * k.h, k.S * k.nb, r0, r1)


def _weights_rest(k: Grad, da2: np.ndarray, X2: np.ndarray, dW2: np.ndarray, rest: int) -> None:
    """dW's term of the step ``rest`` that ``_weights_goto`` left out."""
    nb = k.nb
    k.mm(da2[rest * nb: (rest + 1) * nb].T, X2[rest * nb: (rest + 1) * nb], dW2, np.empty_like(dW2))


def lstm_grad(X: np.ndarray, W: np.ndarray, R: np.ndarray, SL: np.ndarray | None = None,
              H0: np.ndarray | None = None, C0: np.ndarray | None = None,
              HAll: np.ndarray | None = None, CAll: np.ndarray | None = None,
              iofc: np.ndarray | None = None, dHAll: np.ndarray | None = None,
              dHFinal: np.ndarray | None = None, dCFinal: np.ndarray | None = None,
              P: np.ndarray | None = None, *, out: Any = None, hidden_size: int,
              direction: str = "forward", activations: Any = None, clip: float | None = None,
              input_forget: int = 0) -> tuple[np.ndarray, ...]:
    """Exact BPTT of LSTMTraining; returns ``(dX, dW, dR, dB, dH0, dC0, dP)``."""
    D = check_layer_attrs("LSTMGrad", direction, activations, clip, input_forget)
    for name, v in (("HAll", HAll), ("CAll", CAll), ("iofc", iofc)):
        if v is None:
            raise ValueError(f"LSTMGrad: operand {name} is required")
    dt = check_dtype("LSTMGrad", X, W, R, H0, C0, HAll, CAll, iofc, dHAll, dHFinal, dCFinal, P)
    X, W, R, HAll, CAll, iofc = (np.ascontiguousarray(a) for a in (X, W, R, HAll, CAll, iofc))
    S, nb, I = X.shape
    h = hidden_size
    expect("LSTMGrad", ("W", W, (D, 4 * h, I)), ("R", R, (D, 4 * h, h)), ("H0", H0, (D, nb, h)),
            ("C0", C0, (D, nb, h)), ("HAll", HAll, (S, D, nb, h)), ("CAll", CAll, (S, D, nb, h)),
            ("iofc", iofc, (S, D, nb, 4 * h)), ("dHAll", dHAll, (S, D, nb, h)), ("dHFinal", dHFinal, (D, nb, h)),
            ("dCFinal", dCFinal, (D, nb, h)), ("P", P, (D, 3 * h)))
    res = [result(out, j, shape, dt) for j, shape in enumerate(
        [(S, nb, I), (D, 4 * h, I), (D, 4 * h, h), (D, 8 * h), (D, nb, h), (D, nb, h), (D, 3 * h)])]
    given = res[:3]
    # dX, dW and dR into C-contiguous arrays, copied into given outputs that are not: the
    # products' fast paths need them, and the bits must not depend on the outputs' strides
    res[:3] = [r if r.flags.c_contiguous and r.flags.aligned else np.empty(r.shape, dt) for r in given]
    dX, dW, dR, dB, dH0, dC0, dP = res
    steps = Steps(seq_lengths("LSTMGrad", SL, S, nb), S, dt)
    # every step's da (the one S-sized scratch), or in its place (``PREPACK``: one direction)
    # the weight gradients' packed operand, at most 5·S·B elements more
    jo_pk = jit.load("goto") if D == 1 and PREPACK else None
    n_da, n_pk = S * nb * D * 4 * h, jo_pk.prepacked_size(4 * h, S * nb) if jo_pk is not None else 0
    flat = _scratch((max(n_da, n_pk),), dt)
    k = Grad(S=S, nb=nb, I=I, h=h, D=D, dtype=dt, direction=direction, steps=steps, X=X, W=W, R=R, dX=dX,
              H0=H0, C0=C0, HAll=HAll, CAll=CAll, iofc=iofc, dHAll=dHAll, dHFinal=dHFinal,
              dCFinal=dCFinal, P=P, dR=dR, dH0=dH0, dC0=dC0, chunk_bytes=_CHUNK_BYTES,
              copy_bytes=_COPY_BYTES, dX_done=False, Wp=None, pk=None, pk_used=False, jo=None,
              dab=view(flat[:n_da], (S, nb, D, 4 * h)))

    jl = jit.load("lstm")
    # Large problems on the compiled path (B >= common.SPLIT_MIN_ROWS) run as two halves: the batch
    # rows split into two independent step loops, and every big GEMM split into the two halves
    # of its result's rows, with BLAS held to one thread.  The halves run on two threads when
    # the call was given two cores (``parallel.threads_here``); then neither core waits while
    # the other does a step's element-wise work (step loops 29 vs 33 ms with BLAS per step;
    # ~22 ms with the packed-panel kernel, which also does dX, where it beats BLAS).  Every
    # GEMM is single-threaded either way, so the bits do not depend on the threads (OpenBLAS's
    # multi-threaded GEMMs round differently from its single-threaded ones).  Only when BLAS's
    # own threads sleep soon after a call (``parallel.blas_idle_threads_sleep``), or are not
    # used at all (inside a run, which holds BLAS to one thread): OpenBLAS's default 0.1 s of
    # spinning takes a core from the loops (53 vs 31 ms; LSTMGrad after LSTMTraining 139-144
    # ms).  And not where someone holds BLAS to more than one thread: one thread here would be
    # one thread for them too, and change their bits.
    with parallel.own_blas_threads(split_wanted(jl, nb, h)) as blas:
        k.split = blas.ok
        k.two = k.split and blas.threads >= 2
        k.mm = _matmul_halves(k.two) if k.split else _matmul_blocks
        da2 = view(k.dab, (S * nb, D * 4 * h))
        dX2 = view(dX, (S * nb, I))
        X2, dW2, dR2 = view(X, (S * nb, I)), view(dW, (D * 4 * h, I)), view(dR, (D * 4 * h, h))
        jo = _weights_kernel(jl, k, dW, dR)
        halves, rest = _weights_goto(jo, k, da2, X2, dW2, dR2) if jo is not None else (None, None)
        if n_pk and halves is not None and rest is None and nb % 8 == 0 and steps.alive == S:
            k.pk, k.jo = flat[:n_pk], jo_pk  # (da is then not written)
        # with the two chains side by side, each goes on to its half of dW and dR
        after = halves is not None and k.two
        if jl is not None:
            db = _compiled_steps(jl, k, halves if after else None)
            dP[...] = view(k.dP2, (D, 3 * h))
        else:
            for d in range(D):
                direc = Direction(k, d)
                direc.run()
                dP[d] = view(direc.dP, (3 * h,))
        if k.dX_done:  # by the step loops; steps no row reaches have da = 0
            if steps.alive < S:
                jl.gemm_module.gemm(da2[steps.alive * nb:], k.Wp, dX2[steps.alive * nb:])
        elif k.split and jl is not None and jl.gemm_module.FAST_LARGE and dX2.strides[1] == dt.itemsize:
            _packed_halves(jl.gemm_module, da2, view(W, (D * 4 * h, I)), dX2, k.two)  # W packed once
        else:
            k.mm(da2, view(W, (D * 4 * h, I)), dX2)  # sums both directions
        if halves is not None:
            def both(fs: tuple) -> None:
                parallel.run_two(lambda stop: fs[0](), lambda stop: fs[1](), concurrent=k.two)

            if not after:
                both(halves)
            # (dB's sums of every da are finite only if every da is: then no need to look)
            if rest is None and k.H0 is None and not (np.isfinite(db).all() or _first_step_finite(k, da2)):
                # zeros for the missing H0 times a non-finite da: again without that step
                da2[...] = _da_rows(k, da2, 0, S * nb)
                k.pk_used = False
                halves, rest = _weights_goto(jo, k, da2, X2, dW2, dR2, False)
                both(halves)
            if rest is not None:
                _weights_rest(k, da2, X2, dW2, rest)
        else:
            k.mm(da2.T, X2, dW2)
        if jl is None:
            # Column sums of da (dB): a GEMV with ones is ~2x faster than np.sum on large buffers.
            db = np.matmul(np.ones(S * nb, dt), da2) if S * nb >= 1024 else np.add.reduce(da2, axis=0)
        for d in range(D):
            if halves is None or rest is not None:
                sum_dR(k, d, _rev(k, d), steps_done=jo is not None)
            dB[d, : 4 * h] = db[d * 4 * h: (d + 1) * 4 * h]
            dB[d, 4 * h:] = db[d * 4 * h: (d + 1) * 4 * h]
    for g, r in zip(given, (dX, dW, dR)):
        if g is not r:
            g[...] = r
    return (*given, dB, dH0, dC0, dP)
