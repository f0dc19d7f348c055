"""Data-parallel sharding (gradir.distributed, docs/distributed.md): the placement rules of every op family
and their refusals (located errors), the shard graph (derive first, then shard), and runs whose bits
depend only on K: inline, on a Dask LocalCluster of 1, 2 and 4 processes, with shard tasks delayed at
random, with a worker killed mid-run, and from one .npz per shard."""

from __future__ import annotations

import os
import re
import signal
import threading
import time

import numpy as np
import pytest

import gradir
from gradir.backends.cpu.kernels import KERNELS
from gradir import ShardError
from gradir.cli.main import main
from gradir.cli.run import complete_inputs
from gradir.distributed.run import open_scheduler, tree_sum

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def sample(name: str) -> str:
    return os.path.join(ROOT, "samples", name)


def placements(text: str, batch: dict) -> dict[str, str]:
    s = gradir.shard(gradir.parse(text), batch)
    return {v: str(p) for v, p in s.placements.items()}


def refusal(text: str, batch: dict) -> ShardError:
    with pytest.raises(ShardError) as e:
        gradir.shard(gradir.parse(text, "g.gir"), batch)
    return e.value


# -- placement rules ---------------------------------------------------------------------------------
def test_element_wise_ops_keep_the_split_and_broadcast_a_replicated_bias():
    p = placements("input t0 : Float32 [8, 4]\ninput t1 : Float32 [4]\ninput t2 : Float32 [1, 4]\n"
                   "t3 = Add(t0, t1)\nt4 = Mul(t3, t2)\nt5 = Tanh(t4)\nt6 = Sum(t5, t3)\noutput t6\n", {"t0": 0})
    assert p == {"t0": "split(0)", "t1": "replicated", "t2": "replicated", "t3": "split(0)", "t4": "split(0)",
                 "t5": "split(0)", "t6": "split(0)"}


def test_a_replicated_operand_that_spans_the_batch_axis_refuses():
    e = refusal("input t0 : Float32 [8, 4]\ninput t1 : Float32 [8, 4]\nt2 = Add(t0, t1)\noutput t2\n", {"t0": 0})
    assert e.diagnostics[0].span.line == 3 and "cannot shard Add" in str(e) and "t1 is replicated" in str(e)
    assert str(e).startswith("g.gir:3:")


def test_matmul_rows_stay_split_and_contracting_the_batch_makes_a_partial_sum():
    p = placements("input t0 : Float32 [8, 4]\ninput t1 : Float32 [4, 3]\ninput t2 : Float32 [8, 3]\n"
                   "t3 = MatMul(t0, t1)\nt4 = Transpose(t0)\nt5 = MatMul(t4, t2)\n"
                   "output t3, t5\n", {"t0": 0, "t2": 0})
    assert (p["t3"], p["t4"], p["t5"]) == ("split(0)", "split(1)", "partial")
    e = refusal("input t0 : Float32 [8, 4]\ninput t1 : Float32 [4, 3]\nt2 = MatMul(t0, t1)\noutput t2\n", {"t0": 1})
    assert "MatMul contracts over the split axis of t0" in str(e)


def test_linear_ops_of_partial_sums_stay_partial():
    p = placements("input t0 : Float32 [8, 4]\ninput t1 : Float32 [4]\n"
                   "t2 = ReduceSum(t0, axes=[0])\nt3 = ReduceSum(t0, axes=[0])\nt4 = Add(t2, t3)\n"
                   "t5 = Scale(t4, factor=0.5)\nt6 = Mul(t5, t1)\nt7 = Unsqueeze(t6, axes=[0])\n"
                   "t8 = Transpose(t7)\nt9 = Reshape(t8, shape=[4])\nt10 = Neg(t9)\nt11 = Sum(t10, t10)\n"
                   "output t11\n", {"t0": 0})
    assert all(p[f"t{k}"] == "partial" for k in range(2, 12))


@pytest.mark.parametrize("body, op, why", [
    ("t2 = ReduceSum(t0, axes=[0])\nt3 = Relu(t2)\noutput t3", "Relu", "not linear in it"),
    ("t2 = ReduceSum(t0, axes=[0])\nt3 = Add(t2, t1)\noutput t3", "Add", "counting it once per shard"),
    ("t2 = ReduceSum(t0, axes=[0])\nt3 = Mul(t2, t2)\noutput t3", "Mul", "not in both together"),
    ("t2 = ReduceSum(t0, axes=[0])\nt3 = Exp(t2)\noutput t3", "Exp", "not linear in it"),
    ("t2 = ReduceSum(t0, axes=[0])\nt3 = Softmax(t2)\noutput t3", "Softmax", "not linear in it"),
])
def test_a_non_linear_op_fed_a_partial_sum_refuses(body, op, why):
    e = refusal(f"input t0 : Float32 [8, 4]\ninput t1 : Float32 [4]\n{body}\n", {"t0": 0})
    d = e.diagnostics[0]
    assert d.span is not None and d.span.line == 4 and f"cannot shard {op}" in d.message and why in d.message


def test_softmax_over_the_batch_axis_refuses_and_over_another_keeps_the_split():
    e = refusal("input t0 : Float32 [8, 4]\nt1 = Softmax(t0, axis=0)\noutput t1\n", {"t0": 0})
    assert e.diagnostics[0].span.line == 2 and "Softmax normalizes over axis 0" in str(e)
    assert "^" in str(e)  # the source line is shown under the message
    p = placements("input t0 : Float32 [8, 4]\ninput t1 : Float32 [8, 4]\nt2 = LogSoftmax(t0)\n"
                   "t3 = LogSoftmaxGrad_13(t1, t2)\noutput t3\n", {"t0": 0, "t1": 0})
    assert p["t3"] == "split(0)"
    # the pre-13 gradients flatten every axis from `axis` on
    e = refusal("input t0 : Float32 [2, 8, 4]\ninput t1 : Float32 [2, 8, 4]\nt2 = SoftmaxGrad(t0, t1, axis=1)\n"
                "output t2\n", {"t0": 2, "t1": 2})
    assert "axes 1..2 (flattened)" in str(e)
    assert placements("input t0 : Float32 [2, 8, 4]\ninput t1 : Float32 [2, 8, 4]\nt2 = SoftmaxGrad(t0, t1, axis=1)\n"
                      "output t2\n", {"t0": 0, "t1": 0})["t2"] == "split(0)"


def test_reshape_renumbers_the_split_axis_or_refuses_to_mix_it():
    text = "input t0 : Float32 [3, 8, 4]\nt1 = Reshape(t0, shape=[3, 8, 2, 2])\nt2 = Reshape(t1, shape=[24, 4])\noutput t2\n"
    p = placements("input t0 : Float32 [3, 8, 4]\nt1 = Reshape(t0, shape=[1, 3, 8, 4])\noutput t1\n", {"t0": 1})
    assert p["t1"] == "split(2)"
    e = refusal(text, {"t0": 1})
    d = e.diagnostics[0]
    assert d.span.line == 3 and "cannot shard Reshape" in d.message and "mixes the split axis 1" in d.message
    s = gradir.shard(gradir.parse("input t0 : Float32 [3, 8, 4]\nt1 = Reshape(t0, shape=[3, 8, 2, 2])\n"
                                  "output t1\n"), {"t0": 1})
    assert "Reshape(t0, shape=[3, -1, 2, 2])" in s.text


def test_reduce_over_other_axes_renumbers_and_a_mean_over_the_batch_uses_the_global_count():
    p = placements("input t0 : Float32 [3, 8, 4]\nt1 = ReduceSum(t0, axes=[0])\nt2 = ReduceMean(t0, axes=[0], "
                   "keepdims=true)\noutput t1, t2\n", {"t0": 1})
    assert (p["t1"], p["t2"]) == ("split(0)", "split(1)")
    s = gradir.shard(gradir.parse("input t0 : Float64 [8, 4]\nt1 = ReduceMean(t0, axes=[0])\noutput t1\n"),
                     {"t0": 0})
    assert s.placements["t1"].is_partial
    assert "ReduceSum(t0, axes=[0])" in s.text and "Scale(t2, factor=0.125)" in s.text
    x = np.random.default_rng(0).standard_normal((8, 4))
    for k in (1, 2, 3, 8):
        np.testing.assert_allclose(s.run({"t0": x}, shards=k)["t1"], x.mean(axis=0), rtol=1e-12, atol=1e-15)


def test_lstm_ops_split_the_batch_and_sum_the_weight_gradients():
    s = gradir.shard(gradir.load(sample("lstm_seq_forward.grad.gir")), {"t0": 1, "t4": 1, "t5": 1, "cotangent(t13)": 2})
    op = next(o for o in s.graph.ops if o.op_name == "LSTMGrad")
    assert [str(s.placements[r]) for r in op.results] == ["split(1)", "partial", "partial", "partial", "split(1)",
                                                          "split(1)", "partial"]
    op = next(o for o in s.graph.ops if o.op_name == "LSTMTraining")
    assert [str(s.placements[r]) for r in op.results] == ["split(2)", "split(1)", "split(1)", "split(2)", "split(2)"]
    with pytest.raises(ShardError, match="LSTMTraining can only be split along the batch"):
        gradir.shard(gradir.load(sample("lstm_seq_forward.grad.gir")), {"t0": 0})
    with pytest.raises(ShardError, match="t4 .H0. is replicated but holds the batch"):
        gradir.shard(gradir.load(sample("lstm_seq_forward.grad.gir")), {"t0": 1, "cotangent(t13)": 2})
    s = gradir.shard(gradir.load(sample("lstm_cell_unrolled_forward.grad.gir")),
                     {k: 0 for k in ("t0", "t1", "t2", "t3", "t11", "t12")})
    grads = [o for o in s.graph.ops if o.op_name == "GradLSTMCellInput"]
    assert [str(s.placements[o.results[0]]) for o in grads[:6]] == ["split(0)"] * 3 + ["partial"] * 3


def test_the_fused_cell_gradient_unsqueeze_and_broadcast_to():
    p = placements("input t0 : Float32 [4, 8]\ninput t1 : Float32 [4, 16]\ninput t2 : Float32 [4, 16]\n"
                   "input t3 : Float32 [64, 8]\ninput t4 : Float32 [64, 16]\ninput t5 : Float32 [64]\n"
                   "input t6 : Float32 [4, 16]\n"
                   "t7, t8 = GradLSTMCellInputFused(t6, _, t0, t1, t2, t3, t4, t5, input_indices=[3, 0], hidden_size=16)\n"
                   "t9 = Unsqueeze(t8, axes=[0])\nt10 = ReduceSum(t0, axes=[1], keepdims=true)\nt11 = BroadcastTo(t10, t0)\n"
                   "output t7, t9, t11\n", {k: 0 for k in ("t0", "t1", "t2", "t6")})
    assert (p["t7"], p["t8"], p["t9"], p["t10"], p["t11"]) == ("partial", "split(0)", "split(1)", "split(0)", "split(0)")
    e = refusal("input t0 : Float32 [8, 4]\ninput t1 : Float32 [4]\nt2 = BroadcastTo(t1, t0)\nt3 = ReduceSum(t0, "
                "axes=[0])\nt4 = BroadcastTo(t3, t0)\noutput t2, t4\n", {"t0": 0})
    assert e.diagnostics[0].span.line == 5 and "is a partial sum but Like (t0) is split(0)" in str(e)


def test_fused_matmul_reads_its_operands_as_laid_out():
    s = gradir.shard("input t0 : Float32 [8, 4]\ninput t1 : Float32 [8, 3]\ninput t2 : Float32 [3, 5]\n"
                     "t3 = FusedMatMul(t0, t1, transA=1)\nt4 = FusedMatMul(t1, t2, alpha=2.0)\n"
                     "t5 = FusedMatMul(t2, t1, transA=1, transB=1)\noutput t3, t4, t5\n", {"t0": 0, "t1": 0})
    assert [str(s.placements[v]) for v in ("t3", "t4", "t5")] == ["partial", "split(0)", "split(1)"]
    rng = np.random.default_rng(0)
    x = {k: rng.standard_normal(t.type.shape).astype(np.float32) for k, t in zip(("t0", "t1", "t2"), s.graph.inputs)}
    check_against_unsharded(s, x, s.run(x, shards=3), 1e-5)


def test_cross_entropy_splits_the_targets_sums_a_sum_and_refuses_a_mean():
    text = 'input t0 : Float32 [8, 5]\ninput t1 : Int64 [8]\nt2, t3 = SoftmaxCrossEntropyLoss(t0, t1, reduction="sum")\noutput t2\n'
    g = gradir.grad(gradir.parse(text), wrt=["t0"])
    s = gradir.shard(g, {"t0": 0, "t1": 0})
    assert [str(s.placements[v]) for v in ("t2", "t3", "t5")] == ["partial", "split(0)", "split(0)"]
    inputs, _ = complete_inputs(g, {}, 0)
    check_against_unsharded(s, inputs, s.run(inputs, shards=3), 1e-5)
    with pytest.raises(ShardError, match='reduction="mean" divides by the summed weights'):
        gradir.shard(gradir.grad(gradir.parse(text.replace("sum", "mean")), wrt=["t0"]), {"t0": 0, "t1": 0})
    with pytest.raises(ShardError, match="normalizes over the class axis 1"):
        gradir.shard(gradir.parse(text), {"t0": 1})
    with pytest.raises(ShardError, match="must be split along the same targets"):
        gradir.shard(gradir.parse(text), {"t0": 0})


def test_cross_entropy_grad_with_only_dy_split_refuses():
    """Only the gradient's dY split (the scores and labels replicated): the rule computed the scores'
    axis from the labels' (None + 1), a TypeError and exit 3."""
    text = ('input t0 : Float32 [8, 5]\ninput t1 : Int64 [8]\n'
            't2, t3 = SoftmaxCrossEntropyLoss(t0, t1, reduction="none")\noutput t2\n')
    g = gradir.grad(gradir.parse(text, "ce.gir"), wrt=["t0"])
    dy = g.inputs[-1].name
    with pytest.raises(ShardError, match=f"dY \\({dy}\\) is split\\(0\\), but the scores .* are replicated"):
        gradir.shard(g, {dy: 0})
    g = gradir.parse('input t0 : Float32 [8, 5]\ninput t1 : Int64 [8]\ninput t2 : Float32 [5]\n'
                     't3, t4 = SoftmaxCrossEntropyLoss(t0, t1, t2, reduction="sum")\noutput t3\n', "ce.gir")
    with pytest.raises(ShardError, match=r"ce.gir:4:.*the class weights \(t2\) must be replicated"):
        gradir.shard(g, {"t2": 0})


@pytest.mark.parametrize("text, why", [
    ("input t0 : Float32 [1]\ninput t1 : Float32 [1]\nt2 = SigmoidGrad(t0, t1)\noutput t2\n",
     "t1 is replicated but t0 is split along axis 0, and SigmoidGrad takes operands of one shape"),
    ("input t0 : Float32 [1, 4]\ninput t1 : Float32 [1, 4]\nt2 = Sum(t0, t1)\noutput t2\n",
     "Sum takes operands of one shape"),
    ("input t0 : Float32 [1, 1]\ninput t1 : Float32 [1, 1]\ninput t2 : Float32 [1, 1]\ninput t3 : Float32 [4, 1]\n"
     "input t4 : Float32 [4]\nt5 = GradLSTMCellInputFused(t0, _, t0, t1, t2, t3, t3, t4, input_indices=[0], "
     "hidden_size=1)\noutput t5\n", "t1 (H) is replicated but holds the batch along axis 0"),
])
def test_a_replicated_operand_of_size_1_along_the_split_axis_of_an_op_that_does_not_broadcast_refuses(text, why):
    """Found by tests/test_fuzz_shard.py: ops whose operands have one shape (no broadcasting) let a
    replicated operand of size 1 along the split axis through, and the shard graph did not check
    ("internal error: t2 is split(0) but its shard type is Float32 [1]")."""
    e = refusal(text, {"t0": 0})
    assert why in str(e) and "internal error" not in str(e)


def _op_instances(name: str, count: int) -> list:
    """``count`` valid graphs of one ``name`` op over fresh inputs (``strategies.OP_EXAMPLES``, drawn
    derandomized: the same instances every run)."""
    import strategies
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
    cls = gradir.OPS[name]
    out = []

    @settings(max_examples=count, derandomize=True, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(st.data())
    def draw(data):
        types, attrs = strategies.OP_EXAMPLES[name](data.draw)
        inputs = [gradir.GraphInput(f"t{k}", t) for k, t in enumerate(types) if t is not None]
        operands = [None if t is None else f"t{k}" for k, t in enumerate(types)]
        n = cls.num_results(cls(["t99"], operands, attrs).resolved_attrs())
        op = cls([f"t{100 + j}" for j in range(n)], operands, attrs)
        out.append(gradir.Graph(inputs, [op], list(op.results)).validate())

    draw()
    return out


def _placement_combinations(types: list, limit: int = 3000):
    """Every combination of placements of the operands (replicated, partial, split along each axis;
    ``None`` for an omitted one) with at least one not replicated; a fixed sample of ``limit`` of
    them when there are more (the LSTM ops' thirteen operands)."""
    import itertools
    import random
    from gradir.distributed import PARTIAL, REPLICATED, split
    opts = [[None] if t is None else [REPLICATED, PARTIAL] + [split(a) for a in range(t.rank)] for t in types]
    if np.prod([len(o) for o in opts], dtype=float) <= limit:
        combos = itertools.product(*opts)
    else:
        rng = random.Random(0)
        combos = (tuple(rng.choice(o) for o in opts) for _ in range(limit))
    for ps in combos:
        if not all(p is None or p.is_replicated for p in ps):
            yield ps


SHARDED_OPS = sorted(n for n, c in gradir.OPS.items() if c.OPERANDS)


@pytest.mark.parametrize("name", SHARDED_OPS)
def test_every_rule_returns_placements_or_refuses_for_every_combination_of_placements(name):
    """A rule, given any placements of its operands, returns one placement per result (a split one
    within the result's rank) or refuses (``Refusal``, a located ``ShardError``): never another
    exception (an exit 3 on the command line)."""
    from gradir.errors import Refusal
    from gradir.distributed.placement import Placement, RuleContext
    from gradir.distributed.rules import RULES, placement_rule
    rule = RULES[placement_rule(gradir.OPS[name])]
    tried = 0
    for g in _op_instances(name, 12):
        op = g.ops[0]
        types = [g.types[v] if v is not None else None for v in op.operands]
        result_types = [g.types[r] for r in op.results]
        for ps in _placement_combinations(types):
            tried += 1
            try:
                out = rule(RuleContext(op, ps, types, result_types))
            except Refusal:
                continue
            except Exception as e:  # pragma: no cover - the failure to report
                pytest.fail(f"{name} rule on {[str(p) for p in ps]} ({[str(t) for t in types]}, {op.attrs}): "
                            f"{type(e).__name__}: {e}")
            assert len(out) == len(op.results) and all(isinstance(p, Placement) for p in out), (ps, out)
            for p, t in zip(out, result_types):
                assert not p.is_split or 0 <= p.axis < t.rank, (name, [str(q) for q in ps], str(p), str(t))
    assert tried > 0


# -- placements derived from traits, and checked by running them (tests/shardcheck.py) -----------------
def test_element_wise_ops_and_reductions_do_not_name_the_rule_their_traits_imply():
    """``SHARDING`` is an override: an op whose traits say how it is placed does not restate it."""
    from gradir.distributed.rules import derived_placement_rule, placement_rule
    for name, cls in gradir.OPS.items():
        derived = derived_placement_rule(cls)
        assert cls.SHARDING is None or cls.SHARDING != derived, f"{name} restates SHARDING = {derived!r}"
        assert placement_rule(cls) == (cls.SHARDING or derived)
    assert derived_placement_rule(gradir.OPS["Relu"]) == "elementwise"
    assert derived_placement_rule(gradir.OPS["ReduceMean"]) == "reduce"
    assert derived_placement_rule(gradir.OPS["ReduceSumTo"]) is None  # a reduction, but not over `axes`
    assert derived_placement_rule(gradir.OPS["Constant"]) == "constant"


def test_an_op_that_only_moves_elements_passes_a_partial_sum_through(monkeypatch):
    """SHAPE_ONLY is read by the placement rules: moving elements is linear, LINEAR_IN or not."""
    text = ("input t0 : Float32 [8, 4]\ninput t1 : Float32 [8, 3]\nt2 = Transpose(t0)\nt3 = MatMul(t2, t1)\n"
            "t4 = Transpose(t3)\noutput t4\n")
    monkeypatch.setattr(gradir.OPS["Transpose"], "LINEAR_IN", ())
    assert placements(text, {"t0": 0, "t1": 0})["t4"] == "partial"
    monkeypatch.setattr(gradir.OPS["Transpose"], "SHAPE_ONLY", False)
    assert "Transpose is not linear in it" in str(refusal(text, {"t0": 0, "t1": 0}))


@pytest.fixture
def scratch_ops():
    """Op classes a test defines are unregistered after it."""
    before = set(gradir.OPS)
    yield
    for name in set(gradir.OPS) - before:
        del gradir.OPS[name]


def test_an_op_with_no_derivable_placement_and_no_sharding_is_a_located_error_naming_it(scratch_ops):
    from gradir.ir.op import InferContext, Op, Operand

    class RowNormOp(Op):
        """Each row divided by its norm (a user op: neither element-wise nor a reduction)."""
        OPERANDS = (Operand("X"),)

        def infer(self, ctx: InferContext):
            return [ctx.type(0)]

    e = refusal("input t0 : Float32 [8, 4]\nt1 = RowNorm(t0)\noutput t1\n", {"t0": 0})
    assert str(e).startswith("g.gir:2:6: error: cannot shard RowNorm (t1 = RowNorm(...); operands: t0 split(0)): "
                             "RowNorm has no sharding rule: it is neither element-wise (ELEMENTWISE) nor a reduction "
                             "over `axes` (REDUCTION), and names no rule (SHARDING, one of ")
    RowNormOp.SHARDING = "rows"
    e = refusal("input t0 : Float32 [8, 4]\nt1 = RowNorm(t0)\noutput t1\n", {"t0": 0})
    assert "RowNorm names the sharding rule 'rows' (SHARDING), which does not exist" in str(e)
    p = placements("input t0 : Float32 [8, 4]\ninput t1 : Float32 [8, 4]\nt2 = RowNorm(t0)\nt3 = Relu(t1)\n"
                   "output t2, t3\n", {"t1": 0})
    assert p["t2"] == "replicated"  # nothing split reaches it: no rule needed


def _example_arrays(name: str, count: int = 2) -> list[tuple[list, dict]]:
    """``count`` examples of op ``name`` (``_op_instances``) as operand arrays (float64; valid labels,
    lengths and weights, as ``gradir run`` draws them) and attributes."""
    out = []
    for k, g in enumerate(_op_instances(name, count)):
        op = g.ops[0]
        values, _ = complete_inputs(g, {}, k)
        arrays = [None if v is None else values[v].astype(np.float64) if values[v].dtype.kind == "f" else values[v]
                  for v in op.operands]
        out.append((arrays, dict(op.attrs)))
    return out


@pytest.mark.parametrize("name", SHARDED_OPS)
def test_every_ops_placements_give_the_unsharded_numbers(name):
    """For each split of its operands (and partial sums fed to it) its rule accepts, the op run in 1, 2 and 4
    shards gives the unsharded result (split results concatenated, partial sums added): a wrong rule fails
    here, naming the op."""
    from shardcheck import check_placement
    compared = sum(check_placement(gradir.OPS[name], arrays, attrs, limit=4) for arrays, attrs in _example_arrays(name, 4))
    assert compared > 0, f"no example of {name} could be split: the check checked nothing"


def test_a_weight_gradient_placed_split_instead_of_summed_is_caught(monkeypatch):
    """MatMul's rule broken to split what contracting over the batch makes a partial sum (every weight
    gradient, X^T @ dY): the check fails, naming the op and the split."""
    from shardcheck import check_placement
    from gradir.distributed import rules
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal((3, 4)), rng.standard_normal((4, 5))]  # (X^T, dY) with the batch of 4
    assert check_placement(gradir.OPS["MatMul"], arrays, {}) > 0
    matmul = rules.RULES["matmul"]
    monkeypatch.setitem(rules.RULES, "matmul",
                        lambda ctx: [gradir.distributed.split(0) if p.is_partial else p for p in matmul(ctx)])
    with pytest.raises(AssertionError, match=r"MatMul with A split\(1\), B split\(0\)"):
        check_placement(gradir.OPS["MatMul"], arrays, {})


@pytest.mark.parametrize("wrong", ["softmax split along its axis", "mean summed without 1/n", "exp claimed linear"])
def test_a_rule_whose_types_hold_but_numbers_do_not_is_caught_numerically(monkeypatch, wrong):
    """Wrong placements the shard graph's types cannot see: a Softmax kept split along the axis it normalizes
    over, a ReduceMean over the split axis summed as is (without AVERAGES, no 1/n rewrite), an Exp said to be
    linear (LINEAR_IN) passing a partial sum through."""
    from shardcheck import check_placement
    from gradir.distributed import rules
    rng = np.random.default_rng(1)
    if wrong.startswith("softmax"):
        cls, attrs = gradir.OPS["Softmax"], {"axis": 0}
        monkeypatch.setitem(rules.RULES, "axis", rules.RULES["elementwise"])
    elif wrong.startswith("mean"):
        cls, attrs = gradir.OPS["ReduceMean"], {"axes": [0]}
        monkeypatch.setattr(cls, "AVERAGES", False)
    else:
        cls, attrs = gradir.OPS["Exp"], {}
        assert check_placement(cls, [rng.standard_normal((4, 3))], attrs) > 0
        monkeypatch.setattr(cls, "LINEAR_IN", (0,))
    how = "partial" if wrong.startswith("exp") else "split\\(0\\)"
    with pytest.raises(AssertionError, match=f"{cls.op_name} with X {how} in 2 shards: result t200 "
                                             ".* differs from the unsharded run"):
        check_placement(cls, [rng.standard_normal((4, 3))], attrs)


def test_bad_batch_arguments_are_errors_that_say_what_the_inputs_are():
    g = gradir.load(sample("mlp_forward.grad.gir"))
    with pytest.raises(ShardError, match=r"'x' is not an input of the graph \(its inputs are t0, t1"):
        gradir.shard(g, {"x": 0})
    with pytest.raises(ShardError, match="axis 2 of input t0 is out of range"):
        gradir.shard(g, {"t0": 2})
    with pytest.raises(ShardError, match="different sizes"):
        gradir.shard(g, {"t0": 0, "t1": 0})
    with pytest.raises(ShardError, match="^[^\n]*error: batch: 'x' is not an input"):  # named as the caller gave it
        gradir.shard(g, {"x": 0})
    with pytest.raises(ShardError, match="error: --shard: 'x' is not an input"):
        gradir.shard(g, {"x": 0}, option="--shard")


# -- running: inline ---------------------------------------------------------------------------------
def mlp_grad(dtype: str, batch: int = 12) -> gradir.Graph:
    text = (f"graph mlp\ninput t0 \"x\" : {dtype} [{batch}, 16]\ninput t1 : {dtype} [16, 32]\ninput t2 : {dtype} [32]\n"
            f"input t3 : {dtype} [32, 10]\nt4 = MatMul(t0, t1)\nt5 = Add(t4, t2)\nt6 = Tanh(t5)\n"
            f"t7 = MatMul(t6, t3)\nt8 = LogSoftmax(t7)\nt9 = ReduceMean(t8)\noutput t9\n")
    return gradir.grad(gradir.parse(text))


# Ops whose kernels pick their arithmetic by the matrix sizes: BLAS (OpenBLAS's Haswell sgemm gives
# a row other bits in a product of 6 rows than in one of 12, at nearly every shape measured on Zen 3)
# and the LSTM kernels (products inside, and a choice between compiled loops and BLAS by the batch).  A split output
# computed through one of them is within rounding of the unsharded run, not bit-identical
# (docs/distributed.md, "The bits promise").
SIZE_DEPENDENT = {cls.op_name for cls in KERNELS if KERNELS[cls].blas}  # the kernels with products inside
assert {"MatMul", "FusedMatMul", "LSTMTraining", "LSTMGrad"} <= SIZE_DEPENDENT


def through_a_product(graph: gradir.Graph, name: str) -> bool:
    """Whether value ``name`` of ``graph`` depends on the result of a size-dependent kernel."""
    producer = {r: op for op in graph.ops for r in op.results}
    seen, todo = set(), [name]
    while todo:
        v = todo.pop()
        op = producer.get(v)
        if v in seen or op is None:
            continue
        seen.add(v)
        if op.op_name in SIZE_DEPENDENT:
            return True
        todo.extend(o for o in op.operands if o)
    return False


def check_against_unsharded(sharded, inputs, out, rtol, split_rtol=None):
    """Partial sums within ``rtol`` (relative to the largest element); split and replicated outputs
    bit-identical, except those computed through a size-dependent kernel (``through_a_product``):
    within ``split_rtol`` (default: 2e-6 in Float32, 1e-14 in Float64) of the unsharded run."""
    ref = gradir.compile(sharded.graph).run(inputs)
    for name, key in zip(sharded.graph.outputs, sharded.output_keys):
        p = sharded.placements[name]
        assert out[key].dtype == ref[key].dtype and out[key].shape == ref[key].shape, key
        err = np.abs(out[key] - ref[key]).max() / max(np.abs(ref[key]).max(), np.finfo(ref[key].dtype).tiny)
        if p.is_partial:
            assert err <= rtol, (key, err)
        elif through_a_product(sharded.graph, name):
            tol = split_rtol if split_rtol is not None else (2e-6 if out[key].dtype == np.float32 else 1e-14)
            assert err <= tol, (key, err)
        else:
            assert np.array_equal(out[key], ref[key]), (key, err)
    return ref


@pytest.mark.parametrize("dtype, rtol", [("Float32", 1e-5), ("Float64", 1e-12)])
def test_split_outputs_are_within_rounding_and_partial_sums_within_tolerance(dtype, rtol):
    g = mlp_grad(dtype)
    s = gradir.shard(g, {"x": 0})
    assert str(s.placements[g.outputs[0]]) == "split(0)" and all(s.placements[o].is_partial for o in g.outputs[1:])
    assert through_a_product(g, g.outputs[0])
    inputs, _ = complete_inputs(g, {}, 3)
    for k in (1, 2, 3, 5, 6, 12):  # 12: rows of one (BLAS's matrix-vector product)
        check_against_unsharded(s, inputs, s.run(inputs, shards=k), rtol)
    with pytest.raises(gradir.InputError, match="fewer than the 13 shards"):
        s.run(inputs, shards=13)


@pytest.mark.parametrize("dtype", ["Float32", "Float64"])
def test_split_outputs_without_a_product_are_the_unsharded_bits(dtype):
    """Element-wise ops, softmaxes and reductions over other axes give a row the same bits whatever
    the rows beside it: their split outputs are the unsharded bits for every shard count."""
    text = (f"input t0 \"x\" : {dtype} [12, 40]\ninput t1 : {dtype} [40]\ninput t2 : {dtype} [12, 40]\n"
            "t3 = Add(t0, t1)\nt4 = Tanh(t3)\nt5 = Softmax(t4, axis=1)\nt6 = SoftmaxGrad_13(t2, t5, axis=1)\n"
            "t7 = Gelu(t6)\nt8 = ReduceSum(t7, axes=[1], keepdims=true)\nt9 = Mul(t7, t8)\nt10 = ReduceSum(t9, axes=[0])\n"
            "output t9, t10, t5\n")
    g = gradir.parse(text)
    s = gradir.shard(g, {"x": 0, "t2": 0})
    assert [str(s.placements[o]) for o in g.outputs] == ["split(0)", "partial", "split(0)"]
    assert not any(through_a_product(g, o) for o in g.outputs)
    inputs, _ = complete_inputs(g, {}, 5)
    for k in (1, 2, 3, 4, 5, 6, 12):
        check_against_unsharded(s, inputs, s.run(inputs, shards=k), 1e-5 if dtype == "Float32" else 1e-12)


@pytest.mark.parametrize("name, batch", [
    ("mlp_forward.grad.gir", {"t0": 0, "cotangent(t10)": 0}),
    ("lstm_seq_forward.grad.gir", {"t0": 1, "t4": 1, "t5": 1, "cotangent(t13)": 2}),
    ("lstm_cell_unrolled_forward.grad.gir", {k: 0 for k in ("t0", "t1", "t2", "t3", "t11", "t12")}),
])
def test_derived_samples_sharded_along_the_batch(name, batch):
    s = gradir.shard(sample(name), batch)
    inputs, _ = complete_inputs(s.graph, {}, 0)
    check_against_unsharded(s, inputs, s.run(inputs, shards=2), 1e-5)


def test_lstm_bptt_sharded_2_4_8_ways_is_within_rounding_of_the_unsharded_run():
    """The sample's dX, dH0 and dC0 are split along the batch; the LSTM kernels choose their products
    by the batch, so they are within rounding of the unsharded run (seen at 3e-7 on Zen 3)."""
    g = gradir.load(sample("lstm_bptt.gir"))
    s = gradir.shard(g, {"t0": 1, "t4": 1, "t5": 1, "t6": 2})
    assert [str(s.placements[o]) for o in ("t12", "t16", "t17")] == ["split(1)"] * 3
    inputs, _ = complete_inputs(g, {}, 0)
    for k in (2, 4, 8):
        check_against_unsharded(s, inputs, s.run(inputs, shards=k), 1e-5)


def test_mlp_forward_derived_by_grad_then_sharded():
    g = gradir.grad(gradir.load(sample("mlp_forward.gir")))
    s = gradir.shard(g, {"t0": 0, "cotangent(t10)": 0})
    inputs, _ = complete_inputs(g, {}, 1)
    check_against_unsharded(s, inputs, s.run(inputs, shards=4), 1e-5)


def test_a_graph_whose_batch_is_already_unknown():
    s = gradir.shard("input t0 : Float32 [?, 4]\nt1 = Tanh(t0)\nt2 = Reshape(t1, shape=[-1, 2, 2])\n"
                     "t3 = ReduceSum(t2, axes=[0])\nt4 = ReduceMean(t0, axes=[1])\noutput t2, t3, t4\n", {"t0": 0})
    x = np.random.default_rng(0).standard_normal((10, 4)).astype(np.float32)
    check_against_unsharded(s, {"t0": x}, s.run({"t0": x}, shards=3), 1e-5)
    with pytest.raises(ShardError, match="needs the global count of the reduced elements"):
        gradir.shard("input t0 : Float32 [?, 4]\nt1 = ReduceMean(t0)\noutput t1\n", {"t0": 0})


def test_bad_inputs_are_located_in_the_users_file():
    s = gradir.shard(sample("mlp_forward.grad.gir"), {"t0": 0, "t11": 0})
    inputs, _ = complete_inputs(s.graph, {}, 0)
    with pytest.raises(gradir.InputError) as e:
        s.run(dict(inputs, t0=inputs["t0"][:5]), shards=2)
    assert str(e.value).startswith(sample("mlp_forward.grad.gir") + ":5:7: error: input t0: expected Float32 [8, 16]")
    with pytest.raises(gradir.InputError, match=r"mlp_forward.grad.gir:6:7: error: missing input t1"):
        s.run({k: v for k, v in inputs.items() if k != "t1"}, shards=2)


def test_a_progress_line_per_finished_shard(capsys):
    s = gradir.shard(sample("mlp_forward.grad.gir"), {"t0": 0, "cotangent(t10)": 0})
    inputs, _ = complete_inputs(s.graph, {}, 0)
    s.run(inputs, shards=3, progress=True)
    err = capsys.readouterr().err
    assert [f"{k}/3 shards done" in err for k in (1, 2, 3)] == [True] * 3 and err.endswith("\n")


def test_buffers_of_earlier_runs_are_reused_once_nobody_holds_them():
    s = gradir.shard(sample("mlp_forward.grad.gir"), {"t0": 0, "cotangent(t10)": 0})
    a, _ = complete_inputs(s.graph, {}, 0)
    b, _ = complete_inputs(s.graph, {}, 1)
    held = s.run(a, shards=2)
    kept = {k: v.copy() for k, v in held.items()}
    out_b = s.run(b, shards=2)
    assert same_bits(held, kept) and not same_bits(held, out_b)  # what the caller holds never changes
    pointers = {v.__array_interface__["data"][0] for v in held.values()}
    del held
    again = s.run(b, shards=2)
    assert same_bits(again, out_b)
    assert {v.__array_interface__["data"][0] for v in again.values()} & pointers  # dropped: reused


def test_partial_sums_are_added_in_a_fixed_pairwise_tree():
    parts = [np.float32(x) for x in (1e8, 1.0, -1e8, 1.0, 0.5)]
    assert tree_sum(parts) == ((parts[0] + parts[1]) + (parts[2] + parts[3])) + parts[4]
    from gradir.backends.cpu.buffers import BufferPool
    pool, rng = BufferPool(), np.random.default_rng(0)
    arrays = [rng.standard_normal((3, 5)).astype(np.float32) * 10.0 ** k for k in range(5)]
    buf = np.empty((3, 5), np.float32)
    pool.give(buf)
    total = tree_sum(arrays, pool)
    assert np.array_equal(total, ((arrays[0] + arrays[1]) + (arrays[2] + arrays[3])) + arrays[4])
    assert pool.take(np.dtype(np.float32), (3, 5)) is None  # the pool's buffer took one of the sums


# -- running: Dask -----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def client():
    """One LocalCluster for the module: 2 worker processes, 1 thread each."""
    with open_scheduler("local:2") as c:
        yield c


@pytest.fixture(scope="module")
def lstm():
    s = gradir.shard(sample("lstm_seq_forward.grad.gir"), {"t0": 1, "t4": 1, "t5": 1, "cotangent(t13)": 2})
    inputs, _ = complete_inputs(s.graph, {}, 5)
    return s, inputs, s.run(inputs, shards=4, client="inline")


def same_bits(a: dict, b: dict) -> bool:
    return list(a) == list(b) and all(a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k]) for k in a)


def test_dask_gives_the_inline_bits_also_when_results_arrive_out_of_order(client, lstm):
    s, inputs, ref = lstm
    assert same_bits(s.run(inputs, shards=4, client=client), ref)
    orders = set()
    for _ in range(3):
        assert same_bits(s.run(inputs, shards=4, client=client, jitter=0.3), ref)
        orders.add(tuple(r.index for r in s.last_results))  # by shard index, whatever the arrival
    assert orders == {(0, 1, 2, 3)}
    assert not same_bits(s.run(inputs, shards=3, client="inline"), ref)  # K matters (partial sums)
    address = client.scheduler.address  # a scheduler address, as --scheduler tcp://host:8786 gives it
    assert address.startswith("tcp://") and same_bits(s.run(inputs, shards=4, client=address), ref)


def test_local_1_and_local_4_give_the_same_bits(lstm):
    s, inputs, ref = lstm
    for spec in ("local:1", "local:4"):
        assert same_bits(s.run(inputs, shards=4, client=spec), ref), spec


def test_one_npz_per_shard_each_task_loads_its_own(client, lstm, tmp_path):
    s, inputs, ref = lstm
    parts = s.split_inputs(inputs, 4)
    replicated = {k: v for k, v in parts[0].items() if k not in s.batch}
    for k, part in enumerate(parts):
        np.savez(tmp_path / f"part-{k:02d}.npz", **{n: a for n, a in part.items() if n in s.batch})
    glob = str(tmp_path / "part-*.npz")
    assert same_bits(s.run(replicated, client=client, files=glob), ref)
    assert same_bits(s.run(replicated, client="inline", files=glob), ref)
    with pytest.raises(ShardError, match="no shard files match"):
        s.run(replicated, files=str(tmp_path / "none-*.npz"))
    # an error in a task (a file that lacks an input) comes back as gradir's error, not the engine's
    np.savez(tmp_path / "part-99.npz", t0=parts[0]["t0"])
    with pytest.raises(gradir.InputError, match="missing input t4"):
        s.run(replicated, client=client, files=glob, retries=0)
    # a file that is not an .npz: an error located at that file, read where the task ran
    (tmp_path / "part-99.npz").write_bytes(b"garbage")
    with pytest.raises(gradir.InputError, match="shard file: not a valid NumPy file") as e:
        s.run(replicated, client=client, files=glob, retries=0)
    assert str(tmp_path / "part-99.npz") in e.value.render()


def test_cli_shard_files(tmp_path, capsys):
    f = sample("mlp_forward.grad.gir")
    s = gradir.shard(f, {"t0": 0, "t11": 0})
    inputs, _ = complete_inputs(s.graph, {}, 0)
    for k, part in enumerate(s.split_inputs(inputs, 3)):
        np.savez(tmp_path / f"p{k}.npz", **{n: a for n, a in part.items() if n in s.batch})
    np.savez(tmp_path / "w.npz", **{n: a for n, a in inputs.items() if n not in s.batch})
    np.savez(tmp_path / "all.npz", **inputs)
    a, b = str(tmp_path / "a.npz"), str(tmp_path / "b.npz")
    assert main(["run", f, "--shard", "t0:0,t11:0", "--shard-files", str(tmp_path / "p*.npz"), "--inputs",
                 str(tmp_path / "w.npz"), "-o", a]) == 0
    assert main(["run", f, "--shard", "t0:0,t11:0", "--shards", "3", "--inputs", str(tmp_path / "all.npz"),
                 "-o", b]) == 0
    assert "(3 shards, inline)" in capsys.readouterr().out
    assert main(["run", f, "--shard", "t0:0,t11:0", "--shard-files", str(tmp_path / "none-*.npz")]) == 1
    assert capsys.readouterr().err.startswith("gradir: error: no shard files match")  # before any demo input
    # "shards=2 but 3 shard files match" had no "error:" and came after the demo inputs were generated
    assert main(["run", f, "--shard", "t0:0,t11:0", "--shard-files", str(tmp_path / "p*.npz"), "--shards", "2"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("gradir: error: --shards 2 but 3 shard files match --shard-files ") and "generated" not in err
    assert "give --shards 3 or leave it out" in err
    with pytest.raises(ShardError, match="shards=2 but 3 shard files match") as e:
        s.run({}, shards=2, files=str(tmp_path / "p*.npz"))
    assert e.value.render().startswith("gradir: error: shards=2 but 3 shard files match")
    with np.load(a) as x, np.load(b) as y:
        assert all(np.array_equal(x[k], y[k]) for k in x.files) and len(x.files) == 5


def test_a_worker_killed_mid_run_and_the_run_completes_with_the_same_bits(client, lstm):
    s, inputs, ref = lstm
    pids = client.run(os.getpid)
    result: dict = {}

    def go():
        try:
            result["out"] = s.run(inputs, shards=4, client=client, jitter=2.0)
        except BaseException as e:  # pragma: no cover - reported below
            result["error"] = e

    t = threading.Thread(target=go)
    t.start()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:  # wait until both workers are busy with shard tasks
        busy = client.processing()
        if sum(1 for v in busy.values() if v) == 2:
            break
        time.sleep(0.05)
    time.sleep(0.3)
    victim = sorted(pids.values())[0]
    assert t.is_alive()  # mid-run: the shard tasks sleep up to 2 s first
    os.kill(victim, signal.SIGKILL)
    t.join(120)
    assert not t.is_alive() and "error" not in result, result.get("error")
    assert same_bits(result["out"], ref)
    # shards whose inputs died with the victim were shipped again by gradir (none, when Dask had
    # copied them to the other worker before: then Dask reran the tasks by itself)
    assert set(s.last_retried) <= {0, 1, 2, 3}
    client.wait_for_workers(2, timeout=60)
    assert victim not in client.run(os.getpid).values()


def test_a_shard_whose_scattered_inputs_are_lost_is_shipped_again(client, lstm, monkeypatch):
    """The inputs of shard 1's first attempt are cancelled (as when their worker dies with them):
    its task fails with a CancelledError, and gradir scatters the shard again and resubmits it."""
    s, inputs, ref = lstm
    real = client.scatter
    first = []

    def scatter(data, **kw):
        futures = real(data, **kw)
        if not first:  # the first call carries every shard: lose shard 1's inputs
            first.append(futures[1])
            client.cancel([futures[1]])
        return futures

    monkeypatch.setattr(client, "scatter", scatter)
    assert same_bits(s.run(inputs, shards=4, client=client), ref)
    assert s.last_retried == [1]
    with pytest.raises(ShardError, match="shard 1 of 4 failed on Dask"):
        first.clear()
        s.run(inputs, shards=4, client=client, retries=0)  # no retries left: a clear error


# -- the command line ----------------------------------------------------------------------------------
def test_cli_run_shard_inline_and_local_1_write_the_same_bits(tmp_path, capsys):
    f = sample("mlp_forward.grad.gir")
    a, b, c = (str(tmp_path / n) for n in ("a.npz", "b.npz", "c.npz"))
    assert main(["run", f, "--shard", "t0:0,cotangent(t10):0", "--shards", "4", "-o", a]) == 0
    assert "(4 shards, inline)" in capsys.readouterr().out
    assert main(["run", f, "--shard", "t0:0", "--shard", "cotangent(t10):0", "--shards", "4", "--scheduler",
                 "local:1", "-o", b]) == 0
    cap = capsys.readouterr()
    assert "(4 shards, local:1" in cap.out and "sharding does not pay here" in cap.err
    assert main(["run", f, "-o", c]) == 0
    with np.load(a) as x, np.load(b) as y, np.load(c) as z:
        assert all(np.array_equal(x[k], y[k]) for k in x.files)  # inline and Dask: the same bits
        # against the unsharded run: within rounding (grad(t0) comes through MatMul, whose BLAS
        # kernel depends on the row count)
        assert np.abs(x["grad(t0)"] - z["grad(t0)"]).max() <= 2e-6 * np.abs(z["grad(t0)"]).max()


def test_cli_plan_prints_placements_and_a_refusal_is_a_located_error(capsys):
    f = sample("mlp_forward.grad.gir")
    assert main(["plan", f, "--shard", "t0:0,t11:0"]) == 0
    out = capsys.readouterr().out
    assert "input t0 : Float32 [8, 16]  split(0)" in out and "t17 = MatMul : Float32 [32, 10]  partial" in out
    assert "t23 'grad(t1)' summed over the shards" in out
    assert main(["plan", f, "--shard", "t0:0"]) == 1
    err = capsys.readouterr().err
    assert f"{f}:17:" in err and "cannot shard SoftmaxGrad_13" in err and "Traceback" not in err
    # run: the same refusal, before any input is generated (no demo-input line first)
    assert main(["run", f, "--shard", "t0:0"]) == 1
    err = capsys.readouterr().err
    assert "cannot shard SoftmaxGrad_13" in err and "generated" not in err and "Traceback" not in err


def test_cli_usage_errors_and_dask_missing(capsys, monkeypatch):
    f = sample("mlp_forward.grad.gir")
    assert main(["run", f, "--shards", "2"]) == 2
    assert "--shards goes with --shard" in capsys.readouterr().err
    assert main(["run", f, "--shard", "t0"]) == 2
    assert "expected NAME:AXIS" in capsys.readouterr().err
    assert main(["run", f, "--shard", "t0:0,t11:0", "--scheduler", "local:0"]) == 2
    capsys.readouterr()
    assert main(["run", f, "--shard", "t0:0,t11:0", "--trace", "x.json"]) == 2
    assert "--trace does not go with --shard" in capsys.readouterr().err
    monkeypatch.setitem(__import__("sys").modules, "distributed", None)
    assert main(["run", f, "--shard", "t0:0,t11:0", "--scheduler", "local:2"]) == 1
    assert 'pip install "gradir[dask]"' in capsys.readouterr().err
    assert main(["run", f, "--shard", "t0:0,t11:0", "--scheduler", "inline"]) == 0


def test_an_address_where_nothing_listens_fails_at_once(capsys):
    """A refused connection is reported at once (not after Dask's 20 s of retries); a malformed
    address is a usage error."""
    import socket
    with socket.socket() as s:  # a port that was free a moment ago: nothing listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    f = sample("mlp_forward.grad.gir")
    t0 = time.perf_counter()
    assert main(["run", f, "--shard", "t0:0,t11:0", "--scheduler", f"tcp://127.0.0.1:{port}"]) == 1
    assert time.perf_counter() - t0 < 60  # a guard against a hang only (Dask retried for 20 s, per try)
    err = capsys.readouterr().err
    assert f"gradir: error: cannot reach the Dask scheduler 'tcp://127.0.0.1:{port}'" in err
    assert "generated" not in err  # refused before any input was generated
    assert main(["run", f, "--shard", "t0:0,t11:0", "--scheduler", "tcp://nohostport"]) == 2
    assert "expected tcp://HOST:PORT" in capsys.readouterr().err


# -- hardening: shard counts, schedulers, arguments (issue #29) -------------------------------------------
TANH = "input t0 : Float32 [8, 4]\ninput t1 : Float32 [4]\nt2 = Add(t0, t1)\nt3 = Tanh(t2)\noutput t3\n"


def test_a_shard_count_past_the_batch_is_refused_before_anything_is_allocated():
    """``--shards 1000000000`` on 8 rows made a dict per shard before checking the rows (gigabytes);
    ``shards=2**70`` never returned.  Now the rows are checked first (the bound is a safety net)."""
    from fuzzing import time_limit
    s = gradir.shard(TANH, {"t0": 0})
    x = {"t0": np.ones((8, 4), np.float32), "t1": np.ones(4, np.float32)}
    with time_limit(20, "huge shard counts"):
        # "fewer than the about 2^70 shards" did not read well: the count in full, or 2^N, or its size
        for k, shown in ((9, "the 9 shards"), (10 ** 9, "the 1000000000 shards"),
                         (2 ** 70, "the 1180591620717411303424 shards"), (2 ** 100, "the 2^100 shards"),
                         (10 ** 5000, "the shards asked for (more than 2^16609)")):
            with pytest.raises(gradir.InputError, match=re.escape(f"has 8 rows, fewer than {shown}")):
                s.run(x, shards=k)
            with pytest.raises(gradir.InputError, match=re.escape(f"has 8 rows, fewer than {shown}")):
                s.check_shards(k)
        with pytest.raises(gradir.InputError, match=r"missing input t0 \(Float32 \[8, 4\]\), split along axis 0"):
            s.run({"t1": x["t1"]}, shards=2 ** 70)
        with pytest.raises(gradir.InputError, match="fewer than the"):
            s.split_inputs(x, 2 ** 70)


def test_cli_a_shard_count_past_the_batch_is_a_located_error(capsys):
    f = sample("mlp_forward.grad.gir")
    assert main(["run", f, "--shard", "t0:0,t11:0", "--shards", "1000000000"]) == 1
    err = capsys.readouterr().err
    assert "has 8 rows, fewer than the 1000000000 shards" in err and "Traceback" not in err
    assert err.startswith(f"{f}:") and "generated" not in err  # located, and said before any input is generated


@pytest.mark.parametrize("kwargs, what", [
    ({"inputs": 1}, "inputs must be a mapping"),
    ({"client": 1.5}, "client must be None"),
    ({"threads": [1]}, "threads must be a positive integer"),
    ({"threads": 0}, "threads must be a positive integer"),
    ({"jitter": -1}, "jitter must be a number of seconds"),
    ({"jitter": float("nan")}, "jitter must be a number of seconds"),
    ({"jitter": "1"}, "jitter must be a number of seconds"),
    ({"retries": -1}, "retries must be an integer"),
    ({"retries": 1.5}, "retries must be an integer"),
    ({"progress": "yes"}, "progress must be True, False or None"),
    ({"files": 1}, "files must be a glob or a list"),
    ({"files": [1]}, "files must be a glob or a list"),
    ({"files": b"x*"}, "files must be a glob or a list"),
    ({"files": []}, "files is an empty list"),
    ({"files": "\ud800*.npz"}, "cannot be encoded as a file name"),
    ({"files": ["a.npz", "\ud800.npz"]}, "cannot be encoded as a file name"),
    ({"shards": 2.0}, "shards must be a positive integer"),
    ({"shards": True}, "shards must be a positive integer"),
    ({"shards": 0}, "shards must be a positive integer"),
    ({"client": "somewhere"}, "expected \"inline\", \"local:N\" or a scheduler address"),
    ({"client": "local:x"}, "local:N needs a number of worker processes"),
    ({"client": "local:٣"}, "local:N needs a number of worker processes"),
])
def test_wrong_arguments_of_sharded_run_are_argument_errors(kwargs, what):
    """``Sharded.run(inputs=1, client=1.5, threads=[1], jitter=-1)`` raised TypeError, AttributeError
    and ValueError; each wrong argument is an ``ArgumentError`` saying what is expected."""
    s = gradir.shard(TANH, {"t0": 0})
    x = {"t0": np.ones((8, 4), np.float32), "t1": np.ones(4, np.float32)}
    with pytest.raises(gradir.ArgumentError, match=what):
        s.run(**{"inputs": x, **kwargs})


@pytest.mark.parametrize("args, kwargs, what", [
    ((1, {"t0": 0}), {}, "takes a Graph, IR text or a path"),
    ((TANH, [("t0", 0)]), {}, "batch must be a mapping"),
    ((TANH, {"t0": 0.0}), {}, "the axis of 't0' must be an integer"),
    ((TANH, {"t0": True}), {}, "the axis of 't0' must be an integer"),
    ((TANH, {0: 0}), {}, "the keys are input labels or value names"),
    ((TANH, {"t0": 0}), {"option": 1}, "option must be a string"),
])
def test_wrong_arguments_of_shard_are_argument_errors(args, kwargs, what):
    with pytest.raises(gradir.ArgumentError, match=what):
        gradir.shard(*args, **kwargs)


@pytest.mark.parametrize("integer", [np.int64, np.int32, np.uint8, np.intp])
def test_numpy_integers_are_accepted_as_shards_and_batch_axes(integer):
    """``gradir.shard(g, {"t0": np.int64(0)})`` and ``run(shards=np.int64(2))`` were refused as "must be an
    integer" although they are (``a.shape[0]`` and NumPy arithmetic give them)."""
    from gradir.distributed import analyze, split
    s = gradir.shard(TANH, {"t0": integer(0)})
    assert s.batch == {"t0": 0} and type(s.batch["t0"]) is int
    x = {"t0": np.arange(32, dtype=np.float32).reshape(8, 4), "t1": np.ones(4, np.float32)}
    got = s.run(x, shards=integer(2))
    assert np.array_equal(got["t3"], np.tanh(x["t0"] + x["t1"]))
    assert len(s.split_inputs(x, integer(4))) == 4
    s.check_shards(integer(8))
    assert split(integer(1)).axis == 1 and type(split(integer(1)).axis) is int
    assert analyze(s.graph, {"t0": integer(0)})[0]["t3"] == split(0)
    for bad in (np.True_, np.float64(2.0)):
        with pytest.raises(gradir.ArgumentError, match="shards must be a positive integer"):
            s.run(x, shards=bad)
        with pytest.raises(gradir.ArgumentError, match="must be an integer"):
            gradir.shard(TANH, {"t0": bad})


def test_wrong_arguments_of_the_other_sharding_api_are_argument_errors():
    from gradir.distributed import Placement, analyze, split
    s = gradir.shard(TANH, {"t0": 0})
    calls = [(lambda: s.combine(1), "shard_outputs must be a non-empty list"),
             (lambda: s.combine([]), "shard_outputs must be a non-empty list"),
             (lambda: s.combine([[np.ones(3)], []]), "shard_outputs must be a non-empty list"),
             (lambda: s.compiled([1]), "threads must be a positive integer"),
             (lambda: s.split_inputs({"t0": np.ones((8, 4))}, 2, pool=1), "pool must be None"),
             (lambda: s.split_inputs(1, 2), "inputs must be a mapping"),
             (lambda: s.split_inputs({}, 2.0), "shards must be a positive integer"),
             (lambda: split("x"), "a split placement needs an axis >= 0"),
             (lambda: split(-1), "a split placement needs an axis >= 0"),
             (lambda: Placement("foo"), "a placement is"),
             (lambda: Placement("partial", 0), "a partial placement has no axis"),
             (lambda: analyze(1, {}), "analyze\\(\\) takes a Graph"),
             (lambda: analyze(s.graph, 1), "batch must be a mapping"),
             (lambda: analyze(s.graph, {"x": 0}), "'x' is not the value name of an input"),
             (lambda: analyze(s.graph, {"t0": 5}), "the axis of t0 must be an integer from 0 to 1"),
             (lambda: tree_sum([]), "tree_sum takes a non-empty list of arrays"),
             (lambda: tree_sum(1), "tree_sum takes a non-empty list of arrays"),
             (lambda: open_scheduler(1.5).__enter__(), "client must be None")]
    for call, what in calls:
        with pytest.raises(gradir.ArgumentError, match=what):
            call()


def test_a_huge_batch_axis_is_a_shard_error_not_a_conversion_error():
    with pytest.raises(ShardError, match="axis an int of 16610 bits of input t0 is out of range"):
        gradir.shard(TANH, {"t0": 10 ** 5000})


@pytest.fixture
def listener():
    """A TCP listener on 127.0.0.1: ``mode`` "silent" accepts and never speaks, "http" answers an HTTP
    request, "banner" greets with an HTTP line at once; yields a function starting one -> its port."""
    import socket
    servers, conns = [], []

    def start(mode: str) -> int:
        srv = socket.socket()
        srv.bind(("127.0.0.1", 0))
        srv.listen(8)
        servers.append(srv)

        def serve():
            while True:
                try:
                    c, _ = srv.accept()
                except OSError:
                    return
                conns.append(c)
                try:
                    if mode == "http":
                        c.recv(65536)
                    if mode in ("http", "banner"):
                        c.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
                except OSError:
                    pass
        threading.Thread(target=serve, daemon=True).start()
        return srv.getsockname()[1]

    yield start
    for s in servers + conns:
        s.close()


def test_a_listener_that_never_speaks_fails_within_the_timeout(listener, monkeypatch, capsys):
    """A listener that accepts and never speaks hung the run for more than 300 s; now it fails within
    GRADIR_SCHEDULER_TIMEOUT seconds, naming the address."""
    monkeypatch.setenv("GRADIR_SCHEDULER_TIMEOUT", "0.5")
    port = listener("silent")
    f = sample("mlp_forward.grad.gir")
    t0 = time.monotonic()
    assert main(["run", f, "--shard", "t0:0,t11:0", "--scheduler", f"tcp://127.0.0.1:{port}"]) == 1
    assert time.monotonic() - t0 < 60  # a guard against a hang only (it hung for over 300 s); the
    # message below says the 0.5 s bound was what ended it
    err = capsys.readouterr().err
    assert (f"gradir: error: scheduler 'tcp://127.0.0.1:{port}' accepted the connection but did not answer "
            f"within 0.5 s, as a Dask scheduler does at once") in err
    assert "generated" not in err and "Traceback" not in err
    s = gradir.shard(TANH, {"t0": 0})
    with pytest.raises(ShardError, match="did not answer within 0.5 s"):
        s.run({"t0": np.ones((8, 4), np.float32), "t1": np.ones(4, np.float32)}, client=f"tcp://127.0.0.1:{port}")


@pytest.mark.parametrize("mode, scheme, what", [
    ("http", "tcp", "did not answer within 0.5 s"),  # an HTTP server waits for a request: silent to gradir
    ("banner", "tcp", "is not a Dask scheduler: it answered b'HTTP/1.1 400 Bad Request"),
    ("http", "ws", "is not a Dask scheduler: it answered b'HTTP/1.1 400 Bad Request\\\\r\\\\n', not a websocket"),
    ("silent", "ws", "did not answer within 0.5 s"),
])
def test_a_listener_that_is_not_a_dask_scheduler_says_so(listener, monkeypatch, capsys, mode, scheme, what):
    """A listener that answers HTTP printed only "out of memory" (its reply read as a frame length)."""
    monkeypatch.setenv("GRADIR_SCHEDULER_TIMEOUT", "0.5")
    port = listener(mode)
    assert main(["run", sample("mlp_forward.grad.gir"), "--shard", "t0:0,t11:0", "--scheduler",
                 f"{scheme}://127.0.0.1:{port}"]) == 1
    err = capsys.readouterr().err
    assert f"gradir: error: scheduler '{scheme}://127.0.0.1:{port}'" in err and what.replace("\\\\", "\\") in err, err
    assert "out of memory" not in err and "Traceback" not in err


@pytest.mark.parametrize("address, what", [
    ("tls://127.0.0.1:9", "a tls:// scheduler needs TLS certificates in Dask's configuration"),
    ("wss://127.0.0.1:9", "a wss:// scheduler needs TLS certificates in Dask's configuration"),
    ("ucx://127.0.0.1:9", "gradir connects to a Dask scheduler over tcp:// (or tls://, ws://, wss://), not ucx://"),
    ("inproc://127.0.0.1/1/1", "not inproc://"),
    ("ws://nohostport", "expected ws://HOST:PORT"),
])
def test_unsupported_or_unconfigured_protocols_are_clear_errors(capsys, address, what):
    """``tls://`` (no certificates configured) and ``ucx://`` exited 3."""
    code = main(["run", sample("mlp_forward.grad.gir"), "--shard", "t0:0,t11:0", "--scheduler", address])
    err = capsys.readouterr().err
    assert code in (1, 2) and what in err and "Traceback" not in err and "internal error" not in err, err


def test_a_bad_scheduler_timeout_setting_is_an_error(monkeypatch, capsys):
    monkeypatch.setenv("GRADIR_SCHEDULER_TIMEOUT", "soon")
    assert main(["run", sample("mlp_forward.grad.gir"), "--shard", "t0:0,t11:0", "--scheduler",
                 "tcp://127.0.0.1:9"]) == 1
    assert "GRADIR_SCHEDULER_TIMEOUT must be a number of seconds" in capsys.readouterr().err


@pytest.mark.parametrize("value", ["0", "-1", "3601", "nan"])
def test_the_scheduler_timeout_message_states_the_rule_it_applies(monkeypatch, capsys, value):
    """``GRADIR_SCHEDULER_TIMEOUT=0`` said "from 0 to 3600, got '0'": 0 is refused, so the rule says so."""
    monkeypatch.setenv("GRADIR_SCHEDULER_TIMEOUT", value)
    assert main(["run", sample("mlp_forward.grad.gir"), "--shard", "t0:0,t11:0", "--scheduler",
                 "tcp://127.0.0.1:9"]) == 1
    err = capsys.readouterr().err
    assert f"GRADIR_SCHEDULER_TIMEOUT must be a number of seconds more than 0 and at most 3600, got '{value}'" in err


def test_local_clusters_start_no_dashboard_and_listen_on_127_0_0_1_only(client):
    """With bokeh installed, ``local:N`` served Dask's dashboard on 0.0.0.0; now none is started, and the
    scheduler's own HTTP server (health, metrics) listens on 127.0.0.1."""
    from distributed.comm.utils import get_tcp_server_addresses
    cluster = client.cluster
    options = cluster.scheduler_spec["options"]
    assert options["dashboard"] is False and options["dashboard_address"].startswith("127.0.0.1:")
    assert {host for host, _ in get_tcp_server_addresses(cluster.scheduler.http_server)} == {"127.0.0.1"}
    assert client.scheduler.address.startswith("tcp://127.0.0.1:")
    assert all(w.startswith("tcp://127.0.0.1:") for w in client.scheduler_info()["workers"])
