"""GRUTrainingCheckpointed and GRUGradRecompute: a GRU layer that keeps only checkpoints of its hidden
state and recomputes HAll and the gates (ZRH) segment by segment in the backward (docs/memory.md,
"Recurrences"), with the bits of GRUTraining + GRUGrad.

Everything runs in the cores' time order (``gru.py``: a reverse direction's rows reversed within their
lengths), where the layer's steps form ``n`` units of ``L`` steps (``segment`` rounded up to whole fixed
chunks of ``T0``; the last unit may be shorter).  The checkpoints follow Griewank's binomial schedule for
``checkpoints`` slots (``gradir.transforms.memory.revolve``): the forward runs the schedule's first
descent (its own sweep, which computes every step for HAll anyway) and stores its snapshots of the
carried state in ``States`` (``[checkpoints, D, B, H]``; slot 0 the state before the first step); the
backward runs the rest on a copy: restores, advances (the forward again, keeping nothing), new snapshots,
and for each unit from the last to the first its forward again with HAll and ZRH kept in a unit buffer
(``L + 1`` steps of HAll: the step before the unit too), then GRUGrad's chunks over it
(``gru_sweep.Backward``).  The same per-chunk calls as the whole run, from the same carried states and
the same operands: the same bits.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ....ops.gru_checkpointed import GRUGradRecomputeOp, GRUTrainingCheckpointedOp
from ....ops.lstm import unit_steps
from ....transforms.memory import revolve
from .gru import (check_operands, cores, declared_scratch, direction_parts, forward_core, lengths_of, reversal,
                  reverse_rows, warm_layers)
from .gru_sweep import Backward, Forward, chunk_steps, chunks, halo
from .lstm.common import check_dtype, expect, result
from .registry import kernel

__all__ = ["gru_training_checkpointed", "gru_grad_recompute", "layout"]


def layout(S: int, nb: int, D: int, h: int, dtype: Any, segment: int, checkpoints: int) -> tuple[int, int, int, int]:
    """``(T0, L, n, s)``: the fixed chunk, the unit's steps, the units and the slots used."""
    if segment < 1 or checkpoints < 1:
        raise ValueError(f"GRU checkpoints: segment and checkpoints must be >= 1, got {segment}, {checkpoints}")
    T0 = chunk_steps(S, nb, D, h, dtype)
    L = unit_steps(segment, T0, S)
    n = -(-S // L) if S else 0
    return T0, L, n, min(checkpoints, max(1, n))


def gru_training_checkpointed(X: np.ndarray, W: np.ndarray, R: np.ndarray, B: np.ndarray | None = None,
                              SL: np.ndarray | None = None, H0: np.ndarray | None = None, *, hidden_size: int,
                              direction: str = "forward", activations: Any = None, clip: Any = None,
                              linear_before_reset: int = 0, segment: int, checkpoints: int,
                              out: Any = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """GRUTraining keeping checkpoints; returns ``(HAll, HFinal, States)``."""
    op = "GRUTrainingCheckpointed"
    dt = check_dtype(op, X, W, R, B, H0)
    S, nb, I, n, D = check_operands(op, X, W, R, B, SL, H0, hidden_size, direction, activations, clip,
                                    linear_before_reset)
    T0, L, units, s = layout(S, nb, D, n, dt, segment, checkpoints)
    HAll = result(out, 0, (S, D, nb, n), dt)
    HFinal = result(out, 1, (D, nb, n), dt)
    States = result(out, 2, (checkpoints, D, nb, n), dt)
    States[...] = 0
    c = None if clip is None else float(clip)
    fwd, _ = cores(dt, c)
    sl = lengths_of(SL)
    X = np.ascontiguousarray(X)
    snaps = {a.unit: a.slot for a in revolve.descent(revolve.schedule(units, s)) if a.kind == "snapshot"} \
        if units else {}
    for d in range(D):
        rev = direction == "reverse" or d == 1
        idx = reversal(sl, S, nb) if rev else None
        hall = np.empty((S, nb, n), dt) if rev else HAll[:, d]
        f = Forward(fwd, reverse_rows(X, idx) if rev else X, direction_parts(W, R, B, H0, d, n), sl,
                    linear_before_reset, c, T0)
        for i in range(units):
            slot = 0 if i == 0 else snaps.get(i)
            if slot is not None:
                States[slot, d] = f.h
            for lo, hi in chunks(i * L, min(S, (i + 1) * L), T0):
                f.run(lo, hi, hall[lo:hi], None)  # the gates go to a chunk's scratch
        HFinal[d] = f.h
        if rev:
            HAll[:, d] = reverse_rows(hall, idx)
    return HAll, HFinal, States


def gru_grad_recompute(X: np.ndarray, W: np.ndarray, R: np.ndarray, B: np.ndarray | None, SL: np.ndarray | None,
                       H0: np.ndarray | None, States: np.ndarray, dHAll: np.ndarray | None = None,
                       dHFinal: np.ndarray | None = None, *, hidden_size: int, direction: str = "forward",
                       activations: Any = None, clip: Any = None, linear_before_reset: int = 0, segment: int,
                       checkpoints: int, reuse_states: int = 0, out: Any = None) -> tuple[np.ndarray, ...]:
    """GRUGrad from GRUTrainingCheckpointed's ``States``; returns ``(dX, dW, dR, dB, dH0)``.  With
    ``reuse_states`` the backward's new snapshots go over ``States`` (the plan checked that nothing else
    reads it), else into a copy of its own."""
    op = "GRUGradRecompute"
    if States is None:
        raise ValueError(f"{op}: operand States is required")
    dt = check_dtype(op, X, W, R, B, H0, States, dHAll, dHFinal)
    S, nb, I, n, D = check_operands(op, X, W, R, B, SL, H0, hidden_size, direction, activations, clip,
                                    linear_before_reset)
    expect(op, ("States", States, (checkpoints, D, nb, n)), ("dHAll", dHAll, (S, D, nb, n)),
           ("dHFinal", dHFinal, (D, nb, n)))
    T0, L, units, s = layout(S, nb, D, n, dt, segment, checkpoints)
    dX = result(out, 0, X.shape, dt)
    dW = result(out, 1, W.shape, dt)
    dR = result(out, 2, R.shape, dt)
    dB = result(out, 3, (D, 6 * n), dt)
    dH0 = result(out, 4, (D, nb, n), dt)
    c = None if clip is None else float(clip)
    fwd, bwd = cores(dt, c)
    numpy_core = fwd is forward_core
    sl = lengths_of(SL)
    X = np.ascontiguousarray(X)
    actions = revolve.backward_actions(revolve.schedule(units, s)) if units else []
    m = min(L, S)
    HA = np.empty((m + 1, nb, n), dt)  # one unit's HAll and the step before it
    Z = np.empty((m, nb, 3 * n), dt)  # one unit's gates
    dxd = np.empty((S, nb, I), dt) if D == 2 else None
    for d in range(D):
        rev = direction == "reverse" or d == 1
        idx = reversal(sl, S, nb) if rev else None
        parts = direction_parts(W, R, B, H0, d, n)
        xd = reverse_rows(X, idx) if rev else X
        f = Forward(fwd, xd, parts, sl, linear_before_reset, c, T0)
        g = Backward(bwd, xd, parts, sl, None if dHFinal is None else dHFinal[d], linear_before_reset, c)
        dall = None if dHAll is None else (reverse_rows(dHAll[:, d], idx) if rev else dHAll[:, d])
        target = np.empty((S, nb, I), dt) if rev else (dX if d == 0 else dxd)
        h0 = np.zeros((nb, n), dt) if parts[4] is None else np.ascontiguousarray(parts[4], dt)
        # the backward's snapshots: over the operand's (read by this op alone) or a copy (the operand stays as it is)
        own = reuse_states and States.dtype == dt and States.flags.writeable
        slots = States[:s, d] if own else np.array(States[:s, d], dt)

        def forward(lo: int, hi: int, keep: bool) -> None:
            for a, b in chunks(lo, hi, T0):
                f.run(a, b, HA[a - lo + 1: b - lo + 1], Z[a - lo: b - lo] if keep else None)

        for a in actions:
            if a.kind == "restore":
                f.h[...] = slots[a.slot]
            elif a.kind == "snapshot":
                slots[a.slot] = f.h
            elif a.kind == "advance":
                for u in range(a.unit, a.to):
                    forward(u * L, min(S, (u + 1) * L), False)
            else:  # reverse: the unit again, its values kept, then its chunks backward
                lo, hi = a.unit * L, min(S, (a.unit + 1) * L)
                HA[0] = h0 if lo == 0 else halo(f.h, sl, lo - 1, numpy_core)
                forward(lo, hi, True)
                for c_lo, c_hi in reversed(chunks(lo, hi, T0)):
                    j = c_lo - lo
                    g.run(c_lo, c_hi, HA[j], HA[j + 1: j + 1 + c_hi - c_lo], Z[j: j + c_hi - c_lo],
                          None if dall is None else dall[c_lo:c_hi], target[c_lo:c_hi])
        dW[d], dR[d], dB[d], dH0[d] = g.dW, g.dR, g.dB, g.dh
        if rev:
            (dX if d == 0 else dxd)[...] = reverse_rows(target, idx)
    if D == 2:
        dX += dxd
    return dX, dW, dR, dB, dH0


kernel(GRUTrainingCheckpointedOp, blas=True, warm=warm_layers, scratch=declared_scratch("checkpointed"))(
    gru_training_checkpointed)
kernel(GRUGradRecomputeOp, blas=True, warm=warm_layers, scratch=declared_scratch("recompute"))(gru_grad_recompute)
