"""Independent, deliberately plain float64 references for the LSTM ops (docs/ops.md, LSTM).

One batch row and one step at a time, written straight from the equations; shares no
code with ``gradir.kernels.lstm``.  Slow, and only for tests on small shapes.
"""

from __future__ import annotations

import numpy as np


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def lstm_cell_ref(X, H, C, W_ih, W_hh, Bias, hidden_size):
    """PyTorch LSTMCell (gates i, f, g, o); returns (H', C') in float64."""
    X, H, C, W_ih, W_hh, Bias = (np.asarray(a, np.float64) for a in (X, H, C, W_ih, W_hh, Bias))
    n = hidden_size
    H_next = np.zeros((X.shape[0], n))
    C_next = np.zeros((X.shape[0], n))
    for b in range(X.shape[0]):
        a = W_ih @ X[b] + W_hh @ H[b] + Bias
        i = sigmoid(a[0:n])
        f = sigmoid(a[n:2 * n])
        g = np.tanh(a[2 * n:3 * n])
        o = sigmoid(a[3 * n:4 * n])
        C_next[b] = f * C[b] + i * g
        H_next[b] = o * np.tanh(C_next[b])
    return H_next, C_next


def lstm_training_ref(X, W, R, B=None, SL=None, H0=None, C0=None, P=None, *, hidden_size,
                      direction="forward"):
    """ONNX LSTM forward (gates i, o, f, c) with ORT's extra outputs, in float64.

    Returns (HAll [S,D,B,H], HFinal [D,B,H], CFinal [D,B,H], CAll [S,D,B,H], iofc [S,D,B,4H]).
    """
    X = np.asarray(X, np.float64)
    S, nb, _ = X.shape
    n = hidden_size
    D = 2 if direction == "bidirectional" else 1
    HAll = np.zeros((S, D, nb, n))
    CAll = np.zeros((S, D, nb, n))
    iofc = np.zeros((S, D, nb, 4 * n))
    HFinal = np.zeros((D, nb, n))
    CFinal = np.zeros((D, nb, n))
    for d in range(D):
        Wd = np.asarray(W[d], np.float64)
        Rd = np.asarray(R[d], np.float64)
        if B is None:
            wb = rb = np.zeros(4 * n)
        else:
            wb = np.asarray(B[d][:4 * n], np.float64)
            rb = np.asarray(B[d][4 * n:], np.float64)
        if P is None:
            p_i = p_o = p_f = np.zeros(n)
        else:
            p = np.asarray(P[d], np.float64)
            p_i, p_o, p_f = p[0:n], p[n:2 * n], p[2 * n:3 * n]
        reverse = direction == "reverse" or d == 1
        for b in range(nb):
            length = S if SL is None else int(SL[b])
            h = np.zeros(n) if H0 is None else np.asarray(H0[d][b], np.float64)
            c = np.zeros(n) if C0 is None else np.asarray(C0[d][b], np.float64)
            order = range(length - 1, -1, -1) if reverse else range(length)
            for t in order:
                a = Wd @ X[t, b] + Rd @ h + wb + rb
                a_i, a_o, a_f, a_c = a[0:n], a[n:2 * n], a[2 * n:3 * n], a[3 * n:4 * n]
                i = sigmoid(a_i + p_i * c)
                f = sigmoid(a_f + p_f * c)
                c_tilde = np.tanh(a_c)
                c = f * c + i * c_tilde
                o = sigmoid(a_o + p_o * c)
                h = o * np.tanh(c)
                HAll[t, d, b] = h
                CAll[t, d, b] = c
                iofc[t, d, b] = np.concatenate([i, o, f, c_tilde])
            HFinal[d, b] = h
            CFinal[d, b] = c
    return HAll, HFinal, CFinal, CAll, iofc


def lstm_loss(outputs, dHAll: np.ndarray | None, dHFinal: np.ndarray | None,
              dCFinal: np.ndarray | None) -> float:
    """Σ dHAll·HAll + dHFinal·HFinal + dCFinal·CFinal (absent weights count as zero)."""
    HAll, HFinal, CFinal = outputs[0], outputs[1], outputs[2]
    total = 0.0
    for w, v in ((dHAll, HAll), (dHFinal, HFinal), (dCFinal, CFinal)):
        if w is not None:
            total += float(np.sum(np.asarray(w, np.float64) * np.asarray(v, np.float64)))
    return total
