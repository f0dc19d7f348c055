"""The placement rules, one per op family (``RULES``), and which one places an op (``placement_rule``:
derived from its traits for element-wise ops and reductions, named by ``Op.SHARDING`` where it cannot be).

A rule takes a ``RuleContext`` (the op, its operands' placements and global types) and returns one
``Placement`` per result, or calls ``ctx.refuse(why)``.  ``analyze`` only calls a rule when some
operand is split or partial: all-replicated operands give replicated results for every op.

The rules follow what GSPMD, ``jax.shard_map`` and PyTorch DTensor do with a batch (data-parallel)
split: element-wise ops keep the split; a softmax keeps it unless it normalizes over the split axis;
layout ops renumber it; a reduction or a product that contracts over it makes a partial sum; an op
linear in an operand passes a partial sum through; any other op fed a partial sum refuses.
"""

from __future__ import annotations

import math
from typing import Callable, Optional

from ..errors import ShardError
from .placement import PARTIAL, Placement, RuleContext, split

__all__ = ["RULES", "rule", "placement_rule", "derived_placement_rule"]

RULES: dict[str, Callable[[RuleContext], list[Placement]]] = {}


def derived_placement_rule(cls: type) -> Optional[str]:
    """The rule ``cls``'s traits imply, if any: an element-wise op keeps the split (``elementwise``); a
    reduction over ``axes`` (``keepdims``) of one operand renumbers it or sums the shards (``reduce``);
    an op without operands is replicated (``constant``)."""
    if cls.ELEMENTWISE is not None:
        return "elementwise"
    if cls.REDUCTION and len(cls.OPERANDS) == 1 and cls.attr_spec("axes") and cls.attr_spec("keepdims"):
        return "reduce"
    if not cls.OPERANDS:
        return "constant"
    return None


def placement_rule(cls: type) -> str:
    """The name of the rule (a key of ``RULES``) that places ``cls``'s results: its ``SHARDING`` where it
    names one (an override), else the one its traits imply (``derived_placement_rule``).  Else a
    ``ShardError`` naming the op: nothing says how to place it."""
    name = cls.SHARDING if cls.SHARDING is not None else derived_placement_rule(cls)
    if name is None:
        raise ShardError(f"{cls.op_name} has no sharding rule: it is neither element-wise (ELEMENTWISE) nor a "
                         f"reduction over `axes` (REDUCTION), and names no rule (SHARDING, one of "
                         f"{', '.join(sorted(RULES))})")
    if name not in RULES:
        raise ShardError(f"{cls.op_name} names the sharding rule {name!r} (SHARDING), which does not exist; the "
                         f"rules are {', '.join(sorted(RULES))}")
    return name


def rule(name: str):
    def add(fn: Callable[[RuleContext], list[Placement]]):
        RULES[name] = fn
        return fn
    return add


def _n(ctx: RuleContext, p: Placement) -> list[Placement]:
    return [p] * len(ctx.op.results)


def _linear_in(ctx: RuleContext, i: int) -> bool:
    """Whether the op is linear in operand ``i`` (a partial sum there stays one): ``LINEAR_IN`` says so, and
    a ``SHAPE_ONLY`` op, which only moves the elements of its operand 0, is linear in it."""
    op = type(ctx.op)
    k = min(i, len(op.OPERANDS) - 1) if op.OPERANDS and op.OPERANDS[-1].variadic else i
    return k in op.LINEAR_IN or (k == 0 and op.SHAPE_ONLY)


def linear_partial(ctx: RuleContext) -> Placement:
    """The op has a partial-sum operand: the result is a partial sum if the op is linear in it (in all
    of them together for ``LINEAR_JOINTLY`` ops), the other operands replicated; else refuse."""
    op = ctx.op
    given = ctx.given()
    partial = [i for i in given if ctx.p(i).is_partial]
    for i in partial:
        if not _linear_in(ctx, i):
            ctx.refuse(f"{ctx.name(i)} is a partial sum (each shard holds a part, the value is their sum) and "
                       f"{op.op_name} is not linear in it: the sum over the shards of {op.op_name}(part) is not "
                       f"{op.op_name}(sum)", operand=i)
    others = [i for i in given if i not in partial]
    if op.LINEAR_JOINTLY:
        for i in others:
            if ctx.types[i] is not None and ctx.types[i].numel == 0:
                continue
            ctx.refuse(f"{op.op_name} combines the partial sum {ctx.name(partial[0])} with {ctx.name(i)}, which is "
                       f"{ctx.p(i)}: every shard would add all of {ctx.name(i)}, counting it once per shard",
                       operand=i)
        return PARTIAL
    if len(partial) > 1:
        ctx.refuse(f"{op.op_name} multiplies the partial sums {ctx.name(partial[0])} and {ctx.name(partial[1])}: "
                   f"it is linear in each alone, not in both together", operand=partial[1])
    for i in others:
        if not ctx.p(i).is_replicated:
            ctx.refuse(f"{op.op_name} combines the partial sum {ctx.name(partial[0])} with {ctx.name(i)}, which is "
                       f"{ctx.p(i)}: the sum over the shards of each shard's product is not the product",
                       operand=i)
    return PARTIAL


def pointwise(ctx: RuleContext) -> Placement:
    """Operands broadcast (NumPy, aligned at the end) to the result: the split operands must be split
    along the same result axis, and a replicated operand may only have size 1 (or no axis) there."""
    if any(ctx.p(i).is_partial for i in ctx.given()):
        return linear_partial(ctx)
    out_rank = ctx.result_types[0].rank
    axis: Optional[int] = None
    who = -1
    for i in ctx.given():
        p = ctx.p(i)
        if p.is_split:
            a = p.axis + out_rank - ctx.rank(i)
            if axis is not None and a != axis:
                ctx.refuse(f"{ctx.name(i)} is split along result axis {a} but {ctx.name(who)} along {axis}",
                           operand=i)
            axis, who = a, i
    assert axis is not None
    for i in ctx.given():
        if ctx.p(i).is_replicated and not type(ctx.op).BROADCASTS:
            # operands of one shape (Sum, the activation gradients): even a size-1 axis cannot pair
            # with a split one, whose shard type is '?' there
            ctx.refuse(f"{ctx.name(i)} is replicated but {ctx.name(who)} is split along axis {axis}, and "
                       f"{ctx.op.op_name} takes operands of one shape (no broadcasting): split {ctx.name(i)} "
                       f"along that axis too", operand=i)
        if ctx.p(i).is_replicated:
            k = axis - (out_rank - ctx.rank(i))
            d = ctx.types[i].shape[k] if k >= 0 else 1
            if d != 1:
                ctx.refuse(f"{ctx.name(i)} is replicated but spans the split axis {axis} (size {d}), along which "
                           f"{ctx.name(who)} is split: each shard would pair its rows with all of "
                           f"{ctx.name(i)}'s; split {ctx.name(i)} along that axis too", operand=i)
    return split(axis)


@rule("elementwise")
def elementwise(ctx: RuleContext) -> list[Placement]:
    return _n(ctx, pointwise(ctx))


@rule("constant")
def constant(ctx: RuleContext) -> list[Placement]:
    return _n(ctx, Placement("replicated"))


@rule("axis")
def softmax_axis(ctx: RuleContext) -> list[Placement]:
    """Softmax families: element-wise, except along the normalized axis (axes), which must be whole (the
    pre-opset-13 gradients, ``FLATTENED``, normalize over every axis from ``axis`` on)."""
    op = ctx.op
    p = pointwise(ctx)
    rank = ctx.result_types[0].rank
    ax = op.attrs["axis"] % max(rank, 1)
    flat = op.FLATTENED
    if p.is_split and (p.axis == ax or (flat and p.axis > ax)):
        over = f"axes {ax}..{rank - 1} (flattened)" if flat else f"axis {ax}"
        split_op = next(i for i in ctx.given() if ctx.p(i).is_split)
        ctx.refuse(f"{op.op_name} normalizes over {over}, and the split axis {p.axis} is among them: each shard "
                   f"would normalize over its own slice only; split another axis, or move the {op.op_name} "
                   f"out of the sharded graph", operand=split_op)
    return _n(ctx, p)


def _matmul_roles(ctx: RuleContext, i: int, axis: int, nb: int) -> object:
    """Operand ``i``'s axis as ``"k"`` (contracted) or its result axis (1-D operands are promoted)."""
    r = ctx.rank(i)
    va, vb = ctx.rank(0) == 1, ctx.rank(1) == 1
    if i == 0:
        ax, r2 = (axis + 1, 2) if va else (axis, r)
        if ax == r2 - 1:
            return "k"
        if ax == r2 - 2:
            return nb
        return ax + nb - (r2 - 2)
    ax, r2 = (axis, 2) if vb else (axis, r)
    if ax == r2 - 2:
        return "k"
    if ax == r2 - 1:
        return nb + (0 if va else 1)
    return ax + nb - (r2 - 2)


@rule("matmul")
def matmul(ctx: RuleContext) -> list[Placement]:
    """Rows (and batch dims) stay split; contracting over the split axis of both operands makes a
    partial sum (every weight gradient, ``X^T @ dY``)."""
    if any(ctx.p(i).is_partial for i in ctx.given()):
        return [linear_partial(ctx)]
    rr = ctx.result_types[0].rank
    nb = rr - (0 if ctx.rank(0) == 1 else 1) - (0 if ctx.rank(1) == 1 else 1)
    roles = {i: _matmul_roles(ctx, i, ctx.p(i).axis, nb) for i in (0, 1) if ctx.p(i).is_split}
    if set(roles.values()) == {"k"} and len(roles) == 2:
        return [PARTIAL]
    for i, r in roles.items():
        if r == "k":
            j = 1 - i
            ctx.refuse(f"MatMul contracts over the split axis of {ctx.name(i)}, but {ctx.name(j)} is "
                       f"{ctx.p(j)}, not split along its contracted axis", operand=j)
    if len(set(roles.values())) > 1:
        ctx.refuse(f"{ctx.name(0)} and {ctx.name(1)} are split along different axes of the result "
                   f"({roles[0]} and {roles[1]}): a shard would hold a block, not a slice", operand=1)
    axis = next(iter(roles.values()))
    assert isinstance(axis, int)
    if axis < nb:  # a batch dim: a replicated operand may only broadcast along it
        for i in (0, 1):
            if ctx.p(i).is_replicated:
                r2 = max(ctx.rank(i), 2)
                k = axis - (nb - (r2 - 2))
                d = ctx.types[i].shape[k] if k >= 0 and ctx.rank(i) > 1 else 1
                if d != 1:
                    ctx.refuse(f"{ctx.name(i)} is replicated but spans the split batch axis {axis} (size {d})",
                               operand=i)
    return [split(axis)]


@rule("fused_matmul")
def fused_matmul(ctx: RuleContext) -> list[Placement]:
    """``FusedMatMul``: ``matmul`` on the operands as laid out by the trans flags (``alpha`` keeps it linear)."""
    from ..ops.matmul_layout import operand_perm
    from ..ir.types import TensorType
    ps, ts = [], []
    for i, side in ((0, "A"), (1, "B")):
        p, t = ctx.p(i), ctx.types[i]
        perm = operand_perm(t.rank, bool(ctx.attrs[f"trans{side}"]), bool(ctx.attrs[f"transBatch{side}"]))
        if perm is not None:
            t = TensorType(t.dtype, [t.shape[k] for k in perm])
            if p.is_split:
                p = split(perm.index(p.axis))
        ps.append(p)
        ts.append(t)
    return matmul(RuleContext(ctx.op, ps, ts, ctx.result_types))


@rule("cross_entropy")
def cross_entropy(ctx: RuleContext) -> list[Placement]:
    """``SoftmaxCrossEntropyLoss(scores, labels, weights)`` and its gradient ``(dY, log_prob, label, weight)``:
    the targets (axis 0 or a spatial axis of the scores, that axis less one of the labels) may be split, never
    the class axis 1; "none" keeps the split in the loss, "sum" makes it a partial sum; "mean" divides by
    the summed weights of all the targets, which no shard knows, and refuses."""
    op = ctx.op
    grad = op.is_backward
    s, lab = (1, 2) if grad else (0, 1)
    weights = 3 if grad else 2
    if any(ctx.p(i).is_partial for i in ctx.given()):
        if grad and ctx.p(0).is_partial and all(ctx.p(i).is_replicated for i in ctx.given() if i != 0):
            return [PARTIAL]
        ctx.refuse(f"{op.op_name} is not linear in a partial sum here", operand=next(
            i for i in ctx.given() if ctx.p(i).is_partial))
    axis = ctx.p(s).axis if ctx.p(s).is_split else None
    if axis == 1:
        ctx.refuse(f"{op.op_name} normalizes over the class axis 1, the split axis", operand=s)
    want = None if axis is None else (0 if axis == 0 else axis - 1)
    lp = ctx.p(lab)
    if (lp.is_split and lp.axis != want) or (lp.is_replicated and want is not None):
        ctx.refuse(f"the labels ({ctx.name(lab)}) are {lp}, the scores ({ctx.name(s)}) {ctx.p(s)}: they must be "
                   f"split along the same targets", operand=lab)
    w = ctx.p(weights)
    if axis is None:  # the scores and so the labels replicated: what is split is dY or the weights
        if lp.is_split:
            axis = 0 if lp.axis == 0 else lp.axis + 1
            ctx.refuse(f"the labels ({ctx.name(lab)}) are split, the scores ({ctx.name(s)}) are not: split them "
                       f"along axis {axis} too", operand=s)
        if w is not None and not w.is_replicated:
            ctx.refuse(f"the class weights ({ctx.name(weights)}) must be replicated", operand=weights)
        d = ctx.p(0)
        ctx.refuse(f"dY ({ctx.name(0)}) is {d}, but the scores ({ctx.name(s)}) and the labels ({ctx.name(lab)}) "
                   f"are replicated: split them along the same targets as dY", operand=0)
    if w is not None and not w.is_replicated:
        ctx.refuse(f"the class weights ({ctx.name(weights)}) must be replicated", operand=weights)
    reduction = ctx.attrs["reduction"]
    if reduction == "mean":
        ctx.refuse('reduction="mean" divides by the summed weights of all the targets, which no shard knows; '
                   'use reduction="sum" and scale by 1/N in the graph (derive first, then shard)', operand=s)
    if grad:
        d = ctx.p(0)
        if reduction == "none" and not (d.is_split and d.axis == want):
            ctx.refuse(f'dY ({ctx.name(0)}) must be split like the labels for reduction="none"', operand=0)
        return [split(axis)]
    return [split(want) if reduction == "none" else PARTIAL, split(axis)]


@rule("transpose")
def transpose(ctx: RuleContext) -> list[Placement]:
    p = ctx.p(0)
    if p.is_partial:
        return [linear_partial(ctx)]
    perm = ctx.attrs["perm"]
    if perm is None:
        perm = tuple(reversed(range(ctx.rank(0))))
    return [split(list(perm).index(p.axis))]


@rule("unsqueeze")
def unsqueeze(ctx: RuleContext) -> list[Placement]:
    p = ctx.p(0)
    if p.is_partial:
        return [linear_partial(ctx)]
    r = ctx.result_types[0].rank
    new = {a % r for a in ctx.attrs["axes"]}
    kept = [k for k in range(r) if k not in new]
    return [split(kept[p.axis])]


def _prod(dims) -> Optional[int]:
    return None if any(d is None for d in dims) else math.prod(dims)


@rule("reshape")
def reshape(ctx: RuleContext) -> list[Placement]:
    """The split axis must survive as a dim of its own: the same product of dims before it, the same
    size (and so the same product after it); then it is renumbered.  Else the reshape mixes it with
    another axis and a shard's slice would not be a slice of the result."""
    p = ctx.p(0)
    if p.is_partial:
        return [linear_partial(ctx)]
    ins, outs, a = ctx.types[0].shape, ctx.result_types[0].shape, p.axis
    before, after = _prod(ins[:a]), _prod(ins[a + 1:])
    acc: Optional[int] = 1
    for j, d in enumerate(outs):
        if acc is not None and acc == before and d == ins[a] and _prod(outs[j + 1:]) == after:
            return [split(j)]
        acc = None if acc is None or d is None else acc * d
    shape = lambda s: "[" + ", ".join("?" if d is None else str(d) for d in s) + "]"
    ctx.refuse(f"the reshape from {shape(ins)} to {shape(outs)} mixes the split axis {a} (size "
               f"{'?' if ins[a] is None else ins[a]}) with another axis: a shard's slice would not be a slice "
               f"of the result; keep the batch axis as a dimension of its own", operand=0)
    raise AssertionError


@rule("reduce")
def reduce(ctx: RuleContext) -> list[Placement]:
    """Over the split axis: a partial sum when the op is linear in its operand (the shards' sums add up;
    an ``AVERAGES`` op becomes a sum times 1/the global count: gradients are derived at the global
    shape), else a refusal; over other axes: the split axis is renumbered."""
    op, p = ctx.op, ctx.p(0)
    if p.is_partial:
        return [linear_partial(ctx)]
    r = ctx.rank(0)
    axes = ctx.attrs["axes"]
    norm = list(range(r)) if axes is None else [a % r for a in axes]
    if p.axis in norm:
        if not _linear_in(ctx, 0):
            ctx.refuse(f"{op.op_name} reduces over the split axis {p.axis}, and its shards' results do not "
                       f"combine by a sum", operand=0)
        if op.AVERAGES:
            dims = [ctx.types[0].shape[k] for k in norm]
            if None in dims:
                ctx.refuse(f"{op.op_name} over the split axis {p.axis} needs the global count of the reduced "
                           f"elements, but the input's type {ctx.types[0]} has a '?' there", operand=0)
            ctx.mean_rewrite = True
        return [PARTIAL]
    keep = ctx.attrs["keepdims"]
    return [split(p.axis if keep else p.axis - sum(1 for k in norm if k < p.axis))]


@rule("reduce_to")
def reduce_to(ctx: RuleContext) -> list[Placement]:
    """``ReduceSumTo(X, Like)``: a split axis that is summed away makes a partial sum; one that is kept
    needs ``Like`` (read for its shape) split along it too."""
    x, like = ctx.p(0), ctx.p(1)
    off = ctx.rank(0) - ctx.rank(1)
    if x.is_partial:
        if like.is_split:
            ctx.refuse(f"X ({ctx.name(0)}) is a partial sum but Like ({ctx.name(1)}) is {like}", operand=1)
        return [PARTIAL]
    xs, ls = ctx.types[0].shape, ctx.types[1].shape
    if x.is_replicated:
        ctx.refuse(f"Like ({ctx.name(1)}) is {like} but X ({ctx.name(0)}) is replicated: X cannot be summed to "
                   f"a shard of Like's shape", operand=1)
    a = x.axis
    if a < off or (ls[a - off] == 1 and xs[a] != 1):
        if like.is_split:
            ctx.refuse(f"X ({ctx.name(0)}) is summed over its split axis {a}, but Like ({ctx.name(1)}) is {like}",
                       operand=1)
        return [PARTIAL]
    if like.is_split and like.axis == a - off:
        return [split(a - off)]
    ctx.refuse(f"X ({ctx.name(0)}) is split along axis {a}, which the result keeps, but Like ({ctx.name(1)}) is "
               f"{like}: it must be split along axis {a - off} too", operand=1)
    raise AssertionError


@rule("broadcast_to")
def broadcast_to(ctx: RuleContext) -> list[Placement]:
    """``BroadcastTo(X, Like)``: the result is split where ``Like`` (read for its shape) is."""
    x, like = ctx.p(0), ctx.p(1)
    off = ctx.rank(1) - ctx.rank(0)
    if x.is_partial:
        if like.is_split:
            ctx.refuse(f"X ({ctx.name(0)}) is a partial sum but Like ({ctx.name(1)}) is {like}", operand=1)
        return [PARTIAL]
    if not like.is_split:
        ctx.refuse(f"X ({ctx.name(0)}) is {x} but Like ({ctx.name(1)}) is {like}: a shard of X cannot be "
                   f"broadcast to the whole of Like's shape", operand=1)
    b = like.axis
    if x.is_split and x.axis + off == b:
        return [split(b)]
    if x.is_replicated and (b - off < 0 or ctx.types[0].shape[b - off] == 1):
        return [split(b)]
    ctx.refuse(f"X ({ctx.name(0)}) is {x} but Like ({ctx.name(1)}) is split along axis {b}", operand=0)
    raise AssertionError


def batch_op(ctx: RuleContext, axes: dict[int, Optional[int]], results: list[object]) -> list[Placement]:
    """An op with a batch axis in some operands (``axes``: operand -> its batch axis, ``None``: no batch,
    must be replicated): either none is split, or every one given is split along its batch axis.
    ``results``: each result's batch axis, or ``"partial"`` (a sum over the batch)."""
    op = ctx.op
    name = lambda i: f"{ctx.name(i)} ({type(op).operand_spec(i).name})"
    first = None
    for i in ctx.given():
        p, want = ctx.p(i), axes.get(i)
        if p.is_partial:
            ctx.refuse(f"{name(i)} is a partial sum, and {op.op_name} is not linear in it", operand=i)
        if p.is_split:
            if want is None:
                ctx.refuse(f"{name(i)} is split along axis {p.axis}, but it holds no batch axis: it must be "
                           f"replicated", operand=i)
            if p.axis != want:
                ctx.refuse(f"{name(i)} is split along axis {p.axis}; {op.op_name} can only be split along the "
                           f"batch, axis {want} of {type(op).operand_spec(i).name}", operand=i)
            first = i if first is None else first
    for i in ctx.given():  # even of size 1 there: these ops do not broadcast the batch
        want = axes.get(i)
        if want is not None and ctx.p(i).is_replicated:
            ctx.refuse(f"{name(i)} is replicated but holds the batch along axis {want}, like {name(first)}, "
                       f"which is split: split it too", operand=i)
    return [PARTIAL if r == "partial" else split(r) for r in results]  # type: ignore[arg-type]


@rule("lstm_training")
def lstm_training(ctx: RuleContext) -> list[Placement]:
    """X [S, B, I] on 1, SL [B] on 0, H0 and C0 [D, B, H] on 1; weights replicated."""
    return batch_op(ctx, {0: 1, 1: None, 2: None, 3: None, 4: 0, 5: 1, 6: 1, 7: None}, [2, 1, 1, 2, 2])


@rule("lstm_grad")
def lstm_grad(ctx: RuleContext) -> list[Placement]:
    """The batch operands of LSTMTraining plus HAll, CAll, iofc and the upstream gradients; the weight
    gradients dW, dR, dB, dP are sums over the batch: partial."""
    axes = {0: 1, 1: None, 2: None, 3: 0, 4: 1, 5: 1, 6: 2, 7: 2, 8: 2, 9: 2, 10: 1, 11: 1, 12: None}
    return batch_op(ctx, axes, [1, "partial", "partial", "partial", 1, 1, "partial"])


@rule("lstm_training_checkpointed")
def lstm_training_checkpointed(ctx: RuleContext) -> list[Placement]:
    """LSTMTraining's operands; HAll on 2, HFinal and CFinal on 1, the checkpoints [K, 2, D, B, H] on 3."""
    return batch_op(ctx, {0: 1, 1: None, 2: None, 3: None, 4: 0, 5: 1, 6: 1, 7: None}, [2, 1, 1, 3])


@rule("lstm_grad_recompute")
def lstm_grad_recompute(ctx: RuleContext) -> list[Placement]:
    """LSTMTraining's operands, the checkpoints on 3 and the upstream gradients; results as LSTMGrad's."""
    axes = {0: 1, 1: None, 2: None, 3: None, 4: 0, 5: 1, 6: 1, 7: None, 8: 3, 9: 2, 10: 1, 11: 1}
    return batch_op(ctx, axes, [1, "partial", "partial", "partial", 1, 1, "partial"])


CELL_AXES: dict[int, Optional[int]] = {0: 0, 1: 0, 2: 0, 3: None, 4: None, 5: None}


@rule("lstm_cell")
def lstm_cell(ctx: RuleContext) -> list[Placement]:
    return batch_op(ctx, CELL_AXES, [0, 0])


@rule("lstm_cell_grad")
def lstm_cell_grad(ctx: RuleContext) -> list[Placement]:
    """dH_next, dC_next, X, H, C on 0; gradients of X, H, C split, of the weights partial."""
    axes = {0: 0, 1: 0, **{k + 2: v for k, v in CELL_AXES.items()}}
    indices = ctx.attrs.get("input_indices") or (ctx.attrs["input_index"],)
    return batch_op(ctx, axes, [0 if k < 3 else "partial" for k in indices])

