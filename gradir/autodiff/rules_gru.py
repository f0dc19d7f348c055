"""The gradient rules of the GRU ops (``gradir/ops/gru.py``): ``GRUTraining`` -> ORT's ``GRUGrad``, ``GRUCell`` ->
``GradGRUCellInput``.  Imported by the package (``gradir/autodiff/__init__.py``)."""

from __future__ import annotations

from ..ir.op import Op
from .gradrules import Emitter, rule


@rule("GRUTraining")
def _gru_training(e: Emitter, op: Op, cts: list, need: list) -> list:
    """Exactly one ``GRUGrad``, fed with the operands, the recomputed HAll and ZRH, and the upstream
    gradients of HAll and HFinal (ORT's ``GetGRUGradient``, with every input slot listed).

    The gradient of ZRH (the gate activations) has no operand to enter the recurrence through, so a path
    from it to an output is an error (``NO_GRADIENT_RESULTS``: the driver reports it)."""
    x, w, r, b, sl, h0 = (list(op.operands) + [None] * 6)[:6]
    hall, _, zrh = op.results
    attrs = {a.name: op.attrs[a.name] for a in op.ATTRS}
    dx, dw, dr, db, dh0 = e.GRUGrad(x, w, r, b, sl, h0, hall, zrh, cts[0], cts[1], **attrs)
    return [dx, dw, dr, db if b is not None else None, None, dh0 if h0 is not None else None]


@rule("GRUTrainingCheckpointed")
def _gru_training_checkpointed(e: Emitter, op: Op, cts: list, need: list) -> list:
    """Exactly one ``GRUGradRecompute`` from the checkpoints (the memory planner's rewrite of GRUTraining,
    differentiated as GRUTraining is: States, like ZRH, takes no gradient)."""
    x, w, r, b, sl, h0 = (list(op.operands) + [None] * 6)[:6]
    attrs = {a.name: op.attrs[a.name] for a in op.ATTRS}
    dx, dw, dr, db, dh0 = e.GRUGradRecompute(x, w, r, b, sl, h0, op.results[2], cts[0], cts[1], **attrs)
    return [dx, dw, dr, db if b is not None else None, None, dh0 if h0 is not None else None]


@rule("GRUCell")
def _gru_cell(e: Emitter, op: Op, cts: list, need: list) -> list:
    """One ``GradGRUCellInput`` per operand that needs a gradient (and no other), as for ``LSTMCell``."""
    hs = op.attrs["hidden_size"]
    return [e.GradGRUCellInput(cts[0], *op.operands, input_index=k, hidden_size=hs) if need[k] else None
            for k in range(6)]


@rule("LSTMTrainingCheckpointed")
def _lstm_training_checkpointed(e: Emitter, op: Op, cts: list, need: list) -> list:
    """Exactly one ``LSTMGradRecompute`` from the checkpoints (the memory planner's rewrite of
    LSTMTraining, differentiated as LSTMTraining is: States, like CAll and iofc, takes no gradient)."""
    x, w, r, b, sl, h0, c0, p = (list(op.operands) + [None] * 8)[:8]
    states = op.results[3]
    attrs = {a.name: op.attrs[a.name] for a in op.ATTRS}
    dx, dw, dr, db, dh0, dc0, dp = e.LSTMGradRecompute(x, w, r, b, sl, h0, c0, p, states, cts[0], cts[1], cts[2],
                                                       **attrs)
    return [dx, dw, dr, db if b is not None else None, None, dh0 if h0 is not None else None,
            dc0 if c0 is not None else None, dp if p is not None else None]
