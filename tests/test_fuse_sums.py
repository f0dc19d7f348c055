"""Fused groups that end in sums (gradir/transforms/passes/elementwise.py ``_sums``, the sum loop of
gradir/backends/cpu/kernels/fused_codegen.py): a ``ReduceSumTo`` over leading axes (a broadcast bias's
gradient) is added up inside the loop that computes its operand; the unfused bits, for every
thread count; the cases left apart."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gradir
from gradir.backends.cpu.kernels import fused, parallel
from gradir.ops.fused import FusedElementwiseOp
from gradir.transforms.passes import elementwise
from strategies import elementwise_dags
from test_fuse_elementwise import _bits, _bits_for_thread_counts, _fused_steps, _inputs

BIAS = """\
input t0 : {d} [24, 2048]
input t1 : {d} [24, 2048]
input t2 : {d} [2048]
input t8 : {d} [1, 2048]
input t9 : {d} [24, 1]
t3 = Mul(t0, t1)
t4 = Add(t3, t2)
t5 = ReduceSumTo(t4, t8)
t6 = ReduceSumTo(t3, t8)
t7 = ReduceSumTo(t4, t9)
output t5, t6, t7
"""


def _assert_unfused_bits(exe, text: str, seed: int) -> None:
    """``exe`` (the fused program of ``text``) gives the unfused program's bits on random inputs."""
    x = _inputs(exe.graph, seed=seed)
    a, b = exe.run(x), gradir.compile(text, disable=["fuse-elementwise"]).run(x)
    for k in b:
        assert _bits(a[k]) == _bits(b[k]), k


@pytest.mark.parametrize("dtype", ["Float32", "Float64"])
def test_sums_over_leading_axes_end_the_group_and_give_the_unfused_bits(dtype):
    text = BIAS.format(d=dtype)
    exe = gradir.compile(text)
    [step] = _fused_steps(exe)
    # t3 is read only inside (by t4 and by a sum): never written; t4 is read by the sum over the
    # last axis, which stays apart (NumPy adds along a row pairwise: another order)
    assert step.op.results == ["t4", "t5", "t6"]
    assert "t8" not in step.op.operands  # a sum's Like is not read: only its static shape counts
    assert [s.op.op_name for s in exe.plan.steps] == ["FusedElementwise", "ReduceSumTo"]
    plan = exe.plan.describe()
    assert "fused 4 ops into 1 loop (1 ending in ReduceSumTo sums, added up in the loop)" in plan
    assert (f"one loop over {dtype} [24, 2048]: reads t0, t1, t2 [2048] (broadcast); writes t4; sums "
            "t5 [1, 2048], t6 [1, 2048] over axes [0], added up as the loop goes") in plan
    assert "#           t6 = ReduceSumTo(t3, t8)" in plan
    plain = gradir.compile(text, disable=["fuse-elementwise"])
    x = _inputs(exe.graph, seed=3)
    x["t0"][:, 7] = -0.0  # a column of -0.0 times anything: its sum is +0.0, as NumPy's
    a, b = exe.run(x), plain.run(x)
    for k in b:
        assert _bits(a[k]) == _bits(b[k]), k


@pytest.mark.parametrize("like, other, fused_sum", [
    ("[2048]", "[8, 1]", True), ("[1, 1, 2048]", "[8, 1]", True), ("[8, 2048]", "[8, 2048]", True),
    ("[8, 2048]", "[8, 1]", False),  # the columns [8, 2048] are not one axis for an operand broadcast in them
    ("[4, 1, 2048]", "[8, 1]", False), ("[4, 8, 1]", "[8, 1]", False)])  # not leading axes
def test_sums_of_three_dimensional_loops(like, other, fused_sum):
    text = (f"input t0 : Float32 [4, 8, 2048]\ninput t1 : Float32 {other}\ninput t2 : Float32 {like}\n"
            "t3 = Mul(t0, t1)\nt4 = Sub(t3, t0)\nt5 = ReduceSumTo(t4, t2)\noutput t5, t3\n")
    exe = gradir.compile(text)
    [step] = _fused_steps(exe)
    assert ("t5" in step.op.results) == fused_sum
    _assert_unfused_bits(exe, text, 1)


def test_narrow_sums_and_activation_only_groups_stay_apart():
    narrow = ("input t0 : Float32 [512, 256]\ninput t1 : Float32 [256]\nt2 = Mul(t0, t0)\nt3 = Add(t2, t1)\n"
              "t4 = ReduceSumTo(t3, t1)\noutput t4\n")
    [step] = _fused_steps(gradir.compile(narrow))  # 256 columns: one strip, one thread; apart
    assert step.op.results == ["t3"]
    gelu = ("input t0 : Float32 [512, 4096]\ninput t1 : Float32 [512, 4096]\ninput t2 : Float32 [4096]\n"
            "t3 = GeluGrad(t0, t1)\nt4 = ReduceSumTo(t3, t2)\noutput t4\n")
    exe = gradir.compile(gelu)  # GeluGrad's own kernel and a separate sum were faster
    assert not _fused_steps(exe) and "GELU-like ops left apart" in exe.plan.describe()


def test_a_sum_read_back_through_another_op_closes_no_cycle():
    """t6 reads t3 (in the loop) and Exp(t4), the loop's own sum: t6 cannot join the loop, and
    the sum still can."""
    text = ("input t0 : Float32 [16, 4096]\ninput t1 : Float32 [4096]\nt2 = Mul(t0, t0)\nt3 = Add(t2, t1)\n"
            "t4 = ReduceSumTo(t3, t1)\nt5 = Exp(t4)\nt6 = Add(t3, t5)\nt7 = Neg(t6)\noutput t7, t4\n")
    exe = gradir.compile(text)
    assert [s.op.op_name for s in exe.plan.steps] == ["FusedElementwise", "Exp", "Add", "Neg"] or \
        [s.op.op_name for s in exe.plan.steps] == ["FusedElementwise", "Exp", "FusedElementwise"]
    assert _fused_steps(exe)[0].op.results == ["t3", "t4"]
    _assert_unfused_bits(exe, text, 2)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sum_bits_do_not_depend_on_the_thread_count(dtype, monkeypatch):
    """Strips made narrow so that 1 to 4 threads each get several: the same bits, and those of the
    members' kernels run one after another (no compiled loop)."""
    monkeypatch.setattr(fused, "SUM_MIN_STRIP", 16)
    monkeypatch.setattr(parallel, "MIN_CHUNK_BYTES", 1024)
    exe = gradir.compile(BIAS.format(d="Float32" if dtype == np.float32 else "Float64"))
    body = _fused_steps(exe)[0].op.body
    x = _inputs(exe.graph, seed=6)
    assert len(_bits_for_thread_counts(body, [x["t0"], x["t1"], x["t2"]])) == 3


@settings(max_examples=40, deadline=None)
@given(elementwise_dags(sums=True), st.integers(0, 2 ** 16))
def test_random_dags_with_sums_give_the_unfused_bits(graph, seed):
    """Random DAGs of the exact ops with broadcasting and sums (over leading axes or not, some read
    back by later ops), both dtypes: the fused program gives the unfused one's bits."""
    saved = elementwise.MIN_ELEMENTS, elementwise.MIN_SUM_COLUMNS, fused.SUM_MIN_STRIP
    elementwise.MIN_ELEMENTS, elementwise.MIN_SUM_COLUMNS, fused.SUM_MIN_STRIP = 1, 1, 4
    try:
        exe = gradir.compile(graph)
        plain = gradir.compile(graph, disable=["fuse-elementwise"])
        x = _inputs(graph, seed)
        with np.errstate(all="ignore"):
            got, want = exe.run(x), plain.run(x)
    finally:
        elementwise.MIN_ELEMENTS, elementwise.MIN_SUM_COLUMNS, fused.SUM_MIN_STRIP = saved
    for k in want:
        assert _bits(got[k]) == _bits(want[k]), k
    for s in exe.plan.steps:  # each sum in a loop sums a value the loop computes
        if isinstance(s.op, FusedElementwiseOp):
            assert len(s.op.results) == len(s.op.body.outputs) + len(s.op.body.sums)


@pytest.mark.parametrize("text", [
    # group {t4, t8} feeds t6 (its sum), which feeds group {t5, t7}, which feeds t8
    "input t0 : Float32 [2, 16384]\ninput t1 : Float32 [2, 16384]\ninput t2 : Float32 [16384]\n"
    "input t3 : Float32 [16384]\nt4 = Mul(t0, t1)\nt5 = Mul(t2, t3)\nt6 = ReduceSumTo(t4, t2)\nt7 = Add(t6, t5)\n"
    "t8 = Add(t4, t5)\noutput t8, t7\n",
    # the same without sums: through an Exp, which no loop takes
    "input t0 : Float32 [128, 256]\ninput t1 : Float32 [128, 256]\ninput t2 : Float32 [128, 256]\n"
    "input t3 : Float32 [128, 256]\nt4 = Mul(t0, t1)\nt5 = Mul(t2, t3)\nt6 = Exp(t4)\nt7 = Add(t6, t5)\n"
    "t8 = Add(t4, t5)\nt9 = Neg(t7)\nt10 = Neg(t8)\noutput t10, t9\n"])
def test_two_groups_that_would_feed_each_other_are_not_both_fused(text):
    """Each group alone closes no cycle, but A feeds B through another op while B feeds A: one of
    them is left apart (the plan says so), and the program gives the unfused bits."""
    exe = gradir.compile(text)
    assert len(_fused_steps(exe)) == 1
    assert "1 group left apart: fused, it would depend on itself through another group" in exe.plan.describe()
    _assert_unfused_bits(exe, text, 4)


def test_a_sum_whose_like_is_computed_for_it_alone_stays_apart():
    text = ("input t0 : Float32 [16, 4096]\ninput t5 : Float32 [4096]\nt2 = Mul(t0, t0)\nt3 = Add(t2, t0)\n"
            "t6 = Neg(t5)\nt7 = ReduceSumTo(t3, t6)\noutput t7\n")
    exe = gradir.compile(text)
    assert [s.op.op_name for s in exe.plan.steps] == ["FusedElementwise", "Neg", "ReduceSumTo"]
    _assert_unfused_bits(exe, text, 5)
