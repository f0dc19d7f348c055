"""The checkpointed GRU layer (issue #33, docs/memory.md "Recurrences"): GRUTrainingCheckpointed and
GRUGradRecompute give GRUTraining + GRUGrad's bits in every variant, and the recurrence provider's GRU
options rewrite a GRU LM into a program whose plan matches the options' intervals and whose budgeted
run is bit-identical to the unbudgeted one."""

from __future__ import annotations

import itertools
import re

import numpy as np
import pytest

import gradir
import gradir.ops.gru as ops_gru
from gradir.backends.cpu.kernels import gru_weights, parallel
from gradir.backends.cpu.kernels.gru import gru_grad, gru_training
from gradir.backends.cpu.kernels.gru_checkpointed import gru_grad_recompute, gru_training_checkpointed
from gradir.ops.gru_checkpointed import GRUTrainingCheckpointedOp
from gradir.transforms.memory import recurrence
from gradir.transforms.passes.pipeline import lint
from gradir.transforms.schedule import build_plan
from test_memory_recurrence import _compiled, _inputs  # the same helpers as the LSTM's

DIRECTIONS = ["forward", "reverse", "bidirectional"]
# (segment, checkpoints): every boundary a snapshot, binomial with few slots, one slot, one unit
SCHEDULES = [(3, 8), (3, 2), (6, 3), (7, 1), (40, 2)]


@pytest.fixture
def chunk_bytes(monkeypatch):  # type: ignore[no-untyped-def]
    monkeypatch.setattr(ops_gru, "CHUNK_BYTES", ops_gru.CHUNK_BYTES)  # restored after the test


def _layer(rng, S, nb, I, H, D, dt, sl, h0):  # type: ignore[no-untyped-def]
    X = rng.standard_normal((S, nb, I)).astype(dt)
    W, R = ((0.5 * rng.standard_normal((D, 3 * H, n))).astype(dt) for n in (I, H))
    B = (0.5 * rng.standard_normal((D, 6 * H))).astype(dt)
    SL = None
    if sl:  # unsorted, some rows shorter, one past every other row's end
        SL = rng.integers(1, S + 1, nb).astype(np.int32)
        SL[0], SL[-1] = S - 2, 1
    H0 = rng.standard_normal((D, nb, H)).astype(dt) if h0 else None
    return X, W, R, B, SL, H0


def _check_bits(rng, S, nb, I, H, direction, dt, sl, h0, lbr, clip, T0, schedules=SCHEDULES):  # type: ignore[no-untyped-def]
    D = 2 if direction == "bidirectional" else 1
    ops_gru.CHUNK_BYTES = T0 * nb * D * 3 * H * np.dtype(dt).itemsize
    X, W, R, B, SL, H0 = _layer(rng, S, nb, I, H, D, dt, sl, h0)
    kw = dict(hidden_size=H, direction=direction, linear_before_reset=lbr, clip=clip)
    HA, HF, ZRH = gru_training(X, W, R, B, SL, H0, **kw)
    dy = [rng.standard_normal(a.shape).astype(dt) for a in (HA, HF)]
    want = gru_grad(X, W, R, B, SL, H0, HA, ZRH, *dy, **kw)
    for segment, k in schedules:
        HA2, HF2, States = gru_training_checkpointed(X, W, R, B, SL, H0, segment=segment, checkpoints=k, **kw)
        saved = States.copy()
        got = gru_grad_recompute(X, W, R, B, SL, H0, States, *dy, segment=segment, checkpoints=k, **kw)
        where = (direction, np.dtype(dt).name, sl, h0, lbr, clip, segment, k)
        for a, b in zip((HA, HF, *want), (HA2, HF2, *got)):
            assert np.array_equal(a, b), where
        assert np.array_equal(States, saved), where  # the operand is left as it was
        got = gru_grad_recompute(X, W, R, B, SL, H0, saved.copy(), *dy, segment=segment, checkpoints=k,
                                 reuse_states=1, **kw)  # the backward's snapshots over the operand
        for a, b in zip(want, got):
            assert np.array_equal(a, b), (*where, "reuse_states")


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_checkpointed_gru_has_the_bits_of_gru_training_and_gru_grad(direction, kernel_path, chunk_bytes):
    """Every variant (sequence lengths unsorted and shorter, H0, linear_before_reset 0 and 1, clip, both
    dtypes) and schedule, on the compiled cores and the NumPy ones: np.array_equal."""
    rng = np.random.default_rng(3)
    for dt, sl, h0, lbr, clip in itertools.product([np.float32, np.float64], [False, True], [False, True], [0, 1],
                                                   [None, 0.5]):
        _check_bits(rng, 23, 5, 3, 4, direction, dt, sl, h0, lbr, clip, T0=3)


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_gru_kernels_in_small_chunks_match_the_references(direction, kernel_path, chunk_bytes):
    """GRUTraining and GRUGrad in chunks of 3 steps (the state carried from chunk to chunk, the weight
    gradients summed chunk by chunk) compute the layer: the float64 references, to rounding."""
    from gradir.ops import references
    rng = np.random.default_rng(4)
    for sl, h0, lbr, clip in itertools.product([False, True], [False, True], [0, 1], [None, 0.5]):
        D = 2 if direction == "bidirectional" else 1
        ops_gru.CHUNK_BYTES = 3 * 5 * D * 3 * 4 * 8
        X, W, R, B, SL, H0 = _layer(rng, 13, 5, 3, 4, D, np.float64, sl, h0)
        kw = dict(hidden_size=4, direction=direction, linear_before_reset=lbr, clip=clip)
        got = gru_training(X, W, R, B, SL, H0, **kw)
        want = references.gru_training(X, W, R, B, SL, H0, **kw)
        dy = [rng.standard_normal(a.shape) for a in got[:2]]
        got = (*got, *gru_grad(X, W, R, B, SL, H0, got[0], got[2], *dy, **kw))
        want = (*want, *references.gru_grad(X, W, R, B, SL, H0, want[0], want[2], *dy, **kw))
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("packed", [True, False])
def test_checkpointed_gru_has_the_bits_with_two_halves_and_threads(monkeypatch, direction, threads, packed,
                                                                   chunk_bytes):
    """A batch the compiled loops split in two halves, one thread and two, the weight gradients by the
    packed kernels (``_jit_goto``) or ``blocked.matmul``."""
    if packed:
        monkeypatch.setattr(gru_weights, "MIN_MNK", 0)
    rng = np.random.default_rng(5)
    with parallel.cores(threads):
        for dt, sl, lbr in [(np.float32, True, 1), (np.float64, False, 0), (np.float32, False, 0)]:
            _check_bits(rng, 13, 20, 5, 6, direction, dt, sl, True, lbr, None, T0=2, schedules=SCHEDULES[:3])


def test_the_reference_checkpoints_are_the_kernels(chunk_bytes):
    """``GRUTrainingCheckpointed.reference``'s States (from the reference HAll) are the kernel's, to
    rounding: the state carried into each snapshotted unit, a reverse row's in its own time order."""
    rng = np.random.default_rng(2)
    ops_gru.CHUNK_BYTES = 2 * 4 * 2 * 3 * 2 * 8  # T0 = 2 for the example's shapes (bidirectional)
    arrays, attrs = GRUTrainingCheckpointedOp.example(rng, np.float64)
    want = GRUTrainingCheckpointedOp.reference(*arrays, **attrs)
    got = gru_training_checkpointed(*arrays, **attrs)
    for a, b in zip(want, got):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
    assert np.abs(got[2]).sum() > 0


# -- the provider: choices, their intervals against the plan, a checkpointed LM run ------------------
def _lm(S: int, B: int, I: int, H: int, C: int, direction: str = "forward", lbr: int = 0) -> gradir.Graph:
    """A small GRU language model (GRU, output projection, LogSoftmax, mean) and its gradients."""
    D = 2 if direction == "bidirectional" else 1
    text = f"""
input t0 : Float32 [{S}, {B}, {I}]
input t1 : Float32 [{D}, {3 * H}, {I}]
input t2 : Float32 [{D}, {3 * H}, {H}]
input t3 : Float32 [{D}, {6 * H}]
input t4 : Float32 [{D * H}, {C}]
t5, t6, t7 = GRUTraining(t0, t1, t2, t3, hidden_size={H}, direction="{direction}", linear_before_reset={lbr})
t10 = Transpose(t5, perm=[0, 2, 1, 3])
t11 = Reshape(t10, shape=[{S * B}, {D * H}])
t12 = MatMul(t11, t4)
t13 = LogSoftmax(t12, axis=1)
t14 = ReduceMean(t13)
output t14
"""
    return gradir.grad(gradir.parse(text), wrt=["t0", "t1", "t2", "t3", "t4"])




@pytest.mark.parametrize("direction, lbr", [("forward", 1), ("bidirectional", 0)])
def test_gru_options_run_bit_identical_and_their_intervals_match_the_plan(direction, lbr, chunk_bytes):
    """Every option of the GRU's choice, applied to the program: a valid program whose run gives the
    unbudgeted outputs bit for bit, and whose planned bytes at every step are the base curve plus the
    option's intervals (those of values exactly; the kernels' working sets are intervals too)."""
    S, B, I, H, C = 24, 4, 6, 5, 7
    ops_gru.CHUNK_BYTES = 3 * B * (2 if direction == "bidirectional" else 1) * 3 * H * 4  # T0 = 3
    graph = _lm(S, B, I, H, C, direction, lbr)
    lower, program, log, base = _compiled(graph)
    inputs = _inputs(graph, 0)
    want = lower.lower(graph, program, base, None).run(inputs)
    found = recurrence.choices(program, base)
    assert len(found) == 1 and found[0].values == {"t7"}
    options = found[0].options
    assert 2 <= len(options) <= 8
    assert options[0].extra_seconds < options[-1].extra_seconds
    for opt in options:
        _, prog, _, _ = _compiled(graph)
        opt.apply(prog)
        assert lint(prog) is None
        assert [op.op_name for op in prog.ops].count("GRUGradRecompute") == 1
        plan = build_plan(prog, log, lower.kernels)
        assert len(plan.curve) == len(base.curve)
        expect = list(base.curve)
        for iv in opt.intervals:  # the values' and the kernels' working sets (declared scratch) alike
            for k in range(iv.start, iv.end + 1):
                expect[k] += iv.bytes
        for k, (a, b) in enumerate(zip(plan.curve, expect)):
            assert a == b, (opt.label, k, a, b)
        got = lower.lower(graph, prog, plan, None).run(inputs)
        assert list(got) == list(want)
        for key in want:
            assert np.array_equal(got[key], want[key]), (opt.label, key)
        assert opt.details and "checkpoints" in opt.details[0]


def test_a_budgeted_gru_lm_compiles_to_checkpoints_with_the_unbudgeted_bits(chunk_bytes):
    """``gradir.compile(..., memory_budget=...)`` of a GRU LM at its least feasible budget: the plan runs
    GRUGradRecompute and gives the unbudgeted outputs bit for bit."""
    S, B, I, H, C = 48, 4, 6, 8, 5
    ops_gru.CHUNK_BYTES = 2 * B * 3 * H * 4  # T0 = 2
    graph = _lm(S, B, I, H, C, "reverse", 1)
    inputs = _inputs(graph, 1)
    free = gradir.compile(graph, threads=1)
    want = free.run(inputs)
    with pytest.raises(gradir.CompileError) as e:
        gradir.compile(graph, threads=1, memory_budget="1KiB")
    least = re.search(r"least feasible budget is ([0-9.]+ [KMG]?i?B)", str(e.value)).group(1)
    exe = gradir.compile(graph, threads=1, memory_budget=least)
    assert exe.plan.peak_bytes < free.plan.peak_bytes
    assert "GRUGradRecompute" in [st.op.op_name for st in exe.plan.steps]
    got = exe.run(inputs)
    assert list(got) == list(want)
    for key in want:
        assert np.array_equal(got[key], want[key]), key


def test_no_gru_choice_when_the_gates_are_read_elsewhere():
    """ZRH as a graph output (or read by another op) must stay: no choice for that layer."""
    text = """
input t0 : Float32 [6, 2, 3]
input t1 : Float32 [1, 6, 3]
input t2 : Float32 [1, 6, 2]
input t3 : Float32 [6, 1, 2, 2]
t4, t5, t6 = GRUTraining(t0, t1, t2, hidden_size=2)
t9, t10, t11, t12, t13 = GRUGrad(t0, t1, t2, _, _, _, t4, t6, t3, hidden_size=2)
output t10, t6
"""
    _, program, _, plan = _compiled(gradir.parse(text))
    assert recurrence.choices(program, plan) == []
    _, program, _, plan = _compiled(gradir.parse(text.replace("output t10, t6", "output t10")))
    assert [c.key for c in recurrence.choices(program, plan)] == ["gru t4"]

