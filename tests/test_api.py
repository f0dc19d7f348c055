"""The Python API's arguments: wrong ones are ArgumentErrors; paths go where graphs do."""

from __future__ import annotations

import gradir
import numpy as np
import pytest
import pathlib


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


ROOT = pathlib.Path(__file__).resolve().parent.parent


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


def test_grad_gradcheck_and_export_take_a_gir_path_as_compile_does(tmp_path):
    """Their docstrings say a .gir path is accepted; a str path was parsed as IR text ("unexpected 'f'")."""
    import gradir
    from gradir.interop.onnx import export_onnx
    f = tmp_path / "f.gir"
    f.write_text("input t0 : Float64 [3]\nt1 = Tanh(t0)\nt2 = ReduceSum(t1)\noutput t2\n")
    assert gradir.grad(str(f)).outputs
    assert gradir.gradcheck(str(f)).ok
    assert export_onnx(str(f)).graph.node
    with pytest.raises(gradir.GradirError, match="missing.gir"):
        gradir.grad(str(tmp_path / "missing.gir"))  # a path that is not there: cannot read it, not a syntax error
