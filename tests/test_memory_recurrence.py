"""Recurrences under a memory budget (docs/memory.md, "Recurrences"): binomial checkpointing (revolve),
the checkpointed LSTM ops bit-identical to LSTMTraining + LSTMGrad, and their choice provider."""

from __future__ import annotations

import pytest

from gradir.transforms.memory import revolve


def _simulate(n: int, s: int) -> int:
    """Run ``schedule(n, s)`` on positions: every action valid, units reversed last first; its advances."""
    slots, hand, advances, reversed_ = {0: 0}, None, 0, []
    for a in revolve.schedule(n, s):
        if a.kind == "restore":
            assert slots[a.slot] == a.unit
            hand = a.unit
        elif a.kind == "advance":
            assert hand == a.unit and a.to > a.unit
            advances += a.to - a.unit
            hand = a.to
        elif a.kind == "snapshot":
            assert hand == a.unit and 0 < a.slot < s
            slots[a.slot] = hand
        else:
            assert a.kind == "reverse" and hand == a.unit
            reversed_.append(a.unit)
            hand = None
    assert reversed_ == list(range(n - 1, -1, -1))
    return advances


def test_revolve_closed_form_and_schedule_match_the_dynamic_program():
    for n in range(1, 41):
        for s in range(1, 7):
            best = revolve.brute_force(n, s)
            assert revolve.min_advances(n, s) == best, (n, s)
            assert _simulate(n, s) == best, (n, s)


def test_revolve_schedule_is_deterministic_and_split_between_forward_and_backward():
    a = revolve.schedule(23, 4)
    assert a == revolve.schedule(23, 4)
    assert revolve.descent(a) + revolve.backward_actions(a) == a
    assert all(x.kind != "reverse" for x in revolve.descent(a))
    assert revolve.backward_actions(a)[0].kind == "restore"
    # every boundary a snapshot: the backward recomputes each unit once (one extra forward)
    assert revolve.recomputed_units(10, 10) == 10 and revolve.max_recomputations(10, 10) == 1
    assert revolve.recomputed_units(10, 1) == 10 * 9 // 2 + 10


def test_revolve_rejects_empty_chains():
    with pytest.raises(ValueError, match="n >= 1"):
        revolve.schedule(0, 2)


def test_lstm_plans_are_a_small_pareto_front_from_one_extra_forward_down():
    plans = revolve.lstm_plans(2048, 32, 2 * 32 * 512 * 4, 6 * 32 * 512 * 4, 1 << 20, 1e-4)
    assert 2 <= len(plans) <= 24
    assert plans[0].recomputed_steps == 2048 and plans[0].max_recomputations == 1
    assert all(p.segment % 32 == 0 for p in plans)
    for p, q in zip(plans, plans[1:]):
        assert q.memory < p.memory and q.extra_seconds >= p.extra_seconds


def test_the_ops_descent_slots_are_revolves_first_descent():
    from gradir.ops.lstm_checkpointed import descent_slots
    for n in range(1, 30):
        for s in range(1, 8):
            acts = revolve.descent(revolve.schedule(n, s))
            want = {0: 0} | {a.unit: a.slot for a in acts if a.kind == "snapshot"}
            assert descent_slots(n, s) == want, (n, s)


# -- the checkpointed ops' kernels: LSTMTraining + LSTMGrad's bits ------------------------------------
import itertools  # noqa: E402

import numpy as np  # noqa: E402
from test_kernels_lstm import force_path  # noqa: E402

import gradir.ops.lstm as ops_lstm  # noqa: E402
from gradir.backends.cpu.kernels import jit, parallel  # noqa: E402
from gradir.backends.cpu.kernels.lstm import common as lstm_common  # noqa: E402
from gradir.backends.cpu.kernels.lstm import (lstm_grad, lstm_grad_recompute, lstm_training,  # noqa: E402
                                              lstm_training_checkpointed)

DIRECTIONS = ["forward", "reverse", "bidirectional"]
# (segment, checkpoints): every boundary a snapshot, binomial with few slots, one slot, one unit
SCHEDULES = [(3, 8), (3, 2), (6, 3), (7, 1), (40, 2)]


def _layer(rng, S, nb, I, H, D, dt, sl, h0, p):  # type: ignore[no-untyped-def]
    X = rng.standard_normal((S, nb, I)).astype(dt)
    W, R = ((0.5 * rng.standard_normal((D, 4 * H, n))).astype(dt) for n in (I, H))
    B = (0.5 * rng.standard_normal((D, 8 * H))).astype(dt)
    SL = None
    if sl:  # unsorted, some rows shorter, one past every other row's end
        SL = rng.integers(1, S + 1, nb).astype(np.int32)
        SL[0], SL[-1] = S - 2, 1
    H0, C0 = (rng.standard_normal((D, nb, H)).astype(dt) if h0 else None for _ in range(2))
    P = (0.5 * rng.standard_normal((D, 3 * H))).astype(dt) if p else None
    return X, W, R, B, SL, H0, C0, P


def _check_bits(rng, S, nb, I, H, direction, dt, sl, h0, p, T0, schedules=SCHEDULES):  # type: ignore[no-untyped-def]
    D = 2 if direction == "bidirectional" else 1
    ops_lstm.CHUNK_BYTES = T0 * nb * D * 4 * H * np.dtype(dt).itemsize
    X, W, R, B, SL, H0, C0, P = _layer(rng, S, nb, I, H, D, dt, sl, h0, p)
    HA, HF, CF, CA, G = lstm_training(X, W, R, B, SL, H0, C0, P, hidden_size=H, direction=direction)
    dy = [rng.standard_normal(a.shape).astype(dt) for a in (HA, HF, CF)]
    want = lstm_grad(X, W, R, SL, H0, C0, HA, CA, G, *dy, P, hidden_size=H, direction=direction)
    for segment, k in schedules:
        attrs = dict(hidden_size=H, direction=direction, segment=segment, checkpoints=k)
        HA2, HF2, CF2, States = lstm_training_checkpointed(X, W, R, B, SL, H0, C0, P, **attrs)
        saved = States.copy()
        got = lstm_grad_recompute(X, W, R, B, SL, H0, C0, P, States, *dy, **attrs)
        where = (direction, np.dtype(dt).name, sl, h0, p, segment, k)
        for a, b in zip((HA, HF, CF, *want), (HA2, HF2, CF2, *got)):
            assert np.array_equal(a, b), where
        assert np.array_equal(States, saved), where  # the operand is left as it was
        # reuse_states: the backward's snapshots written over the operand, the same bits
        mine = saved.copy()
        got = lstm_grad_recompute(X, W, R, B, SL, H0, C0, P, mine, *dy, reuse_states=1, **attrs)
        for a, b in zip(want, got):
            assert np.array_equal(a, b), (*where, "reuse_states")


@pytest.fixture
def chunk_bytes(monkeypatch):  # type: ignore[no-untyped-def]
    monkeypatch.setattr(ops_lstm, "CHUNK_BYTES", ops_lstm.CHUNK_BYTES)  # restored after the test


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_checkpointed_ops_have_the_bits_of_lstm_training_and_lstm_grad(direction, kernel_path, chunk_bytes):
    """Every variant (sequence lengths, H0/C0, peepholes, both dtypes) and schedule, on the small
    problems' paths (the compiled whole loops, or the NumPy kernels): np.array_equal."""
    rng = np.random.default_rng(3)
    for dt, sl, h0, p in itertools.product([np.float32, np.float64], [False, True], [False, True], [False, True]):
        _check_bits(rng, 23, 5, 3, 4, direction, dt, sl, h0, p, T0=3)


@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("path", ["per_step", "halves", "halves_blas", "halves_acc"])
@pytest.mark.parametrize("threads", [1, 2])
def test_checkpointed_ops_have_the_bits_on_the_large_problem_paths(monkeypatch, direction, path, threads,
                                                                   chunk_bytes):
    """The large problems' paths (one step per compiled call and BLAS per step; two half-batch loops,
    with the packed-panel GEMM or BLAS; dX in the step loops), with one thread and two."""
    force_path(monkeypatch, path)
    monkeypatch.setattr(jit, "_on", True)
    rng = np.random.default_rng(5)
    with parallel.cores(threads):
        for dt, sl, p in [(np.float32, True, True), (np.float64, False, True), (np.float32, False, False)]:
            _check_bits(rng, 17, 6, 5, 3, direction, dt, sl, True, p, T0=2, schedules=SCHEDULES[:3])


def test_checkpointed_ops_have_the_bits_on_a_large_problem(chunk_bytes):
    """A batch and hidden size past the small-problem threshold, as they come (no path forced)."""
    rng = np.random.default_rng(8)
    assert 64 * 4 * 80 > lstm_common.WHOLE_LOOP_MAX
    _check_bits(rng, 12, 64, 16, 80, "forward", np.float32, True, True, True, T0=4, schedules=[(4, 2), (8, 1)])
    _check_bits(rng, 12, 64, 16, 80, "bidirectional", np.float64, False, False, False, T0=4, schedules=[(4, 3)])


def _check_donated_bits(rng, S, nb, H, direction, sl, T0, schedules):  # type: ignore[no-untyped-def]
    """LSTMGradRecompute writing dX over dHAll (``I == H``, one direction: the plan's donation): the bits of
    fresh buffers (each chunk reads a step's dHAll before it writes that step's dX)."""
    dt = np.float32
    ops_lstm.CHUNK_BYTES = T0 * nb * 4 * H * 4
    X, W, R, B, SL, H0, C0, P = _layer(rng, S, nb, H, H, 1, dt, sl, True, True)
    HA, HF, CF, _, _ = lstm_training(X, W, R, B, SL, H0, C0, P, hidden_size=H, direction=direction)
    dy = [rng.standard_normal(a.shape).astype(dt) for a in (HA, HF, CF)]
    for segment, k in schedules:
        attrs = dict(hidden_size=H, direction=direction, segment=segment, checkpoints=k)
        States = lstm_training_checkpointed(X, W, R, B, SL, H0, C0, P, **attrs)[3]
        want = lstm_grad_recompute(X, W, R, B, SL, H0, C0, P, States, *dy, **attrs)
        dH = dy[0].copy()
        out = (dH.reshape(X.shape),) + tuple(np.empty_like(a) for a in want[1:])
        got = lstm_grad_recompute(X, W, R, B, SL, H0, C0, P, States, dH, dy[1], dy[2], out=out, **attrs)
        assert np.shares_memory(got[0], dH)
        for a, b in zip(want, got):
            assert np.array_equal(a, b), (direction, sl, segment, k)


@pytest.mark.parametrize("direction", ["forward", "reverse"])
@pytest.mark.parametrize("path", ["default", "per_step", "halves", "halves_blas", "halves_acc"])
@pytest.mark.parametrize("threads", [1, 2])
def test_dx_written_over_dhall_has_the_bits_of_fresh_buffers(monkeypatch, direction, path, threads, chunk_bytes):
    if path != "default":
        force_path(monkeypatch, path)
        monkeypatch.setattr(jit, "_on", True)
    rng = np.random.default_rng(11)
    with parallel.cores(threads):
        for sl in (False, True):
            _check_donated_bits(rng, 17, 6, 5, direction, sl, T0=2, schedules=[(2, 9), (4, 2)])
        _check_donated_bits(rng, 12, 64, 80, direction, True, T0=4, schedules=[(4, 2)])  # the large paths


# each backward op with its forward, the layer's weights and the States it writes over (operand 8 / 6)
_RECOMPUTE = {
    "lstm": ("input t1 : Float32 [1, 8, 3]\ninput t2 : Float32 [1, 8, 2]",
             "t5, t6, t7, t8 = LSTMTrainingCheckpointed(t0, t1, t2, hidden_size=2, segment=1, checkpoints=2)",
             "t10, t11, t12, t13, t14, t15, t16 = LSTMGradRecompute(t0, t1, t2, _, _, _, _, _, t8, t9",
             "Float32 [2, 2, 1, 2, 2]"),
    "gru": ("input t1 : Float32 [1, 6, 3]\ninput t2 : Float32 [1, 6, 2]",
            "t5, t6, t8 = GRUTrainingCheckpointed(t0, t1, t2, hidden_size=2, segment=1, checkpoints=2)",
            "t10, t11, t12, t13, t14 = GRUGradRecompute(t0, t1, t2, _, _, _, t8, t9", "Float32 [2, 1, 2, 2]"),
}


@pytest.mark.parametrize("kind", sorted(_RECOMPUTE))
@pytest.mark.parametrize("case, why", [
    ("output", "is an output of the graph"), ("input", "is an input of the graph"), ("other", "is read by Neg too")])
def test_writing_over_the_states_is_refused_unless_it_is_read_by_that_op_alone(kind, case, why):
    """``reuse_states=1`` overwrites ``States``: a located error when anything else could see it; the same
    graph with ``reuse_states=0`` compiles.  (The planner's rewrites set it; they run in the tests below.)"""
    weights, made, call, states_type = _RECOMPUTE[kind]
    states = f"input t8 : {states_type}" if case == "input" else made
    if case == "other":
        states += "\nt17 = Neg(t8)"
    out = {"output": "t10, t8", "other": "t10, t17"}.get(case, "t10")

    def graph(reuse: int) -> str:
        return (f"input t0 : Float32 [4, 2, 3]\n{weights}\ninput t9 : Float32 [4, 1, 2, 2]\n{states}\n"
                f"{call}, hidden_size=2, segment=1, checkpoints=2, reuse_states={reuse})\noutput {out}\n")
    with pytest.raises(gradir.CompileError) as e:
        gradir.compile(graph(1))
    msg = str(e.value)
    op = call.split(" = ")[1].split("(")[0]
    assert f"{op} writes over its operand States (t8)" in msg and why in msg, msg
    line = 7 if case == "other" else 6
    assert msg.startswith(f"<string>:{line}:") and f"= {op}(" in msg and "^^^" in msg, msg  # located at the op
    gradir.compile(graph(0))


# -- the provider: choices, their intervals against the plan, a checkpointed LM run ------------------
import gradir  # noqa: E402
from gradir.backends.base import get_backend  # noqa: E402
from gradir.transforms.memory import recurrence  # noqa: E402
from gradir.transforms.passes.pipeline import Program, lint, run_passes  # noqa: E402
from gradir.transforms.schedule import build_plan  # noqa: E402


def _lm(S: int, B: int, I: int, H: int, C: int, direction: str = "forward") -> gradir.Graph:
    """A small LSTM language model (LSTM, output projection, LogSoftmax, mean) and its gradients."""
    D = 2 if direction == "bidirectional" else 1
    text = f"""
input t0 : Float32 [{S}, {B}, {I}]
input t1 : Float32 [{D}, {4 * H}, {I}]
input t2 : Float32 [{D}, {4 * H}, {H}]
input t3 : Float32 [{D}, {8 * H}]
input t4 : Float32 [{D * H}, {C}]
t5, t6, t7, t8, t9 = LSTMTraining(t0, t1, t2, t3, hidden_size={H}, direction="{direction}")
t10 = Transpose(t5, perm=[0, 2, 1, 3])
t11 = Reshape(t10, shape=[{S * B}, {D * H}])
t12 = MatMul(t11, t4)
t13 = LogSoftmax(t12, axis=1)
t14 = ReduceMean(t13)
output t14
"""
    return gradir.grad(gradir.parse(text), wrt=["t0", "t1", "t2", "t3", "t4"])


def _compiled(graph: gradir.Graph):  # type: ignore[no-untyped-def]
    lower = get_backend("cpu")
    program = Program(graph, lower)
    log = run_passes(program)
    return lower, program, log, build_plan(program, log, lower.kernels)


def _inputs(graph: gradir.Graph, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    return {i.name: (0.5 * rng.standard_normal([int(d) for d in i.type.shape])).astype(np.float32)
            for i in graph.inputs}


@pytest.mark.parametrize("direction, I", [("forward", 6), ("bidirectional", 6), ("forward", 5)])
def test_recurrence_options_run_bit_identical_and_their_intervals_match_the_plan(direction, I, chunk_bytes):
    """Every option of the LSTM's choice, applied to the program: a valid program whose run gives the
    unbudgeted outputs bit for bit, and whose planned bytes at every step are the base curve plus the
    option's intervals (the values', the kernels' declared scratch, and with ``I == H`` dX written over
    dHAll, which the rewrite allows: exactly)."""
    S, B, H, C = 24, 4, 5, 7
    ops_lstm.CHUNK_BYTES = 3 * B * (2 if direction == "bidirectional" else 1) * 4 * H * 4  # T0 = 3
    graph = _lm(S, B, I, H, C, direction)
    lower, program, log, base = _compiled(graph)
    inputs = _inputs(graph, 0)
    want = lower.lower(graph, program, base, None).run(inputs)
    found = recurrence.choices(program, base)
    assert len(found) == 1 and found[0].values == {"t8", "t9"}
    options = found[0].options
    assert 2 <= len(options) <= 8
    assert options[0].extra_seconds < options[-1].extra_seconds
    for opt in options:
        _, prog, _, _ = _compiled(graph)
        opt.apply(prog)
        assert lint(prog) is None
        assert [op.op_name for op in prog.ops].count("LSTMGradRecompute") == 1
        plan = build_plan(prog, log, lower.kernels)
        grad = next(st for st in plan.steps if st.op.op_name == "LSTMGradRecompute")
        assert bool(grad.inplace) == (I == H and direction == "forward")
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


def test_no_recurrence_choice_when_cell_states_are_read_elsewhere():
    """CAll as a graph output (or read by another op) must stay: no choice for that layer."""
    text = """
input t0 : Float32 [6, 2, 3]
input t1 : Float32 [1, 8, 3]
input t2 : Float32 [1, 8, 2]
input t3 : Float32 [6, 1, 2, 2]
t4, t5, t6, t7, t8 = LSTMTraining(t0, t1, t2, hidden_size=2)
t9, t10, t11, t12, t13, t14, t15 = LSTMGrad(t0, t1, t2, _, _, _, t4, t7, t8, t3, hidden_size=2)
output t10, t7
"""
    _, program, _, plan = _compiled(gradir.parse(text))
    assert recurrence.choices(program, plan) == []
    _, program, _, plan = _compiled(gradir.parse(text.replace("output t10, t7", "output t10")))
    assert [c.key for c in recurrence.choices(program, plan)] == ["lstm t4"]


def test_the_judged_lstm_lm_plans_within_a_quarter_of_its_unbudgeted_peak():
    """The judged case (S = 2048, B = 32, I = H = 512, 256 classes, mean cross-entropy; every gradient, dX
    included), planned only: 25% of the unbudgeted planned peak is feasible (it used to need 401.8 MiB: X,
    HAll, dHAll and dX live at once; then 299 MiB with 8 MB chunks) and the chosen plan writes dH over HAll
    and dX over dHAll."""
    text = """
input t0 : Float32 [2048, 32, 512]
input t1 : Float32 [1, 2048, 512]
input t2 : Float32 [1, 2048, 512]
input t3 : Float32 [1, 4096]
input t4 : Float32 [512, 256]
input t5 : Int64 [65536]
t6, t7, t8, t9, t10 = LSTMTraining(t0, t1, t2, t3, hidden_size=512)
t11 = Reshape(t6, shape=[65536, 512])
t12 = MatMul(t11, t4)
t13, t14 = SoftmaxCrossEntropyLoss(t12, t5, reduction="mean")
output t13
"""
    graph = gradir.grad(gradir.parse(text))
    base = gradir.compile(graph)
    budget = base.plan.peak_bytes // 4
    exe = gradir.compile(graph, memory_budget=budget)
    assert exe.plan.peak_bytes <= budget
    names = {st.op.op_name: st for st in exe.plan.steps}
    assert names["Chunked"].inplace and names["LSTMGradRecompute"].inplace
