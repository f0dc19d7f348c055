"""An op's sharding placement checked by running it: ``check_placement`` (tests/test_shard.py; the
conformance suite reuses it for every registered op).

A placement rule is trusted by the shard graph: a weight gradient placed ``split`` where its shards
each hold a full-size partial sum, or a normalization kept ``split`` along the axis it normalizes over,
would give wrong numbers, not an error.  So the check runs the one-op graph both ways: for each way
to split the operands that the rule accepts, in 1, 2 and 4 shards, against the unsharded run.
"""

from __future__ import annotations

import itertools
import random
from typing import Any, Mapping, Optional, Sequence

import numpy as np

import gradir
from gradir import DType, Graph, GraphInput, ShardError, TensorType
from gradir.sharding import Placement, split

__all__ = ["check_placement", "splits"]


def splits(arrays: Sequence[Optional[np.ndarray]], limit: int = 4096) -> list[dict[int, int]]:
    """Ways to split the operands, as ``{operand index: axis}``: every operand given either replicated
    or split along an axis of one common size ``n`` (what a batch split of the inputs is), at least one
    split; the most operands split first (the ops that refuse a partial batch split, LSTM, take those).
    At most ``limit`` per size, a fixed sample where there are more."""
    sizes = sorted({d for a in arrays if a is not None for d in a.shape})
    out: list[dict[int, int]] = []
    for n in sizes:
        options = [[None] + [k for k, d in enumerate(a.shape) if d == n] if a is not None else [None] for a in arrays]
        if np.prod([len(o) for o in options], dtype=float) <= limit:
            combos: Any = itertools.product(*options)
        else:
            rng = random.Random(n)
            combos = [tuple(o[-1] if len(o) > 1 else None for o in options)]  # each split along its last such axis
            combos += [tuple(rng.choice(o) for o in options) for _ in range(limit)]
        found = [{i: a for i, a in enumerate(c) if a is not None} for c in combos]
        out += sorted((f for f in found if f), key=lambda f: -len(f))
    unique: list[dict[int, int]] = []
    for f in out:
        if f not in unique:
            unique.append(f)
    return unique


def _graph(op_cls: type, arrays: Sequence[Optional[np.ndarray]], attrs: Mapping[str, Any]) -> Graph:
    inputs, operands = [], []
    for k, a in enumerate(arrays):
        if a is None:
            operands.append(None)
            continue
        inputs.append(GraphInput(f"t{k}", TensorType(DType.from_numpy(a.dtype), a.shape)))
        operands.append(f"t{k}")
    n = op_cls.num_results(op_cls(["t0"], operands, attrs).resolved_attrs())
    op = op_cls([f"t{len(arrays) + j}" for j in range(n)], operands, attrs)
    return Graph(inputs, [op], list(op.results)).validate()


def check_placement(op_cls: type, arrays: Sequence[Optional[np.ndarray]], attrs: Mapping[str, Any],
                    shards: Sequence[int] = (1, 2, 4), *, limit: int = 12, rtol: float = 1e-9) -> int:
    """Run ``op_cls(arrays, attrs)`` sharded and unsharded and compare, for up to ``limit`` ways to split
    its operands (``splits``) that its placement rule accepts, each in every count of ``shards`` that
    the split size allows.  Split results are the shards' slices concatenated, partial sums their sum
    (``Sharded.run``): each must be the unsharded result within ``rtol`` of its largest magnitude (the
    arrays are best float64).  A refusal is fine (the rule says it cannot); a wrong result, or a shard
    graph whose types contradict the placements (an "internal error"), raises ``AssertionError``
    naming the op, the split and the result.  Returns how many sharded runs were compared."""
    g = _graph(op_cls, arrays, attrs)
    inputs = {f"t{k}": a for k, a in enumerate(arrays) if a is not None}
    want = gradir.compile(g).run(inputs)
    compared = accepted = 0
    for split_axes in splits(arrays):
        if accepted >= limit:
            break
        batch = {f"t{i}": a for i, a in split_axes.items()}
        shown = ", ".join(f"{op_cls.operand_spec(i).name} {split(a)}" for i, a in split_axes.items())
        try:
            s = gradir.shard(g, batch)
        except ShardError as e:
            assert "internal error" not in str(e), f"{op_cls.op_name} with {shown}: {e}"
            continue
        accepted += 1
        n = arrays[next(iter(split_axes))].shape[next(iter(split_axes.values()))]
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
