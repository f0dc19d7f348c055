"""The memory budget (``--memory-budget``, ``gradir.compile(memory_budget=)``; docs/memory.md): parsing a
budget, the MILP against brute force, whole-graph recomputation (planned peak within the budget and
monotone in it, the same bits as the unbudgeted run), the least feasible budget, the command line."""

from __future__ import annotations

import itertools
import random
import re

import numpy as np
import pytest

import gradir
from gradir.cli.run import demo_inputs
from gradir.transforms.memory import remat
from gradir.transforms.memory.budget import format_budget, parse_budget
from gradir.transforms.memory.model import Problem, solve
from gradir.transforms.passes.pipeline import Program, run_passes
from gradir.transforms.schedule import build_plan
from cli_runner import run_cli


# -- parsing a budget ------------------------------------------------------------------------------------
def test_a_percentage_is_a_share_of_the_peak_without_a_budget():
    from gradir.transforms.memory.budget import Share
    assert parse_budget("25%") == Share(0.25) and isinstance(parse_budget(" 12.5 % "), Share)
    assert str(parse_budget("25%")) == "25%"
    text = gradir.grad(gradir.parse(MLP))
    base = gradir.compile(text, threads=1)
    half = gradir.compile(text, threads=1, memory_budget="99%")
    assert half.plan.memory.budget == int(0.99 * base.plan.peak_bytes)
    assert half.plan.peak_bytes <= 0.99 * base.plan.peak_bytes < base.plan.peak_bytes
    assert gradir.compile(text, threads=1, memory_budget="100%").plan.peak_bytes == base.plan.peak_bytes


@pytest.mark.parametrize("text, expected", [
    (1000, 1000), ("1000", 1000), ("512MiB", 512 << 20), ("1.5GiB", 3 << 29), ("2GB", 2 * 10 ** 9),
    ("100MB", 10 ** 8), ("64KiB", 65536), ("64 kib", 65536), (" 3 KiB ", 3072), ("1kB", 1000), ("auto", "auto"),
    ("AUTO", "auto"), ("2 gb", 2 * 10 ** 9), ("10B", 10), (None, None),
])
def test_parse_budget_forms(text, expected):
    assert parse_budget(text) == expected


@pytest.mark.parametrize("bad", [0, -5, "0", "-1MiB", "banana", "5XB", "12 parsecs", "", True, False,
                                 float("nan"), float("inf"), [1], "1.5.2GB", "0%", "101%", "-5%", "%"])
def test_parse_budget_errors_name_the_accepted_forms(bad):
    with pytest.raises(gradir.ArgumentError, match="512MiB, 1.5GiB") as e:
        parse_budget(bad)
    assert "auto" in str(e.value)


@pytest.mark.parametrize("n", [1, 1023, 1024, 1025, 432013313, 3 << 30, (3 << 30) + 1])
def test_a_budget_formatted_up_parses_back_to_at_least_it(n):
    assert parse_budget(format_budget(n, up=True)) >= n


# -- the solver against brute force ------------------------------------------------------------------------
def _brute(problem: Problem, budget):
    """(least seconds, least peak among those) over every 0/1 vector, or None."""
    best = None
    for x in itertools.product((0, 1), repeat=len(problem.seconds)):
        secs, peak, ok = problem.evaluate(x)
        if not ok or (budget is not None and peak > budget):
            continue
        key = (peak, secs) if budget is None else (secs, peak)
        if best is None or key[0] < best[0] - 1e-12 or (abs(key[0] - best[0]) <= 1e-12 and key[1] < best[1]):
            best = key
    return best  # (seconds, peak) under a budget; (peak, seconds) for the least peak


def _random_graph(rng: random.Random, n_ops: int) -> str:
    lines = ["graph r", "input t0 : Float32 [8, 8]", "input t1 : Float32 [8, 8]"]
    values = ["t0", "t1"]
    for k in range(2, 2 + n_ops):
        kind = rng.choice(["Tanh", "Relu", "Add", "Mul", "MatMul", "Sigmoid"])
        if kind in ("Tanh", "Relu", "Sigmoid"):
            args = [rng.choice(values)]
        else:
            args = [rng.choice(values), rng.choice(values)]
        lines.append(f"t{k} = {kind}({', '.join(args)})")
        values.append(f"t{k}")
    # the last value, and a few early ones read at the end: long lifetimes to recompute
    last = values[-1]
    early = rng.sample(values[2:-2], 3)
    lines.append(f"t{2 + n_ops} = Add({last}, {early[0]})")
    lines.append(f"t{3 + n_ops} = Mul(t{2 + n_ops}, {early[1]})")
    lines.append(f"t{4 + n_ops} = Add(t{3 + n_ops}, {early[2]})")
    lines.append(f"output t{4 + n_ops}")
    return "\n".join(lines) + "\n"


def _base(text: str):
    g = gradir.parse(text)
    program = Program(g)
    log = run_passes(program)
    return g, program, log, build_plan(program, log)


@pytest.mark.parametrize("seed", range(12))
def test_the_milp_finds_the_brute_force_optimum_on_small_random_graphs(seed):
    rng = random.Random(seed)
    for _ in range(50):  # a graph with 1..12 variables (at most 10 recomputation candidates)
        _, _, _, plan = _base(_random_graph(rng, rng.randint(6, 14)))
        model = remat.build(plan, [])
        n_remat = sum(k[0] == "remat" for k in model.kinds)
        if 1 <= n_remat <= 10 and len(model.kinds) <= 12:
            break
    else:  # the seeds are fixed: every one of them draws such a graph
        raise AssertionError(f"seed {seed}: no graph with 1..10 candidates in 50 draws")
    p = model.problem
    least = solve(p, None)
    assert least is not None and (least.peak, least.seconds) == pytest.approx(_brute(p, None))
    top = max(p.base + [p.floor])
    for budget in sorted({least.peak, (least.peak + top) / 2, top - 1, top}):
        got = solve(p, budget)
        want = _brute(p, budget)
        assert (got is None) == (want is None), budget
        if got is not None:
            assert got.seconds == pytest.approx(want[0], rel=1e-9, abs=1e-15), budget
            assert got.peak == want[1], budget
            assert got.peak <= budget


def test_solve_below_the_floor_is_none():
    p = Problem([10.0, 20.0], [1.0], [[(1, -15.0)]], [], floor=8.0)
    assert solve(p, 7) is None
    assert solve(p, 12).x == (True,)
    assert solve(p, 20).x == (False,)  # it fits: no extra time


@pytest.mark.parametrize("seed", range(6))
def test_random_graphs_under_their_least_feasible_budget_give_the_same_bits(seed):
    rng = random.Random(100 + seed)
    text = _random_graph(rng, 14)
    g = gradir.parse(text)
    ref_exe = gradir.compile(g, threads=1)
    inputs = demo_inputs(g, seed)
    ref = ref_exe.run(inputs)
    with pytest.raises(gradir.CompileError) as e:
        gradir.compile(g, threads=1, memory_budget=16)
    least = re.search(r"least feasible budget is ([0-9.]+ [KMG]?i?B)", str(e.value)).group(1)
    for budget in (least, ref_exe.plan.peak_bytes - 1, ref_exe.plan.peak_bytes):
        try:
            exe = gradir.compile(g, threads=1, memory_budget=budget)
        except gradir.CompileError:
            assert budget == ref_exe.plan.peak_bytes - 1  # below the base peak and the least: may not fit
            continue
        assert exe.plan.peak_bytes <= parse_budget(budget)
        out = exe.run(inputs)
        assert all(np.array_equal(out[k], ref[k]) for k in ref)


# -- whole graphs: a gradir-grad MLP --------------------------------------------------------------------------
MLP = """graph mlp
input t0 : Float32 [128, 64]
input t1 : Float32 [64, 128]
input t2 : Float32 [128]
input t3 : Float32 [128, 128]
input t4 : Float32 [128, 128]
input t5 : Float32 [128, 32]
t6 = MatMul(t0, t1)
t7 = Add(t6, t2)
t8 = Relu(t7)
t9 = MatMul(t8, t3)
t10 = Tanh(t9)
t11 = MatMul(t10, t4)
t12 = Relu(t11)
t13 = MatMul(t12, t5)
t14 = Tanh(t13)
t15 = ReduceSum(t14, keepdims=false)
output t15
"""


@pytest.fixture(scope="module")
def mlp():
    g = gradir.grad(gradir.parse(MLP))
    base = gradir.compile(g, threads=1)
    inputs = demo_inputs(g, 0)
    return g, base, inputs, base.run(inputs)


@pytest.fixture(scope="module")
def mlp_least(mlp):
    g, _, _, _ = mlp
    with pytest.raises(gradir.CompileError) as e:
        gradir.compile(g, threads=1, memory_budget="1KiB")
    return e.value


def test_an_infeasible_budget_names_the_least_feasible_one_and_that_one_works(mlp, mlp_least):
    g, base, inputs, ref = mlp
    msg = str(mlp_least)
    m = re.search(r"no schedule fits a memory budget of 1 KiB: the least feasible budget is ([0-9.]+ [KMG]iB) "
                  r"\(inputs and outputs alone: ([0-9.]+ [KMG]iB)\)", msg)
    assert m, msg
    least = parse_budget(m.group(1))
    assert parse_budget(m.group(2)) <= least < base.plan.peak_bytes
    exe = gradir.compile(g, threads=1, memory_budget=m.group(1))
    assert exe.plan.peak_bytes <= least
    assert exe.plan.memory.recomputed
    out = exe.run(inputs)
    assert all(np.array_equal(out[k], ref[k]) for k in ref)


def test_planned_peak_fits_and_is_monotone_over_a_sweep_of_budgets(mlp, mlp_least):
    g, base, _, _ = mlp
    least = parse_budget(re.search(r"least feasible budget is ([0-9.]+ [KMG]iB)", str(mlp_least)).group(1))
    top = base.plan.peak_bytes
    peaks, times = [], []
    for k in range(9):
        budget = least + (top - least) * k // 8
        plan = gradir.compile(g, threads=1, memory_budget=budget).plan
        assert plan.peak_bytes <= budget
        assert plan.memory.planned_peak == plan.peak_bytes and plan.memory.base_peak == top
        peaks.append(plan.peak_bytes)
        times.append(plan.memory.extra_seconds)
    assert peaks == sorted(peaks), peaks  # a larger budget never plans a smaller peak ...
    assert times == sorted(times, reverse=True), times  # ... nor a longer time
    assert times[0] > 0 and times[-1] == 0


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("fraction", [0.0, 0.3, 0.6, 0.9])
def test_budgeted_runs_give_the_unbudgeted_bits(mlp, mlp_least, threads, fraction):
    g, base, inputs, ref = mlp
    least = parse_budget(re.search(r"least feasible budget is ([0-9.]+ [KMG]iB)", str(mlp_least)).group(1))
    budget = int(least + (base.plan.peak_bytes - least) * fraction)
    for backend in ("cpu", "reference"):
        exe = gradir.compile(g, threads=threads, memory_budget=budget, backend=backend)
        assert exe.plan.peak_bytes <= budget
        out = exe.run(inputs)
        assert list(out) == list(ref)
        for k in ref:
            assert np.array_equal(out[k], ref[k]), (k, budget, threads, backend)


def test_auto_picks_the_knee_of_the_curve(mlp):
    g, base, _, _ = mlp
    plan = gradir.compile(g, threads=1, memory_budget="auto").plan
    report = plan.memory
    assert report.auto and sum(p.knee for p in report.curve) == 1
    knee = next(p for p in report.curve if p.knee)
    assert report.budget == knee.budget and plan.peak_bytes <= knee.budget
    text = plan.describe()
    assert "(auto: the curve's knee)" in text and "<- knee" in text


def test_a_budget_the_base_plan_meets_changes_nothing(mlp):
    g, base, _, _ = mlp
    plan = gradir.compile(g, threads=1, memory_budget=base.plan.peak_bytes).plan
    assert [st.op.to_string() for st in plan.steps] == [st.op.to_string() for st in base.plan.steps]
    assert not plan.memory.recomputed and "nothing recomputed" in plan.describe()
    assert plan.memory.curve  # the curve is shown whenever a budget is given


def test_compile_refuses_a_bad_budget(mlp):
    with pytest.raises(gradir.ArgumentError, match="memory budget must be"):
        gradir.compile(mlp[0], memory_budget="12 apples")


def test_fused_loops_are_recomputed_with_their_members_renamed():
    """A big MLP: the element-wise chains are fused loops; a copy of one renames its members."""
    fwd = MLP.replace("[128, 64]", "[256, 64]")
    g = gradir.grad(gradir.parse(fwd))
    base = gradir.compile(g, threads=1)
    assert any(st.op.op_name == "FusedElementwise" for st in base.plan.steps)
    inputs = demo_inputs(g, 1)
    ref = base.run(inputs)
    with pytest.raises(gradir.CompileError) as e:
        gradir.compile(g, threads=1, memory_budget=1)
    least = re.search(r"least feasible budget is ([0-9.]+ [KMG]iB)", str(e.value)).group(1)
    exe = gradir.compile(g, threads=2, memory_budget=least)
    out = exe.run(inputs)
    assert all(np.array_equal(out[k], ref[k]) for k in ref)


# -- the schedule's memory count ----------------------------------------------------------------------------
def test_a_view_is_freed_with_its_root_not_twice():
    """The memory simulation subtracted a view's bytes when the view died and again with its root."""
    text = ("graph v\ninput t0 : Float32 [64, 64]\nt1 = Tanh(t0)\nt2 = Reshape(t1, shape=[4096])\n"
            "t3 = Sigmoid(t2)\nt4 = Tanh(t3)\nt5 = Relu(t1)\nt6 = Exp(t4)\noutput t6, t5\n")
    _, _, _, plan = _base(text)
    assert plan.views
    live = 64 * 64 * 4  # the input
    size = 64 * 64 * 4
    # never below the input plus the outputs made so far
    assert min(plan.curve) >= live
    assert plan.curve[-1] >= live + 2 * size


# -- the command line -----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def mlp_file(tmp_path_factory, mlp):
    path = tmp_path_factory.mktemp("budget") / "mlp.grad.gir"
    path.write_text(mlp[0].to_text())
    return path


def test_cli_plan_with_an_infeasible_budget_exits_1_with_the_least_feasible(mlp_file, capsys):
    rc, out, err = run_cli(["plan", mlp_file, "--memory-budget", "1KiB"], capsys)
    assert rc == 1 and "Traceback" not in err
    assert "no schedule fits a memory budget of 1 KiB: the least feasible budget is" in err


def test_cli_bad_budget_is_a_usage_error(mlp_file, capsys):
    for cmd in ("plan", "run"):
        rc, _, err = run_cli([cmd, mlp_file, "--memory-budget", "banana"], capsys)
        assert rc == 2 and "--memory-budget" in err and "512MiB" in err


def test_cli_plan_shows_what_is_recomputed_and_the_curve(mlp_file, mlp_least, capsys):
    least = re.search(r"least feasible budget is ([0-9.]+ [KMG]iB)", str(mlp_least)).group(1)
    rc, out, _ = run_cli(["plan", mlp_file, "--memory-budget", least], capsys)
    assert rc == 0
    assert f"# memory budget: {least}" in out
    assert re.search(r"#   recomputed: t\d+ = \w+ again as t\d+ at step \[\s*\d+\], before step \[\s*\d+\]", out)
    assert re.search(r"recomputes t\d+ \(memory budget\)", out)
    assert "predicted extra time" in out and "budget / planned peak / predicted extra time" in out


def test_cli_run_with_a_budget_writes_the_unbudgeted_outputs(mlp_file, tmp_path, capsys):
    ref, got = tmp_path / "ref.npz", tmp_path / "got.npz"
    assert run_cli(["run", mlp_file, "-o", ref], capsys)[0] == 0
    rc, out, err = run_cli(["run", mlp_file, "--memory-budget", "auto", "-o", got, "--threads", "2"], capsys)
    assert rc == 0, err
    a, b = np.load(ref), np.load(got)
    assert sorted(a.files) == sorted(b.files)
    assert all(np.array_equal(a[k], b[k]) for k in a.files)


# -- the providers' choices, and what the planner checks ----------------------------------------------------
def test_a_value_a_provider_rewrites_is_never_recomputed(mlp):
    g, base, _, _ = mlp
    plan = base.plan
    model = remat.build(plan, [])
    values = sorted({k[1].value for k in model.kinds if k[0] == "remat"})
    assert values
    from gradir.transforms.memory.model import Choice
    model = remat.build(plan, [Choice("lstm", [], frozenset(values[:1]))])
    assert values[0] not in {k[1].value for k in model.kinds if k[0] in ("remat", "chain")}


def test_a_model_that_promises_too_much_never_gives_a_plan_over_the_budget(mlp, mlp_least, monkeypatch):
    """An option whose intervals claim 4 KiB of savings its rewrite does not make (as a model that misses
    an in-place reuse would): the real plan overshoots, the planner tightens the model's budget and
    solves again, and the plan it returns fits."""
    from gradir.transforms.memory import planner
    from gradir.transforms.memory.model import Choice, Interval, Option
    g, base, inputs, ref = mlp
    applied = []

    def choices(program, plan):
        n = len(plan.steps)
        lie = Option("keep everything (a lie)", 0.0, [Interval(-4096, 0, n - 1)], lambda p: applied.append(1),
                     ["no checkpoints at all"])
        return [Choice("fake", [lie])]

    monkeypatch.setattr(planner, "collect_choices", choices)
    least = parse_budget(re.search(r"least feasible budget is ([0-9.]+ [KMG]iB)", str(mlp_least)).group(1))
    budget = (least + base.plan.peak_bytes) // 2
    exe = gradir.compile(g, threads=1, memory_budget=budget)
    assert exe.plan.peak_bytes <= budget and applied
    out = exe.run(inputs)
    assert all(np.array_equal(out[k], ref[k]) for k in ref)


def test_chosen_options_are_reported_with_their_details(mlp, monkeypatch):
    from gradir.transforms.memory import planner
    from gradir.transforms.memory.model import Choice, Option
    g, base, _, _ = mlp
    opt = Option("LSTM t9: 3 checkpoints (free)", -1.0, [], lambda p: None, ["checkpoints at steps 0, 5, 10"])
    monkeypatch.setattr(planner, "collect_choices", lambda program, plan: [Choice("fake", [opt])])
    text = gradir.compile(g, threads=1, memory_budget=base.plan.peak_bytes - 1).plan.describe()
    assert "#   LSTM t9: 3 checkpoints (free)\n#     checkpoints at steps 0, 5, 10" in text


def test_a_budget_needs_static_shapes():
    g = gradir.parse("graph d\ninput t0 : Float32 [?, 4]\nt1 = Tanh(t0)\nt2 = Relu(t1)\nt3 = Add(t2, t1)\noutput t3\n")
    with pytest.raises(gradir.CompileError, match="needs every shape known"):
        gradir.compile(g, memory_budget="1MiB")


def test_a_budgeted_plan_pickles_with_its_report(mlp, mlp_least):
    """A plan is plain data that pickles: the report's planner (kept to make the curve when asked) is not."""
    import pickle
    g, _, _, _ = mlp
    least = re.search(r"least feasible budget is ([0-9.]+ [KMG]iB)", str(mlp_least)).group(1)
    plan = gradir.compile(g, threads=1, memory_budget=least).plan
    curve = plan.memory.curve
    again = pickle.loads(pickle.dumps(plan))
    assert again.memory.curve == curve and again.memory.recomputed == plan.memory.recomputed
    assert again.peak_bytes == plan.peak_bytes and again.memory.planner is None
