"""Messages a user reads: out of memory, sizes, cause-first run-time errors, NaN warnings, help."""

from __future__ import annotations

import numpy as np
import pytest

import gradir
from gradir.cli.main import build_parser, main
from gradir.fileio import human_bytes
from gradir.backends.cpu.kernels import KERNELS, KernelInfo
from cli_runner import run_cli as _run

ROOT_SAMPLE = __import__("pathlib").Path(__file__).resolve().parent.parent / "samples" / "mlp_forward.gir"


def test_human_bytes():
    assert [human_bytes(n) for n in (0, 16, 1023, 1024, 1536, 10 * 2**20, 3 * 2**30 + 2**29, 2**40 * 5)] == [
        "0 B", "16 B", "1023 B", "1 KiB", "1.5 KiB", "10 MiB", "3.5 GiB", "5 TiB"]
    assert human_bytes(2**50) == "1024 TiB"
    assert human_bytes(None) == "unknown"


def test_plan_sizes_in_human_units_and_one_step(tmp_path, capsys):
    g = tmp_path / "g.gir"
    g.write_text("input t0 : Float32 [1024, 1024]\nt1 = Relu(t0)\noutput t1\n")
    assert main(["plan", str(g)]) == 0
    out = capsys.readouterr().out
    assert "# schedule: 1 step\n" in out
    assert "# memory: planned peak 8 MiB, naive total 8 MiB" in out


def test_variadic_arity_message_is_singular():
    with pytest.raises(gradir.VerifyError, match=r"Sum takes at least 1 operand \(X\.\.\.\), got 0"):
        gradir.parse("input t0 : Float32 [2]\nt1 = Sum()\noutput t0\n")


def test_out_of_memory_names_the_tensor_its_size_and_the_peak(monkeypatch):
    def oom(*a, out=None):
        raise MemoryError()
    gradir.compile("input t0 : Float32 [1]\noutput t0\n")
    monkeypatch.setitem(KERNELS, "Exp", KernelInfo("Exp", oom))
    exe = gradir.compile("input t0 : Float32 [512, 1024]\nt1 = Exp(t0)\noutput t1\n", filename="m.gir")
    with pytest.raises(gradir.ExecutionError) as e:
        exe.run({"t0": np.zeros((512, 1024), np.float32)})
    msg = str(e.value)
    assert msg.startswith("m.gir:2:1: error: out of memory while computing t1 (Float32 [512, 1024], 2 MiB); "
                          "the plan's peak is 4 MiB of live values; in Exp on line 2"), msg


def test_run_time_errors_put_the_cause_first_for_built_graphs_too(monkeypatch):
    def boom(*a, out=None):
        raise ValueError("the kernel says no")
    gradir.compile("input t0 : Float32 [1]\noutput t0\n")
    monkeypatch.setitem(KERNELS, "Exp", KernelInfo("Exp", boom))
    b = gradir.GraphBuilder()
    b.output(b.Exp(b.input("Float32", [2])))
    with pytest.raises(gradir.ExecutionError) as e:
        gradir.compile(b.build()).run({"t0": np.zeros(2, np.float32)})
    assert str(e.value) == ("<graph>: error: the kernel says no; in t1 = Exp(t0) : Float32 [2], "
                            "operands t0 Float32 [2]")


def test_non_finite_outputs_warn_on_one_line(tmp_path, capsys):
    g = tmp_path / "g.gir"
    g.write_text("input t0 : Float32 [4]\nt1 = Log(t0)\nt2 = Relu(t0)\noutput t1, t2\n")
    np.save(tmp_path / "x.npy", np.array([1.0, -1.0, 0.0, 2.0], np.float32))
    assert main(["run", str(g), "--input", f"t0={tmp_path / 'x.npy'}"]) == 0
    err = capsys.readouterr().err
    warn = [line for line in err.splitlines() if "warning" in line]
    assert warn == ["gradir: warning: non-finite values in t1 (1 NaN, 1 Inf); --check-numerics names the op "
                    "that made the first"]
    np.save(tmp_path / "x.npy", np.array([1.0, 3.0, 0.5, 2.0], np.float32))
    assert main(["run", str(g), "--input", f"t0={tmp_path / 'x.npy'}"]) == 0
    assert "warning" not in capsys.readouterr().err


def test_check_numerics_blames_a_nan_input_not_the_first_op(tmp_path, capsys):
    g = tmp_path / "g.gir"
    g.write_text("input t0 : Float32 [3]\ninput t1 : Float32 [3]\nt2 = Relu(t1)\noutput t2\n")
    np.savez(tmp_path / "in.npz", t0=np.ones(3, np.float32), t1=np.array([0, np.inf, 1], np.float32))
    assert main(["run", str(g), "--inputs", str(tmp_path / "in.npz"), "--check-numerics"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"{g}:2:7: error: input t1 holds Inf at index [1] (--check-numerics)")
    assert "Relu" not in err


def test_traceback_is_accepted_after_the_subcommand(tmp_path, capsys):
    g = tmp_path / "g.gir"
    g.write_text("input t0 : Float32 [2]\noutput t0\n")
    assert main(["check", str(g), "--traceback"]) == 0
    assert main(["--traceback", "check", str(g)]) == 0
    assert main(["plan", str(g), "--traceback"]) == 0


def test_every_subcommand_help_has_a_description_and_examples():
    parser = build_parser()
    sub = next(a for a in parser._actions if a.choices and isinstance(a.choices, dict))
    assert {"check", "fmt", "run", "plan", "grad", "ops"} <= set(sub.choices)
    for name, p in sub.choices.items():
        text = p.format_help()
        assert p.description, name
        assert "examples:\n  gradir " in text, name
        for action in p._actions:
            assert action.help, f"gradir {name} {action.option_strings or action.dest} has no help text"


def test_run_disable_switches_a_pass_off(tmp_path, capsys):
    g = tmp_path / "g.gir"
    g.write_text("input t0 : Float32 [2]\nt1 = Relu(t0)\nt2 = Relu(t0)\nt3 = Add(t1, t2)\noutput t3\n")
    assert main(["run", str(g), "--disable", "cse", "-o", str(tmp_path / "o.npz")]) == 0
    assert main(["run", str(g), "--disable", "nope"]) == 2
    assert "unknown pass 'nope'" in capsys.readouterr().err


def test_plan_lists_merged_values_only_for_outputs(tmp_path, capsys):
    g = tmp_path / "g.gir"
    g.write_text("input t0 : Float32 [2]\nt1 = Relu(t0)\nt2 = Relu(t0)\nt3 = Add(t1, t2)\noutput t3\n")
    assert main(["plan", str(g)]) == 0
    assert "outputs computed by merged values" not in capsys.readouterr().out
    g.write_text("input t0 : Float32 [2]\nt1 = Relu(t0)\nt2 = Relu(t0)\noutput t1, t2\n")
    assert main(["plan", str(g)]) == 0
    assert "# outputs computed by merged values: t2 = t1" in capsys.readouterr().out


def test_standard_input_is_read_once_and_only_as_file(tmp_path, capsys):
    assert main(["run", "-", "--inputs", "-"]) == 2
    assert "only FILE may be '-' (standard input), and only once; --inputs reads a file" in capsys.readouterr().err
    assert main(["gradcheck", "-", "--backward", "-"]) == 2


def test_an_output_in_a_missing_directory_fails_before_the_run(tmp_path, capsys):
    g = tmp_path / "g.gir"
    g.write_text("input t0 : Float32 [2]\nt1 = Relu(t0)\noutput t1\n")
    assert main(["run", str(g), "-o", str(tmp_path / "nope" / "o.npz")]) == 1
    cap = capsys.readouterr()
    assert f"directory {tmp_path / 'nope'} does not exist" in cap.err and "L2 norm" not in cap.out


def test_an_npz_member_without_a_npy_header_is_named(tmp_path, capsys):
    import zipfile
    g = tmp_path / "g.gir"
    g.write_text("input t0 : Float32 [2]\nt1 = Relu(t0)\noutput t1\n")
    with zipfile.ZipFile(tmp_path / "in.npz", "w") as zf:
        zf.writestr("t0.npy", b"not a npy")
    assert main(["run", str(g), "--inputs", str(tmp_path / "in.npz")]) == 1
    assert "--inputs: member 't0' is not a NumPy array (no .npy header)" in capsys.readouterr().err


def test_generating_an_input_too_large_for_memory_names_it(tmp_path, capsys):
    g = tmp_path / "g.gir"
    g.write_text("input t0 : Float32 [100000000, 100000]\nt1 = Relu(t0)\noutput t1\n")
    assert main(["run", str(g)]) == 1
    assert "cannot generate input t0 (Float32 [100000000, 100000], 36.4 TiB): out of memory" in capsys.readouterr().err


def test_compile_of_a_missing_gir_path_says_so():
    with pytest.raises(gradir.ParseError, match="nosuch.gir: error: cannot read file"):
        gradir.compile("nosuch.gir")


def test_an_empty_wrt_is_one_error(tmp_path, capsys):
    assert main(["grad", str(ROOT_SAMPLE), "--wrt", ""]) == 1
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and "wrt is empty" in err


def test_help_to_a_full_disk_is_exit_1():
    import os
    import subprocess
    import sys
    if not os.path.exists("/dev/full"):
        pytest.skip("needs /dev/full")
    with open("/dev/full", "w") as full:
        for argv in (["--help"], ["run", "--help"], ["--version"]):
            r = subprocess.run([sys.executable, "-m", "gradir.cli.main", *argv], stdout=full, stderr=subprocess.PIPE,
                               text=True)
            assert r.returncode == 1 and "cannot write to standard output" in r.stderr, (argv, r.stderr)


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
