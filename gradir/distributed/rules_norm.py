"""The placement rules of the normalization ops (``gradir/ops/norm.py``, ``gradir/ops/batch_norm.py``), registered
in ``rules.RULES`` (imported by the package, beside ``rules``, which would pass 500 lines with them).

Statistics over a split axis would be a sum across the shards: in another order than one device's, so not the
same bits.  So a layer norm splits along a row axis only, and a training-mode batch norm along its channel axis
(axis 1) only: every statistic is then computed whole, on one shard, as one device computes it."""

from __future__ import annotations

from .placement import PARTIAL, REPLICATED, Placement, RuleContext, split
from .rules import rule

__all__ = ["layer_norm", "batch_norm"]


# the operands of each layer-norm op that span the normalized axes (replicated); the others are rows
_LAYER_NORM_PARAMS = {"LayerNormalization": (1, 2), "SimplifiedLayerNormalization": (1,),
                      "LayerNormalizationGrad": (2,), "SimplifiedLayerNormalizationGrad": (2,),
                      "InvertibleLayerNormalizationGrad": (2, 3)}


@rule("layer_norm")
def layer_norm(ctx: RuleContext) -> list[Placement]:
    """The layer norms (``LayerNormalization(X, Scale, B)``, ``SimplifiedLayerNormalization(X, Scale)``) and their
    gradients (``(dY, X or Y, Scale, [B,] [Mean,] InvStdDev)``): split along one axis before ``axis`` (a row
    axis, the same in every row operand), never a normalized one; Scale and B replicated.  A gradient's
    dScale and dB sum over the rows: partial; it is linear in dY alone."""
    op, grad = ctx.op, ctx.op.is_backward
    n_results = len(type(op).RESULTS)
    start = ctx.attrs["axis"] % max(ctx.rank(1 if grad else 0), 1)
    params = _LAYER_NORM_PARAMS.get(op.op_name, (2,) if grad else (1, 2))
    if grad and ctx.p(0).is_partial and all(ctx.p(i).is_replicated for i in ctx.given() if i != 0):
        return [PARTIAL] * n_results
    rows = [i for i in ctx.given() if i not in params]
    for i in ctx.given():
        if ctx.p(i).is_partial:
            ctx.refuse(f"{ctx.name(i)} is a partial sum, and {op.op_name} is not linear in it", operand=i)
        if i in params and not ctx.p(i).is_replicated:
            ctx.refuse(f"{ctx.name(i)} ({type(op).operand_spec(i).name}) spans the normalized axes: it must be "
                       f"replicated", operand=i)
    split_at = [i for i in rows if ctx.p(i).is_split]
    axis = ctx.p(split_at[0]).axis
    if axis >= start:
        ctx.refuse(f"{op.op_name} normalizes over axes {start}.., and the split axis {axis} is among them: each "
                   f"shard would normalize over its own slice only; split a row axis", operand=split_at[0])
    for i in rows:
        if not (ctx.p(i).is_split and ctx.p(i).axis == axis):
            ctx.refuse(f"{ctx.name(i)} is {ctx.p(i)}, but {ctx.name(split_at[0])} is split along axis {axis}: split "
                       f"it along the same axis", operand=i)
    return [split(axis)] + [PARTIAL if grad else split(axis)] * (n_results - 1)


# each batch-norm op's operands of X's shape (the others are [C] channel vectors)
_BATCH_NORM_ROWS = {"BatchNormalization": (0,), "BatchNormInternal": (0,), "BatchNormalizationGrad": (0, 1)}


@rule("batch_norm")
def batch_norm(ctx: RuleContext) -> list[Placement]:
    """``BatchNormalization``, ``BatchNormInternal`` (X [N, C, ...] and [C] channel vectors) and
    ``BatchNormalizationGrad`` (dY, X and [C] vectors).  Split along the channel axis 1, the [C] operands along
    0: exact in every mode (each shard normalizes its own channels).  Split along another axis (the batch): an
    inference-mode BatchNormalization keeps the split with its [C] operands replicated (its running statistics
    are the replicated inputs); a training-mode one would sum its statistics across the shards: refused.  The
    gradient op is linear in dY alone (a partial dY, the rest replicated: partial results)."""
    op = ctx.op
    rows = _BATCH_NORM_ROWS[op.op_name]
    n_results = len(type(op).RESULTS)
    if op.is_backward and ctx.p(0).is_partial and all(ctx.p(i).is_replicated for i in ctx.given() if i != 0):
        return [PARTIAL] * n_results
    for i in ctx.given():
        if ctx.p(i).is_partial:
            ctx.refuse(f"{ctx.name(i)} is a partial sum, and {op.op_name} is not linear in it", operand=i)
    lead = next(i for i in ctx.given() if ctx.p(i).is_split)
    axis = ctx.p(lead).axis if lead in rows else 1
    for i in ctx.given():
        want = split(axis) if i in rows else (split(0) if axis == 1 else None)
        p = ctx.p(i)
        if want is None and not p.is_replicated:
            ctx.refuse(f"{ctx.name(i)} ({type(op).operand_spec(i).name}) is {p}, but X is split along axis {axis}, "
                       f"not the channel axis 1: the [C] operands must be replicated", operand=i)
        if want is not None and p != want:
            ctx.refuse(f"{ctx.name(i)} ({type(op).operand_spec(i).name}) is {p}, but {ctx.name(lead)} is split along "
                       f"the {'channel ' if axis == 1 else ''}axis {axis}: it must be {want}", operand=i)
    if axis == 1:
        return [split(1)] + [split(0)] * (n_results - 1)
    if op.op_name != "BatchNormalization" or ctx.attrs["training_mode"]:
        ctx.refuse(f"{op.op_name} in training mode takes its statistics over every axis but 1, and {ctx.name(lead)} is "
                   f"split along axis {axis}: each shard would see part of the batch (a sum across the shards, not the "
                   f"same bits); split along the channel axis 1, the [C] operands along 0", operand=lead)
    return [split(axis), REPLICATED, REPLICATED]
