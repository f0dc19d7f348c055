"""Reverse-mode autodiff (``gradir.autodiff.driver``): derived gradients against float64
central finite differences, structure of the derived graphs, samples, CLI.

The numeric check is the dot-product test: for the derived graph's gradient
``g`` of ``L(x) = sum_k <cot_k, out_k(x)>`` and a random direction ``v`` over all
``wrt`` inputs, ``<g, v>`` must equal ``(L(x + h v) - L(x - h v)) / 2h`` (float64).
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import sys
from typing import Optional

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import gradir
from gradir import OPS, DType, Graph, GraphInput, TensorType
from gradir.autodiff.driver import AutodiffError, derive, grad, grad_text, gradient_rule
from gradir.cli.grad import register as register_cli
from strategies import OP_EXAMPLES
from gradir.cli.main import main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FORWARD_SAMPLES = sorted(glob.glob(os.path.join(ROOT, "samples", "*_forward.gir")))


# ---------------------------------------------------------------------------
# the finite-difference check
# ---------------------------------------------------------------------------
def _compile(g: Graph):
    from gradir.backends.cpu.runtime import compile
    return compile(g)


def to_float64(g: Graph) -> Graph:
    """``g`` with its Float32 inputs Float64 and its types inferred again (gradcheck's promotion): a result
    that is Float32 whatever the inputs (LayerNormalization's Mean) stays so, which a textual replace broke."""
    from gradir.tools.gradcheck import promote
    return promote(gradir.parse(g.to_text()))[0]


def _array(rng, t: TensorType, name: str, positive: set, shapes: dict, ints: dict):
    shape = shapes.get(name, t.shape)
    assert all(d is not None for d in shape), f"give a concrete shape for {name}"
    if not t.dtype.is_float or name in ints:  # ints: the fixed values of non-float (or fixed float) inputs
        return np.asarray(ints[name], dtype=t.dtype.numpy)
    if name in positive:
        return np.asarray(rng.uniform(0.5, 2.0, shape))
    x = np.asarray(rng.standard_normal(shape))
    # no value within 1e-3 of 0, where Relu-like ops have their kink: a central difference
    # across it is no derivative (Hypothesis drew seed 1056, whose [2, 3, 5] holds 1.6e-10)
    return np.where(np.abs(x) < 1e-3, np.copysign(1e-3, x), x)


def fd_check(g: Graph, wrt=None, *, positive=(), shapes=None, ints=None, seed=0, directions=2,
             h=1e-6, rtol=1e-6):
    """Derive ``g`` (in float64) and compare <gradient, v> with central differences."""
    g = to_float64(g)
    d = derive(g, wrt)
    dg = d.graph
    rng = np.random.default_rng(seed)
    positive, shapes, ints = set(positive), shapes or {}, ints or {}
    x = {i.name: _array(rng, i.type, i.name, positive, shapes, ints) for i in g.inputs}
    fwd = _compile(g)
    out0 = fwd.run(x)
    cots = {c: np.asarray(rng.standard_normal(out0[o].shape)) for c, o in d.cotangents}

    def loss(xs):
        out = fwd.run(xs)
        return sum(float(np.sum(cots[c] * out[o])) for c, o in d.cotangents)

    res = _compile(dg).run({**x, **cots})
    grads = [res[o] for o in dg.outputs]
    for w, gw in zip(d.wrt, grads):
        assert gw.shape == x[w].shape, (w, gw.shape, x[w].shape)
    for _ in range(directions):
        v = {w: np.asarray(rng.standard_normal(x[w].shape)) for w in d.wrt}
        xp, xm = dict(x), dict(x)
        for w in d.wrt:
            xp[w] = x[w] + h * v[w]
            xm[w] = x[w] - h * v[w]
        fd = (loss(xp) - loss(xm)) / (2 * h)
        an = sum(float(np.sum(gw * v[w])) for w, gw in zip(d.wrt, grads))
        scale = max(1.0, abs(fd), abs(an), sum(float(np.sum(np.abs(gw) * np.abs(v[w])))
                                              for w, gw in zip(d.wrt, grads)))
        assert abs(fd - an) <= rtol * scale, f"<grad, v> = {an!r} but finite differences give {fd!r}\n{dg}"
    return d


# ---------------------------------------------------------------------------
# hand-written forward graphs: shapes, attributes and combinations beyond each op's own example
# (tests/conformance checks every forward op's gradient on its example)
# ---------------------------------------------------------------------------
CASES = {
    # name: (text, fd_check keyword arguments)
    "LeakyRelu": ("input t0 : Float64 [3, 4]\nt1 = LeakyRelu(t0, alpha=0.2)\noutput t1\n", {}),
    "LeakyRelu-negative-alpha": ("input t0 : Float64 [3, 4]\nt1 = LeakyRelu(t0, alpha=-0.5)\noutput t1\n", {}),
    "QuickGelu": ("input t0 : Float64 [3, 4]\nt1 = QuickGelu(t0)\nt2 = QuickGelu(t0, alpha=-0.7)\noutput t1, t2\n",
                  {}),
    "Softmax": ("input t0 : Float64 [2, 3, 4]\nt1 = Softmax(t0, axis=1)\noutput t1\n", {}),
    "LogSoftmax": ("input t0 : Float64 [3, 5]\nt1 = LogSoftmax(t0, axis=0)\noutput t1\n", {}),
    "Add": ("input t0 : Float64 [3, 1, 4]\ninput t1 : Float64 [5, 1]\nt2 = Add(t0, t1)\noutput t2\n", {}),
    "Sub": ("input t0 : Float64 [4]\ninput t1 : Float64 [2, 3, 4]\nt2 = Sub(t0, t1)\noutput t2\n", {}),
    "Mul": ("input t0 : Float64 [2, 3]\ninput t1 : Float64 [3]\nt2 = Mul(t0, t1)\nt3 = Mul(t2, t2)\noutput t3\n", {}),
    "Div": ("input t0 : Float64 [2, 3]\ninput t1 : Float64 [2, 1]\nt2 = Div(t0, t1)\nt3 = Div(t1, t0)\n"
            "output t2, t3\n", {"positive": ["t0", "t1"]}),
    "MatMul-batched-broadcast": ("input t0 : Float64 [2, 1, 3, 4]\ninput t1 : Float64 [5, 4, 2]\n"
                                 "t2 = MatMul(t0, t1)\noutput t2\n", {}),
    "MatMul-vector-matrix": ("input t0 : Float64 [4]\ninput t1 : Float64 [2, 4, 3]\nt2 = MatMul(t0, t1)\n"
                             "output t2\n", {}),
    "MatMul-matrix-vector": ("input t0 : Float64 [2, 3, 4]\ninput t1 : Float64 [4]\nt2 = MatMul(t0, t1)\n"
                             "output t2\n", {}),
    "MatMul-vector-vector": ("input t0 : Float64 [4]\ninput t1 : Float64 [4]\nt2 = MatMul(t0, t1)\n"
                             "output t2\n", {}),
    "FusedMatMul-transA-batched-broadcast": ("input t0 : Float64 [1, 4, 3]\ninput t1 : Float64 [2, 4, 5]\n"
                                             "t2 = FusedMatMul(t0, t1, transA=1)\noutput t2\n", {}),
    "FusedMatMul-transB-vector": ("input t0 : Float64 [4]\ninput t1 : Float64 [2, 5, 4]\n"
                                  "t2 = FusedMatMul(t0, t1, transA=1, transB=1, alpha=2)\noutput t2\n", {}),
    "FusedMatMul-transBatch": ("input t0 : Float64 [3, 2, 4]\ninput t1 : Float64 [5, 2, 3]\n"
                               "t2 = FusedMatMul(t0, t1, transBatchA=1, transBatchB=1, transA=1, transB=1)\n"
                               "output t2\n", {}),
    "FusedMatMul-transBatch-broadcast": ("input t0 : Float64 [3, 1, 4]\ninput t1 : Float64 [2, 4, 5]\n"
                                         "t2 = FusedMatMul(t0, t1, transBatchA=1)\noutput t2\n", {}),
    "Transpose": ("input t0 : Float64 [2, 3, 4]\nt1 = Transpose(t0, perm=[1, 2, 0])\nt2 = Transpose(t0)\n"
                  "output t1, t2\n", {}),
    "ReduceSum": ("input t0 : Float64 [2, 3, 4]\nt1 = ReduceSum(t0, axes=[0, -1])\n"
                  "t2 = ReduceSum(t0, axes=[1], keepdims=true)\nt3 = ReduceSum(t0)\noutput t1, t2, t3\n", {}),
    "ReduceMean": ("input t0 : Float64 [2, 3, 4]\nt1 = ReduceMean(t0, axes=[1])\n"
                   "t2 = ReduceMean(t0, keepdims=true)\noutput t1, t2\n", {}),
    "Sum": ("input t0 : Float64 [2, 3]\ninput t1 : Float64 [2, 3]\nt2 = Sum(t0, t1, t0)\noutput t2\n", {}),
    "LSTMCell": ("input t0 : Float64 [2, 3]\ninput t1 : Float64 [2, 4]\ninput t2 : Float64 [2, 4]\n"
                 "input t3 : Float64 [16, 3]\ninput t4 : Float64 [16, 4]\ninput t5 : Float64 [16]\n"
                 "t6, t7 = LSTMCell(t0, t1, t2, t3, t4, t5, hidden_size=4)\noutput t6, t7\n", {}),
    "LSTMCell-only-H": ("input t0 : Float64 [2, 3]\ninput t1 : Float64 [2, 4]\ninput t2 : Float64 [2, 4]\n"
                        "input t3 : Float64 [16, 3]\ninput t4 : Float64 [16, 4]\ninput t5 : Float64 [16]\n"
                        "t6, t7 = LSTMCell(t0, t1, t2, t3, t4, t5, hidden_size=4)\noutput t6\n", {}),
    "LSTMCell-only-C": ("input t0 : Float64 [2, 3]\ninput t1 : Float64 [2, 4]\ninput t2 : Float64 [2, 4]\n"
                        "input t3 : Float64 [16, 3]\ninput t4 : Float64 [16, 4]\ninput t5 : Float64 [16]\n"
                        "t6, t7 = LSTMCell(t0, t1, t2, t3, t4, t5, hidden_size=4)\noutput t7\n", {}),
    "LSTMTraining": ("input t0 : Float64 [3, 2, 4]\ninput t1 : Float64 [1, 12, 4]\ninput t2 : Float64 [1, 12, 3]\n"
                     "input t3 : Float64 [1, 24]\ninput t4 : Float64 [1, 2, 3]\ninput t5 : Float64 [1, 2, 3]\n"
                     "t6, t7, t8, t9, t10 = LSTMTraining(t0, t1, t2, t3, _, t4, t5, hidden_size=3)\n"
                     "output t6, t7, t8\n", {}),
    "LSTMTraining-bidirectional-SL-peepholes": (
        "input t0 : Float64 [4, 3, 2]\ninput t1 : Float64 [2, 8, 2]\ninput t2 : Float64 [2, 8, 2]\n"
        "input t3 : Float64 [2, 16]\ninput t4 : Int32 [3]\ninput t5 : Float64 [2, 3, 2]\n"
        "input t6 : Float64 [2, 3, 2]\ninput t7 : Float64 [2, 6]\n"
        "t8, t9, t10, t11, t12 = LSTMTraining(t0, t1, t2, t3, t4, t5, t6, t7, hidden_size=2, "
        "direction=\"bidirectional\")\noutput t8, t9, t10\n", {"ints": {"t4": [4, 2, 3]}}),
    "LSTMTraining-reverse-HFinal-only": (
        "input t0 : Float64 [3, 2, 4]\ninput t1 : Float64 [1, 12, 4]\ninput t2 : Float64 [1, 12, 3]\n"
        "t6, t7, t8, t9, t10 = LSTMTraining(t0, t1, t2, hidden_size=3, direction=\"reverse\")\n"
        "output t7\n", {}),
    # cross-entropy: the gradient of the loss (ORT's SoftmaxCrossEntropyLossGrad) and of log_prob together
    "SoftmaxCrossEntropyLoss-weights-ignore-index-both-results": (
        "input t0 : Float64 [3, 4, 2]\ninput t1 : Int64 [3, 2]\ninput t2 : Float64 [4]\n"
        "t3, t4 = SoftmaxCrossEntropyLoss(t0, t1, t2, ignore_index=1)\nt5 = Exp(t4)\noutput t3, t5\n",
        {"wrt": ["t0"], "positive": ["t2"], "ints": {"t1": [[0, 1], [3, 2], [1, 1]]}}),
    "SoftmaxCrossEntropyLoss-none-int32": (
        "input t0 : Float64 [4, 3]\ninput t1 : Int32 [4]\n"
        "t2, t3 = SoftmaxCrossEntropyLoss(t0, t1, reduction=\"none\")\noutput t2\n",
        {"ints": {"t1": [2, 0, 0, 1]}}),
    "SoftmaxCrossEntropyLoss-sum-log-prob-only": (
        "input t0 : Float64 [2, 3, 2, 2]\ninput t1 : Int64 [2, 2, 2]\n"
        "t2, t3 = SoftmaxCrossEntropyLoss(t0, t1, reduction=\"sum\")\noutput t3\n",
        {"ints": {"t1": [[[0, 1], [2, 2]], [[1, 0], [0, 2]]]}}),
    # derived through constants and materialised zeros
    "Constant": ("input t0 : Float64 [2, 3]\nt1 = Constant(value=[0.5, -1, 2, 3, 0.25, 4]) : Float64 [2, 3]\n"
                 "t2 = Mul(t0, t1)\nt3 = Constant(value=1.5) : Float64 scalar\nt4 = Add(t2, t3)\n"
                 "t5 = Exp(t3)\nt6 = Mul(t4, t5)\noutput t6\n", {}),
    "ZerosLike": ("input t0 : Float64 [3]\nt1 = ZerosLike(t0)\nt2 = Exp(t0)\nt3 = Add(t1, t2)\noutput t3\n", {}),
    # unknown dimensions: broadcasting is undone at run time
    "unknown-dims": ("input t0 : Float64 [?, 4]\ninput t1 : Float64 [?, 4]\ninput t2 : Float64 [4, ?]\n"
                     "t3 = Add(t0, t1)\nt4 = MatMul(t3, t2)\nt5 = ReduceSum(t4, axes=[0])\n"
                     "t6 = Reshape(t3, shape=[-1])\n"
                     "output t5, t6\n", {"shapes": {"t0": (1, 4), "t1": (3, 4), "t2": (4, 2)}}),
    "fan-out-and-accumulation": ("input t0 : Float64 [3]\ninput t1 : Float64 [3]\nt2 = Mul(t0, t1)\n"
                                 "t3 = Tanh(t2)\nt4 = Sigmoid(t0)\nt5 = Add(t3, t4)\nt6 = Sub(t5, t0)\noutput t6, t2\n",
                                 {}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_derived_gradients_match_finite_differences(case):
    text, kw = CASES[case]
    fd_check(gradir.parse(text, f"{case}.gir"), **kw)


def test_rules_are_for_forward_ops_only():
    """Every forward op has a gradient rule (hand-written, or derived from its VJP or GRADIENT) and no
    gradient op has one (first-order gradients only); that each rule matches finite differences is
    tests/conformance's gradient concern."""
    forward = {n for n, c in OPS.items() if not c.is_backward}
    assert {n for n in forward if gradient_rule(OPS[n]) is None} == set()
    assert {n for n, c in OPS.items() if c.is_backward and gradient_rule(c) is not None} == set()


# -- every forward op on random shapes and attributes (strategies.OP_EXAMPLES) --
def _random_op_graph(name: str, data) -> Optional[tuple[Graph, dict, set]]:
    types, attrs = OP_EXAMPLES[name](data.draw)
    cls = OPS[name]
    assume(all(t is None or t.dtype.is_float or t.dtype == DType.Bool
               or cls.operand_spec(k).sample in ("classes", "indices", "lengths") for k, t in enumerate(types)))
    if not any(t is not None and t.dtype.is_float for t in types):
        return None  # Bool operands only (Not, And): nothing to differentiate
    inputs, operands, ints, positive = [], [], {}, set()
    for k, t in enumerate(types):
        if t is None:
            operands.append(None)
            continue
        v = f"t{len(inputs)}"
        if t.dtype.is_float:
            t = t.with_dtype(DType.Float64)
            if name == "SoftmaxCrossEntropy" and k == 1:  # soft labels: distributions, as ORT's gradient assumes
                e = np.exp(np.reshape(data.draw(st.lists(st.floats(-2, 2), min_size=t.numel, max_size=t.numel)),
                                      t.shape))
                ints[v] = e / e.sum(axis=-1, keepdims=True)
        elif t.dtype == DType.Bool:  # a condition or mask
            ints[v] = np.reshape(data.draw(st.lists(st.booleans(), min_size=t.numel, max_size=t.numel)), t.shape)
        elif cls.operand_spec(k).sample == "classes":  # class labels, some ignored, not every one
            C, n = types[k - 1].shape[1], t.numel
            ignore = attrs.get("ignore_index")
            labels = st.integers(0, C - 1) if ignore is None else st.one_of(st.integers(0, C - 1), st.just(ignore))
            ints[v] = np.reshape(data.draw(st.lists(labels, min_size=n, max_size=n)), t.shape)
            assume(attrs.get("reduction", "mean") != "mean" or ignore is None or (ints[v] != ignore).any())
        elif cls.operand_spec(k).sample == "indices":  # gather indices, negative ones too, in -n..n-1
            axes = list(attrs.get("shape") or types[0].shape)
            n = axes[attrs.get("axis", 0) % len(axes)]
            ints[v] = np.reshape(data.draw(st.lists(st.integers(-n, n - 1), min_size=t.numel, max_size=t.numel)),
                                 t.shape).astype(t.dtype.numpy)
        else:  # the sequence layers' lengths (LSTMTraining, GRUTraining)
            S = types[0].shape[0]
            ints[v] = data.draw(st.lists(st.integers(1, S), min_size=t.shape[0], max_size=t.shape[0]))
        if name in ("Log", "Sqrt") or (name == "Div" and k == 1) or (name == "Pow" and k == 0):
            positive.add(v)
        inputs.append(GraphInput(v, t))
        operands.append(v)
    n = cls.num_results(cls(["t0"], operands, attrs).resolved_attrs())
    results = [f"t{len(inputs) + k}" for k in range(n)]
    outputs = [r for k, r in enumerate(results) if k not in cls.NO_GRADIENT_RESULTS]  # (LSTMTraining's CAll/iofc)
    g = Graph(inputs, [cls(results, operands, attrs)], outputs).validate()
    return g, ints, positive


# an op without operands (Constant) has nothing to differentiate: CASES derives through it
@pytest.mark.parametrize("name", sorted(n for n, c in OPS.items() if not c.is_backward and c.OPERANDS))
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(data=st.data())
def test_random_instances_of_each_forward_op(name, data):
    made = _random_op_graph(name, data)
    if made is None:
        return
    g, ints, positive = made
    if not any(g.types[o].dtype.is_float for o in g.outputs):
        return  # Bool results (the comparisons, Not, And): nothing to differentiate
    if name in ("LeakyRelu", "QuickGelu"):  # keep alpha moderate: FD of x * 1e300 loses its digits
        assume(abs(g.ops[0].attrs["alpha"]) < 100)
    op = g.ops[0]  # labels, weights: not differentiable (nor fixed inputs)
    wrt = [v for k, v in enumerate(op.operands) if v is not None and v not in ints and g.types[v].dtype.is_float
           and k not in type(op).NO_GRADIENT_OPERANDS]
    fd_check(g, wrt, positive=positive, ints=ints, seed=data.draw(st.integers(0, 2**16)))


@pytest.mark.parametrize("path", FORWARD_SAMPLES, ids=os.path.basename)
def test_sample_forward_graphs_match_finite_differences(path):
    fd_check(gradir.load(path), directions=3)


def test_gradients_of_a_subset_of_inputs():
    g = gradir.load(os.path.join(ROOT, "samples", "mlp_forward.gir"))
    d = fd_check(g, wrt=["t3", "t1"])
    assert d.graph.outputs and len(d.graph.outputs) == 2


# ---------------------------------------------------------------------------
# structure of derived graphs
# ---------------------------------------------------------------------------
MLP = os.path.join(ROOT, "samples", "mlp_forward.gir")
LSTM_SEQ = os.path.join(ROOT, "samples", "lstm_seq_forward.gir")
CELLS = os.path.join(ROOT, "samples", "lstm_cell_unrolled_forward.gir")


def _names(g: Graph) -> list[str]:
    return [op.op_name for op in g.ops]


def test_input_and_output_order_is_the_contract():
    f = gradir.load(MLP)
    d = derive(f, ["t4", "t0"])
    g = d.graph
    n = len(f.inputs)
    assert [(i.name, i.type) for i in g.inputs[:n]] == [(i.name, i.type) for i in f.inputs]
    assert [i.type for i in g.inputs[n:]] == [f.type_of(o) for o in f.outputs]
    assert [g.type_of(o) for o in g.outputs] == [f.type_of("t4"), f.type_of("t0")]
    assert d.wrt == ["t4", "t0"]
    # default: every floating-point input, in input order
    assert derive(f).wrt == [i.name for i in f.inputs]


def test_derived_graph_validates_and_is_deterministic():
    for path in FORWARD_SAMPLES:
        a = grad(gradir.load(path))
        b = grad(gradir.parse(gradir.load(path).to_text()))
        assert a.to_text() == b.to_text()
        assert gradir.parse(a.to_text()) == a
        a.validate()


def test_lstm_training_derives_exactly_one_lstm_grad():
    for wrt in (None, ["t1"], ["t0", "t6"], ["t4"]):
        g = grad(gradir.load(LSTM_SEQ), wrt)
        assert _names(g).count("LSTMGrad") == 1, wrt
        assert _names(g).count("LSTMTraining") == 1
    # W_out only: the LSTM is not differentiated at all, and only its forward is kept
    g = grad(gradir.load(LSTM_SEQ), ["t6"])
    assert "LSTMGrad" not in _names(g)


def _cell_indices(g: Graph) -> dict[str, set[int]]:
    """GradLSTMCellInput indices per recomputed cell (keyed by its X operand)."""
    out: dict[str, set[int]] = {}
    for op in g.ops:
        if op.op_name == "GradLSTMCellInput":
            out.setdefault(op.operands[2], set()).add(op.attrs["input_index"])
    return out


@pytest.mark.parametrize("wrt, expected", [
    # X_1 t0, X_2 t1, H_0 t2, C_0 t3, W_ih t4, W_hh t5, Bias t6; cell 1 reads t0, cell 2 reads t1
    (["t4"], {"t0": {3}, "t1": {1, 2, 3}}),
    (["t1"], {"t1": {0}}),
    (["t0"], {"t0": {0}, "t1": {1, 2}}),
    (["t2", "t6"], {"t0": {1, 5}, "t1": {1, 2, 5}}),
    (["t3"], {"t0": {2}, "t1": {1, 2}}),
    (None, {"t0": set(range(6)), "t1": set(range(6))}),
])
def test_lstm_cell_emits_only_the_needed_input_indices(wrt, expected):
    g = grad(gradir.load(CELLS), wrt)
    assert _cell_indices(g) == expected
    pairs = [(op.operands[2], op.attrs["input_index"]) for op in g.ops if op.op_name == "GradLSTMCellInput"]
    assert len(pairs) == len(set(pairs))


def test_lstm_cell_omits_a_zero_dC_and_materialises_a_zero_dH():
    g = grad(gradir.load(CELLS))
    last = [op for op in g.ops if op.op_name == "GradLSTMCellInput" and op.operands[2] == "t1"]
    assert all(op.operands[1] is None for op in last)  # C_2 is unused: dC' is `_`
    assert "_" in g.to_text()
    text, _ = CASES["LSTMCell-only-C"]
    g = grad(gradir.parse(text))
    assert "ZerosLike" in _names(g)  # GradLSTMCellInput requires dH'


def test_unreachable_branches_are_never_emitted():
    f = gradir.parse("graph g\ninput t0 : Float32 [3]\ninput t1 : Float32 [3]\n"
                     "t2 = Exp(t0)\nt3 = Sigmoid(t1)\nt4 = Mul(t2, t3)\nt5 = Tanh(t0)\noutput t4, t5\n")
    g = grad(f, ["t1"])
    names = _names(g)
    assert "Tanh" not in names and "TanhGrad" not in names  # t5 does not depend on t1
    assert names.count("Mul") == 1  # dt3 = dt4 * t2, not dt2
    assert "Exp" in names and "Sigmoid" in names  # recomputed: the backward reads t2 and t3
    fd_check(f, ["t1"])
    # an input that reaches no output gets a zero gradient
    g = grad(gradir.parse("input t0 : Float32 [2]\ninput t1 : Float32 [3]\nt2 = Exp(t0)\noutput t2\n"))
    assert _names(g)[-1] == "ZerosLike" and g.outputs[1] == g.ops[-1].results[0]


def test_forward_values_not_read_by_the_backward_are_not_recomputed():
    f = gradir.parse("input t0 : Float32 [3]\nt1 = Relu(t0)\nt2 = Neg(t1)\nt3 = Exp(t2)\nt4 = Log(t3)\n"
                     "output t4\n")
    g = grad(f)
    # Log's backward reads t3 (so Relu, Neg and Exp are recomputed); nothing reads t4 (Log)
    assert _names(g) == ["Relu", "Neg", "Exp", "Div", "Mul", "Neg", "ReluGrad"]


def test_gradients_that_meet_are_summed_once():
    f = gradir.parse("input t0 : Float32 [3]\nt1 = Exp(t0)\nt2 = Tanh(t0)\nt3 = Sigmoid(t0)\n"
                     "t4 = Sum(t1, t2, t3)\noutput t4\n")
    g = grad(f)
    sums = [op for op in g.ops if op.op_name == "Sum" and op.results[0] not in ("t4",)]
    assert len(sums) == 1 and len(sums[0].operands) == 3
    assert g.outputs == sums[0].results


def test_each_gradient_output_is_a_distinct_op_result():
    f = gradir.parse("input t0 : Float32 [3]\ninput t1 : Float32 [3]\nt2 = Add(t0, t1)\noutput t2\n")
    g = grad(f)
    assert len(set(g.outputs)) == 2
    assert not set(g.outputs) & set(g.input_names)
    fd_check(f)


def test_broadcasting_is_undone_once_per_operand():
    f = gradir.parse("input t0 : Float32 [4, 3]\ninput t1 : Float32 [3]\nt2 = Add(t0, t1)\nt3 = Mul(t2, t1)\n"
                     "output t3\n")
    g = grad(f, ["t1"])
    reduce = [op for op in g.ops if op.op_name == "ReduceSumTo"]
    assert len(reduce) == 2  # one per use of t1 (Add's and Mul's), then summed
    assert all(op.operands[1] == "t1" for op in reduce)
    fd_check(f, ["t1"])


# ---------------------------------------------------------------------------
# errors
# ---------------------------------------------------------------------------
def test_an_op_without_a_rule_is_a_located_error_that_names_it():
    text = ("input t0 : Float32 [3]\ninput t1 : Float32 [3]\nt2 = Relu(t0)\n"
            "t3 = ReluGrad(t1, t2)\noutput t3\n")
    f = gradir.parse(text, "second_order.gir")
    with pytest.raises(AutodiffError) as e:
        grad(f)
    msg = str(e.value)
    assert msg.startswith("second_order.gir:4:6: error: cannot differentiate ReluGrad (t3 = ReluGrad(t1, t2)")
    assert "gradient op" in msg
    assert "t3 = ReluGrad(t1, t2)\n         ^^^^^^^^" in msg


def test_an_op_without_a_rule_off_the_path_is_fine():
    f = gradir.parse("input t0 : Float32 [3]\ninput t1 : Float32 [3]\nt2 = Exp(t0)\nt3 = ReluGrad(t1, t1)\n"
                     "output t2, t3\n")
    g = grad(f, ["t0"])
    assert "ReluGrad" not in _names(g)


@pytest.mark.parametrize("wrt, fragment", [
    (["t99"], "wrt: the graph has no value t99, by name or label; the graph's inputs are t0, t1, t2, t3, t4"),
    (["t9"], "mlp_forward.gir:14:1: error: wrt: t9 is computed here (by Add), not an input; gradients are with "
             "respect to the graph's inputs, t0, t1, t2, t3, t4\n    t9 = Add(t8, t4) : Float32 [8, 10]\n    ^^"),
    (["t0", "t0"], "wrt: t0 is listed twice"),
    ([], "wrt is empty"),
])
def test_bad_wrt(wrt, fragment):
    with pytest.raises(AutodiffError, match=re.escape(fragment)):
        grad(gradir.load(MLP), wrt)


def test_mean_over_an_unknown_dimension_is_a_clear_error():
    f = gradir.parse("input t0 : Float32 [?, 4]\nt1 = ReduceMean(t0, axes=[1])\nt2 = ReduceMean(t0)\n"
                     "output t1, t2\n", "mean.gir")
    with pytest.raises(AutodiffError, match=re.escape(
            "mean.gir:3:6: error: cannot differentiate ReduceMean: axis 0 of t0 (Float32 [?, 4]) has unknown "
            "size, so the 1/n of the mean is unknown")):
        grad(f)
    fd_check(gradir.parse("input t0 : Float32 [?, 4]\nt1 = ReduceMean(t0, axes=[1])\noutput t1\n"),
             shapes={"t0": (3, 4)})


def test_integer_inputs_have_no_gradient():
    f = gradir.parse(CASES["LSTMTraining-bidirectional-SL-peepholes"][0])
    assert "t4" not in derive(f).wrt
    with pytest.raises(AutodiffError, match="wrt: t4 has type Int32 \\[3\\]; only floating-point inputs"):
        grad(f, ["t4"])


@pytest.mark.parametrize("result", ["t9", "t10"])
def test_lstm_training_cell_states_and_gates_cannot_carry_a_gradient(result):
    text = CASES["LSTMTraining"][0].replace("output t6, t7, t8", f"output t6, {result}")
    with pytest.raises(AutodiffError) as e:
        grad(gradir.parse(text, "lstm.gir"))
    name = {"t9": "CAll", "t10": "iofc"}[result]
    col = {"t9": 13, "t10": 17}[result]
    assert str(e.value).startswith(
        f"lstm.gir:7:{col}: error: cannot differentiate LSTMTraining through its result {name} ({result}), "
        "which reaches an output: LSTMGrad accepts upstream gradients of HAll, HFinal and CFinal only")


# ---------------------------------------------------------------------------
# samples and the CLI
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("path", FORWARD_SAMPLES, ids=os.path.basename)
def test_checked_in_backward_samples_are_current(path):
    """Regenerate with: for f in samples/*_forward.gir; do gradir grad $f -o ${f%.gir}.grad.gir; done"""
    with open(path[:-4] + ".grad.gir", encoding="utf-8") as f:
        assert f.read() == grad_text(gradir.load(path))


def test_three_sample_forward_graphs_exist():
    names = {os.path.basename(p) for p in FORWARD_SAMPLES}
    assert {"mlp_forward.gir", "lstm_seq_forward.gir", "lstm_cell_unrolled_forward.gir"} <= names
    assert "Softmax" in _names(gradir.load(MLP))
    assert _names(gradir.load(LSTM_SEQ)) == ["LSTMTraining", "MatMul", "LogSoftmax"]
    assert _names(gradir.load(CELLS)) == ["LSTMCell", "LSTMCell"]


def _cli(argv: list[str], capsys) -> tuple[int, str, str]:
    """``gradir ARGV`` through the real CLI."""
    from gradir.cli import main as cli
    rc = cli.main(argv)
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def test_cli_grad_writes_a_graph_that_runs(tmp_path, capsys):
    out = tmp_path / "mlp.grad.gir"
    rc, _, err = _cli(["grad", MLP, "--wrt", "t1,t3", "-o", str(out)], capsys)
    assert rc == 0, err
    text = out.read_text()
    assert text == grad_text(gradir.load(MLP), ["t1", "t3"])
    g = gradir.load(str(out))
    assert [g.type_of(o).shape for o in g.outputs] == [(16, 32), (32, 10)]
    rng = np.random.default_rng(1)
    res = _compile(g).run({i.name: rng.standard_normal(i.type.shape).astype(np.float32) for i in g.inputs})
    assert list(res) == ["grad(t1)", "grad(t3)"]  # each gradient keyed by its label (docs/format.md, "Labels")
    assert all(res[o] is res[f"grad({w})"] for o, w in zip(g.outputs, ["t1", "t3"]))  # or by its value name
    rc, stdout, _ = _cli(["grad", MLP], capsys)
    assert rc == 0 and stdout == grad_text(gradir.load(MLP))


def test_cli_grad_errors_are_reported_not_raised(tmp_path, capsys):
    bad = tmp_path / "bad.gir"
    bad.write_text("input t0 : Float32 [3]\nt1 = Relu(t0)\nt2 = ReluGrad(t1, t0)\noutput t2\n")
    rc, _, err = _cli(["grad", str(bad)], capsys)
    assert rc == 1
    assert err.startswith(f"{bad}:3:6: error: cannot differentiate ReluGrad")
    rc, _, err = _cli(["grad", MLP, "--wrt", "t0,x"], capsys)
    assert rc == 1 and "wrt: the graph has no value x, by name or label" in err
    rc, _, err = _cli(["grad", str(tmp_path / "missing.gir")], capsys)
    assert rc == 1 and "cannot read file" in err


def test_register_cli_adds_grad():
    p = argparse.ArgumentParser()
    register_cli(p.add_subparsers())
    args = p.parse_args(["grad", "x.gir", "--wrt", "t0", "-o", "y.gir"])
    assert (args.file, args.wrt, args.output) == ("x.gir", "t0", "y.gir")


def test_grad_accepts_text_and_rejects_empty_wrt_entries():
    text = "input t0 : Float64 [3]\ninput t1 : Float64 [3]\nt2 = Mul(t0, t1)\noutput t2\n"
    assert gradir.grad(text, wrt=["t0"]).outputs
    with pytest.raises(gradir.AutodiffError, match="empty entry"):
        gradir.grad(text, wrt="t0,,t1")


# ---------------------------------------------------------------------------
# rules derived from class data: GRADIENT, NO_GRADIENT_*, VJP (gradir/ops/vjp.py)
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("forward, backward", [
    ("Relu(t0)", "t3 = ReluGrad(t2, t0)"),
    ("Gelu(t0)", "t3 = GeluGrad(t2, t0)"),
    ("FastGelu(t0)", "t3 = FastGeluGrad(t2, t0)"),
    ("QuickGelu(t0, alpha=-0.7)", "t3 = QuickGeluGrad(t2, t0, alpha=-0.7)"),
    ("LeakyRelu(t0, alpha=0.2)", "t3 = LeakyReluGrad(t2, t0, alpha=0.2)"),  # X, not Y: GRADIENT_OPERANDS
    ("Sigmoid(t0)", "t3 = SigmoidGrad(t2, t1)"),
    ("Tanh(t0)", "t3 = TanhGrad(t2, t1)"),
    ("Softmax(t0, axis=0)", "t3 = SoftmaxGrad_13(t2, t1, axis=0)"),
    ("LogSoftmax(t0)", "t3 = LogSoftmaxGrad_13(t2, t1)"),
])
def test_a_gradient_op_rule_is_derived_from_the_gradient_trait(forward, backward):
    """The ORT activation gradients need no hand rule: GRADIENT(dY, the forward operand or result its operands
    are named after, the attributes it declares), the same lines the hand rules wrote."""
    name = forward.split("(")[0]
    assert OPS[name] not in gradir.autodiff.driver.RULES and gradient_rule(OPS[name]) is not None
    g = grad(gradir.parse(f"input t0 : Float32 [2, 3]\nt1 = {forward}\noutput t1\n"))
    assert backward + " : Float32 [2, 3]" in g.to_text().splitlines()


def test_a_path_from_a_result_without_gradient_to_an_output_is_an_error_from_the_trait(monkeypatch):
    """NO_GRADIENT_RESULTS is read by the driver, not by one op's rule: set on another op, it holds there."""
    text = ('input t0 : Float32 [4, 3]\ninput t1 : Int64 [4]\nt2, t3 = SoftmaxCrossEntropyLoss(t0, t1)\n'
            'output t2, t3\n')
    grad(gradir.parse(text))
    monkeypatch.setattr(OPS["SoftmaxCrossEntropyLoss"], "NO_GRADIENT_RESULTS", (1,))
    with pytest.raises(AutodiffError, match=re.escape(
            "ce.gir:3:5: error: cannot differentiate SoftmaxCrossEntropyLoss through its result log_prob (t3), "
            "which reaches an output: SoftmaxCrossEntropyLossGrad accepts upstream gradients of loss only")):
        grad(gradir.parse(text, "ce.gir"))


def test_a_gradient_through_an_operand_without_gradient_is_a_located_error():
    text = ('input t0 : Float32 [4, 3]\ninput t1 : Int64 [4]\ninput t2 : Float32 [3]\n'
            't3, t4 = SoftmaxCrossEntropyLoss(t0, t1, t2)\noutput t3\n')
    assert OPS["SoftmaxCrossEntropyLoss"].NO_GRADIENT_OPERANDS == (1, 2)
    with pytest.raises(AutodiffError, match=re.escape(
            "ce.gir:4:10: error: cannot differentiate SoftmaxCrossEntropyLoss with respect to its weights (t2): "
            "SoftmaxCrossEntropyLoss is not differentiable in weights; leave the inputs it is computed from out of "
            "wrt (--wrt)")):
        grad(gradir.parse(text, "ce.gir"))
    assert grad(gradir.parse(text), ["t0"]).outputs


@pytest.fixture
def scratch_ops():
    """Op classes a test defines are unregistered after it (with the backward ops their VJP made)."""
    before = set(OPS)
    yield
    for name in set(OPS) - before:
        del OPS[name]


def _define_vjp_ops():
    from gradir.ops.common import UnaryOp
    from gradir.ops.math import broadcast_shapes
    from gradir.ir.op import Attr, InferContext, Op, Operand

    class SoftplusXOp(UnaryOp):
        """log(1 + exp(x)); its VJP reads the forward result Y (sigmoid(x) = 1 - exp(-Y))."""
        ELEMENTWISE = "same"
        FORMULA = "log(1 + exp(X))"
        VJP = {"X": "dY * (1 - exp(-Y))"}

    class ScaledTanhOp(UnaryOp):
        """tanh(beta x)."""
        ELEMENTWISE = "same"
        ATTRS = (Attr("beta", "float", 1.0),)
        FORMULA = "tanh(beta * X)"
        VJP = {"X": "dY * beta * (1 - tanh(beta * X) ** 2)"}

    class HypotOp(Op):
        """sqrt(a^2 + b^2), broadcasting."""
        OPERANDS = (Operand("A"), Operand("B"))
        ELEMENTWISE = "broadcast"
        BROADCASTS = True
        FORMULA = "sqrt(A * A + B * B)"
        VJP = {"A": "dY * A / Y", "B": "dY * B / sqrt(A * A + B * B)"}

        def infer(self, ctx: InferContext):
            ctx.same_dtype(0, 1)
            return [ctx.type(0).with_shape(broadcast_shapes(ctx.type(0).shape, ctx.type(1).shape))]

    return SoftplusXOp, ScaledTanhOp, HypotOp


def test_an_op_with_a_vjp_registers_one_backward_op_per_entry(scratch_ops):
    softplus, scaled, hypot = _define_vjp_ops()
    g = OPS["SoftplusXGrad"]
    assert softplus.VJP_OPS == {"X": g} and g.is_backward and g.FORMULA == softplus.VJP["X"]
    assert [o.name for o in g.OPERANDS] == ["dY", "X", "Y"] and g.LINEAR_IN == (0,) and g.ELEMENTWISE == "same"
    assert [o.name for o in OPS["ScaledTanhGrad"].OPERANDS] == ["dY", "X"]  # Y only where the formula reads it
    assert OPS["ScaledTanhGrad"].ATTRS == scaled.ATTRS
    assert set(hypot.VJP_OPS) == {"A", "B"} and OPS["HypotGrad_A"].ELEMENTWISE == "broadcast"
    assert [o.name for o in OPS["HypotGrad_A"].OPERANDS] == ["dY", "A", "B", "Y"]
    assert [o.name for o in OPS["HypotGrad_B"].OPERANDS] == ["dY", "A", "B"]
    from gradir.tools.docs import op_traits
    assert "its gradient comes from its VJP (`HypotGrad_A`: dA = `dY * A / Y`, `HypotGrad_B`: dB = " in "; ".join(
        op_traits(hypot))


def test_an_op_with_a_vjp_and_no_rule_derives_its_gradient_from_it(scratch_ops):
    _define_vjp_ops()
    text = ("input t0 : Float64 [2, 3]\ninput t1 : Float64 [3]\nt2 = SoftplusX(t0)\nt3 = ScaledTanh(t2, beta=0.5)\n"
            "t4 = Hypot(t3, t1)\noutput t4\n")
    g = grad(gradir.parse(text))
    body = [line.split(" : ")[0] for line in g.to_text().splitlines() if " = " in line]
    assert body[3:] == ["t6 = HypotGrad_A(t5, t3, t1, t4)", "t7 = HypotGrad_B(t5, t3, t1)", "t8 = ReduceSumTo(t7, t1)",
                        "t9 = ScaledTanhGrad(t6, t2, beta=0.5)", "t10 = SoftplusXGrad(t9, t0, t2)"], body
    assert g.outputs == ["t10", "t8"]
    assert gradir.parse(g.to_text()).to_text() == g.to_text()  # the generated ops print and parse back
    assert [o.op_name for o in grad(gradir.parse(text), ["t1"]).ops][-2:] == ["HypotGrad_B", "ReduceSumTo"]


def test_a_vjp_formula_is_the_derivative_of_the_forward_formula(scratch_ops):
    """Each generated op's formula (float64) against central differences of its forward op's formula."""
    from gradir.ir.traits import evaluate_formula
    rng = np.random.default_rng(0)
    for fwd in _define_vjp_ops():
        attrs = {a.name: 0.7 for a in fwd.ATTRS}
        x = {o.name: rng.standard_normal((3, 4)) + 0.5 for o in fwd.OPERANDS}
        y = evaluate_formula(fwd, x, attrs)
        dy = rng.standard_normal(np.shape(y))
        for name, g in fwd.VJP_OPS.items():
            h = 1e-6
            up, down = dict(x, **{name: x[name] + h}), dict(x, **{name: x[name] - h})
            fd = dy * (evaluate_formula(fwd, up, attrs) - evaluate_formula(fwd, down, attrs)) / (2 * h)
            got = evaluate_formula(g, dict(x, dY=dy, Y=y), attrs)
            np.testing.assert_allclose(got, fd, rtol=1e-6, atol=1e-8, err_msg=g.op_name)


def test_a_vjp_without_an_entry_for_an_operand_that_needs_a_gradient_is_a_located_error(scratch_ops):
    from gradir.ir.op import Operand
    from gradir.ops.common import UnaryOp

    class HalfOp(UnaryOp):
        """x / 2, through a second operand's shape."""
        OPERANDS = (Operand("X"), Operand("Z"))
        ELEMENTWISE = "same"
        FORMULA = "X / 2 + 0 * Z"
        VJP = {"X": "dY / 2"}

    f = gradir.parse("input t0 : Float32 [3]\ninput t1 : Float32 [3]\nt2 = Half(t0, t1)\noutput t2\n", "h.gir")
    assert [o.op_name for o in grad(f, ["t0"]).ops] == ["HalfGrad"]
    with pytest.raises(AutodiffError, match=re.escape(
            "h.gir:3:6: error: cannot differentiate Half with respect to its operand Z (t1): its VJP has no entry "
            "for Z")):
        grad(f, ["t1"])


@pytest.mark.parametrize("body, message", [
    ('VJP = {"Z": "dY"}', "VJP has an entry for 'Z', which is not an operand of Bad (its operands: X)"),
    ('VJP = {"X": "dY * foo(X)"}', "VJP['X'] uses 'foo', which is not an operand, an attribute, dY, Y or a formula "
                                   "function: 'dY * foo(X)'"),
    ('VJP = {"X": "dY * (X"}', "VJP['X'] is not a formula: "),
    ('VJP = {"X": 2}', "VJP['X'] must be a formula (a str), got 2"),
    ('VJP = "dY"', "VJP must be a dict of operand name -> formula (a str), got 'dY'"),
    ('ELEMENTWISE = None\n    VJP = {"X": "dY"}', "VJP is for element-wise ops (ELEMENTWISE)"),
])
def test_a_bad_vjp_is_an_op_definition_error_naming_the_op_and_its_file(scratch_ops, body, message):
    from gradir.errors import GradirError, OpDefinitionError
    code = ("from gradir.ops.common import UnaryOp\n"
            f"class BadOp(UnaryOp):\n    ELEMENTWISE = 'same'\n    FORMULA = 'X'\n    {body}\n")
    with pytest.raises(OpDefinitionError) as e:
        exec(compile(code, "myops.py", "exec"), {"__name__": __name__})
    assert isinstance(e.value, GradirError)
    assert str(e.value).startswith(f"myops.py:2:1: error: op Bad: {message}")  # the file and its class line
    assert "Bad" not in OPS and "BadGrad" not in OPS  # unregistered: a fixed definition can run again
    exec(compile(code.replace(body, 'VJP = {"X": "dY"}'), "myops.py", "exec"), {"__name__": __name__})
    assert "Bad" in OPS and "BadGrad" in OPS


def test_a_vjp_whose_backward_op_name_is_taken_is_an_op_definition_error(scratch_ops):
    from gradir.errors import OpDefinitionError
    from gradir.ops.common import UnaryOp
    line = sys._getframe().f_lineno + 4
    with pytest.raises(OpDefinitionError, match=f"^{re.escape(__file__)}:{line}:1: error: op LSTM: its VJP entry "
                                                "for 'X' makes the backward op LSTMGrad, but an op LSTMGrad "
                                                "already exists"):
        class LSTMOp(UnaryOp):
            """Not an LSTM."""
            FORMULA = "X"
            VJP = {"X": "dY"}
    assert "LSTM" not in OPS and OPS["LSTMGrad"].__module__ == "gradir.ops.lstm"


def test_a_bad_vjp_in_a_file_loaded_as_a_module_names_that_file_and_line(scratch_ops, tmp_path):
    """What loading a user's op file does (importlib, with or without a sys.modules entry): the error points
    at the class in that file."""
    import importlib.util
    from gradir.errors import OpDefinitionError
    path = tmp_path / "userops.py"
    path.write_text('from gradir.ops.common import UnaryOp\n\n\nclass WobbleOp(UnaryOp):\n    """x."""\n'
                    '    ELEMENTWISE = "same"\n    FORMULA = "X"\n    VJP = {"W": "dY"}\n')
    spec = importlib.util.spec_from_file_location("userops_a2", path)
    module = importlib.util.module_from_spec(spec)
    with pytest.raises(OpDefinitionError) as e:
        spec.loader.exec_module(module)
    assert str(e.value).startswith(f"{path}:4:1: error: op Wobble: VJP has an entry for 'W', which is not an "
                                   "operand of Wobble (its operands: X)")
    assert "Wobble" not in OPS


def test_a_gradient_op_with_several_results_named_after_the_operands_derives_the_rule(scratch_ops):
    """GRADIENT naming an op whose results are ``d<operand>`` (as ORT's LayerNormalizationGrad's dX, dScale,
    dB) is a whole rule: one op, each result the cotangent of the operand it names."""
    from gradir.ir.op import BackwardOp, Operand
    from gradir.ops import ElementwiseOp

    class ScaleByGradOp(BackwardOp):
        """(dY, X, W) -> (dX, dW)."""
        OPERANDS = (Operand("dY"), Operand("X"), Operand("W"))
        RESULTS = ("dX", "dW")

        def infer(self, ctx):
            return [ctx.type(1), ctx.type(2)]

    class ScaleByOp(ElementwiseOp):
        """X * W, differentiated by one op with two results."""
        OPERANDS = (Operand("X"), Operand("W"))
        FORMULA = "X * W"
        GRADIENT = "ScaleByGrad"

    text = "input t0 : Float64 [2, 3]\ninput t1 : Float64 [2, 3]\nt2 = ScaleBy(t0, t1)\noutput t2\n"
    g = grad(gradir.parse(text))
    body = [line.split(" : ")[0] for line in g.to_text().splitlines() if " = " in line]
    assert body[-1] == "t4, t5 = ScaleByGrad(t3, t0, t1)", body
    assert g.outputs == ["t4", "t5"]
    assert [o.op_name for o in grad(gradir.parse(text), ["t1"]).ops][-1] == "ScaleByGrad"


def test_grad_without_floating_point_inputs_is_a_clear_error(tmp_path, capsys):
    f = tmp_path / "g.gir"
    f.write_text("input t0 : Int32 [3]\nt1 = Neg(t0)\noutput t1\n")
    assert main(["grad", str(f)]) == 1
    err = capsys.readouterr().err
    assert "nothing to differentiate: the graph has no floating-point inputs (its inputs are t0 Int32 [3])" in err
    with pytest.raises(gradir.AutodiffError):
        gradir.grad(gradir.load(f))


def test_a_built_in_ops_generated_backward_op_says_why_it_has_no_onnx_counterpart(scratch_ops):
    """A VJP of a built-in op makes a built-in backward op: it exports only with --custom-domain, and says why
    (a user op's exports in ai.gradir as the user op does)."""
    from gradir.ops import ElementwiseOp, Operand

    class BuiltinLikeOp(ElementwiseOp):
        """x * x."""
        __module__ = "gradir.ops.activation"
        OPERANDS = (Operand("X"),)
        FORMULA = "X * X"
        VJP = {"X": "2 * dY * X"}

    class UserLikeOp(ElementwiseOp):
        """x * x."""
        OPERANDS = (Operand("X"),)
        FORMULA = "X * X"
        VJP = {"X": "2 * dY * X"}

    assert "BuiltinLike's VJP" in OPS["BuiltinLikeGrad"].NO_ONNX
    assert OPS["UserLikeGrad"].NO_ONNX is None
