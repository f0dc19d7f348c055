"""LSTMCell and its per-input gradients (PyTorch gate order i, f, g, o): one step of a cell,
by NumPy's ufuncs or the compiled kernels of ``_jit_lstm.py``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .....ops.lstm import GradLSTMCellInputFusedOp, GradLSTMCellInputOp, LSTMCellOp
from .. import blocked, jit
from ..registry import kernel
from . import common
from .common import check_dtype, expect, result, this_thread

__all__ = ["grad_lstm_cell_input", "grad_lstm_cell_input_fused", "lstm_cell"]


def _cell_gates(X: np.ndarray, H: np.ndarray, W_ih: np.ndarray, W_hh: np.ndarray,
                Bias: np.ndarray, hd: int) -> np.ndarray:
    """Post-activation gates ``[B, 4Hd]`` (blocks i, f, g, o) of one cell step."""
    a = blocked.matmul(X, W_ih.T)
    a += blocked.matmul(H, W_hh.T)
    a += Bias
    sig = (a[:, : 2 * hd], a[:, 3 * hd:])  # i, f | o
    for s in sig:
        s *= 0.5
    np.tanh(a, out=a)
    for s in sig:  # σ(x) = ½·tanh(x/2) + ½
        s *= 0.5
        s += 0.5
    return a


def _cell_state(gates: np.ndarray, C: np.ndarray, hd: int) -> np.ndarray:
    """``C' = f ⊙ C + i ⊙ g``."""
    c_next = gates[:, hd: 2 * hd] * C
    c_next += gates[:, :hd] * gates[:, 2 * hd: 3 * hd]
    return c_next


def _cell_jit(dt: np.dtype, nb: int, hd: int) -> Any:
    """The compiled LSTM kernels for a cell of this size, or None (NumPy's ufuncs).  Float64
    compiled code calls libm's scalar tanh, which loses to NumPy's SIMD one on large cells
    (as in the forward of LSTMTraining)."""
    if dt != np.float32 and nb * 4 * hd > common.WHOLE_LOOP_MAX:
        return None
    return jit.load("lstm")


def _cell_shapes(nb: int, I: int, hd: int) -> tuple[tuple[int, ...], ...]:
    """Shapes of the cell's inputs 0-5 (X, H, C, W_ih, W_hh, Bias), so of their gradients."""
    return (nb, I), (nb, hd), (nb, hd), (4 * hd, I), (4 * hd, hd), (4 * hd,)


def _check_cell(op: str, X: np.ndarray, H: np.ndarray, C: np.ndarray, W_ih: np.ndarray, W_hh: np.ndarray,
                Bias: np.ndarray, hd: int, dH: np.ndarray | None = None, dC: np.ndarray | None = None) -> None:
    if X.ndim != 2:
        raise ValueError(f"{op}: operand X has shape {list(X.shape)}, expected [B, I]")
    nb, I = X.shape
    g4 = 4 * hd
    bh = (nb, hd)
    # one expression for the common case (a cell call costs ~12 us: checks must stay cheap)
    if (H.shape == bh and C.shape == bh and W_ih.shape == (g4, I) and W_hh.shape == (g4, hd)
            and Bias.shape == (g4,) and (dH is None or dH.shape == bh) and (dC is None or dC.shape == bh)):
        return
    shapes = _cell_shapes(nb, I, hd)
    expect(op, ("H", H, shapes[1]), ("C", C, shapes[2]), ("W_ih", W_ih, shapes[3]), ("W_hh", W_hh, shapes[4]),
            ("Bias", Bias, shapes[5]), ("dH_next", dH, shapes[1]), ("dC_next", dC, shapes[2]))


def _check_out(r: np.ndarray | None, n: int, shape: tuple, dt: np.dtype) -> None:
    """A given result ``out[n]`` must have the result's shape and dtype (the kernels write into it)."""
    if r is not None and (r.shape != shape or r.dtype != dt):
        raise ValueError(f"out[{n}] has shape {r.shape} {r.dtype}, expected {shape} {dt}")


def _small_cell(nb: int, hd: int) -> bool:
    """Whether a cell kernel runs as one compiled call, its GEMMs by the packed-panel kernel
    (one thread; at B=4, H=32 a GradLSTMCellInput takes 12-13 us against 15-19 us with BLAS
    GEMMs), rather than BLAS GEMMs around a compiled element-wise pass (large cells)."""
    return nb * 4 * hd <= common.WHOLE_LOOP_MAX and not getattr(this_thread, "per_step", False)


def _cell_pre(X: np.ndarray, H: np.ndarray, W_ih: np.ndarray, W_hh: np.ndarray, Bias: np.ndarray,
              dt: np.dtype) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The two GEMMs of a cell step and its bias, as operands of the compiled cell kernels."""
    a = blocked.matmul(X, W_ih.T)
    hw = blocked.matmul(H, W_hh.T)
    return a, hw, jit.readable(np.ascontiguousarray(Bias, dt))


def _operand(a: np.ndarray) -> np.ndarray:
    """An operand of a compiled cell kernel: C-contiguous, typed writeable (``jit.readable``)."""
    if not a.flags.c_contiguous:
        a = np.ascontiguousarray(a)
    return jit.readable(a)


def _warm_cells(dtype: Any) -> None:
    """``warm`` hook of the cell kernels: compile their compiled passes for ``dtype``."""
    dt = np.dtype(dtype)
    if dt not in (np.float32, np.float64) or jit.load("lstm") is None:
        return
    nb, I, h = 1, 1, 1
    X, H, C = (np.full((nb, n), 0.5, dt) for n in (I, h, h))
    W_ih, W_hh, Bias = np.full((4 * h, I), 0.5, dt), np.full((4 * h, h), 0.5, dt), np.zeros(4 * h, dt)
    try:
        for large in (False, True):  # both paths: one compiled call, and BLAS GEMMs + a compiled pass
            this_thread.per_step = large  # this thread only
            lstm_cell(X, H, C, W_ih, W_hh, Bias, hidden_size=h)
            for dC in (None, C):
                grad_lstm_cell_input_fused(H, dC, X, H, C, W_ih, W_hh, Bias, input_indices=range(6), hidden_size=h)
                grad_lstm_cell_input(H, dC, X, H, C, W_ih, W_hh, Bias, input_index=2, hidden_size=h)
    finally:
        this_thread.per_step = False


@kernel(LSTMCellOp, blas=True, warm=_warm_cells)
def lstm_cell(X: np.ndarray, H: np.ndarray, C: np.ndarray, W_ih: np.ndarray, W_hh: np.ndarray,
              Bias: np.ndarray, *, out: Any = None, hidden_size: int) -> tuple[np.ndarray, np.ndarray]:
    """One LSTM step: returns ``(H', C')``, each ``[B, Hd]``."""
    dt = check_dtype("LSTMCell", X, H, C, W_ih, W_hh, Bias)
    hd = hidden_size
    _check_cell("LSTMCell", X, H, C, W_ih, W_hh, Bias, hd)
    shape = (X.shape[0], hd)
    h_next, c_next = result(out, 0, shape, dt), result(out, 1, shape, dt)
    jl = _cell_jit(dt, X.shape[0], hd)
    if jl is not None:
        # the compiled kernels write C-contiguous rows: other outputs get a copy of the same bits
        hn = h_next if h_next.flags.c_contiguous else np.empty(shape, dt)
        cn = c_next if c_next.flags.c_contiguous else np.empty(shape, dt)
        if _small_cell(X.shape[0], hd):  # one compiled call, GEMMs included
            jl.cell_forward_small(_operand(X), _operand(H), _operand(C), _operand(W_ih), _operand(W_hh),
                                  _operand(Bias), hn, cn)
        else:
            a, hw, bias = _cell_pre(X, H, W_ih, W_hh, Bias, dt)
            jl.cell_forward(a, hw, bias, jit.readable(np.ascontiguousarray(C)), hn, cn)
        if hn is not h_next:
            h_next[...] = hn
        if cn is not c_next:
            c_next[...] = cn
        return h_next, c_next
    g = _cell_gates(X, H, W_ih, W_hh, Bias, hd)
    c_next[...] = _cell_state(g, C, hd)
    np.tanh(c_next, out=h_next)
    h_next *= g[:, 3 * hd:]
    return h_next, c_next


def _cell_elementwise_numpy(dH_next: np.ndarray, dC_next: np.ndarray | None, X: np.ndarray, H: np.ndarray,
                            C: np.ndarray, W_ih: np.ndarray, W_hh: np.ndarray, Bias: np.ndarray, hd: int,
                            want_da: bool, want_dc: bool) -> tuple[np.ndarray | None, np.ndarray | None]:
    """The element-wise part of a cell's gradients by NumPy's ufuncs: the gate gradients
    ``da`` ``[B, 4H]`` (when ``want_da``) and the gradient of C (when ``want_dc``)."""
    g = _cell_gates(X, H, W_ih, W_hh, Bias, hd)
    i, f, gg, o = (g[:, k * hd: (k + 1) * hd] for k in range(4))
    tau = np.tanh(_cell_state(g, C, hd))
    # dC = dC' + dH' ⊙ o ⊙ (1 - τ²): the gradient reaching C' (before the forget gate).
    dC = dH_next * o
    t = dC * tau
    t *= tau
    dC -= t
    if dC_next is not None:
        dC += dC_next
    da = None
    if want_da:
        da = np.empty_like(g)
        for blk, gate, factor, grad in ((0, i, gg, dC), (1, f, C, dC), (3, o, tau, dH_next)):
            d = da[:, blk * hd: (blk + 1) * hd]
            np.multiply(gate, gate, out=d)
            np.subtract(gate, d, out=d)  # σ' = s(1 - s)
            d *= factor
            d *= grad
        d = da[:, 2 * hd: 3 * hd]
        np.multiply(gg, gg, out=d)
        np.subtract(1, d, out=d)  # tanh' = 1 - g²
        d *= i
        d *= dC
    return da, (dC * f if want_dc else None)


def _cell_grads(op: str, dH_next: np.ndarray, dC_next: np.ndarray | None, X: np.ndarray,
                H: np.ndarray, C: np.ndarray, W_ih: np.ndarray, W_hh: np.ndarray, Bias: np.ndarray,
                indices: Sequence[int], hd: int, out: Any) -> tuple[np.ndarray, ...]:
    """The one code path behind both cell-gradient kernels.

    Every requested gradient is computed by the same operations whatever else is
    requested, so fused and unfused results agree bit for bit.  Small cells (``_small_cell``)
    are one compiled call, GEMMs included.  Otherwise the element-wise part (gates,
    ``tanh(C')``, the gate gradients ``da`` and the gradient of C) is one compiled pass when
    ``_cell_jit`` allows (~140 us against ~500 us of ufunc passes at B=64, H=256), then the
    requested GEMMs by BLAS.
    """
    if dH_next is None:
        raise ValueError(f"{op}: operand dH_next is required")
    dt = check_dtype(op, dH_next, dC_next, X, H, C, W_ih, W_hh, Bias)
    for k in indices:
        if k not in range(6):
            raise ValueError(f"{op}: input index {k} is outside 0..5")
    _check_cell(op, X, H, C, W_ih, W_hh, Bias, hd, dH_next, dC_next)
    nb = X.shape[0]
    jl = _cell_jit(dt, nb, hd)
    if jl is not None and _small_cell(nb, hd):
        return _cell_grads_small(jl, dt, dH_next, dC_next, X, H, C, W_ih, W_hh, Bias, indices, hd, out)
    want_da, want_dc = any(k != 2 for k in indices), 2 in indices
    if out is not None:
        shapes = _cell_shapes(nb, X.shape[1], hd)
        for n, k in enumerate(indices):
            _check_out(out[n], n, shapes[k], dt)
    if jl is None:
        da, dc = _cell_elementwise_numpy(dH_next, dC_next, X, H, C, W_ih, W_hh, Bias, hd, want_da, want_dc)
    else:
        a, hw, bias = _cell_pre(X, H, W_ih, W_hh, Bias, dt)
        da = np.empty_like(a) if want_da else None
        dc = np.empty((nb, hd), dt) if want_dc else None
        rd = jit.readable
        none = np.zeros((1, 1), dt)  # stands for an absent operand (C-contiguous: one compiled variant)
        jl.cell_backward(a, hw, bias, rd(np.ascontiguousarray(C)), rd(np.ascontiguousarray(dH_next)),
                         none if dC_next is None else rd(np.ascontiguousarray(dC_next)), dC_next is not None,
                         none if da is None else da, want_da, none if dc is None else dc, want_dc)
    results = []
    for n, k in enumerate(indices):
        r = None if out is None else out[n]
        if k == 0:
            r = blocked.matmul(da, W_ih, out=r)
        elif k == 1:
            r = blocked.matmul(da, W_hh, out=r)
        elif k == 2:
            if r is None:
                r = dc
            else:
                r[...] = dc
        elif k == 3:
            r = blocked.matmul(da.T, X, out=r)
        elif k == 4:
            r = blocked.matmul(da.T, H, out=r)
        else:
            r = np.sum(da, axis=0, out=r)
        results.append(r)
    return tuple(results)


_STANDINS: dict[np.dtype, tuple[np.ndarray, np.ndarray]] = {}  # (2-D, 1-D) results not requested


def _cell_grads_small(jl: Any, dt: np.dtype, dH_next: np.ndarray, dC_next: np.ndarray | None, X: np.ndarray,
                      H: np.ndarray, C: np.ndarray, W_ih: np.ndarray, W_hh: np.ndarray, Bias: np.ndarray,
                      indices: Sequence[int], hd: int, out: Any) -> tuple[np.ndarray, ...]:
    """``_cell_grads`` for a small cell as one compiled call (``cell_grads_small``: GEMMs by the
    packed-panel kernel, no BLAS call and no Python per result).  A given ``out`` that is not a
    C-contiguous writeable array gets a copy of the result (the same bits as a fresh one)."""
    nb, I = X.shape
    standins = _STANDINS.get(dt)
    if standins is None:
        standins = _STANDINS.setdefault(dt, (np.zeros((1, 1), dt), np.zeros(1, dt)))
    none2, none1 = standins
    rs = [none2, none2, none2, none2, none2, none1]
    want = [False] * 6
    results = []
    copies = []
    shapes = _cell_shapes(nb, I, hd)
    for n, k in enumerate(indices):
        r = None if out is None else out[n]
        if r is not None:
            _check_out(r, n, shapes[k], dt)
        if r is None or not (r.flags.c_contiguous and r.flags.writeable):
            fresh = np.empty(shapes[k], dt)
            if r is not None:
                copies.append((r, fresh))
            r = fresh
        rs[k] = r
        want[k] = True
        results.append(r)
    jl.cell_grads_small(_operand(X), _operand(H), _operand(C), _operand(W_ih), _operand(W_hh), _operand(Bias),
                        _operand(dH_next), none2 if dC_next is None else _operand(dC_next), dC_next is not None,
                        tuple(want), *rs)
    if copies:
        for r, fresh in copies:
            r[...] = fresh
        results = [out[n] for n in range(len(indices))]
    return tuple(results)


@kernel(GradLSTMCellInputOp, blas=True, warm=_warm_cells)
def grad_lstm_cell_input(dH_next: np.ndarray, dC_next: np.ndarray | None, X: np.ndarray,
                         H: np.ndarray, C: np.ndarray, W_ih: np.ndarray, W_hh: np.ndarray,
                         Bias: np.ndarray, *, out: np.ndarray | None = None, input_index: int,
                         hidden_size: int) -> np.ndarray:
    """Gradient of LSTMCell w.r.t. input ``input_index`` (0 X, 1 H, 2 C, 3 W_ih, 4 W_hh, 5 Bias)."""
    return _cell_grads("GradLSTMCellInput", dH_next, dC_next, X, H, C, W_ih, W_hh, Bias,
                       (input_index,), hidden_size, None if out is None else (out,))[0]


@kernel(GradLSTMCellInputFusedOp, blas=True, warm=_warm_cells)
def grad_lstm_cell_input_fused(dH_next: np.ndarray, dC_next: np.ndarray | None, X: np.ndarray,
                               H: np.ndarray, C: np.ndarray, W_ih: np.ndarray, W_hh: np.ndarray,
                               Bias: np.ndarray, *, out: Any = None, input_indices: Sequence[int] = (),
                               hidden_size: int) -> tuple[np.ndarray, ...]:
    """Several GradLSTMCellInput results (in ``input_indices`` order) from one gate recomputation.

    Like every kernel, one result comes (and its ``out`` goes) as an array, not a 1-tuple."""
    indices = tuple(int(k) for k in input_indices)
    if not indices or len(set(indices)) != len(indices):
        raise ValueError(f"GradLSTMCellInputFused: input_indices must be distinct and non-empty, got {list(indices)}")
    if len(indices) == 1:
        return _cell_grads("GradLSTMCellInputFused", dH_next, dC_next, X, H, C, W_ih, W_hh, Bias,
                           indices, hidden_size, None if out is None else (out,))[0]
    return _cell_grads("GradLSTMCellInputFused", dH_next, dC_next, X, H, C, W_ih, W_hh, Bias,
                       indices, hidden_size, out)

