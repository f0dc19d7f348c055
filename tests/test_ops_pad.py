"""Pad, GlobalAveragePool, GlobalMaxPool and Flatten (docs/ops.md): what the conformance suite and ORT's kernel
fixtures (tests/test_ort_kernels.py, family ``pool``) do not cover: every Pad mode with crops and ``axes`` against
ORT's order, their gradients (ORT's constant-mode Pad, gradir's PadGrad), GlobalMaxPool's ties, Flatten as an
op of its own on import and export (a symbolic batch), Pad's ONNX inputs by opset, located errors, sharding."""

from __future__ import annotations

import numpy as np
import pytest

import gradir
from gradir import VerifyError

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402


def _pad_graph(mode: str, pads: list, axes: list | None = None, value: float = 0.0, shape=(2, 3, 5, 6)) -> str:
    extra = (f", axes={axes}" if axes is not None else "") + (f", constant_value={value}" if value else "")
    return (f"input t0 : Float64 [{', '.join(map(str, shape))}]\n"
            f"t1 = Pad(t0, mode=\"{mode}\", pads={pads}{extra})\nt2 = Tanh(t1)\nt3 = ReduceSum(t2, keepdims=false)\n"
            "output t3\n")


# ORT 1.19.2 computed these (x = 0..4): the crop first, then the mode on the cropped axis
@pytest.mark.parametrize("mode, pads, want", [
    ("reflect", [-1, 2], [1, 2, 3, 4, 3, 2]),
    ("reflect", [2, -1], [2, 1, 0, 1, 2, 3]),
    ("edge", [-2, 3], [2, 3, 4, 4, 4, 4]),
    ("constant", [-2, 1], [2, 3, 4, 7]),
])
def test_pad_crops_first_then_pads_the_cropped_axis_as_ort_does(mode, pads, want):
    g = gradir.parse(f"input t0 : Float32 [5]\nt1 = Pad(t0, mode=\"{mode}\", pads={pads}, constant_value=7.0)\n"
                     "output t1\n")
    got = gradir.compile(g).run({"t0": np.arange(5, dtype=np.float32)})["t1"]
    np.testing.assert_array_equal(got, np.array(want, np.float32))


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
def test_pad_gradient_is_ort_pad_for_constant_and_padgrad_for_reflect_and_edge_and_passes_gradcheck(mode):
    g = gradir.parse(_pad_graph(mode, [1, -1, 2, 0, 3, -2], axes=[1, 2, -1], value=0.5))
    names = [op.op_name for op in gradir.grad(g, wrt=["t0"]).ops]
    assert ("PadGrad" in names) == (mode != "constant") and names.count("Pad") == (2 if mode == "constant" else 1)
    report = gradir.gradcheck(g, ["t0"], seed=0)
    assert report.ok, report.table()


@pytest.mark.parametrize("text, where, words", [
    (_pad_graph("reflect", [0, 0, 5, 0, 0, 0, 0, 0]), ":2:", "smaller than the (cropped) axis"),
    (_pad_graph("reflect", [0, 0, 0, -1, 0, 0, 0, 5]), ":2:", "smaller than the (cropped) axis"),
    (_pad_graph("constant", [0, 0, -3, 0, 0, 0, -2, 0]), ":2:", "leave axis 2"),
    (_pad_graph("edge", [0, 0, 1, 0]), ":2:", "2 per padded axis"),
    (_pad_graph("edge", [1, 1], axes=[4]), ":2:", "out of range"),
])
def test_pad_geometry_errors_are_located_type_errors(text, where, words):
    with pytest.raises(VerifyError) as e:
        gradir.parse(text)
    assert where in str(e.value) and words in str(e.value), str(e.value)


def test_global_max_pool_gives_every_tied_maximum_dy_whole_as_ort_builder():
    g = gradir.parse("input t0 : Float64 [1, 2, 2, 2]\nt1 = GlobalMaxPool(t0)\nt2 = ReduceSum(t1, keepdims=false)\n"
                     "output t2\n")
    dg = gradir.grad(g, wrt=["t0"])
    x = np.array([[[[1.0, 3.0], [3.0, 0.0]], [[5.0, 5.0], [5.0, 5.0]]]])
    dx = gradir.compile(dg).run({"t0": x, "t3": np.array(1.0)})
    dx = dx[next(k for k in dx if k != "t2")]
    np.testing.assert_array_equal(dx, [[[[0, 1], [1, 0]], [[1, 1], [1, 1]]]])


def test_global_pools_and_their_gradients_on_3d_images():
    g = gradir.parse("input t0 : Float64 [2, 3, 3, 4, 2]\nt1 = GlobalAveragePool(t0)\nt2 = GlobalMaxPool(t0)\n"
                     "t3 = Mul(t1, t2)\nt4 = ReduceSum(t3, keepdims=false)\noutput t4\n")
    x = np.random.default_rng(0).permutation(144).reshape(2, 3, 3, 4, 2) / 7.0
    got = gradir.compile(g).run({"t0": x})["t4"]
    np.testing.assert_allclose(got, (x.mean(axis=(2, 3, 4)) * x.max(axis=(2, 3, 4))).sum(), rtol=1e-13)
    assert gradir.gradcheck(g, ["t0"], seed=0).ok


def _model(nodes, inputs, outputs, inits=(), opset=17):
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def test_onnx_flatten_imports_as_flatten_with_a_symbolic_batch_and_exports_as_flatten():
    m = _model([helper.make_node("Flatten", ["X"], ["Y"], axis=2)],
               [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["batch", 3, 4, 5])],
               [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["rows", 20])])
    got = gradir.import_onnx(m)
    assert [op.op_name for op in got.graph.ops] == ["Flatten"]
    assert list(got.graph.types[got.graph.outputs[0]].shape) == [None, 20]
    x = np.random.default_rng(1).standard_normal((6, 3, 4, 5)).astype(np.float32)
    np.testing.assert_array_equal(gradir.compile(got.graph).run({"X": x})["Y"], x.reshape(18, 20))
    back = gradir.export_onnx(got.graph)
    back = back if isinstance(back, onnx.ModelProto) else onnx.load_from_string(back)
    assert [(n.op_type, [a.i for a in n.attribute]) for n in back.graph.node] == [("Flatten", [2])]


def test_flatten_gradient_reshapes_back_through_a_symbolic_batch():
    g = gradir.parse("input t0 : Float64 [?, 3, 2]\nt1 = Flatten(t0)\nt2 = Tanh(t1)\nt3 = ReduceSum(t2, keepdims=false)\n"
                     "output t3\n")
    dg = gradir.grad(g, wrt=["t0"])
    assert any(op.op_name == "Reshape" and list(op.attrs["shape"]) == [-1, 3, 2] for op in dg.ops)


def _pad_node_model(opset: int, pads, value=None, axes=None, mode="reflect"):
    inits = [numpy_helper.from_array(np.array(pads, np.int64), "pads")]
    ins = ["X", "pads"]
    if value is not None or axes is not None:
        ins.append("value" if value is not None else "")
        if value is not None:
            inits.append(numpy_helper.from_array(np.array(value, np.float32), "value"))
    if axes is not None:
        ins.append("axes")
        inits.append(numpy_helper.from_array(np.array(axes, np.int64), "axes"))
    return _model([helper.make_node("Pad", ins, ["Y"], mode=mode)],
                  [helper.make_tensor_value_info("X", TensorProto.FLOAT, [2, 3, 4])],
                  [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["a", "b", "c"])], inits, opset)


def test_onnx_pad_inputs_fold_into_attributes_and_axes_export_by_opset():
    m = gradir.import_onnx(_pad_node_model(18, [1, -1], value=2.5, axes=[-1], mode="constant"))
    (op,) = m.graph.ops
    assert op.op_name == "Pad" and list(op.attrs["pads"]) == [1, -1] and list(op.attrs["axes"]) == [-1]
    assert op.attrs["constant_value"] == 2.5
    x = np.random.default_rng(2).standard_normal((2, 3, 4)).astype(np.float32)
    want = gradir.compile(m.graph).run({"X": x})["Y"]
    np.testing.assert_array_equal(want[..., 0], 2.5)
    for opset, n_inputs in ((18, 4), (17, 3)):  # before 18 ONNX has no axes input: the pads of every axis
        back = gradir.export_onnx(m.graph, opset=opset)
        back = back if isinstance(back, onnx.ModelProto) else onnx.load_from_string(back)
        (node,) = back.graph.node
        assert len(node.input) == n_inputs
        again = gradir.import_onnx(back)
        np.testing.assert_array_equal(gradir.compile(again.graph).run({"X": x})["Y"], want)


def test_onnx_pad_before_opset_11_reads_its_attributes():
    node = helper.make_node("Pad", ["X"], ["Y"], mode="edge", pads=[0, 1, 0, 0, 2, 0])
    m = _model([node], [helper.make_tensor_value_info("X", TensorProto.FLOAT, [2, 3, 4])],
               [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["a", "b", "c"])], opset=10)
    (op,) = gradir.import_onnx(m).graph.ops
    assert op.attrs["mode"] == "edge" and list(op.attrs["pads"]) == [0, 1, 0, 0, 2, 0]


def test_onnx_pad_wrap_mode_is_refused_naming_the_node():
    with pytest.raises(gradir.GradirError) as e:
        gradir.import_onnx(_pad_node_model(19, [0, 0, 1, 0, 0, 1], mode="wrap"))
    assert "Pad" in str(e.value) and "wrap" in str(e.value)


def test_a_pad_of_the_spatial_axes_shards_along_the_batch_and_refuses_a_padded_axis():
    g = gradir.parse(_pad_graph("reflect", [0, 0, 1, 2, 0, 0, 2, 1]))
    x = np.random.default_rng(3).standard_normal((2, 3, 5, 6))
    want = gradir.compile(g).run({"t0": x})["t3"]
    got = gradir.shard(g, {"t0": 0}).run({"t0": x}, shards=2, client="inline")["t3"]
    np.testing.assert_allclose(got, want, rtol=1e-12)
    with pytest.raises(gradir.GradirError) as e:
        gradir.shard(g, {"t0": 2})
    assert "pads axis 2" in str(e.value)


def test_a_flatten_shards_along_its_batch_axis():
    g = gradir.parse("input t0 : Float64 [4, 3, 2]\nt1 = Flatten(t0)\nt2 = Tanh(t1)\noutput t2\n")
    x = np.random.default_rng(4).standard_normal((4, 3, 2))
    got = gradir.shard(g, {"t0": 0}).run({"t0": x}, shards=2, client="inline")["t2"]
    np.testing.assert_array_equal(got, np.tanh(x.reshape(4, 6)))


def test_3d_average_pool_gradient_is_exact_where_ort_3d_kernel_is_not():
    """ORT 1.19.2's 3-D AveragePoolGrad breaks <AveragePool(x), dY> = <x, AveragePoolGrad(dY)> for overlapping,
    padded windows (scripts/ort_fixtures/kernel_cases_pool.py); gradir's holds it and passes gradcheck."""
    g = gradir.parse("input t0 : Float64 [1, 2, 4, 5, 4]\n"
                     "t1 = AveragePool(t0, kernel_shape=[2, 3, 2], strides=[1, 2, 2], pads=[1, 0, 1, 0, 1, 0])\n"
                     "t2 = Tanh(t1)\nt3 = ReduceSum(t2, keepdims=false)\noutput t3\n")
    assert "AveragePoolGrad" in {op.op_name for op in gradir.grad(g, wrt=["t0"]).ops}
    assert gradir.gradcheck(g, ["t0"], seed=0).ok


def test_global_average_pool_differentiates_with_a_symbolic_batch_and_refuses_a_symbolic_image_located():
    text = "input t0 : Float64 [?, 3, {h}, 4]\nt1 = GlobalAveragePool(t0)\nt2 = ReduceSum(t1, keepdims=false)\noutput t2\n"
    dg = gradir.grad(gradir.parse(text.format(h=5)), wrt=["t0"])
    assert any(op.op_name == "Scale" and op.attrs["factor"] == 1 / 20 for op in dg.ops)
    with pytest.raises(gradir.GradirError) as e:
        gradir.grad(gradir.parse(text.format(h="?")), wrt=["t0"])
    assert ":2:" in str(e.value) and "spatial sizes" in str(e.value)


def test_ort_constant_pad_gradient_neg_of_the_pads_then_pad_imports_as_a_crop():
    """ORT's builder writes Pad's gradient as Pad(dY, Neg(pads)): the Neg folds at import, the Pad crops."""
    nodes = [helper.make_node("Neg", ["pads"], ["neg"]), helper.make_node("Pad", ["dY", "neg"], ["dX"])]
    m = _model(nodes, [helper.make_tensor_value_info("dY", TensorProto.FLOAT, [2, 3, 7, 9])],
               [helper.make_tensor_value_info("dX", TensorProto.FLOAT, [2, 3, 5, 6])],
               [numpy_helper.from_array(np.array([0, 0, 1, 2, 0, 0, 1, 1], np.int64), "pads")])
    got = gradir.import_onnx(m)
    (op,) = got.graph.ops
    assert op.op_name == "Pad" and list(op.attrs["pads"]) == [0, 0, -1, -2, 0, 0, -1, -1]
    dy = np.random.default_rng(5).standard_normal((2, 3, 7, 9)).astype(np.float32)
    np.testing.assert_array_equal(gradir.compile(got.graph).run({"dY": dy})["dX"], dy[:, :, 1:-1, 2:-1])
