"""benchmarks/bench_memory.py (issue #33 [remat]): its graphs are right (finite differences, and PyTorch's
gradients where torch is importable: it is in the ``bench`` extra, not the test extra), and its gradir side
runs end to end at the quick sizes: each budgeted run is planned within its budget and gives the
unbudgeted run's outputs bit for bit.  Nothing here asserts a time or a measured (resident) peak: those are
the benchmark's to report, not a test's."""

import importlib.util
import os
import sys

import numpy as np
import pytest

import gradir

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benchmarks"))
import bench_memory  # noqa: E402
import memory_cases as mc  # noqa: E402


def test_the_judged_sizes():
    assert mc.LSTM_SIZES["full"] == (2048, 32, 512, 512, 256)  # S, B, I, H, classes (the LSTM LM)
    assert mc.STACK_SIZES["full"] == (4096, 512, 6)  # rows, C, layers
    ops = [op.op_name for op in gradir.parse(mc.build("stack", "tiny").text).ops]
    assert ops.count("LayerNormalization") == 2 and ops.count("Gelu") == 2 and ops[-1] == "ReduceMean"
    lstm = mc.build("lstm", "tiny", with_dx=True)
    assert lstm.wrt_labels == ["X", "W", "R", "B", "W_out"] and mc.build("lstm", "tiny").wrt_labels[0] == "W"
    assert "Int64" in lstm.text and "SoftmaxCrossEntropyLoss" in lstm.text
    assert mc.build("lstm", "quick", seq=2).make_inputs()["t0"].shape[0] == 2  # the runtime's own, at S=2


@pytest.mark.parametrize("key", ["stack", "lstm"])
def test_gradients_against_finite_differences(key):
    case = mc.build(key, "tiny", with_dx=True)
    report = gradir.gradcheck(case.text, wrt=case.wrt, inputs=case.make_inputs())
    assert report.ok, report.table()


@pytest.mark.parametrize("mode", ["eager", "checkpoint"])
def test_the_stack_against_pytorch(mode):
    if importlib.util.find_spec("torch") is None:
        pytest.skip("PyTorch is not importable (it is in the bench extra): the finite differences check the stack")
    import torch
    case = mc.build("stack", "tiny")
    vals = case.make_inputs()
    fwd = gradir.parse(case.text)
    bwd = gradir.grad(fwd, wrt=case.wrt)
    feeds = dict(vals, **{bwd.inputs[len(fwd.inputs)].name: np.float32(1)})
    ours = list(gradir.compile(bwd, threads=1).run(feeds).values())
    theirs = [g.detach().numpy() for g in case.torch(torch, vals, mode)()]
    assert len(ours) == len(theirs) == len(case.wrt)
    for a, b in zip(ours, theirs):
        assert bench_memory.rel_error(a, b) <= 1e-5


def test_the_stack_and_the_sweep_at_a_budget(capsys):
    """The quick stack at 50% of its unbudgeted planned peak, and a sweep of two budgets: every budgeted plan
    fits its budget, the peaks do not grow as the budget shrinks, and the outputs are the unbudgeted run's."""
    out = bench_memory.run(["--quick", "--case", "stack,sweep", "--no-torch", "--repeats", "1", "--threads", "1",
                            "--sweep", "1.0,0.5"])
    text = capsys.readouterr().out
    assert "PyTorch: left out (--no-torch)" in text and "## Goals" in text
    st = out["stack"]
    assert st["budget"] == int(0.5 * st["base_planned"])
    assert st["planned"] is not None, text  # the planner met the budget (whole-graph rematerialization)
    assert st["planned"] <= st["budget"] < st["base_planned"]
    assert st["bits_equal"] is True
    assert set(st["rows"]) == {"gradir", "gradir, budget 50%"}
    assert all(r["step_peak"] > 0 and r["median"] > 0 for r in st["rows"].values())
    rows = out["sweep"]["rows"]
    assert [r["fraction"] for r in rows] == [1.0, 0.5]
    assert all(r["error"] is None and r["planned"] <= r["budget"] and r["bits_equal"] for r in rows), rows
    assert rows[1]["planned"] <= rows[0]["planned"]


def test_the_lstm_lm_at_a_quarter(capsys):
    """The quick LSTM LM at 25% of its planned peak: either planned within the budget with the unbudgeted
    outputs bit for bit, or the planner's error (infeasible) printed before anything runs and the knee of
    the planner's curve run instead, within its budget and bit for bit."""
    out = bench_memory.run(["--quick", "--case", "lstm", "--repeats", "1", "--threads", "1"])
    text = capsys.readouterr().out
    res = out["lstm"]
    assert res["budget"] == int(0.25 * res["base_planned"])
    assert "the runtime's own peak (the same graph at sequence 2)" in text
    assert "takes no memory_budget" not in text  # the planner is there
    if res["planned"] is None:  # the planner's error, and the least feasible budget run instead
        assert "INFEASIBLE: " in text and "the least feasible budget is" in text
        assert "[MISS] lstm: the 25% budget is feasible" in text
        if res["least_feasible"] is None:
            return
        budget, peak, label = res["least_feasible"]  # the knee of the planner's curve (--fallback auto)
        assert res["label"] == label and label.startswith("gradir, auto")
    else:
        budget, peak = res["budget"], res["planned"]
        assert res["label"] == "gradir, budget 25%"
    assert peak <= budget and res["bits_equal"] is True
    assert res[res["label"]]["measured"] > 0


def test_bad_arguments():
    with pytest.raises(SystemExit):
        bench_memory.run(["--case", "nope"])
    with pytest.raises(SystemExit):
        bench_memory.run(["--threads", "0"])
