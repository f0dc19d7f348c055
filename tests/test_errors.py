"""Malformed files: each gives located, caret-marked errors, never a traceback."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gradir
from gradir import GradirError, ParseError, VerifyError
from gradir.cli.main import main

HEAD = "input t0 : Float32 [2, 3]\ninput t1 : Float32 [2, 3]\n"

# (name, text, expected line, expected col, message fragment)
CASES = [
    ("syntax: missing paren", HEAD + "t2 = ReluGrad(t0, t1\noutput t2\n", 3, 21, "expected"),
    ("syntax: stray token", HEAD + "t2 = ReluGrad(t0, t1) extra\noutput t2\n", 3, 23, "unexpected 'extra'"),
    ("syntax: bad character", HEAD + "t2 = ReluGrad(t0, t1) @\noutput t2\n", 3, 23, "unexpected '@'"),
    ("syntax: missing colon", "input t0 Float32 [2]\n", 1, 10, "expected one of ':', a string"),
    ("syntax: unterminated string", HEAD + 't2 = Relu(t0, mode="x)\noutput t2\n', 3, 20, "unterminated string"),
    ("bad value name", "input x0 : Float32 [2]\n", 1, 7, "unexpected"),
    ("unknown op", HEAD + "t2 = ReluGard(t0, t1)\noutput t2\n", 3, 6, "unknown op 'ReluGard'; did you mean 'ReluGrad'?"),
    ("unknown op, case", HEAD + "t2 = relugrad(t0, t1)\noutput t2\n", 3, 6, "did you mean 'ReluGrad'?"),
    ("redefinition", HEAD + "t2 = Relu(t0)\nt2 = Relu(t1)\noutput t2\n", 4, 1, "t2 is already defined (at line 3)"),
    ("input redefined", HEAD + "input t1 : Float32 [2]\nt2 = Relu(t0)\noutput t2\n", 3, 7, "t1 is already defined"),
    ("use before def", HEAD + "t2 = Relu(t3)\nt3 = Relu(t0)\noutput t2\n", 3, 11, "t3 is used before it is defined (at line 4)"),
    ("undefined", HEAD + "t2 = Relu(t9)\noutput t2\n", 3, 11, "t9 is not defined"),
    ("too few operands", HEAD + "t2 = ReluGrad(t0)\noutput t2\n", 3, 6, "ReluGrad takes 2 operands (dY, X), got 1"),
    ("too many operands", HEAD + "t2 = Relu(t0, t1)\noutput t2\n", 3, 15, "Relu takes 1 operand (X), got 2"),
    ("hole not optional", HEAD + "t2 = ReluGrad(_, t1)\noutput t2\n", 3, 15, "operand dY is required; '_' is only allowed for optional operands"),
    ("unknown attribute", HEAD + "t2 = LeakyRelu(t0, alpah=0.2)\noutput t2\n", 3, 20, "has no attribute 'alpah'; did you mean 'alpha'?"),
    ("attribute kind", HEAD + 't2 = LeakyRelu(t0, alpha="big")\noutput t2\n', 3, 20, "attribute alpha expects a number"),
    ("alpha not finite", HEAD + "t2 = QuickGelu(t0, alpha=nan)\noutput t2\n", 3, 20,
     "attribute alpha must be a finite number with |alpha| <= 1e+38"),
    ("attribute twice", HEAD + "t2 = LeakyRelu(t0, alpha=0.1, alpha=0.2)\noutput t2\n", 3, 31, "attribute 'alpha' is given twice"),
    ("axis out of range", HEAD + "t2 = SoftmaxGrad_13(t0, t1, axis=3)\noutput t2\n", 3, 29, "SoftmaxGrad_13: axis 3 is out of range for rank 2"),
    ("input_index range", "input t0 : Float32 [1, 1]\ninput t1 : Float32 [4, 1]\ninput t2 : Float32 [4]\n"
     "t3 = GradLSTMCellInput(t0, _, t0, t0, t0, t1, t1, t2, input_index=6, hidden_size=1)\noutput t3\n",
     4, 55, "attribute input_index must be in 0..5, got 6"),
    ("direction value", "input t0 : Float32 [1, 1, 1]\ninput t1 : Float32 [1, 4, 1]\n"
     't2, t3, t4, t5, t6 = LSTMTraining(t0, t1, t1, hidden_size=1, direction="sideways")\noutput t2\n',
     3, 62, 'must be one of "forward", "reverse", "bidirectional", got "sideways"'),
    ("clip unsupported", "input t0 : Float32 [1, 1, 1]\ninput t1 : Float32 [1, 4, 1]\n"
     "t2, t3, t4, t5, t6 = LSTMTraining(t0, t1, t1, hidden_size=1, clip=5.0)\noutput t2\n",
     3, 62, "clip is not supported"),
    ("input_forget unsupported", "input t0 : Float32 [1, 1, 1]\ninput t1 : Float32 [1, 4, 1]\n"
     "t2, t3, t4, t5, t6 = LSTMTraining(t0, t1, t1, hidden_size=1, input_forget=1)\noutput t2\n",
     3, 62, "attribute input_forget=1 (coupled input and forget gates) is not supported; only input_forget=0 is"),
    ("activations unsupported", "input t0 : Float32 [1, 1, 1]\ninput t1 : Float32 [1, 4, 1]\n"
     't2, t3, t4, t5, t6 = LSTMTraining(t0, t1, t1, hidden_size=1, activations=["relu", "tanh", "tanh"])\noutput t2\n',
     3, 62, 'only activations=["sigmoid", "tanh", "tanh"]'),
    ("hidden_size disagrees", "input t0 : Float32 [1, 1, 1]\ninput t1 : Float32 [1, 4, 1]\n"
     "t2, t3, t4, t5, t6 = LSTMTraining(t0, t1, t1, hidden_size=2)\noutput t2\n",
     3, 39, "has shape [1, 4, 1]; expected [1, 8, 1] (hidden_size=2"),
    ("missing required attribute", "input t0 : Float32 [1, 1, 1]\ninput t1 : Float32 [1, 4, 1]\n"
     "t2, t3, t4, t5, t6 = LSTMTraining(t0, t1, t1)\noutput t2\n", 3, 22, "attribute 'hidden_size' (int, >= 1) is required"),
    ("wrong result count", HEAD + "t2, t3 = Relu(t0)\noutput t2\n", 3, 1, "Relu has 1 result (Y), but 2 are assigned"),
    ("shape mismatch", "input t0 : Float32 [2, 3]\ninput t1 : Float32 [3, 2]\nt2 = ReluGrad(t0, t1)\noutput t2\n",
     3, 19, "operand X (t1) has shape [3, 2] but dY (t0) has [2, 3]; they must be equal"),
    ("dtype mismatch", "input t0 : Float32 [2]\ninput t1 : Float64 [2]\nt2 = Add(t0, t1)\noutput t2\n",
     3, 14, "operand B (t1) has dtype Float64 but A (t0) has Float32"),
    ("int dtype for activation", "input t0 : Int32 [2]\nt1 = Relu(t0)\noutput t1\n", 2, 11, "has dtype Int32; expected Float32 or Float64"),
    ("broadcast", "input t0 : Float32 [2, 3]\ninput t1 : Float32 [4]\nt2 = Add(t0, t1)\noutput t2\n",
     3, 14, "shapes [2, 3] (t0) and [4] (t1) cannot be broadcast together"),
    ("matmul inner", HEAD + "t2 = MatMul(t0, t1)\noutput t2\n", 3, 17, "inner dimensions differ: [2, 3] @ [2, 3] (3 vs 2)"),
    ("declared type", HEAD + "t2 = Relu(t0) : Float32 [3, 2]\noutput t2\n", 3, 17, "t2: declared type Float32 [3, 2] does not match the inferred type Float32 [2, 3]"),
    ("unknown dtype", "input t0 : Float16 [2]\nt1 = Relu(t0)\noutput t1\n", 1, 12, "unknown dtype 'Float16'; expected one of Float32, Float64, Int32, Int64, Bool"),
    ("zero dim", "input t0 : Float32 [0, 2]\noutput t0\n", 1, 21, "dimension 0 is not a positive integer or '?'"),
    ("negative dim", "input t0 : Float32 [-2]\noutput t0\n", 1, 21, "dimension -2 is not a positive integer"),
    ("output undefined", HEAD + "output t7\n", 3, 8, "output t7 is not defined"),
    ("output twice", HEAD + "output t0, t0\n", 3, 12, "t0 is listed as an output twice"),
    ("no outputs", HEAD, 2, 1, "graph has no outputs; add a line 'output tN'"),
    ("empty file", "", 1, 1, "empty graph"),
    ("only comments", "# nothing here\n\n", 1, 1, "empty graph"),
    ("second header", "graph a\ngraph b\ninput t0 : Float32 [1]\noutput t0\n", 2, 7, "second graph header"),
    ("header not first", "input t0 : Float32 [1]\ngraph a\noutput t0\n", 2, 7, "the graph header must be the first statement"),
    ("reshape", HEAD + "t2 = Reshape(t0, shape=[4, -1])\noutput t2\n", 3, 18, "cannot reshape Float32 [2, 3] (6 elements)"),
    ("perm", HEAD + "t2 = Transpose(t0, perm=[0, 0])\noutput t2\n", 3, 20, "must be a permutation of 0..1"),
    ("operand after attribute", HEAD + "t2 = LeakyRelu(alpha=0.2, t0)\noutput t2\n", 3, 27, "operands must come before attributes"),
    ("binary garbage", "\x00\x01\x02\xff garbage", 1, 1, "unexpected character U+0000"),
]


@pytest.mark.parametrize("name,text,line,col,fragment", CASES, ids=[c[0] for c in CASES])
def test_malformed_file_gives_a_located_error(name, text, line, col, fragment):
    with pytest.raises(GradirError) as e:
        gradir.parse(text, "bad.gir")
    rendered = e.value.render()
    first = [d for d in e.value.diagnostics if fragment in d.message]
    assert first, f"no diagnostic contains {fragment!r}:\n{rendered}"
    d = first[0]
    assert (d.span.line, d.span.col) == (line, col), rendered
    block = d.render().split("\n")
    assert block[0] == f"bad.gir:{line}:{col}: error: {d.message}"
    assert len(block) == 3 and set(block[2].strip()) == {"^"}, rendered
    assert "Traceback" not in rendered


def test_all_verification_errors_are_reported():
    text = HEAD + "t2 = ReluGard(t0, t1)\nt3 = Relu(t9)\nt4 = LeakyRelu(t0, beta=1)\nt5 = Relu(t0)\noutput t5\n"
    with pytest.raises(VerifyError) as e:
        gradir.parse(text, "bad.gir")
    lines = [d.span.line for d in e.value.diagnostics]
    assert lines == [3, 4, 5]


def test_errors_do_not_cascade_from_a_bad_op():
    text = HEAD + "t2 = ReluGard(t0, t1)\nt3 = Relu(t2)\nt4 = TanhGrad(t3, t2)\noutput t4\n"
    with pytest.raises(VerifyError) as e:
        gradir.parse(text)
    assert len(e.value.diagnostics) == 1


def test_caret_spans_the_whole_token():
    with pytest.raises(VerifyError) as e:
        gradir.parse(HEAD + "t2 = ReluGard(t0, t1)\noutput t2\n", "f.gir")
    assert e.value.render().split("\n")[2] == "         ^^^^^^^^"


def test_very_long_line_is_shown_around_the_error():
    text = HEAD + "t2 = Relu(t0" + ", t0" * 5000 + ", @)\noutput t2\n"
    with pytest.raises(ParseError) as e:
        gradir.parse(text, "long.gir")
    block = e.value.render().split("\n")
    assert block[0].startswith("long.gir:3:")
    assert len(block[1]) < 200 and "@" in block[1]
    assert block[2].index("^") == block[1].index("@")


def test_invalid_utf8_is_located():
    with pytest.raises(ParseError) as e:
        gradir.parse(b"input t0 : Float32 [2]\n# caf\xe9\n", "latin1.gir")
    assert e.value.diagnostics[0].span[:2] == (2, 6)
    assert "not UTF-8" in str(e.value)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_raise_only_gradir_errors(data):
    try:
        gradir.parse(data, "fuzz.gir")
    except GradirError as e:
        assert re.match(r"fuzz\.gir(:\d+:\d+)?: error: ", e.render())


TOKENS = st.sampled_from(["t0", "t1", "t2", "=", "(", ")", ",", ":", "Relu", "ReluGrad", "LSTMGrad", "_",
                          "Float32", "[", "]", "2", "?", "-1", "1.5", '"s"', "true", "axis", "input",
                          "output", "graph", "scalar", "\n", " ", "#c"])


@settings(max_examples=300, deadline=None)
@given(st.lists(TOKENS, max_size=40))
def test_random_token_soup_raises_only_gradir_errors(tokens):
    text = " ".join(tokens)
    try:
        gradir.parse(text, "soup.gir")
    except GradirError as e:
        assert "soup.gir" in e.render()


def test_op_validate_explains_itself():
    from gradir.ops.activation import SoftmaxGrad_13Op
    op = SoftmaxGrad_13Op(["t2"], ["t0", "t1"], {"axis": 5})
    t = gradir.TensorType("Float32", [2, 3])
    with pytest.raises(VerifyError) as e:
        op.validate([t, t])
    assert "axis 5 is out of range for rank 2" in str(e.value)
    assert SoftmaxGrad_13Op(["t2"], ["t0", "t1"]).validate([t, t]) == [t]


def test_graph_validate_without_source_has_no_location():
    from gradir.ops.activation import ReluOp
    g = gradir.Graph([("t0", gradir.TensorType("Float32", [2]))], [ReluOp(["t1"], ["t5"])], ["t1"])
    with pytest.raises(VerifyError) as e:
        g.validate()
    assert str(e.value) == "<graph>: error: t5 is not defined"


def test_every_bad_line_gets_its_own_syntax_error():
    text = ("input t0 : Float32 [2]\nt1 = Relu(t0\nt2 = Relu(t0))\ninput t3 Float32 [2]\n"
            "t4 = Relu(t0)\noutput t4\n")
    with pytest.raises(ParseError) as e:
        gradir.parse(text, "multi.gir")
    assert [(d.span.line, d.span.col) for d in e.value.diagnostics] == [(2, 13), (3, 14), (4, 10)]
    assert "unexpected end of line; expected" in e.value.diagnostics[0].message


def test_huge_dimensions_are_rejected_with_a_location():
    with pytest.raises(VerifyError) as e:
        gradir.parse("input t0 : Float32 [1000000000000000000000000000000]\noutput t0\n", "h.gir")
    d = e.value.diagnostics[0]
    assert (d.span.line, d.span.col) == (1, 21) and "has 31 digits; a type has at most 2^48 elements" in d.message
    with pytest.raises(VerifyError) as e:  # fits in a 64-bit integer, but not in a type
        gradir.parse("input t0 : Float32 [100000000, 100000000]\noutput t0\n", "h.gir")
    d = e.value.diagnostics[0]
    assert (d.span.line, d.span.col) == (1, 12) and "10000000000000000 elements; at most 2^48" in d.message


@pytest.mark.parametrize("bad,more", [(50, 0), (51, 1), (173, 123)])
def test_syntax_errors_past_the_limit_are_counted(bad, more):
    """The first MAX_SYNTAX_ERRORS bad lines are described; a last line says how many more there are."""
    from gradir.text.syntax import MAX_SYNTAX_ERRORS
    assert MAX_SYNTAX_ERRORS == 50
    lines = ["input t0 : Float32 [2]"]
    for k in range(bad):  # bad lines between good ones, some only lark can parse (hand-spaced)
        lines += [f"t{k + 1} = = Relu(t0)", f"t{k + 1000}=Relu( t0 )"]
    with pytest.raises(ParseError) as e:
        gradir.parse("\n".join(lines) + "\noutput t1000\n", "many.gir")
    assert len(e.value.diagnostics) == 50
    assert e.value.diagnostics[-1].span.line == 2 + 2 * 49
    assert e.value.more == more
    text = e.value.render()
    if more:
        word = "error" if more == 1 else "errors"
        assert text.endswith(f"\nmany.gir: note: ... and {more} more syntax {word} not shown")
    else:
        assert "note:" not in text and text.endswith("^")


def test_check_reports_the_count_of_unshown_syntax_errors(tmp_path, capsys):
    from gradir.cli.main import main
    f = tmp_path / "junk.gir"
    f.write_text("".join(f"this is line {k}\n" for k in range(1, 201)))
    assert main(["check", str(f)]) == 1
    err = capsys.readouterr().err
    assert err.count(": error: ") == 50
    assert err.rstrip("\n").endswith(f"{f}: note: ... and 150 more syntax errors not shown")


@pytest.mark.parametrize("path, what", [("\ud800", "cannot be encoded as a file name"),
                                        ("x\ud800.gir", "cannot be encoded as a file name"),
                                        ("a\0b.gir", "contains a NUL character")])
def test_load_of_a_path_that_cannot_name_a_file_is_an_argument_error(path, what):
    """``gradir.load('\\ud800')`` raised UnicodeEncodeError (and a NUL, ValueError) from ``open()``."""
    with pytest.raises(gradir.ArgumentError, match=what):
        gradir.load(path)
    if path.endswith(".gir"):  # compile takes a one-line str ending in .gir as a path (else as IR text)
        with pytest.raises(gradir.ArgumentError, match=what):
            gradir.compile(path)


LSTM = """input t0 : Float32 [3, 2, 4]
input t1 : Float32 [1, 20, 4]
input t2 : Float32 [1, 20, 5]
t3, t4, t5, t6, t7 = LSTMTraining(t0, t1, t2, hidden_size=5, activations={acts})
output t3
"""


def test_lstm_other_activations_are_still_refused():
    with pytest.raises(gradir.VerifyError, match="only activations="):
        gradir.parse(LSTM.format(acts='["Relu", "Tanh", "Tanh"]'))


def check(tmp_path, capsys, text: str) -> tuple[int, str]:
    f = tmp_path / "g.gir"
    f.write_text(text)
    rc = main(["check", str(f)])
    err = capsys.readouterr().err
    assert "Traceback" not in err and "internal error" not in err
    return rc, err


def test_lstm_grad_without_required_operands_is_a_check_error(tmp_path, capsys):
    text = ("input t0 : Float32 [2, 1, 3]\ninput t1 : Float32 [1, 8, 3]\ninput t2 : Float32 [1, 8, 2]\n"
            "t3, t4, t5, t6, t7 = LSTMTraining(t0, t1, t2, hidden_size=2)\n"
            "t8, t9, t10, t11, t12, t13, t14 = LSTMGrad(t0, t1, t2, _, _, _, t3, hidden_size=2)\noutput t8\n")
    rc, err = check(tmp_path, capsys, text)
    assert rc == 1 and "LSTMGrad: operands CAll, iofc are required but not given" in err
    assert main(["fmt", str(tmp_path / "g.gir")]) == 1


@pytest.mark.parametrize("operands, msg", [
    ("t6, t6, t0, t1, t2, t3, t4", "operand Bias is required but not given"),
    ("t6, _, t0, t1, t2, t3, t4", "operand Bias is required but not given"),
    ("t6, t6, t0, t1, t2, t3, _, t5", "operand W_hh is required; '_' is only allowed"),
])
def test_cell_gradient_with_missing_operands_is_a_check_error(tmp_path, capsys, operands, msg):
    text = ("input t0 : Float32 [4, 16]\ninput t1 : Float32 [4, 32]\ninput t2 : Float32 [4, 32]\n"
            "input t3 : Float32 [128, 16]\ninput t4 : Float32 [128, 32]\ninput t5 : Float32 [128]\n"
            "input t6 : Float32 [4, 32]\n"
            f"t7 = GradLSTMCellInput({operands}, input_index=0, hidden_size=32)\noutput t7\n")
    rc, err = check(tmp_path, capsys, text)
    assert rc == 1 and msg in err


def test_every_op_checks_every_required_operand():
    """The generic checker catches a missing required operand in every registered op, so no
    op's own type rule ever sees one missing."""
    for name, cls in gradir.OPS.items():
        required = [k for k, o in enumerate(cls.OPERANDS) if not o.optional and not o.variadic]
        if not required:
            continue
        last = required[-1]
        operands = [f"t{k}" for k in range(last)]  # everything up to, not including, the last required one
        op = cls([f"t{100 + k}" for k in range(8)], operands, {})
        with pytest.raises(gradir.VerifyError) as e:
            op.validate([gradir.TensorType("Float32", [2])] * len(operands))
        assert "required" in str(e.value) or "takes" in str(e.value), (name, str(e.value))


def test_an_inferred_type_over_the_element_limit_is_a_check_error(tmp_path, capsys):
    rc, err = check(tmp_path, capsys, "input t0 : Float32 [16777217, 1]\ninput t1 : Float32 [1, 16777217]\n"
                                      "t2 = Add(t0, t1)\noutput t2\n")
    assert rc == 1 and "Add: result t2 would have 281475010265089 elements; at most 2^48 are supported" in err


def test_rank_over_64_is_a_check_error(tmp_path, capsys):
    ones = ", ".join(["1"] * 65)
    rc, err = check(tmp_path, capsys, f"input t0 : Float32 [{ones}]\nt1 = Relu(t0)\noutput t1\n")
    assert rc == 1 and "type Float32 has rank 65; at most 64 dimensions are supported" in err
    ones = ", ".join(["1"] * 33)
    axes = ", ".join(str(i) for i in range(32))
    rc, err = check(tmp_path, capsys, f"input t0 : Float32 [{ones}]\nt1 = Unsqueeze(t0, axes=[{axes}])\n"
                                      "output t1\n")
    assert rc == 1 and "Unsqueeze: result t1 would have rank 65" in err
    ones = ", ".join(["1"] * 64)
    assert check(tmp_path, capsys, f"input t0 : Float32 [{ones}]\nt1 = Relu(t0)\noutput t1\n")[0] == 0


@pytest.mark.parametrize("text, msg", [
    ("input t0 : Float32 [" + "1" * 5000 + "]\noutput t0\n", "dimension 111111111111... has 5000 digits"),
    ("input t0 : Float32 [2]\nt1 = Softmax(t0, axis=" + "1" * 5000 + ")\noutput t1\n",
     "integer literal 111111111111... has 5000 digits; at most 19"),
    ("input t" + "1" * 5000 + " : Float32 [2]\noutput t0\n", "value name t11111111111... has 5000 digits; at most 18"),
    ("input t0 : Float32 [" + ", ".join(["9" * 19] * 20) + "]\noutput t0\n",
     "type Float32 has about 2^1262 elements; at most 2^48 are supported"),
])
def test_huge_numbers_are_located_errors(tmp_path, capsys, text, msg):
    rc, err = check(tmp_path, capsys, text)
    assert rc == 1 and msg in err
    for cmd in ("fmt", "plan", "grad", "run"):
        assert main([cmd, str(tmp_path / "g.gir")]) == 1
        assert "internal error" not in capsys.readouterr().err


GIR = "input t0 : Float32 [2, 3]\ninput t1 : Float32 [3]\nt2 = Add(t0, t1)\nt3 = Tanh(t2)\noutput t3\n"


def test_messages_about_huge_ints_do_not_fail_themselves():
    """An int past Python's 4300-digit limit for str() made the message about it raise ValueError."""
    huge = 10 ** 5000
    with pytest.raises(gradir.ArgumentError, match="threads must be a positive integer or None, got an int of"):
        gradir.compile(GIR, threads=-huge)
    with pytest.raises(gradir.ArgumentError, match="disable must be a list of pass names, got an int of"):
        gradir.compile(GIR, disable=[huge])
    with pytest.raises(gradir.ArgumentError, match="Graph outputs must be a list of value names, got an int of"):
        gradir.Graph([], [], [huge])
    with pytest.raises(gradir.AutodiffError, match="wrt entries are input names like 't0', got an int of"):
        gradir.grad(GIR, wrt=[huge])
    with pytest.raises(gradir.BuilderError, match="graph name an int of 16610 bits is not an identifier"):
        gradir.GraphBuilder(huge)
