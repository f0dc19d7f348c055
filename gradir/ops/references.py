"""Float64 references of the ops whose arithmetic is not a ``FORMULA``: what ``Op.reference`` of those
ops computes, and what the conformance suite (``tests/conformance``) holds every kernel to.

Deliberately plain: written straight from each op's definition (docs/ops.md), one row or one step
at a time where that is clearer, sharing no code with ``gradir.backends.cpu.kernels``.  Slow, and only for small
shapes.  An element-wise op needs none of this: its reference is its ``FORMULA`` in float64.
"""

from __future__ import annotations

import math
from typing import Optional, Sequence

import numpy as np

__all__ = ["softmax", "log_softmax", "softmax_grad", "log_softmax_grad", "sum_to", "sce_loss", "sce_grad",
           "lstm_cell", "lstm_cell_grads", "lstm_training", "lstm_grad", "gru_training", "gru_grad",
           "gru_cell", "gru_cell_grads", "f64"]


def f64(a: Optional[np.ndarray]) -> Optional[np.ndarray]:
    """``a`` as float64 (``None`` stays ``None``; integer operands are read as numbers)."""
    return None if a is None else np.asarray(a, np.float64)


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


# -- softmax family ----------------------------------------------------------------------------------
def _flat(x: np.ndarray, axis: int, flattened: bool) -> tuple[np.ndarray, tuple]:
    """``x`` as [outer, inner] with ``inner`` the axes summed over: every axis from ``axis`` on
    (``flattened``, the pre-opset-13 semantics) or ``axis`` alone (moved last)."""
    axis %= max(x.ndim, 1)
    if flattened:
        return x.reshape(int(np.prod(x.shape[:axis], dtype=np.int64)), -1), x.shape
    moved = np.moveaxis(x, axis, -1)
    return moved.reshape(-1, x.shape[axis]), moved.shape


def _unflat(y: np.ndarray, x: np.ndarray, axis: int, flattened: bool, moved_shape: tuple) -> np.ndarray:
    if flattened:
        return y.reshape(x.shape)
    return np.moveaxis(y.reshape(moved_shape), -1, axis % max(x.ndim, 1))


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """exp(x) / sum(exp(x)) over ``axis`` (opset 13), shifted by the maximum."""
    x = f64(x)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def log_softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    x = f64(x)
    m = x.max(axis=axis, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=axis, keepdims=True))


def softmax_grad(dy: np.ndarray, y: np.ndarray, axis: int, flattened: bool) -> np.ndarray:
    """dX = Y * (dY - sum(Y * dY)), the sum over ``axis`` (or every axis from it on)."""
    dy, y = f64(dy), f64(y)
    d2, shape = _flat(dy, axis, flattened)
    y2, _ = _flat(y, axis, flattened)
    return _unflat(y2 * (d2 - (y2 * d2).sum(axis=1, keepdims=True)), dy, axis, flattened, shape)


def log_softmax_grad(dy: np.ndarray, y: np.ndarray, axis: int, flattened: bool) -> np.ndarray:
    """dX = dY - exp(Y) * sum(dY), the sum over ``axis`` (or every axis from it on)."""
    dy, y = f64(dy), f64(y)
    d2, shape = _flat(dy, axis, flattened)
    y2, _ = _flat(y, axis, flattened)
    return _unflat(d2 - np.exp(y2) * d2.sum(axis=1, keepdims=True), dy, axis, flattened, shape)


# -- shape helpers -----------------------------------------------------------------------------------
def sum_to(x: np.ndarray, shape: Sequence[int]) -> np.ndarray:
    """``x`` summed down to ``shape`` (undoing NumPy broadcasting)."""
    x = f64(x)
    lead = x.ndim - len(shape)
    x = x.sum(axis=tuple(range(lead))) if lead else x
    axes = tuple(k for k, d in enumerate(shape) if d == 1 and x.shape[k] != 1)
    return x.sum(axis=axes, keepdims=True) if axes else x.copy()


# -- losses (ONNX SoftmaxCrossEntropyLoss, ORT's gradient) ----------------------------------------------
def sce_loss(x: np.ndarray, labels: np.ndarray, weights: Optional[np.ndarray] = None, reduction: str = "mean",
             ignore_index: Optional[int] = None) -> tuple[np.ndarray, np.ndarray]:
    """ONNX SoftmaxCrossEntropyLoss (opset 13 function body): log_softmax over axis 1, NLL, reduction."""
    x = f64(x)
    n, c = x.shape[:2]
    xs = x.reshape(n, c, -1)
    lab = np.asarray(labels).reshape(n, -1)
    lp = np.empty_like(xs)
    loss = np.zeros(lab.shape)
    wsum = 0.0
    for i in range(n):
        for d in range(xs.shape[2]):
            col = xs[i, :, d]
            m = max(col)
            lse = m + math.log(sum(math.exp(v - m) for v in col))
            lp[i, :, d] = col - lse
            k = int(lab[i, d])
            if ignore_index is not None and k == ignore_index:
                continue
            w = 1.0 if weights is None else float(weights[k])
            loss[i, d] = -lp[i, k, d] * w
            wsum += w
    if reduction == "none":
        out = loss.reshape(np.shape(labels))
    elif reduction == "sum":
        out = loss.sum()
    elif weights is None and ignore_index is None:
        out = loss.sum() / loss.size
    else:
        out = loss.sum() / wsum if wsum != 0 else (math.nan if loss.sum() == 0 else math.copysign(math.inf, loss.sum()))
    return np.asarray(out, np.float64), lp.reshape(x.shape)


def sce_grad(dy: np.ndarray, log_prob: np.ndarray, labels: np.ndarray, weights: Optional[np.ndarray] = None,
             reduction: str = "mean", ignore_index: Optional[int] = None) -> np.ndarray:
    """ORT's CPU SoftmaxCrossEntropyLossGrad loop (softmax_cross_entropy_loss.cc), in float64."""
    ii = -1 if ignore_index is None else ignore_index
    lp = f64(log_prob)
    n, c = lp.shape[:2]
    lps = lp.reshape(n, c, -1)
    lab = np.asarray(labels).reshape(n, -1)
    out = np.zeros_like(lps)
    if reduction == "none":
        scale = f64(dy).reshape(n, -1)
    else:
        s = float(dy)
        if reduction == "mean":
            if weights is None:
                total = float(np.sum(lab != ii))
            else:
                total = float(sum(weights[k] for k in lab.reshape(-1) if k != ii))
            if total != 0:
                s = s / total
        scale = np.full(lab.shape, s)
    for i in range(n):
        for d in range(lab.shape[1]):
            k = int(lab[i, d])
            if k == ii:
                continue
            w = (1.0 if weights is None else float(weights[k])) * scale[i, d]
            for j in range(c):
                out[i, j, d] = (math.exp(lps[i, j, d]) - (k == j)) * w
    return out.reshape(lp.shape)


# -- LSTM ----------------------------------------------------------------------------------------------
def lstm_cell(X, H, C, W_ih, W_hh, Bias, hidden_size: int) -> tuple[np.ndarray, np.ndarray]:
    """PyTorch LSTMCell (gates i, f, g, o), one batch row at a time; returns (H', C')."""
    X, H, C, W_ih, W_hh, Bias = (f64(a) for a in (X, H, C, W_ih, W_hh, Bias))
    n = hidden_size
    H_next = np.zeros((X.shape[0], n))
    C_next = np.zeros((X.shape[0], n))
    for b in range(X.shape[0]):
        a = W_ih @ X[b] + W_hh @ H[b] + Bias
        i, f, g, o = sigmoid(a[0:n]), sigmoid(a[n:2 * n]), np.tanh(a[2 * n:3 * n]), sigmoid(a[3 * n:4 * n])
        C_next[b] = f * C[b] + i * g
        H_next[b] = o * np.tanh(C_next[b])
    return H_next, C_next


def lstm_cell_grads(dH, dC, X, H, C, W_ih, W_hh, Bias, hidden_size: int) -> list[np.ndarray]:
    """The vector-Jacobian products of ``lstm_cell`` with (dH, dC): [dX, dH, dC, dW_ih, dW_hh, dBias]."""
    X, H, C, W_ih, W_hh, Bias, dH = (f64(a) for a in (X, H, C, W_ih, W_hh, Bias, dH))
    dC = np.zeros_like(C) if dC is None else f64(dC)
    n = hidden_size
    out = [np.zeros_like(X), np.zeros_like(H), np.zeros_like(C), np.zeros_like(W_ih), np.zeros_like(W_hh),
           np.zeros_like(Bias)]
    for b in range(X.shape[0]):
        a = W_ih @ X[b] + W_hh @ H[b] + Bias
        i, f, g, o = sigmoid(a[0:n]), sigmoid(a[n:2 * n]), np.tanh(a[2 * n:3 * n]), sigmoid(a[3 * n:4 * n])
        c = f * C[b] + i * g
        tc = np.tanh(c)
        dc = dC[b] + dH[b] * o * (1 - tc * tc)
        da = np.concatenate([dc * g * i * (1 - i), dc * C[b] * f * (1 - f), dc * i * (1 - g * g),
                             dH[b] * tc * o * (1 - o)])
        out[0][b] = W_ih.T @ da
        out[1][b] = W_hh.T @ da
        out[2][b] = dc * f
        out[3] += np.outer(da, X[b])
        out[4] += np.outer(da, H[b])
        out[5] += da
    return out


def _steps(direction: str, d: int, length: int) -> range:
    return range(length - 1, -1, -1) if direction == "reverse" or d == 1 else range(length)


def lstm_training(X, W, R, B=None, SL=None, H0=None, C0=None, P=None, *, hidden_size: int,
                  direction: str = "forward") -> tuple[np.ndarray, ...]:
    """ONNX LSTM forward (gates i, o, f, c) with ORT's extra outputs, one row and step at a time.

    Returns (HAll [S,D,B,H], HFinal [D,B,H], CFinal [D,B,H], CAll [S,D,B,H], iofc [S,D,B,4H]); steps past
    a row's sequence length are zero."""
    X = f64(X)
    S, nb, _ = X.shape
    n = hidden_size
    D = 2 if direction == "bidirectional" else 1
    HAll, CAll = np.zeros((S, D, nb, n)), np.zeros((S, D, nb, n))
    iofc = np.zeros((S, D, nb, 4 * n))
    HFinal, CFinal = np.zeros((D, nb, n)), np.zeros((D, nb, n))
    for d in range(D):
        Wd, Rd = f64(W[d]), f64(R[d])
        wb = np.zeros(4 * n) if B is None else f64(B[d][:4 * n])
        rb = np.zeros(4 * n) if B is None else f64(B[d][4 * n:])
        p = np.zeros(3 * n) if P is None else f64(P[d])
        p_i, p_o, p_f = p[0:n], p[n:2 * n], p[2 * n:3 * n]
        for b in range(nb):
            length = S if SL is None else int(SL[b])
            h = np.zeros(n) if H0 is None else f64(H0[d][b])
            c = np.zeros(n) if C0 is None else f64(C0[d][b])
            for t in _steps(direction, d, length):
                a = Wd @ X[t, b] + Rd @ h + wb + rb
                i = sigmoid(a[0:n] + p_i * c)
                f = sigmoid(a[2 * n:3 * n] + p_f * c)
                ct = np.tanh(a[3 * n:4 * n])
                c = f * c + i * ct
                o = sigmoid(a[n:2 * n] + p_o * c)
                h = o * np.tanh(c)
                HAll[t, d, b], CAll[t, d, b] = h, c
                iofc[t, d, b] = np.concatenate([i, o, f, ct])
            HFinal[d, b], CFinal[d, b] = h, c
    return HAll, HFinal, CFinal, CAll, iofc


def lstm_grad(X, W, R, SL, H0, C0, HAll, CAll, iofc, dHAll, dHFinal, dCFinal, P, *, hidden_size: int,
              direction: str = "forward") -> tuple[np.ndarray, ...]:
    """Backpropagation through time of ``lstm_training`` from its saved HAll, CAll and iofc (ORT's
    LSTMGrad): (dX, dW, dR, dB, dH0, dC0, dP).  Written from the forward equations, step by step."""
    X, W, R = f64(X), f64(W), f64(R)
    HAll, CAll, iofc = f64(HAll), f64(CAll), f64(iofc)
    S, nb, _ = X.shape
    D, n = W.shape[0], hidden_size
    dX, dW, dR = np.zeros_like(X), np.zeros_like(W), np.zeros_like(R)
    dB, dH0, dC0, dP = np.zeros((D, 8 * n)), np.zeros((D, nb, n)), np.zeros((D, nb, n)), np.zeros((D, 3 * n))
    for d in range(D):
        p = np.zeros(3 * n) if P is None else f64(P[d])
        p_i, p_o, p_f = p[0:n], p[n:2 * n], p[2 * n:3 * n]
        for b in range(nb):
            length = S if SL is None else int(SL[b])
            order = list(_steps(direction, d, length))
            h0 = np.zeros(n) if H0 is None else f64(H0[d][b])
            c0 = np.zeros(n) if C0 is None else f64(C0[d][b])
            dh_next = np.zeros(n) if dHFinal is None else f64(dHFinal[d][b]).copy()
            dc_next = np.zeros(n) if dCFinal is None else f64(dCFinal[d][b]).copy()
            for k in range(len(order) - 1, -1, -1):
                t = order[k]
                h_prev = h0 if k == 0 else HAll[order[k - 1], d, b]
                c_prev = c0 if k == 0 else CAll[order[k - 1], d, b]
                i, o, f, ct = (iofc[t, d, b, j * n:(j + 1) * n] for j in range(4))
                c = CAll[t, d, b]
                dh = dh_next + (0 if dHAll is None else f64(dHAll[t, d, b]))
                tc = np.tanh(c)
                dzo = dh * tc * o * (1 - o)
                dc = dc_next + dh * o * (1 - tc * tc) + dzo * p_o
                dzi = dc * ct * i * (1 - i)
                dzf = dc * c_prev * f * (1 - f)
                dzc = dc * i * (1 - ct * ct)
                da = np.concatenate([dzi, dzo, dzf, dzc])
                dW[d] += np.outer(da, X[t, b])
                dR[d] += np.outer(da, h_prev)
                dB[d, :4 * n] += da
                dP[d] += np.concatenate([dzi * c_prev, dzo * c, dzf * c_prev])
                dX[t, b] += W[d].T @ da
                dh_next = R[d].T @ da
                dc_next = dc * f + dzi * p_i + dzf * p_f
            dH0[d, b], dC0[d, b] = dh_next, dc_next
    dB[:, 4 * n:] = dB[:, :4 * n]
    return dX, dW, dR, dB, dH0, dC0, dP


# -- GRU -----------------------------------------------------------------------------------------------
def _gru_parts(W, R, B, d: int, n: int) -> tuple:
    Wd, Rd = f64(W[d]), f64(R[d])
    wb = np.zeros(3 * n) if B is None else f64(B[d][:3 * n])
    rb = np.zeros(3 * n) if B is None else f64(B[d][3 * n:])
    return Wd, Rd, wb, rb


def _clip(a: np.ndarray, clip: Optional[float]) -> np.ndarray:
    return a if clip is None else np.clip(a, -clip, clip)


def _clip_passes(a: np.ndarray, clip: Optional[float]) -> np.ndarray:
    """The derivative of ``_clip`` at ``a``: 1 within ``[-clip, clip]``, 0 where it clipped."""
    return np.ones_like(a) if clip is None else (np.abs(a) <= clip).astype(a.dtype)


def _gru_step(Wd, Rd, wb, rb, x, h, n: int, lbr: int, clip: Optional[float]) -> tuple:
    """One step of one row: the pre-activations (a_z, a_r, a_h, after any reset product, before the clip),
    the gates z, r, h̃, and ``R_h·h + Rb_h`` (what the reset gate multiplies with ``linear_before_reset=1``)."""
    ax = Wd @ x + wb
    a_z = ax[:n] + Rd[:n] @ h + rb[:n]
    a_r = ax[n:2 * n] + Rd[n:2 * n] @ h + rb[n:2 * n]
    z, r = sigmoid(_clip(a_z, clip)), sigmoid(_clip(a_r, clip))
    rh = Rd[2 * n:] @ h + rb[2 * n:]
    a_h = ax[2 * n:] + (r * rh if lbr else Rd[2 * n:] @ (r * h) + rb[2 * n:])
    return (a_z, a_r, a_h), (z, r, np.tanh(_clip(a_h, clip))), rh


def gru_training(X, W, R, B=None, SL=None, H0=None, *, hidden_size: int, direction: str = "forward",
                 linear_before_reset: int = 0, clip: Optional[float] = None) -> tuple[np.ndarray, ...]:
    """ONNX GRU forward (gates z, r, h) with ORT's extra output, one row and step at a time; ``clip`` clips
    each gate's pre-activation to ``[-clip, clip]`` before its activation (ONNX).

    Returns (HAll [S,D,B,H], HFinal [D,B,H], ZRH [S,D,B,3H], the post-activation z, r, h̃); steps past a
    row's sequence length are zero."""
    X = f64(X)
    S, nb, _ = X.shape
    n = hidden_size
    D = 2 if direction == "bidirectional" else 1
    HAll, ZRH, HFinal = np.zeros((S, D, nb, n)), np.zeros((S, D, nb, 3 * n)), np.zeros((D, nb, n))
    for d in range(D):
        Wd, Rd, wb, rb = _gru_parts(W, R, B, d, n)
        for b in range(nb):
            length = S if SL is None else int(SL[b])
            h = np.zeros(n) if H0 is None else f64(H0[d][b])
            for t in _steps(direction, d, length):
                _, (z, r, ht), _ = _gru_step(Wd, Rd, wb, rb, X[t, b], h, n, linear_before_reset, clip)
                h = (1 - z) * ht + z * h
                HAll[t, d, b], ZRH[t, d, b] = h, np.concatenate([z, r, ht])
            HFinal[d, b] = h
    return HAll, HFinal, ZRH


def gru_grad(X, W, R, B, SL, H0, HAll, ZRH, dHAll, dHFinal, *, hidden_size: int, direction: str = "forward",
             linear_before_reset: int = 0, clip: Optional[float] = None) -> tuple[np.ndarray, ...]:
    """Backpropagation through time of ``gru_training`` from its saved HAll and ZRH (ORT's GRUGrad):
    (dX, dW, dR, dB, dH0).  Written from the forward equations, step by step; with ``clip`` the
    pre-activations are recomputed (from X, W, R, B and the saved H_{t-1}) to know where the gradient stops."""
    X, HAll, ZRH = f64(X), f64(HAll), f64(ZRH)
    S, nb, _ = X.shape
    D, n = W.shape[0], hidden_size
    dX, dW, dR = np.zeros_like(X), np.zeros(W.shape), np.zeros(R.shape)
    dB, dH0 = np.zeros((D, 6 * n)), np.zeros((D, nb, n))
    for d in range(D):
        Wd, Rd, wb, rb = _gru_parts(W, R, B, d, n)
        Rz, Rr, Rh = Rd[:n], Rd[n:2 * n], Rd[2 * n:]
        for b in range(nb):
            length = S if SL is None else int(SL[b])
            order = list(_steps(direction, d, length))
            h0 = np.zeros(n) if H0 is None else f64(H0[d][b])
            dh = np.zeros(n) if dHFinal is None else f64(dHFinal[d][b]).copy()
            for k in range(len(order) - 1, -1, -1):
                t = order[k]
                hp = h0 if k == 0 else HAll[order[k - 1], d, b]
                z, r, ht = (ZRH[t, d, b, j * n:(j + 1) * n] for j in range(3))
                if dHAll is not None:
                    dh = dh + f64(dHAll[t, d, b])
                (a_z, a_r, a_h), _, rh = _gru_step(Wd, Rd, wb, rb, X[t, b], hp, n, linear_before_reset, clip)
                da_z = dh * (hp - ht) * z * (1 - z) * _clip_passes(a_z, clip)
                da_h = dh * (1 - z) * (1 - ht * ht) * _clip_passes(a_h, clip)
                if linear_before_reset:
                    dr = da_h * rh
                    dah_r = da_h * r  # the gradient of H·R_hᵀ + Rb_h
                    dR[d, 2 * n:] += np.outer(dah_r, hp)
                    dB[d, 5 * n:] += dah_r
                    dhp_h = Rh.T @ dah_r
                else:
                    g = Rh.T @ da_h  # the gradient of r ⊙ H
                    dr = g * hp
                    dR[d, 2 * n:] += np.outer(da_h, r * hp)
                    dB[d, 5 * n:] += da_h
                    dhp_h = g * r
                da_r = dr * r * (1 - r) * _clip_passes(a_r, clip)
                da = np.concatenate([da_z, da_r, da_h])
                dW[d] += np.outer(da, X[t, b])
                dR[d, :n] += np.outer(da_z, hp)
                dR[d, n:2 * n] += np.outer(da_r, hp)
                dB[d, :3 * n] += da
                dB[d, 3 * n:5 * n] += da[:2 * n]
                dX[t, b] += Wd.T @ da
                dh = dh * z + Rz.T @ da_z + Rr.T @ da_r + dhp_h
            dH0[d, b] = dh
    return dX, dW, dR, dB, dH0


def gru_cell(X, H, W_ih, W_hh, B_ih, B_hh, hidden_size: int) -> np.ndarray:
    """PyTorch GRUCell (gates r, z, n; the reset gate multiplies ``W_hn·h + b_hn``), one batch row at a time;
    returns H'."""
    X, H, W_ih, W_hh, B_ih, B_hh = (f64(a) for a in (X, H, W_ih, W_hh, B_ih, B_hh))
    n = hidden_size
    H_next = np.zeros((X.shape[0], n))
    for b in range(X.shape[0]):
        gi, gh = W_ih @ X[b] + B_ih, W_hh @ H[b] + B_hh
        r = sigmoid(gi[:n] + gh[:n])
        z = sigmoid(gi[n:2 * n] + gh[n:2 * n])
        c = np.tanh(gi[2 * n:] + r * gh[2 * n:])
        H_next[b] = (1 - z) * c + z * H[b]
    return H_next


def gru_cell_grads(dH, X, H, W_ih, W_hh, B_ih, B_hh, hidden_size: int) -> list[np.ndarray]:
    """The vector-Jacobian products of ``gru_cell`` with dH: [dX, dH, dW_ih, dW_hh, dB_ih, dB_hh]."""
    dH, X, H, W_ih, W_hh, B_ih, B_hh = (f64(a) for a in (dH, X, H, W_ih, W_hh, B_ih, B_hh))
    n = hidden_size
    out = [np.zeros_like(X), np.zeros_like(H), np.zeros_like(W_ih), np.zeros_like(W_hh), np.zeros_like(B_ih),
           np.zeros_like(B_hh)]
    for b in range(X.shape[0]):
        gi, gh = W_ih @ X[b] + B_ih, W_hh @ H[b] + B_hh
        r = sigmoid(gi[:n] + gh[:n])
        z = sigmoid(gi[n:2 * n] + gh[n:2 * n])
        c = np.tanh(gi[2 * n:] + r * gh[2 * n:])
        da_n = dH[b] * (1 - z) * (1 - c * c)
        da_z = dH[b] * (H[b] - c) * z * (1 - z)
        da_r = da_n * gh[2 * n:] * r * (1 - r)
        d_gi = np.concatenate([da_r, da_z, da_n])
        d_gh = np.concatenate([da_r, da_z, da_n * r])
        out[0][b] = W_ih.T @ d_gi
        out[1][b] = W_hh.T @ d_gh + dH[b] * z
        out[2] += np.outer(d_gi, X[b])
        out[3] += np.outer(d_gh, H[b])
        out[4] += d_gi
        out[5] += d_gh
    return out
