"""NumPy kernels for the LSTM family: the cell (PyTorch gate order i, f, g, o), its
per-input gradient, and ORT's sequence-level forward/backward (ONNX gate order i, o, f, c).

Semantics are in docs/ops.md, LSTM.  Float32 and Float64; results keep the input dtype.

How the sequence kernels are made fast (docs/performance.md; measured by ``benchmarks/bench_lstm.py``):

* The forward computes ``X·Wᵀ`` for every step as one GEMM straight into ``iofc``; each
  step then does one GEMM (``H_{t-1}·Rᵀ``) and a few ufuncs with ``out=``.  Sigmoids are
  ``σ(a) = ½·tanh(a/2) + ½`` with the ``/2`` folded into the weight rows of the three
  sigmoid gates (scaling by ½ is exact), so one ``tanh`` covers all four gate blocks;
  ``scipy.special.expit`` measured ~10× slower than ``tanh`` here.
* The backward keeps every step's gate gradient ``da`` in one ``[S, B, D, 4H]`` scratch
  buffer (the only scratch that grows with S; it is reused between calls on a thread,
  see ``release_scratch``).  Chunk by chunk (L2-sized; one chunk for small problems) it
  first fills that buffer with the factors that do not depend on the carried gradients
  (``τ·o(1-o)``, ``c̃·i(1-i)``, ...) using a few bulk ufuncs, then runs the step loop,
  which multiplies them in place by ``dH``/``dC`` and does one GEMM ``da·R`` per step
  (7 ufuncs).  ``dX``, ``dW``, ``dR`` and ``dB`` are large GEMMs over all steps afterwards.
* Not done, because it was measured not to pay here: splitting the batch rows over
  threads (two threads issuing many small ufuncs serialize on the GIL) and running the
  bulk work on a helper thread beside the step loop (both slowed ~2×).
* With the compiled kernels (``jit.load("lstm")``, numba; ``_jit_lstm.py``) the step loop's
  element-wise work is one fused pass per step (``tanh(C_t)``, every gate gradient, dC, and
  the dP/dB sums), ~3x less time than the ufunc passes; small problems (B·4H <= 16K) run the
  whole loop, its per-step GEMMs included, in one compiled call (no per-step Python), larger
  ones call the compiled step from Python and keep NumPy's threaded GEMM per step.  Tried and
  dropped: running dX/dW on a helper thread beside the compiled step loop (each BLAS held to
  one thread): the two cores slowed each other and the total got worse (100-130 vs 85-110 ms;
  again 122-132 vs 94 ms on AMD Zen 3).  The forward's step (gate activations with peepholes,
  C_t, H_t) is one compiled pass too (75 -> 59 ms at S,B,I,H = 100,64,256,256), for Float64
  only when B·4H <= 16K (libm's scalar tanh loses to NumPy's SIMD one on larger steps); it
  also adds the bias (a pass over all steps' ``X·Wᵀ`` less), and large batches run as two
  half-batch loops as the backward does (below): 55-56 -> 49 ms.
* Large batches on the compiled path run as two independent half-batch step loops on two
  threads, each with single-threaded BLAS, and the big GEMMs in halves (see ``lstm_grad``):
  the step loops went from 33 to 29 ms.  Only where OpenBLAS's own threads sleep soon after
  a call (``gradir._blasenv``): with its default 0.1 s of spinning they take a core from the
  loops (53 vs 31 ms) and ``LSTMGrad`` right after ``LSTMTraining`` took 139-155 ms instead
  of 92-105; there the per-step GEMM is left to OpenBLAS's threads, as before.
* Sequence lengths (``SL``) use precomputed float masks on the steps that are only
  partly valid, skip steps valid for no row, and inject ``dHFinal``/``dCFinal`` at (and
  take ``dH0``/``dC0`` from) each row's last/first step.

Contract for ``LSTMGrad``: ``HAll``, ``CAll`` and ``iofc`` are what ``LSTMTraining`` returned
for the same operands, in particular zero at steps ``t >= SL[b]`` (the kernel relies on
that instead of masking them again).  Padded entries of ``X`` and ``dHAll`` must be finite.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from . import jit, kernel, parallel

__all__ = [
    "grad_lstm_cell_input",
    "grad_lstm_cell_input_fused",
    "lstm_cell",
    "lstm_grad",
    "lstm_training",
    "release_scratch",
]

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
_ACTS = ("sigmoid", "tanh", "tanh")


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


def _scratch(shape: tuple, dtype: np.dtype) -> np.ndarray:
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes > _SCRATCH_MAX_BYTES:
        return np.empty(shape, dtype)
    buf = getattr(_scratch_local, "buf", None)
    if buf is None or buf.nbytes < nbytes:
        buf = _scratch_local.buf = np.empty(nbytes, np.uint8)
    return _view(buf[:nbytes].view(dtype), shape)


def release_scratch() -> None:
    """Free the LSTMGrad scratch buffer kept by the calling thread."""
    _scratch_local.buf = None


# -- small helpers ---------------------------------------------------------------------
def _dtype(op: str, *arrays: np.ndarray | None) -> np.dtype:
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
        return jit.writable_out(r, f"out[{k}]")
    return np.empty(shape, dtype)


def _expect(op: str, *named: tuple[str, np.ndarray | None, tuple]) -> None:
    """Raise a ValueError naming the first operand (``name, array, shape``) whose shape differs
    (absent operands pass).  The compiled kernels trust their operands' shapes."""
    for name, a, shape in named:
        if a is not None and a.shape != shape:
            raise ValueError(f"{op}: operand {name} has shape {list(a.shape)}, expected {list(shape)}")


def _view(a: np.ndarray, shape: tuple) -> np.ndarray:
    """``a`` reshaped without copying (raises if that is impossible)."""
    v = a.view()
    v.shape = shape
    return v


def _check_layer_attrs(op: str, direction: str, activations: Any, clip: Any, input_forget: int) -> int:
    if direction not in ("forward", "reverse", "bidirectional"):
        raise ValueError(f"{op}: direction must be forward, reverse or bidirectional, got {direction!r}")
    if activations is not None and tuple(str(a).lower() for a in activations) not in (_ACTS, _ACTS * 2):
        raise ValueError(f"{op}: only activations=['sigmoid', 'tanh', 'tanh'] is supported, got {activations}")
    if clip is not None:
        raise ValueError(f"{op}: clip is not supported (must be absent), got {clip}")
    if input_forget != 0:
        raise ValueError(f"{op}: only input_forget=0 is supported, got {input_forget}")
    return 2 if direction == "bidirectional" else 1


def _lengths(op: str, SL: np.ndarray | None, S: int, nb: int) -> np.ndarray | None:
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
    """Which batch rows are valid at each step (ONNX SL semantics: t < SL[b])."""

    def __init__(self, lengths: np.ndarray | None, S: int, dtype: np.dtype) -> None:
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


def _cell_jit(dt: np.dtype, nb: int, hd: int) -> Any:
    """The compiled LSTM kernels for a cell of this size, or None (NumPy's ufuncs).  Float64
    compiled code calls libm's scalar tanh, which loses to NumPy's SIMD one on large cells
    (as in the forward of LSTMTraining)."""
    if dt != np.float32 and nb * 4 * hd > _WHOLE_LOOP_MAX:
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
    _expect(op, ("H", H, shapes[1]), ("C", C, shapes[2]), ("W_ih", W_ih, shapes[3]), ("W_hh", W_hh, shapes[4]),
            ("Bias", Bias, shapes[5]), ("dH_next", dH, shapes[1]), ("dC_next", dC, shapes[2]))


def _check_out(r: np.ndarray | None, n: int, shape: tuple, dt: np.dtype) -> None:
    """A given result ``out[n]`` must have the result's shape and dtype (the kernels write into it)."""
    if r is not None and (r.shape != shape or r.dtype != dt):
        raise ValueError(f"out[{n}] has shape {r.shape} {r.dtype}, expected {shape} {dt}")


def _small_cell(nb: int, hd: int) -> bool:
    """Whether a cell kernel runs as one compiled call, its GEMMs by the packed-panel kernel
    (one thread; at B=4, H=32 a GradLSTMCellInput takes 12-13 us against 15-19 us with BLAS
    GEMMs), rather than BLAS GEMMs around a compiled element-wise pass (large cells)."""
    return nb * 4 * hd <= _WHOLE_LOOP_MAX and not getattr(_this_thread, "per_step", False)


def _cell_pre(X: np.ndarray, H: np.ndarray, W_ih: np.ndarray, W_hh: np.ndarray, Bias: np.ndarray,
              dt: np.dtype) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The two GEMMs of a cell step and its bias, as operands of the compiled cell kernels."""
    a = np.matmul(X, W_ih.T)
    hw = np.matmul(H, W_hh.T)
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
            _this_thread.per_step = large  # this thread only
            lstm_cell(X, H, C, W_ih, W_hh, Bias, hidden_size=h)
            for dC in (None, C):
                grad_lstm_cell_input_fused(H, dC, X, H, C, W_ih, W_hh, Bias, input_indices=range(6), hidden_size=h)
                grad_lstm_cell_input(H, dC, X, H, C, W_ih, W_hh, Bias, input_index=2, hidden_size=h)
    finally:
        _this_thread.per_step = False


@kernel("LSTMCell", blas=True, warm=_warm_cells)
def lstm_cell(X: np.ndarray, H: np.ndarray, C: np.ndarray, W_ih: np.ndarray, W_hh: np.ndarray,
              Bias: np.ndarray, *, out: Any = None, hidden_size: int) -> tuple[np.ndarray, np.ndarray]:
    """One LSTM step: returns ``(H', C')``, each ``[B, Hd]``."""
    dt = _dtype("LSTMCell", X, H, C, W_ih, W_hh, Bias)
    hd = hidden_size
    _check_cell("LSTMCell", X, H, C, W_ih, W_hh, Bias, hd)
    shape = (X.shape[0], hd)
    h_next, c_next = _result(out, 0, shape, dt), _result(out, 1, shape, dt)
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
    dt = _dtype(op, dH_next, dC_next, X, H, C, W_ih, W_hh, Bias)
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
            r = np.matmul(da, W_ih, out=r)
        elif k == 1:
            r = np.matmul(da, W_hh, out=r)
        elif k == 2:
            if r is None:
                r = dc
            else:
                r[...] = dc
        elif k == 3:
            r = np.matmul(da.T, X, out=r)
        elif k == 4:
            r = np.matmul(da.T, H, out=r)
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


@kernel("GradLSTMCellInput", blas=True, warm=_warm_cells)
def grad_lstm_cell_input(dH_next: np.ndarray, dC_next: np.ndarray | None, X: np.ndarray,
                         H: np.ndarray, C: np.ndarray, W_ih: np.ndarray, W_hh: np.ndarray,
                         Bias: np.ndarray, *, out: np.ndarray | None = None, input_index: int,
                         hidden_size: int) -> np.ndarray:
    """Gradient of LSTMCell w.r.t. input ``input_index`` (0 X, 1 H, 2 C, 3 W_ih, 4 W_hh, 5 Bias)."""
    return _cell_grads("GradLSTMCellInput", dH_next, dC_next, X, H, C, W_ih, W_hh, Bias,
                       (input_index,), hidden_size, None if out is None else (out,))[0]


@kernel("GradLSTMCellInputFused", blas=True, warm=_warm_cells)
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


# -- LSTMTraining: ONNX forward (gate order i, o, f, c) ----------------------------------
def _halve_sigmoid_rows(M: np.ndarray, h: int) -> np.ndarray:
    """Copy of ``M`` (``[4H, ...]`` or ``[4H]``) with the i, o, f rows halved."""
    M = np.array(M, copy=True)
    M[: 3 * h] *= 0.5
    return M


def _mask_step(steps: _Steps, t: int, ht: np.ndarray, ct: np.ndarray, g: np.ndarray, r0: int, r1: int) -> None:
    """Zero the rows ``r0 .. r1-1`` (``ht``, ``ct``, ``g`` hold just those) that have no step ``t``."""
    m = steps.partial.get(t)
    if m is not None:  # rows with t >= SL[b] do not exist at this step
        m = m[r0:r1]
        ht *= m
        ct *= m
        g *= m


def _forward_direction(X: np.ndarray, Wd: np.ndarray, Rd: np.ndarray, bd: np.ndarray | None,
                       pd: np.ndarray | None, h0: np.ndarray | None, c0: np.ndarray | None,
                       steps: _Steps, rev: bool, HA: np.ndarray, CA: np.ndarray, G: np.ndarray,
                       hfin: np.ndarray, cfin: np.ndarray) -> None:
    """One direction.  ``HA``/``CA`` ``[S, B, H]`` and ``G`` ``[S, B, 4H]`` are (strided) views of
    the results whose per-step slices are contiguous."""
    S, nb, _ = X.shape
    h = Rd.shape[1]
    dt = X.dtype
    # compiled operands: C-contiguous (one machine-code variant, the same GEMM for every layout)
    h0 = None if h0 is None else jit.readable(np.ascontiguousarray(h0))
    c0 = None if c0 is None else jit.readable(np.ascontiguousarray(c0))
    # Pre-activations with the sigmoid blocks halved: a tanh of all four blocks then
    # gives tanh(a_c) and, after ½·t + ½, the three sigmoids.
    WsT = _halve_sigmoid_rows(Wd, h).T
    RsT = _halve_sigmoid_rows(Rd, h).T
    if G.flags.c_contiguous:
        np.matmul(_view(X, (S * nb, X.shape[2])), WsT, out=_view(G, (S * nb, 4 * h)))
    else:
        np.matmul(X, WsT, out=G)
    bias = _halve_sigmoid_rows(bd[: 4 * h] + bd[4 * h:], h) if bd is not None else None
    if pd is not None:
        pi, po, pf = (0.5 * pd[k * h: (k + 1) * h] for k in range(3))
    # Float64 compiled code calls libm's scalar tanh: faster than NumPy's passes for small
    # steps, slower than its SIMD tanh for large ones (290 vs 253 ms at B=64, H=256)
    jl = jit.load("lstm") if dt == np.float32 or nb * 4 * h <= _WHOLE_LOOP_MAX else None
    if jl is not None:  # the compiled step adds the bias itself
        p_half = (0.5 * pd).astype(dt) if pd is not None else np.zeros(1, dt)
        b_step = bias.astype(dt) if bias is not None else np.zeros(1, dt)
    elif bias is not None:
        G += bias

    starts = steps.starts(rev) if (h0 is not None or c0 is not None) else {}
    order = range(S - 1, -1, -1) if rev else range(S)

    def loop(r0: int, r1: int, stop: threading.Event | None = None) -> None:
        """The step loop of batch rows ``r0 .. r1-1`` (independent of the other rows)."""
        m = r1 - r0
        zeros = np.zeros((m, h), dt)
        hp = h0[r0:r1] if h0 is not None else zeros
        cp = c0[r0:r1] if c0 is not None else zeros
        tmp4 = np.empty((m, 4 * h), dt)
        tmp = np.empty((m, h), dt)
        hbuf = cbuf = None
        for t in order:
            if stop is not None and stop.is_set():
                return
            if t >= steps.alive:  # valid for no row
                HA[t, r0:r1] = 0
                CA[t, r0:r1] = 0
                G[t, r0:r1] = 0
                continue
            rows = starts.get(t)
            if rows is not None and t < steps.alive - 1:
                rows = rows[(rows >= r0) & (rows < r1)] - r0  # this loop's rows among them
            if rows is not None and rows.size and t < steps.alive - 1:
                # Reverse direction: these rows start here, from H0/C0 rather than step t+1.
                if hbuf is None:
                    hbuf, cbuf = np.empty((m, h), dt), np.empty((m, h), dt)
                np.copyto(hbuf, hp)
                np.copyto(cbuf, cp)
                hbuf[rows] = h0[r0:r1][rows] if h0 is not None else 0
                cbuf[rows] = c0[r0:r1][rows] if c0 is not None else 0
                hp, cp = hbuf, cbuf
            g = G[t, r0:r1]
            ct, ht = CA[t, r0:r1], HA[t, r0:r1]
            if RsTp is not None and hp.strides[1] == hp.itemsize:
                jg.gemm(hp, RsTp, tmp4)
            else:
                np.matmul(hp, RsT, out=tmp4)
            if jl is not None:  # the whole element-wise step fused (numba)
                jl.forward_step(g, tmp4, b_step, bias is not None, jit.readable(cp), ct, ht, p_half, pd is not None)
                _mask_step(steps, t, ht, ct, g, r0, r1)
                hp, cp = ht, ct
                continue
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
            _mask_step(steps, t, ht, ct, g, r0, r1)
            hp, cp = ht, ct

    # Large batches on the compiled path: two half-batch loops, each with single-threaded BLAS,
    # side by side when BLAS could have used two threads (as in LSTMGrad, see lstm_grad).
    with parallel.own_blas_threads(_split_wanted(jl, nb, h)) as blas:
        # Each loop's GEMM H_{t-1}·Rᵀ by the packed-R kernel (one thread; 91 vs 72 GFLOP/s for
        # OpenBLAS at 32x256 by 256x1024) where the loop is small, or has a core to itself on a
        # CPU where that kernel beats BLAS (``_jit_gemm.FAST_LARGE``).
        jg = jl.gemm_module if jl is not None else None  # (jl's own: jit may be switched off meanwhile)
        small = nb * 4 * h <= _WHOLE_LOOP_MAX
        RsTp = jg.pack(RsT) if jg is not None and (small or (blas.ok and jg.FAST_LARGE)) else None
        if blas.ok:
            half = nb // 2
            parallel.run_two(lambda stop: loop(0, half, stop), lambda stop: loop(half, nb, stop),
                             concurrent=blas.threads >= 2)
        else:
            loop(0, nb)
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


def _warm_layers(dtype: Any) -> None:
    """``warm`` hook of LSTMTraining and LSTMGrad (see ``gradir.kernels``): run both on a
    tiny layer, with and without peepholes, and the backward on both of its compiled paths
    (the whole loop and the per-step one), so numba builds or loads all their machine code."""
    dt = np.dtype(dtype)
    if dt not in (np.float32, np.float64) or jit.load("lstm") is None:
        return
    S, nb, I, h = 2, 1, 1, 1
    X = np.full((S, nb, I), 0.5, dt)
    W, R = np.full((1, 4 * h, I), 0.5, dt), np.full((1, 4 * h, h), 0.5, dt)
    try:
        for P in (None, np.full((1, 3 * h), 0.5, dt)):
            HAll, _, _, CAll, iofc = lstm_training(X, W, R, P=P, hidden_size=h)
            for per_step in (False, True):
                _this_thread.per_step = per_step  # this thread only
                lstm_grad(X, W, R, None, None, None, HAll, CAll, iofc, HAll, P=P, hidden_size=h)
    finally:
        _this_thread.per_step = False


@kernel("LSTMTraining", blas=True, warm=_warm_layers)
def lstm_training(X: np.ndarray, W: np.ndarray, R: np.ndarray, B: np.ndarray | None = None,
                  SL: np.ndarray | None = None, H0: np.ndarray | None = None,
                  C0: np.ndarray | None = None, P: np.ndarray | None = None, *, out: Any = None,
                  hidden_size: int, direction: str = "forward", activations: Any = None,
                  clip: float | None = None, input_forget: int = 0) -> tuple[np.ndarray, ...]:
    """ONNX LSTM forward; returns ``(HAll [S,D,B,H], HFinal, CFinal [D,B,H], CAll [S,D,B,H], iofc [S,D,B,4H])``."""
    D = _check_layer_attrs("LSTMTraining", direction, activations, clip, input_forget)
    dt = _dtype("LSTMTraining", X, W, R, B, H0, C0, P)
    X = np.ascontiguousarray(X)
    S, nb, I = X.shape
    h = hidden_size
    _expect("LSTMTraining", ("W", W, (D, 4 * h, I)), ("R", R, (D, 4 * h, h)), ("B", B, (D, 8 * h)),
            ("H0", H0, (D, nb, h)), ("C0", C0, (D, nb, h)), ("P", P, (D, 3 * h)))
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
    """Backward through time for one direction, in chunks of consecutive steps.

    Per chunk ``j`` (in the order the backward visits them):

    * ``factors(j)`` fills ``da``'s slots with the factors that do not depend on the
      carried gradients, and ``K``/``F`` (bulk ufuncs over the whole chunk);
    * ``steps(j)`` runs the recurrence: per step one GEMM ``da·R`` and 6-7 small ufuncs;
    * ``finish(j)`` adds the chunk's peephole gradients while its data is in cache.

    Small problems are one chunk, so the per-step loop holds only the ufuncs that need
    the carried gradients; large ones use L2-sized chunks.
    """

    def __init__(self, k: _Grad, d: int) -> None:
        self.k, self.d = k, d
        self.rev = k.direction == "reverse" or d == 1
        nb, h, dt, alive = k.nb, k.h, k.dtype, k.steps.alive
        self.da = k.dab[:, :, d]  # [S, B, 4H]; each step's [B, 4H] slice has contiguous rows
        self.G = k.iofc[:, d]
        self.CA = k.CAll[:, d]
        self.dHA = None if k.dHAll is None else k.dHAll[:, d]
        self.c0 = None if k.C0 is None else k.C0[d]
        self.inject = k.steps.ends(self.rev)  # rows that end at a step (forward direction with SL)
        self.extract = k.steps.starts(self.rev)  # rows that start at a step (reverse direction with SL)
        T = max(1, min(alive, k.chunk_bytes // max(1, nb * 4 * h * dt.itemsize)))
        chunks = [(lo, min(lo + T, alive)) for lo in range(0, alive, T)]
        self.chunks = chunks[::-1] if not self.rev else chunks
        self.Tb = np.empty((4, T, nb, h), dt)  # contiguous temporaries of the factors
        self.Kb = np.empty((T, nb, h), dt)
        self.Cpb = np.empty((T, nb, h), dt)
        self.Fb = np.empty((T, nb, h), dt) if k.P is not None else None
        self.Cp: np.ndarray | None = None  # C_{t-1} of the current chunk
        self.dP = np.zeros((3, h), dt)  # i, o, f

    # -- the three phases -----------------------------------------------------------
    def factors(self, j: int) -> None:
        k, h = self.k, self.k.h
        lo, hi = self.chunks[j]
        m, n = hi - lo, k.nb
        A = self.da[lo:hi]
        A4 = _view(A, (m, n, 4, h))
        g = self.G[lo:hi]
        g4 = _view(g, (m, n, 4, h))
        i, o, f, c = g4[:, :, 0], g4[:, :, 1], g4[:, :, 2], g4[:, :, 3]
        Cp = self.Cp = self._c_prev(lo, hi, self.Cpb)
        K = self.Kb[:m]
        v, u, w, tm = (buf[:m] for buf in self.Tb)
        # Thirteen bulk ufuncs that compute in contiguous temporaries and write each
        # strided gate block of da once (strided writes cost ~3x contiguous ones):
        #   τ = tanh(C_t)  u = o·τ  v = i·c̃  w = f·C_{t-1}
        #   A_i = c̃·i(1-i) = v - v·i      A_o = τ·o(1-o) = u - u·o      A_f = C_{t-1}·f(1-f) = w - w·f
        #   A_c = i·(1-c̃²) = i - v·c̃      K = o·(1-τ²) = o - u·τ  [+ P_o·A_o]
        #   F = f  [+ P_i·A_i + P_f·A_f]
        Ai, Ao, Af, Ac = A4[:, :, 0], A4[:, :, 1], A4[:, :, 2], A4[:, :, 3]
        np.tanh(self.CA[lo:hi], out=K)
        np.multiply(i, c, out=v)
        np.multiply(v, i, out=tm)
        np.subtract(v, tm, out=Ai)
        np.multiply(v, c, out=tm)
        np.subtract(i, tm, out=Ac)
        np.multiply(o, K, out=u)
        np.multiply(u, o, out=tm)
        np.subtract(u, tm, out=Ao)
        np.multiply(u, K, out=K)
        np.subtract(o, K, out=K)
        np.multiply(f, Cp, out=w)
        np.multiply(w, f, out=tm)
        np.subtract(w, tm, out=Af)
        if k.P is not None:
            p = k.P[self.d]
            p_i, p_o, p_f = p[:h], p[h: 2 * h], p[2 * h:]
            F = self.Fb[:m]
            np.multiply(Ao, p_o, out=tm)
            K += tm
            np.multiply(Ai, p_i, out=F)
            F += f
            np.multiply(Af, p_f, out=tm)
            F += tm

    def steps(self, j: int, dH: np.ndarray, dC: np.ndarray, tmp: np.ndarray) -> None:
        k, h, d = self.k, self.k.h, self.d
        lo, hi = self.chunks[j]
        m = hi - lo
        A = self.da[lo:hi]
        A4 = _view(A, (m, k.nb, 4, h))
        K = self.Kb[:m]
        F = self.Fb[:m] if k.P is not None else _view(self.G[lo:hi], (m, k.nb, 4, h))[:, :, 2]
        order = slice(None, None, -1) if not self.rev else slice(None)
        dhas = self.dHA[lo:hi][order] if self.dHA is not None else [None] * m
        Rd = k.R[d]
        dC3 = dC[:, None, :]
        inject, extract = self.inject, self.extract
        dHF, dCF = k.dHFinal, k.dCFinal
        mul, add, dot = np.multiply, np.add, np.dot
        # Positional out arguments and views made by zip (in C): this loop is the hot path
        # at small sizes, where each step costs a few microseconds.
        for t, a, ai, ao, afc, kt, ft, dha in zip(range(lo, hi)[order], A[order], A4[order, :, 0],
                                                  A4[order, :, 1], A4[order, :, 2:], K[order], F[order], dhas):
            if inject:
                rows = inject.get(t)
                if rows is not None:
                    if dHF is not None:
                        dH[rows] += dHF[d, rows]
                    if dCF is not None:
                        dC[rows] += dCF[d, rows]
            if dha is not None:
                add(dH, dha, dH)
            mul(dH, kt, tmp)
            add(dC, tmp, dC)
            mul(ao, dH, ao)
            mul(ai, dC, ai)
            mul(afc, dC3, afc)
            mul(dC, ft, dC)
            dot(a, Rd, dH)
            if extract:
                rows = extract.get(t)
                if rows is not None:
                    k.dH0[d, rows] = dH[rows]
                    k.dC0[d, rows] = dC[rows]

    def finish(self, j: int) -> None:
        k, h = self.k, self.k.h
        lo, hi = self.chunks[j]
        m, n = hi - lo, k.nb
        A4 = _view(self.da[lo:hi], (m, n, 4, h))
        # Peephole gradients: dP_o += Σ da_o·C_t, dP_{i,f} += Σ da_{i,f}·C_{t-1}.
        self.dP[1] += np.einsum("tbh,tbh->h", A4[:, :, 1], self.CA[lo:hi])
        self.dP[0::2] += np.einsum("tbgh,tbh->gh", A4[:, :, 0::2], self.Cp)

    def run(self) -> None:
        k, dt, h, d = self.k, self.k.dtype, self.k.h, self.d
        S, nb, alive = k.S, k.nb, k.steps.alive
        if alive < S:
            self.da[alive:] = 0
        dH = np.zeros((nb, h), dt)
        dC = np.zeros((nb, h), dt)
        if not self.inject:  # every row's final state is at the first step the backward visits
            if k.dHFinal is not None:
                dH[...] = k.dHFinal[d]
            if k.dCFinal is not None:
                dC[...] = k.dCFinal[d]
        tmp = np.empty((nb, h), dt)
        for j in range(len(self.chunks)):
            self.factors(j)
            self.steps(j, dH, dC, tmp)
            self.finish(j)
        if not self.extract:  # every row starts at the last step the backward visits
            k.dH0[d] = dH
            k.dC0[d] = dC

    def _c_prev(self, lo: int, hi: int, buf: np.ndarray) -> np.ndarray:
        """``C_{t-1}`` (the cell state before step t) for steps ``lo..hi-1``, as ``[m, B, H]``."""
        S, m, CA, c0, extract = self.k.S, hi - lo, self.CA, self.c0, self.extract
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


def _dR(k: _Grad, d: int, rev: bool) -> None:
    """``dR[d] = Σ_t da_tᵀ·H_{t-1}`` as a few large GEMMs, with no scratch that grows with S.

    Runs last: when D = 2 it overwrites parts of direction ``d``'s ``da`` it no longer needs."""
    S, nb, h, D = k.S, k.nb, k.h, k.D
    out = k.dR[d]
    da = k.dab[:, :, d]  # [S, B, 4H]; as 2-D rows (t, b) it has a uniform row stride
    HA = k.HAll[:, d]
    first_da = None
    if k.H0 is not None:  # each row's first processed step starts from H0: its da, taken now
        if not rev:
            start = np.zeros(nb, np.intp)
        elif k.steps.lengths is not None:
            start = k.steps.lengths - 1
        else:
            start = np.full(nb, S - 1, np.intp)
        first_da = da[start, np.arange(nb)]  # a copy
    first = True
    tmp = None

    def acc(t0: int, t1: int, hb: np.ndarray) -> None:
        """out (+)= Σ_{t0 <= t < t1} da_tᵀ·H_{t-1}, with the H_{t-1} rows in ``hb`` ([t1-t0, B, H])."""
        nonlocal first, tmp
        a2, b2 = _view(da[t0:t1], ((t1 - t0) * nb, 4 * h)).T, _view(hb, ((t1 - t0) * nb, h))
        if first:
            k.mm(a2, b2, out)
            first = False
        else:
            if tmp is None:
                tmp = np.empty_like(out)
            k.mm(a2, b2, out, tmp)

    # Steps whose predecessor is a step: t = 1..S-1 (forward) or 0..S-2 (reverse).
    lo, hi = (1, S) if not rev else (0, S - 1)
    shift = -1 if not rev else 1
    if hi > lo and D == 1:
        acc(lo, hi, HA[lo + shift: hi + shift])
    elif hi > lo:
        # HAll[:, d] is not a 2-D view when D = 2, so H_{t-1} is copied, in chunks, into the first
        # H columns of da rows (uniform stride) that are no longer needed: for the second
        # direction, all of the first one's; for the first, those of its own steps already
        # summed (one step's H_{t-1} is a contiguous [B, H] and needs no copy, then the chunks
        # double).  Nothing more is allocated.
        spare, base = (k.dab[:, :, 0], 0) if d == 1 else (da, lo)
        cap = max(1, k.copy_bytes // max(1, nb * h * k.dtype.itemsize))
        t0 = lo
        if d == 0:
            acc(lo, lo + 1, HA[lo + shift: lo + 1 + shift])
            t0 = lo + 1
        while t0 < hi:
            room = S if d == 1 else t0 - lo  # spare steps
            t1 = min(hi, t0 + min(room, cap))
            hb = spare[base: base + t1 - t0, :, :h]
            np.copyto(hb, HA[t0 + shift: t1 + shift])
            acc(t0, t1, hb)
            t0 = t1
    if first:
        out[...] = 0
    if first_da is not None:
        if tmp is None:
            tmp = np.empty_like(out)
        k.mm(first_da.T, k.H0[d], out, tmp)


# Problems with at most this many elements per step (B·4H) run the whole step loop compiled
# (GEMMs by the packed-panel kernel of _jit_gemm, one thread), and so do the half-batch loops
# of larger ones where that kernel beats BLAS; other large ones call the compiled element-wise
# step from Python and do each step's GEMM with NumPy (its threaded BLAS).  Small cells are
# one compiled call below the same size.
_WHOLE_LOOP_MAX = 1 << 14
_this_thread = threading.local()  # per_step: force the large-problem paths (the warm hooks)
# The per-step path splits the batch into two independent halves from this many rows on.
_SPLIT_MIN_ROWS = 16
# Elements of ``da`` (steps x rows x 4H) per compiled call of the step loop (about 16 ms of work
# per call at 100,64,256,256): between calls a Ctrl-C stops the loops.
_BLOCK_ELEMENTS = 1 << 21


def _split_wanted(jl: Any, nb: int, h: int) -> bool:
    """Whether a layer's step loops should run as two half-batch loops (see ``lstm_grad``):
    compiled kernels, a large batch, and BLAS threads that sleep soon after a call."""
    return (jl is not None and nb >= _SPLIT_MIN_ROWS and nb * 4 * h > _WHOLE_LOOP_MAX
            and parallel.blas_idle_threads_sleep())


def _matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray, tmp: np.ndarray | None = None) -> None:
    """``out = a·b``, or ``out += a·b`` through ``tmp`` (shaped like ``out``) when it is given."""
    if tmp is None:
        np.matmul(a, b, out=out)
    else:
        np.matmul(a, b, out=tmp)
        np.add(out, tmp, out=out)


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


def _rev(k: _Grad, d: int) -> bool:
    """Whether direction ``d`` of the layer runs backward in time (reverse, or bidirectional's second)."""
    return k.direction == "reverse" or d == 1


def _compiled_steps(jl: Any, k: _Grad) -> np.ndarray:
    """The step loops of every direction by the compiled kernels; returns dB's 4H sums ``[D·4H]``."""
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
    whole = ((nb * 4 * h <= _WHOLE_LOOP_MAX or (k.split and jg.FAST_LARGE))
             and not getattr(_this_thread, "per_step", False))
    firsts = [lengths - 1 if _rev(k, d) else np.zeros(nb, np.intp) for d in range(D)]
    lasts = [np.zeros(nb, np.intp) if _rev(k, d) else lengths - 1 for d in range(D)]
    Rp = [jg.pack(R[d]) for d in range(D)] if whole else []
    # visits per compiled call: a Ctrl-C (``stop``) is seen between calls
    block = max(1, _BLOCK_ELEMENTS // max(1, nb * 4 * h))

    def chain(r0: int, r1: int, dP: np.ndarray, db: np.ndarray, stop: threading.Event) -> None:
        """Backward through time of batch rows r0..r1-1 (independent of the other rows)."""
        dH = np.empty((r1 - r0, h), dt)
        dC = np.empty((r1 - r0, h), dt)
        for d in range(D):
            rev, first = _rev(k, d), firsts[d]
            args = (iofc, CAll, dHA, has_dHA, c0, dHF, has_dHF, dCF, has_dCF, P, lengths, first, lasts[d])
            dH.fill(0)
            dC.fill(0)
            if whole:
                for k0 in range(0, alive, block):
                    if stop.is_set():
                        return
                    jl.bptt(rev, d, r0, k0, k0 + block, *args, Rp[d], da, dH, dC, dP, db, k.dH0, k.dC0)
                continue
            Rd = R[d]
            prev = -1
            for n in range(alive):
                if stop.is_set():
                    return
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

    if not k.split:
        chain(0, nb, dP, db, threading.Event())
        return _view(db, (D * 4 * h,))
    # Two chains of half the batch rows each (see lstm_grad).
    m = nb // 2
    dP1, db1 = np.zeros_like(dP), np.zeros_like(db)
    parallel.run_two(lambda stop: chain(0, m, dP, db, stop), lambda stop: chain(m, nb, dP1, db1, stop),
                     concurrent=k.two)
    dP += dP1
    db += db1
    return _view(db, (D * 4 * h,))


@kernel("LSTMGrad", blas=True, warm=_warm_layers)
def lstm_grad(X: np.ndarray, W: np.ndarray, R: np.ndarray, SL: np.ndarray | None = None,
              H0: np.ndarray | None = None, C0: np.ndarray | None = None,
              HAll: np.ndarray | None = None, CAll: np.ndarray | None = None,
              iofc: np.ndarray | None = None, dHAll: np.ndarray | None = None,
              dHFinal: np.ndarray | None = None, dCFinal: np.ndarray | None = None,
              P: np.ndarray | None = None, *, out: Any = None, hidden_size: int,
              direction: str = "forward", activations: Any = None, clip: float | None = None,
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
    _expect("LSTMGrad", ("W", W, (D, 4 * h, I)), ("R", R, (D, 4 * h, h)), ("H0", H0, (D, nb, h)),
            ("C0", C0, (D, nb, h)), ("HAll", HAll, (S, D, nb, h)), ("CAll", CAll, (S, D, nb, h)),
            ("iofc", iofc, (S, D, nb, 4 * h)), ("dHAll", dHAll, (S, D, nb, h)), ("dHFinal", dHFinal, (D, nb, h)),
            ("dCFinal", dCFinal, (D, nb, h)), ("P", P, (D, 3 * h)))
    res = [_result(out, j, shape, dt) for j, shape in enumerate(
        [(S, nb, I), (D, 4 * h, I), (D, 4 * h, h), (D, 8 * h), (D, nb, h), (D, nb, h), (D, 3 * h)])]
    dX, dW, dR, dB, dH0, dC0, dP = res
    steps = _Steps(_lengths("LSTMGrad", SL, S, nb), S, dt)
    k = _Grad(S=S, nb=nb, I=I, h=h, D=D, dtype=dt, direction=direction, steps=steps, X=X, R=R,
              H0=H0, C0=C0, HAll=HAll, CAll=CAll, iofc=iofc, dHAll=dHAll, dHFinal=dHFinal,
              dCFinal=dCFinal, P=P, dR=dR, dH0=dH0, dC0=dC0, chunk_bytes=_CHUNK_BYTES,
              copy_bytes=_COPY_BYTES,
              dab=_scratch((S, nb, D, 4 * h), dt))  # every step's da (the one S-sized scratch)

    jl = jit.load("lstm")
    # Large problems on the compiled path (B >= _SPLIT_MIN_ROWS) run as two halves: the batch
    # rows split into two independent step loops, and every big GEMM split into the two halves
    # of its result's rows, with BLAS held to one thread.  The halves run on two threads when
    # BLAS could have used two (the cores it would have used); then neither core waits while
    # the other does a step's element-wise work (step loops 29 vs 33 ms with BLAS per step;
    # ~22 ms with the packed-panel kernel, which also does dX, where it beats BLAS).  Every
    # GEMM is single-threaded either way, so the bits do not depend on the threads (OpenBLAS's
    # multi-threaded GEMMs round differently from its single-threaded ones).  Only when BLAS's
    # own threads sleep soon after a call (``parallel.blas_idle_threads_sleep``): OpenBLAS's
    # default 0.1 s of spinning takes a core from the loops (53 vs 31 ms; LSTMGrad after
    # LSTMTraining 139-144 ms).  And not where the runtime holds BLAS to more than one thread
    # for ops running beside this one (machines with 4+ cores): one thread here would be one
    # thread for them too, and change their bits.
    with parallel.own_blas_threads(_split_wanted(jl, nb, h)) as blas:
        k.split = blas.ok
        k.two = k.split and blas.threads >= 2
        k.mm = _matmul_halves(k.two) if k.split else _matmul
        if jl is not None:
            db = _compiled_steps(jl, k)
            dP[...] = _view(k.dP2, (D, 3 * h))
        else:
            for d in range(D):
                direc = _Direction(k, d)
                direc.run()
                dP[d] = _view(direc.dP, (3 * h,))
        da2 = _view(k.dab, (S * nb, D * 4 * h))
        dX2 = _view(dX, (S * nb, I))
        if k.split and jl is not None and jl.gemm_module.FAST_LARGE and dX2.strides[1] == dt.itemsize:
            _packed_halves(jl.gemm_module, da2, _view(W, (D * 4 * h, I)), dX2, k.two)  # W packed once
        else:
            k.mm(da2, _view(W, (D * 4 * h, I)), dX2)  # sums both directions
        k.mm(da2.T, _view(X, (S * nb, I)), _view(dW, (D * 4 * h, I)))
        if jl is None:
            # Column sums of da (dB): a GEMV with ones is ~2x faster than np.sum on large buffers.
            db = np.matmul(np.ones(S * nb, dt), da2) if S * nb >= 1024 else np.add.reduce(da2, axis=0)
        for d in range(D):
            _dR(k, d, _rev(k, d))
            dB[d, : 4 * h] = db[d * 4 * h: (d + 1) * 4 * h]
            dB[d, 4 * h:] = db[d * 4 * h: (d + 1) * 4 * h]
    return dX, dW, dR, dB, dH0, dC0, dP
