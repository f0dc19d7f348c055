"""Fuzzing the shard paths (gradir.distributed): random valid graphs (``strategies.graphs``) sharded
along random inputs and axes, valid or not, and run inline in a random number of shards, valid or not.

The property: ``gradir.shard`` returns a ``Sharded`` or raises a located ``ShardError`` (a rule's
refusal, a bad batch) or an ``ArgumentError``; ``Sharded.run`` returns what the unsharded run returns,
within rounding where shards' partial sums are added (split and replicated outputs within rounding
too: a product over fewer rows may take another BLAS kernel), or raises an ``ArgumentError``,
``InputError`` or ``ShardError``.  Never another exception, never an "internal error" message, each
call within ``API_SECONDS``.

Budget as in ``tests/test_fuzz.py`` (``GRADIR_FUZZ_BUDGET``, docs/fuzzing.md): without one, a small
fixed number of examples on the NumPy kernels, derandomized.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import event, given, note
from hypothesis import strategies as st

import gradir
from gradir.cli.run import complete_inputs
from fuzzing import kernels  # noqa: F401 - the module's kernels (fixture)
from fuzzing import API_SECONDS, RUN_ELEMENTS, campaign, examples, fuzz_settings, time_limit, total_elements
from strategies import graphs

ALLOWED = (gradir.ShardError, gradir.ArgumentError, gradir.InputError)
RTOL = {np.dtype(np.float32): 1e-3, np.dtype(np.float64): 1e-9}




@st.composite
def batches(draw, g: gradir.Graph) -> dict:
    """A batch argument for ``g``: mostly inputs (by name or label) and axes in range; sometimes a name
    that is no input, an axis out of range, or a key or axis of the wrong type."""
    out: dict[Any, Any] = {}
    ranked = [i for i in g.inputs if i.type.rank]
    if ranked and draw(st.integers(0, 2)):  # a batch that may well shard: axis 0 of every input that has it
        first = draw(st.sampled_from(ranked))
        n = first.type.shape[0]
        return {i.name: 0 for i in ranked if i.type.shape[0] == n or i.type.shape[0] is None or n is None}
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["input"] * 6 + ["junk key", "junk axis"]))
        if kind == "input" and ranked:
            i = draw(st.sampled_from(ranked))
            key = i.label if i.label is not None and draw(st.booleans()) else i.name
            axis = draw(st.integers(-i.type.rank, i.type.rank - 1) | st.sampled_from([i.type.rank, -i.type.rank - 1]))
        elif kind == "junk key":
            key, axis = draw(st.sampled_from(["x", "t999", "", 0, None, ("t0",)])), 0
        else:
            key = draw(st.sampled_from([i.name for i in g.inputs] or ["t0"]))
            axis = draw(st.sampled_from([1.5, True, "0", None, 2 ** 70, -(2 ** 70)]))
        out[key] = axis
    return out


SHARDS = st.integers(1, 6) | st.sampled_from([None, 0, -1, 7, 2 ** 31, 2 ** 70, True, 2.0, "2"])


def _close(key: str, got: np.ndarray, want: np.ndarray, scale: float) -> None:
    """``got`` is ``want`` within rounding, relative to ``scale`` (the largest magnitude involved)."""
    assert got.dtype == want.dtype and got.shape == want.shape, (key, got.dtype, got.shape, want.dtype, want.shape)
    if want.dtype.kind != "f":
        assert np.array_equal(got, want), key
        return
    assert np.array_equal(np.isnan(got), np.isnan(want)), key
    ok = np.isfinite(got) & np.isfinite(want)
    assert np.array_equal(got[~ok & ~np.isnan(got)], want[~ok & ~np.isnan(want)]), key  # the same infinities
    if ok.any():
        err = float(np.max(np.abs(got[ok].astype(np.float64) - want[ok])))
        assert err <= RTOL[want.dtype] * max(scale, 1e-30), (key, err, scale)


@fuzz_settings(examples(80))
@given(st.data())
def _sharded_runs(data: st.DataObject) -> None:
    g = data.draw(graphs(max_ops=4, labels=data.draw(st.sampled_from([None, "plain"]))), "graph")
    note(g.to_text())
    batch = data.draw(batches(g), "batch")
    with time_limit(API_SECONDS, "gradir.shard"):
        try:
            s = gradir.shard(g, batch)
        except ALLOWED as e:
            assert "internal error" not in str(e) and ": error: " in str(e) or isinstance(e, gradir.ArgumentError), e
            event(f"shard: {type(e).__name__}")
            return
    if total_elements(g) > RUN_ELEMENTS:
        return
    shards = data.draw(SHARDS, "shards")
    inputs, _ = complete_inputs(g, {}, data.draw(st.integers(0, 3), "seed"))
    with time_limit(API_SECONDS, "the unsharded run"):
        try:
            want = gradir.compile(g).run(inputs)
        except gradir.GradirError:
            return  # a graph the demo inputs cannot run (class labels out of range, ...): nothing to compare
    with time_limit(API_SECONDS, "Sharded.run"):
        try:
            got = s.run(inputs, shards=shards)
        except ALLOWED as e:
            note(f"refused: {e}")
            event(f"run: {type(e).__name__}")
            assert "internal error" not in str(e), e
            if isinstance(shards, int) and not isinstance(shards, bool) and shards >= 1:
                # a valid count may only be refused for having more shards than rows
                assert "fewer than the" in str(e), e
            return
    assert list(got) == list(want)
    event("run: compared with the unsharded run")
    parts = [r.outputs for r in s.last_results]
    for j, (name, key) in enumerate(zip(g.outputs, s.output_keys)):
        scale = float(np.max(np.abs(want[key]), initial=0.0, where=np.isfinite(want[key])))
        if s.placements[name].is_partial and want[key].dtype.kind == "f":
            scale = max([scale] + [float(np.max(np.abs(p[j]), initial=0.0, where=np.isfinite(p[j]))) for p in parts])
        _close(key, got[key], want[key], scale)


def test_sharded_runs_refuse_or_agree_with_the_unsharded_run():
    campaign(_sharded_runs, 1.0)
