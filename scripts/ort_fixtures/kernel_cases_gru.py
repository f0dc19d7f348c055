"""Kernel fixtures of the GRU family: ORT's ``GRUTraining`` and ``GRUGrad`` (com.microsoft) in the only configuration
ORT's CPU kernels run: forward direction, Float32, no sequence lengths, no clip.  Both ``linear_before_reset``
values, with and without ``initial_h`` and the bias, ``activations`` absent or in ORT's lower-case spelling (ORT
refuses ONNX's ``Sigmoid``, ``Tanh``).  Every node lists all six forward input slots (SL empty), as ORT's gradient
builder needs.

GRUGrad's HAll and ZRH are those of a float64 forward run on the same operands (rounded to Float32), so the
gradients are those of a real sequence; dHAll and dHFinal are random (dHFinal absent in one case).

ONNX's own ``GRU`` (ai.onnx), which gradir imports as a ``GRUTraining`` and where ORT's CPU kernel computes every
direction, sequence lengths and ``clip`` (Float32 only): ``onnxgru_*`` cases in reverse and bidirectional
direction with unsorted lengths (one of 1: ORT gives a row of length 0 a zero ``Y_h`` where gradir keeps
``initial_h``, docs/onnx.md), a clip that clips some gates, ONNX's spelling ``Sigmoid``, ``Tanh``."""

from __future__ import annotations

from typing import Any

import numpy as np
from kernel_fixtures import MS_DOMAIN, Case

_rng = np.random.default_rng(3232)
_F = np.float32


def _sigmoid(a: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-a))


def _forward(X: np.ndarray, W: np.ndarray, R: np.ndarray, B: Any, H0: Any, lbr: int) -> tuple[np.ndarray, np.ndarray]:
    """HAll [S,1,B,H] and ZRH [S,1,B,3H] of ONNX's GRU (gates z, r, h), in float64."""
    S, nb, _ = X.shape
    n = R.shape[2]
    W, R = W[0].astype(np.float64), R[0].astype(np.float64)
    wb, rb = (np.zeros(3 * n), np.zeros(3 * n)) if B is None else (B[0, :3 * n], B[0, 3 * n:])
    h = np.zeros((nb, n)) if H0 is None else H0[0].astype(np.float64)
    HAll, ZRH = np.zeros((S, 1, nb, n)), np.zeros((S, 1, nb, 3 * n))
    for t in range(S):
        ax = X[t] @ W.T + wb
        z = _sigmoid(ax[:, :n] + h @ R[:n].T + rb[:n])
        r = _sigmoid(ax[:, n:2 * n] + h @ R[n:2 * n].T + rb[n:2 * n])
        if lbr:
            ht = np.tanh(ax[:, 2 * n:] + r * (h @ R[2 * n:].T + rb[2 * n:]))
        else:
            ht = np.tanh(ax[:, 2 * n:] + (r * h) @ R[2 * n:].T + rb[2 * n:])
        h = (1 - z) * ht + z * h
        HAll[t, 0], ZRH[t, 0] = h, np.concatenate([z, r, ht], axis=1)
    return HAll, ZRH


def _cases(tag: str, S: int, nb: int, I: int, n: int, lbr: int, bias: bool = True, h0: bool = True,
           acts: bool = False, dhfinal: bool = True) -> list[Case]:
    k = 1 / np.sqrt(n)  # PyTorch's initialization: the gates do not saturate
    X = _rng.standard_normal((S, nb, I)).astype(_F)
    W = _rng.uniform(-k, k, (1, 3 * n, I)).astype(_F)
    R = _rng.uniform(-k, k, (1, 3 * n, n)).astype(_F)
    B = _rng.uniform(-k, k, (1, 6 * n)).astype(_F) if bias else None
    H0 = (0.5 * _rng.standard_normal((1, nb, n))).astype(_F) if h0 else None
    attrs: dict[str, Any] = {"hidden_size": n, "linear_before_reset": lbr}
    if acts:
        attrs["activations"] = ["sigmoid", "tanh"]
    fwd = {"X": X, "W": W, "R": R, "B": B, "SL": None, "initial_h": H0}
    HAll, ZRH = (a.astype(_F) for a in _forward(X, W, R, B, H0, lbr))
    dHAll = _rng.standard_normal(HAll.shape).astype(_F)
    dHFinal = _rng.standard_normal((1, nb, n)).astype(_F) if dhfinal else None
    grad = {**fwd, "HAll": HAll, "ZRH": ZRH, "dHAll": dHAll, "dHFinal": dHFinal}
    return [Case(f"grutraining_{tag}", "GRUTraining", MS_DOMAIN, fwd, ["HAll", "HFinal", "ZRH"], attrs),
            Case(f"grugrad_{tag}", "GRUGrad", MS_DOMAIN, grad, ["dX", "dW", "dR", "dB", "dH0"], attrs)]


def _onnx_gru(tag: str, direction: str, lbr: int, clip: Any, acts: bool, S: int = 5, nb: int = 4, I: int = 3,
              n: int = 4) -> Case:
    D = 2 if direction == "bidirectional" else 1
    inputs = {"X": _rng.standard_normal((S, nb, I)).astype(_F),
              "W": _rng.uniform(-1, 1, (D, 3 * n, I)).astype(_F), "R": _rng.uniform(-1, 1, (D, 3 * n, n)).astype(_F),
              "B": _rng.uniform(-1, 1, (D, 6 * n)).astype(_F), "sequence_lens": np.array([5, 2, 1, 4], np.int32)[:nb],
              "initial_h": (0.5 * _rng.standard_normal((D, nb, n))).astype(_F)}
    attrs: dict[str, Any] = {"hidden_size": n, "linear_before_reset": lbr, "direction": direction}
    if clip is not None:
        attrs["clip"] = clip
    if acts:
        attrs["activations"] = ["Sigmoid", "Tanh"] * D
    return Case(f"onnxgru_{tag}", "GRU", "", inputs, ["Y", "Y_h"], attrs)


CASES = [
    *_cases("lbr0", 4, 3, 5, 6, 0),
    *_cases("lbr1", 4, 3, 5, 6, 1),
    *_cases("lbr0_no_h0", 3, 2, 4, 3, 0, h0=False),
    *_cases("lbr1_no_h0", 3, 2, 4, 3, 1, h0=False),
    *_cases("lbr1_no_bias_acts", 5, 2, 3, 4, 1, bias=False, acts=True, dhfinal=False),
    *_cases("lbr0_no_bias_acts", 5, 2, 3, 4, 0, bias=False, h0=False, acts=True),
    *_cases("lbr1_long", 16, 4, 8, 8, 1),
    _onnx_gru("reverse_lbr1_clip", "reverse", 1, 0.8, True),
    _onnx_gru("reverse_lbr0", "reverse", 0, None, False),
    _onnx_gru("bidirectional_lbr1", "bidirectional", 1, None, True),
    _onnx_gru("bidirectional_lbr0_clip", "bidirectional", 0, 0.8, False),
    _onnx_gru("forward_lbr1_clip", "forward", 1, 0.8, False),
]
