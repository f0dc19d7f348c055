"""ONNX import and export (gradir/interop/onnx): models built with onnx.helper, checked against ONNX's own
reference implementation (``onnx.reference``) or NumPy, round trips, errors, the command line."""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import pytest

import gradir
from gradir.cli.main import main
from gradir.interop.onnx import export_onnx, import_onnx

import onnx
import onnx_models as M


def _run(graph: gradir.Graph, inputs: dict) -> dict:
    return gradir.compile(graph).run(inputs)


def _numpy_softmax_flat(x: np.ndarray, axis: int, log: bool) -> np.ndarray:
    """ONNX Softmax before opset 13: flatten to 2-D at ``axis`` (onnx.reference implements only opset 13's)."""
    f = x.reshape(int(np.prod(x.shape[:axis])), -1).astype(np.float64)
    z = f - f.max(1, keepdims=True)
    out = z - np.log(np.exp(z).sum(1, keepdims=True)) if log else np.exp(z) / np.exp(z).sum(1, keepdims=True)
    return out.reshape(x.shape)


@pytest.mark.parametrize("name", sorted(M.MODELS))
def test_imported_models_compute_what_onnx_computes(name: str) -> None:
    m, inputs = M.MODELS[name]()
    onnx.checker.check_model(m, full_check=True)
    if name == "softmax_opset11_inner_axis":
        ref = {"s": _numpy_softmax_flat(inputs["x"], 1, False), "l": _numpy_softmax_flat(inputs["x"], 1, True)}
    else:
        ref = M.reference_outputs(m, inputs)
    im = import_onnx(m)
    out = _run(im.graph, {**inputs, **im.inputs})
    assert set(out) == set(ref)  # outputs keyed by their ONNX names (labels)
    for k in ref:
        np.testing.assert_allclose(out[k], ref[k], rtol=1e-5, atol=1e-6, err_msg=k)


def test_inputs_outputs_and_weights_keep_their_onnx_names() -> None:
    m, _ = M.gemm_mlp()
    im = import_onnx(m)
    g = im.graph
    assert [i.label for i in g.inputs] == ["x", "W1", "B1", "W2", "C2"]
    assert g.output_labels == ["logp"]
    assert sorted(im.inputs) == ["B1", "C2", "W1", "W2"]
    np.testing.assert_array_equal(im.inputs["W1"], onnx.numpy_helper.to_array(m.graph.initializer[0]))
    # each op line names the ONNX node it came from
    text = g.to_text()
    assert "# fc1" in text and "# fc2" in text and "# lsm" in text


def test_integer_initializers_fold_into_attributes() -> None:
    m, _ = M.shapes_and_reductions()
    text = import_onnx(m).graph.to_text()
    assert "Constant" not in text.replace("Constant(value=2.0", "")  # only Pow's 2.0 could have been one
    assert "Reshape(" in text and "shape=[3, 4]" in text  # ONNX's 0 (copy) and -1 resolved statically
    assert "Pow(" in text  # ONNX Pow is gradir's Pow (any exponent)


def test_shape_computations_fold_and_expand_reuses_the_value() -> None:
    m, _ = M.reduce_mean_backward_pattern()
    g = import_onnx(m).graph
    ops = [op.op_name for op in g.ops]
    assert "BroadcastTo" in ops and "Shape" not in ops and "Size" not in ops
    bt = next(op for op in g.ops if op.op_name == "BroadcastTo")
    assert bt.operands[1] == g.inputs[0].name  # Expand(.., Shape(x)) broadcasts to x itself


def test_every_unsupported_node_is_listed_at_once(capsys, tmp_path) -> None:
    path = tmp_path / "bad.onnx"
    onnx.save(M.unsupported_model(), str(path))
    with pytest.raises(gradir.OnnxError) as e:
        import_onnx(str(path))
    msg = str(e.value)
    assert "2 nodes cannot be imported" in msg
    assert "node 'floor' (ai.onnx Floor): gradir has no equivalent op" in msg
    assert "node 'conv' (ai.onnx ConvTranspose): gradir has no equivalent op" in msg
    assert "after_floor" not in msg and "'fine'" not in msg  # downstream of an unsupported node: not blamed
    assert main(["import", str(path)]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and "floor" in err and "conv" in err


def test_a_model_that_fails_the_checker_is_refused_with_its_message(tmp_path) -> None:
    m, _ = M.gemm_mlp()
    m.graph.node[1].input[0] = "nowhere"
    with pytest.raises(gradir.OnnxError, match="fails onnx.checker: .*nowhere"):
        import_onnx(m)


def test_not_a_model_and_missing_file(tmp_path, capsys) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x00garbage\xff" * 10)
    assert main(["import", str(bad)]) == 1
    assert "not an ONNX model" in capsys.readouterr().err
    assert main(["import", str(tmp_path / "missing.onnx")]) == 1
    assert "cannot read the model" in capsys.readouterr().err
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    assert main(["import", str(empty)]) == 1
    err = capsys.readouterr().err
    assert f"{empty}: error: not an ONNX model: it is empty" in err and "checker" not in err
    with pytest.raises(gradir.OnnxError, match="not an ONNX model: it has no graph"):
        import_onnx(onnx.ModelProto(ir_version=8))


def test_without_onnx_installed_the_error_says_how_to_install(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "onnx", None)
    with pytest.raises(gradir.OnnxError, match=r'pip install "gradir\[onnx\]"'):
        import_onnx("whatever.onnx")


def test_import_then_derive_the_gradient_of_a_forward_model() -> None:
    m, inputs = M.gemm_mlp()
    im = import_onnx(m)
    bwd = gradir.grad(im.graph, wrt=["W1", "B1"])
    assert bwd.output_labels == ["grad(W1)", "grad(B1)"]
    res = gradir.gradcheck(im.graph, inputs={**inputs, **im.inputs}, wrt=["W1", "B1"])
    assert res.ok, res


@pytest.mark.parametrize("name", ["gemm_mlp", "shapes_and_reductions", "softmax_opset13_inner_axis", "lstm_layer",
                                  "reduce_mean_backward_pattern"])
def test_export_round_trips_and_onnx_computes_the_same(name: str, tmp_path) -> None:
    m, inputs = M.MODELS[name]()
    g = import_onnx(m).graph
    exported = export_onnx(g, tmp_path / "out.onnx")
    onnx.checker.check_model(onnx.load(str(tmp_path / "out.onnx")), full_check=True)
    back = import_onnx(exported).graph
    assert _no_comments(back.to_text()) == _no_comments(g.to_text())
    weights = import_onnx(m).inputs
    ours = _run(g, {**inputs, **weights})
    if all(n.domain in ("", "ai.onnx") for n in exported.graph.node):
        theirs = M.reference_outputs(exported, {**inputs, **weights})
        for k in ours:
            np.testing.assert_allclose(theirs[k], ours[k], rtol=1e-5, atol=1e-6, err_msg=k)


def _no_comments(text: str) -> str:
    lines = (line.split("  #")[0].rstrip() for line in text.splitlines())
    return "\n".join(line for line in lines if line and not line.startswith("#"))


def test_export_of_derived_graphs_uses_ort_gradient_ops(tmp_path) -> None:
    bwd = gradir.grad(gradir.load("samples/mlp_forward.gir"))
    model = export_onnx(bwd)
    domains = {(n.domain, n.op_type) for n in model.graph.node}
    assert any(d == "com.microsoft" for d, _ in domains)
    assert [o.name for o in model.graph.output] == bwd.output_labels or all(o.name for o in model.graph.output)
    back = import_onnx(model).graph
    ins = gradir.cli.run.demo_inputs(bwd, 0)
    want = _run(bwd, ins)
    got = _run(back, {(i.label or i.name): ins[i.name] for i in bwd.inputs})
    keys = [lb or o for o, lb in zip(bwd.outputs, bwd.output_labels)]
    for k in keys:
        np.testing.assert_array_equal(got[k], want[k])


def test_ops_without_a_counterpart_need_the_custom_domain(tmp_path, capsys) -> None:
    g = gradir.load("samples/lstm_cell_backward.gir")
    with pytest.raises(gradir.OnnxError, match="GradLSTMCellInput.*--custom-domain"):
        export_onnx(g)
    model = export_onnx(g, custom_domain=True)
    assert any(n.domain == "ai.gradir" for n in model.graph.node)
    back = import_onnx(model).graph
    assert _no_comments(back.to_text()) == _no_comments(g.to_text())
    assert main(["export", "samples/lstm_cell_backward.gir", "-o", str(tmp_path / "c.onnx")]) == 1
    assert "--custom-domain" in capsys.readouterr().err


def test_command_line_import_run_export(tmp_path, capsys) -> None:
    m, inputs = M.gemm_mlp()
    onnx.save(m, str(tmp_path / "mlp.onnx"))
    np.savez(tmp_path / "x.npz", **inputs)
    gir = tmp_path / "mlp.gir"
    assert main(["import", str(tmp_path / "mlp.onnx"), "-o", str(gir)]) == 0
    assert (tmp_path / "mlp.inputs.npz").exists()
    capsys.readouterr()
    out = tmp_path / "out.npz"
    assert main(["run", str(gir), "--inputs", str(tmp_path / "x.npz"), "--inputs", str(tmp_path / "mlp.inputs.npz"),
                 "-o", str(out)]) == 0
    with np.load(out, allow_pickle=False) as z:
        np.testing.assert_allclose(z["logp"], M.reference_outputs(m, inputs)["logp"], rtol=1e-5, atol=1e-6)
    assert main(["export", str(gir), "-o", str(tmp_path / "back.onnx"), "--opset", "13"]) == 0
    assert onnx.load(str(tmp_path / "back.onnx")).opset_import[0].version == 13
    # an output path that is the input is refused, and the model is kept
    before = (tmp_path / "mlp.onnx").read_bytes()
    assert main(["import", str(tmp_path / "mlp.onnx"), "-o", str(tmp_path / "mlp.onnx")]) == 1
    assert (tmp_path / "mlp.onnx").read_bytes() == before
    # a key in two --inputs archives
    np.savez(tmp_path / "dup.npz", W1=np.zeros((5, 3), np.float32))
    assert main(["run", str(gir), "--inputs", str(tmp_path / "x.npz"), "--inputs", str(tmp_path / "mlp.inputs.npz"),
                 "--inputs", str(tmp_path / "dup.npz")]) == 1
    assert "'W1' is in both" in capsys.readouterr().err
    assert main(["export", str(gir)]) == 2  # -o is required


def test_import_time_grows_linearly_with_the_nodes_and_a_10000_node_model_imports() -> None:
    from complexity import grows_linearly
    grows_linearly(lambda n: (lambda m=M.chain_model(n): import_onnx(m)), 500)  # lines executed, not seconds
    assert len(import_onnx(M.chain_model(10_000)).graph.ops) == 10_000


EXPORTED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "onnx", "exported")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
with open(os.path.join(EXPORTED, "ort_runs.json"), encoding="utf-8") as _f:
    ORT_RUNS = json.load(_f)
with open(os.path.join(EXPORTED, "exports.json"), encoding="utf-8") as _f:
    EXPORTS = json.load(_f)


@pytest.mark.parametrize("name", ORT_RUNS["ran"])
def test_exported_samples_run_in_ort_and_give_gradirs_numbers(name: str) -> None:
    """The samples as gradir exports them today (byte for byte what scripts/ort_fixtures/export_samples.py
    wrote) ran in ONNX Runtime's training build (check_exports.py): ORT's outputs are within 1e-5 of
    gradir's."""
    g = gradir.load(os.path.join(ROOT, EXPORTS["sources"][name]))
    with open(os.path.join(EXPORTED, name + ".onnx"), "rb") as f:
        assert export_onnx(g).SerializeToString() == f.read(), "the committed export is stale: rerun the scripts"
    with np.load(os.path.join(EXPORTED, name + ".inputs.npz"), allow_pickle=False) as z:
        inputs = {k: z[k] for k in z.files}
    ours = _run(g, inputs)
    with np.load(os.path.join(EXPORTED, name + ".ort.npz"), allow_pickle=False) as z:
        theirs = {k: z[k] for k in z.files}
    assert set(theirs) == set(ours)
    for k, want in theirs.items():
        scale = max(float(np.abs(want).max()), 1e-30)
        assert float(np.abs(ours[k].astype(np.float64) - want).max()) <= 1e-5 * scale, k


def test_ort_ran_every_sample_exported_for_it() -> None:
    # log_softmax_backward (Float64, where ORT 1.19.2 has no LogSoftmaxGrad_13 kernel) is written in standard ops
    assert ORT_RUNS["failed"] == {} and "log_softmax_backward" in ORT_RUNS["ran"]


def test_a_one_element_constant_reshaped_to_a_scalar_stays_a_scalar() -> None:
    """Found by a new-user try: np.ascontiguousarray made the folded 0-d value 1-d ([1])."""
    from onnx import TensorProto as T, helper as h, numpy_helper as nh
    g = h.make_graph([h.make_node("Reshape", ["C", "S"], ["R"]), h.make_node("Add", ["X", "R"], ["Y"])], "g",
                     [h.make_tensor_value_info("X", T.FLOAT, [])], [h.make_tensor_value_info("Y", T.FLOAT, [])],
                     initializer=[nh.from_array(np.array([2.0], np.float32), "C"),
                                  nh.from_array(np.array([], np.int64), "S")])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    out = import_onnx(m).graph
    assert out.types[out.outputs[0]].shape == ()
    assert _run(out, {"X": np.array(1.5, np.float32)})["Y"].shape == ()


def test_cross_entropy_training_graphs_export_back_for_ort(tmp_path) -> None:
    case = os.path.join(ROOT, "tests", "data", "onnx", "mlp_relu_ce_mean_ignore")
    g = import_onnx(os.path.join(case, "gradient_model.onnx")).graph
    model = export_onnx(g, opset=13)
    ops = {(n.domain, n.op_type) for n in model.graph.node}
    assert ("", "SoftmaxCrossEntropyLoss") in ops and ("com.microsoft", "SoftmaxCrossEntropyLossGrad") in ops
    back = import_onnx(model).graph
    assert _no_comments(back.to_text()) == _no_comments(g.to_text())
    with np.load(os.path.join(case, "inputs.npz")) as a, np.load(os.path.join(case, "params.npz")) as b:
        feed = {**{k: a[k] for k in a.files}, **{k: b[k] for k in b.files}}
    with np.load(os.path.join(case, "reference.npz")) as r:
        ref = {k: r[k] for k in r.files}
    got = _run(back, feed)
    for k, want in ref.items():
        assert float(np.abs(got[k] - want).max()) <= 1e-5 * max(float(np.abs(want).max()), 1e-30), k


def test_export_to_standard_output_and_option_errors(tmp_path, capsysbinary) -> None:
    assert main(["export", os.path.join(ROOT, "samples", "mlp_forward.gir"), "-o", "-"]) == 0
    data = capsysbinary.readouterr().out
    assert onnx.load_from_string(data).graph.node
    assert main(["export", os.path.join(ROOT, "samples", "mlp_forward.gir"), "-o", str(tmp_path / "x.onnx"),
                 "--opset", "10"]) == 2
    assert b"--opset 10" in capsysbinary.readouterr().err
    m, _ = M.gemm_mlp()
    onnx.save(m, str(tmp_path / "m.onnx"))
    assert main(["import", str(tmp_path / "m.onnx"), "--dim", "nosuch=4"]) == 1
    assert b"no input has a dimension named 'nosuch'" in capsysbinary.readouterr().err
    assert main(["import", str(tmp_path / "m.onnx"), "--dim", "b=0"]) == 2


# -- export then import: the same graph ---------------------------------------------------------------
def _round_trip_outputs(g: gradir.Graph, seed: int = 0) -> gradir.Graph:
    """Export ``g`` (custom domain on: every op exports), import it back, run both on the same inputs and
    check every output bit for bit (keyed alike: labels and ``tN`` names survive the trip)."""
    from gradir.ir.labels import input_key, output_labels_of
    from gradir.cli.run import demo_inputs
    back = import_onnx(export_onnx(g, custom_domain=True)).graph
    assert [input_key(i) for i in back.inputs] == [input_key(i) for i in g.inputs]
    assert [lb or o for o, lb in zip(back.outputs, output_labels_of(back))] == \
        [lb or o for o, lb in zip(g.outputs, output_labels_of(g))]
    ins = demo_inputs(g, seed)
    feed = {input_key(i): ins[i.name] for i in g.inputs}
    try:
        want = gradir.compile(g, threads=1).run(feed)
    except gradir.InputError:  # demo inputs of `?` dims that do not broadcast together: nothing to compare
        return back
    got = gradir.compile(back, threads=1).run(feed)
    assert set(got) == set(want)
    for k, w in want.items():
        assert got[k].dtype == w.dtype and got[k].shape == w.shape, k
        assert got[k].tobytes() == w.tobytes(), k  # bit for bit, NaNs included
    return back


def test_export_then_import_gives_random_graphs_back_bit_for_bit() -> None:
    """Random valid graphs of every op, both float dtypes, `?` dims, labels: import(export(g)) computes
    the same outputs bit for bit, with the same ops (a Constant may move to its first use) and names."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
    from fuzzing import total_elements as total_elements_of
    from gradir.backends.cpu.kernels import jit
    from strategies import graphs

    @settings(max_examples=300, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(graphs(max_ops=5, labels="plain") | graphs(max_ops=5), st.integers(0, 3))
    def prop(g: gradir.Graph, seed: int) -> None:
        if total_elements_of(g) > 1 << 14:
            return
        back = _round_trip_outputs(g, seed)
        # the same ops, but: a reduction over no axes is an Identity, a ReduceSumTo exports as ReduceSum +
        # Reshape, and Constants (ONNX Constant or ConstantOfShape nodes) come back where they are first used,
        # or not at all when nothing uses them, or folded into what they feed when that is known at import time
        if not any(op.op_name in ("ReduceSumTo", "Constant") for op in g.ops):
            assert [op.op_name for op in back.ops if op.op_name != "Identity"] == \
                [_exported_as(op) for op in g.ops if _exported_as(op) != "Identity"]  # an output may need one

    with jit.disabled():
        prop()


def _exported_as(op) -> str:
    if op.op_name in ("ReduceSum", "ReduceMean") and op.resolved_attrs()["axes"] == ():
        return "Identity"
    if op.op_name == "Sum" and len(op.operands) == 1:
        return "Identity"
    return op.op_name


def test_generated_names_never_collide_with_labels() -> None:
    """An input labelled like the exporter's own shape initializers (shape__1) gave a model that passed
    the full checker and reshaped with the wrong shape."""
    g = gradir.parse('input t0 "shape__1" : Int64 [2]\ninput t1 "axes__2" : Float32 [2, 3]\n'
                     't2 = Reshape(t1, shape=[3, 2])\nt3 = Unsqueeze(t2, axes=[0])\noutput t3, t0\n')
    model = export_onnx(g)
    names = [i.name for i in model.graph.initializer]
    assert "shape__1" not in names and "axes__2" not in names
    out = M.reference_outputs(model, {"shape__1": np.array([7, 7], np.int64),
                                      "axes__2": np.arange(6, dtype=np.float32).reshape(2, 3)})
    assert out[model.graph.output[0].name].shape == (1, 3, 2)
    _round_trip_outputs(g)


@pytest.mark.parametrize("text", [
    # unlabelled values not numbered inputs first
    "t0 = Constant(value=2.0) : Float32 []\ninput t1 : Float32 [3]\nt2 = Mul(t1, t0)\noutput t2\n",
    "input t5 : Float32 [3]\ninput t1 \"x\" : Float32 [3]\nt0 = Add(t5, t1)\noutput t0\n",
    # a multi-element Constant came back as a new input
    "t0 = Constant(value=[1.0, 2.0, 3.0]) : Float64 [3]\ninput t1 : Float64 [3]\nt2 = Add(t1, t0)\noutput t2\n",
    # Transpose of a scalar: exit 3
    "input t0 : Float32 []\nt1 = Transpose(t0, perm=[])\noutput t1\n",
    # ZerosLike / BroadcastTo of a value with a `?` dim: a Shape that import refused
    "input t0 : Float32 [?, 3]\nt1 = ZerosLike(t0)\noutput t1\n",
    "input t0 : Float32 [3]\ninput t1 : Float32 [?, 3]\nt2 = BroadcastTo(t0, t1)\noutput t2\n",
    # a Float64 attribute float32 cannot hold: rounded on the way
    "input t0 : Float64 [4]\nt1 = LeakyRelu(t0, alpha=0.1)\nt2 = QuickGelu(t0, alpha=1.7000000000000002)\n"
    "output t1, t2\n",
    # a folded Constant as the output, beside labelled inputs numbered anew: "label t10 is the name of another
    # value" (found by test_fuzz_onnx_export)
    "input t0 \"a\" : Float32 []\ninput t2 \"b\" : Float32 []\nt1 = Constant(value=[0.0]) : Float32 []\n"
    "t3 = Add(t0, t2)\noutput t1\n",
])
def test_export_then_import_reproducers(text: str) -> None:
    g = gradir.parse(text)
    back = _round_trip_outputs(g)
    if "Constant" not in text:
        assert _no_comments(back.to_text()).replace("graph gradir\n", "") == _no_comments(g.to_text())


def test_an_onnx_value_named_t0_imports() -> None:
    """A model whose input is named t1 (not the first value gradir numbers) failed with "label ... is the
    name of another value", located at <graph>."""
    from onnx import TensorProto as T, helper as h
    g = h.make_graph([h.make_node("Relu", ["t1"], ["t0"]), h.make_node("Neg", ["t0"], ["y"])], "g",
                     [h.make_tensor_value_info("t1", T.FLOAT, [2])], [h.make_tensor_value_info("y", T.FLOAT, [2]),
                                                                     h.make_tensor_value_info("t0", T.FLOAT, [2])])
    im = import_onnx(h.make_model(g, opset_imports=[h.make_opsetid("", 17)]))
    out = _run(im.graph, {"t1": np.array([-1.0, 2.0], np.float32)})
    np.testing.assert_array_equal(out["t0"], [0.0, 2.0])
    np.testing.assert_array_equal(out["y"], [0.0, -2.0])


def test_float64_attributes_float32_cannot_hold_need_the_custom_domain() -> None:
    g = gradir.parse("input t0 : Float64 [4]\nt1 = LeakyRelu(t0, alpha=0.1)\noutput t1\n")
    with pytest.raises(gradir.OnnxError, match=r"alpha=0.1 is not a float32 number.*--custom-domain"):
        export_onnx(g)
    exact = gradir.parse("input t0 : Float64 [4]\nt1 = LeakyRelu(t0, alpha=0.5)\noutput t1\n")
    assert export_onnx(exact).graph.node[0].domain == ""  # 0.5 is a float32 number: plain ONNX LeakyRelu
    f32 = gradir.parse("input t0 : Float32 [4]\nt1 = LeakyRelu(t0, alpha=0.1)\noutput t1\n")
    assert export_onnx(f32).graph.node[0].domain == ""  # a Float32 op computes with float32(alpha) anyway


def test_a_fill_constant_exports_as_constant_of_shape_not_its_array() -> None:
    """A fill Constant : Float32 [30000, 30000] was materialized (3.6 GB, then exit 3 at protobuf's 2 GB)."""
    g = gradir.parse("t0 = Constant(value=1.5) : Float32 [30000, 30000]\noutput t0\n")
    model = export_onnx(g)
    assert model.ByteSize() < 1000
    assert [n.op_type for n in model.graph.node] == ["ConstantOfShape"]
    small = gradir.parse("t0 = Constant(value=-0.0) : Float64 [2, 3]\ninput t1 : Float64 [2, 3]\n"
                         "t2 = Add(t1, t0)\noutput t2, t0\n")
    _round_trip_outputs(small)


def test_a_model_over_protobufs_limit_is_a_clear_error(monkeypatch, tmp_path, capsys) -> None:
    from gradir.interop.onnx import exporter
    monkeypatch.setattr(exporter, "MAX_MODEL_BYTES", 300)
    path = tmp_path / "g.gir"
    path.write_text("t0 = Constant(value=[" + ", ".join(["1.5"] * 100) + "]) : Float64 [100]\noutput t0\n")
    with pytest.raises(gradir.OnnxError, match="protobuf's 2 GB limit"):
        export_onnx(str(path.read_text()))
    assert main(["export", str(path), "-o", str(tmp_path / "g.onnx")]) == 1
    err = capsys.readouterr().err
    assert "2 GB limit" in err and "Traceback" not in err and not (tmp_path / "g.onnx").exists()


@pytest.mark.parametrize("kwargs, match", [
    ({"path": 1}, "path must be a str"), ({"path": b"x.onnx"}, "path must be a str"), ({"path": ""}, "non-empty"),
    ({"path": "a\0b"}, "without NUL"), ({"path": "\ud800"}, "cannot be encoded as a file name"),
    ({"path": "x\ud800.onnx"}, "cannot be encoded as a file name"), ({"opset": "17"}, "opset must be an int"), ({"opset": True}, "opset"),
    ({"opset": 10}, "opset must be an int from 11"), ({"custom_domain": "yes"}, "custom_domain must be True"),
    ({"custom_domain": 1}, "custom_domain"),
])
def test_export_onnx_arguments_are_checked(kwargs: dict, match: str) -> None:
    g = gradir.load(os.path.join(ROOT, "samples", "mlp_forward.gir"))
    with pytest.raises(gradir.ArgumentError, match=match):
        export_onnx(g, **kwargs)
    with pytest.raises(gradir.ArgumentError, match="takes a Graph"):
        export_onnx(1.5)


def test_export_never_overwrites_the_graph_it_reads(tmp_path) -> None:
    path = tmp_path / "g.gir"
    path.write_text("input t0 : Float32 [2]\nt1 = Relu(t0)\noutput t1\n")
    before = path.read_bytes()
    with pytest.raises(gradir.GradirError, match="the graph's own file"):
        export_onnx(gradir.load(str(path)), str(path))
    assert path.read_bytes() == before
    assert main(["export", str(path), "-o", str(path)]) == 1
    assert path.read_bytes() == before


def test_export_warns_when_onnx_runtime_cannot_run_the_model(tmp_path, capsys) -> None:
    """ORT 1.19.2 has ReluGrad for Float32 only: a Float64 one exports as valid ONNX, and says so
    plainly, exit 0."""
    f = tmp_path / "r.gir"
    f.write_text("input t0 : Float64 [4]\ninput t1 : Float64 [4]\nt2 = ReluGrad(t0, t1)\noutput t2\n")
    assert main(["export", str(f), "-o", str(tmp_path / "l.onnx")]) == 0
    err = capsys.readouterr().err
    assert "warning: ONNX Runtime cannot run this model" in err and "ReluGrad" in err
    assert main(["export", os.path.join(ROOT, "samples", "lstm_cell_backward.gir"), "--custom-domain", "-o",
                 str(tmp_path / "c.onnx")]) == 0
    assert "ai.gradir ops" in capsys.readouterr().err
    for name in ORT_RUNS["ran"]:  # what ORT ran: no warning
        assert main(["export", os.path.join(ROOT, EXPORTS["sources"][name]), "-o", str(tmp_path / "x.onnx")]) == 0
        assert "warning" not in capsys.readouterr().err, name


@pytest.mark.parametrize("op, axis, shape", [("LogSoftmaxGrad_13", -1, [3, 4, 5]), ("LogSoftmaxGrad", 1, [3, 4, 5]),
                                             ("SoftmaxGrad_13", 1, [3, 4, 5]), ("SoftmaxGrad", 0, [6, 5])])
def test_float64_softmax_gradients_export_as_standard_ops_and_import_as_themselves(op, axis, shape) -> None:
    """ORT 1.19.2 has (Log)SoftmaxGrad(_13) for Float32 only: in Float64 the export writes the same arithmetic
    in standard ops, which ONNX's reference (and ORT) run; import_onnx reads the op back, bit for bit."""
    from onnx.reference import ReferenceEvaluator
    g = gradir.parse(f"input t0 : Float64 {shape}\ninput t1 : Float64 {shape}\nt2 = {op}(t0, t1, axis={axis})\n"
                     "output t2\n")
    model = export_onnx(g)
    assert {n.domain for n in model.graph.node} == {""}, [n.op_type for n in model.graph.node]
    rng = np.random.default_rng(0)
    x = {"t0": rng.standard_normal(shape), "t1": rng.standard_normal(shape)}
    want = _run(g, x)["t2"]
    np.testing.assert_allclose(ReferenceEvaluator(model).run(None, x)[0], want, rtol=0, atol=1e-14)
    back = import_onnx(model).graph
    assert _no_comments(back.to_text()).replace("graph gradir\n", "") == _no_comments(g.to_text())
    assert _run(back, x)["t2"].tobytes() == want.tobytes()
    assert export_onnx(gradir.parse(g.to_text().replace("Float64", "Float32"))).graph.node[0].op_type == op


def test_an_edited_lowered_group_imports_as_the_standard_ops_it_is() -> None:
    """A part of the group made a graph output too: the group is no longer only the op, so it stays as written."""
    from onnx import helper as h
    g = gradir.parse("input t0 : Float64 [2, 3]\ninput t1 : Float64 [2, 3]\nt2 = LogSoftmaxGrad_13(t0, t1)\noutput t2\n")
    model = export_onnx(g)
    exp = next(n for n in model.graph.node if n.op_type == "Exp")
    model.graph.output.append(h.make_tensor_value_info(exp.output[0], 11, [2, 3]))  # 11: DOUBLE
    back = import_onnx(model).graph
    assert "LogSoftmaxGrad_13" not in back.to_text() and "Exp(" in back.to_text()
    x = {"t0": np.ones((2, 3)), "t1": np.zeros((2, 3))}
    np.testing.assert_allclose(_run(back, x)["t2"], _run(g, x)["t2"], rtol=0, atol=1e-15)


# -- malformed and hostile models (issue 29) ----------------------------------------------------------------
from onnx import TensorProto as T  # noqa: E402
from onnx import helper as h  # noqa: E402
from onnx import numpy_helper as nh  # noqa: E402


def _external(loc: str, n: int = 4) -> onnx.ModelProto:
    """A model whose weight ``W`` (n Float32) is external data at ``loc``."""
    t = nh.from_array(np.zeros((n,), np.float32), "W")
    t.ClearField("raw_data")
    t.data_location = T.EXTERNAL
    e = t.external_data.add()
    e.key, e.value = "location", loc
    return _with_inits([h.make_node("Add", ["x", "W"], ["y"], name="add")], [M.vi("x", [n])], [M.vi("y", [n])], [t])


def _with_inits(nodes: list, inputs: list, outputs: list, inits: list, ms: bool = False,
                opset: int = 17) -> onnx.ModelProto:
    g = h.make_graph(nodes, "m", inputs, outputs, initializer=inits)
    ops = [h.make_opsetid("", opset)] + ([h.make_opsetid("com.microsoft", 1)] if ms else [])
    m = h.make_model(g, opset_imports=ops)
    m.ir_version = 8
    return m


def test_external_data_of_a_model_given_without_a_path_is_not_read_from_the_working_directory(tmp_path,
                                                                                              monkeypatch) -> None:
    np.arange(4, dtype=np.float32).tofile(tmp_path / "secret.bin")
    monkeypatch.chdir(tmp_path)
    m = _external("secret.bin")
    for model in (m, m.SerializeToString()):
        with pytest.raises(gradir.OnnxError, match=r"initializer 'W': its external data .*no directory.*base_dir"):
            import_onnx(model)
    # an explicit base directory is where it is read from (and the caller's ModelProto is left as it was)
    im = import_onnx(m, base_dir=tmp_path)
    np.testing.assert_array_equal(im.inputs["W"], np.arange(4, dtype=np.float32))
    assert m.graph.initializer[0].data_location == T.EXTERNAL and not m.graph.initializer[0].raw_data


def test_external_data_stays_inside_the_models_directory(tmp_path, capsys) -> None:
    model_dir = tmp_path / "model"
    (model_dir / "sub").mkdir(parents=True)
    np.arange(4, dtype=np.float32).tofile(tmp_path / "secret.bin")
    np.arange(4, dtype=np.float32).tofile(model_dir / "sub" / "w.bin")
    os.symlink(tmp_path / "secret.bin", model_dir / "link.bin")
    os.symlink(tmp_path, model_dir / "dirlink")
    path = model_dir / "m.onnx"
    path.write_bytes(_external("sub/w.bin").SerializeToString())
    np.testing.assert_array_equal(import_onnx(str(path)).inputs["W"], np.arange(4, dtype=np.float32))
    for loc in ["../secret.bin", "sub/../../secret.bin", str(tmp_path / "secret.bin"), "link.bin",
                "dirlink/secret.bin", "missing.bin", "sub"]:
        path.write_bytes(_external(loc).SerializeToString())
        with pytest.raises(gradir.OnnxError, match="initializer 'W': its external data"):
            import_onnx(str(path))
        assert main(["import", str(path)]) == 1
        err = capsys.readouterr().err
        assert "Traceback" not in err and f"{path}: error: initializer 'W'" in err, loc
        with pytest.raises(gradir.OnnxError, match="initializer 'W': its external data"):
            import_onnx(path.read_bytes(), base_dir=model_dir)


def _init(name: str, a: np.ndarray) -> onnx.TensorProto:
    return nh.from_array(a, name)


def _malformed() -> dict[str, tuple[onnx.ModelProto, str]]:
    """Models the ONNX checker accepts that made ``gradir import`` exit 3, and what the error names."""
    out: dict[str, tuple[onnx.ModelProto, str]] = {}
    add = [h.make_node("Add", ["x", "W"], ["y"], name="add")]
    for kind, fix in [("raw_data_too_long", lambda t: setattr(t, "raw_data", b"\0" * 20)),
                      ("raw_data_not_whole_elements", lambda t: setattr(t, "raw_data", b"\0" * 17)),
                      ("float_data_too_long", lambda t: (t.ClearField("raw_data"), t.float_data.extend([1.0] * 6)))]:
        t = _init("W", np.zeros((2, 2), np.float32))
        fix(t)
        out[kind] = (_with_inits(add, [M.vi("x", [2, 2])], [M.vi("y", [2, 2])], [t]), "initializer 'W'")
    out["unknown_elem_type"] = (_with_inits([h.make_node("Identity", ["x"], ["y"], name="id")],
                                            [M.vi("x", [2], 99)], [M.vi("y", [2])], []), "graph input 'x'")
    gelu = h.make_node("Gelu", ["x"], ["y"], name="gelu", approximate="none")
    gelu.attribute[0].s = b"\xff\xfe"
    out["invalid_utf8_attribute"] = (_with_inits([gelu], [M.vi("x", [2])], [M.vi("y", [2])], [], opset=20),
                                     "node 'gelu' (ai.onnx Gelu): attribute 'approximate' is not valid UTF-8")
    out["accumulator_with_one_input"] = (_with_inits(
        [h.make_node("InPlaceAccumulatorV2", ["b"], ["o"], name="acc", domain="com.microsoft")],
        [M.vi("b", [2])], [M.vi("o", [2])], [], ms=True), "node 'acc' (com.microsoft InPlaceAccumulatorV2)")
    out["broadcast_gradient_args_with_one_input"] = (_with_inits(
        [h.make_node("BroadcastGradientArgs", ["a"], ["o1", "o2"], name="bga", domain="com.microsoft")],
        [], [M.vi("o1", ["d"], T.INT64)], [_init("a", np.array([2, 3], np.int64))], ms=True),
        "node 'bga' (com.microsoft BroadcastGradientArgs)")
    out["scale_down_without_x"] = (_with_inits(
        [h.make_node("Scale", ["", "s"], ["o"], name="scale", domain="com.microsoft", scale_down=1)],
        [], [M.vi("o", ["d"])], [_init("s", np.array(2.0, np.float32))], ms=True),
        "node 'scale' (com.microsoft Scale): input 0 is missing")
    out["constant_without_attribute"] = (_with_inits(
        [h.make_node("Constant", [], ["c"], name="const"), h.make_node("Add", ["x", "c"], ["y"], name="add")],
        [M.vi("x", [2])], [M.vi("y", [2])], []), "node 'const' (ai.onnx Constant)")
    out["squeeze_of_a_scalar"] = (_with_inits(
        [h.make_node("Squeeze", ["x", "a"], ["y"], name="sq")], [M.vi("x", [])], [M.vi("y", [])],
        [_init("a", np.array([0], np.int64))]), "node 'sq' (ai.onnx Squeeze): axis 0 is out of range")
    out["reshape_zero_beyond_the_rank"] = (_with_inits(
        [h.make_node("Reshape", ["x", "s"], ["y"], name="rs")], [M.vi("x", [4])], [M.vi("y", ["d"])],
        [_init("s", np.array([2, 0], np.int64))]), "node 'rs' (ai.onnx Reshape)")
    for kind, shape, x in [("negative", [-3, 2], [2]), ("huge", [2 ** 40, 2 ** 40], [1]),
                           ("incompatible", [3, 5], [2])]:
        out[f"expand_to_a_{kind}_shape"] = (_with_inits(
            [h.make_node("Expand", ["x", "s"], ["y"], name="ex")], [M.vi("x", x)], [M.vi("y", ["d"])],
            [_init("s", np.array(shape, np.int64))]), "node 'ex' (ai.onnx Expand)")
    out["big_folded_integer_output"] = (_with_inits(
        [h.make_node("Range", ["a", "b", "c"], ["y"], name="range")], [], [M.vi("y", ["d"], T.INT64)],
        [_init("a", np.array(0, np.int64)), _init("b", np.array(70_000, np.int64)), _init("c", np.array(1, np.int64))]),
        "node 'range' (ai.onnx Range): graph output 'y'")
    fmm = h.make_node("FusedMatMul", ["x", "x"], ["y"], name="fmm", domain="com.microsoft")
    fmm.attribute.append(h.make_attribute("alpha", [1, 2], attr_type=onnx.AttributeProto.INTS))
    out["attribute_of_the_wrong_type"] = (_with_inits([fmm], [M.vi("x", [2, 2])], [M.vi("y", [2, 2])], [], ms=True),
                                          "node 'fmm' (com.microsoft FusedMatMul): attribute 'alpha' is INTS, not "
                                          "FLOAT")
    out["reshape_to_a_float_shape"] = (_with_inits(
        [h.make_node("Reshape", ["x", "s"], ["y"], name="rs")], [M.vi("x", [4])], [M.vi("y", ["d"])],
        [_init("s", np.array([np.nan], np.float32))]), "node 'rs' (ai.onnx Reshape): its shape (input 1, 's') is "
        "float32, not integers")
    return out


MALFORMED = _malformed()


@pytest.mark.parametrize("kind", sorted(MALFORMED))
def test_a_malformed_model_the_checker_accepts_is_an_error_at_its_node(kind: str, tmp_path, capsys) -> None:
    m, where = MALFORMED[kind]
    onnx.checker.check_model(m)  # these get past the checker: the importer's own checks must catch them
    with pytest.raises(gradir.OnnxError) as e:
        import_onnx(m)
    assert where in str(e.value)
    path = tmp_path / "m.onnx"
    path.write_bytes(m.SerializeToString())
    assert main(["import", str(path), "-o", str(tmp_path / "m.gir")]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and f"{path}: error: " in err and where in err
    assert not (tmp_path / "m.gir").exists()


def test_folding_is_sized_before_it_is_evaluated(monkeypatch) -> None:
    """ConstantOfShape([1000, 1000, 1000]) is a 159-byte model and a 4 GB result: it becomes one filled
    Constant without being evaluated; a Range or Tile over the cap is refused, saying why."""
    from onnx.reference import ReferenceEvaluator

    def never(*args, **kwargs):
        raise AssertionError("evaluated")

    monkeypatch.setattr(ReferenceEvaluator, "run", never)
    fill = onnx.helper.make_tensor("v", T.FLOAT, [1], [1.5])
    m = _with_inits([h.make_node("ConstantOfShape", ["s"], ["c"], name="cos", value=fill),
                     h.make_node("Add", ["x", "c"], ["y"], name="add")], [M.vi("x", [1000, 1000, 1000])],
                    [M.vi("y", [1000, 1000, 1000])], [_init("s", np.array([1000, 1000, 1000], np.int64))])
    g = import_onnx(m).graph
    const = next(op for op in g.ops if op.op_name == "Constant")
    assert g.types[const.results[0]].shape == (1000, 1000, 1000) and "# cos" in g.to_text()
    for op, inits, out in [("Range", [np.array(0, np.int64), np.array(2 ** 40, np.int64), np.array(1, np.int64)],
                            "y"),
                           ("Tile", [np.array([1, 2], np.int64), np.array([2 ** 30], np.int64)], "y")]:
        names = [f"i{k}" for k in range(len(inits))]
        m = _with_inits([h.make_node(op, names, ["y"], name="big")], [], [M.vi("y", ["d"], T.INT64)],
                        [_init(n, a) for n, a in zip(names, inits)])
        with pytest.raises(gradir.OnnxError, match=rf"node 'big' \(ai.onnx {op}\): its result would have .* "
                                                   "gradir evaluates at most"):
            import_onnx(m)


class _CountingList(list):
    passes = 0

    def __iter__(self):
        _CountingList.passes += 1
        return super().__iter__()

    def __contains__(self, item) -> bool:
        _CountingList.passes += 1
        return super().__contains__(item)


def test_import_makes_no_pass_over_the_inputs_or_outputs_per_output(monkeypatch) -> None:
    """Import time was quadratic in the number of graph outputs and labelled initializers (20,000 outputs:
    31 s): each output's label was checked against every input and output.  Counted, not timed."""
    from gradir.ops.builder import GraphBuilder
    init = GraphBuilder.__init__

    def counting(self, *a, **k):
        init(self, *a, **k)
        self._inputs, self._outputs, self._output_labels = _CountingList(), _CountingList(), _CountingList()

    monkeypatch.setattr(GraphBuilder, "__init__", counting)
    n = 300
    weights = {f"w{k}": np.full(2, k, np.float32) for k in range(n)}
    nodes = [h.make_node("Add", ["x", f"w{k}"], [f"y{k}"], name=f"n{k}") for k in range(n)]
    m = M.make(nodes, [M.vi("x", [2])], [M.vi(f"y{k}", [2]) for k in range(n)], weights)
    _CountingList.passes = 0
    im = import_onnx(m)
    assert len(im.graph.outputs) == n and len(im.inputs) == n
    assert _CountingList.passes < 20  # a few for the whole import; it was about 4 per output and input


def test_20000_outputs_import() -> None:
    n = 20_000
    nodes = [h.make_node("Neg", ["x"], [f"y{k}"]) for k in range(n)]
    m = M.make(nodes, [M.vi("x", [2])], [M.vi(f"y{k}", [2]) for k in range(n)], {})
    assert len(import_onnx(m).graph.outputs) == n


@pytest.mark.parametrize("kwargs, what", [
    ({"model": 1}, "takes a path, bytes or an onnx.ModelProto"),
    ({"model": None}, "takes a path, bytes or an onnx.ModelProto"),
    ({"model": ""}, "model path"),
    ({"model": "a\0b"}, "model path"),
    ({"model": "\ud800.onnx"}, "the model path .* cannot be encoded as a file name"),
    ({"dims": 1}, "dims must be a dict"),
    ({"dims": [("b", 1)]}, "dims must be a dict"),
    ({"dims": {"b": "4"}}, r"dims\['b'\] must be an int"),
    ({"dims": {"b": 0}}, r"dims\['b'\] must be an int from 1 to 4,611,686,018,427,387,904"),
    ({"dims": {"b": True}}, r"dims\['b'\] must be an int"),
    ({"dims": {"b": 2.0}}, r"dims\['b'\] must be an int"),
    ({"dims": {1: 2}}, "a dimension name must be a non-empty str"),
    ({"name": 3}, "name must be a str or None"),
    ({"name": "1x"}, "is not an identifier"),
    ({"base_dir": 1}, "base_dir must be a path"),
    ({"base_dir": "/nonexistent/dir"}, "is not a directory"),
    ({"base_dir": "\ud800"}, "base_dir .* cannot be encoded as a file name"),
])
def test_import_onnx_refuses_bad_arguments_with_argument_error(kwargs: dict, what: str) -> None:
    m, _ = M.gemm_mlp()
    kwargs = {"model": m, **kwargs}
    with pytest.raises(gradir.ArgumentError, match=what):
        import_onnx(kwargs.pop("model"), **kwargs)


def test_every_unsupported_node_is_listed_even_after_another_when_it_is_an_op_the_importer_folds() -> None:
    """A LayerNormalization followed by a Where listed only the LayerNormalization: Where was folded when its
    inputs were known, so a poisoned Where was taken for one that would have folded.  (Where and
    LayerNormalization are gradir ops now: Floor and Tile, which the importer only folds, stand for them.)"""
    inits = {"r": np.array([1, 2], np.int64)}
    nodes = [h.make_node("Floor", ["x"], ["n"], name="floor"),
             h.make_node("Tile", ["n", "r"], ["w"], name="tile"),
             h.make_node("Shape", ["n"], ["ns"], name="shape"),  # would fold: not blamed
             h.make_node("Gather", ["ns", "i"], ["g"], name="gather", axis=0)]  # neither
    m = M.make(nodes, [M.vi("x", [2, 4])], [M.vi("w", [2, 8]), M.vi("g", [], T.INT64)],
               {**inits, "i": np.array(0, np.int64)})
    with pytest.raises(gradir.OnnxError) as e:
        import_onnx(m)
    msg = str(e.value)
    assert "2 nodes cannot be imported" in msg
    assert "node 'floor' (ai.onnx Floor)" in msg and "node 'tile' (ai.onnx Tile)" in msg
    assert "'shape'" not in msg and "'gather'" not in msg


def test_shape_of_a_symbolic_dimension_points_at_dim(capsys, tmp_path) -> None:
    nodes = [h.make_node("Shape", ["x"], ["s"], name="shape"),
             h.make_node("Gather", ["s", "i"], ["b"], name="gather", axis=0),  # would fold: not blamed
             h.make_node("Reshape", ["x", "s"], ["y"], name="rs")]
    m = M.make(nodes, [M.vi("x", ["batch", 3])], [M.vi("y", ["batch", 3]), M.vi("b", [], T.INT64)],
               {"i": np.array(0, np.int64)})
    with pytest.raises(gradir.OnnxError, match=r"(?s)1 node cannot be imported.*node 'shape' \(ai.onnx Shape\): the "
                                               r"shape of its input \(Float32 \[\?, 3\]\) is not known at import "
                                               r"time: its dimension 0 is the symbolic dimension 'batch'.*--dim batch=SIZE"):
        import_onnx(m)
    path = tmp_path / "m.onnx"
    onnx.save(m, str(path))
    assert main(["import", str(path)]) == 1
    assert "--dim" in capsys.readouterr().err
    assert main(["import", str(path), "--dim", "batch=2"]) == 0
    # the static part of a partly symbolic shape folds
    nodes = [h.make_node("Shape", ["x"], ["s"], name="shape", start=1),
             h.make_node("Concat", ["m1", "s"], ["t"], name="cat", axis=0),
             h.make_node("Reshape", ["x", "t"], ["y"], name="rs")]
    m = M.make(nodes, [M.vi("x", ["batch", 3])], [M.vi("y", ["batch", 3])], {"m1": np.array([-1], np.int64)})
    g = import_onnx(m).graph
    assert "Reshape(t0, shape=[-1, 3])" in g.to_text()


def test_the_worked_example_of_the_onnx_guide_runs_as_written(tmp_path, monkeypatch, capsys) -> None:
    """docs/onnx.md's worked example, its gradir commands as written, on a fixture ORT built: forward.onnx
    is mlp.onnx, training_model.onnx what generate_artifacts wrote, inputs.npz the batch."""
    import shlex
    import shutil
    case = os.path.join(ROOT, "tests", "data", "onnx", "mlp_fastgelu")
    (tmp_path / "art").mkdir()
    shutil.copy(os.path.join(case, "forward.onnx"), tmp_path / "mlp.onnx")
    shutil.copy(os.path.join(case, "training_model.onnx"), tmp_path / "art" / "training_model.onnx")
    shutil.copy(os.path.join(case, "inputs.npz"), tmp_path / "batch.npz")
    with open(os.path.join(ROOT, "docs", "onnx.md"), encoding="utf-8") as f:
        doc = f.read()
    block = doc.split("Then, with gradir:", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    commands = [line.split("#")[0].strip() for line in block.splitlines() if line.strip()]
    assert len(commands) == 3 and "params.npz" in commands[0]
    monkeypatch.chdir(tmp_path)
    for cmd in commands:
        argv = shlex.split(cmd)
        assert argv[0] == "gradir" and main(argv[1:]) == 0, (cmd, capsys.readouterr().err)
    with np.load(tmp_path / "grads.npz") as got, np.load(os.path.join(case, "reference.npz")) as ref:
        assert set(got.files) == set(ref.files)
        for k in ref.files:
            assert float(np.abs(got[k] - ref[k]).max()) <= 1e-5 * max(float(np.abs(ref[k]).max()), 1e-30), k


def test_a_name_that_is_not_utf8_is_an_error_not_a_crash(tmp_path, capsys) -> None:
    """Found by tests/test_fuzz_onnx_import.py: protobuf hands a string field that is not UTF-8 over as bytes
    (the checker passes it), and the import failed on it with a TypeError."""
    m = _with_inits([h.make_node("Relu", ["x"], ["y"], name="ok")], [M.vi("x", [2])], [M.vi("y", [2])], [])
    data = m.SerializeToString().replace(b"\x02ok", b"\x02\xffk")
    with pytest.raises(gradir.OnnxError, match=r"model.graph.node\[0\].name is not valid UTF-8"):
        import_onnx(data)
    (tmp_path / "m.onnx").write_bytes(data)
    assert main(["import", str(tmp_path / "m.onnx")]) == 1
    assert "not valid UTF-8" in capsys.readouterr().err


def test_folding_an_integer_division_by_zero_is_an_error_not_a_numpy_warning() -> None:
    """Found by the import fuzzer: onnx.reference's Div warned 'divide by zero' on standard error (and the
    folded value is undefined)."""
    import warnings
    inits = {"a": np.array([4], np.int64), "z": np.array([0], np.int64)}
    m = M.make([h.make_node("Div", ["a", "z"], ["q"], name="div"), h.make_node("Reshape", ["x", "q"], ["y"])],
               [M.vi("x", [4])], [M.vi("y", ["d"])], inits)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(gradir.OnnxError, match=r"node 'div' \(ai.onnx Div\): it divides integers by zero"):
            import_onnx(m)


def test_labelled_inputs_and_outputs_are_checked_in_linear_time() -> None:
    """n labelled initializers each feeding a labelled output: the label check went over every input for every
    output (10,000 took 22 s to import, 20,000 labelled lines over 60 s to check).  Counted, not timed."""
    from complexity import grows_linearly

    def text(n: int):
        t = ("graph g\n" + "".join(f'input t{i} "w{i}" : Float32 [2]\n' for i in range(n))
             + "".join(f"t{n + i} = Neg(t{i})\n" for i in range(n))
             + "output " + ", ".join(f't{n + i} "z{i}"' for i in range(n)) + "\n")
        return lambda: gradir.parse(t)

    def model(n: int):
        nodes = [h.make_node("Add", ["X", f"w{i}"], [f"z{i}"]) for i in range(n)]
        m = M.make(nodes, [M.vi("X", [2])], [M.vi(f"z{i}", [2]) for i in range(n)],
                   {f"w{i}": np.full(2, i, np.float32) for i in range(n)})
        return lambda: import_onnx(m)
    grows_linearly(text, 300)
    grows_linearly(model, 200)


def _zero_size_models() -> dict[str, tuple[onnx.ModelProto, str]]:
    """Models whose graph needs a zero-size value (gradir's dimensions are at least 1), and where the error
    must be located: the node, initializer or output that makes the value."""
    empty = np.zeros((0,), np.float32)
    const = {"value": nh.from_array(np.array([2, 0], np.int64))}
    bga = [h.make_node("Constant", [], ["a"], value=nh.from_array(np.array([2, 3], np.int64))),
           h.make_node("Constant", [], ["b"], value=nh.from_array(np.array([3], np.int64))),
           h.make_node("BroadcastGradientArgs", ["a", "b"], ["ra", "rb"], name="bga", domain="com.microsoft")]
    return {
        "shape_of_a_scalar": (M.make([h.make_node("Shape", ["x"], ["s"], name="shape")], [M.vi("x", [])],
                                     [M.vi("s", [0], T.INT64)], {}), "node 'shape' (ai.onnx Shape): graph output 's'"),
        "empty_constant": (M.make([h.make_node("Constant", [], ["c"], name="k", value=nh.from_array(empty))], [],
                                  [M.vi("c", [0])], {}), "node 'k' (ai.onnx Constant): graph output 'c'"),
        "empty_initializer_output": (M.make([], [], [M.vi("W", [0])], {"W": empty}),
                                     "initializer 'W': graph output 'W'"),
        "empty_initializer_read": (M.make([h.make_node("Relu", ["W"], ["y"], name="relu")], [], [M.vi("y", [0])],
                                          {"W": empty}), "node 'relu' (ai.onnx Relu): 'W' (made by initializer 'W')"),
        "constant_of_shape": (M.make([h.make_node("Constant", [], ["s"], **const),
                                      h.make_node("ConstantOfShape", ["s"], ["y"], name="cos")], [],
                                     [M.vi("y", [2, 0])], {}), "node 'cos' (ai.onnx ConstantOfShape): graph output"),
        "broadcast_gradient_args": (M.make(bga, [], [M.vi("ra", [None], T.INT64), M.vi("rb", [None], T.INT64)],
                                           {}, ms=True), "node 'bga' (com.microsoft BroadcastGradientArgs): graph "
                                                         "output 'ra'"),
    }


ZERO_SIZE = _zero_size_models()


@pytest.mark.parametrize("kind", sorted(ZERO_SIZE))
def test_a_zero_size_value_is_an_onnx_error_at_what_makes_it(kind: str, tmp_path, capsys) -> None:
    """A zero-size value was an ArgumentError from TensorType ('dimension 0 is not a positive integer'), with
    no location (exit 1 from the command line, but no file and no node)."""
    m, where = ZERO_SIZE[kind]
    onnx.checker.check_model(m)
    with pytest.raises(gradir.OnnxError) as e:
        import_onnx(m)
    assert where in str(e.value) and "zero-size value" in str(e.value)
    path = tmp_path / "m.onnx"
    path.write_bytes(m.SerializeToString())
    assert main(["import", str(path), "-o", str(tmp_path / "m.gir")]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and f"{path}: error: " in err and where in err and "zero-size value" in err
    assert not (tmp_path / "m.gir").exists()


def test_a_zero_size_value_that_only_feeds_folding_still_imports() -> None:
    """An empty axes list (ReduceSum over all axes) and an empty shape part are intermediates of folding:
    never gradir values, so they import."""
    nodes = [h.make_node("Shape", ["x"], ["s"], name="shape", start=2),  # [] of a rank-2 input: empty
             h.make_node("Concat", ["six", "s"], ["t"], name="cat", axis=0),
             h.make_node("Reshape", ["x", "t"], ["r"], name="rs"),
             h.make_node("ReduceSum", ["r", "none"], ["y"], name="sum", keepdims=0)]
    m = M.make(nodes, [M.vi("x", [2, 3])], [M.vi("y", [])],
               {"six": np.array([6], np.int64), "none": np.zeros((0,), np.int64)})
    text = import_onnx(m).graph.to_text()
    assert "Reshape(t0, shape=[6])" in text and "ReduceSum" in text


def test_broadcast_gradient_args_refuses_shapes_that_do_not_broadcast() -> None:
    nodes = [h.make_node("Constant", [], ["a"], value=nh.from_array(np.array([2, 3], np.int64))),
             h.make_node("Constant", [], ["b"], value=nh.from_array(np.array([4, 5], np.int64))),
             h.make_node("BroadcastGradientArgs", ["a", "b"], ["ra", "rb"], name="bga", domain="com.microsoft")]
    m = M.make(nodes, [], [M.vi("ra", [None], T.INT64), M.vi("rb", [None], T.INT64)], {}, ms=True)
    with pytest.raises(gradir.OnnxError, match=r"node 'bga' \(com.microsoft BroadcastGradientArgs\): its shapes "
                                               r"\[2, 3\] and \[4, 5\] do not broadcast"):
        import_onnx(m)


def test_a_canonical_looking_name_too_long_for_a_value_name_is_a_label() -> None:
    """An input named t99999999999999999999999 (23 digits; a value name has at most 18) was taken for a value
    name, and the import failed at <graph>: it is an ordinary ONNX name, so a label."""
    long = "t" + "9" * 23
    m = M.make([h.make_node("Relu", [long], ["t5"], name="relu")], [M.vi(long, [2])], [M.vi("t5", [2])], {})
    onnx.checker.check_model(m, full_check=True)
    g = import_onnx(m).graph
    assert g.inputs[0].label == long and g.outputs == ["t5"]
    x = np.array([-1.0, 2.0], np.float32)
    np.testing.assert_array_equal(_run(g, {long: x})["t5"], np.maximum(x, 0))


def test_a_graph_output_listed_twice_imports_as_one_output() -> None:
    m = M.make([h.make_node("Relu", ["x"], ["Y"], name="relu")], [M.vi("x", [2])], [M.vi("Y", [2]), M.vi("Y", [2])],
               {})
    onnx.checker.check_model(m)
    g = import_onnx(m).graph
    assert g.output_labels == ["Y"] and len(g.outputs) == 1


def test_an_error_of_the_graphs_own_checks_is_located_at_the_model(tmp_path, capsys) -> None:
    """An input name with a NUL (the checker passes it) was an error of '<GraphBuilder g>', not of the model."""
    m = M.make([h.make_node("Relu", ["a\0b"], ["y"], name="relu")], [M.vi("a\0b", [2])], [M.vi("y", [2])], {})
    onnx.checker.check_model(m)
    with pytest.raises(gradir.OnnxError, match=r"^<model>: error: .*may not contain NUL"):
        import_onnx(m)
    path = tmp_path / "m.onnx"
    path.write_bytes(m.SerializeToString())
    assert main(["import", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"{path}: error: ") and "NUL" in err and "<graph" not in err.lower()


@pytest.mark.parametrize("fill", ["nan", "-0.0", "inf", "-inf", "0.5"])
def test_a_large_fill_constant_round_trips_whatever_its_value(fill: str) -> None:
    """A NaN fill exported as ConstantOfShape was refused on import ('a Constant holds at most 65,536'):
    the one-repeated-value check compared with ==, which NaN never is; values now compare by bits."""
    g = gradir.parse(f"t1 = Constant(value={fill}) : Float32 [1000, 1000]\noutput t1\n")
    back = import_onnx(export_onnx(g)).graph
    assert _no_comments(back.to_text()).splitlines()[-2:] == g.to_text().splitlines()[-2:]  # not the name
    got = _run(back, {})["t1"]
    want = np.full((1000, 1000), float(fill), np.float32)
    assert got.tobytes() == want.tobytes()


def test_a_reshape_with_two_minus_ones_is_refused_at_its_node() -> None:
    """Reshape(X, [-1, -1]) passes the checker and was imported as shape=[6, -1]."""
    nodes = [h.make_node("Constant", [], ["s"], value=nh.from_array(np.array([-1, -1], np.int64))),
             h.make_node("Reshape", ["x", "s"], ["y"], name="rs")]
    m = M.make(nodes, [M.vi("x", [2, 3])], [M.vi("y", [6, 1])], {})
    onnx.checker.check_model(m)
    with pytest.raises(gradir.OnnxError, match=r"node 'rs' \(ai.onnx Reshape\): its shape \[-1, -1\] has 2 -1s; "
                                               r"ONNX allows at most one"):
        import_onnx(m)


def test_dim_errors_speak_their_callers_language(tmp_path, capsys) -> None:
    """`gradir import --dim batch=<22 digits>` spoke of import_onnx()'s dims and not of the limit; the API's
    unknown dims['...'] spoke of --dim."""
    m = M.make([h.make_node("Relu", ["x"], ["y"], name="relu")], [M.vi("x", ["batch", 3])], [M.vi("y", ["batch", 3])],
               {})
    path = tmp_path / "m.onnx"
    onnx.save(m, str(path))
    assert main(["import", str(path), "--dim", "batch=999999999999999999999"]) == 2
    err = capsys.readouterr().err
    assert "--dim" in err and "at most 4,611,686,018,427,387,904" in err and "import_onnx" not in err
    assert main(["import", str(path), "--dim", "nosuch=2"]) == 1
    assert f"{path}: error: --dim nosuch: no input has a dimension named 'nosuch'" in capsys.readouterr().err
    with pytest.raises(gradir.OnnxError, match=r"dims\['nosuch'\]: no input has a dimension named") as e:
        import_onnx(m, dims={"nosuch": 2})
    assert "--dim" not in str(e.value)
    with pytest.raises(gradir.ArgumentError, match=r"dims\['batch'\] must be an int from 1 to 4,611,686,018,427,387,904"):
        import_onnx(m, dims={"batch": 2 ** 70})


def test_the_error_header_names_what_failed() -> None:
    """The header said 'N node(s) cannot be imported' whatever failed, an initializer or a graph input too."""
    half = {"W": np.ones(2, np.float16)}
    m = M.make([h.make_node("Relu", ["W"], ["y"], name="relu")], [], [M.vi("y", [2])], half)
    with pytest.raises(gradir.OnnxError, match=r"(?s)1 initializer cannot be imported:.*initializer 'W'"):
        import_onnx(m)
    m = M.make([h.make_node("Relu", ["x"], ["y"], name="relu")], [M.vi("x", [2], T.FLOAT16)], [M.vi("y", [2])], {})
    with pytest.raises(gradir.OnnxError, match=r"(?s)1 graph input cannot be imported:.*graph input 'x'"):
        import_onnx(m)
    m = M.make([h.make_node("Relu", ["W"], ["y"], name="relu"),
                h.make_node("Hardmax", ["x"], ["n"], name="hm")],  # an op gradir lacks (LayerNormalization imports)
               [M.vi("x", [2, 4])], [M.vi("y", [2]), M.vi("n", [2, 4])], half)
    with pytest.raises(gradir.OnnxError, match=r"(?s)the model cannot be imported: 2 problems:.*initializer 'W'.*"
                                               r"node 'hm'"):
        import_onnx(m)


def test_an_op_the_importer_only_evaluates_reading_a_value_too_big_to_evaluate_says_its_size() -> None:
    """Tile (Cast before gradir had a Cast op) of a 9,000,000-element ConstantOfShape said only 'gradir has no
    equivalent op'."""
    nodes = [h.make_node("Constant", [], ["s"], value=nh.from_array(np.array([3000, 3000], np.int64))),
             h.make_node("ConstantOfShape", ["s"], ["c"], value=nh.from_array(np.array([1], np.int64))),
             h.make_node("Constant", [], ["r"], value=nh.from_array(np.array([1, 1], np.int64))),
             h.make_node("Tile", ["c", "r"], ["y"], name="tile")]
    m = M.make(nodes, [], [M.vi("y", [3000, 3000], T.INT64)], {})
    with pytest.raises(gradir.OnnxError, match=r"node 'tile' \(ai.onnx Tile\): its input 0 \('c', Int64 \[3000, "
                                               r"3000\]\) has 9,000,000 elements, too many to evaluate at import time "
                                               r"\(at most 4,194,304\), and gradir has no Tile op"):
        import_onnx(m)


def test_shape_of_a_dimension_with_no_name_does_not_advise_dim() -> None:
    """A '?' with no name cannot be given a size by --dim NAME=SIZE: the error says what can be done."""
    nodes = [h.make_node("Shape", ["x"], ["s"], name="shape"), h.make_node("Reshape", ["x", "s"], ["y"], name="rs")]
    m = M.make(nodes, [M.vi("x", [None, 3])], [M.vi("y", [None, 3])], {})
    with pytest.raises(gradir.OnnxError) as e:
        import_onnx(m)
    msg = str(e.value)
    assert "node 'shape' (ai.onnx Shape)" in msg and "--dim" not in msg and "no name" in msg
    assert "give the model static sizes (or named dimensions) before importing it" in msg


def test_lowered_groups_are_read_back_in_linear_time() -> None:
    """import_onnx gives n lowered Float64 LogSoftmaxGrads back with one pass over the nodes, not one per group."""
    from complexity import grows_linearly

    def model(n: int):
        text = "input t0 : Float64 [2, 3]\ninput t1 : Float64 [2, 3]\n" + "".join(
            f"t{k + 2} = LogSoftmaxGrad_13(t0, t1)\n" for k in range(n)) + "output " + ", ".join(
            f"t{k + 2}" for k in range(n)) + "\n"
        m = export_onnx(gradir.parse(text))
        return lambda: import_onnx(m)
    grows_linearly(model, 200)
