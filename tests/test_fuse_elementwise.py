"""The fuse-elementwise pass and its compiled loops (gradir/transforms/passes/elementwise.py,
gradir/backends/cpu/kernels/fused.py, gradir/backends/cpu/kernels/fused_codegen.py): what is grouped, the same numbers as
the unfused ops, the same bits for every thread count, and the disk cache."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gradir
from gradir.errors import GradirError
from gradir.backends.cpu.kernels import KERNELS, jit, parallel
from gradir.backends.cpu.kernels.fused import layout
from gradir.backends.cpu.kernels.fused_codegen import compile_count
from gradir.ops.fused import FusedBody, FusedElementwiseOp
from gradir.transforms.passes import elementwise
from gradir.ir.types import DType, TensorType
from strategies import EXACT_ELEMENTWISE, elementwise_dags

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _bits(a: np.ndarray) -> bytes:
    """The bits, every NaN counted the same: LLVM keeps neither the sign nor the payload of a NaN
    through arithmetic (it may turn (-a) + b into b - a), so a fused loop may flip a NaN's sign."""
    a = np.array(a)
    if a.dtype.kind == "f":
        a[np.isnan(a)] = np.nan
    return a.tobytes()


def _fused_steps(exe) -> list:
    return [st for st in exe.plan.steps if isinstance(st.op, FusedElementwiseOp)]


def _inputs(graph, seed: int = 0, special: bool = True) -> dict:
    rng = np.random.default_rng(seed)
    out = {}
    for i in graph.inputs:
        a = rng.standard_normal(i.type.shape).astype(i.type.dtype.numpy) * 3
        if special and a.size > 4:
            flat = a.reshape(-1)
            flat[rng.integers(0, a.size, 4)] = np.array([0.0, -0.0, np.inf, np.nan], a.dtype)
        out[i.name] = a
    return out


def _bits_for_thread_counts(body, operands: list) -> list:
    """The bits of the fused kernel's results on 1 to 4 threads; checks they are all the same, and
    the members' kernels one after another (no compiled loop: the unfused bits) give them too."""
    results = []
    saved = parallel.get_threads()
    try:
        for n in (1, 2, 3, 4):
            parallel.set_threads(n)
            results.append([_bits(a) for a in KERNELS["FusedElementwise"].fn(*operands, body=body)])
    finally:
        parallel.set_threads(saved)
    assert all(r == results[0] for r in results)
    with jit.disabled():
        assert [_bits(a) for a in KERNELS["FusedElementwise"].fn(*operands, body=body)] == results[0]
    return results[0]


@pytest.fixture
def small_groups(monkeypatch):
    """Fuse groups of any size (the tests use small arrays)."""
    monkeypatch.setattr(elementwise, "MIN_ELEMENTS", 1)


CHAIN = """\
graph chain
input t0 : Float32 [64, 512]
input t1 : Float32 [512]
input t2 : Float32 [64, 512]
t3 = Add(t0, t1)
t4 = Mul(t3, t2)
t5 = Relu(t4)
t6 = Exp(t5)
t7 = Sub(t6, t3)
t8 = Scale(t7, factor=0.5)
output t8, t4
"""


def test_a_chain_becomes_loops_split_at_transcendental_ops():
    exe = gradir.compile(CHAIN)
    fused = _fused_steps(exe)
    assert [st.op.attrs["body"] for st in fused] == [
        ("t3 = Add(t0, t1)", "t4 = Mul(t3, t2)", "t5 = Relu(t4)"), ("t7 = Sub(t6, t3)", "t8 = Scale(t7, factor=0.5)")]
    # t4 is a graph output and t3 is read by the second loop: both are written; t5 feeds Exp
    assert fused[0].op.results == ["t3", "t4", "t5"]
    assert [st.op.op_name for st in exe.plan.steps] == ["FusedElementwise", "Exp", "FusedElementwise"]
    plain = gradir.compile(CHAIN, disable=["fuse-elementwise"])
    assert not _fused_steps(plain)
    x = _inputs(exe.graph)
    a, b = exe.run(x), plain.run(x)
    for k in b:
        assert _bits(a[k]) == _bits(b[k]), k


def test_plan_says_why_groups_were_left_apart():
    """Small groups and groups of only scalar-function ops are left unfused, and the plan says so."""
    small = gradir.compile("input t0 : Float32 [4, 8]\nt1 = Mul(t0, t0) : Float32 [4, 8]\n"
                           "t2 = Add(t1, t0) : Float32 [4, 8]\noutput t2\n")
    assert "nothing to fuse: 1 group under" in small.plan.describe() and not _fused_steps(small)
    act = gradir.compile("input t0 : Float32 [256, 256]\nt1 = Sigmoid(t0) : Float32 [256, 256]\n"
                         "t2 = Gelu(t1) : Float32 [256, 256]\noutput t2\n")
    assert "1 group of only Sigmoid/GELU-like ops left apart" in act.plan.describe() and not _fused_steps(act)


def test_plan_shows_each_loop_and_the_pass_can_be_turned_off(capsys, tmp_path):
    from gradir.cli.main import main
    path = tmp_path / "chain.gir"
    path.write_text(CHAIN)
    assert main(["plan", str(path)]) == 0
    out = capsys.readouterr().out
    assert "fuse-elementwise: fused 5 ops into 2 loops" in out
    assert "one loop over Float32 [64, 512]: reads t0, t1 [512] (broadcast), t2; writes t3, t4, t5" in out
    assert "#           t4 = Mul(t3, t2)" in out
    assert main(["plan", str(path), "--disable", "fuse-elementwise"]) == 0
    assert "FusedElementwise" not in capsys.readouterr().out
    assert main(["dot", "--plan", str(path)]) == 0
    assert "fused: one kernel for 3 Add and Mul and Relu ops" in capsys.readouterr().out


def test_the_op_cannot_be_written_in_a_graph():
    with pytest.raises(GradirError, match="unknown op 'FusedElementwise'"):
        gradir.parse("input t0 : Float32 [4]\nt1 = FusedElementwise(t0, body=[\"t1 = Neg(t0)\"], "
                     "outputs=[\"t1\"])\noutput t1\n")
    assert "FusedElementwise" not in gradir.OPS


def test_small_groups_transcendental_ops_and_integers_stay_unfused():
    small = "input t0 : Float32 [8, 8]\nt1 = Neg(t0)\nt2 = Add(t1, t0)\noutput t2\n"
    assert not _fused_steps(gradir.compile(small))
    ints = "input t0 : Int32 [256, 256]\nt1 = Neg(t0)\nt2 = Add(t1, t0)\noutput t2\n"
    assert not _fused_steps(gradir.compile(ints))
    trans = "input t0 : Float32 [256, 256]\nt1 = Tanh(t0)\nt2 = Sigmoid(t1)\nt3 = Exp(t2)\noutput t3\n"
    assert not _fused_steps(gradir.compile(trans))


def test_no_group_closes_a_cycle_through_another_op(small_groups):
    # t2 and t4 are both element-wise, but t4 reads t3 = MatMul(t2, .): one loop for both would
    # have to run before and after the MatMul
    text = ("input t0 : Float64 [16, 16]\ninput t1 : Float64 [16, 16]\nt2 = Add(t0, t1)\nt5 = Neg(t2)\n"
            "t3 = MatMul(t2, t1)\nt4 = Mul(t5, t3)\nt6 = Sub(t4, t2)\noutput t6\n")
    exe = gradir.compile(text)
    bodies = [st.op.attrs["body"] for st in _fused_steps(exe)]
    assert bodies == [("t2 = Add(t0, t1)", "t5 = Neg(t2)"), ("t4 = Mul(t5, t3)", "t6 = Sub(t4, t2)")]
    x = _inputs(exe.graph, special=False)
    want = gradir.compile(text, disable=["fuse-elementwise"]).run(x)
    assert _bits(exe.run(x)["t6"]) == _bits(want["t6"])


def test_groups_stop_at_max_ops_and_identical_groups_share_one_loop(small_groups):
    lines = ["input t0 : Float32 [32, 32]", "input t1 : Float32 [32]"]
    n = 4 * elementwise.MAX_OPS
    for k in range(n):
        op = ["Add({}, t1)", "Neg({})", "Scale({}, factor=0.5)", "Mul({}, {})"][k % 4]
        prev = "t0" if k == 0 else f"t{k + 1}"
        lines.append(f"t{k + 2} = " + op.format(prev, prev))
    lines.append(f"output t{n + 1}")
    exe = gradir.compile("\n".join(lines) + "\n", disable=["simplify"])  # simplify folds the Neg into the Scale
    fused = _fused_steps(exe)
    assert len(fused) == 4 and all(len(st.op.members) == elementwise.MAX_OPS for st in fused)
    assert len({st.op.body.key for st in fused}) == 1  # each reads the one before's result and t1


@pytest.mark.parametrize("dtype", [DType.Float32, DType.Float64])
@pytest.mark.parametrize("name", EXACT_ELEMENTWISE)
def test_each_exact_op_gives_its_kernels_bits(name, dtype, small_groups):
    """Each op fused (after a Neg, so the group has two ops) against its own kernel, special
    values included (Float32 TanhGrad's compiled kernel contracts 1 - y*y into an FMA: so does
    the loop, within that op only)."""
    cls = gradir.OPS[name]
    n = 2 if len(cls.OPERANDS) == 2 else 1
    shape = "[33, 65]"
    args = ", ".join(["t9"] + [f"t{k}" for k in range(1, n)])
    attrs = ", factor=0.75" if name == "Scale" else ", alpha=-0.3" if "Leaky" in name else ""
    text = "".join(f"input t{k} : {dtype.value} {shape}\n" for k in range(n))
    text += f"t9 = Neg(t0)\nt10 = {name}({args}{attrs})\noutput t10\n"
    exe = gradir.compile(text, disable=["simplify"])  # which would fold the Neg into a Scale
    assert len(_fused_steps(exe)) == 1
    x = _inputs(exe.graph, seed=3)
    if name in ("TanhGrad", "SigmoidGrad"):
        x["t1"] = np.tanh(x["t1"]) if name == "TanhGrad" else 1 / (1 + np.exp(-x["t1"]))
    got = exe.run(x)["t10"]
    want = gradir.compile(text, disable=["fuse-elementwise", "simplify"]).run(x)["t10"]
    assert _bits(got) == _bits(want)


F32_KERNEL_ELEMENTS = ["Sigmoid", "Gelu", "GeluGrad", "FastGelu", "FastGeluGrad"]  # KernelInfo.scalar


@pytest.mark.parametrize("name", F32_KERNEL_ELEMENTS)
def test_float32_ops_with_an_element_function_give_their_kernels_bits(name, small_groups):
    """Float32 ops whose compiled kernel has an element function are fused through it (their
    Float64 kernels are NumPy code: those stay out)."""
    assert KERNELS[name].scalar is not None
    n = len(gradir.OPS[name].OPERANDS)
    args = ", ".join(["t9"] + [f"t{k}" for k in range(1, n)])
    for dtype, fused in (("Float32", 1), ("Float64", 0)):
        text = "".join(f"input t{k} : {dtype} [33, 65]\n" for k in range(n))
        text += f"t9 = Neg(t0)\nt10 = {name}({args})\nt11 = Mul(t10, t0)\noutput t11\n"
        exe = gradir.compile(text)
        assert len(_fused_steps(exe)) == fused
        x = _inputs(exe.graph, seed=4)
        want = gradir.compile(text, disable=["fuse-elementwise"]).run(x)["t11"]
        assert _bits(exe.run(x)["t11"]) == _bits(want)


@settings(max_examples=25, deadline=None)
@given(elementwise_dags(ops=tuple(EXACT_ELEMENTWISE + F32_KERNEL_ELEMENTS), dtype=DType.Float32),
       st.integers(0, 2 ** 16))
def test_random_float32_dags_with_activations_give_the_unfused_bits(graph, seed):
    test_random_dags_give_the_unfused_bits.hypothesis.inner_test(graph, seed)


@settings(max_examples=40, deadline=None)
@given(elementwise_dags(), st.integers(0, 2 ** 16))
def test_random_dags_give_the_unfused_bits(graph, seed):
    """Random DAGs of the exact ops with broadcasting, both dtypes: the fused program gives the
    unfused one's bits."""
    saved = elementwise.MIN_ELEMENTS
    elementwise.MIN_ELEMENTS = 1
    try:
        fused = gradir.compile(graph)
    finally:
        elementwise.MIN_ELEMENTS = saved
    plain = gradir.compile(graph, disable=["fuse-elementwise"])
    x = _inputs(graph, seed)
    with np.errstate(all="ignore"):
        got, want = fused.run(x), plain.run(x)
    for k in want:
        assert _bits(got[k]) == _bits(want[k]), k


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_bits_do_not_depend_on_the_thread_count(dtype, monkeypatch):
    """One loop over broadcast operands, split into 1 to 4 runs of units (chunks made tiny so
    that even this size splits): the same bits each time."""
    monkeypatch.setattr(parallel, "MIN_CHUNK_BYTES", 1024)
    text = ("input t0 : {d} [37, 300, 5]\ninput t1 : {d} [300, 1]\ninput t2 : {d} [37, 1, 5]\n"
            "t3 = Add(t0, t1)\nt4 = Mul(t3, t2)\nt5 = Div(t4, t0)\nt6 = LeakyRelu(t5)\nt7 = Sub(t6, t1)\n"
            "output t7, t3\n").format(d="Float32" if dtype == np.float32 else "Float64")
    monkeypatch.setattr(elementwise, "MIN_ELEMENTS", 1)
    exe = gradir.compile(text)
    assert len(_fused_steps(exe)) == 1
    x = _inputs(exe.graph, seed=5, special=False)
    body = _fused_steps(exe)[0].op.body
    _bits_for_thread_counts(body, [x["t0"], x["t1"], x["t2"]])
    for path in ("compiled", "numpy"):  # results never share memory with an operand (the pool recycles those)
        with jit.disabled() if path == "numpy" else contextlib.nullcontext():
            res = KERNELS["FusedElementwise"].fn(x["t0"], x["t1"], x["t2"], body=body)
        assert not any(np.shares_memory(r, a) for r in res for a in x.values())


def test_layout_coalesces_axes():
    assert layout((4, 5, 6), [(4, 5, 6), (6,)]) == ([20, 6], [[6, 1], [0, 1]])
    assert layout((4, 5, 6), [(4, 5, 6), (4, 5, 6)]) == ([120], [[1], [1]])
    assert layout((4, 1, 6), [(4, 1, 6), (1,)]) == ([24], [[1], [0]])
    assert layout((4, 5), [(4, 1), (4, 5)]) == ([4, 5], [[1, 0], [5, 1]])
    assert layout((1, 1), [(1,)]) == ([1], [[0]])


def test_codegen_rounds_constants_to_the_dtype():
    from gradir.backends.cpu.kernels.fused_codegen import kernel_source
    op = gradir.OPS["Scale"](["t1"], ["t0"], {"factor": 0.1})
    body = FusedBody([op], ["t0"], ["t1"], TensorType(DType.Float32, (4,)))
    src = kernel_source(body, (True,))
    assert "np.float32(float.fromhex('0x1.999999999999ap-4'))" in src
    # Float32: FMA contraction within an op only (each op's result kept apart); Float64: no fast-math
    assert "fastmath={'contract'}" in src and "v1 = keep(K0 * f0, z)" in src
    body = FusedBody([op], ["t0"], ["t1"], TensorType(DType.Float64, (4,)))
    src = kernel_source(body, (True,))
    assert "fastmath" not in src and "keep(" not in src.split("def loop")[1]


_SECOND_PROCESS = textwrap.dedent("""
    import json, sys, numpy as np, gradir
    from gradir.backends.cpu.kernels import fused_codegen
    exe = gradir.compile(sys.argv[1])
    loops = list(fused_codegen._loops.values())
    x = {i.name: np.ones(i.type.shape, i.type.dtype.numpy) for i in exe.graph.inputs}
    exe.run(x)
    print(json.dumps({"loops": len(loops), "misses": sum(len(f.stats.cache_misses) for f in loops),
                      "hits": sum(sum(f.stats.cache_hits.values()) for f in loops)}))
""")


def test_a_second_process_loads_the_loops_from_disk(tmp_path):
    path = tmp_path / "chain.gir"
    path.write_text(CHAIN)
    env = dict(os.environ, GRADIR_CACHE_DIR=str(tmp_path / "cache"), PYTHONPATH=ROOT)

    def run() -> dict:
        r = subprocess.run([sys.executable, "-c", _SECOND_PROCESS, str(path)], env=env, capture_output=True,
                           text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout.strip().splitlines()[-1])

    first = run()
    assert first["loops"] == 2 and first["misses"] == 2
    second = run()
    assert second == {"loops": 2, "misses": 0, "hits": 2}
    assert len(list((tmp_path / "cache" / "fused").glob("f_*.py"))) == 2


def test_compile_time_of_a_10000_op_graph_compiles_few_loops():
    """10,000 element-wise ops on 128 x 128 arrays (a repeating pattern of four ops, as layers
    repeat): a few dozen distinct loops at most, whatever the graph's length
    (benchmarks/bench_fusion.py times it)."""
    lines = ["input t0 : Float32 [128, 128]", "input t1 : Float32 [128]"]
    for k in range(10_000):
        op = ["Add({}, t1)", "Neg({})", "Scale({}, factor=0.5)", "Mul({}, {})"][k % 4]
        prev = "t0" if k == 0 else f"t{k + 1}"
        lines.append(f"t{k + 2} = " + op.format(prev, prev))
    lines.append("output t10001")
    before = compile_count()
    exe = gradir.compile("\n".join(lines) + "\n", disable=["simplify"])
    assert len(_fused_steps(exe)) == -(-10_000 // elementwise.MAX_OPS)
    assert len({st.op.body.key for st in _fused_steps(exe)}) <= 2
    assert compile_count() - before <= 2
    x = {"t0": np.full((128, 128), 0.5, np.float32), "t1": np.full(128, 0.25, np.float32)}
    want = gradir.compile("\n".join(lines) + "\n", disable=["fuse-elementwise"]).run(x)
    assert _bits(exe.run(x)["t10001"]) == _bits(want["t10001"])


def _wide_sum(n: int, shape: str = "[4]") -> str:
    """A ``Sum`` of ``n`` distinct inputs, then its square (a group of two, when the shape is big enough)."""
    lines = [f"input t{k} : Float32 {shape}" for k in range(n)]
    lines += [f"t{n} = Sum(" + ", ".join(f"t{k}" for k in range(n)) + ")", f"t{n + 1} = Mul(t{n}, t{n})", f"output t{n + 1}"]
    return "\n".join(lines) + "\n"


def test_a_sum_of_thousands_of_operands_runs_plans_and_draws(tmp_path, capsys):
    """A ``Sum`` of 5,000 operands: the pass looked at its formula, an expression 5,000 deep, before
    the size threshold, and run, plan and dot --plan exited 3 with a RecursionError."""
    from gradir.cli.main import main
    f = tmp_path / "wide.gir"
    f.write_text(_wide_sum(5000))
    for argv in (["run", str(f)], ["plan", str(f)], ["dot", "--plan", str(f)]):
        assert main(argv) == 0, argv
        cap = capsys.readouterr()
        assert "internal error" not in cap.err and "Traceback" not in cap.err
    g = gradir.parse(_wide_sum(5000))
    x = {i.name: np.full(4, 0.125, np.float32) for i in g.inputs}  # exact sums
    assert np.array_equal(gradir.compile(g).run(x)["t5001"], np.full(4, 625.0 ** 2, np.float32))


def test_a_sum_of_100_000_operands_still_runs():
    text = "input t0 : Float32 [2]\nt1 = Sum(" + ", ".join(["t0"] * 100_000) + ")\noutput t1\n"
    out = gradir.compile(text).run({"t0": np.array([1.0, -0.5], np.float32)})["t1"]
    assert np.array_equal(out, np.array([100_000.0, -50_000.0], np.float32))


def test_a_sum_of_more_than_max_operands_stays_apart():
    """A ``Sum`` over ``MAX_OPERANDS`` operands is not fused (its loop would take every operand); with
    ``MAX_OPERANDS`` it still is."""
    n = elementwise.MAX_OPERANDS
    for k, fused in ((n, True), (n + 1, False)):
        exe = gradir.compile(_wide_sum(k, "[128, 128]"))
        steps = _fused_steps(exe)
        assert bool(steps) == fused, k
        x = _inputs(exe.graph, special=False)
        want = gradir.compile(_wide_sum(k, "[128, 128]"), disable=["fuse-elementwise"]).run(x)
        assert _bits(exe.run(x)[f"t{k + 1}"]) == _bits(want[f"t{k + 1}"])


@pytest.mark.parametrize("threads", [1, 2])
def test_scale_of_a_scalar_then_element_wise_ops_runs(threads):
    g = gradir.parse("input t0 : Float32 scalar\nt1 = Scale(t0, factor=2.0)\nt2 = Relu(t1)\nt3 = Exp(t2)\n"
                     "t4 = TanhGrad(t3, t1)\nt5 = Add(t4, t0)\noutput t5, t3\n")
    out = gradir.compile(g, threads=threads).run({"t0": np.array(0.25, np.float32)})
    x = np.float32(0.25)
    t1 = np.float32(2.0) * x
    t3 = np.exp(np.maximum(t1, np.float32(0)))
    assert isinstance(out["t5"], np.ndarray) and out["t5"].shape == ()
    np.testing.assert_allclose(out["t3"], t3, rtol=1e-6)
    np.testing.assert_allclose(out["t5"], t3 * (1 - t1 * t1) + x, rtol=1e-6)
