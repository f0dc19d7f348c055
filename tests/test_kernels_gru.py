"""The GRU ops (ORT's GRUTraining and GRUGrad, gates z, r, h): the kernels against the float64 references in
every supported configuration, the references against finite differences, ``gradir.gradcheck`` and
``gradir.grad`` on a GRU graph, PyTorch's ``nn.GRU`` (skipped without torch), ORT's nodes on import (both
activation spellings) and the located refusals.  ORT's own numbers: tests/test_ort_kernels.py (gru/)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import gradir
from gradir.backends.cpu.kernels.gru import gru_grad, gru_training
from gradir.errors import GradirError
from gradir.ops import references as ref

S, NB, I, H = 5, 4, 3, 2
LENGTHS = {"none": None, "short": np.array([5, 2, 4, 1], np.int32), "empty_row": np.array([5, 0, 3, 5], np.int32)}


def _operands(seed: int, dtype: type, sl: str, with_h0: bool, with_b: bool, D: int = 1) -> tuple:
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((S, NB, I)).astype(dtype)
    W = rng.standard_normal((D, 3 * H, I)).astype(dtype)
    R = rng.standard_normal((D, 3 * H, H)).astype(dtype)
    B = rng.standard_normal((D, 6 * H)).astype(dtype) if with_b else None
    H0 = rng.standard_normal((D, NB, H)).astype(dtype) if with_h0 else None
    return X, W, R, B, LENGTHS[sl], H0


DIRS = {"forward": 1, "reverse": 1, "bidirectional": 2}
# clip 0.7: some pre-activations of these operands (standard normal weights) clip, some do not
CONFIGS = [(*c, hb, hb) for c in itertools.product(DIRS, (0, 1), LENGTHS, (None, 0.7)) for hb in (False, True)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("direction, lbr, sl, clip, with_h0, with_b", CONFIGS)
def test_kernels_match_the_references(direction, lbr, sl, clip, with_h0, with_b, dtype) -> None:
    X, W, R, B, SL, H0 = _operands(7, dtype, sl, with_h0, with_b, DIRS[direction])
    kw = {"hidden_size": H, "direction": direction, "linear_before_reset": lbr, "clip": clip}
    want = ref.gru_training(X, W, R, B, SL, H0, **kw)
    got = gru_training(X, W, R, B, SL, H0, **kw)
    tol = 2e-5 if dtype == np.float32 else 1e-12
    for g, w in zip(got, want):
        assert g.dtype == dtype
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol)
    rng = np.random.default_rng(8)
    dHAll, dHFinal = (rng.standard_normal(a.shape).astype(dtype) for a in want[:2])
    HAll, _, ZRH = (a.astype(dtype) for a in want)
    want_g = ref.gru_grad(X, W, R, B, SL, H0, HAll, ZRH, dHAll, dHFinal, **kw)
    got_g = gru_grad(X, W, R, B, SL, H0, HAll, ZRH, dHAll, dHFinal, **kw)
    for g, w in zip(got_g, want_g):
        assert g.dtype == dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=10 * tol, atol=10 * tol)


def test_clip_clips_some_gates_of_the_kernel_test_operands() -> None:
    """The clip of CONFIGS is live: it changes the forward and stops some gradient."""
    X, W, R, B, SL, H0 = _operands(7, np.float64, "none", True, True)
    free = ref.gru_training(X, W, R, B, SL, H0, hidden_size=H)
    clipped = ref.gru_training(X, W, R, B, SL, H0, hidden_size=H, clip=0.7)
    assert np.abs(free[0] - clipped[0]).max() > 1e-3
    z = clipped[2][..., :H]
    bound = 1 / (1 + np.exp(-0.7))
    assert z.max() <= bound + 1e-15 and z.min() >= 1 - bound - 1e-15 and np.isclose(z.max(), bound)


def test_the_reverse_direction_reverses_each_row_within_its_length() -> None:
    """A reverse row starts at X[SL[b]-1] (ONNX, ORT, PyTorch's packed sequences): the reverse layer of a row is
    the forward layer of that row's valid steps reversed."""
    X, W, R, B, SL, H0 = _operands(5, np.float64, "short", True, True)
    HAll, HFinal, _ = gru_training(X, W, R, B, SL, H0, hidden_size=H, direction="reverse", linear_before_reset=1)
    for b, L in enumerate(SL):
        Xb = X[:L, b:b + 1][::-1].copy()
        f_all, f_fin, _ = gru_training(Xb, W, R, B, None, H0[:, b:b + 1], hidden_size=H, linear_before_reset=1)
        np.testing.assert_allclose(HAll[:L, :, b:b + 1][::-1], f_all, rtol=1e-13, atol=1e-13)
        np.testing.assert_allclose(HFinal[:, b:b + 1], f_fin, rtol=1e-13, atol=1e-13)
        assert not HAll[L:, :, b].any()


@pytest.mark.parametrize("direction, lbr, sl, clip", [("forward", 0, "short", None), ("forward", 1, "empty_row", None),
                                                    ("forward", 1, "none", 0.7), ("reverse", 0, "empty_row", 0.7),
                                                    ("reverse", 1, "short", None), ("bidirectional", 1, "short", 0.7),
                                                    ("bidirectional", 0, "none", None)])
def test_the_reference_gradients_match_float64_finite_differences(direction, lbr, sl, clip) -> None:
    D = DIRS[direction]
    X, W, R, B, SL, H0 = _operands(11, np.float64, sl, True, True, D)
    rng = np.random.default_rng(12)
    dHAll, dHFinal = rng.standard_normal((S, D, NB, H)), rng.standard_normal((D, NB, H))
    kw = {"hidden_size": H, "direction": direction, "linear_before_reset": lbr, "clip": clip}

    def loss() -> float:
        HAll, HFinal, _ = ref.gru_training(X, W, R, B, SL, H0, **kw)
        return float((HAll * dHAll).sum() + (HFinal * dHFinal).sum())

    HAll, _, ZRH = ref.gru_training(X, W, R, B, SL, H0, **kw)
    grads = ref.gru_grad(X, W, R, B, SL, H0, HAll, ZRH, dHAll, dHFinal, **kw)
    for name, a, g in zip(("X", "W", "R", "B", "H0"), (X, W, R, B, H0), grads):
        num = np.zeros_like(a)
        for idx in np.ndindex(a.shape):
            old = a[idx]
            a[idx] = old + 1e-6
            plus = loss()
            a[idx] = old - 1e-6
            minus = loss()
            a[idx] = old
            num[idx] = (plus - minus) / 2e-6
        np.testing.assert_allclose(g, num, atol=1e-7, err_msg=f"d{name}")


def test_padded_steps_are_zero_and_hfinal_is_each_rows_last_step() -> None:
    X, W, R, B, SL, H0 = _operands(3, np.float64, "empty_row", True, True)
    HAll, HFinal, ZRH = gru_training(X, W, R, B, SL, H0, hidden_size=H, linear_before_reset=1)
    assert not HAll[3:, 0, 2].any() and not ZRH[3:, 0, 2].any() and not HAll[:, 0, 1].any()
    np.testing.assert_array_equal(HFinal[0, 2], HAll[2, 0, 2])
    np.testing.assert_array_equal(HFinal[0, 1], H0[0, 1])  # a row of length 0 keeps its initial state


GRAPH = """graph gru_seq
input t0 : Float64 [5, 4, 3]
input t1 : Float64 [1, 6, 3]
input t2 : Float64 [1, 6, 2]
input t3 : Float64 [1, 12]
input t4 : Int32 [4]
input t5 : Float64 [1, 4, 2]
input t6 : Float64 [2, 3]
t7, t8, t9 = GRUTraining(t0, t1, t2, t3, t4, t5, hidden_size=2, linear_before_reset=LBR)
t10 = MatMul(t7, t6)
t11 = Tanh(t10)
output t11
output t8
"""


@pytest.mark.parametrize("lbr", [0, 1])
def test_gradcheck_passes_on_a_gru_graph(lbr) -> None:
    report = gradir.gradcheck(GRAPH.replace("LBR", str(lbr)), seed=5)
    assert report.ok, report.table()


@pytest.mark.parametrize("direction", ["reverse", "bidirectional"])
@pytest.mark.parametrize("clip", ["", ", clip=0.5"])
def test_gradcheck_passes_on_reverse_and_bidirectional_gru_graphs_with_lengths_and_clip(direction, clip) -> None:
    D = DIRS[direction]
    text = GRAPH.replace("[1,", f"[{D},").replace("linear_before_reset=LBR", f'direction="{direction}", '
                                                  f"linear_before_reset=1{clip}").replace("[2, 3]", f"[{2 * D}, 3]")
    if D == 2:  # HAll [5, 2, 4, 2] -> [5, 4, 4]: both directions' states of a row side by side
        text = text.replace("t10 = MatMul(t7, t6)", "t13 = Transpose(t7, perm=[0, 2, 1, 3])\n"
                            "t12 = Reshape(t13, shape=[5, 4, 4])\nt10 = MatMul(t12, t6)")
    report = gradir.gradcheck(text, seed=5)
    assert report.ok, report.table()


def test_grad_emits_one_grugrad_with_every_input_slot() -> None:
    g = gradir.grad(gradir.parse(GRAPH.replace("LBR", "1")))
    grads = [op for op in g.ops if op.op_name == "GRUGrad"]
    assert len(grads) == 1
    assert len(grads[0].operands) == 10 and grads[0].attrs["linear_before_reset"] == 1


@pytest.mark.parametrize("attrs, words", [
    ("clip=-1.0", "clip=-1.0 must be positive"),
    ("clip=0.0", "must be positive"),
    ('activations=["relu", "tanh"]', "activations"),
    ("linear_before_reset=2", "linear_before_reset"),
])
def test_what_gradir_cannot_compute_is_a_located_error(attrs, words) -> None:
    text = GRAPH.replace("linear_before_reset=LBR", attrs)
    with pytest.raises(GradirError) as err:
        gradir.compile(gradir.parse(text))
    msg = str(err.value)
    assert ":9:" in msg and words in msg, msg


def _ort_model(op: str, inputs: list, outputs: list, **attrs):
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper
    shapes = {"X": [S, NB, I], "W": [1, 3 * H, I], "R": [1, 3 * H, H], "B": [1, 6 * H], "H0": [1, NB, H],
              "HAll": [S, 1, NB, H], "ZRH": [S, 1, NB, 3 * H], "dHAll": [S, 1, NB, H], "dHFinal": [1, NB, H]}
    shapes.update(HFinal=shapes["H0"], dX=shapes["X"], dW=shapes["W"], dR=shapes["R"])
    node = helper.make_node(op, inputs, outputs, domain="com.microsoft", hidden_size=H, **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, shapes[n])
                                            for n in inputs if n], [helper.make_tensor_value_info(o, TensorProto.FLOAT, shapes[o])
                                                                   for o in outputs])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])


@pytest.mark.parametrize("acts", [["sigmoid", "tanh"], ["Sigmoid", "Tanh"]])
def test_orts_gru_training_node_imports_with_either_activation_spelling(acts) -> None:
    from gradir.interop.onnx import import_onnx
    m = _ort_model("GRUTraining", ["X", "W", "R", "B", "", "H0"], ["HAll", "HFinal", "ZRH"],
                   activations=acts, linear_before_reset=1)
    imported = import_onnx(m)
    X, W, R, B, _, H0 = _operands(4, np.float32, "none", True, True)
    got = gradir.compile(imported.graph).run({"X": X, "W": W, "R": R, "B": B, "H0": H0})
    want = ref.gru_training(X, W, R, B, None, H0, hidden_size=H, linear_before_reset=1)
    for name, w in zip(("HAll", "HFinal", "ZRH"), want):
        np.testing.assert_allclose(got[name], w, rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("listed, slot", [(["X", "W", "R", "B"], "SL"), (["X", "W", "R", "B", ""], "H0")])
def test_a_grugrad_node_with_its_inputs_misaligned_is_refused_located(listed, slot) -> None:
    """ORT's builder, from a GRU listing 4 (5) inputs, puts HAll in GRUGrad's SL (H0) slot: gradir says so,
    not a traceback and not a wrong gradient."""
    from gradir.interop.onnx import import_onnx
    m = _ort_model("GRUGrad", [*listed, "HAll", "ZRH", "dHAll", "dHFinal"], ["dX", "dW", "dR"])
    with pytest.raises(GradirError) as err:
        import_onnx(m)
    msg = str(err.value)
    assert "GRUGrad" in msg and f"operand {slot}" in msg and "shifted" in msg, msg


def _torch_gru(X, W, R, B, H0, dHAll, dHFinal):
    """PyTorch's nn.GRU in float64 (gates r, z, n; ONNX's z, r, h are torch's blocks [1, 0, 2]), its HAll,
    HFinal and the gradients of sum(HAll·dHAll) + sum(HFinal·dHFinal) in ONNX's layout."""
    torch = pytest.importorskip("torch")
    order = [1, 0, 2]

    def to_torch(M):  # ONNX [3H, ...] (z, r, h) -> torch (r, z, n)
        return np.concatenate([M[k * H:(k + 1) * H] for k in order])

    gru = torch.nn.GRU(I, H, dtype=torch.float64)
    with torch.no_grad():
        gru.weight_ih_l0.copy_(torch.from_numpy(to_torch(W[0])))
        gru.weight_hh_l0.copy_(torch.from_numpy(to_torch(R[0])))
        gru.bias_ih_l0.copy_(torch.from_numpy(to_torch(B[0, :3 * H])))
        gru.bias_hh_l0.copy_(torch.from_numpy(to_torch(B[0, 3 * H:])))
    x = torch.from_numpy(X).requires_grad_()
    h0 = torch.from_numpy(H0).requires_grad_()
    y, hn = gru(x, h0)
    ((y * torch.from_numpy(dHAll[:, 0])).sum() + (hn * torch.from_numpy(dHFinal)).sum()).backward()
    back = [to_torch(p.grad.numpy()) for p in (gru.weight_ih_l0, gru.weight_hh_l0, gru.bias_ih_l0, gru.bias_hh_l0)]
    return (y.detach().numpy()[:, None], hn.detach().numpy(),
            (x.grad.numpy(), back[0][None], back[1][None], np.concatenate([back[2], back[3]])[None], h0.grad.numpy()))


@pytest.mark.parametrize("dtype, tol", [(np.float64, 1e-9), (np.float32, 1e-5)])
def test_matches_pytorch_nn_gru(dtype, tol) -> None:
    X, W, R, B, _, H0 = _operands(21, np.float64, "none", True, True)
    rng = np.random.default_rng(22)
    dHAll, dHFinal = rng.standard_normal((S, 1, NB, H)), rng.standard_normal((1, NB, H))
    t_hall, t_hfin, t_grads = _torch_gru(X, W, R, B, H0, dHAll, dHFinal)
    cast = [None if a is None else a.astype(dtype) for a in (X, W, R, B, H0, dHAll, dHFinal)]
    X, W, R, B, H0, dHAll, dHFinal = cast
    HAll, HFinal, ZRH = gru_training(X, W, R, B, None, H0, hidden_size=H, linear_before_reset=1)
    grads = gru_grad(X, W, R, B, None, H0, HAll, ZRH, dHAll, dHFinal, hidden_size=H, linear_before_reset=1)
    np.testing.assert_allclose(HAll, t_hall, atol=tol)
    np.testing.assert_allclose(HFinal, t_hfin, atol=tol)
    for name, g, t in zip(("dX", "dW", "dR", "dB", "dH0"), grads, t_grads):
        scale = max(1.0, float(np.abs(t).max()))
        np.testing.assert_allclose(g, t, atol=tol * scale, err_msg=name)


@pytest.mark.parametrize("listed", [["X", "W", "R"], ["X", "W", "R", "B", "", "H0"]])
def test_an_onnx_gru_imports_and_differentiates(listed) -> None:
    """ONNX's GRU (ai.onnx, as PyTorch exports nn.GRU: linear_before_reset=1) is a GRUTraining whose HAll and
    HFinal are Y and Y_h; ``gradir grad`` derives one GRUGrad from it."""
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    from gradir.interop.onnx import import_onnx
    shapes = {"X": [S, NB, I], "W": [1, 3 * H, I], "R": [1, 3 * H, H], "B": [1, 6 * H], "H0": [1, NB, H]}
    node = helper.make_node("GRU", listed, ["Y", "Y_h"], hidden_size=H, linear_before_reset=1,
                            activations=["Sigmoid", "Tanh"])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, shapes[n])
                                            for n in listed if n],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [S, 1, NB, H]),
                               helper.make_tensor_value_info("Y_h", TensorProto.FLOAT, [1, NB, H])])
    imported = import_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    X, W, R, B, _, H0 = _operands(9, np.float32, "none", True, True)
    if len(listed) == 3:
        B = H0 = None
    feeds = {k: v for k, v in {"X": X, "W": W, "R": R, "B": B, "H0": H0}.items() if k in listed}
    got = gradir.compile(imported.graph).run(feeds)
    want = ref.gru_training(X, W, R, B, None, H0, hidden_size=H, linear_before_reset=1)
    np.testing.assert_allclose(got["Y"], want[0], rtol=2e-5, atol=2e-6)
    np.testing.assert_allclose(got["Y_h"], want[1], rtol=2e-5, atol=2e-6)
    assert [op.op_name for op in gradir.grad(imported.graph).ops].count("GRUGrad") == 1


@pytest.mark.parametrize("dtype, tol", [("float32", 1e-5), ("float64", 1e-9)])
@pytest.mark.parametrize("bi", ["", "bi_"])
def test_pytorchs_export_of_nn_gru_imports_and_its_gradients_match_torch_autograd(bi, dtype, tol) -> None:
    """``data/gru_torch_[bi_]<dtype>.onnx`` (torch's export of ``nn.GRU``, one direction or bidirectional, weights
    as initializers) imported and differentiated by gradir, against torch's values and autograd
    (``data/gru_torch.npz``, written by ``data/make_gru_torch.py``), within ``tol`` of each result's largest
    magnitude."""
    pytest.importorskip("onnx")
    import os

    from gradir.interop.onnx import import_onnx
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
    imported = import_onnx(os.path.join(here, f"gru_torch_{bi}{dtype}.onnx"))
    prefix = f"{dtype}/bi/" if bi else f"{dtype}/"
    with np.load(os.path.join(here, "gru_torch.npz")) as z:
        t = {k[len(prefix):]: z[k] for k in z.files if k.startswith(prefix) and "/" not in k[len(prefix):]}
    assert [op.op_name for op in imported.graph.ops if op.op_name.startswith("GRU")] == ["GRUTraining"]

    def close(got: np.ndarray, want: np.ndarray, what: str) -> None:
        assert got.shape == want.shape, what
        err = float(np.abs(got.astype(np.float64) - want).max())
        assert err <= tol * max(1.0, float(np.abs(want).max())), f"{what}: off by {err:.3g}"

    got = gradir.compile(imported.graph).run({"x": t["x"], "h0": t["h0"], **imported.inputs})
    close(got["y"], t["y"], "y")
    close(got["hn"], t["hn"], "hn")
    back = gradir.grad(imported.graph)
    labels = {i.label: i.name for i in back.inputs}
    feeds = {"x": t["x"], "h0": t["h0"], "cotangent(y)": t["dy"], "cotangent(hn)": t["dhn"], **imported.inputs}
    grads = gradir.compile(back).run({k: v for k, v in feeds.items() if k in labels})
    close(grads["grad(x)"], t["grad_x"], "dx")
    close(grads["grad(h0)"], t["grad_h0"], "dh0")
    by_shape = {v.shape: k for k, v in imported.inputs.items()}  # W, R, B: distinct shapes (I != H)
    for key in ("grad_W", "grad_R", "grad_B"):
        close(grads[f"grad({by_shape[t[key].shape]})"], t[key], key)


def test_sequence_lengths_out_of_range_raise() -> None:
    X, W, R, B, _, H0 = _operands(1, np.float32, "none", True, True)
    with pytest.raises(ValueError, match=r"sequence lengths must lie in 0\.\.5"):
        gru_training(X, W, R, B, np.array([1, 6, 2, 3], np.int32), H0, hidden_size=H)
    HAll, _, ZRH = gru_training(X, W, R, B, None, H0, hidden_size=H)
    with pytest.raises(ValueError, match="sequence lengths"):
        gru_grad(X, W, R, B, np.array([-1, 2, 2, 3], np.int32), H0, HAll, ZRH, HAll, hidden_size=H)


# -- ONNX export ------------------------------------------------------------------------------------------------
FORWARD_GRU = """graph gru_forward
input t0 : Float32 [5, 4, 3]
input t1 : Float32 [D, 6, 3]
input t2 : Float32 [D, 6, 2]
input t3 : Float32 [D, 12]
input t4 : Int32 [4]
input t5 : Float32 [D, 4, 2]
t6, t7, t8 = GRUTraining(t0, t1, t2, t3, t4, t5, hidden_size=2, direction="DIR", linear_before_reset=1, clip=0.75)
output t6
output t7
"""


def _forward_gru(direction: str) -> str:
    return FORWARD_GRU.replace("DIR", direction).replace("[D,", f"[{DIRS[direction]},")


def _feeds(graph, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    return {i.name: np.array([5, 2, 4, 1], i.type.dtype.name.lower()) if i.type.dtype.name.startswith("Int") else
            rng.standard_normal(i.type.shape).astype(i.type.dtype.name.lower()) for i in graph.inputs}


@pytest.mark.parametrize("direction", DIRS)
def test_a_forward_gru_exports_as_onnxs_gru_and_comes_back_bit_for_bit(direction) -> None:
    """A GRUTraining whose ZRH nothing reads is ONNX's standard GRU (every direction, Int32 sequence lengths,
    clip); ONNX Runtime 1.19.2's GRU gave these models' numbers within 1.2e-7 when this was written.  With Int64
    lengths (ONNX's GRU takes Int32 only) it stays ORT's GRUTraining."""
    pytest.importorskip("onnx")
    g = gradir.parse(_forward_gru(direction))
    model = gradir.export_onnx(g)
    assert [(n.op_type, n.domain) for n in model.graph.node] == [("GRU", "")]
    wide = gradir.export_onnx(gradir.parse(_forward_gru(direction).replace("Int32", "Int64")))
    assert [(n.op_type, n.domain) for n in wide.graph.node] == [("GRUTraining", "com.microsoft")]
    back = gradir.import_onnx(model.SerializeToString())
    feeds = _feeds(g, 3)
    want = gradir.compile(g).run(feeds)
    got = gradir.compile(back.graph).run({**feeds, **back.inputs})
    assert sorted(got) == sorted(want)
    for k in want:
        np.testing.assert_array_equal(got[k], want[k])


TRAINING_GRU = """graph gru_training
input t0 : Float32 [5, 4, 3]
input t1 : Float32 [1, 6, 3]
input t2 : Float32 [1, 6, 2]
input t3 : Float32 [1, 12]
input t4 : Float32 [5, 1, 4, 2]
t5, t6, t7 = GRUTraining(t0, t1, t2, t3, _, _, hidden_size=2, linear_before_reset=1, activations=["Sigmoid", "Tanh"])
t8, t9, t10, t11, t12 = GRUGrad(t0, t1, t2, t3, _, _, t5, t7, t4, _, hidden_size=2, linear_before_reset=1)
output t8
output t9
output t10
output t11
"""


def test_a_training_gru_exports_as_orts_ops_with_orts_activation_spelling() -> None:
    pytest.importorskip("onnx")
    g = gradir.parse(TRAINING_GRU)
    model = gradir.export_onnx(g)
    nodes = {n.op_type: n for n in model.graph.node}
    assert sorted(nodes) == ["GRUGrad", "GRUTraining"] and nodes["GRUGrad"].domain == "com.microsoft"
    acts = [a for a in nodes["GRUTraining"].attribute if a.name == "activations"][0]
    assert [s.decode() for s in acts.strings] == ["sigmoid", "tanh"]
    back = gradir.import_onnx(model.SerializeToString())
    feeds = _feeds(g, 4)
    want = gradir.compile(g).run(feeds)
    got = gradir.compile(back.graph).run({**feeds, **back.inputs})
    for k in want:
        np.testing.assert_array_equal(got[k], want[k])


@pytest.mark.parametrize("change, words", [
    (("hidden_size=2, linear", 'hidden_size=2, direction="reverse", linear'), "only direction 'forward'"),
    (("t3, _, _, t5, t7", "t3, t13, _, t5, t7"), "sequence lengths"),
    (("hidden_size=2, linear", "hidden_size=2, clip=2.0, linear"), "clip"),
])
def test_a_grugrad_orts_kernel_cannot_compute_is_refused_located_unless_custom_domain(change, words) -> None:
    """ORT's GRUGrad is forward only, without sequence lengths or clip: the export says so (as for LSTMGrad),
    and --custom-domain writes it in ai.gradir, which comes back as itself."""
    pytest.importorskip("onnx")
    text = TRAINING_GRU.replace("input t4 :", "input t13 : Int32 [4]\ninput t4 :")
    old, new = change
    text = text.replace(old, new)
    g = gradir.parse(text)
    with pytest.raises(GradirError) as err:
        gradir.export_onnx(g)
    assert "GRUGrad" in str(err.value) and words in str(err.value), str(err.value)
    model = gradir.export_onnx(g, custom_domain=True)
    assert {n.domain for n in model.graph.node if n.op_type == "GRUGrad"} == {"ai.gradir"}
    back = gradir.import_onnx(model.SerializeToString())
    assert [op.op_name for op in back.graph.ops].count("GRUGrad") == 1


# -- GRUCell ---------------------------------------------------------------------------------------------------
def _cell_operands(seed: int, dtype: type = np.float64) -> list:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(dtype) for s in ((NB, I), (NB, H), (3 * H, I), (3 * H, H), (3 * H,), (3 * H,))]


def test_a_gru_cell_is_one_step_of_the_layer_with_linear_before_reset() -> None:
    """PyTorch's GRUCell (gates r, z, n) is a GRUTraining step with linear_before_reset=1 in gate order z, r, h."""
    from gradir.backends.cpu.kernels.gru_cell import gru_cell
    X, Hp, W_ih, W_hh, B_ih, B_hh = _cell_operands(13)
    onnx = lambda m: np.concatenate([m[H:2 * H], m[:H], m[2 * H:]])  # noqa: E731  (r, z, n) -> (z, r, h)
    _, HFinal, _ = ref.gru_training(X[None], onnx(W_ih)[None], onnx(W_hh)[None],
                                    np.concatenate([onnx(B_ih), onnx(B_hh)])[None], None, Hp[None], hidden_size=H,
                                    linear_before_reset=1)
    np.testing.assert_allclose(ref.gru_cell(X, Hp, W_ih, W_hh, B_ih, B_hh, H), HFinal[0], rtol=1e-14, atol=1e-14)
    np.testing.assert_allclose(gru_cell(X, Hp, W_ih, W_hh, B_ih, B_hh, hidden_size=H), HFinal[0], rtol=1e-14,
                               atol=1e-14)


def test_the_gru_cell_reference_gradients_match_finite_differences() -> None:
    ops = _cell_operands(14)
    dH = np.random.default_rng(15).standard_normal((NB, H))
    grads = ref.gru_cell_grads(dH, *ops, H)
    for k, a in enumerate(ops):
        num = np.zeros_like(a)
        for idx in np.ndindex(a.shape):
            old = a[idx]
            a[idx] = old + 1e-6
            plus = float((ref.gru_cell(*ops, H) * dH).sum())
            a[idx] = old - 1e-6
            minus = float((ref.gru_cell(*ops, H) * dH).sum())
            a[idx] = old
            num[idx] = (plus - minus) / 2e-6
        np.testing.assert_allclose(grads[k], num, atol=1e-8, err_msg=f"operand {k}")


CELL_GRAPH = """graph gru_cell
input t0 : Float64 [4, 3]
input t1 : Float64 [4, 2]
input t2 : Float64 [6, 3]
input t3 : Float64 [6, 2]
input t4 : Float64 [6]
input t5 : Float64 [6]
t6 = GRUCell(t0, t1, t2, t3, t4, t5, hidden_size=2)
t7 = GRUCell(t0, t6, t2, t3, t4, t5, hidden_size=2)
output t7
"""


def test_two_gru_cells_pass_gradcheck_and_grad_emits_one_gradient_op_per_needed_input() -> None:
    report = gradir.gradcheck(CELL_GRAPH, seed=6)
    assert report.ok, report.table()
    g = gradir.grad(gradir.parse(CELL_GRAPH), wrt=["t2"])
    assert sorted(op.attrs["input_index"] for op in g.ops if op.op_name == "GradGRUCellInput") == [1, 2, 2]


@pytest.mark.parametrize("direction", DIRS)
@pytest.mark.parametrize("acts", [["sigmoid", "tanh"], ["Sigmoid", "Tanh"], ["SIGMOID", "tanh"]])
def test_both_activation_spellings_are_accepted_in_every_direction(direction, acts) -> None:
    """ONNX's spelling (Sigmoid, Tanh) and ORT's (sigmoid, tanh), two per direction: the default GRU's bits."""
    D = DIRS[direction]
    text = _forward_gru(direction).replace("Float32", "Float64")
    plain = gradir.parse(text)
    spelled = gradir.parse(text.replace("clip=0.75", "clip=0.75, activations=" + str(acts * D).replace("'", '"')))
    assert spelled.ops[0].attrs["activations"] == ("sigmoid", "tanh") * D
    feeds = _feeds(plain, 9)
    want, got = gradir.compile(plain).run(feeds), gradir.compile(spelled).run(feeds)
    for k in want:
        np.testing.assert_array_equal(got[k], want[k])
    wrong = '["Sigmoid", "Tanh"]' if D == 2 else '["Sigmoid", "Tanh", "Sigmoid", "Tanh"]'
    with pytest.raises(GradirError) as err:
        gradir.compile(gradir.parse(text.replace("clip=0.75", "activations=" + wrong)))
    assert f"needs {2 * D} (two per direction)" in str(err.value) and ":8:" in str(err.value), str(err.value)


def _torch_data(prefix: str) -> dict:
    import os
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
    with np.load(os.path.join(here, "gru_torch.npz")) as z:
        return {k[len(prefix):]: z[k] for k in z.files if k.startswith(prefix)}


@pytest.mark.parametrize("dtype, tol", [("float32", 1e-5), ("float64", 1e-9)])
@pytest.mark.parametrize("direction", ["bidirectional", "reverse"])
def test_bidirectional_and_reverse_grus_with_sequence_lengths_match_pytorchs_packed_sequences(direction, dtype, tol):
    """PyTorch's bidirectional nn.GRU on a packed sequence (unsorted lengths 6, 2, 4), float64 autograd
    (``data/gru_torch.npz``, ``<dtype>/packed/``, by ``data/make_gru_torch.py``): gradir's bidirectional layer,
    and its reverse layer alone (direction 1's weights; torch's gradients with the forward direction's upstream
    gradients zero, ``packed_rev``), within ``tol`` of each result's largest magnitude."""
    t = _torch_data(f"{dtype}/packed/")
    g = _torch_data(f"{dtype}/packed_rev/") if direction == "reverse" else t
    d = slice(1, 2) if direction == "reverse" else slice(0, 2)
    X, W, R, B, SL, H0 = t["x"], t["W"][d], t["R"][d], t["B"][d], t["lengths"], t["h0"][d]
    n = R.shape[-1]
    kw = {"hidden_size": n, "direction": direction, "linear_before_reset": 1}
    HAll, HFinal, ZRH = gru_training(X, W, R, B, SL, H0, **kw)
    grads = gru_grad(X, W, R, B, SL, H0, HAll, ZRH, t["dy"][:, d], t["dhn"][d], **kw)

    def close(got: np.ndarray, want: np.ndarray, what: str) -> None:
        assert got.shape == want.shape and got.dtype == np.dtype(dtype), what
        err = float(np.abs(got.astype(np.float64) - want).max())
        assert err <= tol * max(1.0, float(np.abs(want).max())), f"{what}: off by {err:.3g}"

    close(HAll, t["y"][:, d], "y")
    close(HFinal, t["hn"][d], "hn")
    for name, got in zip(("x", "W", "R", "B", "h0"), grads):
        want = g[f"grad_{name}"]
        close(got, want if name == "x" else want[d], f"d{name}")


@pytest.mark.parametrize("direction", DIRS)
def test_an_empty_sequence_keeps_the_initial_state_and_passes_its_gradient_through(direction) -> None:
    D = DIRS[direction]
    X, W, R, B, _, H0 = _operands(16, np.float64, "none", True, True, D)
    X = X[:0]
    kw = {"hidden_size": H, "direction": direction}
    HAll, HFinal, ZRH = gru_training(X, W, R, B, None, H0, **kw)
    assert HAll.shape == (0, D, NB, H) and ZRH.shape == (0, D, NB, 3 * H)
    np.testing.assert_array_equal(HFinal, H0)
    dHFinal = np.random.default_rng(17).standard_normal(H0.shape)
    dX, dW, dR, dB, dH0 = gru_grad(X, W, R, B, None, H0, HAll, ZRH, None, dHFinal, **kw)
    np.testing.assert_array_equal(dH0, dHFinal)
    assert dX.shape == X.shape and not dW.any() and not dR.any() and not dB.any()


@pytest.mark.parametrize("attrs, warned", [("", False), (', direction="reverse"', True), (", clip=2.0", True)])
def test_export_warns_of_a_gru_training_onnx_runtime_refuses(attrs, warned) -> None:
    """A GRUTraining written as ORT's op (its ZRH read) in a configuration ORT's kernel refuses: ``gradir export``
    writes it (ORT's op, ONNX's GRU semantics) and says ORT cannot run it."""
    pytest.importorskip("onnx")
    from gradir.interop.onnx.ort import ort_notes
    text = TRAINING_GRU.replace("hidden_size=2, linear_before_reset=1, activations", f"hidden_size=2{attrs}, "
                                "linear_before_reset=1, activations").replace("t8, t9, t10, t11, t12 = GRUGrad", "#")
    text = "\n".join(line for line in text.splitlines() if not line.startswith(("#", "output"))) + "\noutput t7\n"
    notes = ort_notes(gradir.parse(text), 17, False)
    assert any("GRUTraining computes the forward direction only" in n for n in notes) == warned, notes
