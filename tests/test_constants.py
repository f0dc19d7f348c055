"""Constants: the ``Constant`` op (value in the text), its errors, run, autodiff, cse, fold-constants
and the builder's ``x + 1.0`` / ``b.constant(array)``."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gradir
from gradir.transforms.passes.pipeline import DEFAULT_PASSES
from gradir import GraphBuilder
from gradir.cli.main import main
from gradir.ir.constants import MAX_CONSTANT_ELEMENTS
from gradir.errors import GradirError


def _fmt(text: str) -> str:
    return gradir.parse(text).to_text()


def _errors(text: str) -> list[str]:
    """Every rendered diagnostic of ``text`` (``FILE:LINE:COL: error: MESSAGE`` with the caret line)."""
    with pytest.raises(GradirError) as e:
        gradir.parse(text, "c.gir")
    return e.value.render().split("\nc.gir:")


# -- parse and fmt ---------------------------------------------------------------------------------
EVERY_DTYPE = """\
t0 = Constant(value=0.5) : Float32 [2, 3]
t1 = Constant(value=[1.5, -2.0, 3.25]) : Float64 [3]
t2 = Constant(value=[1, -2147483648, 2147483647]) : Int32 [3]
t3 = Constant(value=[-9223372036854775808, 9223372036854775807]) : Int64 [2]
t4 = Constant(value=[true, false, true, true]) : Bool [2, 2]
t5 = Constant(value=7) : Int64 scalar
t6 = Constant(value=false) : Bool [3]
t7 = Constant(value=[-inf, inf, nan, -0.0]) : Float32 [4]
output t0, t1, t2, t3, t4, t5, t6, t7
"""


def test_every_dtype_parses_prints_canonically_and_round_trips():
    g = gradir.parse(EVERY_DTYPE)
    assert g.to_text() == EVERY_DTYPE
    assert gradir.parse(g.to_text()) == g
    assert [g.type_of(f"t{k}").dtype.value for k in range(8)] == [
        "Float32", "Float64", "Int32", "Int64", "Bool", "Int64", "Bool", "Float32"]


def test_fmt_prints_floats_shortest_for_their_dtype():
    text = ("t0 = Constant(value=[0.10000000149011612, 1, 2e0, 1E3, 3.4028234663852886e+38]) : Float32 [5]\n"
            "t1 = Constant(value=[0.10000000149011612, 1, +0.1]) : Float64 [3]\n"
            "t2 = Constant( value = 1 ) : Float32 scalar\n"
            "output t0, t1, t2\n")
    assert _fmt(text) == ("t0 = Constant(value=[0.1, 1.0, 2.0, 1000.0, 3.4028235e+38]) : Float32 [5]\n"
                          "t1 = Constant(value=[0.10000000149011612, 1.0, 0.1]) : Float64 [3]\n"
                          "t2 = Constant(value=1.0) : Float32 scalar\n"
                          "output t0, t1, t2\n")
    # the shortened text reads back to the very same float32 bits
    a = gradir.compile(text).run({})["t0"]
    b = gradir.compile(_fmt(text)).run({})["t0"]
    assert a.tobytes() == b.tobytes() and a[0] == np.float32(0.1)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(width=32) | st.floats(-3.4e38, 3.4e38), min_size=1, max_size=8))
def test_float32_printing_round_trips_the_bits(xs):
    text = f"t0 = Constant(value=[{', '.join(repr(x) for x in xs)}]) : Float32 [{len(xs)}]\noutput t0\n"
    printed = _fmt(text)
    assert _fmt(printed) == printed
    want = np.array(xs, np.float64).astype(np.float32)
    got = gradir.compile(printed).run({})["t0"]
    assert got.tobytes() == want.tobytes() or (np.isnan(want) == np.isnan(got)).all()
    for x, shown in zip(want, printed.split("[", 1)[1].split("]")[0].split(", ")):
        assert shown == str(x) or (np.isnan(x) and shown == "nan") or float(shown) == float(str(x))


def test_scalar_and_list_forms_are_kept_as_written():
    text = ("t0 = Constant(value=[2.0, 2.0]) : Float64 [2]\nt1 = Constant(value=2.0) : Float64 [2]\n"
            "output t0, t1\n")
    assert _fmt(text) == text
    assert gradir.parse(text).ops[0] != gradir.parse(text).ops[1].copy(results=["t0"])


def test_fmt_cli_check_and_idempotence(tmp_path, capsys):
    f = tmp_path / "c.gir"
    f.write_text("t0 = Constant(value=[1,2 ,3]) : Float32 [3]  # c\noutput t0\n")
    assert main(["fmt", "--check", str(f)]) == 1
    assert main(["fmt", "-i", str(f)]) == 0
    assert f.read_text() == "t0 = Constant(value=[1.0, 2.0, 3.0]) : Float32 [3]  # c\noutput t0\n"
    assert main(["fmt", "--check", str(f)]) == 0


def test_the_documented_limit_is_accepted_and_one_more_is_not():
    ok = f"t0 = Constant(value=[{', '.join(['1'] * MAX_CONSTANT_ELEMENTS)}]) : Int32 [{MAX_CONSTANT_ELEMENTS}]\n"
    g = gradir.parse(ok + "output t0\n")
    assert g.to_text() == ok + "output t0\n"
    n = MAX_CONSTANT_ELEMENTS + 1
    errs = _errors(f"t0 = Constant(value=[{', '.join(['1'] * n)}]) : Int32 [{n}]\noutput t0\n")
    assert "has 65,537 elements; a list value has at most 65,536 (larger data belongs in a graph input)" in errs[0]
    # a number may fill any allowed shape
    assert gradir.parse("t0 = Constant(value=1) : Int32 [1000, 1000]\noutput t0\n").type_of("t0").numel == 10**6


# -- located errors --------------------------------------------------------------------------------
@pytest.mark.parametrize("line, where, message", [
    ("t1 = Constant(value=[1, 2]) : Float32 [3]", "1:21", "value has 2 elements but type Float32 [3] has 3"),
    ("t1 = Constant(value=[1, 3000000000, 4]) : Int32 [3]", "1:25",
     "value element 1: 3000000000 does not fit Int32 (-2147483648..2147483647)"),
    ("t1 = Constant(value=[1, 9223372036854775808]) : Int64 [2]", "1:25",
     "value element 1: 9223372036854775808 does not fit Int64"),
    ("t1 = Constant(value=1e39) : Float32 [2]", "1:21", "value 1e+39 does not fit Float32"),
    ("t1 = Constant(value=[0, -1e39]) : Float32 [2]", "1:25", "value element 1: -1e+39 does not fit Float32"),
    ("t1 = Constant(value=0.5)", "1:6", "the result type is required on a Constant line"),
    ("t1 = Constant(value=[[1], [2]]) : Float32 [2]", "1:23", "nested lists are not allowed"),
    ("t1 = Constant(value=[1,  1.5]) : Int64 [2]", "1:26", "value element 1: 1.5 is not an integer"),
    ("t1 = Constant(value=1) : Bool [2]", "1:21", "value 1 is not a Bool; write true or false"),
    ("t1 = Constant(value=true) : Float64 [2]", "1:21", "value true is a boolean; Float64 constants need numbers"),
    ("t1 = Constant(value=1) : Float32 [?, 2]", "1:1", "the type of a Constant must have a known shape"),
    ("t1 = Constant(value=\"a\") : Float32 [2]", "1:15", "attribute value expects a number, true/false"),
    ("t1 = Constant(value=[1, 1e309]) : Float64 [2]", "1:25", "number 1e309 is beyond the range of a 64-bit float"),
    ("t1 = Constant(value=[1,-1e309]) : Float64 [2]", "1:24", "number -1e309 is beyond the range of a 64-bit"),
    ("t1 = Constant() : Float32 [2]", "1:6", "attribute 'value' (number, true/false or flat list of them) is "
                                            "required"),
])
def test_errors_are_located(line, where, message):
    errs = _errors(line + "\noutput t1\n")
    assert len(errs) == 1
    assert errs[0].startswith(f"c.gir:{where}: error: Constant")
    assert message in errs[0]


def test_element_errors_point_at_the_element(tmp_path, capsys):
    f = tmp_path / "bad.gir"
    f.write_text("t1 = Constant(value=[ 1 ,  2 , 3e40 ]) : Float32 [3]\noutput t1\n")
    assert main(["check", str(f)]) == 1
    err = capsys.readouterr().err
    assert f"{f}:1:32: error: Constant: value element 2: 3e+40 does not fit Float32" in err
    assert "\n" + " " * 35 + "^^^^\n" in err  # under 3e40 (4 columns of indentation)


# -- run -------------------------------------------------------------------------------------------
RUN = """\
input t0 : Float32 [2, 3]
t1 = Constant(value=[1, 2, 3, 4, 5, 6]) : Float32 [2, 3]
t2 = Add(t0, t1)
t3 = Constant(value=0.5) : Float32 scalar
t4 = Mul(t2, t3)
t5 = Constant(value=[1, 2, 3]) : Int64 [3]
t6 = Neg(t5)
output t4, t6
"""


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("disable", [[], ["fold-constants"]])
def test_run_results_and_constants_survive_buffer_reuse(threads, disable):
    exe = gradir.compile(RUN, threads, disable=disable)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    for _ in range(3):  # in-place Add reuses t1's buffer: the next run must see the constant unchanged
        r = exe.run({"t0": x})
        np.testing.assert_array_equal(r["t4"], (x + np.arange(1, 7, dtype=np.float32).reshape(2, 3)) * 0.5)
        assert r["t4"].dtype == np.float32
        np.testing.assert_array_equal(r["t6"], [-1, -2, -3])
        assert r["t6"].dtype == np.int64
        r["t4"][...] = 99  # a caller writing into a result does not change the next run either


def test_a_graph_of_constants_only_runs_from_the_cli(tmp_path, capsys):
    f = tmp_path / "c.gir"
    f.write_text("t0 = Constant(value=[1, 2]) : Float64 [2]\nt1 = Exp(t0)\noutput t1\n")
    out = tmp_path / "o.npz"
    assert main(["run", str(f), "-o", str(out)]) == 0
    np.testing.assert_array_equal(np.load(out)["t1"], np.exp([1.0, 2.0]))


# -- autodiff --------------------------------------------------------------------------------------
DIFF = """\
input t0 : Float64 [2, 3]
t1 = Constant(value=[0.5, -1, 2, 3, 0.25, 4]) : Float64 [2, 3]
t2 = Mul(t0, t1)
t3 = Constant(value=1.5) : Float64 scalar
t4 = Add(t2, t3)
output t4
"""


def test_grad_through_constants_needs_no_cotangent_for_them():
    g = gradir.grad(DIFF)
    # the constants get no gradient: only t0 does; d(sum(ct * (t0 * c + 1.5)))/dt0 = ct * c
    assert [i.name for i in g.inputs] == ["t0", "t5"] and len(g.outputs) == 1
    assert sum(op.op_name == "Constant" for op in g.ops) == 1  # t1 is read by the backward Mul; t3 is not
    ct = np.arange(6, dtype=np.float64).reshape(2, 3)
    r = gradir.compile(g).run({"t0": np.ones((2, 3)), "t5": ct})
    np.testing.assert_array_equal(r[g.outputs[0]], ct * np.array([[0.5, -1, 2], [3, 0.25, 4]]))


def test_gradcheck_with_float32_constants():
    text = DIFF.replace("Float64", "Float32") + "t5 = Exp(t4)\noutput t5\n"
    report = gradir.gradcheck(text, seed=1)
    assert report.ok and report.promoted, report.table()


# -- passes ----------------------------------------------------------------------------------------
def test_cse_merges_equal_constants_bit_exactly():
    text = ("t0 = Constant(value=0.5) : Float32 [2]\nt1 = Constant(value=0.5) : Float32 [2]\n"  # merged
            "t2 = Constant(value=0.5) : Float32 [3]\n"                                            # other type
            "t3 = Constant(value=0.0) : Float32 [2]\nt4 = Constant(value=-0.0) : Float32 [2]\n"    # other bits
            "t5 = Constant(value=nan) : Float64 [2]\nt6 = Constant(value=nan) : Float64 [2]\n"    # merged
            "output t0, t1, t2, t3, t4, t5, t6\n")
    exe = gradir.compile(text)
    assert exe.plan.aliases == {"t1": "t0", "t6": "t5"}
    assert ("cse", "merged 2 ops") in exe.plan.pass_log
    r = exe.run({})
    assert struct.pack("<f", r["t4"][0]) != struct.pack("<f", r["t3"][0])
    g = gradir.parse(text)
    assert g.ops[3] != g.ops[4].copy(results=["t3"])  # Graph equality is bit-exact too


FOLD = """\
input t0 : Float32 [3]
t1 = Constant(value=[1, 2, 3]) : Float32 [3]
t2 = Constant(value=0.1) : Float32 [3]
t3 = Mul(t1, t2)
t4 = Exp(t3)
t5 = Add(t0, t4)
t6 = Constant(value=[1, 2, 3]) : Int64 [3]
t7 = ReduceSum(t6)
output t5, t7
"""


def test_fold_constants_evaluates_with_the_run_time_kernels():
    exe = gradir.compile(FOLD)
    assert ("fold-constants", "folded 3 ops") in exe.plan.pass_log
    assert [op.op_name for op in exe.program.ops] == ["Constant", "Add", "Constant"]
    plain = gradir.compile(FOLD, disable=["fold-constants", "simplify"])  # simplify: Mul by 0.1 is a Scale
    assert [p for p, _ in plain.plan.pass_log] == [p for p in DEFAULT_PASSES if p not in ("fold-constants", "simplify")]
    assert [op.op_name for op in plain.program.ops] == ["Constant", "Constant", "Mul", "Exp", "Add",
                                                        "Constant", "ReduceSum"]
    x = np.array([0.5, -1, 2], np.float32)
    a, b = exe.run({"t0": x}), plain.run({"t0": x})
    assert a["t5"].tobytes() == b["t5"].tobytes() and a["t7"] == b["t7"] == 6


def test_fold_constants_leaves_big_and_input_dependent_ops():
    n = MAX_CONSTANT_ELEMENTS + 1
    text = (f"input t0 : Float64 [2]\nt1 = Constant(value=1) : Float64 [{n}]\nt2 = Exp(t1)\n"
            "t3 = Constant(value=2) : Float64 [2]\nt4 = Mul(t0, t3)\noutput t2, t4\n")
    exe = gradir.compile(text)
    assert ("fold-constants", "folded 0 ops") in exe.plan.pass_log
    assert exe.run({"t0": np.ones(2)})["t2"].shape == (n,)


def test_plan_cli_lists_and_disables_the_pass(tmp_path, capsys):
    f = tmp_path / "f.gir"
    f.write_text(FOLD)
    assert main(["plan", "--list-passes"]) == 0
    assert "fold-constants: evaluate ops whose operands are all Constants" in capsys.readouterr().out
    assert main(["plan", str(f)]) == 0
    out = capsys.readouterr().out
    assert "#   fold-constants: folded 3 ops" in out and "t4 = Constant(value=[" in out
    assert main(["plan", str(f), "--disable", "fold-constants"]) == 0
    out = capsys.readouterr().out
    assert "fold-constants" not in out and "t4 = Exp(t3)" in out


# -- builder ---------------------------------------------------------------------------------------
def test_builder_numbers_become_constants_of_the_values_dtype():
    b = GraphBuilder()
    x, i = b.input("Float32", [2, 3]), b.input("Int64", [3])
    b.output(x + 1.0, 1.0 + x, x - 1, 1 - x, 2.0 * x, x / 2, 2 * i, i + 1)
    g = b.build()
    text = g.to_text()
    for line in ["t2 = Constant(value=1.0) : Float32 scalar", "t3 = Add(t0, t2)", "t5 = Add(t4, t0)",
                 "t6 = Constant(value=1.0) : Float32 scalar", "t7 = Sub(t0, t6)", "t9 = Sub(t8, t0)",
                 "t10 = Scale(t0, factor=2.0)", "t11 = Scale(t0, factor=0.5)",
                 "t12 = Constant(value=2) : Int64 scalar", "t13 = Mul(t12, t1)",
                 "t14 = Constant(value=1) : Int64 scalar", "t15 = Add(t1, t14)"]:
        assert line in text, line
    assert gradir.parse(text) == g
    x0, i0 = np.arange(6, dtype=np.float32).reshape(2, 3), np.arange(3)
    r = gradir.compile(g).run({"t0": x0, "t1": i0})
    for name, want in zip(g.outputs, [x0 + 1, 1 + x0, x0 - 1, 1 - x0, 2 * x0, x0 / 2, 2 * i0, i0 + 1]):
        np.testing.assert_array_equal(r[name], want)
        assert r[name].dtype == want.dtype


def test_builder_constant_from_arrays_and_python_values():
    b = GraphBuilder()
    c = b.constant(np.array([[1, 2], [3, 4]], np.int32))
    f = b.constant(np.float32(0.1))
    fill = b.constant(0.5, "Float64", [2, 2])
    nested = b.constant([[True, False]], "Bool")
    assert (str(c.type), str(f.type), str(fill.type), str(nested.type)) == (
        "Int32 [2, 2]", "Float32 scalar", "Float64 [2, 2]", "Bool [1, 2]")
    b.output(c, f, fill, nested)
    text = b.build().to_text()
    assert "t0 = Constant(value=[1, 2, 3, 4]) : Int32 [2, 2]" in text
    assert "t1 = Constant(value=0.1) : Float32 scalar" in text
    assert "t3 = Constant(value=[true, false]) : Bool [1, 2]" in text
    r = gradir.compile(b.build()).run({})
    np.testing.assert_array_equal(r["t0"], [[1, 2], [3, 4]])
    assert r["t1"].dtype == np.float32 and r["t1"] == np.float32(0.1)


@pytest.mark.parametrize("make, message", [
    (lambda b: b.constant(np.zeros(MAX_CONSTANT_ELEMENTS + 1)), "the array has 65,537 elements; a Constant holds "
                                                                "at most 65,536"),
    (lambda b: b.constant(np.zeros(2, np.float16)), "NumPy dtype float16 has no gradir dtype"),
    (lambda b: b.constant(np.array(["a"])), "has no gradir dtype"),
    (lambda b: b.constant(1.0), "give the dtype of a Python value"),
    (lambda b: b.constant([[1], [2, 3]], "Int32"), "the nested list is ragged"),
    (lambda b: b.constant([3000000000], "Int32"), "value element 0: 3000000000 does not fit Int32"),
    (lambda b: b.constant(np.zeros(2), "Float32"), "an array brings its own dtype and shape"),
    (lambda b: b.Constant(value=1.0), "Constant: its type is declared, not inferred; use b.constant(array)"),
    (lambda b: b.input("Int32", [2]) + 1.5, "t0 + 1.5: value 1.5 is not an integer; Int32 constants need integers"),
])
def test_builder_constant_errors(make, message):
    with pytest.raises(gradir.BuilderError) as e:
        make(GraphBuilder())
    assert message in str(e.value)


def test_the_kernel_returns_a_fresh_array_never_the_cached_one():
    from gradir.backends.cpu.kernels import KERNELS
    op = gradir.parse("t0 = Constant(value=[1, 2]) : Int32 [2]\noutput t0\n").ops[0]
    cached = op.kernel_attrs()["array"]
    assert not cached.flags.writeable and op.kernel_attrs()["array"] is cached  # made once per op
    fresh = KERNELS["Constant"].fn(out=None, **op.kernel_attrs())
    assert fresh.flags.writeable and not np.shares_memory(fresh, cached)
    out = np.empty(2, np.int32)
    assert KERNELS["Constant"].fn(out=out, **op.kernel_attrs()) is out and out.tolist() == [1, 2]
