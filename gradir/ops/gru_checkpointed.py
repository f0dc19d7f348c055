"""The checkpointed GRU layer: GRUTraining and GRUGrad keeping only checkpoints of the hidden state.

Between them they keep checkpoints of h instead of the gates (ZRH), which the backward recomputes segment
by segment, with the same bits (docs/memory.md, "Recurrences").  The memory planner
(``gradir.transforms.memory.recurrence``) rewrites a GRUTraining/GRUGrad pair into these under a memory
budget."""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from ..ir.op import Attr, BackwardOp, InferContext, Op, Operand
from ..ir.types import TensorType
from . import references
from .gru import (LAYER_ATTRS, GRUCheck, GRUGradOp, GRUTrainingOp, check_layer_attrs, chunk_steps, layer_example,
                  layer_flops)
from .lstm import unit_steps
from .lstm_checkpointed import REUSE_STATES, descent_slots, states_overwritten

CHECKPOINT_ATTRS = LAYER_ATTRS + (
    Attr("segment", "int", min=1, doc="steps per unit (rounded up to whole fixed chunks of the kernels)"),
    Attr("checkpoints", "int", min=1, doc="snapshot slots of the hidden state (binomial checkpointing)"),
)
_NO_ONNX = "a gradir memory-planning rewrite of GRUTraining/GRUGrad (export the unbudgeted program)"


def _states(c: GRUCheck, k: int) -> TensorType:
    return TensorType(c.dtype, [k, c.D, c.B, c.H])


class GRUTrainingCheckpointedOp(Op):
    """GRUTraining that keeps, instead of every step's gates (ZRH), ``checkpoints`` snapshots of the hidden
    state (``States`` ``[checkpoints, D, B, H]``) at the units binomial checkpointing chooses; HAll and
    HFinal as GRUTraining's, bit for bit."""

    @classmethod
    def flops(cls, operands: Any, results: Any, attrs: Any) -> float:
        return layer_flops(operands, attrs)

    NO_ONNX = _NO_ONNX
    SHARDING = "gru_training_checkpointed"
    OPERANDS = GRUTrainingOp.OPERANDS
    RESULTS = ("HAll", "HFinal", "States")
    ATTRS = CHECKPOINT_ATTRS
    # differentiated by one GRUGradRecompute (gradir/autodiff/rules_gru.py); the checkpoints take no gradient
    NO_GRADIENT_RESULTS = (2,)

    def check_attrs(self, ctx: InferContext) -> None:
        check_layer_attrs(ctx)

    def infer(self, ctx: InferContext) -> list[TensorType]:
        c = GRUCheck(ctx)
        c.x(0)
        s = c.shapes()
        for _ in range(2):
            for i, k in ((1, "W"), (2, "R"), (3, "B"), (5, "state")):
                c.check(i, s[k])
            c.sl(4)
        return [c.result("all"), c.result("state"), _states(c, ctx.attrs["checkpoints"])]

    @classmethod
    def example(cls, rng: Any, dtype: Any) -> tuple[list[Any], dict[str, Any]]:
        """GRUTraining's example (bidirectional, linear_before_reset=1, a clip), in units of 2 steps with
        2 slots."""
        arrays, attrs = GRUTrainingOp.example(rng, dtype)
        return arrays, dict(attrs, segment=2, checkpoints=2)

    @classmethod
    def reference(cls, *arrays: Any, hidden_size: int, direction: str = "forward", linear_before_reset: int = 0,
                  clip: Optional[float] = None, segment: int, checkpoints: int, **_: Any) -> Any:
        HAll, HFinal, _zrh = references.gru_training(*arrays, hidden_size=hidden_size, direction=direction,
                                                     linear_before_reset=linear_before_reset, clip=clip)
        return HAll, HFinal, reference_states(arrays, HAll, direction, segment, checkpoints)


def reference_states(arrays: Any, HAll: np.ndarray, direction: str, segment: int, checkpoints: int) -> np.ndarray:
    """The checkpoints the kernels keep, from a whole forward's HAll: the hidden state carried into each
    snapshotted unit, in the kernels' time order (a reverse row's steps reversed within its length) —
    a row past its length carries its last state."""
    X, SL, H0 = arrays[0], arrays[4], arrays[5]
    S, D, nb, h = HAll.shape
    T0 = chunk_steps(S, nb, D, h, np.dtype(X.dtype).itemsize)
    L = unit_steps(segment, T0, S)
    n = -(-S // L)
    out = np.zeros((checkpoints, D, nb, h), HAll.dtype)
    for d in range(D):
        rev = direction == "reverse" or d == 1
        for i, slot in descent_slots(n, min(n, checkpoints)).items():
            for b in range(nb):
                length = S if SL is None else int(SL[b])
                k = min(i * L, length)  # steps of the row before the unit, in its time order
                if k == 0:
                    out[slot, d, b] = 0 if H0 is None else H0[d, b]
                else:
                    out[slot, d, b] = HAll[length - k if rev else k - 1, d, b]
    return out


class GRUGradRecomputeOp(BackwardOp):
    """GRUGrad from GRUTrainingCheckpointed's ``States``: HAll and the gates recomputed unit by unit in the
    backward sweep (binomial checkpointing); GRUGrad's results, bit for bit."""

    @classmethod
    def flops(cls, operands: Any, results: Any, attrs: Any) -> float:
        return 3 * layer_flops(operands, attrs)  # at least one forward again

    NO_ONNX = _NO_ONNX
    SHARDING = "gru_grad_recompute"
    OPERANDS = (*GRUTrainingOp.OPERANDS, Operand("States", doc="[checkpoints, D, B, H]"),
                Operand("dHAll", optional=True, doc="[S, D, B, H] (default 0)"),
                Operand("dHFinal", optional=True, doc="[D, B, H] (default 0)"))
    RESULTS = GRUGradOp.RESULTS
    ATTRS = CHECKPOINT_ATTRS + (REUSE_STATES,)

    overwrites = classmethod(states_overwritten)

    def check_attrs(self, ctx: InferContext) -> None:
        check_layer_attrs(ctx)

    def infer(self, ctx: InferContext) -> list[TensorType]:
        c = GRUCheck(ctx)
        c.x(0)
        s = c.shapes()
        s["States"] = [ctx.attrs["checkpoints"], c.D, "B", c.H]
        for _ in range(2):
            for i, k in ((1, "W"), (2, "R"), (3, "B"), (5, "state"), (6, "States"), (7, "all"), (8, "state")):
                c.check(i, s[k])
            c.sl(4)
        return [c.result(k) for k in ("X", "W", "R", "B", "state")]

    @classmethod
    def example(cls, rng: Any, dtype: Any) -> tuple[list[Any], dict[str, Any]]:
        """The checkpoints of a reverse layer with linear_before_reset=0 and a clip (GRUGrad's example's
        attributes), in units of 2 steps with 2 slots, and upstream gradients."""
        X, W, R, B, SL, H0 = layer_example(rng, np.float64)
        attrs = {"hidden_size": 2, "direction": "reverse", "clip": 0.5, "segment": 2, "checkpoints": 2}
        HAll, HFinal, States = GRUTrainingCheckpointedOp.reference(X, W, R, B, SL, H0, **attrs)
        dy = [rng.standard_normal(a.shape) for a in (HAll, HFinal)]
        out = [X, W, R, B, SL, H0, States, *dy]
        return [a if a.dtype.kind == "i" else a.astype(dtype) for a in out], attrs

    @classmethod
    def reference(cls, X: Any, W: Any, R: Any, B: Any, SL: Any, H0: Any, States: Any, dHAll: Any, dHFinal: Any, *,
                  hidden_size: int, direction: str = "forward", linear_before_reset: int = 0,
                  clip: Optional[float] = None, **_: Any) -> Any:
        kw = dict(hidden_size=hidden_size, direction=direction, linear_before_reset=linear_before_reset, clip=clip)
        HAll, _h, ZRH = references.gru_training(X, W, R, B, SL, H0, **kw)
        return references.gru_grad(X, W, R, B, SL, H0, HAll, ZRH, dHAll, dHFinal, **kw)
