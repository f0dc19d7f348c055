"""What the LSTM kernels share: operand checks, results, sequence lengths, and the size
thresholds that choose between their compiled paths (tests lower them to reach the large-problem
paths on small arrays; the kernels read them from this module at each call)."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from .....ops.lstm import chunk_steps as ops_chunk_steps
from .. import jit, parallel

FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
ACTS = ("sigmoid", "tanh", "tanh")

# Problems with at most this many elements per step (B·4H) run the whole step loop compiled
# (GEMMs by the packed-panel kernel of _jit_gemm, one thread), and so do the half-batch loops
# of larger ones where that kernel beats BLAS; other large ones call the compiled element-wise
# step from Python and do each step's GEMM with NumPy (its threaded BLAS).  Small cells are
# one compiled call below the same size.
WHOLE_LOOP_MAX = 1 << 14
this_thread = threading.local()  # per_step: force the large-problem paths (the warm hooks)
# The per-step path splits the batch into two independent halves from this many rows on.
SPLIT_MIN_ROWS = 16


def chunk_steps(S: int, nb: int, D: int, h: int, dtype: Any) -> int:
    """T0: the steps of one fixed chunk of a layer of ``S`` steps.  The sequence kernels work in fixed
    chunks: the forward's input product X·Wᵀ is one GEMM per chunk, and LSTMGrad's step loops, dX and
    its weight gradients go chunk by chunk (each chunk's partial products fresh, then added in a fixed
    order), so that the checkpointed ops (``checkpointed.py``), which recompute segments of whole
    chunks, give the same bits.  T0 depends on the shapes alone (``gradir.ops.lstm.chunk_steps``,
    which the memory planner reads too: about ``gradir.ops.lstm.CHUNK_BYTES`` of gate gradients)."""
    return ops_chunk_steps(S, nb, D, h, np.dtype(dtype).itemsize)


# -- small helpers ---------------------------------------------------------------------
def check_dtype(op: str, *arrays: np.ndarray | None) -> np.dtype:
    dt = arrays[0].dtype
    if dt not in FLOATS:
        raise TypeError(f"{op}: operands must be float32 or float64, got {dt}")
    for a in arrays[1:]:
        if a is not None and a.dtype != dt:
            raise TypeError(f"{op}: all float operands must share one dtype ({dt}), got {a.dtype}")
    return dt


def result(out: Any, k: int, shape: tuple, dtype: np.dtype) -> np.ndarray:
    """Result ``k``: the caller's preallocated array if given, else a fresh one."""
    if out is not None and out[k] is not None:
        r = out[k]
        if r.shape != shape or r.dtype != dtype:
            raise ValueError(f"out[{k}] has shape {r.shape} {r.dtype}, expected {shape} {dtype}")
        return jit.writable_out(r, f"out[{k}]")
    return np.empty(shape, dtype)


def expect(op: str, *named: tuple[str, np.ndarray | None, tuple]) -> None:
    """Raise a ValueError naming the first operand (``name, array, shape``) whose shape differs
    (absent operands pass).  The compiled kernels trust their operands' shapes."""
    for name, a, shape in named:
        if a is not None and a.shape != shape:
            raise ValueError(f"{op}: operand {name} has shape {list(a.shape)}, expected {list(shape)}")


def view(a: np.ndarray, shape: tuple) -> np.ndarray:
    """``a`` reshaped without copying (raises if that is impossible)."""
    v = a.view()
    v.shape = shape
    return v


def check_layer_attrs(op: str, direction: str, activations: Any, clip: Any, input_forget: int) -> int:
    if direction not in ("forward", "reverse", "bidirectional"):
        raise ValueError(f"{op}: direction must be forward, reverse or bidirectional, got {direction!r}")
    if activations is not None and tuple(str(a).lower() for a in activations) not in (ACTS, ACTS * 2):
        raise ValueError(f"{op}: only activations=['sigmoid', 'tanh', 'tanh'] is supported, got {activations}")
    if clip is not None:
        raise ValueError(f"{op}: clip is not supported (must be absent), got {clip}")
    if input_forget != 0:
        raise ValueError(f"{op}: only input_forget=0 is supported, got {input_forget}")
    return 2 if direction == "bidirectional" else 1


def seq_lengths(op: str, SL: np.ndarray | None, S: int, nb: int) -> np.ndarray | None:
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


class Steps:
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



def split_wanted(jl: Any, nb: int, h: int) -> bool:
    """Whether a layer's step loops should run as two half-batch loops (see ``lstm_grad``):
    compiled kernels, a large batch, and BLAS threads that sleep soon after a call, or that are
    not used at all (inside a run BLAS is held to one thread: ``gradir.backends.cpu.executor.blas_hold``)."""
    return (jl is not None and nb >= SPLIT_MIN_ROWS and nb * 4 * h > WHOLE_LOOP_MAX
            and (parallel.blas_single() or parallel.blas_idle_threads_sleep()))
