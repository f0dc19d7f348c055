"""The placement rules of the indexing and joining ops (``ops/index.py``, ``ops/concat.py``) and of ``Expand``
and ``Squeeze``: a split along an axis the op does not index, cut, join or broadcast is kept (renumbered);
one along such an axis refuses, except where the shards' results add up (the gather gradients scatter each
shard's part into zeros of the whole shape: a partial sum).  Registered in ``RULES`` when
``gradir.distributed`` is imported."""

from __future__ import annotations

from .placement import PARTIAL, REPLICATED, Placement, RuleContext, split
from .rules import linear_partial, rule

__all__: list[str] = []


def _axis(ctx: RuleContext, rank: int) -> int:
    return ctx.attrs["axis"] % rank


def _partial_or(ctx: RuleContext, n: int) -> list[Placement] | None:
    """A partial-sum operand: the op is linear in it (``linear_partial`` refuses otherwise)."""
    if any(ctx.p(i).is_partial for i in ctx.given()):
        return [linear_partial(ctx)] * n
    return None


@rule("gather")
def gather(ctx: RuleContext) -> list[Placement]:
    """Data split along an axis it is not gathered along, indices replicated: the result keeps the split
    (after the indices' axes); indices split, data replicated: the result is split along the same index axis."""
    if (p := _partial_or(ctx, 1)) is not None:
        return p
    data, idx = ctx.p(0), ctx.p(1)
    a, r = _axis(ctx, ctx.rank(0)), ctx.rank(1)
    if data.is_split and idx.is_split:
        ctx.refuse(f"both data ({ctx.name(0)}) and indices ({ctx.name(1)}) are split: split one of them", operand=1)
    if data.is_split:
        if data.axis == a:
            ctx.refuse(f"data ({ctx.name(0)}) is split along axis {a}, which Gather indexes: each shard holds part "
                       "of the rows the indices name; split the indices instead", operand=0)
        return [split(data.axis if data.axis < a else data.axis + r - 1)]
    return [split(a + idx.axis)]


@rule("gather_elements")
def gather_elements(ctx: RuleContext) -> list[Placement]:
    """Data and indices split along one axis they are not gathered along (of one size in both)."""
    if (p := _partial_or(ctx, 1)) is not None:
        return p
    op = ctx.op.op_name
    data_i, idx_i = (0, 1) if op == "GatherElements" else (None, 1)
    a = _axis(ctx, ctx.rank(1))
    axes = {ctx.p(i).axis for i in ctx.given() if ctx.p(i).is_split}
    if len(axes) != 1 or any(not ctx.p(i).is_split for i in ctx.given()):
        ctx.refuse(f"{op} needs all its operands split along one axis", operand=idx_i)
    b = axes.pop()
    if b == a:
        ctx.refuse(f"the split axis {b} is the axis {op} gathers along", operand=idx_i)
    if data_i is not None and ctx.types[0].shape[b] != ctx.types[1].shape[b]:
        ctx.refuse(f"data ({ctx.name(0)}) and indices ({ctx.name(1)}) have other sizes along the split axis {b}",
                   operand=1)
    return [split(b)]


@rule("gather_elements_grad")
def gather_elements_grad(ctx: RuleContext) -> list[Placement]:
    """dY and indices split along the gathered axis: each shard scatters its part into zeros of the whole
    shape, and the shards' results add up (a partial sum)."""
    a = _axis(ctx, ctx.rank(1))
    for i in ctx.given():
        if not (ctx.p(i).is_split and ctx.p(i).axis == a):
            ctx.refuse(f"GatherElementsGrad can be split only along the gathered axis {a} of both dY and indices",
                       operand=i)
    return [PARTIAL]


@rule("gather_grad")
def gather_grad(ctx: RuleContext) -> list[Placement]:
    """Indices split (dY along the same axis, after the outer axes): a partial sum; dY split along an outer
    or inner axis, indices replicated: the result keeps the split."""
    if ctx.p(0).is_partial:
        ctx.refuse(f"the indices ({ctx.name(0)}) are a partial sum: GatherGrad is not linear in them", operand=0)
    if ctx.p(1).is_partial:
        if not ctx.p(0).is_replicated:
            ctx.refuse(f"dY ({ctx.name(1)}) is a partial sum but the indices ({ctx.name(0)}) are {ctx.p(0)}",
                       operand=0)
        return [PARTIAL]
    idx, dy = ctx.p(0), ctx.p(1)
    a, r = _axis(ctx, len(ctx.attrs["shape"])), ctx.rank(0)
    if idx.is_split:
        if not (dy.is_split and dy.axis == a + idx.axis):
            ctx.refuse(f"the indices ({ctx.name(0)}) are split along axis {idx.axis}, so dY ({ctx.name(1)}) must be "
                       f"split along axis {a + idx.axis}", operand=1)
        return [PARTIAL]
    if a <= dy.axis < a + r:
        ctx.refuse(f"dY ({ctx.name(1)}) is split along an axis of the indices ({ctx.name(0)}), which are "
                   "replicated: split them too", operand=1)
    return [split(dy.axis if dy.axis < a else dy.axis - r + 1)]


def _sliced_axes(ctx: RuleContext, rank: int) -> set[int]:
    axes = ctx.attrs["axes"]
    return {a % rank for a in (range(len(ctx.attrs["starts"])) if axes is None else axes)}


@rule("slice")
def slice_(ctx: RuleContext) -> list[Placement]:
    """Slice and SliceGrad keep a split along an axis they do not slice."""
    if (p := _partial_or(ctx, 1)) is not None:
        return p
    a = ctx.p(0).axis
    if a in _sliced_axes(ctx, ctx.rank(0)):
        ctx.refuse(f"{ctx.op.op_name} slices the split axis {a}: each shard would slice its own rows", operand=0)
    return [split(a)]


@rule("trilu")
def trilu(ctx: RuleContext) -> list[Placement]:
    """A split along a batch axis is kept; the last two (the matrix) must be whole."""
    if (p := _partial_or(ctx, 1)) is not None:
        return p
    a = ctx.p(0).axis
    if a >= ctx.rank(0) - 2:
        ctx.refuse(f"Trilu's triangle is over the last two axes, and the split axis {a} is one of them", operand=0)
    return [split(a)]


@rule("split")
def split_rule(ctx: RuleContext) -> list[Placement]:
    """Every part keeps a split along another axis than the one cut."""
    n = len(ctx.op.results)
    if (p := _partial_or(ctx, n)) is not None:
        return p
    a = ctx.p(0).axis
    if a == _axis(ctx, ctx.rank(0)):
        ctx.refuse(f"{ctx.op.op_name} cuts along the split axis {a}", operand=0)
    return [split(a)] * n


@rule("concat")
def concat(ctx: RuleContext) -> list[Placement]:
    """Every operand split along one axis other than the joined one; ConcatTraining's lengths are replicated."""
    extra = [REPLICATED] * (len(ctx.op.results) - 1)
    if any(ctx.p(i).is_partial for i in ctx.given()):
        return [linear_partial(ctx)] + extra
    a = _axis(ctx, ctx.rank(0))
    axes = {ctx.p(i).axis if ctx.p(i).is_split else None for i in ctx.given()}
    if len(axes) != 1 or None in axes:
        ctx.refuse(f"{ctx.op.op_name} needs all its operands split along one axis", operand=0)
    b = axes.pop()
    if b == a:
        ctx.refuse(f"{ctx.op.op_name} joins along the split axis {a}", operand=0)
    return [split(b)] + extra  # type: ignore[arg-type]


@rule("expand")
def expand(ctx: RuleContext) -> list[Placement]:
    """A split axis of X is kept where shape has 1 (or does not reach): there the result has X's dim."""
    if (p := _partial_or(ctx, 1)) is not None:
        return p
    shape = ctx.attrs["shape"]
    r_out = ctx.result_types[0].rank
    b = ctx.p(0).axis + r_out - ctx.rank(0)
    k = b - (r_out - len(shape))
    if k >= 0 and shape[k] != 1:
        ctx.refuse(f"Expand's shape has {shape[k]} along the split axis {b}: the shards' results would not be "
                   "slices of the whole", operand=0)
    return [split(b)]


@rule("squeeze")
def squeeze(ctx: RuleContext) -> list[Placement]:
    if (p := _partial_or(ctx, 1)) is not None:
        return p
    r = ctx.rank(0)
    gone = {a % r for a in ctx.attrs["axes"]}
    a = ctx.p(0).axis
    if a in gone:
        ctx.refuse(f"Squeeze removes the split axis {a}", operand=0)
    return [split(a - sum(1 for g in gone if g < a))]
