"""NumPy kernels for ORT's GRU sequence ops (gate order z, r, h): ``GRUTraining`` and ``GRUGrad``.

Semantics are in docs/ops.md, GRU.  Float32 and Float64; results keep the input dtype.  Forward
direction (the ops refuse the others for now), both ``linear_before_reset`` values, ``initial_h`` and
sequence lengths.

The forward computes ``X·Wᵀ`` (plus the biases that do not meet the reset gate) for every step as one
GEMM straight into ``ZRH``; each step then does one GEMM ``H_{t-1}·R_{zr}ᵀ`` (all of ``R`` with
``linear_before_reset=1``) and a few ufuncs.  Sigmoids are ``σ(a) = ½·tanh(a/2) + ½``.  The backward keeps
every step's gate gradient in one ``[S, B, 3H]`` buffer and does ``dX``, ``dW``, ``dR`` and ``dB`` as GEMMs
and sums over all steps afterwards; its step loop does the ``dH`` recurrence (with
``linear_before_reset=1`` one more GEMM per step recomputes ``H_{t-1}·R_hᵀ``, which ``ZRH`` does not keep,
as ORT does).  A row past its sequence length takes no part in a step: its ``H`` (forward) and ``dH``
(backward) pass through unchanged, its ``HAll``/``ZRH`` entries are zero, its ``dHAll`` entries ignored.

Contract for ``GRUGrad``: ``HAll`` and ``ZRH`` are what ``GRUTraining`` returned for the same operands, in
particular zero at steps ``t >= SL[b]``.  Padded entries of ``X`` and ``dHAll`` must be finite.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ....ops.gru import GRUGradOp, GRUTrainingOp
from .lstm.common import check_dtype, expect, result
from .registry import kernel

__all__ = ["gru_training", "gru_grad"]


def _sigmoid(a: np.ndarray, out: np.ndarray) -> np.ndarray:
    """σ(a) = ½·tanh(a/2) + ½ into ``out`` (no overflow for any a)."""
    np.multiply(a, 0.5, out=out)
    np.tanh(out, out=out)
    out *= 0.5
    out += 0.5
    return out


def _check(op: str, X: np.ndarray, W: np.ndarray, R: np.ndarray, B: Any, SL: Any, H0: Any, hidden_size: int,
           direction: str) -> tuple[int, int, int, int]:
    if direction != "forward":
        raise ValueError(f'{op}: direction="{direction}" is not supported yet; only "forward" is')
    S, nb, I = X.shape
    n = hidden_size
    expect(op, ("W", W, (1, 3 * n, I)), ("R", R, (1, 3 * n, n)), ("B", B, (1, 6 * n)), ("SL", SL, (nb,)),
           ("H0", H0, (1, nb, n)))
    return S, nb, I, n


def _masks(SL: Any, S: int, nb: int, dt: np.dtype) -> dict[int, np.ndarray]:
    """Step t -> ``[B, 1]`` float mask of the rows that have it, for the steps some row lacks."""
    if SL is None:
        return {}
    lengths = np.asarray(SL, np.int64)
    if lengths.min(initial=S) < 0 or lengths.max(initial=0) > S:
        raise ValueError(f"sequence lengths must lie in 0..{S}, got {lengths.tolist()}")
    return {t: (lengths > t).astype(dt)[:, None] for t in range(S) if (lengths <= t).any()}


def gru_training(X: np.ndarray, W: np.ndarray, R: np.ndarray, B: np.ndarray | None = None,
                 SL: np.ndarray | None = None, H0: np.ndarray | None = None, *, hidden_size: int,
                 direction: str = "forward", activations: Any = None, clip: Any = None,
                 linear_before_reset: int = 0, out: Any = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(HAll [S,1,B,H], HFinal [1,B,H], ZRH [S,1,B,3H]) of ONNX's GRU, forward direction."""
    dt = check_dtype("GRUTraining", X, W, R, B, H0)
    S, nb, I, n = _check("GRUTraining", X, W, R, B, SL, H0, hidden_size, direction)
    HAll = result(out, 0, (S, 1, nb, n), dt)
    HFinal = result(out, 1, (1, nb, n), dt)
    ZRH = result(out, 2, (S, 1, nb, 3 * n), dt)
    Wd, Rd = W[0], R[0]
    G = ZRH.reshape(S, nb, 3 * n)  # a view: the results are C-contiguous
    np.matmul(X.reshape(S * nb, I), Wd.T, out=G.reshape(S * nb, 3 * n))
    rb_h = None
    if B is not None:
        wb, rb = B[0, :3 * n], B[0, 3 * n:]
        G[..., :2 * n] += wb[:2 * n] + rb[:2 * n]
        if linear_before_reset:
            G[..., 2 * n:] += wb[2 * n:]
            rb_h = rb[2 * n:]
        else:
            G[..., 2 * n:] += wb[2 * n:] + rb[2 * n:]
    masks = _masks(SL, S, nb, dt)
    h = np.zeros((nb, n), dt) if H0 is None else np.array(H0[0], dt)
    RzrT, RhT, RT = Rd[:2 * n].T, Rd[2 * n:].T, Rd.T
    rec = np.empty((nb, 3 * n), dt)
    tmp = np.empty((nb, n), dt)
    hn = np.empty((nb, n), dt)
    for t in range(S):
        g = G[t]
        zr, z, r, hh = g[:, :2 * n], g[:, :n], g[:, n:2 * n], g[:, 2 * n:]
        if linear_before_reset:
            np.matmul(h, RT, out=rec)
            zr += rec[:, :2 * n]
            _sigmoid(zr, zr)
            rh = rec[:, 2 * n:]
            if rb_h is not None:
                rh += rb_h
            rh *= r
            hh += rh
        else:
            np.matmul(h, RzrT, out=rec[:, :2 * n])
            zr += rec[:, :2 * n]
            _sigmoid(zr, zr)
            np.multiply(r, h, out=tmp)
            hh += np.matmul(tmp, RhT, out=rec[:, 2 * n:])
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
            HAll[t, 0] = hn * m
        else:
            HAll[t, 0] = hn
        h, hn = hn, h
    HFinal[0] = h
    return HAll, HFinal, ZRH


def gru_grad(X: np.ndarray, W: np.ndarray, R: np.ndarray, B: np.ndarray | None, SL: np.ndarray | None,
             H0: np.ndarray | None, HAll: np.ndarray, ZRH: np.ndarray, dHAll: np.ndarray | None = None,
             dHFinal: np.ndarray | None = None, *, hidden_size: int, direction: str = "forward",
             activations: Any = None, clip: Any = None, linear_before_reset: int = 0,
             out: Any = None) -> tuple[np.ndarray, ...]:
    """(dX, dW, dR, dB, dH0) of ``gru_training`` from its saved HAll and ZRH (ORT's GRUGrad)."""
    dt = check_dtype("GRUGrad", X, W, R, B, H0, HAll, ZRH, dHAll, dHFinal)
    S, nb, I, n = _check("GRUGrad", X, W, R, B, SL, H0, hidden_size, direction)
    expect("GRUGrad", ("HAll", HAll, (S, 1, nb, n)), ("ZRH", ZRH, (S, 1, nb, 3 * n)),
           ("dHAll", dHAll, (S, 1, nb, n)), ("dHFinal", dHFinal, (1, nb, n)))
    dX = result(out, 0, X.shape, dt)
    dW = result(out, 1, W.shape, dt)
    dR = result(out, 2, R.shape, dt)
    dB = result(out, 3, (1, 6 * n), dt)
    dH0 = result(out, 4, (1, nb, n), dt)
    Wd, Rd = W[0], R[0]
    Rz, Rr, Rh = Rd[:n], Rd[n:2 * n], Rd[2 * n:]
    rb_h = B[0, 5 * n:] if B is not None else None
    masks = _masks(SL, S, nb, dt)
    # H_{t-1} of every step: H0 (or zeros), then HAll[:-1]
    Hp = np.empty((S, nb, n), dt)
    Hp[0] = 0 if H0 is None else H0[0]
    Hp[1:] = HAll[:-1, 0]
    Z = ZRH[:, 0]
    DA = np.empty((S, nb, 3 * n), dt)  # every step's gate gradient (da_z, da_r, da_h)
    dh = np.zeros((nb, n), dt) if dHFinal is None else np.array(dHFinal[0], dt)
    dhn = np.empty((nb, n), dt)
    tmp = np.empty((nb, n), dt)
    rec = np.empty((nb, n), dt)
    for t in range(S - 1, -1, -1):
        z, r, hh = Z[t, :, :n], Z[t, :, n:2 * n], Z[t, :, 2 * n:]
        hp = Hp[t]
        m = masks.get(t)
        if dHAll is not None:
            dh += dHAll[t, 0] if m is None else dHAll[t, 0] * m
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
        if linear_before_reset:
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
        # dH_{t-1} = dH ⊙ z + da_z·R_z + da_r·R_r + (the h̃ path)
        np.multiply(dh, z, out=dhn)
        dhn += da_z @ Rz
        dhn += da_r @ Rr
        if linear_before_reset:
            np.multiply(da_h, r, out=tmp)
            dhn += tmp @ Rh
        else:
            np.multiply(rec, r, out=tmp)
            dhn += tmp
        if m is not None:  # rows without step t: dH passes through
            dhn *= m
            dhn += dh * (1 - m)
        dh, dhn = dhn, dh
    dH0[0] = dh
    flat = DA.reshape(S * nb, 3 * n)
    np.matmul(flat, Wd, out=dX.reshape(S * nb, I))
    np.matmul(flat.T, X.reshape(S * nb, I), out=dW[0])
    Hflat = Hp.reshape(S * nb, n)
    np.matmul(flat[:, :2 * n].T, Hflat, out=dR[0, :2 * n])
    DAh_r = DA[..., 2 * n:] * Z[..., n:2 * n]  # lbr=1: the gradient of H·R_hᵀ + Rb_h; lbr=0: of the product
    if linear_before_reset:
        np.matmul(DAh_r.reshape(S * nb, n).T, Hflat, out=dR[0, 2 * n:])
    else:
        np.matmul(flat[:, 2 * n:].T, (Hp * Z[..., n:2 * n]).reshape(S * nb, n), out=dR[0, 2 * n:])
    dB[0, :3 * n] = flat.sum(axis=0)
    dB[0, 3 * n:5 * n] = dB[0, :2 * n]
    dB[0, 5 * n:] = DAh_r.reshape(S * nb, n).sum(axis=0) if linear_before_reset else dB[0, 2 * n:3 * n]
    return dX, dW, dR, dB, dH0


# Registered here: the kernels take the whole sequence (BLAS for the products).
kernel(GRUTrainingOp, blas=True)(gru_training)
kernel(GRUGradOp, blas=True)(gru_grad)
