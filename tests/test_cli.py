"""The gradir command line: check, fmt, ops; exit codes; no tracebacks."""

from __future__ import annotations

import glob
import os
import subprocess
import sys

import pytest

from gradir.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLES = sorted(glob.glob(os.path.join(ROOT, "samples", "*.gir")))
GOOD = "input t0 : Float32 [2]\nt1 = Relu(t0)\noutput t1\n"
BAD = "input t0 : Float32 [2]\nt1 = Relu(t9)\noutput t1\n"


def run(*args, stdin=None):
    """Run the installed console script the way a user would."""
    exe = os.path.join(os.path.dirname(sys.executable), "gradir")
    cmd = [exe] if os.path.exists(exe) else [sys.executable, "-m", "gradir.cli"]
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
    import gradir.cli as cli
    monkeypatch.setattr(cli, "cmd_check", lambda a: 1 / 0)
    parser_args = ["check", "x"]
    # rebuild so the patched function is used
    assert cli.main(parser_args) == 3
    err = capsys.readouterr().err
    assert "internal error: ZeroDivisionError" in err and "Traceback" not in err
    assert cli.main(["--traceback", *parser_args]) == 3
    assert "Traceback" in capsys.readouterr().err


def test_docs_ops_md_is_current():
    from gradir.docs import ops_markdown
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
    assert found | {"gradir.grammar"} == listed


def test_a_slow_compile_says_why_on_a_terminal(monkeypatch, capsys):
    """The first process on a machine builds the compiled kernels (~30 s): on a terminal,
    ``run`` and ``plan`` say so instead of staying silent; a quick compile says nothing, and
    neither does a compile whose stderr is not a terminal."""
    import time

    from gradir import runcli

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
