"""The placement rules of the convolution, pooling and padding ops and Flatten (``gradir/ops/conv.py``,
``gradir/ops/pool.py``, ``gradir/ops/pad.py``, ``gradir/ops/shape.py``), registered in ``RULES`` when
``gradir.distributed`` is imported."""

from __future__ import annotations

from ..ops.pad import resolve_pads
from ..ops.shape import flatten_axis
from .placement import PARTIAL, Placement, RuleContext, split
from .rules import linear_partial, rule

__all__ = ["conv", "pool", "pad", "flatten"]


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


@rule("pad")
def pad(ctx: RuleContext) -> list[Placement]:
    """``Pad`` and ``PadGrad``: a split along an axis they do not pad stays one; a partial sum stays one where
    the op is linear (``PadGrad``, and ``Pad`` but in constant mode with a constant other than 0)."""
    op, p = ctx.op, ctx.p(0)
    if p.is_partial:
        if op.op_name == "Pad" and op.attrs.get("mode", "constant") == "constant" and \
                op.attrs.get("constant_value", 0.0) != 0.0:
            ctx.refuse(f"{ctx.name(0)} is a partial sum and Pad fills with constant_value "
                       f"{op.attrs['constant_value']}: every shard would add it", operand=0)
        return [PARTIAL]
    begin, end = resolve_pads(ctx.rank(0), op.attrs["pads"], op.attrs.get("axes"))
    if begin[p.axis] or end[p.axis]:
        ctx.refuse(f"{ctx.name(0)} is {p} and {op.op_name} pads axis {p.axis}: split an axis it does not pad",
                   operand=0)
    return [p]


@rule("flatten")
def flatten(ctx: RuleContext) -> list[Placement]:
    """``Flatten``: a split along axis 0 stays one along the result's axis 0 (along 1 when ``axis`` is 0), and
    along ``axis`` itself one along the result's axis 1: the leading axis of each group keeps its slices
    contiguous.  Another axis would interleave."""
    p = ctx.p(0)
    if p.is_partial:
        return [linear_partial(ctx)]
    a = flatten_axis(ctx.op.attrs.get("axis", 1), ctx.rank(0))
    if p.axis == a:
        return [split(1)]
    if p.axis == 0:
        return [split(0)]
    ctx.refuse(f"{ctx.name(0)} is {p}; Flatten(axis={a}) merges axis {p.axis} with the axes before it, so a "
               f"shard's slice would not be a slice of the result: split axis 0 or {a}", operand=0)
    raise AssertionError
