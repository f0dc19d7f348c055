"""Faults the fuzzing harness (tests/test_fuzz.py) found, each now a test with its minimal input."""

from __future__ import annotations

import re

import numpy as np
import pytest

import gradir
from gradir.cli import main
from gradir.compare import compare_outputs


def test_compare_of_a_rank_0_output(tmp_path, capsys):
    """``run --compare`` on a graph with a scalar output (ReduceSum over every axis) crashed: the
    element-wise arithmetic on 0-d arrays gave NumPy scalars, which take no item assignment."""
    c = compare_outputs({"y": np.array(4.5, np.float32)}, {"y": np.array(4.5, np.float32)}).checks[0]
    assert c.ok and c.max_abs == 0 and c.worst is None
    c = compare_outputs({"y": np.array(4.5, np.float32)}, {"y": np.array(5.0, np.float32)}).checks[0]
    assert not c.ok and c.failed == 1 and c.max_abs == 0.5 and c.worst == ()
    g = tmp_path / "g.gir"
    g.write_text("input t0 : Float32 [2, 3]\nt1 = ReduceSum(t0)\noutput t1\n")
    assert main(["run", str(g), "-o", str(tmp_path / "out.npz")]) == 0
    assert main(["run", str(g), "--compare", str(tmp_path / "out.npz")]) == 0
    np.savez(tmp_path / "ref.npz", t1=np.array(1e6, np.float32))
    assert main(["run", str(g), "--compare", str(tmp_path / "ref.npz")]) == 1
    cap = capsys.readouterr()
    assert "internal error" not in cap.err and "1 of 1 output does not match" in cap.err
    assert re.search(r"^t1\s+scalar\s+1e\+06\s+1\s+\(\)\s.*FAIL \(1 of 1 element\)$", cap.out, re.M), cap.out


GIR = "input t0 : Float32 [2, 3]\ninput t1 : Float32 [3]\nt2 = Add(t0, t1)\nt3 = Tanh(t2)\noutput t3\n"


@pytest.mark.parametrize("kwargs, msg", [
    ({"rtol": None}, "rtol must be a finite number >= 0, got None"),
    ({"atol": np.ones(3)}, "atol must be a finite number >= 0, got array([1., 1., 1.])"),
    ({"rtol": 1j}, "rtol must be a finite number >= 0, got 1j"),
    ({"rtol": 10 ** 400}, "rtol must be a finite number >= 0, got 1" + "0" * 56 + "..."),
    ({"atol": float("nan")}, "atol must be a finite number >= 0, got nan"),
    ({"rtol": True}, "rtol must be a finite number >= 0, got True"),
    ({"directions": 0}, "directions must be a positive integer, got 0"),
    ({"directions": 2.0}, "directions must be a positive integer, got 2.0"),
    ({"seed": -1}, "seed must be a non-negative integer, got -1"),
    ({"seed": None}, "seed must be a non-negative integer, got None"),
    ({"inputs": [1, 2]}, "inputs must be a mapping of input names to arrays, or None, got list"),
    ({"generate_missing": np.array([1, 2])}, "generate_missing must be True or False, got array([1, 2])"),
    ({"backward": []}, "gradcheck(backward=...) takes a Graph, IR text or a path, not list"),
    ({"threads": 10 ** 5000}, "threads must be at most 1024, got an int of 16610 bits"),
])
def test_gradcheck_arguments_are_checked(kwargs, msg):
    """``gradcheck`` with a bad argument raised ValueError, TypeError, AttributeError, OverflowError
    (an int over Python's 4300-digit str limit in a message) or compared an array with ``<=``."""
    with pytest.raises(gradir.ArgumentError) as e:
        gradir.gradcheck(GIR, **kwargs)
    assert str(e.value) == msg


@pytest.mark.parametrize("graph", [None, [], 3])
def test_gradcheck_of_something_not_a_graph(graph):
    with pytest.raises(gradir.ArgumentError, match=f"gradcheck\\(\\) takes a Graph, IR text or a path, "
                                                   f"not {type(graph).__name__}"):
        gradir.gradcheck(graph)


def test_gradcheck_takes_numpy_scalars_paths_and_ints(tmp_path):
    f = tmp_path / "g.gir"
    f.write_text(GIR)
    assert gradir.gradcheck(f, rtol=np.float32(1e-4), atol=0, seed=3, directions=1).ok


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


def test_graph_of_a_0d_array_and_to_dot_argument_checks():
    """``Graph(np.array(1))`` iterated a 0-d array (TypeError); ``to_dot(g, plan=True, disable=1)``
    iterated an int and ``disable=[{}]`` hashed a dict; ``plan=np.ones(2)`` had no truth value."""
    with pytest.raises(gradir.ArgumentError, match=r"Graph inputs must be a list of GraphInput .*, got array\(1\)"):
        gradir.Graph(np.array(1))
    g = gradir.parse(GIR)
    for disable, msg in [(1, "to_dot\\(\\): disable must be a list of pass names, got int"),
                         ([{}], "to_dot\\(\\): disable must be a list of pass names, got \\{\\} in it"),
                         (["nope"], "unknown pass 'nope'")]:
        with pytest.raises(gradir.ArgumentError, match=msg):
            gradir.to_dot(g, plan=True, disable=disable)
    with pytest.raises(gradir.ArgumentError, match="to_dot\\(\\): plan must be True or False, got array"):
        gradir.to_dot(g, plan=np.ones(2))
    text = gradir.to_dot(g, plan=True, disable="cse, dce")  # a comma-separated str, as compile takes
    assert text == gradir.to_dot(g, plan=True, disable=["cse", "dce"]) and "cse:" not in text


def test_an_npy_header_in_python_2_form_loads_without_a_numpy_warning(tmp_path, capsys):
    """NumPy's UserWarning (with a line of its source) reached the user for a header like
    ``'shape': (2L, 3L)``; the file is valid and loads."""
    import io
    import warnings
    import zipfile
    buf = io.BytesIO()
    np.save(buf, np.ones((2, 3), np.float32))
    data = buf.getvalue()
    end = data.index(b"\n") + 1  # the header's end: it is padded with spaces to its stated length
    header = data[10:end].replace(b"'shape': (2, 3), }", b"'shape': (2L, 3L), }")
    data = data[:10] + header[:-3] + b"\n" + data[end:]
    (tmp_path / "t0.npy").write_bytes(data)
    with zipfile.ZipFile(tmp_path / "in.npz", "w") as zf:
        zf.writestr("t0.npy", data)
    g = tmp_path / "g.gir"
    g.write_text("input t0 : Float32 [2, 3]\nt1 = Relu(t0)\noutput t1\n")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert main(["run", str(g), "--input", f"t0={tmp_path / 't0.npy'}"]) == 0
        assert main(["run", str(g), "--inputs", str(tmp_path / "in.npz")]) == 0
    assert not seen, [str(w.message) for w in seen]
    cap = capsys.readouterr()
    assert cap.out.count("t1      Float32  [2, 3]    1    1     1  2.44949") == 2 and "Warning" not in cap.err


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


def test_an_abbreviated_option_is_not_taken_for_another():
    """`gradir --trace run g.gir` meant run's --trace; it was taken as --traceback (found by fuzzing)."""
    from gradir.cli import main
    assert main(["--trace", "run", "missing.gir"]) == 2
    assert main(["run", "missing.gir", "--trac", "t.json"]) == 2


def test_a_raw_tab_in_a_string_reads_the_same_on_both_parse_paths():
    from gradir.syntax import _statements
    text = 'input t0 : Float32 [2]\nt1 = LeakyRelu(t0, alpha=0.5)\noutput t1 "a\tb"\n'
    fast, slow = _statements(text), _statements(text, fast=False)
    assert fast.errors == slow.errors == []
    from test_syntax import _same
    assert _same(fast.stmts, slow.stmts)
    assert [st.data.get("labels") for st in fast.stmts] == [st.data.get("labels") for st in slow.stmts]
    import gradir
    assert 'output t1 "a\\tb"' in gradir.parse(text).to_text()
