"""GraphBuilder: generated op methods, operators, errors at the offending call,
and equality with the same graph parsed from text."""

from __future__ import annotations

import inspect
import os

import pytest

import gradir
from gradir import OPS, TensorType
from gradir.autodiff.driver import grad
from gradir.ops.builder import BuilderError, GraphBuilder, Value
from gradir.ir.op import Attr, Operand
from gradir.ops.common import UnaryOp
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def sample(name: str) -> gradir.Graph:
    return gradir.load(os.path.join(ROOT, "samples", name))


# -- the three sample forward graphs, built in Python ------------------------------
def build_mlp() -> gradir.Graph:
    b = GraphBuilder("mlp")
    x = b.input("Float32", [8, 16])
    w1, b1 = b.input("Float32", [16, 32]), b.input("Float32", [32])
    w2, b2 = b.input("Float32", [32, 10]), b.input("Float32", [10])
    h = b.Relu(x @ w1 + b1)
    b.output(b.Softmax(h @ w2 + b2))
    return b.build()


def build_lstm_seq() -> gradir.Graph:
    b = GraphBuilder("lstm_seq")
    x = b.input("Float32", [6, 4, 8])
    w, r, bias = b.input("Float32", [1, 64, 8]), b.input("Float32", [1, 64, 16]), b.input("Float32", [1, 128])
    h0, c0 = b.input("Float32", [1, 4, 16]), b.input("Float32", [1, 4, 16])
    w_out = b.input("Float32", [16, 10])
    hall, hfinal, cfinal, call, iofc = b.LSTMTraining(x, w, r, bias, None, h0, c0, hidden_size=16)
    b.output(b.LogSoftmax(hall @ w_out))
    return b.build()


def build_cells() -> gradir.Graph:
    b = GraphBuilder("lstm_cell_unrolled")
    x1, x2 = b.input("Float32", [4, 8]), b.input("Float32", [4, 8])
    h0, c0 = b.input("Float32", [4, 16]), b.input("Float32", [4, 16])
    w_ih, w_hh, bias = b.input("Float32", [64, 8]), b.input("Float32", [64, 16]), b.input("Float32", [64])
    h1, c1 = b.LSTMCell(x1, h0, c0, w_ih, w_hh, bias, hidden_size=16)
    h2, c2 = b.LSTMCell(x2, h1, c1, w_ih, w_hh, bias, hidden_size=16)
    b.output(h1, h2)
    return b.build()


@pytest.mark.parametrize("build, name", [(build_mlp, "mlp_forward.gir"), (build_lstm_seq, "lstm_seq_forward.gir"),
                                         (build_cells, "lstm_cell_unrolled_forward.gir")])
def test_built_graph_equals_the_parsed_sample_and_prints_identically(build, name):
    built, parsed = build(), sample(name)
    assert built == parsed
    assert parsed.trivia and built.trivia is None  # the sample's comments are not part of the graph
    parsed.trivia = None
    assert built.to_text() == parsed.to_text()
    assert gradir.parse(built.to_text()) == built
    # and the derived graphs agree too
    assert grad(built).to_text() == grad(parsed).to_text()


def test_operators_and_scalars():
    b = GraphBuilder()
    x, y = b.input("Float64", [2, 3]), b.input("Float64", [3])
    m = b.input("Float64", [3, 4])
    outs = [x + y, x - y, x * y, x / y, x @ m, -x, y + x, x * 2.0, 3 * x, x / 4.0]
    b.output(*outs)
    text = b.build().to_text()
    for line in ["t3 = Add(t0, t1)", "t4 = Sub(t0, t1)", "t5 = Mul(t0, t1)", "t6 = Div(t0, t1)",
                 "t7 = MatMul(t0, t2) : Float64 [2, 4]", "t8 = Neg(t0)", "t9 = Add(t1, t0)",
                 "t10 = Scale(t0, factor=2.0)", "t11 = Scale(t0, factor=3.0)", "t12 = Scale(t0, factor=0.25)"]:
        assert line in text
    assert [v.shape for v in outs[:2]] == [(2, 3), (2, 3)]
    assert repr(outs[4]) == "<Value t7 : Float64 [2, 4]>" and str(outs[4]) == "t7"


def test_optional_operands_attributes_and_multiple_results():
    b = GraphBuilder("g")
    x = b.input("Float32", [3, 2, 4])
    w, r = b.input("Float32", [2, 12, 4]), b.input("Float32", [2, 12, 3])
    sl = b.input("Int32", [2])
    res = b.LSTMTraining(x, w, r, None, sl, hidden_size=3, direction="bidirectional")
    assert isinstance(res, tuple) and len(res) == 5 and all(isinstance(v, Value) for v in res)
    assert res[0].type == TensorType("Float32", [3, 2, 2, 3])
    h = b.input("Float32", [2, 3])
    cell = [b.input("Float32", s) for s in ([2, 4], [2, 3], [2, 3], [12, 4], [12, 3], [12])]
    fused = b.GradLSTMCellInputFused(h, None, *cell, input_indices=[5, 0], hidden_size=3)
    assert [v.shape for v in fused] == [(12,), (2, 4)]
    y = b.LeakyRelu(x, alpha=2)  # an int where a float is expected prints as a float
    b.output(res[0], *fused, y)
    text = b.build().to_text()
    assert "LSTMTraining(t0, t1, t2, _, t3, hidden_size=3, direction=\"bidirectional\")" in text
    assert "GradLSTMCellInputFused(t9, _, t10, t11, t12, t13, t14, t15, input_indices=[5, 0], hidden_size=3)" in text
    assert "LeakyRelu(t0, alpha=2.0)" in text


def test_every_registered_op_has_a_documented_method():
    for name, cls in OPS.items():
        method = getattr(GraphBuilder, name)
        assert method.__name__ == name
        assert cls.signature() in method.__doc__
        params = inspect.signature(method).parameters
        for a in cls.ATTRS:
            p = params[a.name]
            assert p.kind is inspect.Parameter.KEYWORD_ONLY
            want = inspect.Parameter.empty if a.required else (list(a.default) if isinstance(a.default, tuple)
                                                                else a.default)
            assert p.default == want, (name, a.name)
    sig = inspect.signature(GraphBuilder.LeakyRelu)
    assert str(sig) == "(self, X, /, *, alpha=0.01)"
    assert "alpha: float, default 0.01" in GraphBuilder.LeakyRelu.__doc__
    assert str(inspect.signature(GraphBuilder.Sum)) == "(self, /, *X)"


def test_a_newly_registered_op_gets_a_method_without_extra_code():
    class SquarePlusOneOp(UnaryOp):
        """x * x + 1 (a test op)."""

        OPERANDS = (Operand("X", doc="anything"),)
        ATTRS = (Attr("k", "int", 1, doc="unused"),)
        FORMULA = "X * X + 1"

    try:
        b = GraphBuilder()
        x = b.input("Float32", [2])
        y = b.SquarePlusOne(x, k=3)
        assert y.type == x.type
        assert "k: int, default 1; unused" in GraphBuilder.SquarePlusOne.__doc__
        assert "SquarePlusOne" in dir(b)
        b.output(y)
        assert "t1 = SquarePlusOne(t0, k=3) : Float32 [2]" in b.build().to_text()
    finally:  # keep the registry as it was for the other tests
        OPS.pop("SquarePlusOne", None)
        if "SquarePlusOne" in GraphBuilder.__dict__:
            delattr(GraphBuilder, "SquarePlusOne")


# -- mistakes raise at the offending call and say what is wrong ------------------------
def _err(fn) -> str:
    with pytest.raises(BuilderError) as e:
        fn()
    assert isinstance(e.value, gradir.GradirError)
    return str(e.value)


def test_mistakes_name_the_op_the_operand_and_expected_vs_given():
    b = GraphBuilder("m")
    x = b.input("Float32", [4, 16])
    w = b.input("Float32", [8, 4])
    i = b.input("Int32", [4, 16])
    assert _err(lambda: x @ w) == ("<GraphBuilder m>: error: t0 @ t1: MatMul: inner dimensions differ: [4, 16] @ "
                                   "[8, 4] (16 vs 8) (operands: t0 : Float32 [4, 16], t1 : Float32 [8, 4])")
    assert "Add: operand B (t2) has dtype Int32 but A (t0) has Float32" in _err(lambda: x + i)
    assert "Relu(t0, t0): Relu takes 1 operand (X), got 2" in _err(lambda: b.Relu(x, x))
    assert "Softmax(t0, axs=1): Softmax has no attribute 'axs'; did you mean 'axis'?" in \
        _err(lambda: b.Softmax(x, axs=1))
    assert "Softmax(t0, axis=2): Softmax: axis 2 is out of range for rank 2" in _err(lambda: b.Softmax(x, axis=2))
    assert "LSTMCell: attribute 'hidden_size' (int, >= 1) is required" in \
        _err(lambda: b.LSTMCell(x, x, x, x, x, x))
    assert "LeakyRelu(t0, alpha=\"big\"): LeakyRelu: attribute alpha expects a number, got \"big\"" in \
        _err(lambda: b.LeakyRelu(x, alpha="big"))
    assert "Relu(3): operand X must be a gradir Value, got 3 (int)" in _err(lambda: b.Relu(3))
    assert "t0 + 1e+39: value 1e+39 does not fit Float32" in _err(lambda: x + 1e39)
    assert "t0 + 'a' (str): both sides of + must be gradir values or Python numbers" in _err(lambda: x + "a")
    other = GraphBuilder().input("Float32", [4, 16])
    assert "Add(t0, t0): operand B t0 belongs to a different GraphBuilder" in _err(lambda: b.Add(x, other))
    assert "unknown dtype 'Float33'" in _err(lambda: b.input("Float33", [2]))
    assert "dimension -1 is not a positive integer" in _err(lambda: b.input("Float32", [-1]))
    assert "the shape is missing" in _err(lambda: b.input("Float32"))
    assert "unknown op 'Rleu'; did you mean 'Relu'?" in _err(lambda: b.apply("Rleu", x))
    assert "build(): the graph has no outputs" in _err(b.build)
    b.output(x)
    assert "output(): t0 is already an output" in _err(lambda: b.output(x))
    assert "graph name '1x' is not an identifier" in _err(lambda: GraphBuilder("1x"))
    # a failed call adds nothing: names stay dense
    y = b.Relu(x)
    assert y.name == "t3"


def test_build_returns_an_independent_validated_graph():
    b = GraphBuilder()
    x = b.input("Float32", ["?", 3])
    b.output(b.Tanh(x))
    g1 = b.build()
    b.output(b.Exp(x))
    g2 = b.build()
    assert len(g1.ops) == 1 and len(g2.ops) == 2
    assert g1.to_text() == "input t0 : Float32 [?, 3]\nt1 = Tanh(t0) : Float32 [?, 3]\noutput t1\n"
    assert gradir.parse(g2.to_text()) == g2


GIR = "input t0 : Float32 [2, 3]\ninput t1 : Float32 [3]\nt2 = Add(t0, t1)\nt3 = Tanh(t2)\noutput t3\n"


def test_grad_wrt_a_0d_array_and_builder_apply_of_a_non_str():
    """``grad(g, wrt=np.array(1))`` iterated a 0-d array and ``GraphBuilder.apply([])`` looked a list
    up in the op registry: TypeErrors, now ArgumentError / BuilderError."""
    with pytest.raises(gradir.ArgumentError, match=r"wrt must be a list of input names .*, got array\(1\)"):
        gradir.grad(GIR, wrt=np.array(1))
    with pytest.raises(gradir.ArgumentError, match="wrt must be a list of input names .*, got 3"):
        gradir.grad(GIR, wrt=3)
    b = gradir.GraphBuilder()
    x = b.input("Float32", [2])
    with pytest.raises(gradir.BuilderError, match=r"apply\(\): the op name is a str like 'Relu', got \[\] \(list\)"):
        b.apply([], x)
    with pytest.raises(gradir.BuilderError, match="got an int of 16610 bits"):
        b.apply(10 ** 5000, x)
