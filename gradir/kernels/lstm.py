"""NumPy kernels for the LSTM family: the cell (PyTorch gate order i, f, g, o), its
per-input gradient, and ORT's sequence-level forward/backward (ONNX gate order i, o, f, c).

Semantics are in OPS.md §3-§4.  Float32 and Float64; results keep the input dtype.

How the sequence kernels are made fast (see PERFORMANCE.md, and ``benchmarks/bench_lstm.py``):

* The forward computes ``X·Wᵀ`` for every step as one GEMM straight into ``iofc``; each
  step then does one GEMM (``H_{t-1}·Rᵀ``) and a few contiguous ufuncs with ``out=``.
  Sigmoids are ``σ(a) = ½·tanh(a/2) + ½``, and the ``/2`` is folded into the weight rows
  of the three sigmoid gates (scaling by ½ is exact), so one ``tanh`` covers all four
  gate blocks; ``scipy.special.expit`` measured ~10× slower than ``tanh`` here.
* The backward keeps every step's gate gradient ``da`` in one ``[S, B, D, 4H]`` scratch
  buffer (the only scratch whose size grows with S; the rest is bounded per-step and
  per-chunk buffers).  Before the step loop it fills that buffer with the factors that
  do not depend on the carried gradients (``τ·o(1-o)``, ``c̃·i(1-i)``, ...), chunk by
  chunk so the data stays in L2; each step then multiplies them in place by ``dH``/``dC``
  and does one GEMM ``da·R``.  ``dX``, ``dW``, ``dR`` and ``dB`` are a few large GEMMs over
  all steps after the loop.  Inside the backward the gate blocks are kept in the order
  ``o, i, f, c`` (``i, f, c`` all scale by ``dC``: one broadcast multiply) and the
  results are permuted back to ONNX order at the end.
* Batch rows are independent in the recurrence, so a large backward splits its rows
  over the kernel thread pool (``parallel.parallel_rows``) with single-threaded BLAS.
* Sequence lengths (``SL``) are handled by precomputed float masks on the steps that
  are only partly valid, by skipping steps that are valid for no row, and by injecting
  ``dHFinal``/``dCFinal`` at (and taking ``dH0``/``dC0`` from) each row's end/start step.

Contract for ``LSTMGrad``: ``HAll``, ``CAll`` and ``iofc`` are what ``LSTMTraining`` returned
for the same operands, in particular zero at steps ``t >= SL[b]`` (the kernel relies on
that instead of masking them again).  Padded entries of ``X`` and ``dHAll`` must be finite.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Any, Iterator, Optional, Sequence

import numpy as np

from . import kernel
from .parallel import MIN_CHUNK_BYTES, get_threads, parallel_rows

__all__ = [
    "lstm_cell",
    "grad_lstm_cell_input",
    "grad_lstm_cell_input_fused",
    "lstm_training",
    "lstm_grad",
]

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
_ACTS = ("sigmoid", "tanh", "tanh")


# Target size of the per-chunk precomputation in the backward (fits L2 with room to spare).
_CHUNK_BYTES = 1 << 20
# Bound on the temporary copy of H_{t-1} used for dR when HAll is not a 2-D view (D = 2).
_COPY_BYTES = 8 << 20


# -- small helpers ---------------------------------------------------------------------
def _dtype(op: str, *arrays: Optional[np.ndarray]) -> np.dtype:
    dt = arrays[0].dtype
    if dt not in _FLOATS:
        raise TypeError(f"{op}: operands must be float32 or float64, got {dt}")
    for a in arrays[1:]:
        if a is not None and a.dtype != dt:
            raise TypeError(f"{op}: all float operands must share one dtype ({dt}), got {a.dtype}")
    return dt


def _result(out: Any, k: int, shape: tuple, dtype: np.dtype) -> np.ndarray:
    """Result ``k``: the caller's preallocated array if given, else a fresh one."""
    if out is not None and out[k] is not None:
        r = out[k]
        if r.shape != shape or r.dtype != dtype:
            raise ValueError(f"out[{k}] has shape {r.shape} {r.dtype}, expected {shape} {dtype}")
        return r
    return np.empty(shape, dtype)


def _view(a: np.ndarray, shape: tuple) -> np.ndarray:
    """``a`` reshaped without copying (raises if that is impossible)."""
    v = a.view()
    v.shape = shape
    return v


def _check_layer_attrs(op: str, direction: str, activations: Any, clip: Any, input_forget: int) -> int:
    if direction not in ("forward", "reverse", "bidirectional"):
        raise ValueError(f"{op}: direction must be forward, reverse or bidirectional, got {direction!r}")
    if activations is not None and tuple(activations) not in (_ACTS, _ACTS * 2):
        raise ValueError(f"{op}: only activations=['sigmoid', 'tanh', 'tanh'] is supported, got {activations}")
    if clip is not None:
        raise ValueError(f"{op}: clip is not supported (must be absent), got {clip}")
    if input_forget != 0:
        raise ValueError(f"{op}: only input_forget=0 is supported, got {input_forget}")
    return 2 if direction == "bidirectional" else 1


def _lengths(op: str, SL: Optional[np.ndarray], S: int, nb: int) -> Optional[np.ndarray]:
    """Validated sequence lengths as intp, or None when absent or all equal to S."""
    if SL is None:
        return None
    sl = np.asarray(SL)
    if sl.dtype.kind not in "iu":
        raise TypeError(f"{op}: operand SL must be an integer tensor, got {sl.dtype}")
    if sl.shape != (nb,):
        raise ValueError(f"{op}: operand SL has shape {list(sl.shape)}, expected [{nb}] (one length per batch row)")
    bad = np.flatnonzero((sl < 1) | (sl > S))
    if bad.size:
        b = int(bad[0])
        more = f" ({bad.size} bad rows: {bad[:10].tolist()})" if bad.size > 1 else ""
        raise ValueError(f"{op}: operand SL[{b}] = {int(sl[b])} is outside 1..{S} "
                         f"(S = X.shape[0]; every row needs 1 <= SL[b] <= S){more}")
    lengths = sl.astype(np.intp)
    return None if int(lengths.min()) == S else lengths


class _Steps:
    """Which rows are valid at each step, for one batch-row range (ONNX SL semantics)."""

    def __init__(self, lengths: Optional[np.ndarray], S: int, dtype: np.dtype) -> None:
        self.S = S
        self.lengths = lengths
        if lengths is None:
            self.alive = S  # steps t < alive are valid for some row
            self.partial: dict[int, np.ndarray] = {}
            return
        self.alive = int(lengths.max())
        counts = np.count_nonzero(np.arange(S)[:, None] < lengths[None, :], axis=1)
        nb = lengths.shape[0]
        self.partial = {t: (t < lengths).astype(dtype)[:, None]
                        for t in range(self.alive) if counts[t] < nb}

    def ends(self, rev: bool) -> dict[int, np.ndarray]:
        """Step -> rows whose last processed step it is (where HFinal is taken)."""
        if rev or self.lengths is None:
            return {}
        return _group(self.lengths - 1)

    def starts(self, rev: bool) -> dict[int, np.ndarray]:
        """Step -> rows whose first processed step it is, for the reverse direction with SL."""
        if not rev or self.lengths is None:
            return {}
        return _group(self.lengths - 1)


def _group(steps: np.ndarray) -> dict[int, np.ndarray]:
    out: dict[int, list] = {}
    for b, t in enumerate(steps.tolist()):
        out.setdefault(t, []).append(b)
    return {t: np.array(rows, dtype=np.intp) for t, rows in out.items()}


_controller_lock = threading.Lock()
_controller: Any = None


@contextmanager
def _single_threaded_blas() -> Iterator[None]:
    """Limit BLAS to one thread while our own row threads each call it."""
    global _controller
    with _controller_lock:
        if _controller is None:
            from threadpoolctl import ThreadpoolController

            _controller = ThreadpoolController()
    limiter = _controller.limit(limits=1, user_api="blas")
    try:
        yield
    finally:
        limiter.restore_original_limits()


def _run_rows(n_rows: int, bytes_per_row: int, body: Any) -> None:
    """``body(start, stop)`` over row ranges; split over threads only when it pays."""
    split = get_threads() > 1 and n_rows >= 2 and n_rows * bytes_per_row >= 2 * MIN_CHUNK_BYTES
    if not split:
        body(0, n_rows)
        return
    with _single_threaded_blas():
        parallel_rows(n_rows, bytes_per_row, body)


# -- LSTMCell and its per-input gradient (PyTorch gate order i, f, g, o) ------------------
def _cell_gates(X: np.ndarray, H: np.ndarray, W_ih: np.ndarray, W_hh: np.ndarray,
                Bias: np.ndarray, hd: int) -> np.ndarray:
    """Post-activation gates ``[B, 4Hd]`` (blocks i, f, g, o) of one cell step."""
    a = np.matmul(X, W_ih.T)
    a += np.matmul(H, W_hh.T)
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


@kernel("LSTMCell", blas=True)
def lstm_cell(X: np.ndarray, H: np.ndarray, C: np.ndarray, W_ih: np.ndarray, W_hh: np.ndarray,
              Bias: np.ndarray, *, out: Any = None, hidden_size: int) -> tuple[np.ndarray, np.ndarray]:
    """One LSTM step: returns ``(H', C')``, each ``[B, Hd]``."""
    dt = _dtype("LSTMCell", X, H, C, W_ih, W_hh, Bias)
    hd = hidden_size
    g = _cell_gates(X, H, W_ih, W_hh, Bias, hd)
    shape = (X.shape[0], hd)
    h_next, c_next = _result(out, 0, shape, dt), _result(out, 1, shape, dt)
    c_next[...] = _cell_state(g, C, hd)
    np.tanh(c_next, out=h_next)
    h_next *= g[:, 3 * hd:]
    return h_next, c_next


def _cell_grads(op: str, dH_next: np.ndarray, dC_next: Optional[np.ndarray], X: np.ndarray,
                H: np.ndarray, C: np.ndarray, W_ih: np.ndarray, W_hh: np.ndarray, Bias: np.ndarray,
                indices: Sequence[int], hd: int, out: Any) -> tuple[np.ndarray, ...]:
    """The one code path behind both cell-gradient kernels.

    Every requested gradient is computed by the same operations whatever else is
    requested, so fused and unfused results agree bit for bit.
    """
    dt = _dtype(op, dH_next, dC_next, X, H, C, W_ih, W_hh, Bias)
    if dH_next is None:
        raise ValueError(f"{op}: operand dH_next is required")
    for k in indices:
        if k not in range(6):
            raise ValueError(f"{op}: input index {k} is outside 0..5")
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
    if any(k != 2 for k in indices):
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
    results = []
    for n, k in enumerate(indices):
        r = None if out is None else out[n]
        if k == 0:
            r = np.matmul(da, W_ih, out=r)
        elif k == 1:
            r = np.matmul(da, W_hh, out=r)
        elif k == 2:
            r = np.multiply(dC, f, out=r)
        elif k == 3:
            r = np.matmul(da.T, X, out=r)
        elif k == 4:
            r = np.matmul(da.T, H, out=r)
        else:
            r = np.sum(da, axis=0, out=r)
        results.append(r)
    return tuple(results)


@kernel("GradLSTMCellInput", blas=True)
def grad_lstm_cell_input(dH_next: np.ndarray, dC_next: Optional[np.ndarray], X: np.ndarray,
                         H: np.ndarray, C: np.ndarray, W_ih: np.ndarray, W_hh: np.ndarray,
                         Bias: np.ndarray, *, out: Optional[np.ndarray] = None, input_index: int,
                         hidden_size: int) -> np.ndarray:
    """Gradient of LSTMCell w.r.t. input ``input_index`` (0 X, 1 H, 2 C, 3 W_ih, 4 W_hh, 5 Bias)."""
    return _cell_grads("GradLSTMCellInput", dH_next, dC_next, X, H, C, W_ih, W_hh, Bias,
                       (input_index,), hidden_size, None if out is None else (out,))[0]


@kernel("GradLSTMCellInputFused", blas=True)
def grad_lstm_cell_input_fused(dH_next: np.ndarray, dC_next: Optional[np.ndarray], X: np.ndarray,
                               H: np.ndarray, C: np.ndarray, W_ih: np.ndarray, W_hh: np.ndarray,
                               Bias: np.ndarray, *, out: Any = None, input_indices: Sequence[int] = (),
                               hidden_size: int) -> tuple[np.ndarray, ...]:
    """Several GradLSTMCellInput results (in ``input_indices`` order) from one gate recomputation."""
    indices = tuple(int(k) for k in input_indices)
    if not indices or len(set(indices)) != len(indices):
        raise ValueError(f"GradLSTMCellInputFused: input_indices must be distinct and non-empty, got {list(indices)}")
    return _cell_grads("GradLSTMCellInputFused", dH_next, dC_next, X, H, C, W_ih, W_hh, Bias,
                       indices, hidden_size, out)


# -- LSTMTraining: ONNX forward (gate order i, o, f, c) ----------------------------------
def _halve_sigmoid_rows(M: np.ndarray, h: int) -> np.ndarray:
    """Copy of ``M`` (``[4H, ...]`` or ``[4H]``) with the i, o, f rows halved."""
    M = np.array(M, copy=True)
    M[: 3 * h] *= 0.5
    return M


def _forward_direction(X: np.ndarray, Wd: np.ndarray, Rd: np.ndarray, bd: Optional[np.ndarray],
                       pd: Optional[np.ndarray], h0: Optional[np.ndarray], c0: Optional[np.ndarray],
                       steps: _Steps, rev: bool, HA: np.ndarray, CA: np.ndarray, G: np.ndarray,
                       hfin: np.ndarray, cfin: np.ndarray) -> None:
    """One direction.  ``HA``/``CA`` ``[S, B, H]`` and ``G`` ``[S, B, 4H]`` are (strided) views of
    the results whose per-step slices are contiguous."""
    S, nb, _ = X.shape
    h = Rd.shape[1]
    dt = X.dtype
    # Pre-activations with the sigmoid blocks halved: a tanh of all four blocks then
    # gives tanh(a_c) and, after ½·t + ½, the three sigmoids.
    WsT = _halve_sigmoid_rows(Wd, h).T
    RsT = _halve_sigmoid_rows(Rd, h).T
    if G.flags.c_contiguous:
        np.matmul(_view(X, (S * nb, X.shape[2])), WsT, out=_view(G, (S * nb, 4 * h)))
    else:
        np.matmul(X, WsT, out=G)
    if bd is not None:
        G += _halve_sigmoid_rows(bd[: 4 * h] + bd[4 * h:], h)
    if pd is not None:
        pi, po, pf = (0.5 * pd[k * h: (k + 1) * h] for k in range(3))

    zeros = np.zeros((nb, h), dt)
    hp = h0 if h0 is not None else zeros
    cp = c0 if c0 is not None else zeros
    tmp4 = np.empty((nb, 4 * h), dt)
    tmp = np.empty((nb, h), dt)
    hbuf = cbuf = None
    starts = steps.starts(rev) if (h0 is not None or c0 is not None) else {}
    order = range(S - 1, -1, -1) if rev else range(S)
    for t in order:
        if t >= steps.alive:  # valid for no row
            HA[t] = 0
            CA[t] = 0
            G[t] = 0
            continue
        rows = starts.get(t)
        if rows is not None and t < steps.alive - 1:
            # Reverse direction: these rows start here, from H0/C0 rather than step t+1.
            if hbuf is None:
                hbuf, cbuf = np.empty((nb, h), dt), np.empty((nb, h), dt)
            np.copyto(hbuf, hp)
            np.copyto(cbuf, cp)
            hbuf[rows] = h0[rows] if h0 is not None else 0
            cbuf[rows] = c0[rows] if c0 is not None else 0
            hp, cp = hbuf, cbuf
        g = G[t]
        ct, ht = CA[t], HA[t]
        np.matmul(hp, RsT, out=tmp4)
        g += tmp4
        gi, go, gf, gc = g[:, :h], g[:, h: 2 * h], g[:, 2 * h: 3 * h], g[:, 3 * h:]
        if pd is None:
            np.tanh(g, out=g)
            s = g[:, : 3 * h]
            s *= 0.5
            s += 0.5
        else:
            np.multiply(cp, pi, out=tmp)
            gi += tmp
            np.multiply(cp, pf, out=tmp)
            gf += tmp
            np.tanh(gi, out=gi)
            gfc = g[:, 2 * h:]
            np.tanh(gfc, out=gfc)
            for s in (gi, gf):
                s *= 0.5
                s += 0.5
        np.multiply(gf, cp, out=ct)
        np.multiply(gi, gc, out=tmp)
        ct += tmp
        if pd is not None:
            np.multiply(ct, po, out=tmp)
            go += tmp
            np.tanh(go, out=go)
            go *= 0.5
            go += 0.5
        np.tanh(ct, out=tmp)
        np.multiply(go, tmp, out=ht)
        m = steps.partial.get(t)
        if m is not None:  # rows with t >= SL[b] do not exist at this step
            ht *= m
            ct *= m
            g *= m
        hp, cp = ht, ct
    if rev:
        hfin[...] = HA[0]
        cfin[...] = CA[0]
    elif steps.lengths is not None:
        last, rows = steps.lengths - 1, np.arange(nb)
        hfin[...] = HA[last, rows]
        cfin[...] = CA[last, rows]
    else:
        hfin[...] = HA[S - 1]
        cfin[...] = CA[S - 1]


@kernel("LSTMTraining", blas=True)
def lstm_training(X: np.ndarray, W: np.ndarray, R: np.ndarray, B: Optional[np.ndarray] = None,
                  SL: Optional[np.ndarray] = None, H0: Optional[np.ndarray] = None,
                  C0: Optional[np.ndarray] = None, P: Optional[np.ndarray] = None, *, out: Any = None,
                  hidden_size: int, direction: str = "forward", activations: Any = None,
                  clip: Optional[float] = None, input_forget: int = 0) -> tuple[np.ndarray, ...]:
    """ONNX LSTM forward; returns ``(HAll [S,D,B,H], HFinal, CFinal [D,B,H], CAll [S,D,B,H], iofc [S,D,B,4H])``."""
    D = _check_layer_attrs("LSTMTraining", direction, activations, clip, input_forget)
    dt = _dtype("LSTMTraining", X, W, R, B, H0, C0, P)
    S, nb, _ = X.shape
    h = hidden_size
    steps = _Steps(_lengths("LSTMTraining", SL, S, nb), S, dt)
    HAll = _result(out, 0, (S, D, nb, h), dt)
    HFinal = _result(out, 1, (D, nb, h), dt)
    CFinal = _result(out, 2, (D, nb, h), dt)
    CAll = _result(out, 3, (S, D, nb, h), dt)
    iofc = _result(out, 4, (S, D, nb, 4 * h), dt)
    for d in range(D):
        _forward_direction(
            X, W[d], R[d], None if B is None else B[d], None if P is None else P[d],
            None if H0 is None else H0[d], None if C0 is None else C0[d], steps,
            direction == "reverse" or d == 1, HAll[:, d], CAll[:, d], iofc[:, d], HFinal[d], CFinal[d])
    return HAll, HFinal, CFinal, CAll, iofc


# -- LSTMGrad: backpropagation through time ----------------------------------------------
class _Grad:
    """Operands, results and scratch of one LSTMGrad call."""

    def __init__(self, **kw: Any) -> None:
        self.__dict__.update(kw)


class _Direction:
    """Backward through time for one direction; ``rows(b0, b1)`` handles a batch-row range.

    ``da`` for every step goes to ``k.dab[:, rows, d]`` (gate order i, o, f, c), which the
    large GEMMs after the loop read."""

    def __init__(self, k: _Grad, d: int) -> None:
        self.k, self.d = k, d
        self.rev = k.direction == "reverse" or d == 1
        self.partial_dP: dict[int, np.ndarray] = {}

    def rows(self, b0: int, b1: int) -> None:
        k, d, rev = self.k, self.d, self.rev
        S, h, dt, alive = k.S, k.h, k.dtype, k.steps.alive
        n = b1 - b0
        sl = slice(b0, b1)
        da = k.dab[:, sl, d]  # [S, n, 4H]; each step's [n, 4H] slice has contiguous rows
        G = k.iofc[:, d, sl]
        CA = k.CAll[:, d, sl]
        Rd = k.R[d]
        if alive < S:
            da[alive:] = 0
        dH = np.zeros((n, h), dt)
        dC = np.zeros((n, h), dt)
        dHF = None if k.dHFinal is None else k.dHFinal[d, sl]
        dCF = None if k.dCFinal is None else k.dCFinal[d, sl]
        inject = _local(k.steps.ends(rev), b0, b1)  # rows that end at a step (forward direction with SL)
        extract = _local(k.steps.starts(rev), b0, b1)  # rows that start at a step (reverse direction with SL)
        if not inject:  # every row's final state is at the first step the backward visits
            if dHF is not None:
                dH[...] = dHF
            if dCF is not None:
                dC[...] = dCF
        c0 = None if k.C0 is None else k.C0[d, sl]
        P = k.P
        if P is not None:
            p_i, p_o, p_f = (P[d, j * h: (j + 1) * h] for j in range(3))
        dP = np.zeros((3, h), dt)  # i, o, f

        T = max(1, min(alive, k.chunk_bytes // max(1, n * 4 * h * dt.itemsize)))
        K = np.empty((T, n, h), dt)
        Cpb = np.empty((T, n, h), dt)
        Zb = np.empty((T, n, 4 * h), dt)
        F_buf = np.empty((T, n, h), dt) if P is not None else None
        tmp = np.empty((n, h), dt)
        dC3 = dC[:, None, :]
        dHA = None if k.dHAll is None else k.dHAll[:, d, sl]
        chunks = [(lo, min(lo + T, alive)) for lo in range(0, alive, T)]
        if not rev:
            chunks.reverse()
        for lo, hi in chunks:
            m = hi - lo
            A = da[lo:hi]
            A4 = _view(A, (m, n, 4, h))
            g = G[lo:hi]
            g4 = _view(g, (m, n, 4, h))
            i, o, f, c = g4[:, :, 0], g4[:, :, 1], g4[:, :, 2], g4[:, :, 3]
            Ct = CA[lo:hi]
            Cp = self._c_prev(lo, hi, CA, c0, extract, Cpb)
            Kc = K[:m]
            # Factors that do not depend on the carried gradients.  Full-width [.., 4H]
            # ufuncs cost about as much as one strided gate-block ufunc, so:
            #   A = g(1-g) ⊙ [c̃, τ, C_{t-1}, i]      (τ = tanh(C_t); block c then fixed:)
            #   A_c = i·(1-c̃²)        K = o·(1-τ²) [+ P_o·A_o]      F = f [+ P_i·A_i + P_f·A_f]
            Ai, Ao, Af, Ac = A4[:, :, 0], A4[:, :, 1], A4[:, :, 2], A4[:, :, 3]
            Z = Zb[:m]
            Z4 = _view(Z, (m, n, 4, h))
            np.copyto(Z4[:, :, 0], c)
            tau = Z4[:, :, 1]
            np.tanh(Ct, out=tau)
            np.copyto(Z4[:, :, 2], Cp)
            np.copyto(Z4[:, :, 3], i)
            np.multiply(g, g, out=A)
            np.subtract(g, A, out=A)
            np.multiply(c, c, out=Ac)
            np.subtract(1, Ac, out=Ac)
            np.multiply(A, Z, out=A)
            np.multiply(tau, tau, out=Kc)
            np.subtract(1, Kc, out=Kc)
            Kc *= o
            if P is None:
                F = f
            else:
                F, tm = F_buf[:m], Z4[:, :, 0]  # Z is free again
                np.multiply(Ao, p_o, out=tm)
                Kc += tm
                np.multiply(Ai, p_i, out=F)
                F += f
                np.multiply(Af, p_f, out=tm)
                F += tm
            # The step loop: one GEMM and 6-7 ufuncs per step, on per-step views made in C.
            order = slice(None, None, -1) if not rev else slice(None)
            ts = range(lo, hi)[order]
            dhas = dHA[lo:hi][order] if dHA is not None else [None] * m
            for t, a, ai, ao, afc, kt, ft, dha in zip(ts, A[order], Ai[order], Ao[order], A4[order, :, 2:],
                                                      Kc[order], F[order], dhas):
                if inject:
                    rows = inject.get(t)
                    if rows is not None:
                        if dHF is not None:
                            dH[rows] += dHF[rows]
                        if dCF is not None:
                            dC[rows] += dCF[rows]
                if dha is not None:
                    dH += dha
                np.multiply(dH, kt, out=tmp)
                dC += tmp
                ao *= dH
                ai *= dC
                afc *= dC3
                dC *= ft
                np.matmul(a, Rd, out=dH)
                if extract:
                    rows = extract.get(t)
                    if rows is not None:
                        k.dH0[d, b0 + rows] = dH[rows]
                        k.dC0[d, b0 + rows] = dC[rows]
            # Peephole gradients of this chunk: dP_o += Σ da_o·C_t, dP_{i,f} += Σ da_{i,f}·C_{t-1}.
            dP[1] += np.einsum("tbh,tbh->h", Ao, Ct)
            dP[0::2] += np.einsum("tbgh,tbh->gh", A4[:, :, 0::2], Cp)
        if not extract:  # every row starts at the last step the backward visits
            k.dH0[d, sl] = dH
            k.dC0[d, sl] = dC
        self.partial_dP[b0] = dP

    def _c_prev(self, lo: int, hi: int, CA: np.ndarray, c0: Optional[np.ndarray],
                extract: dict[int, np.ndarray], buf: np.ndarray) -> np.ndarray:
        """``C_{t-1}`` (the cell state before step t) for steps ``lo..hi-1``, as ``[m, n, H]``."""
        S, m = self.k.S, hi - lo
        if not self.rev:
            if lo > 0:
                return CA[lo - 1: hi - 1]
            out = buf[:m]
            if c0 is None:
                out[0] = 0
            else:
                out[0] = c0
            out[1:] = CA[: hi - 1]
            return out
        fix = [t for t in range(lo, hi) if t in extract and t < S - 1] if c0 is not None else []
        if hi < S and not fix:
            return CA[lo + 1: hi + 1]
        out = buf[:m]
        top = min(hi, S - 1)
        out[: top - lo] = CA[lo + 1: top + 1]
        if hi == S:
            out[m - 1] = 0 if c0 is None else c0
        for t in fix:  # reverse direction with SL: rows that start at step t start from C0
            rows = extract[t]
            out[t - lo, rows] = c0[rows]
        return out


def _local(events: dict[int, np.ndarray], b0: int, b1: int) -> dict[int, np.ndarray]:
    """Restrict step -> rows events to rows ``b0..b1-1`` (made local)."""
    out = {}
    for t, rows in events.items():
        r = rows[(rows >= b0) & (rows < b1)] - b0
        if r.size:
            out[t] = r
    return out


def _dR(k: _Grad, d: int, rev: bool) -> None:
    """``dR[d] = Σ_t da_tᵀ·H_{t-1}`` as a few large GEMMs."""
    S, nb, h, D = k.S, k.nb, k.h, k.D
    out = k.dR[d]
    da = k.dab[:, :, d]  # [S, B, 4H]; as 2-D rows (t, b) it has a uniform row stride
    HA = k.HAll[:, d]
    first = True

    def acc(a2: np.ndarray, b2: np.ndarray) -> None:
        nonlocal first
        if first:
            np.matmul(a2.T, b2, out=out)
            first = False
        else:
            np.add(out, np.matmul(a2.T, b2), out=out)

    # Steps whose predecessor is a step: t = 1..S-1 (forward) or 0..S-2 (reverse).
    lo, hi = (1, S) if not rev else (0, S - 1)
    shift = -1 if not rev else 1
    if hi > lo:
        if D == 1:
            acc(_view(da[lo:hi], ((hi - lo) * nb, 4 * h)), _view(HA[lo + shift: hi + shift], ((hi - lo) * nb, h)))
        else:  # HAll[:, d] is not a 2-D view: copy H_{t-1} through a bounded buffer
            T = max(1, min(hi - lo, k.copy_bytes // max(1, nb * h * k.dtype.itemsize)))
            buf = np.empty((T, nb, h), k.dtype)
            for t0 in range(lo, hi, T):
                t1 = min(t0 + T, hi)
                hb = buf[: t1 - t0]
                np.copyto(hb, HA[t0 + shift: t1 + shift])
                acc(_view(da[t0:t1], ((t1 - t0) * nb, 4 * h)), _view(hb, ((t1 - t0) * nb, h)))
    if first:
        out[...] = 0
    # Each row's first processed step starts from H0 (zero if absent).
    if k.H0 is not None:
        if not rev:
            start = np.zeros(nb, np.intp)
        elif k.steps.lengths is not None:
            start = k.steps.lengths - 1
        else:
            start = np.full(nb, S - 1, np.intp)
        first_da = da[start, np.arange(nb)]
        out += np.matmul(first_da.T, k.H0[d])


@kernel("LSTMGrad", blas=True)
def lstm_grad(X: np.ndarray, W: np.ndarray, R: np.ndarray, SL: Optional[np.ndarray] = None,
              H0: Optional[np.ndarray] = None, C0: Optional[np.ndarray] = None,
              HAll: Optional[np.ndarray] = None, CAll: Optional[np.ndarray] = None,
              iofc: Optional[np.ndarray] = None, dHAll: Optional[np.ndarray] = None,
              dHFinal: Optional[np.ndarray] = None, dCFinal: Optional[np.ndarray] = None,
              P: Optional[np.ndarray] = None, *, out: Any = None, hidden_size: int,
              direction: str = "forward", activations: Any = None, clip: Optional[float] = None,
              input_forget: int = 0) -> tuple[np.ndarray, ...]:
    """Exact BPTT of LSTMTraining; returns ``(dX, dW, dR, dB, dH0, dC0, dP)``."""
    D = _check_layer_attrs("LSTMGrad", direction, activations, clip, input_forget)
    for name, v in (("HAll", HAll), ("CAll", CAll), ("iofc", iofc)):
        if v is None:
            raise ValueError(f"LSTMGrad: operand {name} is required")
    dt = _dtype("LSTMGrad", X, W, R, H0, C0, HAll, CAll, iofc, dHAll, dHFinal, dCFinal, P)
    X, W, R, HAll, CAll, iofc = (np.ascontiguousarray(a) for a in (X, W, R, HAll, CAll, iofc))
    S, nb, I = X.shape
    h = hidden_size
    res = [_result(out, j, shape, dt) for j, shape in enumerate(
        [(S, nb, I), (D, 4 * h, I), (D, 4 * h, h), (D, 8 * h), (D, nb, h), (D, nb, h), (D, 3 * h)])]
    dX, dW, dR, dB, dH0, dC0, dP = res
    steps = _Steps(_lengths("LSTMGrad", SL, S, nb), S, dt)
    k = _Grad(S=S, nb=nb, I=I, h=h, D=D, dtype=dt, direction=direction, steps=steps, X=X, R=R,
              H0=H0, C0=C0, HAll=HAll, CAll=CAll, iofc=iofc, dHAll=dHAll, dHFinal=dHFinal,
              dCFinal=dCFinal, P=P, dR=dR, dH0=dH0, dC0=dC0, chunk_bytes=_CHUNK_BYTES,
              copy_bytes=_COPY_BYTES,
              dab=np.empty((S, nb, D, 4 * h), dt))  # every step's da (the one S-sized scratch)

    # Bytes one batch row touches over all steps (decides whether splitting rows pays).
    row_bytes = S * (12 * h + (h if dHAll is not None else 0)) * dt.itemsize
    for d in range(D):
        direc = _Direction(k, d)
        _run_rows(nb, row_bytes, direc.rows)
        dP[d] = _view(sum(direc.partial_dP[b] for b in sorted(direc.partial_dP)), (3 * h,))

    da2 = _view(k.dab, (S * nb, D * 4 * h))
    np.matmul(da2, _view(W, (D * 4 * h, I)), out=_view(dX, (S * nb, I)))  # sums both directions
    np.matmul(da2.T, _view(X, (S * nb, I)), out=_view(dW, (D * 4 * h, I)))
    db = np.matmul(np.ones(S * nb, dt), da2)  # [D·4H]
    for d in range(D):
        _dR(k, d, direction == "reverse" or d == 1)
        dB[d, : 4 * h] = db[d * 4 * h: (d + 1) * 4 * h]
        dB[d, 4 * h:] = db[d * 4 * h: (d + 1) * 4 * h]
    return dX, dW, dR, dB, dH0, dC0, dP
