"""The recurrences' memory choices (docs/memory.md, "Recurrences"): an ``LSTMTraining`` whose cell states
and gates (``CAll``, ``iofc``) only its ``LSTMGrad`` reads can become ``LSTMTrainingCheckpointed`` +
``LSTMGradRecompute``, which keep binomial checkpoints of the (h, c) state instead and recompute the
gates unit by unit in the backward, with the same bits; likewise a ``GRUTraining`` whose gates (``ZRH``)
only its ``GRUGrad`` reads, as ``GRUTrainingCheckpointed`` + ``GRUGradRecompute`` (checkpoints of h; the
backward recomputes HAll too, so HAll lives on only for its other readers).  One ``Choice`` per such
pair; its options are
``revolve.lstm_plans``' Pareto set (segment length, snapshot slots), each with its memory change against
the base plan (``Interval``s) and its predicted extra time (the forward's recomputed steps at the base
plan's estimated cost per step, ``gradir.transforms.cost``).
"""

from __future__ import annotations

from typing import Any, Optional

from ...ir.op import OPS
from ...ir.types import TensorType
from ...ops.gru import chunk_steps as gru_chunk_steps
from ...ops.gru import scratch_bytes as gru_scratch
from ...ops.lstm import chunk_steps, unit_steps
from ..cost import value_bytes
from ..passes.pipeline import Program
from ..schedule import donations
from . import revolve
from .model import Choice, Interval, Option

__all__ = ["choices"]

# GRUGrad's operands: X, W, R, B, SL, H0 (GRUTraining's), HAll, ZRH, dHAll, dHFinal
_GRU_SAME = tuple((i, i) for i in range(6))
# LSTMGrad's operands: X, W, R, SL, H0, C0, HAll, CAll, iofc, dHAll, dHFinal, dCFinal, P
_SAME = ((0, 0), (1, 1), (2, 2), (3, 4), (4, 5), (5, 6), (12, 7))  # (LSTMGrad operand, LSTMTraining operand)


def choices(program: Program, plan: Any) -> list[Choice]:
    """One ``Choice`` per LSTMTraining/LSTMGrad pair that can keep checkpoints instead of CAll and iofc, and
    per GRUTraining/GRUGrad pair that can keep them instead of ZRH."""
    readers: dict[str, list[int]] = {}
    for st in plan.steps:
        for v in set(st.operands):
            if v is not None:
                readers.setdefault(v, []).append(st.index)
    keep = set(plan.keep) | set(plan.live_outputs)
    out = []
    for st in plan.steps:
        c = (_choice(program, plan, st, readers, keep) if st.op.op_name == "LSTMTraining" else
             _gru_choice(plan, st, readers, keep) if st.op.op_name == "GRUTraining" else None)
        if c is not None:
            out.append(c)
    return out


def _choice(program: Program, plan: Any, f: Any, readers: dict[str, list[int]], keep: set[str]) -> Optional[Choice]:
    HAll, _hf, _cf, CAll, iofc = f.results
    rd = readers.get(CAll, [])
    if len(rd) != 1 or readers.get(iofc, []) != rd or CAll in keep or iofc in keep:
        return None
    g = plan.steps[rd[0]]
    if g.op.op_name != "LSTMGrad" or g.operands[6] != HAll or g.operands[7] != CAll or g.operands[8] != iofc:
        return None
    fops = list(f.operands) + [None] * (8 - len(f.operands))
    if any(g.operands[i] != fops[j] for i, j in _SAME):
        return None  # the backward of other operands than the forward's
    types = plan.types
    tx, th = types.get(fops[0]), types.get(HAll)
    if tx is None or th is None or any(not isinstance(d, int) for d in (*tx.shape, *th.shape)):
        return None  # dimensions known only at run time
    S, D, nb, h = th.shape
    itemsize = tx.dtype.itemsize
    T0 = chunk_steps(S, nb, D, h, itemsize)
    state = 2 * D * nb * h * itemsize  # one (h, c) snapshot
    tape = D * nb * 6 * h * itemsize  # one step's gates, C and H kept by the recompute
    step_seconds = f.cost / max(1, S)
    # HAll lives on only for its other readers once LSTMGrad no longer reads it
    views = getattr(plan, "views", {})
    shared = {HAll} | {v for v in views if _root(views, v) == HAll}  # HAll and its views share its buffer
    others = [k for v in shared for k in readers.get(v, []) if k != g.index]
    h_end = max(others, default=f.index)
    free_h = not (shared & keep) and h_end < g.index
    attrs = {a: f.op.attrs[a] for a in f.op.attrs}
    removed = value_bytes(types[CAll]) + value_bytes(types[iofc])
    donated = _donated(plan, g, f, HAll, h_end, free_h, views, readers, keep)
    options = []
    for p in revolve.lstm_plans(S, T0, state, tape, 0, step_seconds):
        L = unit_steps(p.segment, T0, S)
        work = (min(L, S) + 1) * tape  # the unit's buffer (the backward's snapshots go over States: reuse_states)
        fwd_scratch = min(T0, S) * D * nb * 5 * h * itemsize
        values = [Interval(-removed + p.slots * state, f.index, g.index)]
        if free_h and h_end + 1 <= g.index:
            values.append(Interval(-value_bytes(th), h_end + 1, g.index))
        values += donated
        # the kernels' working sets (outside the planned values: a unit's buffer in the backward, a
        # chunk's in the forward)
        scratch = [Interval(work, g.index, g.index), Interval(fwd_scratch, f.index, f.index)]
        n = -(-S // L)
        label = (f"{HAll}: LSTM keeps {p.slots} checkpoint{'s' if p.slots != 1 else ''} of (h, c) for {n} "
                 f"segment{'s' if n != 1 else ''} of {L} steps, recomputes the gates ({p.recomputed_steps} steps)")
        details = [f"checkpoints {p.slots}, segment {L} steps ({n} segments, chunk {T0}), at most "
                   f"{p.max_recomputations} recomputation{'s' if p.max_recomputations != 1 else ''} per step",
                   f"drops {CAll} and {iofc} ({_mib(removed)}); keeps {_mib(p.slots * state)} of checkpoints"]
        opt = Option(label, p.extra_seconds, values + scratch, _apply(f.results, g.results, attrs, L, p.slots, types),
                     details)
        opt.scratch = scratch  # type: ignore[attr-defined]  # (tests: what the plan's values do not show)
        options.append(opt)
    return Choice(f"lstm {HAll}", options, frozenset({CAll, iofc}))


def _donated(plan: Any, g: Any, f: Any, HAll: str, h_end: int, free_h: bool, views: dict, readers: dict,
             keep: set[str]) -> list[Interval]:
    """What the rewrite lets the plan write in place (``KernelInfo.donate``, ``schedule.build_plan``), as
    intervals: once the backward no longer reads HAll, HAll's last other reader may write a result over it
    (a ``Chunked`` region: dH over HAll), its blocks then staged in its scratch; and LSTMGradRecompute
    writes dX over a dHAll that dies there (one direction, ``I == H``), which LSTMGrad does not."""
    types, out = plan.types, []
    st = plan.steps[h_end]
    if free_h and h_end > f.index and HAll in st.operands and HAll not in views:
        pairs = donations(st, types)
        for j, r in enumerate(st.results):
            i = next((i for i, v in enumerate(st.operands) if v == HAll and (j, i) in pairs), None)
            if i is None or j in st.inplace or types.get(r) is None or types[r].dtype != types[HAll].dtype \
                    or value_bytes(types[r]) != value_bytes(types[HAll]):
                continue
            if any(k != i and (j, k) in pairs and _dies(st.operands[k], st, plan, views, readers, keep)
                   for k in range(len(st.operands))):
                break  # another operand would be given first: the base plan may not already count on it
            grow = 0
            if hasattr(st.op, "scratch_bytes"):
                now = {st.results[k] for k in st.inplace}
                grow = st.op.scratch_bytes(now | {r}) - st.op.scratch_bytes(now)
            out.append(Interval(grow - value_bytes(types[HAll]), h_end, h_end))
            break
    dH, dX = (g.operands[9] if len(g.operands) > 9 else None), g.results[0]
    tx, td = types.get(g.operands[0]), types.get(dH) if dH is not None else None
    if (td is not None and tx is not None and td.shape[1] == 1 and td.shape[3] == tx.shape[2]
            and _dies(dH, g, plan, views, readers, keep) and types.get(dX) is not None):
        out.append(Interval(-value_bytes(types[dX]), g.index, g.index))
    return out


def _dies(v: Any, st: Any, plan: Any, views: dict, readers: dict, keep: set[str]) -> bool:
    """``v`` is made by a step, not kept, not a view nor viewed, and read last by ``st``."""
    return (v is not None and v not in keep and v not in plan.inputs and v not in views
            and v not in views.values() and max(readers.get(v, [-1])) == st.index)


def _gru_choice(plan: Any, f: Any, readers: dict[str, list[int]], keep: set[str]) -> Optional[Choice]:
    """The GRU pair's choice: as the LSTM's, with h the only state, ZRH the values dropped, and HAll
    (which GRUGradRecompute recomputes) freed after its last other reader."""
    HAll, _hf, ZRH = f.results
    rd = readers.get(ZRH, [])
    if len(rd) != 1 or ZRH in keep:
        return None
    g = plan.steps[rd[0]]
    if g.op.op_name != "GRUGrad" or g.operands[6] != HAll or g.operands[7] != ZRH:
        return None
    fops = list(f.operands) + [None] * (6 - len(f.operands))
    if any(g.operands[i] != fops[j] for i, j in _GRU_SAME):
        return None  # the backward of other operands than the forward's
    types = plan.types
    tx, th = types.get(fops[0]), types.get(HAll)
    if tx is None or th is None or any(not isinstance(d, int) for d in (*tx.shape, *th.shape)):
        return None  # dimensions known only at run time
    S, D, nb, h = th.shape
    itemsize = tx.dtype.itemsize
    T0 = gru_chunk_steps(S, nb, D, h, itemsize)
    state = D * nb * h * itemsize  # one snapshot of h
    tape = nb * 4 * h * itemsize  # one step of the unit buffer (H and the gates; one direction at a time)
    views = getattr(plan, "views", {})
    shared = {HAll} | {v for v in views if _root(views, v) == HAll}
    others = [k for v in shared for k in readers.get(v, []) if k != g.index]
    h_end = max(others, default=f.index)
    free_h = not (shared & keep) and h_end < g.index
    attrs = {a: f.op.attrs[a] for a in f.op.attrs}
    removed = value_bytes(types[ZRH])
    options = []
    for p in revolve.lstm_plans(S, T0, state, tape, 0, f.cost / max(1, S)):
        L = unit_steps(p.segment, T0, S)
        n = -(-S // L)
        values = [Interval(-removed + p.slots * state, f.index, g.index)]
        if free_h and h_end + 1 <= g.index:
            values.append(Interval(-value_bytes(th), h_end + 1, g.index))
        # the kernels' declared scratch, new against old (``gradir.ops.gru.scratch_bytes``)
        sizes = (S, nb, tx.shape[2], h, D, itemsize, attrs.get("direction", "forward"), L, p.slots)
        scratch = [Interval(gru_scratch("recompute", *sizes, reuse_states=1) - gru_scratch("grad", *sizes),
                            g.index, g.index),
                   Interval(gru_scratch("checkpointed", *sizes) - gru_scratch("training", *sizes), f.index, f.index)]
        label = (f"{HAll}: GRU keeps {p.slots} checkpoint{'s' if p.slots != 1 else ''} of h for {n} "
                 f"segment{'s' if n != 1 else ''} of {L} steps, recomputes the gates ({p.recomputed_steps} steps)")
        details = [f"checkpoints {p.slots}, segment {L} steps ({n} segments, chunk {T0}), at most "
                   f"{p.max_recomputations} recomputation{'s' if p.max_recomputations != 1 else ''} per step",
                   f"drops {ZRH} ({_mib(removed)}); keeps {_mib(p.slots * state)} of checkpoints"]
        opt = Option(label, p.extra_seconds, values + scratch, _gru_apply(f.results, g.results, attrs, L, p.slots),
                     details)
        opt.scratch = scratch  # type: ignore[attr-defined]
        options.append(opt)
    return Choice(f"gru {HAll}", options, frozenset({ZRH}))


def _gru_apply(fres: list[str], gres: list[str], attrs: dict[str, Any], segment: int, slots: int):  # type: ignore[no-untyped-def]
    """The GRU pair's rewrite into GRUTrainingCheckpointed + GRUGradRecompute."""
    HAll, HFinal, ZRH = fres

    def apply(program: Program) -> None:
        fi = next(i for i, op in enumerate(program.ops) if op.results and op.results[0] == HAll)
        gi = next(i for i, op in enumerate(program.ops) if list(op.results) == list(gres))
        fwd, grad = program.ops[fi], program.ops[gi]
        ops = list(fwd.operands) + [None] * (6 - len(fwd.operands))
        t = program.types[HAll]
        S, D, nb, h = t.shape
        states = _fresh(program, f"{HAll}_checkpoints")
        program.types[states] = TensorType(t.dtype, [slots, D, nb, h])
        a = dict(attrs, segment=segment, checkpoints=slots)
        program.ops[fi] = OPS["GRUTrainingCheckpointed"](
            [HAll, HFinal, states], ops[:6], a, result_types=[program.types[v] for v in (HAll, HFinal, states)],
            loc=fwd.loc)
        gops = list(grad.operands) + [None] * (10 - len(grad.operands))
        program.ops[gi] = OPS["GRUGradRecompute"](  # States is read by it alone: it may write over it
            list(grad.results), ops[:6] + [states] + gops[8:10], dict(a, reuse_states=1),
            result_types=[program.types[v] for v in grad.results], loc=grad.loc)
        program.types.pop(ZRH, None)

    return apply


def _root(views: dict[str, str], v: str) -> str:
    while v in views:
        v = views[v]
    return v


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB"


def _apply(fres: list[str], gres: list[str], attrs: dict[str, Any], segment: int, slots: int,
           types: dict[str, TensorType]):  # type: ignore[no-untyped-def]
    """The rewrite: the pair (found by their result names) becomes the checkpointed pair."""
    HAll, HFinal, CFinal, CAll, iofc = fres

    def apply(program: Program) -> None:
        fi = next(i for i, op in enumerate(program.ops) if op.results and op.results[0] == HAll)
        gi = next(i for i, op in enumerate(program.ops) if list(op.results) == list(gres))
        fwd, grad = program.ops[fi], program.ops[gi]
        ops = list(fwd.operands) + [None] * (8 - len(fwd.operands))
        t = program.types[HAll]
        S, D, nb, h = t.shape
        states = _fresh(program, f"{HAll}_checkpoints")
        program.types[states] = TensorType(t.dtype, [slots, 2, D, nb, h])
        a = dict(attrs, segment=segment, checkpoints=slots)
        program.ops[fi] = OPS["LSTMTrainingCheckpointed"](
            [HAll, HFinal, CFinal, states], ops[:8], a,
            result_types=[program.types[v] for v in (HAll, HFinal, CFinal, states)], loc=fwd.loc)
        gops = list(grad.operands) + [None] * (13 - len(grad.operands))
        program.ops[gi] = OPS["LSTMGradRecompute"](  # States is read by it alone: it may write over it
            list(grad.results), ops[:8] + [states] + gops[9:12], dict(a, reuse_states=1),
            result_types=[program.types[v] for v in grad.results], loc=grad.loc)
        for v in (CAll, iofc):
            program.types.pop(v, None)

    return apply


def _fresh(program: Program, base: str) -> str:
    name, k = base, 1
    taken = set(program.types) | set(program.inputs)
    while name in taken:
        k += 1
        name = f"{base}{k}"
    return name
