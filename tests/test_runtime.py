"""Compiler passes, schedule, buffer plan and the executor."""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gradir
from gradir import CompileError, ExecutionError, InputError
from gradir.cli.main import main
from gradir.backends.cpu.kernels import KERNELS, parallel
from gradir.cli.run import demo_inputs
from strategies import OP_EXAMPLES, graphs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

MATH_OPS = ["Add", "Sub", "Mul", "Div", "Neg", "Exp", "Log", "Sqrt", "Identity", "MatMul", "Transpose", "Reshape",
            "ReduceSum", "ReduceMean", "Sum"]


def test_every_op_has_a_kernel():
    gradir.compile("input t0 : Float32 [1]\nt1 = Neg(t0)\noutput t1\n")  # loads the kernel families
    missing = sorted(name for name, cls in gradir.OPS.items() if cls not in KERNELS)
    assert missing == [], f"ops without a kernel: {missing}"


def _bits(a: np.ndarray) -> bytes:
    return a.dtype.str.encode() + repr(a.shape).encode() + a.tobytes()


@settings(max_examples=40, deadline=None)
@given(graphs(max_ops=8), st.integers(0, 2**31 - 1), st.booleans())
def test_results_are_bit_identical_for_1_2_4_threads(g, seed, all_heavy):
    """Random graphs, every op; with ``all_heavy`` no op counts as tiny, so the
    dataflow executor really runs them on worker threads, out of schedule order."""
    from gradir.transforms import schedule
    inputs = demo_inputs(g, seed)
    try:
        ref = gradir.compile(g, threads=1).run(inputs)
    except InputError:  # '?' dims filled with 2 may not fit the graph: nothing to compare
        return
    saved = schedule.INLINE_BYTES
    schedule.INLINE_BYTES = 0 if all_heavy else saved
    try:
        for threads in (2, 4):
            exe = gradir.compile(g, threads=threads)
            out = exe.run(inputs)
            assert list(out) == list(ref)
            for k in ref:
                assert _bits(out[k]) == _bits(ref[k]), (k, threads)
    finally:
        schedule.INLINE_BYTES = saved


def test_dataflow_frees_a_value_only_after_all_its_readers():
    """Regression: a value read by a slow and a fast op must outlive both, whatever order they finish in."""
    from gradir.transforms import schedule
    # t2's first reader (Add) waits for a slow MatMul; its last reader in schedule order (Transpose, not in place) is ready at once
    text = ("input t0 : Float32 [256, 256]\ninput t1 : Float32 [256, 256]\n"
            "t2 = Exp(t0)\nt3 = MatMul(t1, t1)\nt7 = MatMul(t3, t1)\nt4 = Add(t2, t7)\nt5 = Transpose(t2)\n"
            "t6 = Add(t4, t5)\noutput t6\n")
    saved = schedule.INLINE_BYTES
    schedule.INLINE_BYTES = 0
    try:
        exe = gradir.compile(text, threads=2)
        assert exe.plan.heavy_concurrency
        rng = np.random.default_rng(0)
        x = (rng.standard_normal((256, 256)) * 0.1).astype(np.float32)
        w = (rng.standard_normal((256, 256)) * 0.1).astype(np.float32)
        for _ in range(5):
            r = exe.run({"t0": x, "t1": w})
    finally:
        schedule.INLINE_BYTES = saved
    ref = gradir.compile(text, threads=1).run({"t0": x, "t1": w})
    assert _bits(r["t6"]) == _bits(ref["t6"])


def test_large_elementwise_results_identical_across_threads():
    text = ("input t0 : Float32 [2048, 1024]\ninput t1 : Float32 [2048, 1024]\n"
            "t2 = Mul(t0, t1)\nt3 = Exp(t2)\nt4 = Add(t3, t1)\nt5 = Sum(t4, t2, t3)\nt6 = ReduceSum(t5, axes=[1])\n"
            "output t5, t6\n")
    g = gradir.parse(text)
    inputs = demo_inputs(g, 1)
    ref = gradir.compile(g, threads=1).run(inputs)
    for threads in (2, 4):
        out = gradir.compile(g, threads=threads).run(inputs)
        for k in ref:
            assert _bits(out[k]) == _bits(ref[k])
    x, y = inputs["t0"], inputs["t1"]
    np.testing.assert_allclose(ref["t5"], (np.exp(x * y) + y) + x * y + np.exp(x * y), rtol=1e-6)


def test_large_blas_results_identical_across_threads():
    """Two GEMMs large enough for a multi-threaded BLAS, which may run at once: the runtime
    holds BLAS to the same share of the cores whatever ``threads`` is (OpenBLAS's GEMMs round
    differently for each BLAS thread count: with one thread vs two they differed here)."""
    text = ("input t0 : Float32 [512, 512]\ninput t1 : Float32 [512, 512]\n"
            "t2 = MatMul(t0, t1)\nt3 = MatMul(t1, t0)\nt4 = Add(t2, t3)\noutput t2, t3, t4\n")
    g = gradir.parse(text)
    assert gradir.compile(g, threads=2).plan.blas_concurrency
    inputs = demo_inputs(g, 3)
    ref = gradir.compile(g, threads=1).run(inputs)
    for threads in (2, 4):
        out = gradir.compile(g, threads=threads).run(inputs)
        for k in ref:
            assert _bits(out[k]) == _bits(ref[k]), (threads, k)
    np.testing.assert_allclose(ref["t2"], inputs["t0"] @ inputs["t1"], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("allot", ["free", "one", "random"])
def test_large_lstm_beside_a_matmul_identical_across_threads(monkeypatch, allot):
    """A layer large enough for the kernels' own two half-batch threads, with a MatMul that may
    run beside it: the same bits for 1, 2 and 4 threads and whatever cores each step is given
    (``allot``: the free ones, always one, or a random number up to 4, more than are free too)."""
    import random

    from gradir.backends.cpu import policy
    from gradir.backends.cpu.kernels.lstm import common as lstm_common
    monkeypatch.setattr(parallel, "_idle_sleep", True)  # as where gradir is imported before NumPy
    rnd = random.Random(7)
    if allot == "one":
        monkeypatch.setattr(policy, "grant", lambda step, free: 1)
    elif allot == "random":
        monkeypatch.setattr(policy, "grant", lambda step, free: rnd.randint(1, 4))
    S, B, I, H = 3, 16, 4, 260
    assert B >= lstm_common.SPLIT_MIN_ROWS and B * 4 * H > lstm_common.WHOLE_LOOP_MAX
    text = f"""input t0 : Float32 [{S}, {B}, {I}]
input t1 : Float32 [1, {4 * H}, {I}]
input t2 : Float32 [1, {4 * H}, {H}]
input t3 : Float32 [{S}, 1, {B}, {H}]
input t20 : Float32 [512, 512]
input t21 : Float32 [512, 512]
t7, t8, t9, t10, t11 = LSTMTraining(t0, t1, t2, hidden_size={H})
t12, t13, t14, t15, t16, t17, t18 = LSTMGrad(t0, t1, t2, _, _, _, t7, t10, t11, t3, hidden_size={H})
t22 = MatMul(t20, t21)
output t7, t12, t13, t14, t22
"""
    g = gradir.parse(text)
    assert gradir.compile(g, threads=2).plan.blas_concurrency
    inputs = demo_inputs(g, 4)
    ref = gradir.compile(g, threads=1).run(inputs)
    for threads in (2, 4):
        exe = gradir.compile(g, threads=threads)
        for _ in range(4):
            out = exe.run(inputs)
            for k in ref:
                assert _bits(out[k]) == _bits(ref[k]), (threads, k)


def test_math_kernels_match_numpy():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((3, 4, 5))
    b = rng.standard_normal((4, 5)) + 3
    exe = gradir.compile(
        "input t0 : Float64 [3, 4, 5]\ninput t1 : Float64 [4, 5]\n"
        "t2 = Add(t0, t1)\nt3 = Sub(t1, t0)\nt4 = Mul(t0, t1)\nt5 = Div(t0, t1)\nt6 = Neg(t0)\nt7 = Exp(t0)\n"
        "t8 = Log(t1)\nt9 = Identity(t0)\nt10 = Transpose(t1)\nt11 = MatMul(t0, t10)\n"
        "t12 = Transpose(t0, perm=[2, 0, 1])\nt13 = Reshape(t0, shape=[-1, 10])\n"
        "t14 = ReduceSum(t0, axes=[0, -1], keepdims=true)\nt15 = ReduceMean(t0)\nt16 = Sum(t0, t2, t4)\n"
        "output t2, t3, t4, t5, t6, t7, t8, t9, t11, t12, t13, t14, t15, t16\n")
    r = exe(t0=a, t1=b)
    np.testing.assert_array_equal(r["t2"], a + b)
    np.testing.assert_array_equal(r["t3"], b - a)
    np.testing.assert_array_equal(r["t4"], a * b)
    np.testing.assert_array_equal(r["t5"], a / b)
    np.testing.assert_array_equal(r["t6"], -a)
    np.testing.assert_array_equal(r["t7"], np.exp(a))
    np.testing.assert_array_equal(r["t8"], np.log(b))
    np.testing.assert_array_equal(r["t9"], a)
    np.testing.assert_allclose(r["t11"], a @ b.T, rtol=1e-12)
    np.testing.assert_array_equal(r["t12"], a.transpose(2, 0, 1))
    np.testing.assert_array_equal(r["t13"], a.reshape(-1, 10))
    np.testing.assert_allclose(r["t14"], a.sum(axis=(0, 2), keepdims=True), rtol=1e-12)
    np.testing.assert_allclose(r["t15"], a.mean(), rtol=1e-12)
    np.testing.assert_allclose(r["t16"], a + (a + b) + a * b, rtol=1e-12)
    assert r["t15"].shape == ()


def test_dce_removes_exactly_the_dead_ops():
    text = ("input t0 : Float32 [4]\ninput t1 : Float32 [4]\n"
            "t2 = Exp(t0)\nt3 = Neg(t2)\n"      # dead chain
            "t4 = Add(t0, t1)\nt5 = Mul(t4, t4)\n"
            "t6 = Log(t5)\n"                    # live
            "output t6, t4\n")
    exe = gradir.compile(text)
    assert [op.op_name for op in exe.program.ops] == ["Add", "Mul", "Log"]
    assert ("dce", "removed 2 ops") in exe.plan.pass_log
    exe2 = gradir.compile(text, disable=["dce"])
    assert [op.op_name for op in exe2.program.ops] == ["Exp", "Neg", "Add", "Mul", "Log"]


def test_dce_keeps_multi_result_ops_with_one_live_result():
    exe = gradir.compile(gradir.load(os.path.join(ROOT, "samples", "lstm_bptt.gir")))
    assert [op.op_name for op in exe.program.ops] == ["LSTMTraining", "LSTMGrad"]


def test_cse_merges_exactly_identical_ops():
    text = ("input t0 : Float32 [4]\ninput t1 : Float32 [4]\n"
            "t2 = LeakyRelu(t0, alpha=0.2)\nt3 = LeakyRelu(t0, alpha=0.2)\n"  # same: merged
            "t4 = LeakyRelu(t0, alpha=0.3)\n"                                  # other attribute: kept
            "t5 = LeakyRelu(t1, alpha=0.2)\n"                                  # other operand: kept
            "t6 = Add(t2, t4)\nt7 = Add(t3, t4)\n"                              # same after renaming: merged
            "t8 = Add(t4, t2)\n"                                               # operand order differs: kept
            "output t6, t7, t8, t5, t3\n")
    exe = gradir.compile(text)
    names = [(op.op_name, op.results[0]) for op in exe.program.ops]
    assert names == [("LeakyRelu", "t2"), ("LeakyRelu", "t4"), ("LeakyRelu", "t5"), ("Add", "t6"), ("Add", "t8")]
    assert exe.plan.aliases == {"t3": "t2", "t7": "t6"}
    rng = np.random.default_rng(0)
    r = exe(t0=rng.standard_normal(4).astype(np.float32), t1=rng.standard_normal(4).astype(np.float32))
    assert list(r) == ["t6", "t7", "t8", "t5", "t3"]
    np.testing.assert_array_equal(r["t6"], r["t7"])
    assert ("cse", "merged 2 ops") in exe.plan.pass_log


def test_fusion_pass_groups_sibling_cell_gradients():
    exe = gradir.compile(open(os.path.join(ROOT, "samples", "lstm_cell_backward.gir")).read())
    fused = [op for op in exe.program.ops if op.op_name == "GradLSTMCellInputFused"]
    assert len(fused) == 1 and fused[0].attrs["input_indices"] == (0, 1, 2, 3, 4, 5)
    unfused = gradir.compile(exe.graph, disable=["fuse-lstm-cell-grads"])
    assert sum(op.op_name == "GradLSTMCellInput" for op in unfused.program.ops) == 6


def test_unknown_pass_is_a_clear_error():
    with pytest.raises(gradir.ArgumentError, match="unknown pass 'nope'"):
        gradir.compile("input t0 : Float32 [1]\noutput t0\n", disable=["nope"])


def test_op_without_kernel_fails_at_compile_time(monkeypatch):
    gradir.compile("input t0 : Float32 [1]\noutput t0\n")
    monkeypatch.delitem(KERNELS, "Exp")
    with pytest.raises(CompileError) as e:
        gradir.compile("input t0 : Float32 [2]\nt1 = Neg(t0)\nt2 = Exp(t1)\noutput t2\n", filename="k.gir")
    assert e.value.render().startswith("k.gir:3:6: error: op 'Exp' has no kernel yet")


def test_chain_of_100_elementwise_ops_on_64_mib_uses_a_few_buffers():
    n = 16 * 1024 * 1024  # 64 MiB of float32
    lines = [f"input t0 : Float32 [{n // 4096}, 4096]"]
    ops = ["Neg", "Exp", "Neg", "Identity"]
    for k in range(100):
        lines.append(f"t{k + 1} = {ops[k % 4]}(t{k})")
    lines.append("output t100")
    # simplify would drop the Identity ops and the Neg(Neg(x)) pairs they leave, and fused loops write fresh
    # buffers (not in place): this is about the buffer plan of the ops themselves
    exe = gradir.compile("\n".join(lines) + "\n", threads=2, disable=["simplify", "fuse-elementwise"])
    mib = 1 << 20
    assert exe.plan.naive_bytes == 101 * 64 * mib
    assert exe.plan.peak_bytes == 2 * 64 * mib  # the input plus one buffer, reused in place
    x = np.full((n // 4096, 4096), -1.0, dtype=np.float32)
    exe.run({"t0": x})  # warm up: later runs reuse the pooled buffers
    tracemalloc.start()
    try:
        out = exe.run({"t0": x})
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 3 * 64 * mib, f"measured peak {peak / mib:.0f} MiB"
    assert out["t100"].shape == x.shape


def test_input_errors_name_the_input():
    exe = gradir.compile("input t0 : Float32 [2, ?]\ninput t1 : Float32 [?, 3]\ninput t2 : Int32 [2]\n"
                         "t3 = ReluGrad(t0, t1)\noutput t3, t2\n", filename="in.gir")
    f = lambda *s, dt=np.float32: np.zeros(s, dtype=dt)  # noqa: E731
    ok = exe.run({"t0": f(2, 3), "t1": f(2, 3), "t2": f(2, dt=np.int32)})
    assert ok["t3"].shape == (2, 3)
    cases = [
        ({"t0": f(2, 3), "t1": f(2, 3)}, "missing input t2 (Int32 [2])"),
        ({"t0": f(2, 3), "t1": f(2, 3), "t2": f(2, dt=np.int32), "t9": f(1)}, "unexpected input t9"),
        ({"t0": f(2, 3, dt=np.float64), "t1": f(2, 3), "t2": f(2, dt=np.int32)},
         "input t0: expected Float32 [2, ?], got Float64 [2, 3] (dtype Float64 instead of Float32)"),
        ({"t0": f(2, 3, 1), "t1": f(2, 3), "t2": f(2, dt=np.int32)}, "(rank 3 instead of 2)"),
        ({"t0": f(3, 3), "t1": f(3, 3), "t2": f(2, dt=np.int32)}, "input t0: expected Float32 [2, ?], got Float32 [3, 3] (dimension 0 is 3)"),
        ({"t0": f(2, 3), "t1": f(4, 3), "t2": f(2, dt=np.int32)},
         "the input shapes are inconsistent (t0 [2, 3], t1 [4, 3], t2 [2]): ReluGrad: operand X (t1) has shape [4, 3] but dY (t0) has [2, 3]"),
    ]
    for inputs, msg in cases:
        with pytest.raises(InputError) as e:
            exe.run(inputs)
        assert msg in str(e.value), str(e.value)


def test_kernel_exception_names_the_op_line(monkeypatch):
    gradir.compile("input t0 : Float32 [1]\noutput t0\n")
    from gradir.backends.cpu.kernels import KernelInfo

    def boom(*a, out=None):
        raise RuntimeError("kaput")
    monkeypatch.setitem(KERNELS, "Exp", KernelInfo("Exp", boom))
    exe = gradir.compile("input t0 : Float32 [2, 3]\ninput t1 : Float32 [3, 4]\nt2 = MatMul(t0, t1)\n"
                         "t3 = Exp(t2)\noutput t3\n", filename="e.gir")
    with pytest.raises(ExecutionError) as e:
        exe.run({"t0": np.ones((2, 3), np.float32), "t1": np.ones((3, 4), np.float32)})
    assert str(e.value).startswith("e.gir:4:1: error: RuntimeError: kaput; in Exp on line 4, "
                                   "operands t2 Float32 [2, 4]\n    t3 = Exp(t2)\n    ^^^")


def test_check_numerics_stops_at_the_first_bad_op():
    exe = gradir.compile("input t0 : Float32 [3]\nt1 = Log(t0)\nt2 = Exp(t1)\noutput t2\n", filename="n.gir")
    x = np.array([1.0, -1.0, 2.0], np.float32)
    with np.errstate(invalid="ignore"):
        assert np.isnan(exe.run({"t0": x})["t2"][1])
        with pytest.raises(ExecutionError) as e:
            exe.run({"t0": x}, check_numerics=True)
    assert str(e.value).startswith("n.gir:2:1: error: produced NaN in t1 at index [1] (--check-numerics); "
                                   "in Log on line 2\n")


def test_compile_once_run_many_and_call_syntax():
    exe = gradir.compile("input t0 : Float64 [3]\nt1 = Mul(t0, t0)\nt2 = Add(t1, t0)\noutput t2\n")
    for k in range(3):
        x = np.arange(3.0) + k
        np.testing.assert_array_equal(exe(t0=x)["t2"], x * x + x)
    assert "t2 = Add" in exe.plan.describe() or "Add" in exe.plan.describe()
    assert exe.input_names == ["t0"] and exe.output_names == ["t2"]


# -- the command line -----------------------------------------------------------------

def _write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


GRAPH = "input t0 : Float32 [2, 3]\ninput t1 : Float32 [2, 3]\nt2 = Mul(t0, t1)\nt3 = Neg(t2)\noutput t3, t2\n"


def test_run_demo_inputs_are_reproducible_and_saved(tmp_path, capsys):
    f = _write(tmp_path, "g.gir", GRAPH)
    out1, out2 = str(tmp_path / "a.npz"), str(tmp_path / "b.npz")
    assert main(["run", f, "-o", out1, "--seed", "7"]) == 0
    cap = capsys.readouterr()
    assert "generated every input from seed 7" in cap.err
    assert "t3" in cap.out and "L2 norm" in cap.out and "time:" in cap.out
    assert main(["run", f, "-o", out2, "--seed", "7", "--threads", "1"]) == 0
    a, b = np.load(out1), np.load(out2)
    assert sorted(a.files) == ["t2", "t3"]
    np.testing.assert_array_equal(a["t3"], b["t3"])


@pytest.mark.parametrize("sample,weights,hidden", [
    ("lstm_bptt.gir", ("t1", "t2", "t3"), 64),            # LSTMTraining/LSTMGrad: W, R, B
    ("lstm_cell_backward.gir", ("t3", "t4", "t5"), None),  # GradLSTMCellInput: W_ih, W_hh, Bias
])
def test_demo_lstm_weights_are_drawn_like_pytorch_initializes_them(sample, weights, hidden):
    """Demo runs draw LSTM weights, biases and peepholes from U(±1/√H) (N(0, 1) weights would
    saturate every gate); every other float input stays N(0, 1)."""
    with open(os.path.join(ROOT, "samples", sample)) as f:
        g = gradir.parse(f.read(), sample)
    ops = [op for op in g.ops if "hidden_size" in op.attrs]
    H = hidden or ops[0].attrs["hidden_size"]
    inputs = demo_inputs(g, 0)
    for name in weights:
        w = inputs[name]
        assert np.abs(w).max() <= 1 / np.sqrt(H) and np.abs(w).max() > 0.5 / np.sqrt(H), name
    others = [v for k, v in inputs.items() if k not in weights and v.dtype.kind == "f" and v.size >= 64]
    assert others and all(0.7 < v.std() < 1.3 for v in others)
    out = gradir.compile(g).run(inputs)
    assert all(np.isfinite(v).all() and np.abs(v).max() < 50 for v in out.values())


def test_run_with_inputs_and_repeat(tmp_path, capsys):
    f = _write(tmp_path, "g.gir", GRAPH)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.savez(tmp_path / "in.npz", t0=x)
    np.save(tmp_path / "t1.npy", x + 1)
    out = str(tmp_path / "o.npz")
    assert main(["run", f, "--inputs", str(tmp_path / "in.npz"), "--input", f"t1={tmp_path / 't1.npy'}",
                 "-o", out, "--repeat", "3"]) == 0
    assert "min" in capsys.readouterr().out
    np.testing.assert_array_equal(np.load(out)["t3"], -(x * (x + 1)))


def test_run_trace_is_chrome_trace_json(tmp_path, capsys):
    f = _write(tmp_path, "g.gir", GRAPH)
    tr = str(tmp_path / "trace.json")
    assert main(["run", f, "--trace", tr]) == 0
    doc = json.load(open(tr))
    events = doc["traceEvents"]
    assert [e["name"] for e in events] == ["Mul", "Neg"]
    for e in events:
        assert e["ph"] == "X" and e["dur"] >= 0 and "tid" in e and "pid" in e


@pytest.mark.parametrize("setup,msg", [
    (lambda d: ["--input", "t0=" + str(d / "x.npy")], "missing input t1 (Float32 [2, 3])"),
    (lambda d: ["--inputs", str(d / "both.npz"), "--input", "t7=" + str(d / "x.npy")], "unexpected input t7"),
    (lambda d: ["--inputs", str(d / "nope.npz")], "--inputs: no such file"),
    (lambda d: ["--inputs", str(d / "corrupt.npz")], "--inputs: not a valid NumPy file"),
    (lambda d: ["--inputs", str(d / "pickled.npz")], "pickles"),
    (lambda d: ["--input", "t0=" + str(d / "pickled.npy"), "--input", "t1=" + str(d / "x.npy")], "pickles"),
    (lambda d: ["--inputs", str(d / "x.npy")], "expected an .npz archive"),
    (lambda d: ["--inputs", str(d / "wrongdtype.npz")], "input t0: expected Float32 [2, 3], got Float64 [2, 3]"),
])
def test_run_bad_inputs_exit_1_with_a_message(tmp_path, capsys, setup, msg):
    f = _write(tmp_path, "g.gir", GRAPH)
    x = np.ones((2, 3), np.float32)
    np.save(tmp_path / "x.npy", x)
    np.savez(tmp_path / "both.npz", t0=x, t1=x)
    np.savez(tmp_path / "wrongdtype.npz", t0=x.astype(np.float64), t1=x)
    (tmp_path / "corrupt.npz").write_bytes(b"PK\x03\x04 this is not a zip archive")
    np.savez(tmp_path / "pickled.npz", t0=np.array([{"a": 1}], dtype=object), t1=x)
    np.save(tmp_path / "pickled.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    out = tmp_path / "out.npz"
    assert main(["run", f, *setup(tmp_path), "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert msg in err and "Traceback" not in err
    assert not out.exists()


def test_run_bad_input_flag_is_a_usage_error(tmp_path):
    f = _write(tmp_path, "g.gir", GRAPH)
    assert main(["run", f, "--input", "t0"]) == 2


def test_run_check_numerics_cli(tmp_path, capsys):
    f = _write(tmp_path, "g.gir", "input t0 : Float32 [4]\nt1 = Log(t0)\noutput t1\n")
    np.save(tmp_path / "x.npy", np.array([1, 2, -3, 4], np.float32))
    assert main(["run", f, "--input", f"t0={tmp_path / 'x.npy'}", "--check-numerics"]) == 1
    assert "produced NaN in t1 at index [2]" in capsys.readouterr().err


def test_plan_cli(capsys):
    assert main(["plan", os.path.join(ROOT, "samples", "lstm_cell_backward.gir")]) == 0
    out = capsys.readouterr().out
    assert "GradLSTMCellInputFused(" in out and "input_indices=[0, 1, 2, 3, 4, 5]" in out
    assert "# memory: planned peak" in out and "naive total" in out
    assert main(["plan", "--list-passes"]) == 0
    assert "dce:" in capsys.readouterr().out


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(sorted(k.name for k in KERNELS.values() if k.inplace)), st.data())
def test_inplace_kernels_are_right_when_out_is_any_operand(name, data):
    """The buffer plan may hand a kernel one of its own operands as ``out``:
    the result must equal the out-of-place one, bit for bit, for every operand."""
    types, attrs = OP_EXAMPLES[name](data.draw)
    op = gradir.OPS[name](["t0"], [f"t{i + 1}" if t is not None else None for i, t in enumerate(types)], attrs)
    try:
        result_types = op.check(types)
    except Exception:
        return
    op.check_signature()
    rng = np.random.default_rng(data.draw(st.integers(0, 1000)))
    arrays = [None if t is None else rng.standard_normal(t.shape).astype(t.dtype.numpy) for t in types]
    for k, t in enumerate(types):
        if t is not None and gradir.OPS[name].operand_spec(k).sample == "classes":  # valid class labels
            arrays[k] = rng.integers(0, types[k - 1].shape[1], t.shape).astype(t.dtype.numpy)
    kern = KERNELS[name].fn
    if len(result_types) != 1:
        return
    with np.errstate(all="ignore"):
        ref = np.asarray(kern(*[None if a is None else a.copy() for a in arrays], out=None, **op.attrs))
        for i, (a, t) in enumerate(zip(arrays, types)):
            if t is None or t != result_types[0]:
                continue
            args = [None if b is None else b.copy() for b in arrays]
            got = kern(*args, out=args[i], **op.attrs)
            assert _bits(np.asarray(got)) == _bits(ref), (name, i)


def test_sum_writing_into_a_later_operand():
    x = np.array([0.1, 0.2, 0.3, 0.4], np.float32)
    one = np.ones(4, np.float32)
    exe = gradir.compile("input t0 : Float32 [4]\ninput t1 : Float32 [4]\nt2 = Exp(t0)\nt3 = Sum(t1, t1, t2)\n"
                         "output t3\n")
    assert exe.plan.steps[1].inplace  # t3 reuses t2's buffer
    np.testing.assert_allclose(exe(t0=x, t1=one)["t3"], 2 + np.exp(x), rtol=1e-6)
    exe = gradir.compile("input t0 : Float32 [4]\nt1 = Exp(t0)\nt2 = Sum(t1, t1, t1)\noutput t2\n")
    np.testing.assert_allclose(exe(t0=x)["t2"], 3 * np.exp(x), rtol=1e-6)


def test_input_errors_point_at_the_input_line():
    exe = gradir.compile("# header\ninput t0 : Float32 [2, 3]\ninput t1 : Float32 [2, 3]\nt2 = Add(t0, t1)\n"
                         "output t2\n", filename="loc.gir")
    with pytest.raises(InputError) as e:
        exe.run({"t0": np.zeros((3, 2), np.float32)})
    text = e.value.render()
    assert "loc.gir:2:7: error: input t0: expected Float32 [2, 3], got Float32 [3, 2]" in text
    assert "loc.gir:3:7: error: missing input t1 (Float32 [2, 3])" in text
    with pytest.raises(InputError, match=r"loc.gir:4:1: error: unexpected input t2: t2 is computed here \(by Add\) "
                                         "and cannot be given as an input"):
        exe.run({"t0": np.zeros((2, 3), np.float32), "t1": np.zeros((2, 3), np.float32),
                 "t2": np.zeros((2, 3), np.float32)})


def test_threads_must_be_positive():
    for bad in (0, -1, "2", 1.5, True):
        with pytest.raises(ValueError, match="threads must be a positive integer"):
            gradir.compile("input t0 : Float32 [1]\noutput t0\n", threads=bad)


@pytest.mark.parametrize("argv,code,msg", [
    (["--repeat", "0"], 2, "expected a positive integer"),
    (["--seed", "-1"], 2, "expected a non-negative integer"),
    (["--threads", "0"], 2, "expected a positive integer"),
    (["--trace", "/nonexistent/dir/t.json"], 1, "directory /nonexistent/dir does not exist"),
    (["-o", "/nonexistent/dir/o.npz"], 1, "directory /nonexistent/dir does not exist"),
])
def test_run_argument_errors(tmp_path, capsys, argv, code, msg):
    f = _write(tmp_path, "g.gir", GRAPH)
    try:
        rc = main(["run", f, *argv])
    except SystemExit as e:
        rc = e.code
    assert rc == code
    err = capsys.readouterr().err
    assert msg in err and "internal error" not in err and "Traceback" not in err


def test_plan_unknown_pass_is_a_usage_error(tmp_path, capsys):
    f = _write(tmp_path, "g.gir", GRAPH)
    assert main(["plan", f, "--disable", "cse,bogus"]) == 2
    assert "unknown pass 'bogus'" in capsys.readouterr().err
    assert main(["plan", f, "--disable", "cse,dce"]) == 0


def test_demo_run_explains_unknown_dims(tmp_path, capsys):
    f = _write(tmp_path, "q.gir", "input t0 : Float32 [?, 4]\ninput t1 : Float32 [3, ?]\nt2 = Add(t0, t1)\n"
                                  "output t2\n")
    assert main(["run", f]) == 1
    err = capsys.readouterr().err
    assert "the input shapes are inconsistent" in err and "use 2 for every '?' dimension" in err


SAMPLES = sorted(os.path.join(ROOT, "samples", f) for f in os.listdir(os.path.join(ROOT, "samples"))
                 if f.endswith(".gir"))


@pytest.mark.parametrize("path", SAMPLES, ids=os.path.basename)
def test_every_sample_runs_finite_and_identically_on_1_and_2_threads(path):
    g = gradir.load(path)
    inputs = demo_inputs(g, 0)
    r1 = gradir.compile(g, threads=1).run(inputs, check_numerics=True)
    r2 = gradir.compile(g, threads=2).run(inputs, check_numerics=True)
    assert list(r1) == gradir.compile(g).output_keys  # by label where there is one
    for k, name in zip(r1, g.outputs):
        assert r1[k].shape == g.types[name].shape
        assert _bits(r1[k]) == _bits(r2[k])


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(sorted(c.op_name for c in KERNELS if c.op_name in gradir.OPS)), st.data())  # FusedElementwise:
def test_kernel_results_never_alias_their_operands(name, data):  # test_fuse_elementwise.py
    """The pool recycles a dead operand's buffer: a result that were a view of it would be corrupted."""
    types, attrs = OP_EXAMPLES[name](data.draw)
    op = gradir.OPS[name](["t0"], [f"t{i + 1}" if t is not None else None for i, t in enumerate(types)], attrs)
    try:
        op.check(types)
    except Exception:
        return
    rng = np.random.default_rng(0)
    arrays = [None if t is None else rng.standard_normal(t.shape).astype(t.dtype.numpy) for t in types]
    if name in ("LSTMTraining", "LSTMGrad") and arrays[4 if name == "LSTMTraining" else 3] is not None:
        k = 4 if name == "LSTMTraining" else 3
        arrays[k] = np.full(types[k].shape, types[0].shape[0], dtype=types[k].dtype.numpy)  # valid lengths
    for k, t in enumerate(types):
        if t is not None and gradir.OPS[name].operand_spec(k).sample == "classes":  # valid class labels
            arrays[k] = rng.integers(0, types[k - 1].shape[1], t.shape).astype(t.dtype.numpy)
    with np.errstate(all="ignore"):
        res = KERNELS[name].fn(*arrays, out=None, **op.attrs)
    for r in (res if isinstance(res, tuple) else (res,)):
        for a in arrays:
            if a is not None:
                assert not np.shares_memory(np.asarray(r), a), name


@pytest.mark.parametrize("failing_thread", ["caller", "helper"])
def test_kernel_exception_in_the_dataflow_executor(monkeypatch, failing_thread):
    """An op failing on either worker (the calling thread or the pool's) stops the run with
    its located message; the other worker is waited for, and the executable runs again."""
    import time

    from gradir.transforms import schedule
    from gradir.backends.cpu.kernels import KernelInfo

    real_exp = KERNELS["Exp"]
    armed = {"on": True}
    caller = threading.current_thread()

    def flaky(*a, out=None):
        time.sleep(0.05)  # both branches' Exp run at once, one on each worker
        on_caller = threading.current_thread() is caller
        if armed["on"] and on_caller == (failing_thread == "caller"):
            raise RuntimeError("kaput")
        return real_exp.fn(*a, out=out)

    monkeypatch.setitem(KERNELS, "Exp", KernelInfo("Exp", flaky))
    monkeypatch.setattr(schedule, "INLINE_BYTES", 0)
    text = ("input t0 : Float32 [64, 64]\ninput t1 : Float32 [64, 64]\n"
            "t2 = Exp(t0)\nt3 = Exp(t1)\nt4 = Neg(t2)\nt5 = Neg(t3)\nt6 = Add(t4, t5)\noutput t6\n")
    exe = gradir.compile(text, threads=2, filename="d.gir")
    assert exe.plan.heavy_concurrency
    x = np.ones((64, 64), np.float32)
    with pytest.raises(ExecutionError) as e:
        exe.run({"t0": x, "t1": x})
    assert ": error: RuntimeError: kaput; in Exp on line " in str(e.value)
    armed["on"] = False
    got = exe.run({"t0": x, "t1": x})["t6"]
    np.testing.assert_allclose(got, -2 * np.exp(x), rtol=1e-6)


def test_overlapping_runs_restore_the_switch_interval(monkeypatch):
    """Run A starts, run B starts while A runs, A ends first: the interval each run saw on
    entry differs, yet the process's own value comes back once both are done."""
    import sys
    import time

    from gradir.transforms import schedule
    from gradir.backends.cpu.kernels import KernelInfo

    real_exp = KERNELS["Exp"]

    def slow_exp(*a, out=None):
        time.sleep(0.03)
        return real_exp.fn(*a, out=out)

    monkeypatch.setattr(schedule, "INLINE_BYTES", 0)
    monkeypatch.setitem(KERNELS, "Exp", KernelInfo("Exp", slow_exp))
    text = ("input t0 : Float32 [64, 64]\ninput t1 : Float32 [64, 64]\nt2 = Exp(t0)\n"
            "t3 = Exp(t1)\nt4 = Add(t2, t3)\noutput t4\n")
    exe_a = gradir.compile(text, threads=2)
    exe_b = gradir.compile(text.replace("t4 = Add(t2, t3)", "t5 = Exp(t2)\nt4 = Add(t5, t3)"), threads=2)
    assert exe_a.plan.heavy_concurrency and exe_b.plan.heavy_concurrency
    before = sys.getswitchinterval()
    x = np.ones((64, 64), np.float32)
    ta = threading.Thread(target=exe_a.run, args=({"t0": x, "t1": x},))
    tb = threading.Thread(target=exe_b.run, args=({"t0": x, "t1": x},))
    ta.start()
    time.sleep(0.01)
    tb.start()  # B enters while A is inside and leaves after A
    ta.join()
    tb.join()
    assert sys.getswitchinterval() == before


def test_a_run_does_not_wait_for_other_runs_on_the_shared_pool(monkeypatch):
    """Runs with the same thread count share a pool; a short run whose helper is still
    queued behind another run's long op must not wait for it."""

    from gradir.transforms import schedule
    from gradir.backends.cpu.kernels import KernelInfo

    real_tanh = KERNELS["Tanh"]

    inside = threading.Semaphore(0)
    release = threading.Event()

    def slow_tanh(*a, out=None):  # a long op that releases the GIL, until the test lets it end
        inside.release()
        release.wait(120)
        return real_tanh.fn(*a, out=out)

    monkeypatch.setattr(schedule, "INLINE_BYTES", 0)
    monkeypatch.setitem(KERNELS, "Tanh", KernelInfo("Tanh", slow_tanh))
    two = "input t0 : Float32 [64, 64]\ninput t1 : Float32 [64, 64]\nt2 = {0}(t0)\nt3 = {0}(t1)\nt4 = Add(t2, t3)\noutput t4\n"
    long_exe = gradir.compile(two.format("Tanh"), threads=2)
    short_exe = gradir.compile(two.format("Exp"), threads=2)
    x = np.ones((64, 64), np.float32)
    short_exe.run({"t0": x, "t1": x})
    others = [threading.Thread(target=long_exe.run, args=({"t0": x, "t1": x},)) for _ in range(2)]
    for t in others:
        t.start()
    try:
        for _ in range(4):  # both runs' two Tanh ops: the two callers and both pool workers now wait in them
            assert inside.acquire(timeout=60), "the long runs' ops did not all start"
        got = {}
        short = threading.Thread(target=lambda: got.update(short_exe.run({"t0": x, "t1": x})))
        short.start()
        short.join(60)  # it must end while every pool worker is still held in a long op
        finished = not short.is_alive()
    finally:
        release.set()
        for t in others:
            t.join()
    assert finished, "the short run waited for the other runs' ops on the shared pool"
    short.join()
    np.testing.assert_allclose(got["t4"], 2 * np.exp(x), rtol=1e-6)


def test_an_interrupt_between_steps_stops_the_dataflow_helpers(monkeypatch):
    """A KeyboardInterrupt landing on the caller's worker outside a step (emulated right
    after it takes a step) propagates; the helper thread is told to stop (no hang)."""
    import types

    from gradir.backends.cpu import executor
    from gradir.transforms import schedule

    monkeypatch.setattr(schedule, "INLINE_BYTES", 0)
    exe = gradir.compile("input t0 : Float32 [64, 64]\ninput t1 : Float32 [64, 64]\nt2 = Exp(t0)\n"
                         "t3 = Tanh(t1)\nt4 = Sigmoid(t3)\nt5 = Neg(t2)\nt6 = Add(t4, t5)\noutput t6\n", threads=2)
    assert exe.plan.heavy_concurrency
    state = {"caller": None, "armed": True}

    class Cond(threading.Condition):
        def __exit__(self, *exc):  # type: ignore[no-untyped-def]
            r = super().__exit__(*exc)
            if exc[0] is None and state["armed"] and threading.current_thread() is state["caller"]:
                state["armed"] = False
                raise KeyboardInterrupt
            return r

    shim = types.ModuleType("threading_shim")
    shim.__dict__.update(threading.__dict__)
    shim.Condition = Cond
    monkeypatch.setattr(executor, "threading", shim)
    outcome: list[str] = []
    x = np.ones((64, 64), np.float32)

    def call() -> None:
        state["caller"] = threading.current_thread()
        try:
            exe.run({"t0": x, "t1": x})
            outcome.append("returned")
        except BaseException as e:  # noqa: BLE001
            outcome.append(type(e).__name__)

    t = threading.Thread(target=call, daemon=True)
    t.start()
    t.join(20)
    assert outcome == ["KeyboardInterrupt"]


def _blas_threads():
    from threadpoolctl import threadpool_info
    return [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]


@contextlib.contextmanager
def _blas_at(n):
    """BLAS at ``n`` threads for a test, set without holding threadpoolctl's per-thread control
    (``with threadpool_limits`` would make this thread the only one whose limits take effect)."""
    from gradir.backends.cpu.kernels import parallel
    from threadpoolctl import ThreadpoolController
    ctl = ThreadpoolController()
    saved = parallel._as_controller(lambda: ctl.limit(limits=n, user_api="blas"))
    try:
        yield
    finally:
        parallel._as_controller(saved.restore_original_limits)


def test_overlapping_blas_limits_restore_the_original_thread_counts():
    """Runs that each hold BLAS to fewer threads (several BLAS ops may run at once), on two
    threads, ending in the other order than they started and on other threads than the first
    one in, leave BLAS as it was.  Regressions: the run that ended last restored the other's
    limit, and every later GEMM in the process ran on one thread (2 of 5 tries of two threads
    running such a graph); with threadpoolctl >= 3.8 the last one out, on another thread than
    the first one in, could not restore at all."""
    import threading as th

    from gradir.backends.cpu.kernels import parallel

    with _blas_at(2):
        before = _blas_threads()
        first = parallel.blas_limit(1)  # run 1, on this thread
        inside, go = th.Event(), th.Event()
        seen = []

        def second_run():  # run 2, on another thread, ends last
            with parallel.blas_limit(1):
                inside.set()
                go.wait(10)
                seen.append(_blas_threads())

        worker = th.Thread(target=second_run)
        first.__enter__()
        try:
            assert set(_blas_threads()) <= {1}
            worker.start()
            assert inside.wait(10)
        finally:
            first.__exit__(None, None, None)  # run 1 ends first
            go.set()
            worker.join()
        assert parallel._blas_held == []
        if before:  # a BLAS that threadpoolctl can control: held at one thread, then restored
            assert set(before) == {2}
            assert seen and set(seen[0]) == {1}  # still held while run 2 went on alone
        assert _blas_threads() == before


def test_run_two_waits_for_its_helper_through_ctrl_c():
    """Ctrl-C while run_two waits for the other half: the helper is told to stop and waited
    for, so nothing writes into the caller's buffers after run_two has raised."""
    import signal
    log = []

    def first(stop):
        log.append("first done")

    def second(stop):
        # The Ctrl-C is sent from here once the caller's half is done (so it lands while run_two
        # waits for this one, under any load), then this half runs until told to stop.
        while "first done" not in log:
            time.sleep(0.001)
        os.kill(os.getpid(), signal.SIGINT)
        told = stop.wait(60)
        log.append("second done" if told else "second never told to stop")

    armed = [True]

    def interrupt(*_):
        if armed[0]:  # only while run_two runs: a late signal must not escape the test
            raise KeyboardInterrupt

    old = signal.signal(signal.SIGINT, interrupt)
    try:
        try:
            with pytest.raises(KeyboardInterrupt):
                parallel.run_two(first, second, concurrent=True)
        finally:
            armed[0] = False
        log.append("raised")
    finally:
        signal.signal(signal.SIGINT, old)
    assert log == ["first done", "second done", "raised"]


def test_own_blas_threads_never_lowers_a_count_others_hold_above_one():
    """A kernel's own threads take BLAS to one thread only where nobody holds it above one
    (lowering it under a product running beside would change that product's bits)."""
    before = parallel.blas_threads()
    with parallel.own_blas_threads() as free:  # its threads: the cores this call was given
        assert free.ok and free.threads == parallel.threads_here() and parallel.blas_threads() == 1
    with parallel.cores(3), parallel.own_blas_threads() as three:
        assert three.ok and three.threads == 3
    assert parallel.blas_threads() == before
    with parallel.blas_limit(1), parallel.cores(1), parallel.own_blas_threads() as one:
        assert one.ok and one.threads == 1
    if before >= 2:
        with parallel.blas_limit(2), parallel.own_blas_threads() as held:
            assert not held.ok and parallel.blas_threads() == 2
    with parallel.own_blas_threads(False) as unwanted:
        assert not unwanted.ok and parallel.blas_threads() == before
    assert parallel.blas_threads() == before


def test_a_blas_limit_never_raises_the_thread_count():
    from gradir.backends.cpu.kernels import parallel
    with _blas_at(1):
        before = _blas_threads()
        with parallel.blas_limit(8):
            assert _blas_threads() == before


def test_overlapping_runs_on_two_threads_leave_blas_threads_as_they_were():
    """The same through the runtime: two threads run a graph whose two MatMuls may overlap."""
    import threading as th
    import time

    text = ("input t0 : Float32 [300, 300]\ninput t1 : Float32 [300, 300]\n"
            "t2 = MatMul(t0, t1)\nt3 = MatMul(t1, t0)\nt4 = Add(t2, t3)\noutput t4\n")
    exe = gradir.compile(text, threads=2)
    assert exe.plan.blas_concurrency
    x = np.random.default_rng(0).standard_normal((300, 300)).astype(np.float32)
    barrier = th.Barrier(2)
    errors = []

    def work(k):
        try:
            barrier.wait()
            for i in range(60):
                exe.run({"t0": x, "t1": x})
                if k == 0 and i % 3 == 0:
                    time.sleep(0.0005)  # shift the two threads' runs against each other
        except BaseException as e:  # reported by the assert below
            errors.append(e)

    with _blas_at(2):
        before = _blas_threads()
        threads = [th.Thread(target=work, args=(k,)) for k in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        assert _blas_threads() == before


def test_a_reshape_runs_as_a_view_whose_buffer_outlives_every_reader():
    """Reshape/Unsqueeze of a static value share its buffer (no copy): the buffer goes back to the
    pool only after the last reader of the value and of every view of it, in both executors and
    whatever order the steps finish in; a view is never written in place."""
    from gradir.transforms import schedule
    text = ("input t0 : Float32 [256, 256]\ninput t1 : Float32 [256, 256]\n"
            "t2 = Exp(t0)\nt3 = Reshape(t2, shape=[65536])\nt4 = MatMul(t1, t1)\nt5 = MatMul(t4, t1)\n"
            "t6 = Reshape(t5, shape=[65536])\nt7 = Add(t3, t6)\nt8 = Neg(t2)\nt9 = Reshape(t8, shape=[65536])\n"
            "t10 = Unsqueeze(t9, axes=[0])\nt11 = Reshape(t10, shape=[65536])\nt12 = Add(t7, t11)\nt13 = Neg(t3)\n"
            "t14 = Mul(t12, t13)\noutput t14\n")
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((256, 256)) * 0.1).astype(np.float32)
    w = (rng.standard_normal((256, 256)) * 0.1).astype(np.float32)
    ref = gradir.compile(text, backend="reference").run({"t0": x, "t1": w})["t14"]
    e = np.exp(x)
    np.testing.assert_allclose(ref, ((e + (w @ w) @ w) - e).ravel() * -e.ravel(), rtol=1e-4, atol=1e-6)
    saved = schedule.INLINE_BYTES
    schedule.INLINE_BYTES = 0  # every step heavy: the dataflow executor, steps finishing in any order
    try:
        for threads in (1, 2):
            exe = gradir.compile(text, threads=threads)
            views = {st.results[0] for st in exe.plan.steps if st.view}
            assert views == {"t3", "t6", "t9", "t10", "t11"}
            assert exe.plan.views["t11"] == "t8" and exe.plan.views["t3"] == "t2"
            assert not any(exe.plan.steps[k].operands[i] in views for k in range(len(exe.plan.steps))
                           for i in exe.plan.steps[k].inplace.values())
            assert "t3 = Reshape  (a view of t2: no copy" in exe.plan.describe()
            for _ in range(4):
                got = exe.run({"t0": x, "t1": w})["t14"]
                assert _bits(got) == _bits(ref)
                traced = exe.run({"t0": x, "t1": w}, trace=[])["t14"]
                assert _bits(traced) == _bits(ref)
    finally:
        schedule.INLINE_BYTES = saved


def test_a_reshape_that_is_an_output_is_a_copy():
    """An output never shares an intermediate's buffer: the next run reuses that buffer."""
    exe = gradir.compile("input t0 : Float32 [64, 64]\nt1 = Exp(t0)\nt2 = Reshape(t1, shape=[4096])\n"
                         "t3 = Neg(t1)\noutput t2\noutput t3\n")
    assert not any(st.view for st in exe.plan.steps)
    x = np.ones((64, 64), np.float32)
    first = exe.run({"t0": x})["t2"]
    kept = first.copy()
    exe.run({"t0": 2 * x})
    assert _bits(first) == _bits(kept)


def test_outputs_nobody_holds_are_reused_and_held_ones_never_change():
    """A run's outputs go back to the buffer pool once the caller has dropped them (no fresh pages
    for the next run's outputs); an output still held, or held through a view, keeps its values."""
    text = "input t0 : Float32 [512, 512]\nt1 = Exp(t0)\nt2 = Neg(t1)\noutput t2\n"
    exe = gradir.compile(text, threads=1)
    x = np.full((512, 512), 0.5, np.float32)
    first = exe.run({"t0": x})["t2"]
    address = first.ctypes.data
    del first
    again = exe.run({"t0": x})["t2"]
    assert again.ctypes.data == address  # the dropped output's buffer, reused
    want = -np.exp(x)
    np.testing.assert_array_equal(again, want)
    held = again  # still held: the next run writes elsewhere
    view = exe.run({"t0": 2 * x})["t2"][:3]  # only a view of this one is kept
    third = exe.run({"t0": 3 * x})["t2"]
    assert held.ctypes.data != third.ctypes.data
    np.testing.assert_array_equal(held, want)
    np.testing.assert_array_equal(view, -np.exp(2 * x)[:3])
    np.testing.assert_array_equal(third, -np.exp(3 * x))
    out = exe.run({"t0": x})  # the result dict kept whole
    exe.run({"t0": 3 * x})
    np.testing.assert_array_equal(out["t2"], want)


GIR = "input t0 : Float32 [2, 3]\nt1 = Relu(t0)\noutput t1\n"


def test_threads_have_an_upper_bound(tmp_path, capsys):
    g = tmp_path / "g.gir"
    g.write_text(GIR)
    assert main(["run", str(g), "--threads", "100000"]) == 2
    assert "expected a positive integer up to 1024, got '100000'" in capsys.readouterr().err
    assert main(["run", str(g), "--threads", "9" * 5000]) == 2
    with pytest.raises(gradir.ArgumentError, match="at most 1024"):
        gradir.compile(g, threads=100000)


def test_a_thread_the_system_refuses_is_an_execution_error(monkeypatch):
    from gradir.backends.cpu import executor
    from gradir.transforms import schedule
    monkeypatch.setattr(schedule, "INLINE_BYTES", 0)
    exe = gradir.compile("input t0 : Float32 [64, 64]\ninput t1 : Float32 [64, 64]\nt2 = Exp(t0)\nt3 = Exp(t1)\n"
                         "t4 = Add(t2, t3)\noutput t4\n", threads=3)
    assert exe.plan.heavy_concurrency
    pool = executor._executor(3)
    real = pool.submit
    calls = []

    def submit(fn, *a, **k):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("can't start new thread")
        return real(fn, *a, **k)
    monkeypatch.setattr(pool, "submit", submit)
    x = np.ones((64, 64), np.float32)
    with pytest.raises(gradir.ExecutionError, match="cannot start worker thread 3 of 3: can't start new thread"):
        exe.run({"t0": x, "t1": x})
    monkeypatch.setattr(pool, "submit", real)
    np.testing.assert_allclose(exe.run({"t0": x, "t1": x})["t4"], 2 * np.exp(x), rtol=1e-6)
