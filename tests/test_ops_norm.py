"""The layer norms (docs/ops.md): what the conformance suite and ORT's kernel fixtures
(tests/test_ort_kernels.py, family ``norm``) do not cover: stash_type and the statistics' dtype, nodes
with 1, 2 or 3 outputs, ORT's ai.onnx-domain SimplifiedLayerNormalization through onnx's checker, the
located type errors, ``gradir grad`` + ``gradcheck`` of small graphs, bits for 1 and 2 threads."""

from __future__ import annotations

import numpy as np
import pytest

import gradir
from gradir import VerifyError

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

LN = """input t0 : {dt} [4, 3, 5]
input t1 : {dt} [{norm}]
input t2 : {dt} [{norm}]
t3, t4, t5 = LayerNormalization(t0, t1, t2, axis={axis}{extra})
output t3, t4, t5
"""


def _ln(dt="Float32", norm="3, 5", axis=1, extra=""):
    return LN.format(dt=dt, norm=norm, axis=axis, extra=extra)


def _feeds(dtype, rng=None):
    rng = rng or np.random.default_rng(0)
    return {"t0": rng.standard_normal((4, 3, 5)).astype(dtype), "t1": rng.uniform(0.5, 1.5, (3, 5)).astype(dtype),
            "t2": rng.standard_normal((3, 5)).astype(dtype)}


def test_the_statistics_are_float32_for_a_float64_x_and_y_is_exact():
    g = gradir.parse(_ln("Float64"))
    assert str(g.types["t4"].dtype) == "Float32" and str(g.types["t5"].dtype) == "Float32"
    f = _feeds(np.float64)
    out = gradir.compile(g).run(f)
    x = f["t0"]
    mean = x.mean(axis=(1, 2), keepdims=True)
    y = (x - mean) / np.sqrt(((x - mean) ** 2).mean(axis=(1, 2), keepdims=True) + 1e-5) * f["t1"] + f["t2"]
    assert out["t3"].dtype == np.float64 and out["t4"].dtype == np.float32
    np.testing.assert_allclose(out["t3"], y, rtol=1e-13, atol=1e-13)  # not through the Float32 statistics


def test_a_stash_type_other_than_float32_is_a_located_error():
    with pytest.raises(VerifyError) as e:
        gradir.parse(_ln(extra=", stash_type=11"))
    assert "stash_type" in str(e.value) and ":4:" in str(e.value)


def test_a_scale_of_the_wrong_shape_is_a_located_type_error():
    with pytest.raises(VerifyError) as e:
        gradir.parse(_ln(norm="5"))
    msg = str(e.value)
    assert ":4:" in msg and "Scale" in msg and "[3, 5]" in msg, msg


def test_a_normalized_axis_out_of_range_is_a_located_type_error():
    with pytest.raises(VerifyError) as e:
        gradir.parse(_ln(axis=3))
    assert ":4:" in str(e.value) and "axis" in str(e.value)


def _model(op_type, inputs, outputs, attrs=None, opset=17, domain=""):
    node = helper.make_node(op_type, [n for n, _ in inputs], outputs, domain=domain or None, **(attrs or {}))
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(a.shape))
                                        for n, a in inputs],
                          [helper.make_tensor_value_info(o, TensorProto.FLOAT, []) for o in outputs if o])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


@pytest.mark.parametrize("outputs", [["Y"], ["Y", "Mean"], ["Y", "Mean", "InvStdDev"], ["Y", "", "InvStdDev"]])
def test_a_layer_normalization_node_with_1_2_or_3_outputs_imports(outputs):
    f = _feeds(np.float32)
    inputs = [("X", f["t0"]), ("Scale", f["t1"]), ("B", f["t2"])]
    m = gradir.import_onnx(_model("LayerNormalization", inputs, outputs, {"axis": 1}))
    out = gradir.compile(m.graph).run({"X": f["t0"], "Scale": f["t1"], "B": f["t2"]})
    assert sorted(out) == sorted(o for o in outputs if o)
    ref = gradir.compile(gradir.parse(_ln())).run(f)
    for o in outputs:
        if o:
            np.testing.assert_array_equal(out[o], ref[{"Y": "t3", "Mean": "t4", "InvStdDev": "t5"}[o]])


def test_simplified_layer_normalization_imports_and_exports_in_the_onnx_domain_as_ort_has_it():
    rng = np.random.default_rng(1)
    x, s = rng.standard_normal((3, 8)).astype(np.float32), rng.uniform(0.5, 1.5, 8).astype(np.float32)
    m = gradir.import_onnx(_model("SimplifiedLayerNormalization", [("X", x), ("scale", s)], ["Y", "inv_std_var"]))
    out = gradir.compile(m.graph).run({"X": x, "scale": s})
    inv = 1 / np.sqrt((x.astype(np.float64) ** 2).mean(axis=1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(out["Y"], x * inv * s, rtol=1e-6)
    np.testing.assert_allclose(out["inv_std_var"], inv, rtol=1e-6)
    back = gradir.export_onnx(m.graph)
    back = back if isinstance(back, onnx.ModelProto) else onnx.load_from_string(back)
    assert [(n.domain, n.op_type) for n in back.graph.node] == [("", "SimplifiedLayerNormalization")]


FWD = """input t0 : Float64 [4, 6]
input t1 : Float64 [6]
input t2 : Float64 [6]
t3, t4, t5 = LayerNormalization(t0, t1, t2)
t6, t7 = SimplifiedLayerNormalization(t3, t1, epsilon=0.001)
t8 = Mul(t6, t0)
output t8
"""


def test_gradir_grad_of_layer_norms_emits_ort_gradient_ops_and_passes_gradcheck():
    g = gradir.parse(FWD)
    bwd = gradir.grad(g, wrt=["t0", "t1", "t2"])
    names = {op.op_name for op in bwd.ops}
    assert {"LayerNormalizationGrad", "SimplifiedLayerNormalizationGrad"} <= names
    report = gradir.gradcheck(g, ["t0", "t1", "t2"], seed=0)
    assert report.ok, report.table()


def test_the_same_bits_on_1_and_2_threads_for_many_rows():
    rng = np.random.default_rng(5)
    text = ("input t0 : Float32 [4096, 96]\ninput t1 : Float32 [96]\ninput t2 : Float32 [96]\n"
            "t3, t4, t5 = LayerNormalization(t0, t1, t2)\noutput t3, t4, t5\n")
    f = {"t0": rng.standard_normal((4096, 96)).astype(np.float32),
         "t1": rng.uniform(0.5, 1.5, 96).astype(np.float32), "t2": rng.standard_normal(96).astype(np.float32)}
    one = gradir.compile(gradir.parse(text), threads=1).run(f)
    two = gradir.compile(gradir.parse(text), threads=2).run(f)
    for k in one:
        assert one[k].tobytes() == two[k].tobytes(), k
