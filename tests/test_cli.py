"""The gradir command line: check, fmt, ops; exit codes; no tracebacks."""

from __future__ import annotations

import glob
import os
import subprocess
import sys

import pytest

from gradir.cli.main import main
import pathlib
import numpy as np
from gradir.cli.run import _stats_table
from cli_runner import run_cli as _run

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLES = sorted(glob.glob(os.path.join(ROOT, "samples", "*.gir")))
GOOD = "input t0 : Float32 [2]\nt1 = Relu(t0)\noutput t1\n"
BAD = "input t0 : Float32 [2]\nt1 = Relu(t9)\noutput t1\n"


def run(*args, stdin=None):
    """Run the installed console script the way a user would."""
    exe = os.path.join(os.path.dirname(sys.executable), "gradir")
    cmd = [exe] if os.path.exists(exe) else [sys.executable, "-m", "gradir.cli.main"]
    return subprocess.run(cmd + list(args), input=stdin, capture_output=True, text=True, cwd=ROOT)


def test_check_all_samples(capsys):
    assert main(["check", *SAMPLES]) == 0
    out = capsys.readouterr().out
    assert out.count(": ok (") == len(SAMPLES)


def test_check_reports_every_bad_file_and_exits_1(tmp_path, capsys):
    bad1, bad2, good = tmp_path / "a.gir", tmp_path / "b.gir", tmp_path / "c.gir"
    bad1.write_text(BAD)
    bad2.write_text("input t0 : Float32 [2]\nt1 = Relu(t0\n")
    good.write_text(GOOD)
    assert main(["check", str(bad1), str(bad2), str(good)]) == 1
    cap = capsys.readouterr()
    assert f"{bad1}:2:11: error: t9 is not defined" in cap.err
    assert f"{bad2}:2:13: error: unexpected end of line" in cap.err
    assert f"{good}: ok" in cap.out
    assert "Traceback" not in cap.err


def test_check_stdin():
    r = run("check", "-", stdin=BAD)
    assert r.returncode == 1
    assert r.stderr.startswith("<stdin>:2:11: error: t9 is not defined\n")
    assert "Traceback" not in r.stderr
    assert run("check", "-", stdin=GOOD).returncode == 0


def test_missing_file_is_an_error_not_a_traceback(capsys):
    assert main(["check", "/nonexistent/x.gir"]) == 1
    err = capsys.readouterr().err
    assert "/nonexistent/x.gir: error: cannot read file: No such file or directory" in err


def test_usage_errors_exit_2():
    assert run().returncode == 2
    r = run("check")
    assert r.returncode == 2 and "error:" in r.stderr
    assert run("frobnicate").returncode == 2
    r = run("fmt", "-i", "-")
    assert r.returncode == 2


def test_fmt_prints_canonical_text(tmp_path, capsys):
    f = tmp_path / "x.gir"
    f.write_text("# comment\ninput t0:Float32[2]\nt1=LeakyRelu( t0 , alpha=0.01 )   # default alpha\noutput t1\n")
    assert main(["fmt", str(f)]) == 0
    assert capsys.readouterr().out == ("# comment\ninput t0 : Float32 [2]\nt1 = LeakyRelu(t0) : Float32 [2]  "
                                       "# default alpha\noutput t1\n")
    assert main(["fmt", "--check", str(f)]) == 1


def test_fmt_in_place_is_atomic_and_keeps_bad_files(tmp_path, capsys):
    f = tmp_path / "x.gir"
    f.write_text("input t0:Float32[2]\nt1=Relu(t0)\noutput t1\n")
    os.chmod(f, 0o640)
    assert main(["fmt", "-i", str(f)]) == 0
    assert f.read_text() == "input t0 : Float32 [2]\nt1 = Relu(t0) : Float32 [2]\noutput t1\n"
    assert oct(os.stat(f).st_mode & 0o777) == "0o640"
    assert main(["fmt", "--check", str(f)]) == 0
    bad = tmp_path / "bad.gir"
    bad.write_text(BAD)
    assert main(["fmt", "-i", str(bad)]) == 1
    assert bad.read_text() == BAD  # untouched
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.gir", "x.gir"]  # no temp files left


def test_fmt_output_file(tmp_path):
    src, out = tmp_path / "a.gir", tmp_path / "b.gir"
    src.write_text(GOOD)
    assert main(["fmt", str(src), "-o", str(out)]) == 0
    assert out.read_text() == "input t0 : Float32 [2]\nt1 = Relu(t0) : Float32 [2]\noutput t1\n"


def test_every_sample_is_canonical_with_its_comments(capsys):
    assert main(["fmt", "--check", *SAMPLES]) == 0
    assert capsys.readouterr().err == ""
    for path in SAMPLES:
        assert main(["fmt", path]) == 0
        with open(path, encoding="utf-8") as f:
            text = f.read()
        assert capsys.readouterr().out == text
        assert text.count("#") > 2  # the documentation is still there


def test_fmt_several_files(tmp_path, capsys):
    a, b, bad = tmp_path / "a.gir", tmp_path / "b.gir", tmp_path / "bad.gir"
    a.write_text("input t0:Float32[2]\nt1=Relu(t0)\noutput t1\n")
    b.write_text(GOOD.replace("t1 = Relu(t0)", "t1 = Relu(t0) : Float32 [2]"))  # already canonical
    bad.write_text(BAD)
    assert main(["fmt", "--check", str(a), str(bad), str(b)]) == 1
    err = capsys.readouterr().err
    assert f"{a}: not in canonical form (gradir fmt -i {a} rewrites it)" in err
    assert f"{bad}:2:11: error: t9 is not defined" in err and f"{b}:" not in err
    assert main(["fmt", "-i", str(a), str(bad), str(b)]) == 1  # the bad file is reported, the others done
    assert a.read_text() == b.read_text() == "input t0 : Float32 [2]\nt1 = Relu(t0) : Float32 [2]\noutput t1\n"
    assert bad.read_text() == BAD
    assert main(["fmt", "--check", str(a), str(b)]) == 0
    r = run("fmt", str(a), str(b))  # standard output takes one file
    assert r.returncode == 2 and "several FILEs need -i or --check" in r.stderr
    r = run("fmt", "--check", str(a), "-")
    assert r.returncode == 2 and "'-' (standard input) must be the only FILE" in r.stderr


@pytest.mark.parametrize("path", SAMPLES, ids=os.path.basename)
def test_fmt_is_idempotent_on_samples(path, capsys):
    assert main(["fmt", path]) == 0
    once = capsys.readouterr().out
    r = run("fmt", "-", stdin=once)
    assert r.returncode == 0 and r.stdout == once


def test_ops_lists_every_op(capsys):
    import gradir
    assert main(["ops"]) == 0
    out = capsys.readouterr().out
    for name, cls in gradir.OPS.items():
        assert f"  {name}" in out
        for a in cls.ATTRS:
            assert a.name in out
    assert "LeakyReluGrad [backward]" in out and "alpha=0.01" in out
    assert "input_index (int, 0..5, required)" in out


def test_ops_markdown(capsys):
    assert main(["ops", "--markdown"]) == 0
    md = capsys.readouterr().out
    assert md.startswith("# gradir op reference")
    assert "### `GradLSTMCellInput` (backward)" in md
    assert "| `direction` | str, one of \"forward\", \"reverse\", \"bidirectional\" | `\"forward\"` |" in md


def test_internal_errors_are_brief_unless_traceback(monkeypatch, capsys):
    import gradir.cli.check
    import gradir.cli.main as cli
    monkeypatch.setattr(gradir.cli.check, "cmd_check", lambda a: 1 / 0)
    parser_args = ["check", "x"]
    # rebuild so the patched function is used
    assert cli.main(parser_args) == 3
    err = capsys.readouterr().err
    assert "internal error: ZeroDivisionError" in err and "Traceback" not in err
    assert cli.main(["--traceback", *parser_args]) == 3
    assert "Traceback" in capsys.readouterr().err


def test_docs_ops_md_is_current():
    from gradir.tools.docs import ops_markdown
    with open(os.path.join(ROOT, "docs", "ops.md"), encoding="utf-8") as f:
        assert f.read() == ops_markdown(), "regenerate with: gradir ops --markdown > docs/ops.md"


def test_fmt_in_place_follows_symlinks(tmp_path):
    target = tmp_path / "real.gir"
    target.write_text("input t0:Float32[2]\nt1=Relu(t0)\noutput t1\n")
    link = tmp_path / "link.gir"
    link.symlink_to(target)
    assert main(["fmt", "-i", str(link)]) == 0
    assert link.is_symlink()
    assert target.read_text() == "input t0 : Float32 [2]\nt1 = Relu(t0) : Float32 [2]\noutput t1\n"


def test_ops_unknown_name_exits_1_with_a_suggestion(capsys):
    assert main(["ops", "ReluGard"]) == 1
    assert "no op named 'ReluGard'; did you mean 'ReluGrad'?" in capsys.readouterr().err


def test_fmt_write_error_is_not_an_internal_error(tmp_path, capsys):
    src = tmp_path / "a.gir"
    src.write_text(GOOD)
    assert main(["fmt", str(src), "-o", "/nonexistent/dir/x.gir"]) == 1
    err = capsys.readouterr().err
    assert "directory /nonexistent/dir does not exist" in err and "internal error" not in err
    (tmp_path / "ro").mkdir()
    os.chmod(tmp_path / "ro", 0o500)
    if os.access(tmp_path / "ro", os.W_OK):  # root writes anywhere: a file where a directory should be
        target = str(tmp_path / "a.gir" / "x.gir")
    else:
        target = str(tmp_path / "ro" / "x.gir")
    assert main(["fmt", str(src), "-o", target]) == 1
    err = capsys.readouterr().err
    assert "error:" in err and "internal error" not in err


def test_pyproject_ships_every_subpackage():
    """A non-editable install must contain every package (the source tree hides a missing one)."""
    import re
    with open(os.path.join(ROOT, "pyproject.toml"), encoding="utf-8") as f:
        line = re.search(r"^packages = \[(.*)\]$", f.read(), re.M).group(1)
    listed = {p.strip().strip('"') for p in line.split(",")}
    found = {"gradir"}
    for dirpath, _, files in os.walk(os.path.join(ROOT, "gradir")):
        if "__init__.py" in files:
            found.add(os.path.relpath(dirpath, ROOT).replace(os.sep, "."))
    assert found == listed


def test_a_slow_compile_says_why_on_a_terminal(monkeypatch, capsys):
    """The first process on a machine builds the compiled kernels (~30 s): on a terminal,
    ``run`` and ``plan`` say so instead of staying silent; a quick compile says nothing, and
    neither does a compile whose stderr is not a terminal."""
    import time

    from gradir.cli import run as runcli

    def slow(graph, **kw):
        time.sleep(0.3)
        return ("compiled", graph, kw)

    monkeypatch.setattr(runcli, "SLOW_COMPILE_NOTICE", 0.05)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert runcli._compile_with_notice(slow, "g", threads=2) == ("compiled", "g", {"threads": 2})
    assert "building the compiled kernels for this machine" in capsys.readouterr().err
    assert runcli._compile_with_notice(lambda graph, **kw: graph, "g") == "g"
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False)
    assert runcli._compile_with_notice(slow, "g") == ("compiled", "g", {})
    assert capsys.readouterr().err == ""


def test_fmt_onto_its_own_file_points_at_in_place(tmp_path, capsys):
    src = tmp_path / "a.gir"
    src.write_text(GOOD)
    assert main(["fmt", str(src), "-o", str(src)]) == 1
    err = capsys.readouterr().err
    assert "refusing to overwrite an input (gradir fmt -i FILE rewrites it in place)" in err
    assert src.read_text() == GOOD


ROOT_ux_bugs = pathlib.Path(__file__).resolve().parent.parent


MLP = ROOT_ux_bugs / "samples" / "mlp_forward.gir"


def gradir_cmd(*args: str, **kw) -> subprocess.CompletedProcess:
    exe = os.path.join(os.path.dirname(sys.executable), "gradir")
    cmd = [exe] if os.path.exists(exe) else [sys.executable, "-m", "gradir.cli.main"]
    kw.setdefault("stdout", subprocess.PIPE)
    kw.setdefault("stderr", subprocess.PIPE)
    return subprocess.run(cmd + list(args), text=True, cwd=ROOT_ux_bugs, **kw)


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
    r = subprocess.run(f"'{sys.executable}' -m gradir.cli.main ops | head -c 10 > /dev/null", shell=True,
                       capture_output=True, text=True, cwd=ROOT_ux_bugs)
    assert r.returncode == 0 and r.stderr == ""


def test_ops_markdown_honours_the_filter(capsys):
    assert main(["ops", "--markdown", "Relu"]) == 0
    out = capsys.readouterr().out
    assert "### `Relu`" in out
    assert out.count("### ") == 1
    assert main(["ops", "--markdown", "Relu", "TanhGrad"]) == 0
    out = capsys.readouterr().out
    assert out.count("### ") == 2 and "### `TanhGrad`" in out


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


def test_python_dash_m_gradir_is_the_command_line():
    import subprocess
    import sys
    sample = str(__import__("pathlib").Path(__file__).resolve().parent.parent / "samples" / "mlp_forward.gir")
    r = subprocess.run([sys.executable, "-m", "gradir", "check", sample], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.endswith("ok (5 inputs, 6 ops, 1 output)\n"), r.stderr
    r = subprocess.run([sys.executable, "-m", "gradir", "check", "/nonexistent/g.gir"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 1 and "error:" in r.stderr and "Traceback" not in r.stderr


def test_an_abbreviated_option_is_not_taken_for_another():
    """`gradir --trace run g.gir` meant run's --trace; it was taken as --traceback (found by fuzzing)."""
    from gradir.cli.main import main
    assert main(["--trace", "run", "missing.gir"]) == 2
    assert main(["run", "missing.gir", "--trac", "t.json"]) == 2
