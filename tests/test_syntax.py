"""Parser and printer: round trips, canonical printing, the fast path vs lark."""

from __future__ import annotations

import glob
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gradir
from gradir import DType, Graph, GraphInput, TensorType
from gradir.errors import Span
from gradir.text.fastparse import FastType, type_from_syntax
from gradir.text.syntax import _statements
from strategies import DECLARED_EXAMPLES, OP_EXAMPLES, graphs
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLES = sorted(glob.glob(os.path.join(ROOT, "samples", "*.gir")))


def _normalize(stmts):
    """Statements from either path, with types resolved, for comparison."""
    out = []
    for st_ in stmts:
        d = dict(st_.data)
        if "type" in d:
            d["type"] = _norm_type(d["type"])
        if d.get("types") is not None:
            d["types"] = [_norm_type(t) for t in d["types"]]
        out.append((st_.kind, d))
    return out


def _norm_type(t):
    if isinstance(t, FastType):
        return (t.type, t.span)
    diags = []
    return (type_from_syntax(t, None, diags), t.span, [x.message for x in diags])


def _same(a, b):
    na, nb = _normalize(a), _normalize(b)
    # lark-built types carry a diagnostics list (always empty for valid types)
    strip = lambda s: [(k, {kk: ([x[:2] for x in v] if kk == "types" and v else (v[:2] if kk == "type" else v))
                            for kk, v in d.items()}) for k, d in s]  # noqa: E731
    sa, sb = strip(na), strip(nb)
    return sa == sb or repr(sa) == repr(sb)  # a Constant's nan is never == another nan


def test_samples_exist_and_start_with_a_comment():
    assert len(SAMPLES) >= 6
    for path in SAMPLES:
        with open(path, encoding="utf-8") as f:
            assert f.readline().startswith("# "), path


@pytest.mark.parametrize("path", SAMPLES, ids=os.path.basename)
def test_sample_round_trip_is_stable(path):
    g = gradir.load(path)
    text = g.to_text()
    g2 = gradir.parse(text)
    assert g2 == g
    assert g2.to_text() == text
    # the fast path and lark agree on the sample as written and in canonical form
    src = open(path, encoding="utf-8").read()
    assert _same(_statements(src)[0], _statements(src, fast=False)[0])
    assert _same(_statements(text)[0], _statements(text, fast=False)[0])


@settings(max_examples=5, deadline=None)
@given(st.data())
def test_every_registered_op_has_a_random_example(data):
    """Written in strategies.py or derived from the op's ``Op.example``: every op draws valid instances."""
    for name in sorted(gradir.OPS):
        if name in DECLARED_EXAMPLES:
            continue
        cls = gradir.OPS[name]
        types, attrs = OP_EXAMPLES[name](data.draw)
        operands = [None if t is None else f"t{k}" for k, t in enumerate(types)]
        n = cls.num_results(cls(["t99"], operands, attrs).resolved_attrs())
        op = cls([f"t{100 + j}" for j in range(n)], operands, attrs)
        Graph([GraphInput(f"t{k}", t) for k, t in enumerate(types) if t is not None], [op], op.results).validate()


@settings(max_examples=200, deadline=None)
@given(graphs(labels="odd"))
def test_print_parse_print_is_stable(g: Graph):
    text = g.to_text()
    g2 = gradir.parse(text)
    assert g2 == g
    assert g2.to_text() == text
    assert gradir.parse(g2.to_text()).to_text() == text
    # the regex fast path builds exactly what lark builds
    assert _same(_statements(text)[0], _statements(text, fast=False)[0])


SPACING = st.sampled_from(["", " ", "  ", "\t"])


@settings(max_examples=100, deadline=None)
@given(graphs(max_ops=3, labels="plain"), st.data())
def test_free_spacing_comments_and_omitted_types_parse_the_same(g: Graph, data):
    """Hand-written variants (odd spacing, comments, no types, CRLF) mean the same graph."""
    lines = g.to_text().splitlines()
    out = []
    for line in lines:
        if " = " in line and " : " in line and " = Constant(" not in line and data.draw(st.booleans()):
            line = line.split(" : ")[0]  # omit the types: inferred (a Constant's are required)
        sp = data.draw(SPACING)
        line = line.replace(", ", "," + sp).replace(" = ", sp + "=" + sp)
        if data.draw(st.booleans()):
            line += "   # a comment"
        out.append(line)
        if data.draw(st.booleans()):
            out.append("")
    nl = data.draw(st.sampled_from(["\n", "\r\n"]))
    text = nl.join(out) + nl
    g2 = gradir.parse(text)
    assert g2 == g
    printed = g2.to_text()
    assert _code(printed) == g.to_text()
    assert printed.count("# a comment") == text.count("# a comment")
    assert _same(_statements(text)[0], _statements(text, fast=False)[0])


def _code(text: str) -> str:
    """``text`` without its comments and blank lines (for canonical text with no '#' in a string)."""
    return "".join(line.partition("#")[0].rstrip() + "\n" for line in text.split("\n") if line.partition("#")[0])


def test_types_are_inferred_when_omitted():
    g = gradir.parse("input t0 : Float32 [2, 3]\ninput t1 : Float32 [3, 4]\nt2 = MatMul(t0, t1)\n"
                     "t3 = Transpose(t2)\noutput t3\n")
    assert g.ops[1].result_types == [TensorType(DType.Float32, [4, 2])]
    assert "t3 = Transpose(t2) : Float32 [4, 2]" in g.to_text()


@pytest.mark.parametrize("value,text", [
    (0.001, "0.001"), (1.702, "1.702"), (1e-05, "1e-05"), (0.1 + 0.2, "0.30000000000000004"),
    (1.0, "1.0"), (-2.5, "-2.5"), (1e300, "1e+300"), (float("inf"), "inf"),
])
def test_float_attributes_print_shortest_round_trip(value, text):
    g = gradir.parse(f"input t0 : Float64 [3]\nt1 = Scale(t0, factor={text})\noutput t1\n")
    assert g.ops[0].attrs["factor"] == value
    printed = g.to_text()
    assert f"factor={text})" in printed
    assert gradir.parse(printed).ops[0].attrs["factor"] == value


def test_defaults_are_not_printed_and_ints_coerce_to_float():
    g = gradir.parse("input t0 : Float32 [3]\nt1 = LeakyRelu(t0, alpha=0.01)\nt2 = QuickGelu(t0, alpha=2)\n"
                     "output t1, t2\n")
    text = g.to_text()
    assert "t1 = LeakyRelu(t0) : Float32 [3]" in text
    assert "t2 = QuickGelu(t0, alpha=2.0) : Float32 [3]" in text


def test_scalar_unknown_dims_and_strings():
    g = gradir.parse('input t0 : Float64 []\ninput t1 : Float32 [?, 4]\nt2 = Neg(t0)\nt3 = Softmax(t1)\n'
                     'output t2, t3\n')
    assert "input t0 : Float64 scalar" in g.to_text()
    assert "t3 = Softmax(t1) : Float32 [?, 4]" in g.to_text()
    text = ('input t0 : Float32 [3, 2, 4]\ninput t1 : Float32 [2, 16, 4]\ninput t2 : Float32 [2, 16, 4]\n'
            't3, t4, t5, t6, t7 = LSTMTraining(t0, t1, t2, hidden_size=4, direction="bidirectional", '
            'activations=["sigmoid", "tanh", "tanh", "sigmoid", "tanh", "tanh"])\noutput t3\n')
    g = gradir.parse(text)
    assert g.ops[0].attrs["activations"] == ("sigmoid", "tanh", "tanh") * 2
    assert gradir.parse(g.to_text()) == g


def test_string_escapes_round_trip():
    # an unsupported direction with escapes: the message shows it, and printing re-escapes it
    with pytest.raises(gradir.VerifyError) as e:
        gradir.parse('input t0 : Float32 [1, 1, 1]\ninput t1 : Float32 [1, 4, 1]\n'
                     't2, t3, t4, t5, t6 = LSTMTraining(t0, t1, t1, hidden_size=1, direction="a\\"b\\\\c")\n'
                     'output t2\n')
    assert 'got "a\\"b\\\\c"' in str(e.value)


def test_graph_api_and_str():
    g = gradir.load(SAMPLES[0])
    op = g.ops[0]
    assert str(op) == op.to_string()
    assert op.to_string() in g.to_text()
    assert repr(g).startswith("<Graph")


def test_op_names_print_without_op_suffix():
    from gradir.ops.lstm import GradLSTMCellInputOp
    from gradir.ops.activation import ReluGradOp
    assert GradLSTMCellInputOp.op_name == "GradLSTMCellInput"
    assert ReluGradOp.op_name == "ReluGrad"
    assert issubclass(ReluGradOp, gradir.BackwardOp) and ReluGradOp.is_backward
    assert not gradir.OPS["Relu"].is_backward


def test_non_editable_grammar_is_packaged():
    from gradir.text.syntax import grammar_text
    assert "op_decl" in grammar_text()


def test_fast_path_scalar_type_span_covers_scalar_on_first_sight():
    """A scalar type not yet in the fast path's cache spanned only its dtype (lark: `Float32 scalar`)."""
    from gradir.text import fastparse
    text = "input t0 : Float64 scalar\noutput t0\n"
    fastparse._FAST_TYPES.clear()
    st = _statements(text)[0][0]
    assert st.data["type"].span == Span(1, 12, 26)
    assert _same(_statements(text)[0], _statements(text, fast=False)[0])


LSTM = """input t0 : Float32 [3, 2, 4]
input t1 : Float32 [1, 20, 4]
input t2 : Float32 [1, 20, 5]
t3, t4, t5, t6, t7 = LSTMTraining(t0, t1, t2, hidden_size=5, activations={acts})
output t3
"""


@pytest.mark.parametrize("acts", ['["Sigmoid", "Tanh", "Tanh"]', '["SIGMOID", "tanh", "TaNh"]'])
def test_lstm_activations_are_case_insensitive_and_print_canonically(acts):
    g = gradir.parse(LSTM.format(acts=acts))
    assert 'activations=["sigmoid", "tanh", "tanh"]' in g.to_text()
    feeds = {i.name: np.full(i.type.shape, 0.1, np.float32) for i in g.inputs}
    ref = gradir.compile(gradir.parse(LSTM.format(acts='["sigmoid", "tanh", "tanh"]'))).run(feeds)
    np.testing.assert_array_equal(gradir.compile(g).run(feeds)["t3"], ref["t3"])


def test_many_results_verify_in_linear_time():
    from complexity import grows_linearly

    def verify(n: int):
        res = ", ".join(f"t{k + 1}" for k in range(n))
        text = f"input t0 : Float32 [2]\n{res} = Sum(t0)\noutput t1\n"

        def parse() -> None:
            with pytest.raises(gradir.VerifyError):
                gradir.parse(text)
        return parse
    grows_linearly(verify, 2_000)  # lines executed, not seconds
    verify(80_000)()


@pytest.mark.parametrize("where", ["before the shape", "after the type", "before a stray token"])
def test_long_runs_of_spaces_parse_in_linear_time(where):
    sp = " " * 64_000
    line = {"before the shape": f"t1 = Relu(t0) : Float32{sp}[2]",
            "after the type": f"t1 = Relu(t0) : Float32 [2]{sp}",
            "before a stray token": f"t1 = Relu(t0) : Float32 [2]{sp}x"}[where]
    from complexity import cpu_seconds

    def parse() -> None:
        try:
            gradir.parse(f"input t0 : Float32 [2]\n{line}\noutput t1\n")
        except gradir.ParseError:
            pass
    assert cpu_seconds(parse) < 1.0  # regular expressions (C): this process's CPU time, not the wall clock


def test_an_attribute_past_the_int_str_limit_is_described_not_printed():
    """``GraphBuilder.Add(x, x, axis=10**5000)`` and ``Op.to_string`` raised ValueError while
    formatting the huge int for the error message (Python refuses str() past 4300 digits)."""
    b = gradir.GraphBuilder()
    x = b.input("Float32", [2])
    with pytest.raises(gradir.BuilderError, match="Relu.*an int of 16610 bits"):
        b.Relu(x, axis=10 ** 5000)
    op = gradir.OPS["Softmax"](["t1"], ["t0"], {"axis": 10 ** 5000})
    assert op.to_string() == "t1 = Softmax(t0, axis=an int of 16610 bits)"
    t0 = [("t0", gradir.TensorType("Float32", [2]))]
    with pytest.raises(gradir.VerifyError, match="axis expects a 64-bit integer, got an int of 16610 bits"):
        gradir.Graph(t0, [op], ["t1"]).validate()
    with pytest.raises(gradir.VerifyError, match="axis expects a 64-bit integer, got -9223372036854775809"):
        gradir.Graph(t0, [gradir.OPS["Softmax"](["t1"], ["t0"], {"axis": -(1 << 63) - 1})], ["t1"]).validate()
    scale = gradir.OPS["Scale"](["t1"], ["t0"], {"factor": 10 ** 400})
    with pytest.raises(gradir.VerifyError, match="factor expects a number within the Float64 range, got 1000"):
        gradir.Graph(t0, [scale], ["t1"]).validate()


def test_a_raw_tab_in_a_string_reads_the_same_on_both_parse_paths():
    from gradir.text.syntax import _statements
    text = 'input t0 : Float32 [2]\nt1 = LeakyRelu(t0, alpha=0.5)\noutput t1 "a\tb"\n'
    fast, slow = _statements(text), _statements(text, fast=False)
    assert fast.errors == slow.errors == []
    from test_syntax import _same
    assert _same(fast.stmts, slow.stmts)
    assert [st.data.get("labels") for st in fast.stmts] == [st.data.get("labels") for st in slow.stmts]
    import gradir
    assert 'output t1 "a\\tb"' in gradir.parse(text).to_text()
