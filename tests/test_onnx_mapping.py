"""The ONNX mapping as data (``Op.ONNX``, gradir/ir/onnxmap.py): every registered op exports and imports
back, or says why ONNX has no such op; user ops (defined after gradir is imported) round trip through
the ``ai.gradir`` domain, and an op's ONNX data alone (name, domain, attribute renames, operand order)
makes its export and import."""

from __future__ import annotations

from typing import Optional

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gradir
from gradir import OPS, Graph, GraphInput
from gradir.ir.op import Attr, InferContext, Op, Operand
from gradir.interop.onnx import export_onnx, import_onnx
from gradir.interop.onnx.export_ops import EXPORTERS, exporter_for, exports_in_gradir_domain
from gradir.interop.onnx.import_ops import HANDLERS, handlers
from gradir.interop.onnx.ort import ort_notes
from gradir.ir.onnxmap import MS_DOMAIN, OnnxMap, no_onnx, onnx_map
from gradir.ir.types import TensorType

import onnx

NAMES = sorted(OPS)  # the built-ins (user ops defined by the tests below are removed again)


@pytest.fixture
def user_ops():
    """Ops a test defines register globally: they are removed when it ends (other tests list every op)."""
    before = set(OPS)
    yield
    for name in set(OPS) - before:
        del OPS[name]


# -- every op exports, or says why not -------------------------------------------------------------------
def onnx_problem(name: str) -> Optional[str]:
    """What the op lacks for ONNX, naming it; ``None`` if it has everything: an exporter (its ``ONNX``
    data or a hand-written one) whose ai.onnx/com.microsoft node imports back, or ``NO_ONNX`` saying why
    ONNX has no such op."""
    cls = OPS[name]
    if exporter_for(cls) is None and not exports_in_gradir_domain(cls):
        if not no_onnx(cls):
            return (f"op {name} has no ONNX export: give its class ONNX = OnnxMap(...) (gradir/ir/onnxmap.py), a "
                    "hand exporter in gradir/interop/onnx/exporter.py, or NO_ONNX = '<why ONNX has no such op>'")
        return None
    m = onnx_map(cls)
    if m is not None and cls not in EXPORTERS and (m.domain, m.op_type(cls)) not in handlers():
        return f"op {name}: its ONNX node {m.domain or 'ai.onnx'} {m.op_type(cls)} has no import"
    return None


@pytest.mark.parametrize("name", NAMES)
def test_every_op_exports_or_says_why_not(name: str) -> None:
    problem = onnx_problem(name)
    assert problem is None, problem


def test_the_check_names_an_op_without_onnx_data(monkeypatch) -> None:
    monkeypatch.setattr(OPS["Relu"], "ONNX", None)
    assert "op Relu has no ONNX export" in onnx_problem("Relu")
    monkeypatch.setattr(OPS["Relu"], "NO_ONNX", "because")
    assert onnx_problem("Relu") is None


def test_two_ops_never_claim_one_onnx_node() -> None:
    seen: dict[tuple[str, str], str] = {}
    for name in NAMES:
        m = onnx_map(OPS[name])
        if m is not None:
            key = (m.domain, m.op_type(OPS[name]))
            assert key not in seen, f"{name} and {seen[key]} both map to {key}"
            seen[key] = name


def _one_op_graph(draw, name: str) -> Graph:
    from strategies import DECLARED_EXAMPLES, OP_EXAMPLES
    cls = OPS[name]
    if name in DECLARED_EXAMPLES:
        attrs, t = DECLARED_EXAMPLES[name](draw)
        return Graph([], [cls(["t0"], [], attrs, [t])], ["t0"]).validate()
    types, attrs = OP_EXAMPLES[name](draw)
    inputs = [GraphInput(f"t{k}", t) for k, t in enumerate(types) if t is not None]
    operands = [None if t is None else f"t{k}" for k, t in enumerate(types)]
    n = cls.num_results(cls(["r"], operands, attrs).resolved_attrs())
    results = [f"t{len(types) + k}" for k in range(n)]
    return Graph(inputs, [cls(results, operands, attrs)], results).validate()


def _same_attrs(a: Op, b: Op) -> bool:
    """``b``'s attributes are ``a``'s, a float one possibly as the float32 its Float32 op computes with."""
    ra, rb = a.resolved_attrs(), b.resolved_attrs()
    for k, v in ra.items():
        w = rb.get(k)
        if isinstance(v, float) and isinstance(w, float):
            if not (v == w or float(np.float32(v)) == w or np.isnan(v) and np.isnan(w)):
                return False
        elif v != w and not (isinstance(v, tuple) and list(v) == list(w or ())):
            return False
    return True


def _outputs(g: Graph, feed: dict) -> Optional[dict]:
    try:
        return gradir.compile(g, threads=1).run(feed)
    except gradir.InputError:
        return None


@pytest.mark.parametrize("name", NAMES)
def test_a_one_op_graph_of_every_op_exports_and_imports_back_to_the_same_op_and_bits(name: str) -> None:
    """Export without --custom-domain where the op has a counterpart (with it where its attributes or
    opset have none, or it has none: then NO_ONNX), import back: an op exported from its ONNX data comes
    back as itself, with its attributes; every op's outputs come back bit for bit."""
    from gradir.backends.cpu.kernels import jit
    from gradir.ir.labels import input_key
    from gradir.cli.run import demo_inputs
    cls = OPS[name]
    exported_plain = []

    @settings(max_examples=8, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(st.data())
    def prop(data) -> None:
        g = _one_op_graph(data.draw, name)
        try:
            model = export_onnx(g)
            exported_plain.append(True)
            assert all(n.domain != "ai.gradir" for n in model.graph.node)
        except gradir.OnnxError as e:
            assert name in str(e) and "--custom-domain" in str(e), str(e)
            model = export_onnx(g, custom_domain=True)
        back = import_onnx(model).graph
        if cls not in EXPORTERS:  # written from its ONNX data (or in ai.gradir): the very op comes back
            ops = [op for op in back.ops if op.op_name != "Identity" or name == "Identity"]
            if name == "Sum" and len(g.ops[0].operands) == 1:
                assert [op.op_name for op in back.ops] == ["Identity"]
            else:
                assert [op.op_name for op in ops] == [name], back.to_text()
                m = onnx_map(cls)
                if m is None or (m.domain, m.op_type(cls)) not in HANDLERS:  # read back from the data too
                    assert _same_attrs(g.ops[0], ops[0]), (g.to_text(), back.to_text())
        ins = demo_inputs(g, 0)
        feed = {input_key(i): ins[i.name] for i in g.inputs}
        want = _outputs(g, feed)
        if want is None:
            return
        got = _outputs(back, feed)
        assert got is not None and set(got) == set(want)
        for k, w in want.items():
            assert got[k].dtype == w.dtype and got[k].tobytes() == w.tobytes(), (name, k)

    with jit.disabled():
        prop()
    if no_onnx(cls) is None:
        assert exported_plain, f"op {name} has ONNX data but no example exported without --custom-domain"


# -- user ops ----------------------------------------------------------------------------------------------
def _softsign_class():
    class SoftsignOp(Op):
        """x / (1 + |x|)."""

        OPERANDS = (Operand("X"),)
        ELEMENTWISE = "same"
        FORMULA = "X / (1 + abs(X))"

        def infer(self, ctx: InferContext) -> list[TensorType]:
            return [ctx.type(0)]
    return SoftsignOp


def _mix_class():
    class MixOp(Op):
        """A user op with one attribute of each kind."""

        OPERANDS = (Operand("A"), Operand("B", optional=True))
        ATTRS = (Attr("alpha", "float", 0.5), Attr("n", "int", 1), Attr("mode", "str", "a"),
                 Attr("axes", "ints", ()), Attr("weights", "floats", (1.0,)), Attr("names", "strs", ("x",)),
                 Attr("flag", "bool", False), Attr("beta", "float", None))

        def infer(self, ctx: InferContext) -> list[TensorType]:
            return [ctx.type(0)]
    return MixOp


def _user_graph() -> gradir.Graph:
    b = gradir.GraphBuilder("user")
    x = b.input("Float64", [3, 4], label="x")
    y = b.apply("Softsign", x)
    z = b.apply("Mix", y, x, alpha=0.1, n=-7, mode="zwei", axes=[], weights=[0.1, 2.5, -1e300],
                names=["p", "q"], flag=True)
    w = b.apply("Mix", z, alpha=2.5, axes=[0, -1], weights=[], names=[], beta=1e-300)
    b.output(w)
    return b.build()


def test_a_user_op_with_attributes_of_every_kind_round_trips_through_ai_gradir(user_ops) -> None:
    """Ops defined after gradir is imported: exported in ai.gradir without --custom-domain (a user's op has
    no counterpart gradir could know of), every attribute read back exactly (Float64 numbers float32 does
    not hold, empty lists, booleans)."""
    _softsign_class(), _mix_class()
    g = _user_graph()
    model = export_onnx(g)
    assert {n.op_type: n.domain for n in model.graph.node} == {"Softsign": "ai.gradir", "Mix": "ai.gradir"}
    back = import_onnx(model.SerializeToString()).graph
    strip = [line.split("  #")[0].rstrip() for line in back.to_text().splitlines()]
    assert strip == g.to_text().splitlines()
    assert [op.resolved_attrs() for op in back.ops] == [op.resolved_attrs() for op in g.ops]
    assert back.ops[1].resolved_attrs()["flag"] is True
    assert ort_notes(g, 17, False) == ["ai.gradir ops (ONNX Runtime has no kernel for them): Mix, Softsign"]


def test_the_command_line_exports_and_imports_a_user_op_and_warns_that_ort_cannot_run_it(user_ops, tmp_path,
                                                                                          capsys) -> None:
    from gradir.cli.main import main
    _softsign_class(), _mix_class()
    g = _user_graph()
    (tmp_path / "g.gir").write_text(g.to_text())
    assert main(["export", str(tmp_path / "g.gir"), "-o", str(tmp_path / "g.onnx")]) == 0
    err = capsys.readouterr().err
    assert "warning: ONNX Runtime cannot run this model: ai.gradir ops (ONNX Runtime has no kernel for them): " \
        "Mix, Softsign" in err
    assert main(["import", str(tmp_path / "g.onnx"), "-o", str(tmp_path / "back.gir")]) == 0
    back = gradir.load(str(tmp_path / "back.gir"))
    assert [op.to_string() for op in back.ops] == [op.to_string() for op in g.ops]


def test_a_user_op_with_onnx_data_exports_as_that_onnx_op_and_imports_back(user_ops) -> None:
    """The data alone makes both directions: ONNX's own Softsign (which gradir lacks), run by ONNX's
    reference implementation, and a user op with renamed attributes and swapped operands."""
    from onnx.reference import ReferenceEvaluator
    cls = _softsign_class()
    cls.ONNX = OnnxMap()

    class FlippedSubOp(Op):
        """B - A, written as ONNX's Sub(B, A)."""

        ONNX = OnnxMap(name="Sub", operands=(1, 0))
        OPERANDS = (Operand("A"), Operand("B"))

        def infer(self, ctx: InferContext) -> list[TensorType]:
            return [ctx.unify(0, 1)]

    class SlopedReluOp(Op):
        """LeakyRelu under another name, its slope called s."""

        ONNX = OnnxMap(name="LeakyRelu", attrs={"s": "alpha"})
        OPERANDS = (Operand("X"),)
        ATTRS = (Attr("s", "float", 0.25),)

        def infer(self, ctx: InferContext) -> list[TensorType]:
            return [ctx.type(0)]

    b = gradir.GraphBuilder("user")
    x, y = b.input("Float32", [2, 3], label="x"), b.input("Float32", [2, 3], label="y")
    b.output(b.apply("Softsign", x))
    b.output(b.apply("FlippedSub", x, y))
    b.output(b.apply("SlopedRelu", x, s=0.5))
    g = b.build()
    model = export_onnx(g)
    nodes = [(n.domain, n.op_type, list(n.input), {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute})
             for n in model.graph.node]
    assert nodes == [("", "Softsign", ["x"], {}), ("", "Sub", ["y", "x"], {}), ("", "LeakyRelu", ["x"], {"alpha": 0.5})]
    xv = np.linspace(-3, 3, 6, dtype=np.float32).reshape(2, 3)
    yv = np.arange(6, dtype=np.float32).reshape(2, 3)
    got = ReferenceEvaluator(model).run(None, {"x": xv, "y": yv})
    np.testing.assert_allclose(got[0], xv / (1 + np.abs(xv)), rtol=1e-6)
    np.testing.assert_array_equal(got[1], yv - xv)
    back = import_onnx(model).graph
    # ai.onnx Softsign is the user's op; Sub and LeakyRelu are the built-ins', the first to claim them
    assert [(op.op_name, op.operands, op.resolved_attrs()) for op in back.ops] == [
        ("Softsign", ["t0"], {}), ("Sub", ["t1", "t0"], {}), ("LeakyRelu", ["t0"], {"alpha": 0.5})]


def test_a_user_op_that_says_it_has_no_counterpart_needs_the_custom_domain(user_ops) -> None:
    cls = _softsign_class()
    cls.NO_ONNX = "a test op"
    b = gradir.GraphBuilder("user")
    b.output(b.apply("Softsign", b.input("Float32", [2], label="x")))
    with pytest.raises(gradir.OnnxError, match=r"Softsign \(t1\): it has no ONNX .*--custom-domain"):
        export_onnx(b.build())
    assert [n.domain for n in export_onnx(b.build(), custom_domain=True).graph.node] == ["ai.gradir"]


def test_onnx_data_naming_an_op_onnx_lacks_is_an_error_naming_the_op_not_a_checker_failure(user_ops) -> None:
    cls = _softsign_class()
    cls.ONNX = OnnxMap(name="NoSuchOp")
    b = gradir.GraphBuilder("user")
    b.output(b.apply("Softsign", b.input("Float32", [2], label="x")))
    with pytest.raises(gradir.OnnxError, match=r"Softsign \(t1\): its ONNX data names ai.onnx NoSuchOp, which opset "
                                               r"17 does not have; export it with --custom-domain"):
        export_onnx(b.build())
    cls.ONNX = OnnxMap(since=1)  # ONNX's Softsign: in every opset
    assert export_onnx(b.build(), opset=11).graph.node[0].op_type == "Softsign"


def test_onnx_data_is_not_inherited_by_a_subclass(user_ops) -> None:
    """A subclass is another op with another name: it does not export as its base's ONNX op."""
    from gradir.ops.activation import ReluOp

    class MyReluOp(ReluOp):
        """max(x, 0), again."""

    assert onnx_map(OPS["Relu"]) == OnnxMap()
    assert onnx_map(MyReluOp) == OnnxMap(domain="ai.gradir")  # a user op: ai.gradir
    b = gradir.GraphBuilder("user")
    b.output(b.apply("MyRelu", b.input("Float32", [2], label="x")))
    assert [(n.domain, n.op_type) for n in export_onnx(b.build()).graph.node] == [("ai.gradir", "MyRelu")]


@pytest.mark.parametrize("kwargs, match", [
    ({"domain": "ai.unknown"}, "OnnxMap.domain"), ({"operands": (0, 0)}, "permutation"),
    ({"attrs": {"a": 1}}, "OnnxMap.attrs")])
def test_bad_onnx_data_is_refused_where_it_is_written(kwargs: dict, match: str) -> None:
    with pytest.raises(TypeError, match=match):
        OnnxMap(**kwargs)


def test_an_opset_without_the_op_is_said_with_the_opset_to_use() -> None:
    m = OnnxMap(since=12, until=15)
    assert m.opset_problem("X", 11) == "ONNX has X from opset 12; use --opset 12 or later"
    assert m.opset_problem("X", 16) == "ONNX has X until opset 15; use --opset 15 or earlier"
    assert m.opset_problem("X", 13) is None
    assert OnnxMap(domain=MS_DOMAIN, since=12).opset_problem("X", 11) is None  # opsets are ai.onnx's
