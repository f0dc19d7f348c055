"""The loss family (docs/ops.md, Losses): ``SoftmaxCrossEntropyLoss`` (ONNX) and
``SoftmaxCrossEntropyLossGrad`` (ORT).

Values and gradients against PyTorch (``data/sce_torch.npz``, written by ``data/make_sce_torch.py``),
against plain float64 loops that spell out ONNX's and ORT's definitions, against float64 finite
differences (``gradir.gradcheck``); the edge cases (every target ignored, a label out of range,
weights summing to 0, scores of +-1000); the type errors, located; bit-identical results for 1, 2 and
4 threads.
"""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gradir
from gradir import AutodiffError, ExecutionError, VerifyError
from gradir.backends.cpu.kernels import KERNELS
from gradir.ops.references import sce_grad, sce_loss

HERE = os.path.dirname(os.path.abspath(__file__))
TORCH = np.load(os.path.join(HERE, "data", "sce_torch.npz"))
TORCH_CASES = json.loads(str(TORCH["cases"]))
DT = {np.dtype(np.float32): "Float32", np.dtype(np.float64): "Float64"}


def _shape(a) -> str:
    return "[" + ", ".join(str(d) for d in np.shape(a)) + "]" if np.ndim(a) else "scalar"


def forward_text(scores, labels, weights=None, reduction="mean", ignore_index=None, outputs="t3") -> str:
    dt = DT[np.asarray(scores).dtype]
    lt = "Int32" if np.asarray(labels).dtype == np.int32 else "Int64"
    attrs = f', reduction="{reduction}"' if reduction != "mean" else ""
    attrs += f", ignore_index={ignore_index}" if ignore_index is not None else ""
    w = ", t2" if weights is not None else ""
    text = f"input t0 : {dt} {_shape(scores)}\ninput t1 : {lt} {_shape(labels)}\n"
    if weights is not None:
        text += f"input t2 : {dt} {_shape(weights)}\n"
    return text + f"t3, t4 = SoftmaxCrossEntropyLoss(t0, t1{w}{attrs})\noutput {outputs}\n"


def feeds(scores, labels, weights=None) -> dict:
    f = {"t0": scores, "t1": labels}
    if weights is not None:
        f["t2"] = weights
    return f


# -- plain references (float64 loops, the definitions spelled out) -------------------------------
# the ops' own float64 references (Op.reference): ONNX's function body, ORT's CPU gradient loop
onnx_reference = sce_loss
ort_grad_reference = sce_grad


# -- PyTorch -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("case", TORCH_CASES, ids=lambda c: c["name"])
def test_values_and_gradients_match_pytorch(case):
    k = case["name"]
    x, lab, dy = TORCH[f"{k}/scores"], TORCH[f"{k}/labels"], TORCH[f"{k}/dy"]
    w = TORCH[f"{k}/weights"] if case["weights"] else None
    g = gradir.parse(forward_text(x, lab, w, case["reduction"], case["ignore_index"], outputs="t3, t4"))
    tol = dict(rtol=2e-6, atol=2e-6) if x.dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)
    out = gradir.compile(g).run(feeds(x, lab, w))
    np.testing.assert_allclose(out["t3"], TORCH[f"{k}/loss"], **tol)
    assert out["t3"].shape == TORCH[f"{k}/loss"].shape and out["t3"].dtype == x.dtype
    np.testing.assert_allclose(out["t4"], TORCH[f"{k}/log_prob"], **tol)
    bwd = gradir.grad(gradir.parse(forward_text(x, lab, w, case["reduction"], case["ignore_index"])), wrt=["t0"])
    cot = bwd.inputs[-1].name
    dx = gradir.compile(bwd).run({**feeds(x, lab, w), cot: dy})["grad(t0)"]
    np.testing.assert_allclose(dx, TORCH[f"{k}/grad"], **tol)


def test_the_torch_fixture_covers_what_it_should():
    kinds = {(c["reduction"], c["ignore_index"] is not None, c["weights"]) for c in TORCH_CASES}
    assert {("mean", False, False), ("mean", True, True), ("mean", False, True), ("none", True, True),
            ("sum", False, True)} <= kinds
    assert any(TORCH[f"{c['name']}/scores"].ndim > 2 for c in TORCH_CASES)
    assert any(TORCH[f"{c['name']}/scores"].dtype == np.float32 for c in TORCH_CASES)


# -- the definitions, on random cases ------------------------------------------------------------------
@st.composite
def cases(draw):
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    n, c = draw(st.integers(1, 4)), draw(st.integers(1, 5))
    extra = draw(st.lists(st.integers(1, 3), max_size=2))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal([n, c] + extra) * 3).astype(dtype)
    ignore = draw(st.sampled_from([None, -100, -1, 0, 1]))
    target = [n] + extra
    labels = rng.integers(0, c, target)
    if ignore is not None:
        labels[rng.random(target) < 0.3] = ignore
    labels = labels.astype(draw(st.sampled_from([np.int32, np.int64])))
    w = rng.uniform(0.1, 2.0, c).astype(dtype) if draw(st.booleans()) else None  # cancelling: see below
    reduction = draw(st.sampled_from(["none", "sum", "mean"]))
    return x, labels, w, reduction, ignore


@settings(max_examples=60, deadline=None)
@given(cases())
def test_kernels_follow_the_onnx_and_ort_definitions(case):
    x, labels, w, reduction, ignore = case
    kern = KERNELS["SoftmaxCrossEntropyLoss"].fn
    loss, lp = kern(x, labels, w, reduction=reduction, ignore_index=ignore)
    want_loss, want_lp = onnx_reference(x, labels, w, reduction, ignore)
    tol = dict(rtol=5e-6, atol=5e-6) if x.dtype == np.float32 else dict(rtol=1e-11, atol=1e-11)
    assert loss.dtype == x.dtype and lp.dtype == x.dtype and loss.shape == np.shape(want_loss)
    np.testing.assert_allclose(lp, want_lp, **tol)
    np.testing.assert_allclose(loss, want_loss, **tol) if np.isfinite(want_loss).all() else \
        np.testing.assert_array_equal(np.isnan(loss), np.isnan(want_loss))
    dy = (np.random.default_rng(1).standard_normal(labels.shape) if reduction == "none" else np.asarray(0.7)).astype(x.dtype)
    dx = KERNELS["SoftmaxCrossEntropyLossGrad"].fn(dy, lp, labels, w, reduction=reduction, ignore_index=ignore)
    want = ort_grad_reference(dy, lp, labels, w, reduction, ignore)
    scale = 1.0 + (float(np.max(np.abs(w))) if w is not None else 1.0) * float(np.max(np.abs(dy)))
    np.testing.assert_allclose(dx, want, rtol=tol["rtol"], atol=tol["atol"] * scale)
    assert dx.dtype == x.dtype and dx.shape == x.shape


def test_log_prob_is_the_log_softmax_kernels_bits():
    x = np.random.default_rng(2).standard_normal((5, 7, 3)).astype(np.float32)
    labels = np.zeros((5, 3), np.int64)
    _, lp = KERNELS["SoftmaxCrossEntropyLoss"].fn(x, labels)
    assert lp.tobytes() == KERNELS["LogSoftmax"].fn(x, axis=1).tobytes()


# -- finite differences (float64) ---------------------------------------------------------------------
@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("weights", [False, True])
@pytest.mark.parametrize("ignore", [None, 2])
def test_gradients_match_finite_differences(reduction, weights, ignore):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((3, 4, 2))
    labels = np.array([[0, 2], [3, 1], [2, 2]])
    w = rng.uniform(0.5, 2.0, 4) if weights else None
    g = gradir.parse(forward_text(x, labels, w, reduction, ignore, outputs="t3, t4"))
    report = gradir.gradcheck(g, wrt=["t0"], inputs=feeds(x, labels, w))
    assert report.ok, report.table()


def test_gradient_wrt_weights_is_a_clear_error():
    g = gradir.parse(forward_text(np.zeros((2, 3)), np.zeros(2, np.int64), np.ones(3)), "w.gir")
    with pytest.raises(AutodiffError) as e:
        gradir.grad(g)  # every float input by default, the weights too
    text = e.value.render()
    assert "w.gir:4:10: error: cannot differentiate SoftmaxCrossEntropyLoss with respect to its weights (t2)" in text
    assert "--wrt" in text
    assert "SoftmaxCrossEntropyLossGrad(t5, t4, t1, t2)" in gradir.grad(g, wrt=["t0"]).to_text()


def test_derived_graph_uses_ort_operand_order_and_attributes():
    g = gradir.parse(forward_text(np.zeros((2, 3, 4)), np.zeros((2, 4), np.int32), None, "sum", -100, "t3, t4"))
    text = gradir.grad(g, wrt=["t0"]).to_text()
    assert ('t7 = SoftmaxCrossEntropyLossGrad(t5, t4, t1, reduction="sum", ignore_index=-100) : Float64 [2, 3, 4]'
            in text)
    assert "t8 = LogSoftmaxGrad_13(t6, t4, axis=1)" in text and "t9 = Sum(t7, t8)" in text


# -- edge cases ---------------------------------------------------------------------------------------
def test_every_target_ignored():
    """ONNX's mean is 0/0 = NaN then (as PyTorch's); sum and none are 0; ORT's gradient is 0."""
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    labels = np.full(3, -100, np.int64)
    for reduction, want in [("mean", np.nan), ("sum", 0.0), ("none", np.zeros(3))]:
        for w in (None, np.ones(4, np.float32)):
            exe = gradir.compile(forward_text(x, labels, w, reduction, -100))
            np.testing.assert_array_equal(exe.run(feeds(x, labels, w))["t3"], np.float32(want))
            bwd = gradir.grad(forward_text(x, labels, w, reduction, -100), wrt=["t0"])
            dy = np.ones(3 if reduction == "none" else (), np.float32)
            dx = gradir.compile(bwd).run({**feeds(x, labels, w), bwd.inputs[-1].name: dy})["grad(t0)"]
            assert dx.tobytes() == np.zeros((3, 4), np.float32).tobytes()


def test_weights_summing_to_zero():
    """ONNX divides anyway (+-inf or NaN); ORT's gradient then leaves dY undivided."""
    x = np.array([[1.0, 2.0], [0.5, -1.0]])
    labels = np.array([0, 1])
    w = np.array([1.0, -1.0])
    loss, lp = KERNELS["SoftmaxCrossEntropyLoss"].fn(x, labels, w)
    assert np.isinf(loss) or np.isnan(loss)
    dx = KERNELS["SoftmaxCrossEntropyLossGrad"].fn(np.asarray(2.0), lp, labels, w)
    np.testing.assert_allclose(dx, ort_grad_reference(2.0, lp, labels, w), rtol=1e-15)
    assert np.abs(dx).max() > 0.1


def test_grad_without_ignore_index_ignores_minus_one_as_ort_does():
    lp = np.log(np.full((3, 2), 0.5))
    dx = KERNELS["SoftmaxCrossEntropyLossGrad"].fn(np.asarray(1.0), lp, np.array([0, -1, 1]))
    np.testing.assert_array_equal(dx, [[-0.25, 0.25], [0, 0], [0.25, -0.25]])  # mean over the 2 kept


def test_no_overflow_for_huge_scores():
    x = np.array([[1000.0, -1000.0, 0.0], [-1000.0, -1000.0, -1000.0]], np.float32)
    labels = np.array([1, 2])
    for reduction in ("none", "sum", "mean"):
        with np.errstate(over="raise", invalid="raise", divide="raise"):  # exp may underflow to 0: exact
            loss, lp = KERNELS["SoftmaxCrossEntropyLoss"].fn(x, labels, reduction=reduction)
            dx = KERNELS["SoftmaxCrossEntropyLossGrad"].fn(np.ones(loss.shape, np.float32), lp, labels,
                                                           reduction=reduction)
        assert np.isfinite(loss).all() and np.isfinite(lp).all() and np.isfinite(dx).all()
    np.testing.assert_allclose(KERNELS["SoftmaxCrossEntropyLoss"].fn(x, labels, reduction="none")[0],
                               [2000.0, math.log(3)], rtol=1e-6)


@pytest.mark.parametrize("labels, ignore, where", [
    ([0, 5, 1], None, "label 5 at labels[1] is out of range: expected 0..4 (scores has 5 classes on axis 1)"),
    ([0, -1, 1], None, "label -1 at labels[1] is out of range: expected 0..4"),
    ([-100, 2, -7], -100, "label -7 at labels[2] is out of range: expected 0..4 or ignore_index=-100"),
])
def test_a_label_out_of_range_is_a_located_run_time_error(labels, ignore, where):
    x = np.zeros((3, 5), np.float32)
    lab = np.array(labels, np.int64)
    exe = gradir.compile(gradir.parse(forward_text(x, lab, None, "mean", ignore), "loss.gir"))
    with pytest.raises(ExecutionError) as e:
        exe.run(feeds(x, lab))
    text = e.value.render()
    assert text.startswith("loss.gir:3:") and where in text, text
    for threads in (1, 2):  # the executable still runs afterwards
        ok = np.array([0, 1, 2], np.int64)
        assert np.isfinite(gradir.compile(forward_text(x, ok), threads=threads).run(feeds(x, ok))["t3"])


def test_the_gradient_op_checks_its_labels_too():
    lp = np.log(np.full((2, 3), 1 / 3))
    with pytest.raises(ValueError, match=r"label 3 at labels\[0\] is out of range: expected 0..2 or -1 \(ORT's "
                                         r"default ignore_index\) \(log_prob has 3 classes on axis 1\); 1 more label "
                                         "is out of range"):
        KERNELS["SoftmaxCrossEntropyLossGrad"].fn(np.asarray(1.0), lp, np.array([3, 7]))


def test_unused_log_prob_and_an_output_log_prob():
    x = np.random.default_rng(3).standard_normal((4, 3))
    labels = np.array([0, 1, 2, 1])
    exe = gradir.compile(forward_text(x, labels))
    assert "t3, t4 = SoftmaxCrossEntropyLoss  (frees t4)" in exe.plan.describe()  # log_prob dies at once
    only_loss = exe.run(feeds(x, labels))
    both = gradir.compile(forward_text(x, labels, outputs="t3, t4")).run(feeds(x, labels))
    assert list(only_loss) == ["t3"] and list(both) == ["t3", "t4"]
    assert only_loss["t3"].tobytes() == both["t3"].tobytes()


def test_results_are_bit_identical_for_1_2_4_threads():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((256, 100, 33)).astype(np.float32)  # 3.4 MB: big enough to split into chunks
    labels = rng.integers(0, 100, (256, 33))
    labels[rng.random((256, 33)) < 0.2] = -100
    w = rng.uniform(0.1, 2, 100).astype(np.float32)
    fwd = forward_text(x, labels, w, "mean", -100, outputs="t3, t4")
    bwd = gradir.grad(forward_text(x, labels, w, "mean", -100), wrt=["t0"])
    inputs = {**feeds(x, labels, w), bwd.inputs[-1].name: np.float32(1.0)}
    ref = None
    for threads in (1, 2, 4):
        out = gradir.compile(fwd, threads=threads).run(feeds(x, labels, w))
        out.update(gradir.compile(bwd, threads=threads).run(inputs))
        bits = {k: v.tobytes() for k, v in out.items()}
        assert ref is None or bits == ref, threads
        ref = bits


# -- type errors, located -------------------------------------------------------------------------
@pytest.mark.parametrize("text, where, message", [
    ("input t0 : Float32 [4, 5]\ninput t1 : Float32 [4]\nt3, t4 = SoftmaxCrossEntropyLoss(t0, t1)\n", "3:38",
     "SoftmaxCrossEntropyLoss: operand labels (t1) has dtype Float32; expected Int32 or Int64"),
    ("input t0 : Float32 [4, 5]\ninput t1 : Int64 [3]\nt3, t4 = SoftmaxCrossEntropyLoss(t0, t1)\n", "3:38",
     "operand labels (t1) has shape [3]; expected [4] (scores Float32 [4, 5] without its class axis 1)"),
    ("input t0 : Float32 [4, 5, 2]\ninput t1 : Int64 [4]\nt3, t4 = SoftmaxCrossEntropyLoss(t0, t1)\n", "3:38",
     "operand labels (t1) has shape [4]; expected [4, 2] (scores Float32 [4, 5, 2] without its class axis 1)"),
    ("input t0 : Float32 [5]\ninput t1 : Int64 [5]\nt3, t4 = SoftmaxCrossEntropyLoss(t0, t1)\n", "3:34",
     "operand scores (t0) must have rank 2 or more ([N, C] or [N, C, d1, ..., dk]), got Float32 [5]"),
    ("input t0 : Int64 [4, 5]\ninput t1 : Int64 [4]\nt3, t4 = SoftmaxCrossEntropyLoss(t0, t1)\n", "3:34",
     "operand scores (t0) has dtype Int64; expected Float32 or Float64"),
    ("input t0 : Float32 [4, 5]\ninput t1 : Int64 [4]\ninput t2 : Float32 [4]\n"
     "t3, t4 = SoftmaxCrossEntropyLoss(t0, t1, t2)\n", "4:42",
     "operand weights (t2) has shape [4]; expected [5] (one weight per class of scores Float32 [4, 5])"),
    ("input t0 : Float32 [4, 5]\ninput t1 : Int64 [4]\ninput t2 : Float64 [5]\n"
     "t3, t4 = SoftmaxCrossEntropyLoss(t0, t1, t2)\n", "4:42",
     "operand weights (t2) has dtype Float64 but scores (t0) has Float32"),
    ("input t0 : Float32 [4, 5]\ninput t1 : Int64 [4]\nt3, t4 = SoftmaxCrossEntropyLoss(t0, t1, reduction=\"avg\")\n",
     "3:42", 'attribute reduction must be one of "none", "sum", "mean", got "avg"'),
    ("input t0 : Float32 [4, 5]\ninput t1 : Int64 [4]\nt3 = SoftmaxCrossEntropyLoss(t0, t1)\n", "3:1",
     "SoftmaxCrossEntropyLoss has 2 results (loss, log_prob), but 1 is assigned"),
    ("input t0 : Float32 [4]\ninput t1 : Float32 [4, 5]\ninput t2 : Int64 [4]\n"
     "t3 = SoftmaxCrossEntropyLossGrad(t0, t1, t2)\n", "4:34",
     'operand dY (t0) has shape [4]; expected scalar (a scalar, for reduction="mean")'),
    ("input t0 : Float32 scalar\ninput t1 : Float32 [4, 5]\ninput t2 : Int64 [4]\n"
     "t3 = SoftmaxCrossEntropyLossGrad(t0, t1, t2, reduction=\"none\")\n", "4:34",
     'operand dY (t0) has shape scalar; expected [4] (the labels\' shape, for reduction="none")'),
    ("input t0 : Float64 scalar\ninput t1 : Float32 [4, 5]\ninput t2 : Int64 [4]\n"
     "t3 = SoftmaxCrossEntropyLossGrad(t0, t1, t2)\n", "4:34",
     "operand dY (t0) has dtype Float64 but log_prob (t1) has Float32"),
])
def test_type_errors_are_located(text, where, message):
    with pytest.raises(VerifyError) as e:
        gradir.parse(text, "bad.gir")
    rendered = e.value.render()
    assert f"bad.gir:{where}: error: " in rendered and message in rendered, rendered


def test_cli_demo_run_draws_valid_labels_and_a_bad_label_exits_1(tmp_path, capsys):
    from gradir.cli.main import main
    f = tmp_path / "sce.gir"
    f.write_text("input t0 : Float32 [8, 6]\ninput t1 : Float32 [6, 3]\ninput t2 \"labels\" : Int64 [8]\n"
                 "t3 = MatMul(t0, t1)\nt4, t5 = SoftmaxCrossEntropyLoss(t3, t2, ignore_index=-100)\noutput t4\n")
    for seed in range(5):  # demo labels are in 0..C-1 (other integers would be 0..9)
        assert main(["run", str(f), "--seed", str(seed)]) == 0
    assert main(["gradcheck", str(f)]) == 0
    np.save(tmp_path / "lab.npy", np.array([0, 1, 2, 3, 0, 1, -100, 2]))
    capsys.readouterr()
    assert main(["run", str(f), "--input", f"t2={tmp_path / 'lab.npy'}", "--generate-missing"]) == 1
    err = capsys.readouterr().err
    assert "sce.gir:5:1: error: SoftmaxCrossEntropyLoss: label 3 at labels[3] is out of range: expected 0..2 or " \
           "ignore_index=-100 (scores has 3 classes on axis 1)" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("reduction", ["none", "mean"])
def test_kernels_give_the_same_bits_however_rows_are_split(monkeypatch, reduction):
    """Chunks of rows on 1, 2, 3 and 4 threads, forced small enough to split even a small case."""
    from gradir.backends.cpu.kernels import parallel
    monkeypatch.setattr(parallel, "MIN_CHUNK_BYTES", 64)
    rng = np.random.default_rng(6)
    x = (rng.standard_normal((37, 11, 5)) * 20).astype(np.float32)
    labels = rng.integers(0, 11, (37, 5))
    labels[rng.random((37, 5)) < 0.2] = -1
    w = rng.uniform(0.1, 2, 11).astype(np.float32)
    dy = rng.standard_normal((37, 5) if reduction == "none" else ()).astype(np.float32)
    saved = parallel.get_threads()
    ref = None
    try:
        for threads in (1, 2, 3, 4):
            parallel.set_threads(threads)
            loss, lp = KERNELS["SoftmaxCrossEntropyLoss"].fn(x, labels, w, reduction=reduction, ignore_index=-1)
            dx = KERNELS["SoftmaxCrossEntropyLossGrad"].fn(dy, lp, labels, w, reduction=reduction)
            bits = (loss.tobytes(), lp.tobytes(), dx.tobytes())
            assert ref is None or bits == ref, threads
            ref = bits
    finally:
        parallel.set_threads(saved)


def test_the_gradient_reuses_log_probs_buffer():
    bwd = gradir.grad(forward_text(np.zeros((4, 3), np.float32), np.zeros(4, np.int64)), wrt=["t0"])
    plan = gradir.compile(bwd).plan.describe()
    assert "t6 = SoftmaxCrossEntropyLossGrad  (in place: t6 reuses t4; frees t4" in plan, plan


def test_the_compiled_float32_gradient_is_numpys_within_rounding_the_same_in_place_and_for_any_split() -> None:
    """SoftmaxCrossEntropyLossGrad over [N, C] Float32 runs one compiled pass (kernels/_jit_loss.py: NumPy's
    float32 exp is scalar without AVX-512): within a few ulp of the NumPy path, 0 exactly for an ignored
    target, the same bits in place (out is log_prob, as the runtime writes it) and for 1 or 2 threads."""
    from gradir.backends.cpu.kernels import jit, loss
    from gradir.backends.cpu.kernels.parallel import get_threads, set_threads

    assert jit.available(), f"numba is a core dependency: {jit.why_unavailable()}"
    rng = np.random.default_rng(31)
    x = rng.standard_normal((600, 2000)).astype(np.float32) * 4  # 4.8 MB: split into chunks on 2 threads
    lab = rng.integers(0, 2000, 600)
    lab[[3, 250]] = -100
    _, lp = loss.softmax_cross_entropy_loss(x, lab, ignore_index=-100)
    dy = np.array(0.75, np.float32)
    with jit.disabled():
        want = loss.softmax_cross_entropy_loss_grad(dy, lp, lab, ignore_index=-100)
    got = {}
    before = get_threads()
    try:
        for threads in (1, 2):
            set_threads(threads)
            got[threads] = loss.softmax_cross_entropy_loss_grad(dy, lp, lab, ignore_index=-100)
            inplace = lp.copy()
            loss.softmax_cross_entropy_loss_grad(dy, inplace, lab, out=inplace, ignore_index=-100)
            assert np.array_equal(inplace, got[threads])
    finally:
        set_threads(before)
    assert np.array_equal(got[1], got[2])
    assert np.all(got[1][[3, 250]] == 0)
    np.testing.assert_allclose(got[1], want, rtol=1e-6, atol=1e-12)  # exp2(x log2 e): a few ulp
