"""NumPy kernels for ORT's GRU sequence ops (gate order z, r, h): ``GRUTraining`` and ``GRUGrad``.

Semantics are in docs/ops.md, GRU.  Float32 and Float64 (results keep the input dtype), every direction,
both ``linear_before_reset`` values, ``initial_h``, sequence lengths and ``clip``.

Split in two (docs: the shared design of issue #32): the registered kernels are WRAPPERS that check the
operands and handle the direction, and call two per-direction CORES, ``forward_core`` and ``backward_core``
(signatures below), that only ever run the forward time order.  The reverse direction is the wrapper's: it
reverses each row within its own length (a reverse row starts at ``X[SL[b]-1]``, as ONNX, ORT and PyTorch's
packed sequences do) into scratch copies, calls the core, and reverses ``HAll``/``ZRH``/``dX`` back; since
that reversal is an involution per row, the same index array does both ways.  Bidirectional is direction 0
forward and direction 1 reverse.  ``cores(dtype, clip)`` chooses the core pair (compiled cores live in
``_jit_gru.py``; the NumPy ones here are the fallback and the specification).  The wrappers call the cores
once per fixed chunk of ``T0`` steps (``gru_sweep.py``: a function of the shapes alone), carrying the state
from chunk to chunk and adding the backward's per-chunk weight gradients in a fixed order, so that the
checkpointed layer (``gru_checkpointed.py``), which recomputes whole chunks, gives the same bits.

The NumPy forward core computes ``X·Wᵀ`` (plus the biases that do not meet the reset gate) for every step as
one GEMM straight into ``ZRH``; each step then does one GEMM ``H_{t-1}·R_{zr}ᵀ`` (all of ``R`` with
``linear_before_reset=1``) and a few ufuncs.  Sigmoids are ``σ(a) = ½·tanh(a/2) + ½``.  With ``clip`` each
gate's whole pre-activation is clipped to ``[-clip, clip]`` before its activation (ONNX).  The backward keeps
every step's gate gradient (of its chunk) in one ``[S, B, 3H]`` buffer and does ``dX``, ``dW``, ``dR`` and
``dB`` as GEMMs and sums over the chunk's steps afterwards; its step loop does the ``dH`` recurrence (with
``linear_before_reset=1`` one more GEMM per step recomputes ``H_{t-1}·R_hᵀ``, which ``ZRH`` does not keep, as
ORT does).  A row past its sequence length takes no part in a step: its ``H`` (forward) and ``dH`` (backward)
pass through unchanged, its ``HAll``/``ZRH`` entries are zero, its ``dHAll`` entries ignored.

Contract for ``GRUGrad``: ``HAll`` and ``ZRH`` are what ``GRUTraining`` returned for the same operands, in
particular zero at steps ``t >= SL[b]``.  Padded entries of ``X`` and ``dHAll`` must be finite.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ....ops.gru import GRUGradOp, GRUTrainingOp, scratch_bytes
from . import jit
from .gru_sweep import Backward, Forward, chunk_steps, chunks
from .lstm.common import check_dtype, expect, result
from .registry import kernel

__all__ = ["gru_training", "gru_grad", "forward_core", "backward_core", "cores", "check_operands", "reversal",
           "reverse_rows", "direction_parts", "lengths_of", "warm_layers"]

_ACTS = ("sigmoid", "tanh")


def _sigmoid(a: np.ndarray, out: np.ndarray) -> np.ndarray:
    """σ(a) = ½·tanh(a/2) + ½ into ``out`` (no overflow for any a)."""
    np.multiply(a, 0.5, out=out)
    np.tanh(out, out=out)
    out *= 0.5
    out += 0.5
    return out


def _masks(SL: Any, S: int, nb: int, dt: np.dtype) -> dict[int, np.ndarray]:
    """Step t -> ``[B, 1]`` float mask of the rows that have it, for the steps some row lacks."""
    if SL is None:
        return {}
    lengths = np.asarray(SL)
    return {t: (lengths > t).astype(dt)[:, None] for t in range(S) if (lengths <= t).any()}


# -- the NumPy cores (one direction, forward time order) --------------------------------------------------------
def _forward_core_np(X: np.ndarray, Wd: np.ndarray, Rd: np.ndarray, wb: np.ndarray | None, rb: np.ndarray | None,
                     SL: np.ndarray | None, h0: np.ndarray | None, lbr: int, clip: float | None, HAll: np.ndarray,
                     HFinal: np.ndarray, ZRH: np.ndarray) -> None:
    """One direction's forward: X [S,B,I], Wd [3H,I], Rd [3H,H]; writes HAll [S,B,H], HFinal [B,H], ZRH [S,B,3H]."""
    S, nb, I = X.shape
    n = Rd.shape[1]
    dt = HAll.dtype
    G = np.empty((S, nb, 3 * n), dt)  # pre-activations, then activations (ZRH may be a strided view)
    np.matmul(X.reshape(S * nb, I), Wd.T, out=G.reshape(S * nb, 3 * n))
    rb_h = None
    if wb is not None:
        G[..., :2 * n] += wb[:2 * n] + rb[:2 * n]
        if lbr:
            G[..., 2 * n:] += wb[2 * n:]
            rb_h = rb[2 * n:]
        else:
            G[..., 2 * n:] += wb[2 * n:] + rb[2 * n:]
    masks = _masks(SL, S, nb, dt)
    h = np.zeros((nb, n), dt) if h0 is None else np.array(h0, dt)
    RzrT, RhT, RT = Rd[:2 * n].T, Rd[2 * n:].T, Rd.T
    rec = np.empty((nb, 3 * n), dt)
    tmp = np.empty((nb, n), dt)
    hn = np.empty((nb, n), dt)
    for t in range(S):
        g = G[t]
        zr, z, r, hh = g[:, :2 * n], g[:, :n], g[:, n:2 * n], g[:, 2 * n:]
        if lbr:
            np.matmul(h, RT, out=rec)
            zr += rec[:, :2 * n]
            if clip is not None:
                np.clip(zr, -clip, clip, out=zr)
            _sigmoid(zr, zr)
            rh = rec[:, 2 * n:]
            if rb_h is not None:
                rh += rb_h
            rh *= r
            hh += rh
        else:
            np.matmul(h, RzrT, out=rec[:, :2 * n])
            zr += rec[:, :2 * n]
            if clip is not None:
                np.clip(zr, -clip, clip, out=zr)
            _sigmoid(zr, zr)
            np.multiply(r, h, out=tmp)
            hh += np.matmul(tmp, RhT, out=rec[:, 2 * n:])
        if clip is not None:
            np.clip(hh, -clip, clip, out=hh)
        np.tanh(hh, out=hh)
        # H_t = h̃ + z ⊙ (H_{t-1} - h̃)
        np.subtract(h, hh, out=hn)
        hn *= z
        hn += hh
        m = masks.get(t)
        if m is not None:  # rows without step t: H unchanged, nothing stashed
            g *= m
            hn *= m
            h *= 1 - m
            hn += h
            HAll[t] = hn * m
        else:
            HAll[t] = hn
        h, hn = hn, h
    HFinal[...] = h
    ZRH[...] = G


def _clip_masks(X: np.ndarray, Wd: np.ndarray, Rd: np.ndarray, wb: np.ndarray | None, rb: np.ndarray | None,
                Hp: np.ndarray, Z: np.ndarray, lbr: int, clip: float) -> np.ndarray:
    """``[S, B, 3H]``: 1 where a gate's pre-activation lies within ``[-clip, clip]`` (the clip passes the
    gradient), 0 where the forward clipped it (the gradient stops).

    ``ZRH`` holds the values AFTER the activations, which cannot say where clipping happened (σ(clip) is
    also σ of nearby unclipped values in floating point), so the pre-activations are recomputed from X, W, R,
    B, every ``H_{t-1}`` (HAll) and the reset gate (ZRH) as a few GEMMs over all steps.  The sums are taken in
    another order than the forward's, so a pre-activation within an ulp or two of ``±clip`` may be judged
    either way: there the derivative of the clip is undefined anyway."""
    S, nb, I = X.shape
    n = Rd.shape[1]
    A = (X.reshape(S * nb, I) @ Wd.T).reshape(S, nb, 3 * n)
    Hf = Hp.reshape(S * nb, n)
    A[..., :2 * n] += (Hf @ Rd[:2 * n].T).reshape(S, nb, 2 * n)
    r = Z[..., n:2 * n]
    if lbr:
        rh = (Hf @ Rd[2 * n:].T).reshape(S, nb, n)
        if rb is not None:
            rh += rb[2 * n:]
        A[..., 2 * n:] += r * rh
    else:
        A[..., 2 * n:] += ((Hp * r).reshape(S * nb, n) @ Rd[2 * n:].T).reshape(S, nb, n)
        if rb is not None:
            A[..., 2 * n:] += rb[2 * n:]
    if wb is not None:
        A += wb
        A[..., :2 * n] += rb[:2 * n]
    return (np.abs(A) <= clip).astype(X.dtype)


def _backward_core_np(X: np.ndarray, Wd: np.ndarray, Rd: np.ndarray, wb: np.ndarray | None, rb: np.ndarray | None,
                      SL: np.ndarray | None, h0: np.ndarray | None, HAll: np.ndarray, ZRH: np.ndarray,
                      dHAll: np.ndarray | None, dHFinal: np.ndarray | None, lbr: int, clip: float | None,
                      dX: np.ndarray, dW: np.ndarray, dR: np.ndarray, dB: np.ndarray, dH0: np.ndarray) -> None:
    """One direction's backward through time (forward time order): writes dX [S,B,I], dW [3H,I], dR [3H,H],
    dB [6H], dH0 [B,H]."""
    S, nb, I = X.shape
    n = Rd.shape[1]
    dt = X.dtype
    Rz, Rr, Rh = Rd[:n], Rd[n:2 * n], Rd[2 * n:]
    rb_h = rb[2 * n:] if rb is not None else None
    masks = _masks(SL, S, nb, dt)
    # H_{t-1} of every step: h0 (or zeros), then HAll[:-1]
    Hp = np.empty((S, nb, n), dt)
    Hp[:1] = 0 if h0 is None else h0  # (no step at all when S is 0)
    Hp[1:] = HAll[:-1]
    Z = ZRH
    C = None if clip is None else _clip_masks(X, Wd, Rd, wb, rb, Hp, Z, lbr, clip)
    DA = np.empty((S, nb, 3 * n), dt)  # every step's gate gradient (da_z, da_r, da_h)
    dh = np.zeros((nb, n), dt) if dHFinal is None else np.array(dHFinal, dt)
    dhn = np.empty((nb, n), dt)
    tmp = np.empty((nb, n), dt)
    rec = np.empty((nb, n), dt)
    for t in range(S - 1, -1, -1):
        z, r, hh = Z[t, :, :n], Z[t, :, n:2 * n], Z[t, :, 2 * n:]
        hp = Hp[t]
        m = masks.get(t)
        if dHAll is not None:
            dh += dHAll[t] if m is None else dHAll[t] * m
        da = DA[t]
        da_z, da_r, da_h = da[:, :n], da[:, n:2 * n], da[:, 2 * n:]
        # da_z = dH ⊙ (H_{t-1} - h̃) ⊙ z(1-z);  da_h = dH ⊙ (1-z) ⊙ (1-h̃²)
        np.subtract(1, z, out=tmp)
        np.multiply(dh, tmp, out=da_h)
        tmp *= z
        np.subtract(hp, hh, out=da_z)
        da_z *= tmp
        da_z *= dh
        np.multiply(hh, hh, out=tmp)
        np.subtract(1, tmp, out=tmp)
        da_h *= tmp
        if m is not None:
            da_z *= m
            da_h *= m
        if C is not None:
            da_z *= C[t, :, :n]
            da_h *= C[t, :, 2 * n:]
        if lbr:
            np.matmul(hp, Rh.T, out=rec)  # H_{t-1}·R_hᵀ + Rb_h, recomputed
            if rb_h is not None:
                rec += rb_h
            np.multiply(da_h, rec, out=da_r)
        else:
            np.matmul(da_h, Rh, out=rec)  # the gradient of r ⊙ H_{t-1}
            np.multiply(rec, hp, out=da_r)
        np.subtract(1, r, out=tmp)
        tmp *= r
        da_r *= tmp
        if C is not None:
            da_r *= C[t, :, n:2 * n]
        # dH_{t-1} = dH ⊙ z + da_z·R_z + da_r·R_r + (the h̃ path)
        np.multiply(dh, z, out=dhn)
        dhn += da_z @ Rz
        dhn += da_r @ Rr
        if lbr:
            np.multiply(da_h, r, out=tmp)
            dhn += tmp @ Rh
        else:
            np.multiply(rec, r, out=tmp)
            dhn += tmp
        if m is not None:  # rows without step t: dH passes through
            dhn *= m
            dhn += dh * (1 - m)
        dh, dhn = dhn, dh
    dH0[...] = dh
    flat = DA.reshape(S * nb, 3 * n)
    dX[...] = (flat @ Wd).reshape(S, nb, I)
    dW[...] = flat.T @ X.reshape(S * nb, I)
    Hflat = Hp.reshape(S * nb, n)
    dR[:2 * n] = flat[:, :2 * n].T @ Hflat
    DAh_r = DA[..., 2 * n:] * Z[..., n:2 * n]  # lbr=1: the gradient of H·R_hᵀ + Rb_h; lbr=0: of the product
    if lbr:
        dR[2 * n:] = DAh_r.reshape(S * nb, n).T @ Hflat
    else:
        dR[2 * n:] = flat[:, 2 * n:].T @ (Hp * Z[..., n:2 * n]).reshape(S * nb, n)
    dB[:3 * n] = flat.sum(axis=0)
    dB[3 * n:5 * n] = dB[:2 * n]
    dB[5 * n:] = DAh_r.reshape(S * nb, n).sum(axis=0) if lbr else dB[2 * n:3 * n]


forward_core = _forward_core_np
backward_core = _backward_core_np


def cores(dtype: np.dtype, clip: float | None) -> tuple[Callable[..., None], Callable[..., None]]:
    """The (forward, backward) core pair for ``dtype`` and ``clip``: compiled where ``_jit_gru`` has one,
    else the NumPy cores (which compute every case)."""
    jg = jit.load("gru")
    if jg is not None and jg.takes(dtype, clip):
        return jg.forward_core, jg.backward_core
    return _forward_core_np, _backward_core_np


# -- the wrappers: operands, directions, sequence lengths ------------------------------------------------------
def check_operands(op: str, X: np.ndarray, W: np.ndarray, R: np.ndarray, B: Any, SL: Any, H0: Any, hidden_size: int,
           direction: str, activations: Any, clip: Any, lbr: int) -> tuple[int, int, int, int, int]:
    if direction not in ("forward", "reverse", "bidirectional"):
        raise ValueError(f"{op}: direction must be forward, reverse or bidirectional, got {direction!r}")
    D = 2 if direction == "bidirectional" else 1
    if activations is not None and tuple(str(a).lower() for a in activations) != _ACTS * D:
        raise ValueError(f"{op}: only activations=['sigmoid', 'tanh'] (per direction) is supported, "
                         f"got {list(activations)}")
    if clip is not None and not float(clip) > 0:
        raise ValueError(f"{op}: clip must be positive, got {clip}")
    if lbr not in (0, 1):
        raise ValueError(f"{op}: linear_before_reset must be 0 or 1, got {lbr}")
    S, nb, I = X.shape
    n = hidden_size
    expect(op, ("W", W, (D, 3 * n, I)), ("R", R, (D, 3 * n, n)), ("B", B, (D, 6 * n)), ("SL", SL, (nb,)),
           ("H0", H0, (D, nb, n)))
    if SL is not None:
        lengths = np.asarray(SL)
        if lengths.min(initial=S) < 0 or lengths.max(initial=0) > S:
            raise ValueError(f"sequence lengths must lie in 0..{S}, got {lengths.tolist()}")
    return S, nb, I, n, D


def reversal(SL: Any, S: int, nb: int) -> np.ndarray:
    """``idx [S, B]``: step t of row b reversed within the row's length (``L-1-t`` for ``t < L``, else ``t``).
    An involution per row: ``a[idx, cols]`` reverses and un-reverses."""
    t = np.arange(S)[:, None]
    if SL is None:
        return np.broadcast_to(S - 1 - t, (S, nb))
    L = np.asarray(SL, np.int64)[None, :]
    return np.where(t < L, L - 1 - t, t)


def reverse_rows(a: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """``a [S, B, ...]`` with each row's valid steps reversed (a fresh C-contiguous array)."""
    return a[idx, np.arange(a.shape[1])[None, :]]


def direction_parts(W: np.ndarray, R: np.ndarray, B: Any, H0: Any, d: int, n: int) -> tuple:
    wb = None if B is None else B[d, :3 * n]
    rb = None if B is None else B[d, 3 * n:]
    return W[d], R[d], wb, rb, None if H0 is None else H0[d]


def lengths_of(SL: Any) -> np.ndarray | None:
    return None if SL is None else np.ascontiguousarray(SL, np.int64)


def gru_training(X: np.ndarray, W: np.ndarray, R: np.ndarray, B: np.ndarray | None = None,
                 SL: np.ndarray | None = None, H0: np.ndarray | None = None, *, hidden_size: int,
                 direction: str = "forward", activations: Any = None, clip: Any = None,
                 linear_before_reset: int = 0, out: Any = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(HAll [S,D,B,H], HFinal [D,B,H], ZRH [S,D,B,3H]) of ONNX's GRU, every direction."""
    dt = check_dtype("GRUTraining", X, W, R, B, H0)
    S, nb, I, n, D = check_operands("GRUTraining", X, W, R, B, SL, H0, hidden_size, direction, activations, clip,
                            linear_before_reset)
    HAll = result(out, 0, (S, D, nb, n), dt)
    HFinal = result(out, 1, (D, nb, n), dt)
    ZRH = result(out, 2, (S, D, nb, 3 * n), dt)
    c = None if clip is None else float(clip)
    fwd, _ = cores(dt, c)
    sl = lengths_of(SL)
    T0 = chunk_steps(S, nb, D, n, dt)
    X = np.ascontiguousarray(X)
    for d in range(D):
        rev = direction == "reverse" or d == 1
        idx = reversal(sl, S, nb) if rev else None
        xd = reverse_rows(X, idx) if rev else X
        hall, zrh = (np.empty((S, nb, n), dt), np.empty((S, nb, 3 * n), dt)) if rev else (HAll[:, d], ZRH[:, d])
        f = Forward(fwd, xd, direction_parts(W, R, B, H0, d, n), sl, linear_before_reset, c, T0)
        for lo, hi in chunks(0, S, T0):
            f.run(lo, hi, hall[lo:hi], zrh[lo:hi])
        HFinal[d] = f.h
        if rev:
            HAll[:, d] = reverse_rows(hall, idx)
            ZRH[:, d] = reverse_rows(zrh, idx)
    return HAll, HFinal, ZRH


def gru_grad(X: np.ndarray, W: np.ndarray, R: np.ndarray, B: np.ndarray | None, SL: np.ndarray | None,
             H0: np.ndarray | None, HAll: np.ndarray, ZRH: np.ndarray, dHAll: np.ndarray | None = None,
             dHFinal: np.ndarray | None = None, *, hidden_size: int, direction: str = "forward",
             activations: Any = None, clip: Any = None, linear_before_reset: int = 0,
             out: Any = None) -> tuple[np.ndarray, ...]:
    """(dX, dW, dR, dB, dH0) of ``gru_training`` from its saved HAll and ZRH (ORT's GRUGrad), every direction."""
    dt = check_dtype("GRUGrad", X, W, R, B, H0, HAll, ZRH, dHAll, dHFinal)
    S, nb, I, n, D = check_operands("GRUGrad", X, W, R, B, SL, H0, hidden_size, direction, activations, clip,
                            linear_before_reset)
    expect("GRUGrad", ("HAll", HAll, (S, D, nb, n)), ("ZRH", ZRH, (S, D, nb, 3 * n)),
           ("dHAll", dHAll, (S, D, nb, n)), ("dHFinal", dHFinal, (D, nb, n)))
    dX = result(out, 0, X.shape, dt)
    dW = result(out, 1, W.shape, dt)
    dR = result(out, 2, R.shape, dt)
    dB = result(out, 3, (D, 6 * n), dt)
    dH0 = result(out, 4, (D, nb, n), dt)
    c = None if clip is None else float(clip)
    _, bwd = cores(dt, c)
    sl = lengths_of(SL)
    T0 = chunk_steps(S, nb, D, n, dt)
    X = np.ascontiguousarray(X)
    dxd = np.empty((S, nb, I), dt) if D == 2 else None
    for d in range(D):
        rev = direction == "reverse" or d == 1
        idx = reversal(sl, S, nb) if rev else None
        parts = direction_parts(W, R, B, H0, d, n)
        g = Backward(bwd, reverse_rows(X, idx) if rev else X, parts, sl, None if dHFinal is None else dHFinal[d],
                     linear_before_reset, c)
        hall = reverse_rows(HAll[:, d], idx) if rev else HAll[:, d]
        zrh = reverse_rows(ZRH[:, d], idx) if rev else ZRH[:, d]
        dall = None if dHAll is None else (reverse_rows(dHAll[:, d], idx) if rev else dHAll[:, d])
        target = np.empty((S, nb, I), dt) if rev else (dX if d == 0 else dxd)
        h0 = np.zeros((nb, n), dt) if parts[4] is None else parts[4]
        for lo, hi in reversed(chunks(0, S, T0)):
            g.run(lo, hi, h0 if lo == 0 else hall[lo - 1], hall[lo:hi], zrh[lo:hi],
                  None if dall is None else dall[lo:hi], target[lo:hi])
        dW[d], dR[d], dB[d], dH0[d] = g.dW, g.dR, g.dB, g.dh
        if rev:
            (dX if d == 0 else dxd)[...] = reverse_rows(target, idx)
    if D == 2:
        dX += dxd
    return dX, dW, dR, dB, dH0


def warm_layers(dtype: Any) -> None:
    """``warm`` hook of GRUTraining and GRUGrad (see ``gradir.backends.cpu.kernels``): run both on a tiny
    layer, one direction and two (contiguous and strided per-direction results), with and without ``dHAll``,
    so numba builds or loads the compiled cores' machine code before a run needs it."""
    dt = np.dtype(dtype)
    if dt not in (np.float32, np.float64) or jit.load("gru") is None:
        return
    X = np.full((2, 1, 1), 0.5, dt)
    for direction, D in (("forward", 1), ("bidirectional", 2)):
        W, R = np.full((D, 3, 1), 0.5, dt), np.full((D, 3, 1), 0.5, dt)
        HAll, _, ZRH = gru_training(X, W, R, hidden_size=1, direction=direction)
        for dHAll in (HAll, None):
            gru_grad(X, W, R, None, None, None, HAll, ZRH, dHAll, HAll[0], hidden_size=1, direction=direction)


# Registered here: the kernels take the whole sequence (BLAS for the products).
def declared_scratch(kind: str):  # type: ignore[no-untyped-def]
    """A ``KernelInfo.scratch`` hook for the GRU kernel ``kind`` (``gradir.ops.gru.scratch_bytes``)."""
    def scratch(operands: Any, results: Any, attrs: Any) -> int:
        X, W = operands[0], operands[1]
        S, nb, I = X.shape
        D, h = W.shape[0], W.shape[1] // 3
        return scratch_bytes(kind, S, nb, I, h, D, X.dtype.itemsize, attrs.get("direction", "forward"),
                             attrs.get("segment", 1), attrs.get("checkpoints", 1), attrs.get("reuse_states", 0))
    return scratch


kernel(GRUTrainingOp, blas=True, warm=warm_layers, scratch=declared_scratch("training"))(gru_training)
kernel(GRUGradOp, blas=True, warm=warm_layers, scratch=declared_scratch("grad"))(gru_grad)
