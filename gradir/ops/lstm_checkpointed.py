"""The checkpointed LSTM layer (docs/memory.md, "Recurrences"): LSTMTraining and LSTMGrad that keep only
checkpoints of the (h, c) state between them and recompute the gates segment by segment, with the
same bits.  The memory planner (``gradir.transforms.memory.recurrence``) rewrites an
LSTMTraining/LSTMGrad pair into these under a memory budget."""

from __future__ import annotations

from math import comb
from typing import Any

import numpy as np

from ..ir.op import Attr, BackwardOp, InferContext, Op, Operand
from ..ir.types import TensorType
from . import references
from .lstm import (LAYER_ATTRS, LayerCheck, LSTMGradOp, LSTMTrainingOp, check_layer_attrs, layer_example,
                   layer_flops, chunk_steps, unit_steps)

CHECKPOINT_ATTRS = LAYER_ATTRS + (
    Attr("segment", "int", min=1, doc="steps per unit (rounded up to whole fixed chunks of the kernels)"),
    Attr("checkpoints", "int", min=1, doc="snapshot slots of the (h, c) state (binomial checkpointing)"),
)
# the backward ops' snapshots written over their States operand (docs/memory.md, "Recurrences")
REUSE_STATES = Attr("reuse_states", "int", 0, min=0, max=1,
                    doc="1: the backward writes its new snapshots over States (which must then be read by this op "
                        "alone, and be neither an input nor an output: checked when the graph is compiled); 0: "
                        "into a copy of its own. The memory planner's rewrite sets 1")
def states_overwritten(op: type, attrs: Any) -> tuple[int, ...]:
    """``Op.overwrites`` of the checkpointed backward ops: their ``States`` operand when ``reuse_states``
    (``schedule.build_plan`` checks that nothing else reads it)."""
    return tuple(i for i, o in enumerate(op.OPERANDS) if o.name == "States") if attrs.get("reuse_states") else ()


_NO_ONNX = "a gradir memory-planning rewrite of LSTMTraining/LSTMGrad (export the unbudgeted program)"


def _states(c: LayerCheck, k: int) -> TensorType:
    return TensorType(c.dtype, [k, 2, c.D, c.B, c.H])


class LSTMTrainingCheckpointedOp(Op):
    """LSTMTraining that keeps, instead of every step's C and gates, ``checkpoints`` snapshots of the
    (h, c) state (``States`` ``[checkpoints, 2, D, B, H]``) at the units binomial checkpointing
    chooses; HAll, HFinal and CFinal as LSTMTraining's, bit for bit."""

    @classmethod
    def flops(cls, operands: Any, results: Any, attrs: Any) -> float:
        return layer_flops(operands, attrs)

    NO_ONNX = _NO_ONNX
    SHARDING = "lstm_training_checkpointed"
    OPERANDS = LSTMTrainingOp.OPERANDS
    RESULTS = ("HAll", "HFinal", "CFinal", "States")
    ATTRS = CHECKPOINT_ATTRS
    # differentiated by one LSTMGradRecompute (gradir/autodiff/rules_gru.py); the checkpoints take no gradient
    NO_GRADIENT_RESULTS = (3,)

    def check_attrs(self, ctx: InferContext) -> None:
        check_layer_attrs(ctx)

    def infer(self, ctx: InferContext) -> list[TensorType]:
        c = LayerCheck(ctx)
        c.x(0)
        s = c.shapes()
        for _ in range(2):
            for i, k in ((1, "W"), (2, "R"), (3, "B"), (5, "state"), (6, "state"), (7, "P")):
                c.check(i, s[k])
            c.sl(4)
        return [c.result("all"), c.result("state"), c.result("state"), _states(c, ctx.attrs["checkpoints"])]

    @classmethod
    def example(cls, rng: Any, dtype: Any) -> tuple[list[Any], dict[str, Any]]:
        """LSTMTraining's example, in units of 2 steps with 2 slots."""
        return layer_example(rng, dtype)[:8], {"hidden_size": 2, "segment": 2, "checkpoints": 2}

    @classmethod
    def reference(cls, *arrays: Any, hidden_size: int, direction: str = "forward", segment: int,
                  checkpoints: int, **_: Any) -> Any:
        HAll, HFinal, CFinal, CAll, _iofc = references.lstm_training(*arrays, hidden_size=hidden_size,
                                                                     direction=direction)
        return HAll, HFinal, CFinal, reference_states(arrays, HAll, CAll, direction, segment, checkpoints)


def descent_slots(n: int, s: int) -> dict[int, int]:
    """Unit -> slot of the snapshots the forward takes: the first descent of the binomial schedule of
    ``n`` units with ``s`` slots (``gradir.transforms.memory.revolve``, a layer above the ops; a test
    checks the two agree): from each snapshot, advance by the schedule's split of what is left, with
    one slot fewer, while a slot is free."""
    def t(m: int, k: int) -> int:  # revolve.min_advances
        r = 0
        while comb(k + r, k) < m:
            r += 1
        return r * m - (comb(k + r, k + 1) if r >= 1 else 0)

    out, start, m, free = {0: 0}, 0, n, s - 1
    while m > 1 and free > 0:
        k = free + 1
        best = t(m, k)
        split = next(j for j in range(1, m) if j + t(m - j, k - 1) + t(j, k) == best)
        start, m = start + split, m - split
        out[start] = s - free  # slots taken in the order revolve.schedule takes them
        free -= 1
    return out


def reference_states(arrays: Any, HAll: np.ndarray, CAll: np.ndarray, direction: str, segment: int,
                     checkpoints: int) -> np.ndarray:
    """The checkpoints the kernels keep (the state before each snapshotted unit, in the direction's
    order), from a whole forward's HAll and CAll."""
    X, SL, H0, C0 = arrays[0], arrays[4], arrays[5], arrays[6]
    S, D, nb, h = HAll.shape
    T0 = chunk_steps(S, nb, D, h, X.dtype.itemsize)
    L = unit_steps(segment, T0, S)
    n = -(-S // L)
    alive = S if SL is None else int(np.max(SL))
    out = np.zeros((checkpoints, 2, D, nb, h), HAll.dtype)
    snaps = descent_slots(n, min(n, checkpoints))
    for d in range(D):
        rev = direction == "reverse" or d == 1
        for i, slot in snaps.items():
            j = n - 1 - i if rev else i
            lo, hi = j * L, min(S, (j + 1) * L)
            t = hi if rev else min(lo - 1, alive - 1)
            if (rev and hi >= alive) or (not rev and lo == 0):
                out[slot, 0, d] = 0 if H0 is None else H0[d]
                out[slot, 1, d] = 0 if C0 is None else C0[d]
            else:
                out[slot, 0, d] = HAll[t, d]
                out[slot, 1, d] = CAll[t, d]
    return out


class LSTMGradRecomputeOp(BackwardOp):
    """LSTMGrad from LSTMTrainingCheckpointed's ``States``: the gates and cell states recomputed unit by
    unit in the backward sweep (binomial checkpointing); LSTMGrad's results, bit for bit."""

    @classmethod
    def flops(cls, operands: Any, results: Any, attrs: Any) -> float:
        return 3 * layer_flops(operands, attrs)  # at least one forward again

    NO_ONNX = _NO_ONNX
    SHARDING = "lstm_grad_recompute"
    OPERANDS = (*LSTMTrainingOp.OPERANDS, Operand("States", doc="[checkpoints, 2, D, B, H]"),
                Operand("dHAll", optional=True), Operand("dHFinal", optional=True),
                Operand("dCFinal", optional=True))
    RESULTS = LSTMGradOp.RESULTS
    ATTRS = CHECKPOINT_ATTRS + (REUSE_STATES,)

    overwrites = classmethod(states_overwritten)

    def check_attrs(self, ctx: InferContext) -> None:
        check_layer_attrs(ctx)

    def infer(self, ctx: InferContext) -> list[TensorType]:
        c = LayerCheck(ctx)
        c.x(0)
        s = c.shapes()
        s["States"] = [ctx.attrs["checkpoints"], 2, c.D, "B", c.H]
        for _ in range(2):
            for i, k in ((1, "W"), (2, "R"), (3, "B"), (5, "state"), (6, "state"), (7, "P"), (8, "States"),
                         (9, "all"), (10, "state"), (11, "state")):
                c.check(i, s[k])
            c.sl(4)
        return [c.result(k) for k in ("X", "W", "R", "B", "state", "state", "P")]

    @classmethod
    def example(cls, rng: Any, dtype: Any) -> tuple[list[Any], dict[str, Any]]:
        """The checkpoints of ``LSTMTrainingCheckpointed``'s example and upstream gradients."""
        arrays, attrs = LSTMTrainingCheckpointedOp.example(rng, np.float64)
        HAll, HFinal, CFinal, States = LSTMTrainingCheckpointedOp.reference(*arrays, **attrs)
        dy = [rng.standard_normal(a.shape) for a in (HAll, HFinal, CFinal)]
        out = [*arrays, States, *dy]
        return [a if a.dtype.kind == "i" else a.astype(dtype) for a in out], attrs

    @classmethod
    def reference(cls, X: Any, W: Any, R: Any, B: Any, SL: Any, H0: Any, C0: Any, P: Any, States: Any,
                  dHAll: Any, dHFinal: Any, dCFinal: Any, *, hidden_size: int, direction: str = "forward",
                  **_: Any) -> Any:
        HAll, _h, _c, CAll, iofc = references.lstm_training(X, W, R, B, SL, H0, C0, P, hidden_size=hidden_size,
                                                            direction=direction)
        return references.lstm_grad(X, W, R, SL, H0, C0, HAll, CAll, iofc, dHAll, dHFinal, dCFinal, P,
                                    hidden_size=hidden_size, direction=direction)
