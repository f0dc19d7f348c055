"""Labels on inputs and outputs (docs/format.md, "Labels"): parse, fmt, run, grad, builder, dot."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

import gradir
from gradir import GraphBuilder, GraphInput, TensorType
from gradir.autodiff.driver import grad
from gradir.errors import GradirError, InputError
from gradir.text.syntax import _statements
from test_syntax import _same
from cli_runner import LABELLED_FWD as FWD, run_cli as _run


MLP = '''\
graph mlp
input t0 "x" : Float32 [2, 3]
input t1 "onnx::W1::0" : Float32 [3, 4]
t2 = MatMul(t0, t1) : Float32 [2, 4]
t3 = Relu(t2) : Float32 [2, 4]
output t3 "y", t2 "pre \\"activation\\" é"
'''


def _cli(argv: list[str], capsys) -> tuple[int, str, str]:
    from gradir.cli import main as cli
    rc = cli.main(argv)
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def _errors(text: str) -> str:
    with pytest.raises(GradirError) as e:
        gradir.parse(text, "bad.gir")
    return str(e.value)


# -- syntax -----------------------------------------------------------------------------------
def test_labels_parse_and_print_canonically():
    g = gradir.parse(MLP)
    assert [i.label for i in g.inputs] == ["x", "onnx::W1::0"]
    assert g.output_labels == ["y", 'pre "activation" é']
    assert g.to_text() == MLP  # JSON escapes, non-ASCII kept as is
    assert _same(_statements(MLP)[0], _statements(MLP, fast=False)[0])


@pytest.mark.parametrize("label", ['q"uote', "back\\slash", "::", "onnx::loss::2", "ünï ∂x 😀", "a # b", "a, t1",
                                   "tab\there", "new\nline", "\u2028", "t0x", " "])
def test_odd_labels_round_trip(label):
    text = f"input t0 {json.dumps(label, ensure_ascii=False)} : Float32 [2]\noutput t0\n"
    g = gradir.parse(text)
    assert g.inputs[0].label == label
    assert g.to_text() == text
    assert _same(_statements(text)[0], _statements(text, fast=False)[0])


def test_free_spacing_ascii_escapes_and_comments_mean_the_same_labels():
    text = 'input   t0"\\u00e9\\"x"  :  Float32 [2]  # c\nt1 = Relu(t0)\noutput t0 , t1\t"y" # d\n'
    g = gradir.parse(text)
    assert g.inputs[0].label == 'é"x' and g.output_labels == [None, "y"]
    assert g.to_text() == 'input t0 "é\\"x" : Float32 [2]  # c\nt1 = Relu(t0) : Float32 [2]\noutput t0, t1 "y"  # d\n'


def test_labels_are_part_of_the_graph():
    a = gradir.parse("input t0 : Float32 [2]\noutput t0\n")
    b = gradir.parse('input t0 "x" : Float32 [2]\noutput t0\n')
    c = gradir.parse('input t0 : Float32 [2]\noutput t0 "x"\n')
    assert a != b and a != c and b != c
    assert b == gradir.parse('input t0 "x" : Float32 [2]  # a comment is not\noutput t0\n')


# -- located errors ---------------------------------------------------------------------------
def test_a_duplicate_label_is_a_located_error():
    msg = _errors('input t0 "x" : Float32 [2]\ninput t1 "x" : Float32 [2]\nt2 = Add(t0, t1)\noutput t2 "x"\n')
    assert 'bad.gir:2:10: error: input t1: label "x" is already the label of t0; labels are unique' in msg
    assert 'bad.gir:4:11: error: output t2: label "x" is already the label of t0' in msg


def test_a_label_that_is_another_values_name_is_a_located_error():
    # as an .npz key, "t1" would name both t1 and the input labelled "t1"
    msg = _errors('input t0 "t1" : Float32 [2]\ninput t1 : Float32 [2]\nt2 = Add(t0, t1)\noutput t2 "t0"\n')
    assert 'bad.gir:1:10: error: input t0: label "t1" is the name of another value, t1' in msg
    assert 'bad.gir:4:11: error: output t2: label "t0" is the name of another value, t0' in msg
    # its own name, or the name of no value, is no collision
    assert gradir.parse('input t0 "t0" : Float32 [2]\nt1 = Relu(t0)\noutput t1 "t7"\n').output_labels == ["t7"]


def test_empty_and_bad_labels_are_located_errors():
    empty = 'input t0 "" : Float32 [2]\noutput t0\n'
    assert "bad.gir:1:10: error: input t0: a label may not be empty" in _errors(empty)
    assert "bad.gir:2:11: error: invalid escape in label" in _errors('input t0 : Float32 [2]\noutput t0 "\\q"\n')
    assert "bad.gir:1:10: error: input t0: a label may not contain NUL" in _errors(
        'input t0 "\\u0000" : Float32 [2]\noutput t0\n')
    assert "bad.gir:1:10: error: unterminated string: no closing '\"' on this line" in _errors('input t0 "x\n')
    assert "bad.gir:2:11: error: unterminated string" in _errors('input t0 : Float32 [2]\noutput t0 "a\\"\n')


def test_an_output_of_an_input_may_repeat_its_label_only():
    g = gradir.parse('input t0 "x" : Float32 [2]\noutput t0 "x"\n')
    assert g.output_labels == ["x"]
    msg = _errors('input t0 "x" : Float32 [2]\noutput t0 "y"\n')
    assert 'bad.gir:2:11: error: output t0: labelled "y", but input t0 is labelled "x"' in msg


def test_cli_check_reports_label_errors_with_exit_1(tmp_path, capsys):
    f = tmp_path / "dup.gir"
    f.write_text('input t0 "x" : Float32 [2]\ninput t1 "x" : Float32 [2]\nt2 = Add(t0, t1)\noutput t2\n')
    rc, _, err = _cli(["check", str(f)], capsys)
    assert rc == 1 and err.startswith(f"{f}:2:10: error: input t1: label \"x\"") and "Traceback" not in err


def test_cli_fmt_keeps_labels(tmp_path, capsys):
    f = tmp_path / "m.gir"
    f.write_text(MLP.replace(" : Float32 [2, 4]\nt3", "\nt3"))
    rc, out, _ = _cli(["fmt", str(f)], capsys)
    assert rc == 0 and out == MLP


# -- running ----------------------------------------------------------------------------------
def _mlp_inputs():
    rng = np.random.default_rng(0)
    return rng.standard_normal((2, 3)).astype(np.float32), rng.standard_normal((3, 4)).astype(np.float32)


def test_run_accepts_labels_or_names_and_keys_outputs_by_label():
    exe = gradir.compile(MLP)
    x, w = _mlp_inputs()
    want = np.maximum(x @ w, 0)
    for inputs in ({"x": x, "onnx::W1::0": w}, {"t0": x, "t1": w}, {"x": x, "t1": w}):
        res = exe.run(inputs)
        assert list(res) == ["y", 'pre "activation" é']
        np.testing.assert_allclose(res["y"], want, rtol=1e-6)
        assert res["t3"] is res["y"]  # a labelled output is found by its name too
    assert exe.output_keys == ["y", 'pre "activation" é']


def test_run_refuses_an_input_given_by_label_and_by_name():
    exe = gradir.compile(MLP, filename="m.gir")
    x, w = _mlp_inputs()
    with pytest.raises(InputError) as e:
        exe.run({"x": x, "t0": x, "t1": w})
    msg = str(e.value)
    assert "m.gir:2:7: error: input t0 is given twice, as 'x' and as 't0'" in msg


def test_cli_run_by_label_writes_outputs_and_inputs_by_label(tmp_path, capsys):
    f = tmp_path / "m.gir"
    f.write_text(MLP)
    x, w = _mlp_inputs()
    np.savez(tmp_path / "in.npz", **{"x": x, "onnx::W1::0": w})
    rc, out, err = _cli(["run", str(f), "--inputs", str(tmp_path / "in.npz"), "-o", str(tmp_path / "out.npz"),
                         "--save-inputs", str(tmp_path / "used.npz")], capsys)
    assert rc == 0, err
    rows = [line.split("  ")[0] for line in out.splitlines()]
    assert rows[rows.index("output") + 2:][:2] == ["y", 'pre "activation" é']
    with np.load(tmp_path / "out.npz") as z:
        assert list(z.keys()) == ["y", 'pre "activation" é']
        np.testing.assert_allclose(z["y"], np.maximum(x @ w, 0), rtol=1e-6)
    with np.load(tmp_path / "used.npz") as z:
        assert sorted(z.keys()) == ["onnx::W1::0", "x"]
    # the outputs compare by label; --input takes a label too
    np.save(tmp_path / "x.npy", x)
    rc, _, err = _cli(["run", str(f), "--inputs", str(tmp_path / "used.npz"), "--compare", str(tmp_path / "out.npz")],
                      capsys)
    assert rc == 0, err
    np.savez(tmp_path / "w.npz", t1=w)
    rc, _, err = _cli(["run", str(f), "--inputs", str(tmp_path / "w.npz"), "--input", f"x={tmp_path / 'x.npy'}"],
                      capsys)
    assert rc == 0, err


def test_cli_run_npz_with_a_label_and_the_name_of_one_input_is_an_error(tmp_path, capsys):
    f = tmp_path / "m.gir"
    f.write_text(MLP)
    x, w = _mlp_inputs()
    np.savez(tmp_path / "in.npz", x=x, t0=x, t1=w)
    rc, _, err = _cli(["run", str(f), "--inputs", str(tmp_path / "in.npz")], capsys)
    assert rc == 1 and "Traceback" not in err
    assert f"{f}:2:7: error: input t0 is given twice, as 'x' and as 't0'" in err


# -- grad, builder, dot -------------------------------------------------------------------------
def test_grad_labels_gradients_and_cotangents_and_keeps_input_labels():
    g = grad(gradir.parse(MLP))
    assert [i.label for i in g.inputs] == ["x", "onnx::W1::0", "cotangent(y)", 'cotangent(pre "activation" é)']
    assert g.output_labels == ["grad(x)", "grad(onnx::W1::0)"]
    unlabelled = grad(gradir.parse("input t0 : Float32 [2]\nt1 = Relu(t0)\noutput t1\n"))
    assert [i.label for i in unlabelled.inputs] == [None, "cotangent(t1)"]
    assert unlabelled.output_labels == ["grad(t0)"]
    assert gradir.parse(g.to_text()) == g  # derive, print, parse
    x, w = _mlp_inputs()
    res = gradir.compile(g).run({"x": x, "onnx::W1::0": w, "cotangent(y)": np.ones((2, 4), np.float32),
                                 'cotangent(pre "activation" é)': np.zeros((2, 4), np.float32)})
    assert list(res) == ["grad(x)", "grad(onnx::W1::0)"]
    np.testing.assert_allclose(res["grad(onnx::W1::0)"], x.T @ (x @ w > 0).astype(np.float32), rtol=1e-5)


def test_a_made_gradient_label_that_is_taken_is_left_off():
    g = grad(gradir.parse('input t0 "grad(y)" : Float32 [2]\ninput t1 "y" : Float32 [2]\nt2 = Mul(t0, t1)\n'
                          'output t2\n'))
    assert g.output_labels == [None, None] or g.output_labels[1] is None
    assert g.output_labels[0] == "grad(grad(y))"


def test_builder_labels():
    b = GraphBuilder("m")
    x = b.input("Float32", [2], label="x")
    w = b.input("Float32", [2], label="onnx::w")
    y = b.Add(x, w)
    b.output(y, label="y")
    b.output(x, label="x")
    g = b.build()
    assert g == gradir.parse('graph m\ninput t0 "x" : Float32 [2]\ninput t1 "onnx::w" : Float32 [2]\n'
                             't2 = Add(t0, t1) : Float32 [2]\noutput t2 "y", t0 "x"\n')
    with pytest.raises(GradirError, match="label 'x' is already the label of t0"):
        b.input("Float32", [2], label="x")
    with pytest.raises(GradirError, match="a label may not be empty"):
        b.input("Float32", [2], label="")
    with pytest.raises(GradirError, match="a label names one value"):
        b.output(x, w, label="z")
    with pytest.raises(GradirError, match="is the name of another value"):
        b.input("Float32", [2], label="t2")
    b2 = GraphBuilder()
    v = b2.input("Float32", [2], label="x")
    with pytest.raises(GradirError, match="an output of an input may only repeat its label"):
        b2.output(v, label="y")


def test_graph_api_labels():
    t = TensorType("Float32", [2])
    g = gradir.Graph([GraphInput("t0", t, label="x")], [], ["t0"], output_labels=["x"]).validate()
    assert g.to_text() == 'input t0 "x" : Float32 [2]\noutput t0 "x"\n'
    with pytest.raises(GradirError, match="output_labels has 2 labels for 1 outputs"):
        gradir.Graph([GraphInput("t0", t)], [], ["t0"], output_labels=["a", "b"])


def test_dot_shows_labels():
    from gradir.tools.dot import to_dot
    text = to_dot(gradir.parse(MLP))
    assert "&quot;x&quot;" in text and "&quot;onnx::W1::0&quot;" in text and "&quot;y&quot;" in text


def test_missing_and_unexpected_inputs_show_labels():
    exe = gradir.compile(MLP, filename="m.gir")
    x, w = _mlp_inputs()
    with pytest.raises(InputError) as e:
        exe.run({"x": x, "W1": w})
    msg = str(e.value)
    assert 'm.gir:3:7: error: missing input t1 "onnx::W1::0" (Float32 [3, 4])' in msg
    assert 'unexpected input W1 (the graph\'s inputs are t0 "x", t1 "onnx::W1::0")' in msg


def test_gradcheck_takes_inputs_by_label_and_checks_a_labelled_backward_graph(tmp_path, capsys):
    from gradir.tools.gradcheck import gradcheck
    x, w = _mlp_inputs()
    report = gradcheck(gradir.parse(MLP), inputs={"x": x, "onnx::W1::0": w})
    assert [c.status for c in report.checks] == ["pass", "pass"]
    f, b = tmp_path / "m.gir", tmp_path / "m.grad.gir"
    f.write_text(MLP)
    assert _cli(["grad", str(f), "-o", str(b)], capsys)[0] == 0
    rc, out, err = _cli(["gradcheck", str(f), "--backward", str(b)], capsys)
    assert rc == 0, err


CONST = '''\
input t0 "x" : Float32 [2, 3]
t1 = Constant(value=0.5) : Float32 [2, 3]
t2 = Mul(t0, t1) : Float32 [2, 3]
output t2 "half x", t1 "the constant"
'''


def test_constants_and_labels_parse_run_derive_and_build():
    g = gradir.parse(CONST)
    assert g.to_text() == CONST
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    res = gradir.compile(g).run({"x": x})
    assert list(res) == ["half x", "the constant"]
    np.testing.assert_array_equal(res["half x"], x * 0.5)
    np.testing.assert_array_equal(res["the constant"], np.full((2, 3), 0.5, np.float32))
    d = grad(g)
    assert [i.label for i in d.inputs] == ["x", "cotangent(half x)", "cotangent(the constant)"]
    assert d.output_labels == ["grad(x)"]
    ones = np.ones((2, 3), np.float32)
    out = gradir.compile(d).run({"x": x, "cotangent(half x)": ones, "cotangent(the constant)": ones})
    np.testing.assert_array_equal(out["grad(x)"], 0.5 * ones)
    b = GraphBuilder()
    v = b.input("Float32", [2, 3], label="x")
    c = b.constant(0.5, "Float32", [2, 3])
    b.output(b.Mul(v, c), label="half x")
    b.output(c, label="the constant")
    assert b.build() == g


def test_wrt_names_inputs_by_label_or_by_name() -> None:
    g = gradir.parse('input t0 "x" : Float32 [3]\ninput t1 "w" : Float32 [3]\nt2 = Mul(t0, t1) : Float32 [3]\n'
                     'output t2 "y"\n')
    by_label = grad(g, wrt=["w", "t0"])
    by_name = grad(g, wrt="t1,t0")
    assert by_label.to_text() == by_name.to_text()
    assert by_label.output_labels == ["grad(w)", "grad(x)"]


def test_wrt_unknown_name_lists_the_inputs_with_their_labels() -> None:
    g = gradir.parse('input t0 "x" : Float32 [3]\nt1 = Neg(t0) : Float32 [3]\noutput t1\n')
    with pytest.raises(gradir.GradirError, match=r'wrt: the graph has no value z, by name or label; '
                                                 r'the graph\'s inputs are t0 \("x"\)'):
        grad(g, wrt=["z"])


SURROGATE = 'graph s\ninput t0 "\\ud800" : Float32 [2]\nt1 = Neg(t0) : Float32 [2]\noutput t1 "y\\udfff"\n'


@pytest.mark.parametrize("command", [["check"], ["fmt"], ["grad"], ["export", "-o", "OUT"], ["run", "-o", "OUT"],
                                     ["dot"]])
def test_a_lone_surrogate_label_is_a_located_error_in_every_command(tmp_path, capsys, command):
    """It passed check, then fmt, grad, export and run -o exited 3 (UnicodeEncodeError)."""
    if command[0] == "export":
        pytest.importorskip("onnx")
    f = tmp_path / "s.gir"
    f.write_text(SURROGATE)
    argv = [command[0], str(f)] + [str(tmp_path / "out") if a == "OUT" else a for a in command[1:]]
    code, out, err = _cli(argv, capsys)
    assert code == 1, err
    assert f'{f}:2:10: error: label "\\ud800": a label must be valid Unicode text' in err
    assert f'{f}:4:11: error: label "y\\udfff"' in err
    assert "internal error" not in err and os.listdir(tmp_path) == ["s.gir"]


def test_a_lone_surrogate_label_is_refused_by_the_api_and_a_pair_is_one_character():
    with pytest.raises(GradirError, match="lone surrogate"):
        GraphBuilder().input("Float32", [2], label="\ud800")
    g = gradir.parse('graph s\ninput t0 "\\ud83d\\ude00" : Float32 [2]\noutput t0\n')
    assert g.inputs[0].label == "😀"


def test_plan_keeps_the_output_labels(tmp_path, capsys):
    f = tmp_path / "f.gir"
    f.write_text(FWD)
    code, out, err = _run(["plan", f], capsys)
    assert code == 0, err
    assert 'output t3 "y", t2 "pre"\n' in out
