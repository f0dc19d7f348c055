"""LSTMTrainingCheckpointed and LSTMGradRecompute: an LSTM layer that keeps only checkpoints of its
(h, c) state and recomputes the gates segment by segment in the backward (docs/memory.md,
"Recurrences"), with the bits of LSTMTraining + LSTMGrad.

The layer's steps form ``n`` units of ``L`` steps (``segment`` rounded up to whole fixed chunks of
``T0``; the last unit may be shorter), in each direction's order.  The checkpoints follow Griewank's
binomial schedule for ``checkpoints`` slots (``gradir.transforms.memory.revolve``): the forward runs
the schedule's first descent (its own sweep, which computes every step for HAll anyway) and stores
its snapshots in ``States`` (``[checkpoints, 2, D, B, H]``: h, then c; slot 0 the state before the
first step); the backward runs the rest on a copy: restores, advances (the forward again without
keeping anything), new snapshots, and for each unit from the last to the first its forward again
with its values kept in a segment buffer (``L + 1`` steps: the step before the unit too), then
LSTMGrad's chunks over it (``sweep.Sweep``).  The same per-chunk and per-step code as the whole
run, from the same carried states: the same bits.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .....ops.lstm import unit_steps
from .....transforms.memory import revolve
from . import common
from .backward import finish_results, grad_operands
from .common import Steps, check_dtype, check_layer_attrs, expect, result, seq_lengths
from .forward import ForwardDirection, initial_state
from .sweep import Sweep, visit_chunks, window

__all__ = ["lstm_training_checkpointed", "lstm_grad_recompute", "layout"]


def layout(S: int, nb: int, D: int, h: int, dtype: Any, segment: int, checkpoints: int) -> tuple[int, int, int, int]:
    """``(T0, L, n, s)``: the fixed chunk, the unit's steps, the units and the slots used."""
    if segment < 1 or checkpoints < 1:
        raise ValueError(f"LSTM checkpoints: segment and checkpoints must be >= 1, got {segment}, {checkpoints}")
    T0 = common.chunk_steps(S, nb, D, h, dtype)
    L = unit_steps(segment, T0, S)
    n = -(-S // L)
    return T0, L, n, min(checkpoints, n)


def _unit(i: int, n: int, L: int, S: int, rev: bool) -> tuple[int, int]:
    """Steps ``[lo, hi)`` of unit ``i`` (the direction's order: the reverse direction's unit 0 is last)."""
    j = n - 1 - i if rev else i
    return j * L, min(S, (j + 1) * L)


def _chunks(lo: int, hi: int, T0: int, rev: bool) -> list[tuple[int, int]]:
    """The fixed chunks of ``[lo, hi)`` in the forward's order."""
    c = [(a, min(hi, a + T0)) for a in range(lo, hi, T0)]
    return c[::-1] if rev else c


def _direction(X: np.ndarray, W: np.ndarray, R: np.ndarray, B: Any, P: Any, H0: Any, C0: Any, steps: Steps,
               d: int, rev: bool, T0: int, wanted: bool | None = None) -> ForwardDirection:
    return ForwardDirection(X, W[d], R[d], None if B is None else B[d], None if P is None else P[d],
                            None if H0 is None else H0[d], None if C0 is None else C0[d], steps, rev, T0, wanted)


def lstm_training_checkpointed(X: np.ndarray, W: np.ndarray, R: np.ndarray, B: np.ndarray | None = None,
                               SL: np.ndarray | None = None, H0: np.ndarray | None = None,
                               C0: np.ndarray | None = None, P: np.ndarray | None = None, *, out: Any = None,
                               hidden_size: int, direction: str = "forward", activations: Any = None,
                               clip: float | None = None, input_forget: int = 0, segment: int,
                               checkpoints: int) -> tuple[np.ndarray, ...]:
    """LSTMTraining keeping checkpoints; returns ``(HAll, HFinal, CFinal, States)``."""
    op = "LSTMTrainingCheckpointed"
    D = check_layer_attrs(op, direction, activations, clip, input_forget)
    dt = check_dtype(op, X, W, R, B, H0, C0, P)
    X = np.ascontiguousarray(X)
    S, nb, I = X.shape
    h = hidden_size
    expect(op, ("W", W, (D, 4 * h, I)), ("R", R, (D, 4 * h, h)), ("B", B, (D, 8 * h)),
           ("H0", H0, (D, nb, h)), ("C0", C0, (D, nb, h)), ("P", P, (D, 3 * h)))
    steps = Steps(seq_lengths(op, SL, S, nb), S, dt)
    T0, L, n, s = layout(S, nb, D, h, dt, segment, checkpoints)
    HAll = result(out, 0, (S, D, nb, h), dt)
    HFinal = result(out, 1, (D, nb, h), dt)
    CFinal = result(out, 2, (D, nb, h), dt)
    States = result(out, 3, (checkpoints, 2, D, nb, h), dt)
    States[...] = 0
    snaps = {a.unit: a.slot for a in revolve.descent(revolve.schedule(n, s)) if a.kind == "snapshot"}
    m = min(T0, S)
    CA = np.empty((m, D, nb, h), dt)  # one chunk's cell states and gates (the full run keeps them all)
    G = np.empty((m, D, nb, 4 * h), dt)
    rows = np.arange(nb)
    for d in range(D):
        rev = direction == "reverse" or d == 1
        last = (np.zeros(nb, np.intp) if rev else steps.lengths - 1 if steps.lengths is not None
                else np.full(nb, S - 1, np.intp))
        hs, cs = initial_state(None if H0 is None else H0[d], nb, h, dt), initial_state(
            None if C0 is None else C0[d], nb, h, dt)
        with _direction(X, W, R, B, P, H0, C0, steps, d, rev, T0) as fd:
            for i in range(n):
                slot = 0 if i == 0 else snaps.get(i)
                if slot is not None:
                    States[slot, 0, d] = hs
                    States[slot, 1, d] = cs
                for lo, hi in _chunks(*_unit(i, n, L, S, rev), T0, rev):
                    fd.run(lo, hi, HAll[lo:hi, d], CA[: hi - lo, d], G[: hi - lo, d], hs, cs)
                    ends = np.flatnonzero((last >= lo) & (last < hi))
                    if ends.size:
                        HFinal[d, ends] = HAll[last[ends], d, rows[ends]]
                        CFinal[d, ends] = CA[last[ends] - lo, d, rows[ends]]
    return HAll, HFinal, CFinal, States


def lstm_grad_recompute(X: np.ndarray, W: np.ndarray, R: np.ndarray, B: np.ndarray | None = None,
                        SL: np.ndarray | None = None, H0: np.ndarray | None = None, C0: np.ndarray | None = None,
                        P: np.ndarray | None = None, States: np.ndarray | None = None,
                        dHAll: np.ndarray | None = None, dHFinal: np.ndarray | None = None,
                        dCFinal: np.ndarray | None = None, *, out: Any = None, hidden_size: int,
                        direction: str = "forward", activations: Any = None, clip: float | None = None,
                        input_forget: int = 0, segment: int, checkpoints: int,
                        reuse_states: int = 0) -> tuple[np.ndarray, ...]:
    """LSTMGrad from LSTMTrainingCheckpointed's ``States``; returns ``(dX, dW, dR, dB, dH0, dC0, dP)``.  With
    ``reuse_states`` the backward's new snapshots go over ``States`` (the plan checked that nothing else reads
    it), else into a copy of its own."""
    op = "LSTMGradRecompute"
    if States is None:
        raise ValueError(f"{op}: operand States is required")
    k, given, res = grad_operands(
        op, X, W, R, SL, H0, C0, dHAll, dHFinal, dCFinal, P, out, hidden_size, direction, activations, clip,
        input_forget, more=(("States", States, lambda S, D, nb, h: (checkpoints, 2, D, nb, h)),))
    check_dtype(op, k.X, B, States)
    expect(op, ("B", B, (k.D, 8 * k.h)))
    S, nb, h, D, dt = k.S, k.nb, k.h, k.D, k.dtype
    T0, L, n, s = layout(S, nb, D, h, dt, segment, checkpoints)
    actions = revolve.backward_actions(revolve.schedule(n, s))
    # the backward's snapshots: over the operand's (read by this op alone) or in a copy (the operand stays as it is)
    own = reuse_states and States.dtype == dt and States.flags.c_contiguous and States.flags.writeable
    slots = States[:s] if own else np.array(States[:s], dt)
    m = min(L, S) + 1
    G = np.empty((m, D, nb, 4 * h), dt)  # one unit's values and the step before it
    CA = np.empty((m, D, nb, h), dt)
    HA = np.empty((m, D, nb, h), dt)
    alive = k.steps.alive
    # made before anything holds BLAS: the forward's two-halves decision is LSTMTraining's
    fds = [_direction(k.X, k.W, k.R, B, k.P, k.H0, k.C0, k.steps, d, direction == "reverse" or d == 1, T0)
           for d in range(D)]
    with Sweep(k) as sw:
        for d in range(D):
            sw.begin(d)
            rev = sw.rev
            hs, cs = np.empty((nb, h), dt), np.empty((nb, h), dt)
            with fds[d] as fd:

                def forward(lo: int, hi: int, off: int) -> None:
                    for a, b in _chunks(lo, hi, T0, rev):
                        fd.run(a, b, HA[a - off: b - off, d], CA[a - off: b - off, d], G[a - off: b - off, d], hs, cs)

                for a in actions:
                    if a.kind == "restore":
                        hs[...] = slots[a.slot, 0, d]
                        cs[...] = slots[a.slot, 1, d]
                    elif a.kind == "snapshot":
                        slots[a.slot, 0, d] = hs
                        slots[a.slot, 1, d] = cs
                    elif a.kind == "advance":
                        for u in range(a.unit, a.to):
                            lo, hi = _unit(u, n, L, S, rev)
                            forward(lo, hi, lo)
                    else:  # reverse: the unit again, its values kept, then its chunks backward
                        lo, hi = _unit(a.unit, n, L, S, rev)
                        off = (lo - 1 if lo > 0 else lo) if not rev else lo
                        halo = lo - 1 if not rev else hi  # the step before the unit, in the forward's order
                        if 0 <= halo < S:  # its values as the whole run left them
                            j = halo - off
                            HA[j, d] = hs if halo < alive else 0
                            CA[j, d] = cs if halo < alive else 0
                        forward(lo, hi, off)
                        for c_lo, c_hi in visit_chunks(S, T0, rev):
                            if lo <= c_lo < hi:
                                base, top = window(c_lo, c_hi, S, rev)
                                sw.chunk(c_lo, c_hi, G[base - off: top - off], CA[base - off: top - off],
                                         HA[base - off: top - off])
            sw.end(d)
        sw.finish()
    return finish_results(given, res)
