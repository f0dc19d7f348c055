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


# -- batch normalization ---------------------------------------------------------------------------------------
BN = """input t0 : {dt} [4, 3, 5]
input t1 : {dt} [{c}]
input t2 : {dt} [3]
input t3 : {dt} [3]
input t4 : {dt} [3]
t5, t6, t7 = BatchNormalization(t0, t1, t2, t3, t4, epsilon=0.001, momentum={momentum}, training_mode={mode})
output t5, t6, t7
"""


def _bn(dt="Float64", c=3, momentum=0.8, mode=1):
    return BN.format(dt=dt, c=c, momentum=momentum, mode=mode)


def _bn_feeds(dtype=np.float64, shape=(4, 3, 5)):
    rng = np.random.default_rng(7)
    c = shape[1]
    return {"t0": (rng.standard_normal(shape) * 2 + 0.5).astype(dtype), "t1": rng.uniform(0.5, 1.5, c).astype(dtype),
            "t2": rng.standard_normal(c).astype(dtype), "t3": rng.standard_normal(c).astype(dtype),
            "t4": rng.uniform(0.5, 1.5, c).astype(dtype)}


def _per_channel(v):
    return np.asarray(v)[None, :, None]


@pytest.mark.parametrize("momentum", [0.8, 0.0, 1.0])
def test_batch_norm_training_mode_normalizes_with_the_batch_statistics_and_updates_the_running_ones(momentum):
    f = _bn_feeds()
    out = gradir.compile(gradir.parse(_bn(momentum=momentum))).run(f)
    x = f["t0"]
    mean, var = x.mean(axis=(0, 2)), x.var(axis=(0, 2))  # the biased variance, as ORT
    y = (x - _per_channel(mean)) / np.sqrt(_per_channel(var) + 1e-3) * _per_channel(f["t1"]) + _per_channel(f["t2"])
    np.testing.assert_allclose(out["t5"], y, rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(out["t6"], f["t3"] * momentum + mean * (1 - momentum), rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(out["t7"], f["t4"] * momentum + var * (1 - momentum), rtol=1e-13, atol=1e-15)


def test_batch_norm_inference_mode_normalizes_with_the_given_statistics_and_passes_them_through():
    f = _bn_feeds()
    out = gradir.compile(gradir.parse(_bn(mode=0))).run(f)
    y = (f["t0"] - _per_channel(f["t3"])) / np.sqrt(_per_channel(f["t4"]) + 1e-3) * _per_channel(f["t1"]) \
        + _per_channel(f["t2"])
    np.testing.assert_allclose(out["t5"], y, rtol=1e-13, atol=1e-13)
    np.testing.assert_array_equal(out["t6"], f["t3"])
    np.testing.assert_array_equal(out["t7"], f["t4"])


def test_batch_norm_with_a_scale_of_the_wrong_shape_is_a_located_type_error():
    with pytest.raises(VerifyError) as e:
        gradir.parse(_bn(c=4))
    msg = str(e.value)
    assert ":6:" in msg and "scale" in msg and "3 channels" in msg, msg


def test_batch_norm_of_a_rank_1_x_is_a_located_type_error():
    text = _bn().replace("[4, 3, 5]", "[3]")
    with pytest.raises(VerifyError) as e:
        gradir.parse(text)
    assert ":6:" in str(e.value) and "rank 2 or more" in str(e.value)


@pytest.mark.parametrize("mode", [1, 0])
def test_gradir_grad_of_batch_norm_passes_gradcheck_in_both_modes(mode):
    text = _bn(mode=mode).replace("output t5, t6, t7", "t8 = Mul(t5, t0)\noutput t8")
    g = gradir.parse(text)
    wrt = ["t0", "t1", "t2", "t3", "t4"]
    names = {op.op_name for op in gradir.grad(g, wrt=wrt).ops}
    assert ("BatchNormalizationGrad" in names) == bool(mode), names
    report = gradir.gradcheck(g, wrt, inputs=_bn_feeds(), seed=0)  # a positive input_var (inference divides by it)
    assert report.ok, report.table()


def test_batch_norm_training_on_4d_images_normalizes_per_channel_over_batch_and_space_and_passes_gradcheck():
    """[N, C, H, W] (a CNN's): the statistics of channel c over X[:, c, :, :], the gradient through
    BatchNormalizationGrad checked against finite differences, a channel split the same bits."""
    text = _bn().replace("[4, 3, 5]", "[2, 3, 4, 5]")
    f = _bn_feeds(shape=(2, 3, 4, 5))
    out = gradir.compile(gradir.parse(text)).run(f)
    x, c4 = f["t0"], (lambda v: np.asarray(v)[None, :, None, None])
    mean, var = x.mean(axis=(0, 2, 3)), x.var(axis=(0, 2, 3))
    y = (x - c4(mean)) / np.sqrt(c4(var) + 1e-3) * c4(f["t1"]) + c4(f["t2"])
    np.testing.assert_allclose(out["t5"], y, rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(out["t7"], f["t4"] * 0.8 + var * 0.2, rtol=1e-13)
    g = gradir.parse(text.replace("output t5, t6, t7", "t8 = Mul(t5, t0)\noutput t8"))
    assert "BatchNormalizationGrad" in {op.op_name for op in gradir.grad(g, wrt=["t0", "t1", "t2"]).ops}
    report = gradir.gradcheck(g, ["t0", "t1", "t2"], inputs=f, seed=0)
    assert report.ok, report.table()
    sharded = gradir.shard(g, {"t0": 1, "t1": 0, "t2": 0, "t3": 0, "t4": 0})
    want = gradir.compile(g).run(f)["t8"]
    assert sharded.run(f, shards=3, client="inline")["t8"].tobytes() == want.tobytes()


def test_an_imported_batch_norm_internal_differentiates_with_its_own_saved_statistics():
    """ORT's training graphs hold BatchNormInternal: its gradient reads results 3 and 4, recomputing nothing."""
    text = ("input t0 : Float64 [6, 2]\ninput t1 : Float64 [2]\ninput t2 : Float64 [2]\ninput t3 : Float64 [2]\n"
            "input t4 : Float64 [2]\nt5, t6, t7, t8, t9 = BatchNormInternal(t0, t1, t2, t3, t4)\n"
            "t10 = Mul(t5, t5)\noutput t10\n")
    g = gradir.parse(text)
    bwd = gradir.grad(g, wrt=["t0", "t1", "t2"])
    names = [op.op_name for op in bwd.ops]
    assert "BatchNormInternal" not in names[1:] and names.count("BatchNormalizationGrad") == 1, names
    grad_op = next(op for op in bwd.ops if op.op_name == "BatchNormalizationGrad")
    assert list(grad_op.operands[3:]) == ["t8", "t9"]
    assert gradir.gradcheck(g, ["t0", "t1", "t2"], seed=0).ok


def test_batch_norm_inference_exports_y_alone_and_its_running_statistics_as_identities():
    g = gradir.parse(_bn("Float32", mode=0))
    m = gradir.export_onnx(g)
    m = m if isinstance(m, onnx.ModelProto) else onnx.load_from_string(m)
    onnx.checker.check_model(m, full_check=True)
    assert [(n.op_type, list(n.output)) for n in m.graph.node] == [
        ("BatchNormalization", ["t5"]), ("Identity", ["t6"]), ("Identity", ["t7"])]
    back = gradir.compile(gradir.import_onnx(m).graph).run(_bn_feeds(np.float32))
    ref = gradir.compile(g).run(_bn_feeds(np.float32))
    for k in ref:
        np.testing.assert_array_equal(back[k], ref[k])


def test_batch_norm_places_on_a_channel_split_exactly_and_refuses_a_batch_split_in_training_mode():
    from shardcheck import check_placement

    from gradir import ShardError

    f = _bn_feeds(shape=(4, 4, 3))
    arrays = [f[f"t{i}"] for i in range(5)]
    for name, attrs in [("BatchNormalization", {"training_mode": 1}), ("BatchNormalization", {"training_mode": 0}),
                        ("BatchNormInternal", {})]:
        assert check_placement(gradir.OPS[name], arrays, attrs) > 0, name
    g = gradir.parse(_bn().replace("[4, 3, 5]", "[4, 3, 6]"))
    sharded = gradir.shard(g, {"t0": 1, "t1": 0, "t2": 0, "t3": 0, "t4": 0})
    want = gradir.compile(g).run(_bn_feeds(shape=(4, 3, 6)))
    got = sharded.run(_bn_feeds(shape=(4, 3, 6)), shards=3, client="inline")
    for k in want:
        assert got[k].tobytes() == want[k].tobytes(), k
    with pytest.raises(ShardError) as e:
        gradir.shard(g, {"t0": 0})
    assert "split along the channel axis 1" in str(e.value)
    inference = gradir.parse(_bn(mode=0).replace("[4, 3, 5]", "[4, 3, 6]"))
    assert gradir.shard(inference, {"t0": 0}).placements["t5"] == gradir.distributed.split(0)


def test_batch_norm_gives_the_same_bits_on_1_and_2_threads():
    f = _bn_feeds(np.float32, shape=(64, 32, 257))
    text = _bn("Float32").replace("[4, 3, 5]", "[64, 32, 257]").replace("[3]", "[32]")
    text += "t8, t9, t10 = BatchNormalizationGrad(t5, t0, t1, t6, t7)\noutput t8, t9, t10\n"
    one = gradir.compile(gradir.parse(text), threads=1).run(f)
    two = gradir.compile(gradir.parse(text), threads=2).run(f)
    for k in one:
        assert one[k].tobytes() == two[k].tobytes(), k


def test_batch_norm_exports_to_opset_13_in_inference_mode_only():
    m = gradir.export_onnx(gradir.parse(_bn("Float32", mode=0).replace("output t5, t6, t7", "output t5")), opset=13)
    m = m if isinstance(m, onnx.ModelProto) else onnx.load_from_string(m)
    onnx.checker.check_model(m, full_check=True)
    with pytest.raises(gradir.OnnxError, match="training_mode from opset 14"):
        gradir.export_onnx(gradir.parse(_bn("Float32")), opset=13)


@pytest.mark.parametrize("d", [7, 512])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_compiled_norm_kernels_are_the_numpy_path_within_rounding_and_split_independent(d, dtype) -> None:
    """kernels/_jit_norm.py (one pass per statistic, float64 sums in a fixed order) against norm.py's NumPy
    path, for the forward, the gradient and the invertible and RMSNorm gradients; an odd width takes the
    tail loops; 1 and 2 threads give the same bits (rows and columns split over threads)."""
    from gradir.backends.cpu.kernels import jit, norm
    from gradir.backends.cpu.kernels.parallel import get_threads, set_threads

    assert jit.available(), f"numba is a core dependency: {jit.why_unavailable()}"
    rng = np.random.default_rng(d)
    n = (6 << 20) // (8 * d * 6) + 3  # enough rows to split into chunks
    x, dy = (rng.standard_normal((n, d)).astype(dtype) for _ in range(2))
    g, b = rng.uniform(0.5, 1.5, d).astype(dtype), rng.standard_normal(d).astype(dtype)

    def run() -> list[np.ndarray]:
        y, m, iv = norm.layer_normalization(x, g, b)
        ys, ivs = norm.simplified_layer_normalization(x, g)
        return [y, m, iv, *norm.layer_normalization_grad(dy, x, g, m, iv), ys, ivs,
                *norm.simplified_layer_normalization_grad(dy, x, g, ivs),
                *norm.invertible_layer_normalization_grad(dy, y, g, b, iv)]

    with jit.disabled():
        want = run()
    before = get_threads()
    try:
        got = {}
        for threads in (1, 2):
            set_threads(threads)
            got[threads] = run()
    finally:
        set_threads(before)
    for a, b1, w in zip(got[1], got[2], want):
        assert np.array_equal(a, b1)
        np.testing.assert_allclose(a, w, rtol=4 * np.finfo(dtype).eps, atol=4 * np.finfo(dtype).eps * np.abs(w).max())
