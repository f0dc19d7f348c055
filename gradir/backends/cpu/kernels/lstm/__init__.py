"""NumPy kernels for the LSTM family: the cell (PyTorch gate order i, f, g, o), its
per-input gradient, and ORT's sequence-level forward/backward (ONNX gate order i, o, f, c).

Semantics are in docs/ops.md, LSTM.  Float32 and Float64; results keep the input dtype.

How the sequence kernels are made fast (docs/performance.md; measured by ``benchmarks/bench_lstm.py``):

* The forward computes ``X·Wᵀ`` for every step as one GEMM straight into ``iofc``; each
  step then does one GEMM (``H_{t-1}·Rᵀ``) and a few ufuncs with ``out=``.  Sigmoids are
  ``σ(a) = ½·tanh(a/2) + ½`` with the ``/2`` folded into the weight rows of the three
  sigmoid gates (scaling by ½ is exact), so one ``tanh`` covers all four gate blocks;
  ``scipy.special.expit`` measured ~10× slower than ``tanh`` here.
* The backward goes in fixed chunks of T0 steps (``common.chunk_steps``, about 4 MB of gate
  gradients ``da``; a function of the shapes alone), each direction's chunks in visit order
  (``sweep.py``): the step loops write the chunk's ``da`` into a scratch of T0 + 1 steps
  (reused between calls on a thread, see ``release_scratch``; nothing grows with S), then the
  chunk's rows of ``dX`` and its partial products of ``dW``, ``dR`` (fresh, then added in the
  chunks' order) are large GEMMs over the chunk's rows.  The NumPy step loop goes piece by
  piece (L2-sized): it first fills ``da`` with the factors that do not depend on the carried
  gradients (``τ·o(1-o)``, ``c̃·i(1-i)``, ...) using a few bulk ufuncs, then runs the steps,
  which multiply them in place by ``dH``/``dC`` and do one GEMM ``da·R`` per step (7 ufuncs).
  On the packed-kernel path of large problems, one direction, dX's rows are computed by the
  step loops while each ``da_t`` is in cache.  (Until issue #33, ``da`` was one ``[S, B, D,
  4H]`` buffer and dW, dR one product over all steps, ``_jit_goto.gemm2``: the fixed chunks
  make the checkpointed ops' recomputed segments give the same bits.)
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

Modules: ``cell`` (LSTMCell and its gradients), ``forward`` (LSTMTraining), ``backward``
(LSTMGrad, chunk by chunk in ``sweep``; its NumPy step loops in ``bptt``), ``checkpointed``
(LSTMTrainingCheckpointed and LSTMGradRecompute: checkpoints and recomputed segments, with the
bits of LSTMTraining + LSTMGrad), ``common`` (checks, the size thresholds, the fixed chunk T0).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .....ops.lstm import LSTMGradOp, LSTMTrainingOp, chunk_steps, unit_steps
from .....ops.lstm_checkpointed import LSTMGradRecomputeOp, LSTMTrainingCheckpointedOp
from .. import jit
from ..registry import kernel
from .backward import lstm_grad, release_scratch
from .checkpointed import lstm_grad_recompute, lstm_training_checkpointed
from .cell import grad_lstm_cell_input, grad_lstm_cell_input_fused, lstm_cell
from . import sweep
from .common import this_thread
from .forward import lstm_training

__all__ = [
    "grad_lstm_cell_input",
    "grad_lstm_cell_input_fused",
    "lstm_cell",
    "lstm_grad",
    "lstm_grad_recompute",
    "lstm_training",
    "lstm_training_checkpointed",
    "release_scratch",
]


def _warm_layers(dtype: Any) -> None:
    """``warm`` hook of LSTMTraining and LSTMGrad (see ``gradir.backends.cpu.kernels``): run both on a
    tiny layer, with and without peepholes (and the forward's other paths), and the backward on
    both of its compiled paths (the whole loop and the per-step one), so numba builds or loads
    all their machine code."""
    dt = np.dtype(dtype)
    jl = jit.load("lstm")
    if dt not in (np.float32, np.float64) or jl is None:
        return
    if jl.gemm_module.FAST_LARGE:
        jit.load("goto")  # LSTMGrad's dW and dR on large problems (``_jit_goto.gemm2``)
    S, nb, I, h = 2, 1, 1, 1
    X = np.full((S, nb, I), 0.5, dt)
    W, R = np.full((1, 4 * h, I), 0.5, dt), np.full((1, 4 * h, h), 0.5, dt)
    try:
        # the forward's step-by-step path (rows shorter than the sequence) and its whole loop on
        # strided per-direction results (bidirectional)
        lstm_training(X, W, R, SL=np.array([1], np.int32), hidden_size=h)
        lstm_training(X, np.concatenate([W, W]), np.concatenate([R, R]), hidden_size=h, direction="bidirectional")
        for P in (None, np.full((1, 3 * h), 0.5, dt)):
            HAll, _, _, CAll, iofc = lstm_training(X, W, R, P=P, hidden_size=h)
            for per_step in (False, True):
                this_thread.per_step = per_step  # this thread only
                lstm_grad(X, W, R, None, None, None, HAll, CAll, iofc, HAll, P=P, hidden_size=h)
    finally:
        this_thread.per_step = False



# ``sweep._SCRATCH_MAX_BYTES``: a larger buffer is not kept past the call (tests/test_memory_measured.py checks
# that the two agree)
KEPT_MAX_BYTES = 256 << 20


def _grad_buffers(operands: Any, results: Any) -> tuple[int, int, int]:
    """Bytes of LSTMGrad's buffers (``sweep.Sweep``): a chunk's window of da (``T0 + 1`` steps of
    ``[B, D, 4H]``), the step loops' two-row ring, and the chunk's fresh partial product of dW, then of dR
    (one buffer; none where each chunk's products are added straight into them, ``sweep.accumulating``)."""
    X, dW = results[0], results[1]
    S, nb, I = X.shape
    D, h4 = dW.shape[0], dW.shape[1]
    item = X.dtype.itemsize
    T0 = chunk_steps(S, nb, D, h4 // 4, item)
    da = (min(S, T0 + 1) * nb * D * h4) * item + 64
    ring = 2 * nb * D * (h4 + 64 // item) * item + 64
    # dW's partial product, then dR's, in one buffer; none where the products are added straight into them
    acc = sweep.accumulating(nb, T0, I, h4 // 4, np.dtype(f"f{item}")) if item in (4, 8) else None
    tmp = 0 if acc is not None else h4 * max(I, h4 // 4) * item
    return da, ring, tmp


def _grad_scratch(operands: Any, results: Any, attrs: Any) -> int:
    """LSTMGrad's scratch (``KernelInfo.scratch``): its buffers (``_grad_buffers``) while it runs."""
    return sum(_grad_buffers(operands, results))


def _grad_kept(operands: Any, results: Any, attrs: Any) -> dict[str, int]:
    """What its thread keeps past the step (``KernelInfo.kept``): the da window and the ring, each up to
    ``KEPT_MAX_BYTES`` (named as ``sweep.scratch`` names them: the checkpointed backward shares them)."""
    da, ring, _ = _grad_buffers(operands, results)
    return {name: n for name, n in (("lstm buf", da), ("lstm ring", ring)) if n - 64 <= KEPT_MAX_BYTES}


def _recompute_scratch(operands: Any, results: Any, attrs: Any) -> int:
    """LSTMGradRecompute's scratch: LSTMGrad's buffers, plus a unit's recomputed values (``L + 1`` steps of
    the gates, C and H: ``[L + 1, D, B, 6H]``) and, unless ``reuse_states``, its own copy of the used snapshot slots
    (``checkpointed.lstm_grad_recompute``; ``recurrence.py`` counts the same, against LSTMGrad's)."""
    X, dW = results[0], results[1]
    S, nb, _ = X.shape
    D, h = dW.shape[0], dW.shape[1] // 4
    item = X.dtype.itemsize
    L = unit_steps(attrs["segment"], chunk_steps(S, nb, D, h, item), S)
    s = min(attrs["checkpoints"], -(-S // L))
    copy = 0 if attrs.get("reuse_states") else s * 2  # the snapshots' copy (none when written over States)
    return _grad_scratch(operands, results, attrs) + ((min(L, S) + 1) * 6 + copy) * D * nb * h * item


def _checkpointed_scratch(operands: Any, results: Any, attrs: Any) -> int:
    """LSTMTrainingCheckpointed's scratch: one chunk's cell states and gates (``[T0, D, B, 5H]``; LSTMTraining
    writes them into its results CAll and iofc)."""
    HAll = results[0]
    S, D, nb, h = HAll.shape
    T0 = chunk_steps(S, nb, D, h, HAll.dtype.itemsize)
    return min(T0, S) * D * nb * 5 * h * HAll.dtype.itemsize


def _recompute_donate(operands: Any, results: Any, attrs: Any) -> list[tuple[int, int]]:
    """``KernelInfo.donate`` of LSTMGradRecompute: dX (``[S, B, I]``) over dHAll (``[S, 1, B, H]``, operand 9)
    when there is one direction and ``I == H``: the same bytes per step and row, and every chunk's step loops
    read a step's dHAll before they write its dX (``sweep.Sweep``: a chunk's dX rows are written by its
    step loops at the step, or by one product after them, and no later chunk reads its dHAll)."""
    X, dHAll = operands[0], operands[9] if len(operands) > 9 else None
    if dHAll is None or dHAll.shape[1] != 1 or X.shape[2] != dHAll.shape[3]:
        return []
    return [(0, 9)]


# Registered here, beside their warm hook, which runs both.  (LSTMTraining's own step temporaries are a
# few ``[B, 4H]`` rows: not declared.)
kernel(LSTMTrainingOp, blas=True, warm=_warm_layers)(lstm_training)
kernel(LSTMGradOp, blas=True, warm=_warm_layers, scratch=_grad_scratch, kept=_grad_kept)(lstm_grad)
kernel(LSTMTrainingCheckpointedOp, blas=True, warm=_warm_layers, scratch=_checkpointed_scratch)(
    lstm_training_checkpointed)
kernel(LSTMGradRecomputeOp, blas=True, warm=_warm_layers, scratch=_recompute_scratch, kept=_grad_kept,
       donate=_recompute_donate)(
    lstm_grad_recompute)
