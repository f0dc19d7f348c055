"""Three rough edges a new-user trial of the command line found, each as its reproducer: a ``--wrt``
name that names nothing, an ``--inputs`` key that names a computed value, and the run table's
statistics of an output holding NaN."""

from __future__ import annotations

import numpy as np
import pytest

import gradir
from gradir.cli import main
from gradir.runcli import _stats_table

GRAPH = ("graph g\n"
         "input t0 : Float32 [4]\n"
         'input t1 "weight" : Float32 [4]\n'
         "t2 = Mul(t0, t1) : Float32 [4]\n"
         "t3 = Relu(t2) : Float32 [4]\n"
         'output t3 "y"\n')


@pytest.fixture
def graph_file(tmp_path):
    p = tmp_path / "g.gir"
    p.write_text(GRAPH)
    return p


def _run(argv, capsys) -> tuple[int, str, str]:
    rc = main([str(a) for a in argv])
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


# -- 1. gradir grad --wrt NAME, NAME naming nothing in the file --------------------------------------
def test_grad_wrt_naming_no_value_says_so_and_lists_the_inputs(graph_file, capsys):
    rc, out, err = _run(["grad", graph_file, "--wrt", "t99"], capsys)
    assert (rc, out) == (1, "")  # like an unknown --inputs key or --shard name: a problem with the file's names
    assert err == (f"{graph_file}: error: wrt: the graph has no value t99, by name or label; the graph's inputs "
                   f'are t0, t1 ("weight")\n')


def test_grad_wrt_suggests_close_matches(graph_file, capsys):
    rc, _, err = _run(["grad", graph_file, "--wrt", "wieght"], capsys)
    assert rc == 1
    assert err == (f"{graph_file}: error: wrt: the graph has no value wieght, by name or label; did you mean "
                   f'weight (t1)? the graph\'s inputs are t0, t1 ("weight")\n')


def test_grad_wrt_lists_a_bounded_number_of_inputs(tmp_path, capsys):
    g = tmp_path / "wide.gir"
    g.write_text("".join(f"input t{k} : Float32 [2]\n" for k in range(40))
                 + "t40 = Sum(" + ", ".join(f"t{k}" for k in range(40)) + ")\noutput t40\n")
    rc, _, err = _run(["grad", g, "--wrt", "t400"], capsys)
    assert rc == 1
    assert err == (f"{g}: error: wrt: the graph has no value t400, by name or label; did you mean t4 or t0? the "
                   "graph's inputs are t0, t1, t2, t3, t4, t5, t6, t7, ... (40 in all)\n")


@pytest.mark.parametrize("name, line, what, op, caret", [
    ("t2", 4, "t2", "Mul", "t2 = Mul(t0, t1) : Float32 [4]\n    ^^"),
    ("y", 5, '"y" labels output t3, which', "Relu", "t3 = Relu(t2) : Float32 [4]\n    ^^"),
])
def test_grad_wrt_naming_a_computed_value_points_at_its_line(graph_file, capsys, name, line, what, op, caret):
    rc, _, err = _run(["grad", graph_file, "--wrt", f"t0,{name}"], capsys)
    assert rc == 1
    assert err == (f"{graph_file}:{line}:1: error: wrt: {what} is computed here (by {op}), not an input; gradients "
                   f'are with respect to the graph\'s inputs, t0, t1 ("weight")\n    {caret}\n')


# -- 2. gradir run --inputs IN.npz, a key naming a value the file computes ---------------------------
@pytest.mark.parametrize("key, line, what, op, caret", [
    ("t2", 4, "t2", "Mul", "t2 = Mul(t0, t1) : Float32 [4]\n    ^^"),
    ("y", 5, '"y" labels output t3, which', "Relu", "t3 = Relu(t2) : Float32 [4]\n    ^^"),
])
def test_run_input_key_naming_a_computed_value_points_at_its_line(graph_file, tmp_path, capsys, key, line, what,
                                                                   op, caret):
    np.savez(tmp_path / "in.npz", t0=np.ones(4, np.float32), weight=np.ones(4, np.float32),
             **{key: np.ones(4, np.float32)})
    rc, out, err = _run(["run", graph_file, "--inputs", tmp_path / "in.npz"], capsys)
    assert (rc, out) == (1, "")
    assert err == (f"{graph_file}:{line}:1: error: unexpected input {key}: {what} is computed here (by {op}) and "
                   f"cannot be given as an input\n    {caret}\n")


def test_run_single_input_naming_a_computed_value_points_at_its_line(graph_file, tmp_path, capsys):
    np.save(tmp_path / "x.npy", np.ones(4, np.float32))
    rc, _, err = _run(["run", graph_file, "--input", f"t3={tmp_path / 'x.npy'}", "--generate-missing"], capsys)
    assert rc == 1
    assert (f"{graph_file}:5:1: error: unexpected input t3: t3 is computed here (by Relu) and cannot be given as an "
            "input\n    t3 = Relu(t2) : Float32 [4]\n    ^^\n") in err
    assert "Traceback" not in err


def test_run_unknown_input_key_suggests_and_bounds_the_list(graph_file, tmp_path, capsys):
    np.savez(tmp_path / "in.npz", t0=np.ones(4, np.float32), weight=np.ones(4, np.float32),
             weights=np.ones(4, np.float32))
    rc, _, err = _run(["run", graph_file, "--inputs", tmp_path / "in.npz"], capsys)
    assert rc == 1
    assert err == (f'{graph_file}: error: unexpected input weights (did you mean t1 "weight"? the graph\'s inputs '
                   f'are t0, t1 "weight")\n')


def test_computed_value_keys_are_located_through_the_python_api_too():
    exe = gradir.compile(GRAPH, filename="api.gir")
    with pytest.raises(gradir.InputError) as e:
        exe.run({"t0": np.ones(4, np.float32), "t1": np.ones(4, np.float32), "t2": np.ones(4, np.float32)})
    assert e.value.render() == ("api.gir:4:1: error: unexpected input t2: t2 is computed here (by Mul) and cannot "
                                "be given as an input\n    t2 = Mul(t0, t1) : Float32 [4]\n    ^^")


# -- 3. gradir run's table of an output holding NaN --------------------------------------------------
def _rows(table: str) -> dict[str, list[str]]:
    lines = table.splitlines()
    return {line.split()[0]: line.split()[1:] for line in [lines[0]] + lines[2:]}


def test_run_table_statistics_leave_nans_out_and_count_them(tmp_path, capsys):
    g = tmp_path / "g.gir"
    g.write_text("input t0 : Float32 [4]\ninput t1 : Float32 [4]\nt2 = Log(t0)\nt3 = Relu(t0)\nt4 = Div(t1, t1)\n"
                 "output t2, t3, t4\n")
    np.savez(tmp_path / "in.npz", t0=np.array([1.0, -1.0, 0.0, 2.0], np.float32), t1=np.zeros(4, np.float32))
    rc, out, err = _run(["run", g, "--inputs", tmp_path / "in.npz"], capsys)
    assert rc == 0
    rows = _rows(out.split("time:")[0])
    assert rows["output"] == ["dtype", "shape", "min", "max", "mean", "L2", "norm", "NaNs"]
    assert rows["t2"] == ["Float32", "[4]", "-inf", "0.693147", "-inf", "inf", "1"]  # log: -inf, nan, 0, log 2
    assert rows["t3"] == ["Float32", "[4]", "0", "2", "0.75", "2.23607", "0"]
    assert rows["t4"] == ["Float32", "[4]", "nan", "nan", "nan", "nan", "all", "4"]  # 0/0 everywhere
    assert "non-finite values in t2 (1 NaN, 1 Inf), t4 (4 NaN)" in err


def test_stats_table_without_nans_is_unchanged_and_inf_shows():
    table = _stats_table({"a": np.array([1.0, np.inf, 3.0]), "b": np.array([3, 4], np.int32),
                          "c": np.zeros((0,), np.float32)})
    assert table.splitlines()[0].split() == ["output", "dtype", "shape", "min", "max", "mean", "L2", "norm"]
    rows = _rows(table)
    assert rows["a"] == ["Float64", "[3]", "1", "inf", "inf", "inf"]
    assert rows["b"] == ["Int32", "[2]", "3", "4", "3.5", "5"]
    assert rows["c"] == ["Float32", "[0]", "-", "-", "-", "-"]


def test_stats_table_nan_among_infinities():
    rows = _rows(_stats_table({"a": np.array([np.nan, -np.inf, 2.0, np.nan], np.float32)}))
    assert rows["a"] == ["Float32", "[4]", "-inf", "2", "-inf", "inf", "2"]


# -- issue #29's new-user trial ------------------------------------------------------------------------
FWD = ('graph f\ninput t0 "x" : Float64 [3]\ninput t1 "w" : Float64 [3]\nt2 = Mul(t0, t1) : Float64 [3]\n'
       't3 = Tanh(t2) : Float64 [3]\noutput t3 "y", t2 "pre"\n')


def test_gradcheck_inputs_is_repeatable_like_run(tmp_path, capsys):
    """`gradcheck --inputs A --inputs B` silently used only B."""
    f = tmp_path / "f.gir"
    f.write_text(FWD)
    x, w = np.array([0.1, 0.2, 0.3]), np.array([1.0, -1.0, 2.0])
    np.savez(tmp_path / "a.npz", x=x)
    np.savez(tmp_path / "b.npz", w=w)
    code, out, err = _run(["gradcheck", f, "--inputs", tmp_path / "a.npz", "--inputs", tmp_path / "b.npz"], capsys)
    assert code == 0, err
    assert "generated" not in err  # both archives used: nothing drawn from the seed
    np.savez(tmp_path / "both.npz", x=x, w=w)
    code, out, err = _run(["gradcheck", f, "--inputs", tmp_path / "a.npz", "--inputs", tmp_path / "both.npz"],
                          capsys)
    assert code == 1
    assert f"--inputs: 'x' is in both {tmp_path / 'a.npz'} and {tmp_path / 'both.npz'}" in err
    code, _, err2 = _run(["run", f, "--inputs", tmp_path / "a.npz", "--inputs", tmp_path / "both.npz"], capsys)
    assert code == 1 and err2 == err  # the same rule and message as run


def test_gradcheck_rows_show_labels(tmp_path, capsys):
    f = tmp_path / "f.gir"
    f.write_text(FWD)
    code, out, err = _run(["gradcheck", f], capsys)
    assert code == 0, err
    rows = [line.split()[0] for line in out.splitlines()[3:5]]
    assert rows == ["x", "w"]
    report = gradir.gradcheck(gradir.parse(FWD))
    assert [(c.name, c.label, c.key) for c in report.checks] == [("t0", "x", "x"), ("t1", "w", "w")]


def test_plan_keeps_the_output_labels(tmp_path, capsys):
    f = tmp_path / "f.gir"
    f.write_text(FWD)
    code, out, err = _run(["plan", f], capsys)
    assert code == 0, err
    assert 'output t3 "y", t2 "pre"\n' in out


def test_python_dash_m_gradir_is_the_command_line():
    import subprocess
    import sys
    sample = str(__import__("pathlib").Path(__file__).resolve().parent.parent / "samples" / "mlp_forward.gir")
    r = subprocess.run([sys.executable, "-m", "gradir", "check", sample], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.endswith("ok (5 inputs, 6 ops, 1 output)\n"), r.stderr
    r = subprocess.run([sys.executable, "-m", "gradir", "check", "/nonexistent/g.gir"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 1 and "error:" in r.stderr and "Traceback" not in r.stderr


def test_grad_gradcheck_and_export_take_a_gir_path_as_compile_does(tmp_path):
    """Their docstrings say a .gir path is accepted; a str path was parsed as IR text ("unexpected 'f'")."""
    import gradir
    from gradir.onnxio import export_onnx
    f = tmp_path / "f.gir"
    f.write_text("input t0 : Float64 [3]\nt1 = Tanh(t0)\nt2 = ReduceSum(t1)\noutput t2\n")
    assert gradir.grad(str(f)).outputs
    assert gradir.gradcheck(str(f)).ok
    assert export_onnx(str(f)).graph.node
    with pytest.raises(gradir.GradirError, match="missing.gir"):
        gradir.grad(str(tmp_path / "missing.gir"))  # a path that is not there: cannot read it, not a syntax error
