"""An op's sharding placement checked by running it: ``check_placement`` (tests/test_shard.py; the
conformance suite reuses it for every registered op).

A placement rule is trusted by the shard graph: a weight gradient placed ``split`` where its shards
each hold a full-size partial sum, or a normalization kept ``split`` along the axis it normalizes over,
would give wrong numbers, not an error.  So the check runs the one-op graph both ways: for each way
to split the operands that the rule accepts, in 1, 2 and 4 shards, against the unsharded run.  An
operand can also be a partial sum (the sum over axis 0 of an input split along it), which checks
the rules' linearity (``LINEAR_IN``, ``SHAPE_ONLY``) by numbers too.
"""

from __future__ import annotations

import itertools
import random
from typing import Any, Mapping, Optional, Sequence, Union

import numpy as np

import gradir
from gradir import DType, Graph, GraphInput, ShardError, TensorType
from gradir.distributed import Placement, split

__all__ = ["check_placement", "splits", "PARTIAL"]


PARTIAL = "partial"  # in a split: the operand is a partial sum (each shard holds a part, the value is their sum)


def splits(arrays: Sequence[Optional[np.ndarray]], limit: int = 4096) -> list[dict[int, Union[int, str]]]:
    """Ways to split the operands, as ``{operand index: axis, or PARTIAL}``: every operand given either
    replicated, or split along an axis of one common size ``n`` (what a batch split of the inputs is),
    or (a float one) a partial sum over ``n`` slices, at least one not replicated.  The ways without
    partial sums come first, each group with the most operands split first (the ops that refuse a
    partial batch split, LSTM, take those).  At most ``limit`` per size, a fixed sample where there
    are more."""
    sizes = sorted({d for a in arrays if a is not None for d in a.shape} | {4})
    plain: list[dict] = []
    partial: list[dict] = []
    for n in sizes:
        options = [[None] + [k for k, d in enumerate(a.shape) if d == n] + [PARTIAL] * (a.dtype.kind == "f")
                   if a is not None else [None] for a in arrays]
        if np.prod([len(o) for o in options], dtype=float) <= limit:
            combos: Any = itertools.product(*options)
        else:
            rng = random.Random(n)
            every = [o[-2] if len(o) > 2 else (o[-1] if len(o) > 1 and o[-1] != PARTIAL else None) for o in options]
            combos = [tuple(every)] + [tuple(rng.choice(o) for o in options) for _ in range(limit)]
        for c in combos:
            found = {i: a for i, a in enumerate(c) if a is not None}
            if found and all(a == PARTIAL for a in found.values()) and n != 4:
                continue  # partial sums alone: their count is free, 4 slices (_size)
            (partial if PARTIAL in found.values() else plain).append(found)
    out: list[dict] = []
    for group in (plain, partial):
        for f in sorted(group, key=lambda f: -len(f)):
            if f not in out:
                out.append(f)
    return out


def _size(arrays: Sequence[Optional[np.ndarray]], way: Mapping[int, Union[int, str]]) -> int:
    """The common size ``n`` of a split: its split axes' size, else (partial sums alone) 4 slices."""
    for i, a in way.items():
        if a != PARTIAL:
            return arrays[i].shape[a]  # type: ignore[union-attr,index]
    return 4


def _graph(op_cls: type, arrays: Sequence[Optional[np.ndarray]], attrs: Mapping[str, Any],
           sums: Mapping[int, int]) -> tuple[Graph, dict[str, np.ndarray]]:
    """The one-op graph over ``arrays`` and its inputs; an operand ``i`` of ``sums`` is the sum over axis 0
    of an input of ``sums[i]`` slices (random, adding up to the array): a partial sum when that input is
    split along axis 0."""
    rng = np.random.default_rng(0)
    inputs, ops, operands, values = [], [], [], {}
    for k, a in enumerate(arrays):
        if a is None:
            operands.append(None)
            continue
        v = f"t{k}"
        if k in sums:
            parts = rng.standard_normal((sums[k] - 1,) + a.shape)
            values[v] = np.concatenate([parts, (a - parts.sum(axis=0))[None]])
            inputs.append(GraphInput(v, TensorType(DType.from_numpy(a.dtype), values[v].shape)))
            ops.append(gradir.OPS["ReduceSum"]([f"t{100 + k}"], [v], {"axes": [0]}))
            operands.append(f"t{100 + k}")
        else:
            values[v] = a
            inputs.append(GraphInput(v, TensorType(DType.from_numpy(a.dtype), a.shape)))
            operands.append(v)
    n = op_cls.num_results(op_cls(["t0"], operands, attrs).resolved_attrs())
    op = op_cls([f"t{200 + j}" for j in range(n)], operands, attrs)
    return Graph(inputs, ops + [op], list(op.results)).validate(), values


def check_placement(op_cls: type, arrays: Sequence[Optional[np.ndarray]], attrs: Mapping[str, Any],
                    shards: Sequence[int] = (1, 2, 4), *, limit: int = 12, tries: int = 100,
                    rtol: float = 1e-9) -> int:
    """Run ``op_cls(arrays, attrs)`` sharded and unsharded and compare, for up to ``limit`` ways to split
    its operands (``splits``: without partial sums, and as many again with them, among the first ``tries``
    ways with them) that its placement rule accepts, each in every count of ``shards`` that the split
    size allows.  Split results are the
    shards' slices concatenated, partial sums their sum (``Sharded.run``): each must be the unsharded
    result within ``rtol`` of its largest magnitude (the arrays are best float64).  A refusal is fine
    (the rule says it cannot); a wrong result, or a shard graph whose types contradict the placements
    (an "internal error"), raises ``AssertionError`` naming the op, the split and the result.  Returns
    how many sharded runs were compared."""
    compared = tried = 0
    accepted = {False: 0, True: 0}
    for way in splits(arrays):
        has_sums = PARTIAL in way.values()
        if has_sums:
            tried += 1
        if accepted[has_sums] >= limit or tried > tries:
            if accepted[False] >= limit and (accepted[True] >= limit or tried > tries):
                break
            continue
        n = _size(arrays, way)
        g, inputs = _graph(op_cls, arrays, attrs, {i: n for i, a in way.items() if a == PARTIAL})
        batch = {f"t{i}": 0 if a == PARTIAL else a for i, a in way.items()}
        shown = ", ".join(f"{op_cls.operand_spec(i).name} {'partial' if a == PARTIAL else split(a)}"
                          for i, a in way.items())  # type: ignore[arg-type]
        try:
            s = gradir.shard(g, batch)
        except ShardError as e:
            assert "internal error" not in str(e), f"{op_cls.op_name} with {shown}: {e}"
            continue
        accepted[has_sums] += 1
        want = gradir.compile(g).run(inputs)
        for k in [k for k in shards if k <= n]:
            got = s.run(inputs, shards=k)
            compared += 1
            for name, key in zip(g.outputs, s.output_keys):
                p: Placement = s.placements[name]
                out, ref = got[key], want[key]
                what = f"{op_cls.op_name} with {shown} in {k} shards: result {key} ({p})"
                assert out.shape == ref.shape and out.dtype == ref.dtype, \
                    f"{what} has shape {out.shape} {out.dtype}, unsharded {ref.shape} {ref.dtype}"
                scale = float(np.nanmax(np.abs(ref))) if ref.size and not np.all(np.isnan(ref)) else 0.0
                assert np.allclose(out, ref, rtol=rtol, atol=rtol * max(scale, 1e-300), equal_nan=True), \
                    f"{what} differs from the unsharded run by {float(np.nanmax(np.abs(out - ref))):.3g}"
    return compared
