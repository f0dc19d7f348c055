"""The placement rules of the convolution and pooling ops (``gradir/ops/conv.py``, ``gradir/ops/pool.py``),
registered in ``RULES`` when ``gradir.distributed`` is imported."""

from __future__ import annotations

from .placement import PARTIAL, Placement, RuleContext, split
from .rules import rule

__all__ = ["conv", "pool"]


@rule("conv")
def conv(ctx: RuleContext) -> list[Placement]:
    """``Conv`` and ``ConvGrad``: X (and dY) split along the batch axis 0, W and B replicated.  Conv's Y stays
    split; ConvGrad's dX stays split, its dW and dB are partial sums over the shards' samples."""
    op = ctx.op
    rows = (0,) if op.op_name == "Conv" else (0, 1)
    for i in ctx.given():
        p = ctx.p(i)
        if i in rows:
            if p != split(0):
                ctx.refuse(f"{ctx.name(i)} is {p}; {op.op_name} splits only along the batch axis 0 (the channel "
                           f"and spatial axes mix in its windows and weights)", operand=i)
        elif not p.is_replicated:
            ctx.refuse(f"{ctx.name(i)} ({type(op).operand_spec(i).name}) is {p}; the weights must be replicated",
                       operand=i)
    return [split(0)] if op.op_name == "Conv" else [split(0), PARTIAL, PARTIAL]


@rule("pool")
def pool(ctx: RuleContext) -> list[Placement]:
    """The pooling ops and their gradients: each image pools on its own, so a split along the batch axis 0 or
    the channel axis 1 stays one (spatial axes mix: refused).  MaxPool's Indices are flat positions in the
    whole X: the shard graph gives a split MaxPool its shard's rows (``shardgraph``, as for Dropout).
    MaxPoolGrad reads its Indices modulo the image size, so its Indices split like dY."""
    op = ctx.op
    p = ctx.p(0)
    if op.op_name == "MaxPool" and p.is_split and p.axis in (0, 1):
        return [p, p]
    if op.op_name == "MaxPoolGrad" and ctx.p(1) != p and not (p.is_partial and ctx.p(1).is_replicated):
        ctx.refuse(f"{ctx.name(1)} (Indices) is {ctx.p(1)}; it must be split like dY ({p})", operand=1)
    if p.is_partial and op.is_backward:
        return [PARTIAL]
    if not p.is_split or p.axis not in (0, 1):
        ctx.refuse(f"{ctx.name(0)} is {p}; {op.op_name} splits only along the batch or channel axis (0 or 1)",
                   operand=0)
    return [p]
