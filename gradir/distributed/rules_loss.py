"""The placement rule of ORT's training losses over rows (``SoftmaxCrossEntropy``, ``SparseSoftmaxCrossEntropy``
and their gradients, ``gradir/ops/loss.py``): registered in ``rules.RULES`` (imported by the package,
``gradir/distributed/__init__.py``)."""

from __future__ import annotations

from .placement import PARTIAL, Placement, RuleContext, split
from .rules import rule


@rule("cross_entropy_rows")
def cross_entropy_rows(ctx: RuleContext) -> list[Placement]:
    """Logits (or log_prob) ``[..., C]``: the rows (any axis but the last, the classes) may be split, with
    the labels (and the per-sample weights) split along the same axis; "none" keeps the split in the loss,
    "sum" makes it a partial sum; "mean" divides by a global count (or summed weights) no shard knows, and
    refuses.  A gradient fed a partial dY, all else replicated, is a partial sum (it is linear in dY)."""
    op = ctx.op
    grad = op.is_backward
    x = 1 if grad else 0
    given = ctx.given()
    if any(ctx.p(i).is_partial for i in given):
        if grad and ctx.p(0).is_partial and all(ctx.p(i).is_replicated for i in given if i != 0):
            return [PARTIAL]
        ctx.refuse(f"{op.op_name} is not linear in a partial sum here", operand=next(
            i for i in given if ctx.p(i).is_partial))
    px = ctx.p(x)
    axis = px.axis if px.is_split else None
    if axis is not None and axis == ctx.rank(x) - 1:
        ctx.refuse(f"{op.op_name} normalizes over the class axis {axis} (the last), the split axis", operand=x)
    for i in given:
        if i == x or (grad and i == 0):
            continue
        p = ctx.p(i)
        if (axis is None and not p.is_replicated) or (axis is not None and not (p.is_split and p.axis == axis)):
            ctx.refuse(f"{ctx.name(i)} is {p}, {ctx.name(x)} {px}: the labels and weights are split along the same "
                       "rows as the logits", operand=i)
    reduction = ctx.attrs["reduction"]
    if axis is None:
        ctx.refuse(f"dY ({ctx.name(0)}) is {ctx.p(0)}, but {ctx.name(x)} is replicated: split it along the same rows",
                   operand=0)
    if reduction == "mean":
        ctx.refuse('reduction="mean" divides by the number of rows (or the summed weights) of all the shards, which '
                   'no shard knows; use reduction="sum" and scale by 1/N in the graph', operand=x)
    if grad:
        d = ctx.p(0)
        if reduction == "none" and not (d.is_split and d.axis == axis):
            ctx.refuse(f'dY ({ctx.name(0)}) must be split like the rows for reduction="none"', operand=0)
        if reduction == "sum" and not d.is_replicated:
            ctx.refuse(f'dY ({ctx.name(0)}) of a summed loss is one number: it must be replicated', operand=0)
        return [split(axis)]
    return [split(axis) if reduction == "none" else PARTIAL, split(axis)]
