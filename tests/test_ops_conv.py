"""Convolution and pooling (docs/ops.md): what the conformance suite and ORT's kernel fixtures
(tests/test_ort_kernels.py, family ``conv``) do not cover: ``gradir grad`` + ``gradcheck`` of a small CNN,
ORT's ai.onnx-domain MaxPoolGrad through onnx's checker on import and export, ORT's ceil_mode rule, located
type errors, a sharded MaxPool's Indices."""

from __future__ import annotations

import numpy as np
import pytest

import gradir
from gradir import VerifyError

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

CNN = """input t0 : Float64 [2, 3, 8, 7]
input t1 : Float64 [4, 3, 3, 3]
input t2 : Float64 [4]
input t3 : Float64 [4, 1, 3, 3]
t4 = Conv(t0, t1, t2, pads=[1, 1, 1, 1], strides=[1, 2])
t5 = Relu(t4)
t6, t7 = MaxPool(t5, kernel_shape=[2, 2], strides=[2, 1], ceil_mode=1)
t8 = Conv(t6, t3, group=4, auto_pad="SAME_UPPER")
t9 = AveragePool(t8, kernel_shape=[2, 2], pads=[1, 0, 0, 1], count_include_pad=1)
t10 = ReduceSum(t9, keepdims=false)
output t10
"""


def test_gradir_grad_of_a_small_cnn_emits_ort_gradient_ops_and_passes_gradcheck():
    g = gradir.parse(CNN)
    names = {op.op_name for op in gradir.grad(g, wrt=["t0", "t1", "t2", "t3"]).ops}
    assert {"ConvGrad", "MaxPoolGrad", "AveragePoolGrad"} <= names
    report = gradir.gradcheck(g, ["t0", "t1", "t2", "t3"], seed=0)
    assert report.ok, report.table()


def _pool_model(dx_shape_known: bool):
    """MaxPool then ORT's MaxPoolGrad of its Indices, in the ai.onnx domain, as ORT's training graphs have it."""
    attrs = {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}
    nodes = [helper.make_node("MaxPool", ["X"], ["Y", "I"], **attrs),
             helper.make_node("MaxPoolGrad", ["dY", "I"], ["dX"], **attrs)]
    info = [helper.make_tensor_value_info("dX", TensorProto.FLOAT, [2, 3, 7, 6])] if dx_shape_known else []
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [2, 3, 7, 6]),
                                       helper.make_tensor_value_info("dY", TensorProto.FLOAT, [2, 3, 4, 3])],
                          [helper.make_tensor_value_info("dX", TensorProto.FLOAT, ["n", "c", "h", "w"])], value_info=info)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("dx_shape_known", [True, False])
def test_ort_maxpoolgrad_in_the_onnx_domain_imports_and_exports_through_the_checker(dx_shape_known):
    m = gradir.import_onnx(_pool_model(dx_shape_known))  # the checker knows MaxPoolGrad (ort_schemas.py)
    rng = np.random.default_rng(0)
    x, dy = rng.standard_normal((2, 3, 7, 6)).astype(np.float32), rng.standard_normal((2, 3, 4, 3)).astype(np.float32)
    dx = gradir.compile(m.graph).run({"X": x, "dY": dy})["dX"]
    # each dY lands on its window's maximum
    want = np.zeros((2, 3, 9, 8), np.float32)
    xp = np.pad(x, [(0, 0), (0, 0), (1, 1), (1, 1)], constant_values=-np.inf)
    for n, c, i, j in np.ndindex(2, 3, 4, 3):
        w = xp[n, c, 2 * i:2 * i + 3, 2 * j:2 * j + 3]
        u, v = np.unravel_index(np.argmax(w), w.shape)
        want[n, c, 2 * i + u, 2 * j + v] += dy[n, c, i, j]
    np.testing.assert_array_equal(dx, want[:, :, 1:-1, 1:-1])
    back = gradir.export_onnx(m.graph)
    back = back if isinstance(back, onnx.ModelProto) else onnx.load_from_string(back)
    assert ("", "MaxPoolGrad") in [(n.domain, n.op_type) for n in back.graph.node]
    again = gradir.import_onnx(back)  # dX's shape is in the exported value_info (ORT's kernel reads it there)
    np.testing.assert_array_equal(gradir.compile(again.graph).run({"X": x, "dY": dy})["dX"], dx)


def test_ort_averagepoolgrad_without_dx_shape_is_a_located_import_error():
    node = helper.make_node("AveragePoolGrad", ["dY"], ["dX"], kernel_shape=[2, 2])
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("dY", TensorProto.FLOAT, [1, 1, 3, 3])],
                          [helper.make_tensor_value_info("dX", TensorProto.FLOAT, ["n", "c", "h", "w"])])
    with pytest.raises(gradir.GradirError) as e:
        gradir.import_onnx(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    assert "AveragePoolGrad" in str(e.value) and "dX's shape" in str(e.value)


def test_ceil_mode_drops_a_last_window_that_starts_in_the_end_padding_as_ort_does():
    g = gradir.parse("input t0 : Float32 [1, 1, 6, 6]\n"
                     "t1, t2 = MaxPool(t0, kernel_shape=[2, 2], strides=[2, 2], pads=[0, 0, 1, 1], ceil_mode=1)\n"
                     "output t1\n")
    assert list(g.types["t1"].shape) == [1, 1, 3, 3]  # not 4: the 4th window would start at 6, in the padding


def test_conv_group_mismatch_is_a_located_type_error():
    with pytest.raises(VerifyError) as e:
        gradir.parse("input t0 : Float32 [1, 4, 5, 5]\ninput t1 : Float32 [6, 3, 3, 3]\n"
                     "t2 = Conv(t0, t1, group=2)\noutput t2\n")
    msg = str(e.value)
    assert ":3:" in msg and "group" in msg, msg


def test_conv_pads_and_auto_pad_together_is_a_located_error():
    with pytest.raises(VerifyError) as e:
        gradir.parse("input t0 : Float32 [1, 2, 5, 5]\ninput t1 : Float32 [3, 2, 3, 3]\n"
                     "t2 = Conv(t0, t1, pads=[1, 1, 1, 1], auto_pad=\"SAME_UPPER\")\noutput t2\n")
    assert ":3:" in str(e.value) and "auto_pad" in str(e.value)


@pytest.mark.parametrize("axis", [0, 1])
def test_a_sharded_maxpool_writes_the_whole_x_indices(axis):
    g = gradir.parse("input t0 : Float32 [4, 4, 5, 6]\n"
                     "t1, t2 = MaxPool(t0, kernel_shape=[2, 3], strides=[1, 2], storage_order=1)\noutput t1, t2\n")
    x = np.random.default_rng(2).standard_normal((4, 4, 5, 6)).astype(np.float32)
    want = gradir.compile(g).run({"t0": x})
    got = gradir.shard(g, {"t0": axis}).run({"t0": x}, shards=2, client="inline")
    np.testing.assert_array_equal(got["t2"], want["t2"])
    np.testing.assert_array_equal(got["t1"], want["t1"])


def test_the_gradient_of_a_same_padded_conv_writes_explicit_pads_for_ort():
    g = gradir.parse("input t0 : Float64 [1, 2, 5, 6]\ninput t1 : Float64 [3, 2, 2, 3]\n"
                     "t2 = Conv(t0, t1, auto_pad=\"SAME_LOWER\", strides=[2, 2])\nt3 = ReduceSum(t2, keepdims=false)\n"
                     "output t3\n")
    grad = next(op for op in gradir.grad(g, wrt=["t0", "t1"]).ops if op.op_name == "ConvGrad")
    assert grad.attrs["auto_pad"] == "NOTSET" and list(grad.attrs["pads"]) == [1, 1, 0, 0]  # ORT reads pads only
    assert gradir.gradcheck(g, ["t0", "t1"], seed=0).ok


def test_a_pool_pad_as_large_as_the_window_is_a_located_error():
    with pytest.raises(VerifyError) as e:
        gradir.parse("input t0 : Float32 [1, 1, 5, 5]\nt1 = AveragePool(t0, kernel_shape=[2, 2], pads=[2, 0, 0, 0])\n"
                     "output t1\n")
    assert ":2:" in str(e.value) and "pads" in str(e.value)


def test_the_gradient_of_a_column_major_maxpool_is_the_derivative():
    """ORT's MaxPoolGrad scatters dY at the Indices read row-major whatever ``storage_order`` says, so of a
    MaxPool with storage_order=1 (column-major Indices) it is not the derivative (ORT 1.19.2's own training graphs
    get it wrong: tests/data/onnx/cnn_maxpool_storage_order). gradir grad scatters by row-major Indices."""
    g = gradir.parse("input t0 : Float64 [2, 2, 5, 6]\n"
                     "t1, t2 = MaxPool(t0, kernel_shape=[2, 3], strides=[1, 2], pads=[0, 1, 1, 0], storage_order=1)\n"
                     "t3 = ReduceSum(t1, keepdims=false)\noutput t3\n")
    report = gradir.gradcheck(g, ["t0"], seed=0)
    assert report.ok, report.table()


@pytest.mark.parametrize("axis", [0, 1])
def test_the_sharded_gradient_of_a_column_major_maxpool_is_the_unsharded_one(axis):
    """The row-major MaxPool the gradient recomputes is sharded as the forward's (its shard's global rows)."""
    g = gradir.parse("input t0 : Float32 [4, 4, 5, 6]\n"
                     "t1, t2 = MaxPool(t0, kernel_shape=[2, 3], strides=[1, 2], storage_order=1)\n"
                     "t3 = ReduceSum(t1, keepdims=false)\noutput t3\n")
    bwd = gradir.grad(g, wrt=["t0"])
    feed = {"t0": np.random.default_rng(2).standard_normal((4, 4, 5, 6)).astype(np.float32),
            "cotangent(t3)": np.float32(1.5)}
    want = gradir.compile(bwd).run(feed)
    got = gradir.shard(bwd, {"t0": axis}).run(feed, shards=2, client="inline")
    np.testing.assert_array_equal(got["grad(t0)"], want["grad(t0)"])


def test_a_conv_whose_window_is_symbolic_types_y_spatial_dims_as_unknown() -> None:
    """W [M, C, ?, ?] with no kernel_shape: Y's spatial dims are '?' (ONNX's shape inference does the same),
    not an error; the run reads the window from W (the random-graph strategies draw such W)."""
    g = gradir.parse("graph c\ninput t0 : Float32 [2, 3, 8, 8]\ninput t1 : Float32 [4, 3, ?, ?]\n"
                     "t2 = Conv(t0, t1, pads=[1, 1, 1, 1])\noutput t2\n")
    assert str(g.types["t2"]) == "Float32 [2, 4, ?, ?]"
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((2, 3, 8, 8), np.float32), rng.standard_normal((4, 3, 3, 3), np.float32)
    (y,) = gradir.compile(g).run({"t0": x, "t1": w}).values()
    assert y.shape == (2, 4, 8, 8)
    np.testing.assert_allclose(y, type(g.ops[0]).reference(x, w, None, **g.ops[0].attrs), rtol=1e-5, atol=1e-5)
