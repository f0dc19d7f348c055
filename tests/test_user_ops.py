"""User-defined ops, end to end: two op files written outside the repository (``Softsign``, element-wise
exactly as in docs/extending.md, and ``Swish``, a composite op), through every command, on the command line
(``--ops`` and ``GRADIR_OPS``) and in Python (``gradir.load_ops``); and every broken op file: exit 1, a
message naming the file and the op, never a traceback.

Each test runs inside ``registry_snapshot``: the ops it loads are gone afterwards, so the rest of the
suite sees the built-in ops only.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import gradir
from gradir.cli.main import build_parser, main
from gradir.errors import ArgumentError, GradirError, OpDefinitionError
from gradir.ir.op import OPS, Op
from gradir.ops.userops import registry_snapshot, user_op_file

SOFTSIGN = '''\
from gradir.ops import ElementwiseOp, Operand

class SoftsignOp(ElementwiseOp):
    """x / (1 + |x|)."""
    OPERANDS = (Operand("X"),)
    FORMULA = "X / (1 + abs(X))"
    VJP = {"X": "dY / (1 + abs(X)) ** 2"}   # dY: the upstream gradient
'''

SWISH = '''\
from gradir.ops import Attr, CompositeOp, Operand


class SwishOp(CompositeOp):
    """X * sigmoid(alpha * X)."""
    OPERANDS = (Operand("X"),)
    ATTRS = (Attr("alpha", "float", 1.0),)

    @staticmethod
    def decompose(b, X, *, alpha):
        return b.Mul(X, b.Sigmoid(X * alpha))
'''


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


# name -> (file, the op's line in a graph, float64 reference f(x), its derivative f'(x))
KINDS = {
    "softsign": (SOFTSIGN, "Softsign(t0)", lambda x: x / (1 + np.abs(x)), lambda x: 1 / (1 + np.abs(x)) ** 2),
    "swish": (SWISH, "Swish(t0, alpha=1.5)", lambda x: x * _sigmoid(1.5 * x),
              lambda x: _sigmoid(1.5 * x) + 1.5 * x * _sigmoid(1.5 * x) * (1 - _sigmoid(1.5 * x))),
}


@pytest.fixture(autouse=True)
def _registry():
    """Every op a test loads (in Python or through ``main``) is unregistered after it."""
    with registry_snapshot():
        yield


@pytest.fixture
def opsdir(tmp_path):
    """The op files and graphs, in a temporary directory: outside the repository."""
    d = tmp_path / "user"
    d.mkdir()
    (d / "softsign.py").write_text(SOFTSIGN)
    (d / "swish.py").write_text(SWISH)
    return d


def graph_text(kind: str, dtype: str = "Float32", shape: str = "4, 5") -> str:
    """``y = Tanh(op(x))``: the user op between an input and a built-in element-wise op."""
    return (f'input t0 "x" : {dtype} [{shape}]\nt1 = {KINDS[kind][1]}\nt2 = Tanh(t1)\noutput t2 "y"\n')


def reference(kind: str, x: np.ndarray) -> np.ndarray:
    return np.tanh(KINDS[kind][2](x.astype(np.float64)))


def reference_grad(kind: str, x: np.ndarray, dy: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    return dy * (1 - np.tanh(KINDS[kind][2](x)) ** 2) * KINDS[kind][3](x)


def write(opsdir, kind: str, **kw) -> tuple[str, str]:
    """(op file, graph file) of ``kind``."""
    g = opsdir / f"{kind}.gir"
    g.write_text(graph_text(kind, **kw))
    return str(opsdir / f"{kind}.py"), str(g)


def cli(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    cap = capsys.readouterr()
    assert "Traceback" not in cap.err
    return code, cap.out, cap.err


def x_of(shape=(4, 5), dtype=np.float32, seed=0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-3, 3, size=shape).astype(dtype)


# ---------------------------------------------------------------------------
# Every command, for both ops
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
def test_check_fmt_and_dot_show_the_op_as_written(kind, opsdir, capsys):
    ops, g = write(opsdir, kind)
    assert cli(capsys, "check", "--ops", ops, g)[0] == 0
    code, out, _ = cli(capsys, "fmt", "--ops", ops, g)
    assert code == 0 and f"t1 = {KINDS[kind][1]} : Float32 [4, 5]" in out
    code, out, _ = cli(capsys, "dot", "--ops", ops, g)
    op_name = KINDS[kind][1].split("(")[0]
    assert code == 0 and f"<b>{op_name}</b>" in out


@pytest.mark.parametrize("kind", KINDS)
def test_plan_and_dot_plan_show_what_runs(kind, opsdir, capsys):
    """A composite op runs as its decomposition; an element-wise op as itself."""
    ops, g = write(opsdir, kind)
    runs = "Softsign(t0)" if kind == "softsign" else "Sigmoid("
    code, out, err = cli(capsys, "plan", "--ops", ops, g)
    assert code == 0 and runs in out, err
    assert kind == "softsign" or "Swish" not in out
    code, out, err = cli(capsys, "dot", "--plan", "--ops", ops, g)
    assert code == 0 and f"<b>#0  {'Softsign' if kind == 'softsign' else 'Scale'}</b>" in out, out


@pytest.mark.parametrize("kind", KINDS)
def test_run_matches_float64_numpy_in_both_dtypes_and_is_bit_identical_on_1_and_2_threads(kind, opsdir):
    ops, _ = write(opsdir, kind)
    gradir.load_ops(ops)
    for dtype, rtol in (("Float32", 1e-5), ("Float64", 1e-12)):
        x = x_of(dtype=np.float32 if dtype == "Float32" else np.float64)
        text = graph_text(kind, dtype)
        y1 = gradir.compile(text, threads=1).run({"x": x})["y"]
        y2 = gradir.compile(text, threads=2).run({"x": x})["y"]
        assert y1.dtype == x.dtype
        assert y1.tobytes() == y2.tobytes()
        np.testing.assert_allclose(y1, reference(kind, x), rtol=rtol, atol=rtol)


@pytest.mark.parametrize("kind", KINDS)
def test_run_on_the_command_line_with_GRADIR_OPS(kind, opsdir, capsys, monkeypatch):
    ops, g = write(opsdir, kind)
    monkeypatch.setenv("GRADIR_OPS", os.pathsep.join([str(opsdir / "swish.py"), ops]))
    out_file, in_file = str(opsdir / "out.npz"), str(opsdir / "in.npz")
    code, _, err = cli(capsys, "run", g, "--save-inputs", in_file, "-o", out_file)
    assert code == 0, err
    x = np.load(in_file)["x"]
    np.testing.assert_allclose(np.load(out_file)["y"], reference(kind, x), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kind", KINDS)
def test_fused_with_its_element_wise_neighbours_with_the_unfused_bits(kind, opsdir):
    ops, _ = write(opsdir, kind)
    gradir.load_ops(ops)
    # above the fusion pass's size threshold; neighbours that fuse (Tanh, transcendental, is kept apart)
    text = f'input t0 "x" : Float32 [256, 128]\nt1 = {KINDS[kind][1]}\nt2 = Mul(t1, t0)\nt3 = Relu(t2)\noutput t3 "y"\n'
    fused = gradir.compile(text, threads=1)
    bodies = [str(st.op.attrs.get("body")) for st in fused.plan.steps if st.op.op_name == "FusedElementwise"]
    primitive = "Softsign" if kind == "softsign" else "Sigmoid"
    assert any(primitive in b and "Mul" in b and "Relu" in b for b in bodies), [st.op for st in fused.plan.steps]
    unfused = gradir.compile(text, threads=1, disable=["fuse-elementwise"])
    x = x_of((256, 128))
    assert fused.run({"x": x})["y"].tobytes() == unfused.run({"x": x})["y"].tobytes()


@pytest.mark.parametrize("kind", KINDS)
def test_grad_matches_the_derivative_and_finite_differences(kind, opsdir, capsys):
    ops, g = write(opsdir, kind, dtype="Float64")
    out = str(opsdir / "g.grad.gir")
    code, _, err = cli(capsys, "grad", "--ops", ops, g, "-o", out)
    assert code == 0, err
    text = open(out).read()
    if kind == "swish":  # the backward part is primitives: the composite op is only the forward copy
        assert text.count("Swish(") <= 1 and "SigmoidGrad" in text
    gradir.load_ops(ops)
    bwd = gradir.compile(gradir.load(out), threads=1)
    fwd = gradir.compile(g, threads=1)
    x, dy = x_of(dtype=np.float64), x_of(dtype=np.float64, seed=1)
    (dx,) = bwd.run({"x": x, "cotangent(y)": dy}).values()
    np.testing.assert_allclose(dx, reference_grad(kind, x, dy), rtol=1e-10, atol=1e-12)
    h = 1e-6  # element-wise: one central difference per element at once
    fd = (fwd.run({"x": x + h})["y"] - fwd.run({"x": x - h})["y"]) / (2 * h) * dy
    np.testing.assert_allclose(dx, fd, rtol=1e-6, atol=1e-8)
    assert gradir.gradcheck(g).ok


@pytest.mark.parametrize("kind", KINDS)
def test_gradcheck_command(kind, opsdir, capsys):
    ops, g = write(opsdir, kind)
    code, out, err = cli(capsys, "gradcheck", "--ops", ops, g)
    assert code == 0, err
    assert "pass" in out


@pytest.mark.parametrize("kind", KINDS)
def test_export_and_import_of_that_export(kind, opsdir, capsys):
    pytest.importorskip("onnx")
    ops, g = write(opsdir, kind)
    model, back = str(opsdir / "m.onnx"), str(opsdir / "back.gir")
    code, _, err = cli(capsys, "export", "--ops", ops, g, "-o", model)
    assert code == 0, err
    code, _, err = cli(capsys, "import", "--ops", ops, model, "-o", back)
    assert code == 0, err
    text = open(back).read()
    # Softsign goes out in the ai.gradir domain and comes back as itself; a composite op as its decomposition
    assert ("Softsign(" in text) if kind == "softsign" else ("Sigmoid(" in text and "Swish" not in text)
    x = x_of()
    y0 = gradir.compile(g, threads=1).run({"x": x})["y"]
    y1 = gradir.compile(gradir.load(back), threads=1).run({"x": x})["y"]
    np.testing.assert_allclose(y1, y0, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("kind", KINDS)
def test_ops_shows_the_user_op_under_its_file(kind, opsdir, capsys):
    ops, _ = write(opsdir, kind)
    op_name = KINDS[kind][1].split("(")[0]
    code, out, err = cli(capsys, "ops", "--ops", ops, op_name)
    assert code == 0, err
    assert out.startswith(f"User ops ({ops}):\n  {op_name}: ")
    code, out, _ = cli(capsys, "ops", "--ops", ops, "--markdown", op_name)
    assert code == 0 and f"## User ops ({ops})" in out and f"### `{op_name}`" in out


def test_composite_op_sharded_run_matches_the_unsharded_one(opsdir):
    ops, _ = write(opsdir, "swish")
    gradir.load_ops(ops)
    text = graph_text("swish", shape="8, 5")
    x = x_of((8, 5))
    want = gradir.compile(text, threads=1).run({"x": x})["y"]
    got = gradir.shard(text, {"x": 0}).run({"x": x}, shards=2)["y"]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


def test_a_sharded_run_on_dask_worker_processes_loads_the_user_ops(opsdir):
    """A worker process has not loaded the op file: the task names the loaded files and it loads them."""
    pytest.importorskip("distributed")
    from gradir.distributed.scheduler import open_scheduler
    ops, _ = write(opsdir, "softsign")
    gradir.load_ops(ops)
    text = graph_text("softsign", shape="8, 5")
    x = x_of((8, 5))
    want = gradir.compile(text, threads=1).run({"x": x})["y"]
    with open_scheduler("local:2") as client:
        got = gradir.shard(text, {"x": 0}).run({"x": x}, shards=2, client=client)["y"]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


def test_composite_type_rule_is_its_decomposition_s(opsdir, capsys):
    """An operand its decomposition cannot take is the composite op's type error, located at the op."""
    ops, _ = write(opsdir, "swish")
    g = opsdir / "int.gir"
    g.write_text('input t0 : Int32 [2]\nt1 = Swish(t0)\noutput t1\n')
    code, _, err = cli(capsys, "check", "--ops", ops, str(g))
    assert code == 1
    assert err.startswith(f"{g}:2:6: error: Swish: its decomposition does not build on these operands (Int32 [2])")


AFFINE = '''\
from gradir.ops import Attr, CompositeOp, Operand


class AffineTanhOp(CompositeOp):
    """(a * X + B, tanh(X)); B optional, broadcast."""
    OPERANDS = (Operand("X"), Operand("B", optional=True))
    RESULTS = ("Y", "T")
    ATTRS = (Attr("a", "float", 2.0),)

    @staticmethod
    def decompose(b, X, B, *, a):
        y = X * a if B is None else b.Add(X * a, B)
        return y, b.Tanh(X)
'''


def test_a_composite_op_with_two_results_an_optional_operand_and_broadcasting(tmp_path):
    path = tmp_path / "affine.py"
    path.write_text(AFFINE)
    gradir.load_ops(str(path))
    text = ('input t0 "x" : Float64 [4, 5]\ninput t1 "b" : Float64 [5]\n'
            't2, t3 = AffineTanh(t0, t1, a=3.0)\nt4, t5 = AffineTanh(t0)\nt6 = Mul(t2, t3)\n'
            'output t6 "y", t4 "z"\n')
    x, bias = x_of(dtype=np.float64), x_of((5,), np.float64, seed=2)
    out = gradir.compile(text, threads=1).run({"x": x, "b": bias})
    np.testing.assert_allclose(out["y"], (3 * x + bias) * np.tanh(x), rtol=1e-12)
    np.testing.assert_allclose(out["z"], 2 * x, rtol=1e-12)
    assert gradir.gradcheck(text).ok  # b's gradient is summed over the broadcast axis


def test_a_composite_op_has_a_conformance_example_and_a_float64_reference(opsdir):
    """What the conformance suite (GRADIR_OPS=swish.py pytest tests/conformance) runs a composite op on."""
    ops, _ = write(opsdir, "swish")
    swish = gradir.load_ops(ops).SwishOp
    (x,), attrs = swish.example(np.random.default_rng(0), np.float32)
    assert x.dtype == np.float32 and x.shape == (4, 5) and attrs == {}
    y = swish.reference(x, alpha=1.5)
    assert y.dtype == np.float64
    np.testing.assert_allclose(y, KINDS["swish"][2](x.astype(np.float64)), rtol=1e-15, atol=1e-15)


# ---------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------
def test_load_ops_registers_the_classes_and_the_same_file_twice_is_a_no_op(opsdir):
    ops, _ = write(opsdir, "swish")
    module = gradir.load_ops(ops)
    assert OPS["Swish"] is module.SwishOp and OPS["Swish"].op_name == "Swish"
    assert gradir.load_ops(ops) is module
    assert gradir.load_ops(os.path.join(str(opsdir), ".", "swish.py")) is module  # another path, same file
    from pathlib import Path
    assert gradir.load_ops(Path(ops)) is module


def test_loading_writes_nothing_beside_the_op_file(opsdir, monkeypatch):
    """Python's loader would write ``__pycache__/swish.*.pyc`` into the user's directory."""
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    ops, g = write(opsdir, "swish")
    before = sorted(os.listdir(opsdir))
    gradir.load_ops(ops)
    assert sorted(os.listdir(opsdir)) == before


def test_two_op_files_of_the_same_name_do_not_collide(tmp_path):
    for d, op in (("a", "First"), ("b", "Second")):
        (tmp_path / d).mkdir()
        (tmp_path / d / "ops.py").write_text(SWISH.replace("SwishOp", f"{op}Op"))
        gradir.load_ops(str(tmp_path / d / "ops.py"))
    assert "First" in OPS and "Second" in OPS


def test_load_ops_takes_a_path(opsdir):
    with pytest.raises(ArgumentError, match="load_ops"):
        gradir.load_ops(3)  # type: ignore[arg-type]
    with pytest.raises(ArgumentError, match="NUL"):
        gradir.load_ops("a\0b.py")


def test_the_python_api_does_not_read_GRADIR_OPS(opsdir, monkeypatch):
    """A program says which ops it uses (import or load_ops); only the command line reads the variable."""
    ops, _ = write(opsdir, "swish")
    monkeypatch.setenv("GRADIR_OPS", ops)
    with pytest.raises(gradir.VerifyError, match="unknown op 'Swish'"):
        gradir.parse(graph_text("swish"))


def test_every_subcommand_takes_ops():
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    missing = [name for name, p in sub.choices.items() if "--ops" not in p._option_string_actions]
    assert missing == []


def test_the_op_file_is_an_input_never_overwritten(opsdir, capsys):
    ops, g = write(opsdir, "swish")
    code = main(["fmt", "--ops", ops, g, "-o", ops])
    assert code in (1, 2)
    assert open(ops).read() == SWISH
    assert "Traceback" not in capsys.readouterr().err


def test_a_name_clash_in_python_is_an_OpDefinitionError_and_keeps_the_built_in():
    """``Op.__init_subclass__`` raised TypeError for a second op of a name."""
    relu = OPS["Relu"]
    with pytest.raises(OpDefinitionError, match="op Relu .*already defined by gradir.ops.activation"):
        class ReluOp(Op):  # noqa: F841
            pass
    assert OPS["Relu"] is relu


# ---------------------------------------------------------------------------
# Broken op files: exit 1, the file and the op named, no traceback; the registry as it was
# ---------------------------------------------------------------------------
ELEMENTWISE_HEAD = "from gradir.ops import ElementwiseOp, Operand\n\n\nclass SoftsignOp(ElementwiseOp):\n"
COMPOSITE_HEAD = "from gradir.ops import CompositeOp, Operand\n\n\n"
BROKEN = {
    # name: (file text or None for a missing file, what the message must say besides the file)
    "missing file": (None, ["cannot read the op file: No such file or directory"]),
    "syntax error": ("from gradir.ops import Operand\nx = (\n", [":2:", "SyntaxError"]),
    "import error": ("from gradir.ops import NoSuchBase\n", [":1:1:", "ImportError", "NoSuchBase"]),
    "exception at import": ("import math\n\nvalue = 1 / 0\n", [":3:1:", "ZeroDivisionError", "value = 1 / 0"]),
    "exception in an op's class body": (COMPOSITE_HEAD + "class FooOp(CompositeOp):\n    SIZE = 1 / 0\n",
                                        [":5:", "FooOp", "ZeroDivisionError"]),
    "name clash with a built-in": (COMPOSITE_HEAD + "class ReluOp(CompositeOp):\n    OPERANDS = (Operand('X'),)\n\n"
                                   "    @staticmethod\n    def decompose(b, X):\n        return b.Tanh(X)\n",
                                   [":4:1:", "op Relu (class ReluOp) is already defined by gradir.ops.activation"]),
    "composite without decompose": (COMPOSITE_HEAD + "class FooOp(CompositeOp):\n    OPERANDS = (Operand('X'),)\n",
                                    [":4:1:", "composite op Foo (class FooOp) has no decompose function"]),
    "decompose of the wrong arity": (COMPOSITE_HEAD + "class FooOp(CompositeOp):\n"
                                     "    OPERANDS = (Operand('X'), Operand('W'))\n\n    @staticmethod\n"
                                     "    def decompose(b, X):\n        return b.Tanh(X)\n",
                                     [":4:1:", "composite op Foo: decompose cannot be called as decompose(b, X, W)"]),
    "bad formula": (ELEMENTWISE_HEAD + '    OPERANDS = (Operand("X"),)\n    FORMULA = "X / (1 +* abs(X))"\n',
                    ["Softsign"]),
    "unknown name in the formula": (ELEMENTWISE_HEAD + '    OPERANDS = (Operand("X"),)\n'
                                    '    FORMULA = "X / (1 + fabs(X))"\n', ["Softsign", "fabs"]),
    "VJP for a missing operand": (ELEMENTWISE_HEAD + '    OPERANDS = (Operand("X"),)\n    FORMULA = "X / (1 + abs(X))"\n'
                                  '    VJP = {"W": "dY"}\n', ["Softsign", "W"]),
    "element-wise op without a formula": (ELEMENTWISE_HEAD + '    OPERANDS = (Operand("X"),)\n',
                                          ["op Softsign: an ElementwiseOp needs a FORMULA"]),
    "attribute of an unknown kind": ("from gradir.ops import Attr, ElementwiseOp, Operand\n\n\n"
                                     "class SoftsignOp(ElementwiseOp):\n    OPERANDS = (Operand('X'),)\n"
                                     "    ATTRS = (Attr('beta', 'floaty', 1.0),)\n    FORMULA = 'X * beta'\n",
                                     [":6:5:", "SoftsignOp", "kind 'floaty' is not one of int, float"]),
    "an attribute named as an operand": ("from gradir.ops import Attr, ElementwiseOp, Operand\n\n\n"
                                         "class SoftsignOp(ElementwiseOp):\n    OPERANDS = (Operand('X'),)\n"
                                         "    ATTRS = (Attr('X', 'float', 1.0),)\n    FORMULA = 'X'\n",
                                         ["op Softsign: 'X' names two of its operands and attributes"]),
}


@pytest.mark.parametrize("case", BROKEN)
def test_a_broken_op_file_is_a_located_error_naming_the_file_and_the_op(case, tmp_path, capsys):
    text, says = BROKEN[case]
    path = tmp_path / "broken.py"
    if text is not None:
        path.write_text(text)
    g = tmp_path / "g.gir"
    g.write_text("input t0 : Float32 [2]\nt1 = Relu(t0)\noutput t1\n")
    before = dict(OPS)
    code, out, err = cli(capsys, "check", "--ops", str(path), str(g))
    assert code == 1
    assert err.startswith(f"{path}:"), err
    for s in says:
        assert s in err, err
    assert out == ""
    with pytest.raises(OpDefinitionError) as e:
        gradir.load_ops(str(path))
    assert isinstance(e.value, GradirError) and str(path) in str(e.value)
    assert OPS == before  # nothing half-registered


def test_a_failed_load_unregisters_the_file_s_earlier_ops(tmp_path):
    path = tmp_path / "two.py"
    path.write_text(SWISH + "\n\nclass TanhOp(SwishOp):\n    pass\n")
    before = dict(OPS)
    with pytest.raises(OpDefinitionError, match="op Tanh .*already defined"):
        gradir.load_ops(str(path))
    assert OPS == before and "Swish" not in OPS
    path.write_text(SWISH)  # fixed: it loads
    gradir.load_ops(str(path))
    assert "Swish" in OPS


def test_a_failing_decompose_is_located_at_the_op_and_its_line(tmp_path, capsys):
    path = tmp_path / "buggy.py"
    path.write_text(COMPOSITE_HEAD + "class FooOp(CompositeOp):\n    OPERANDS = (Operand('X'),)\n\n"
                    "    @staticmethod\n    def decompose(b, X):\n        return b.Tanhh(X)\n")
    g = tmp_path / "g.gir"
    g.write_text("input t0 : Float32 [2]\nt1 = Foo(t0)\noutput t1\n")
    for command in ("check", "run", "grad"):
        code, _, err = cli(capsys, command, "--ops", str(path), str(g))
        assert code == 1
        assert err.startswith(f"{g}:2:6: error: Foo: its decompose function failed ({path}:9): AttributeError:"), err


def test_the_console_script_reads_GRADIR_OPS_and_a_broken_file_exits_1_without_a_traceback(opsdir):
    ops, g = write(opsdir, "swish")
    exe = os.path.join(os.path.dirname(sys.executable), "gradir")
    cmd = [exe] if os.path.exists(exe) else [sys.executable, "-m", "gradir.cli.main"]
    env = dict(os.environ, GRADIR_OPS=ops)
    r = subprocess.run(cmd + ["check", g], capture_output=True, text=True, cwd=str(opsdir), env=env)
    assert r.returncode == 0, r.stderr
    (opsdir / "bad.py").write_text(textwrap.dedent("""\
        import nonexistent_module_for_gradir_tests
    """))
    env["GRADIR_OPS"] = ops + os.pathsep + "bad.py"
    r = subprocess.run(cmd + ["check", g], capture_output=True, text=True, cwd=str(opsdir), env=env)
    assert r.returncode == 1
    assert r.stderr.startswith("bad.py:1:1: error: the op file does not import: ModuleNotFoundError: No module named "
                               "'nonexistent_module_for_gradir_tests'\n")
    assert "Traceback" not in r.stderr


def test_an_export_of_a_composite_op_says_nothing_of_ai_gradir(opsdir, tmp_path, capsys):
    """A composite op exports as its decomposition: no warning that ONNX Runtime cannot run an ai.gradir op."""
    ops, g = write(opsdir, "swish")
    code, _, err = cli(capsys, "export", "--ops", ops, g, "-o", str(tmp_path / "s.onnx"))
    assert code == 0, err
    assert "ai.gradir" not in err, err


def test_importing_a_user_op_not_loaded_says_to_load_it(opsdir, tmp_path, capsys):
    ops, g = write(opsdir, "softsign")
    model = str(tmp_path / "s.onnx")
    assert cli(capsys, "export", "--ops", ops, g, "-o", model)[0] == 0
    with registry_snapshot():
        for name in [n for n, c in OPS.items() if user_op_file(c) is not None]:
            del OPS[name]
        code, _, err = cli(capsys, "import", model, "-o", str(tmp_path / "back.gir"))
    assert code == 1
    assert "(ai.gradir Softsign): no such gradir op (an op of your own is loaded with --ops FILE" in err, err


def test_a_composite_op_that_decomposes_into_itself_is_one_located_error(tmp_path, capsys):
    ops = tmp_path / "rec.py"
    ops.write_text("from gradir.ops import CompositeOp, Operand\n\n\nclass FooOp(CompositeOp):\n"
                   "    OPERANDS = (Operand('X'),)\n\n    @staticmethod\n    def decompose(b, X):\n"
                   "        return b.Foo(X)\n")
    g = tmp_path / "r.gir"
    g.write_text("input t0 : Float32 [4, 8]\nt1 = Foo(t0)\noutput t1\n")
    code, _, err = cli(capsys, "check", "--ops", str(ops), str(g))
    assert code == 1
    assert err.startswith(f"{g}:2:6: error: Foo: ") and "uses Foo itself" in err, err
    assert len(err) < 1000, err  # one message, not one per level of a recursion
