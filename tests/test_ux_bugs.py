"""The five user-reported bugs of the [ux] round, each as its reproducer, plus the public API's
promise that every error it raises is a ``GradirError``."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import gradir
from gradir.cli import main

ROOT = pathlib.Path(__file__).resolve().parent.parent
MLP = ROOT / "samples" / "mlp_forward.gir"


def gradir_cmd(*args: str, **kw) -> subprocess.CompletedProcess:
    exe = os.path.join(os.path.dirname(sys.executable), "gradir")
    cmd = [exe] if os.path.exists(exe) else [sys.executable, "-m", "gradir.cli"]
    kw.setdefault("stdout", subprocess.PIPE)
    kw.setdefault("stderr", subprocess.PIPE)
    return subprocess.run(cmd + list(args), text=True, cwd=ROOT, **kw)


# -- 1. an output path that is an input ------------------------------------------------------------
@pytest.fixture
def graph_file(tmp_path):
    p = tmp_path / "g.gir"
    p.write_bytes(MLP.read_bytes())
    return p


@pytest.mark.parametrize("argv", [
    ["run", "{g}", "-o", "{g}"],
    ["run", "{g}", "--trace", "{g}"],
    ["run", "{link}", "-o", "{g}"],          # through a symbolic link
    ["run", "{g}", "--trace", "{hard}"],     # a hard link is the same file too
    ["grad", "{g}", "-o", "{g}"],
    ["grad", "{g}", "-o", "{dotted}"],
    ["fmt", "{g}", "-o", "{link}"],
])
def test_an_output_that_is_an_input_is_refused_and_the_input_kept(graph_file, tmp_path, capsys, argv):
    link = tmp_path / "link.gir"
    link.symlink_to(graph_file)
    hard = tmp_path / "hard.gir"
    os.link(graph_file, hard)
    before = graph_file.read_bytes()
    names = {"g": str(graph_file), "link": str(link), "hard": str(hard),
             "dotted": str(tmp_path / "." / "g.gir")}
    assert main([a.format(**names) for a in argv]) == 1
    err = capsys.readouterr().err
    assert "is the same file as FILE" in err and "refusing to overwrite an input" in err
    assert graph_file.read_bytes() == before
    assert "Traceback" not in err


def test_an_input_array_file_is_not_overwritten(graph_file, tmp_path, capsys):
    inputs = tmp_path / "in.npz"
    np.savez(inputs, **{i.name: np.zeros(i.type.shape, np.float32) for i in gradir.load(graph_file).inputs})
    before = inputs.read_bytes()
    assert main(["run", str(graph_file), "--inputs", str(inputs), "-o", str(inputs)]) == 1
    assert "-o " + str(inputs) + " is the same file as --inputs" in capsys.readouterr().err
    assert inputs.read_bytes() == before


def test_two_outputs_on_one_path_are_refused(graph_file, tmp_path, capsys):
    out = tmp_path / "o.npz"
    assert main(["run", str(graph_file), "-o", str(out), "--trace", str(out)]) == 1
    assert "--trace" in capsys.readouterr().err and not out.exists()


def test_distinct_outputs_still_work(graph_file, tmp_path):
    assert main(["run", str(graph_file), "-o", str(tmp_path / "o.npz"), "--trace", str(tmp_path / "t.json")]) == 0
    assert (tmp_path / "o.npz").exists() and (tmp_path / "t.json").exists()


# -- 2. a failed write to standard output --------------------------------------------------------
@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("argv", [["check", str(MLP)], ["ops"], ["fmt", str(MLP)], ["run", str(MLP)],
                                  ["plan", str(MLP)], ["grad", str(MLP)]])
def test_a_full_standard_output_is_exit_1_with_a_message(argv):
    with open("/dev/full", "w") as full:
        r = gradir_cmd(*argv, stdout=full, stderr=subprocess.PIPE)
    assert r.returncode == 1, r.stderr
    assert "gradir: error: cannot write to standard output: No space left on device" in r.stderr
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr
    assert "Exception ignored" not in r.stderr


def test_a_closed_pipe_is_still_quiet():
    r = subprocess.run(f"'{sys.executable}' -m gradir.cli ops | head -c 10 > /dev/null", shell=True,
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0 and r.stderr == ""


# -- 3. ops --markdown with names -------------------------------------------------------------
def test_ops_markdown_honours_the_filter(capsys):
    assert main(["ops", "--markdown", "Relu"]) == 0
    out = capsys.readouterr().out
    assert "### `Relu`" in out
    assert out.count("### ") == 1
    assert main(["ops", "--markdown", "Relu", "TanhGrad"]) == 0
    out = capsys.readouterr().out
    assert out.count("### ") == 2 and "### `TanhGrad`" in out


# -- 4. LSTM activations in any case ------------------------------------------------------------
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


def test_lstm_other_activations_are_still_refused():
    with pytest.raises(gradir.VerifyError, match="only activations="):
        gradir.parse(LSTM.format(acts='["Relu", "Tanh", "Tanh"]'))


def test_the_lstm_kernel_itself_takes_any_case():
    from gradir.kernels.lstm.common import check_layer_attrs
    assert check_layer_attrs("LSTMGrad", "forward", ["Sigmoid", "Tanh", "Tanh"], None, 0) == 1


# -- 5. the public API raises GradirError only ----------------------------------------------------
_G = gradir.parse("input t0 : Float32 [2, 3]\nt1 = Softmax(t0)\noutput t1\n")
_BAD = [None, 0, -1, 1.5, "", "zz", [1], {"a": 1}, object(), b"\xff", True, ["t0", "t0"], "t0,,t1", ["t99"]]
_CALLS = {
    "parse": lambda a: gradir.parse(a),
    "parse(filename=)": lambda a: gradir.parse("input t0 : Float32 [2]\noutput t0\n", a),
    "load": lambda a: gradir.load(a),
    "compile": lambda a: gradir.compile(a),
    "compile(threads=)": lambda a: gradir.compile(_G, threads=a),
    "compile(passes=)": lambda a: gradir.compile(_G, passes=a),
    "compile(disable=)": lambda a: gradir.compile(_G, disable=a),
    "run": lambda a: gradir.compile(_G).run(a),
    "run(values)": lambda a: gradir.compile(_G).run({"t0": a}),
    "run(trace=)": lambda a: gradir.compile(_G).run({"t0": np.zeros((2, 3), np.float32)}, trace=a),
    "grad": lambda a: gradir.grad(a),
    "grad(wrt=)": lambda a: gradir.grad(_G, wrt=a),
    "GraphBuilder": lambda a: gradir.GraphBuilder(a),
    "GraphBuilder.input(dtype)": lambda a: gradir.GraphBuilder().input(a, [2]),
    "GraphBuilder.input(shape)": lambda a: gradir.GraphBuilder().input("Float32", a),
    "GraphBuilder.output": lambda a: gradir.GraphBuilder().output(a),
    "GraphBuilder.Relu": lambda a: gradir.GraphBuilder().Relu(a),
    "DType.parse": lambda a: gradir.DType.parse(a),
    "DType.from_numpy": lambda a: gradir.DType.from_numpy(a),
    "TensorType(dtype)": lambda a: gradir.TensorType(a, [2]),
    "TensorType(shape)": lambda a: gradir.TensorType("Float32", a),
    "Op(results)": lambda a: gradir.OPS["Relu"](a, ["t0"], {}),
    "Op(operands)": lambda a: gradir.OPS["Relu"](["t1"], a, {}),
    "Op(attrs)": lambda a: gradir.OPS["Softmax"](["t1"], ["t0"], a),
    "Op.validate": lambda a: gradir.OPS["Relu"](["t1"], ["t0"], {}).validate(a),
    "Graph(inputs)": lambda a: gradir.Graph(a, [], []).validate(),
    "Graph(ops)": lambda a: gradir.Graph([], a, []).validate(),
    "Graph(outputs)": lambda a: gradir.Graph([], [], a).validate(),
}


@pytest.mark.parametrize("call", list(_CALLS))
def test_every_public_call_raises_only_gradir_errors(call):
    for a in _BAD:
        try:
            _CALLS[call](a)
        except gradir.GradirError:
            pass
        except Exception as e:  # pragma: no cover - the failure message says which argument
            pytest.fail(f"{call}({a!r}) raised {type(e).__name__}: {e}")


def test_compile_threads_0_is_an_argument_error_that_is_also_a_value_error():
    with pytest.raises(gradir.ArgumentError, match="threads must be a positive integer") as e:
        gradir.compile(_G, threads=0)
    assert isinstance(e.value, ValueError) and isinstance(e.value, gradir.GradirError)
    assert str(e.value) == "threads must be a positive integer or None, got 0"


def test_compile_and_load_take_paths_and_compile_loads_a_named_file():
    sample = ROOT / "samples" / "gelu_grads.gir"
    assert gradir.load(sample) == gradir.load(str(sample))
    exe_path = gradir.compile(sample)
    exe_str = gradir.compile(str(sample))
    assert exe_path.graph == exe_str.graph == gradir.load(sample)
    assert exe_str.graph.source.filename == str(sample)
    with pytest.raises(gradir.ParseError, match="cannot read file"):
        gradir.compile(pathlib.Path("/nonexistent/g.gir"))
    with pytest.raises(gradir.ArgumentError, match="use gradir.load"):
        gradir.parse(sample)


def test_a_big_endian_input_is_converted_and_other_dtypes_are_named_in_words():
    g = gradir.parse("input t0 : Float32 [3]\nt1 = Relu(t0)\noutput t1\n")
    x = np.array([1.5, -2.0, 3.0], dtype=">f4")
    out = gradir.compile(g).run({"t0": x})["t1"]
    np.testing.assert_array_equal(out, np.maximum(x.astype(np.float32), 0))
    with pytest.raises(gradir.InputError, match="got big-endian Float64"):
        gradir.compile(g).run({"t0": x.astype(">f8")})
    with pytest.raises(gradir.InputError, match="not an array"):
        gradir.compile(g).run({"t0": [1.0, [2.0, 3.0]]})


def test_a_big_endian_npy_through_the_cli(tmp_path, capsys):
    g = tmp_path / "g.gir"
    g.write_text("input t0 : Float32 [3]\nt1 = Relu(t0)\noutput t1\n")
    np.save(tmp_path / "x.npy", np.array([1.5, -2.0, 3.0], dtype=">f4"))
    assert main(["run", str(g), "--input", f"t0={tmp_path / 'x.npy'}", "-o", str(tmp_path / "o.npz")]) == 0
    with np.load(tmp_path / "o.npz") as z:
        np.testing.assert_array_equal(z["t1"], np.array([1.5, 0.0, 3.0], np.float32))
