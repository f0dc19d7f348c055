"""The placement rules of the GRU layers and cell (``gradir/ops/gru.py``), registered in ``rules.RULES`` (imported by
the package): like the LSTM ops', split along the batch only (the recurrence runs along the sequence)."""

from __future__ import annotations

from .placement import Placement, RuleContext
from .rules import batch_op, rule

__all__ = ["gru_training", "gru_grad", "gru_training_checkpointed", "gru_grad_recompute", "gru_cell", "gru_cell_grad"]


@rule("gru_training")
def gru_training(ctx: RuleContext) -> list[Placement]:
    """X [S, B, I] on 1, SL [B] on 0, H0 [D, B, H] on 1; weights replicated."""
    return batch_op(ctx, {0: 1, 1: None, 2: None, 3: None, 4: 0, 5: 1}, [2, 1, 2])


@rule("gru_grad")
def gru_grad(ctx: RuleContext) -> list[Placement]:
    """The batch operands of GRUTraining plus HAll, ZRH and the upstream gradients; the weight gradients
    dW, dR, dB are sums over the batch: partial."""
    axes = {0: 1, 1: None, 2: None, 3: None, 4: 0, 5: 1, 6: 2, 7: 2, 8: 2, 9: 1}
    return batch_op(ctx, axes, [1, "partial", "partial", "partial", 1])


@rule("gru_training_checkpointed")
def gru_training_checkpointed(ctx: RuleContext) -> list[Placement]:
    """GRUTraining's operands; HAll on 2, HFinal on 1, the checkpoints [K, D, B, H] on 2."""
    return batch_op(ctx, {0: 1, 1: None, 2: None, 3: None, 4: 0, 5: 1}, [2, 1, 2])


@rule("gru_grad_recompute")
def gru_grad_recompute(ctx: RuleContext) -> list[Placement]:
    """GRUTraining's operands, the checkpoints on 2 and the upstream gradients; results as GRUGrad's."""
    axes = {0: 1, 1: None, 2: None, 3: None, 4: 0, 5: 1, 6: 2, 7: 2, 8: 1}
    return batch_op(ctx, axes, [1, "partial", "partial", "partial", 1])


CELL_AXES = {0: 0, 1: 0, 2: None, 3: None, 4: None, 5: None}


@rule("gru_cell")
def gru_cell(ctx: RuleContext) -> list[Placement]:
    """X, H [B, .] on 0; weights and biases replicated."""
    return batch_op(ctx, CELL_AXES, [0])


@rule("gru_cell_grad")
def gru_cell_grad(ctx: RuleContext) -> list[Placement]:
    """dH_next, X, H on 0; the gradients of X and H split, of the weights and biases partial."""
    axes = {0: 0, **{k + 1: v for k, v in CELL_AXES.items()}}
    return batch_op(ctx, axes, [0 if ctx.attrs["input_index"] < 2 else "partial"])
