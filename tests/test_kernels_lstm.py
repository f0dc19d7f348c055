"""LSTM kernels: ORT's worked example, an independent forward reference, and float64
central-difference dot-product checks of every gradient in every variant."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lstm_reference import lstm_cell_ref, lstm_loss, lstm_training_ref

import gradir.backends.cpu.kernels._jit_gemm as jit_gemm
import gradir.ops.lstm as ops_lstm
import gradir.backends.cpu.kernels.lstm as lstm_mod
from gradir.backends.cpu.kernels import jit, parallel
from gradir.backends.cpu.kernels.lstm import backward as lstm_backward
from gradir.backends.cpu.kernels.lstm import cell as lstm_cell_mod
from gradir.backends.cpu.kernels.lstm import common as lstm_common
from gradir.backends.cpu.kernels.lstm import sweep as lstm_sweep
from gradir.backends.cpu.kernels.lstm import (grad_lstm_cell_input, grad_lstm_cell_input_fused, lstm_cell, lstm_grad,
                                              lstm_training)

# ONNX Runtime's own LSTMGrad unit test (lstm_test.cc, BackwardCompute): inputs and expected outputs
CASE_A = Path(__file__).resolve().parent / "data" / "ort_lstm_case_a.json"

DIRECTIONS = ("forward", "reverse", "bidirectional")
UPSTREAMS = {"all": (True, True, True), "dHAll": (True, False, False), "final": (False, True, True)}


# -- helpers ----------------------------------------------------------------------------
def make_layer(rng, S, nb, I, H, direction, *, with_b=True, with_sl=False, with_p=False,
               with_h0=False, dtype=np.float64):
    D = 2 if direction == "bidirectional" else 1
    ops = {
        "X": rng.standard_normal((S, nb, I)),
        "W": 0.5 * rng.standard_normal((D, 4 * H, I)),
        "R": 0.5 * rng.standard_normal((D, 4 * H, H)),
        "B": 0.5 * rng.standard_normal((D, 8 * H)) if with_b else None,
        "SL": None,
        "H0": 0.5 * rng.standard_normal((D, nb, H)) if with_h0 else None,
        "C0": 0.5 * rng.standard_normal((D, nb, H)) if with_h0 else None,
        "P": 0.5 * rng.standard_normal((D, 3 * H)) if with_p else None,
    }
    if with_sl:
        sl = rng.integers(1, S + 1, size=nb)
        sl[0] = S  # at least one full row ...
        if nb > 1:
            sl[-1] = 1  # ... and one of length 1
        ops["SL"] = sl.astype(np.int32)
    for k, v in ops.items():
        if v is not None and k != "SL":
            ops[k] = v.astype(dtype)
    return ops


def layer_args(ops):
    return [ops[k] for k in ("X", "W", "R", "B", "SL", "H0", "C0", "P")]


def run_forward(ops, H, direction):
    return lstm_training(*layer_args(ops), hidden_size=H, direction=direction)


def run_grad(ops, fwd, up, H, direction):
    HAll, _, _, CAll, iofc = fwd
    return lstm_grad(ops["X"], ops["W"], ops["R"], ops["SL"], ops["H0"], ops["C0"], HAll, CAll, iofc,
                     up["dHAll"], up["dHFinal"], up["dCFinal"], ops["P"], hidden_size=H,
                     direction=direction)


def upstream(rng, S, nb, H, D, which, dtype=np.float64):
    use_all, use_hf, use_cf = UPSTREAMS[which]
    return {
        "dHAll": rng.standard_normal((S, D, nb, H)).astype(dtype) if use_all else None,
        "dHFinal": rng.standard_normal((D, nb, H)).astype(dtype) if use_hf else None,
        "dCFinal": rng.standard_normal((D, nb, H)).astype(dtype) if use_cf else None,
    }


def f32_layer(seed, S, nb, I, H, direction):
    """A Float32 layer (bias, no SL/P/H0), its upstream gradients (every kind) and its forward."""
    rng = np.random.default_rng(seed)
    D = 2 if direction == "bidirectional" else 1
    ops = make_layer(rng, S, nb, I, H, direction, dtype=np.float32)
    up = upstream(rng, S, nb, H, D, "all", dtype=np.float32)
    return ops, up, run_forward(ops, H, direction)


GRAD_OF = {"X": 0, "W": 1, "R": 2, "B": 3, "H0": 4, "C0": 5, "P": 6}


def shape_of(name, S, nb, I, H, D):
    return {"X": (S, nb, I), "W": (D, 4 * H, I), "R": (D, 4 * H, H), "B": (D, 8 * H),
            "H0": (D, nb, H), "C0": (D, nb, H), "P": (D, 3 * H)}[name]


def check_dot_products(rng, ops, up, grads, S, nb, I, H, direction, n_dirs=2, eps=1e-6):
    """<∇L, v> against (L(x+εv) - L(x-εv)) / 2ε for every differentiable input.

    An absent optional operand is checked as an explicit zero operand (the kernel's
    gradient for it is the gradient at zero)."""
    D = 2 if direction == "bidirectional" else 1
    for name, j in GRAD_OF.items():
        shape = shape_of(name, S, nb, I, H, D)
        base = ops[name] if ops[name] is not None else np.zeros(shape)
        assert grads[j].shape == shape, name
        for _ in range(n_dirs):
            v = rng.standard_normal(shape)
            losses = []
            for sign in (1, -1):
                trial = dict(ops)
                trial[name] = base + sign * eps * v
                losses.append(lstm_loss(run_forward(trial, H, direction), up["dHAll"], up["dHFinal"],
                                        up["dCFinal"]))
            fd = (losses[0] - losses[1]) / (2 * eps)
            an = float(np.sum(grads[j] * v))
            assert an == pytest.approx(fd, rel=1e-6, abs=1e-7), (name, an, fd)


# -- ORT's worked example -------------------------------------------------------------------
def test_ort_case_a(kernel_path):
    case = json.loads(CASE_A.read_text())
    shp = case["shapes"]
    inp = {k: np.array(v, np.float32).reshape(shp[k]) for k, v in case["inputs"].items()}
    res = lstm_grad(inp["X"], inp["W"], inp["R"], None, None, None, inp["HAll"], inp["CAll"], inp["iofc"],
                    inp["dHAll"], None, None, None, hidden_size=case["attributes"]["hidden_size"])
    assert all(r.dtype == np.float32 for r in res)
    for j, name in enumerate(("dX", "dW", "dR", "dB", "dH0", "dC0", "dP")):
        if name in case["expected"]:
            expected = np.array(case["expected"][name], np.float32).reshape(shp[name])
            np.testing.assert_allclose(res[j], expected, rtol=0, atol=1e-5, err_msg=name)
    # ORT's dP with P absent is Σ da_i·C_{t-1}, Σ da_o·C_t, Σ da_f·C_{t-1}: the exact gradient at P = 0.
    dB = res[3]
    np.testing.assert_array_equal(dB[:, :12], dB[:, 12:])


# -- LSTMCell and GradLSTMCellInput ----------------------------------------------------------
def cell_operands(rng, nb=3, I=4, H=5, dtype=np.float64):
    return [rng.standard_normal(s).astype(dtype) * sc for s, sc in
            (((nb, I), 1.0), ((nb, H), 0.7), ((nb, H), 0.7), ((4 * H, I), 0.5), ((4 * H, H), 0.5),
             ((4 * H,), 0.5))]


@pytest.fixture(params=["compiled_small", "compiled_large", "numpy"])
def cell_path(request, monkeypatch):
    """The cell kernels' three paths: one compiled call (small cells), BLAS GEMMs around a
    compiled pass (large cells, forced here by a zero size limit), NumPy's ufuncs.  (Large
    Float64 cells take NumPy's ufuncs by design, so for Float64 "compiled_large" is that path.)"""
    if request.param == "numpy":
        with jit.disabled():
            yield request.param
        return
    monkeypatch.setattr(jit, "_on", True)
    if request.param == "compiled_large":
        monkeypatch.setattr(lstm_common, "WHOLE_LOOP_MAX", 0)
    yield request.param


def test_lstm_cell_matches_reference(cell_path):
    rng = np.random.default_rng(1)
    ops = cell_operands(rng)
    h, c = lstm_cell(*ops, hidden_size=5)
    h_ref, c_ref = lstm_cell_ref(*ops, hidden_size=5)
    np.testing.assert_allclose(h, h_ref, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(c, c_ref, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("with_dc", [True, False])
@pytest.mark.parametrize("index", range(6))
def test_grad_lstm_cell_input_dot_product(index, with_dc, cell_path):
    rng = np.random.default_rng(10 + index)
    H = 5
    ops = cell_operands(rng, H=H)
    dh = rng.standard_normal((3, H))
    dc = rng.standard_normal((3, H)) if with_dc else None
    grad = grad_lstm_cell_input(dh, dc, *ops, input_index=index, hidden_size=H)
    assert grad.shape == ops[index].shape

    def loss(o):
        h, c = lstm_cell(*o, hidden_size=H)
        return float(np.sum(dh * h) + (np.sum(dc * c) if dc is not None else 0.0))

    eps = 1e-6
    for _ in range(3):
        v = rng.standard_normal(ops[index].shape)
        plus, minus = list(ops), list(ops)
        plus[index] = ops[index] + eps * v
        minus[index] = ops[index] - eps * v
        fd = (loss(plus) - loss(minus)) / (2 * eps)
        assert float(np.sum(grad * v)) == pytest.approx(fd, rel=1e-6, abs=1e-8)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fused_cell_gradients_bit_for_bit(dtype, cell_path):
    rng = np.random.default_rng(3)
    H = 6
    ops = cell_operands(rng, nb=4, I=3, H=H, dtype=dtype)
    dh = rng.standard_normal((4, H)).astype(dtype)
    for dc in (rng.standard_normal((4, H)).astype(dtype), None):
        single = [grad_lstm_cell_input(dh, dc, *ops, input_index=k, hidden_size=H) for k in range(6)]
        for indices in ([0, 1, 2, 3, 4, 5], [5, 3, 1], [2], [4, 0], [2, 5]):
            fused = grad_lstm_cell_input_fused(dh, dc, *ops, input_indices=indices, hidden_size=H)
            if len(indices) == 1:  # one result is an array, as from every kernel
                assert isinstance(fused, np.ndarray)
                fused = (fused,)
            assert len(fused) == len(indices)
            for k, r in zip(indices, fused):
                assert r.dtype == dtype
                np.testing.assert_array_equal(r, single[k])
        # preallocated outputs are written and returned
        outs = tuple(np.empty_like(s) for s in single)
        res = grad_lstm_cell_input_fused(dh, dc, *ops, input_indices=range(6), hidden_size=H, out=outs)
        assert all(r is o for r, o in zip(res, outs))
        for r, s in zip(res, single):
            np.testing.assert_array_equal(r, s)


def test_hand_written_fused_cell_op_with_one_index_runs():
    """Regression (found by the random-graph thread test): a GradLSTMCellInputFused written with
    one index returned a 1-tuple, and the runtime failed with an internal error."""
    import gradir
    text = ("input t0 : Float32 [2, 2]\ninput t1 : Float32 [2, 1]\ninput t2 : Float32 [2, 2]\n"
            "input t3 : Float32 [8, 1]\ninput t4 : Float32 [8, 2]\ninput t5 : Float32 [8]\n"
            "t6 = GradLSTMCellInputFused(t0, _, t1, t0, t2, t3, t4, t5, input_indices=[0], hidden_size=2)\n"
            "t7 = GradLSTMCellInput(t0, _, t1, t0, t2, t3, t4, t5, input_index=0, hidden_size=2)\n"
            "output t6, t7\n")
    rng = np.random.default_rng(4)
    shapes = [(2, 2), (2, 1), (2, 2), (8, 1), (8, 2), (8,)]
    inputs = {f"t{k}": rng.standard_normal(s).astype(np.float32) for k, s in enumerate(shapes)}
    for threads in (1, 2):
        out = gradir.compile(text, threads=threads).run(inputs)
        assert out["t6"].shape == (2, 1)
        np.testing.assert_array_equal(out["t6"], out["t7"])
    out_buf = np.empty((2, 1), np.float32)
    r = grad_lstm_cell_input_fused(inputs["t0"], None, inputs["t1"], inputs["t0"], inputs["t2"], inputs["t3"],
                                   inputs["t4"], inputs["t5"], input_indices=[0], hidden_size=2, out=out_buf)
    assert r is out_buf
    np.testing.assert_array_equal(r, out["t7"])


@pytest.mark.parametrize("large", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_compiled_cell_kernels_agree_with_numpy(monkeypatch, dtype, large):
    """The compiled cell kernels (one call for small cells; BLAS GEMMs around a compiled pass
    for large ones: Float32 at any size, Float64 only up to B·4H = 16K) against the NumPy
    ufuncs, forward and every gradient, into fresh and into given (strided) outputs."""
    monkeypatch.setattr(jit, "_on", True)
    if large:
        monkeypatch.setattr(lstm_common, "WHOLE_LOOP_MAX", 0)
    # large Float64 cells take NumPy's ufuncs (libm's scalar tanh loses to NumPy's SIMD one)
    assert (lstm_cell_mod._cell_jit(np.dtype(dtype), 24, 40) is None) == (large and dtype == np.float64)
    rng = np.random.default_rng(8)
    nb, I, H = 24, 20, 40
    ops = cell_operands(rng, nb=nb, I=I, H=H, dtype=dtype)
    dh = rng.standard_normal((nb, H)).astype(dtype)
    tol = dict(rtol=2e-5, atol=2e-6) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-13)
    with jit.disabled():
        ref_fwd = lstm_cell(*ops, hidden_size=H)
    got_fwd = lstm_cell(*ops, hidden_size=H)
    for g, r in zip(got_fwd, ref_fwd):
        np.testing.assert_allclose(g, r, **tol)
    strided = tuple(np.zeros((nb, 2 * H), dtype)[:, ::2] for _ in range(2))
    for g, s in zip(lstm_cell(*ops, hidden_size=H, out=strided), got_fwd):  # the same bits
        np.testing.assert_array_equal(g, s)
    for dc in (rng.standard_normal((nb, H)).astype(dtype), None):
        with jit.disabled():
            ref = grad_lstm_cell_input_fused(dh, dc, *ops, input_indices=range(6), hidden_size=H)
        got = grad_lstm_cell_input_fused(dh, dc, *ops, input_indices=range(6), hidden_size=H)
        outs = tuple(np.zeros(np.asarray(r).shape[:-1] + (2 * np.asarray(r).shape[-1],), dtype)[..., ::2] for r in ref)
        into = grad_lstm_cell_input_fused(dh, dc, *ops, input_indices=range(6), hidden_size=H, out=outs)
        for k in range(6):
            np.testing.assert_allclose(got[k], ref[k], err_msg=str(k), **tol)
            assert into[k] is outs[k]
            np.testing.assert_array_equal(into[k], got[k], err_msg=str(k))


def test_fused_cell_rejects_bad_indices():
    rng = np.random.default_rng(4)
    ops = cell_operands(rng)
    dh = rng.standard_normal((3, 5))
    with pytest.raises(ValueError):
        grad_lstm_cell_input_fused(dh, None, *ops, input_indices=[1, 1], hidden_size=5)
    with pytest.raises(ValueError):
        grad_lstm_cell_input(dh, None, *ops, input_index=6, hidden_size=5)


# -- LSTMTraining against the independent reference ------------------------------------------
@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("with_sl,with_p,with_h0,with_b,nb",
                         [c + (nb,) for c in itertools.product([False, True], repeat=4) for nb in (1, 4)])
def test_lstm_training_matches_reference(direction, with_sl, with_p, with_h0, with_b, nb, kernel_path):
    rng = np.random.default_rng(hash((direction, with_sl, with_p, with_h0, with_b, nb)) % 2**32)
    S, I, H = 5, 3, 4
    ops = make_layer(rng, S, nb, I, H, direction, with_b=with_b, with_sl=with_sl, with_p=with_p,
                     with_h0=with_h0)
    got = run_forward(ops, H, direction)
    ref = lstm_training_ref(*layer_args(ops), hidden_size=H, direction=direction)
    for name, g, r in zip(("HAll", "HFinal", "CFinal", "CAll", "iofc"), got, ref):
        assert g.shape == r.shape and g.dtype == np.float64, name
        np.testing.assert_allclose(g, r, rtol=1e-12, atol=1e-13, err_msg=name)


@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("with_sl,with_p,with_h0,with_b", list(itertools.product([False, True], repeat=4)))
@pytest.mark.parametrize("path", ["halves", "halves_blas"])
def test_lstm_training_in_two_halves_matches_reference(monkeypatch, direction, with_sl, with_p, with_h0, with_b,
                                                       path):
    """The compiled Float32 forward that large batches take: two half-batch step loops (here 2
    and 3 rows; SL rows that start late in the reverse direction fall in either half), with
    their per-step GEMM by the packed-panel kernel or by BLAS."""
    force_path(monkeypatch, path)
    saved = jit._on
    jit.set_enabled(True)
    try:
        rng = np.random.default_rng(sum(1 << k for k, f in enumerate((with_sl, with_p, with_h0, with_b)) if f))
        S, nb, I, H = 5, 5, 3, 4
        ops = make_layer(rng, S, nb, I, H, direction, with_b=with_b, with_sl=with_sl, with_p=with_p,
                         with_h0=with_h0, dtype=np.float32)
        if with_sl:
            ops["SL"] = np.array([5, 2, 4, 1, 3], np.int64)  # starts at different steps in both halves
        got = run_forward(ops, H, direction)
    finally:
        jit.set_enabled(saved)
    ref = lstm_training_ref(*layer_args(ops), hidden_size=H, direction=direction)
    for name, g, r in zip(("HAll", "HFinal", "CFinal", "CAll", "iofc"), got, ref):
        assert g.dtype == np.float32, name
        np.testing.assert_allclose(g, r, rtol=2e-5, atol=2e-6, err_msg=name)


# -- LSTMGrad: exact gradients in every variant ----------------------------------------------
GRAD_CASES = list(itertools.product(DIRECTIONS, [False, True], [False, True], [False, True],
                                    ["all", "dHAll", "final"]))


@pytest.mark.parametrize("direction,with_sl,with_p,with_h0,which", GRAD_CASES)
def test_lstm_grad_dot_products(direction, with_sl, with_p, with_h0, which, kernel_path):
    check_grad_case(direction, with_sl, with_p, with_h0, which)


@pytest.mark.parametrize("direction,with_sl,with_p,with_h0,which", GRAD_CASES)
def test_lstm_grad_dot_products_in_two_halves(monkeypatch, direction, with_sl, with_p, with_h0, which):
    """The compiled path that large batches take: two half-batch step loops (here 1 and 2 rows)
    and every big GEMM in two halves, against finite differences like every other path."""
    force_path(monkeypatch, "halves")
    saved = jit._on
    jit.set_enabled(True)
    try:
        check_grad_case(direction, with_sl, with_p, with_h0, which)
    finally:
        jit.set_enabled(saved)


def check_grad_case(direction, with_sl, with_p, with_h0, which):
    seed = GRAD_CASES.index((direction, with_sl, with_p, with_h0, which))
    rng = np.random.default_rng(100 + seed)
    S, nb, I, H = 4, 3, 2, 3
    D = 2 if direction == "bidirectional" else 1
    ops = make_layer(rng, S, nb, I, H, direction, with_sl=with_sl, with_p=with_p, with_h0=with_h0)
    up = upstream(rng, S, nb, H, D, which)
    grads = run_grad(ops, run_forward(ops, H, direction), up, H, direction)
    check_dot_products(rng, ops, up, grads, S, nb, I, H, direction)
    dB = grads[3]
    np.testing.assert_array_equal(dB[:, : 4 * H], dB[:, 4 * H:])
    if with_sl:  # steps that do not exist get no gradient
        sl = ops["SL"]
        for b in range(nb):
            assert not grads[0][sl[b]:, b].any()


def test_lstm_grad_no_upstream_is_zero(kernel_path):
    rng = np.random.default_rng(7)
    ops = make_layer(rng, 3, 2, 2, 3, "bidirectional", with_p=True, with_h0=True)
    up = {"dHAll": None, "dHFinal": None, "dCFinal": None}
    for g in run_grad(ops, run_forward(ops, 3, "bidirectional"), up, 3, "bidirectional"):
        assert not g.any()


@settings(max_examples=15, deadline=None)
@given(S=st.integers(1, 5), nb=st.integers(1, 4), I=st.integers(1, 3), H=st.integers(1, 4),
       direction=st.sampled_from(DIRECTIONS), flags=st.integers(0, 7), seed=st.integers(0, 2**16))
def test_lstm_grad_random_shapes(S, nb, I, H, direction, flags, seed):
    rng = np.random.default_rng(seed)
    D = 2 if direction == "bidirectional" else 1
    ops = make_layer(rng, S, nb, I, H, direction, with_sl=bool(flags & 1), with_p=bool(flags & 2),
                     with_h0=bool(flags & 4))
    fwd = run_forward(ops, H, direction)
    ref = lstm_training_ref(*layer_args(ops), hidden_size=H, direction=direction)
    for g, r in zip(fwd, ref):
        np.testing.assert_allclose(g, r, rtol=1e-12, atol=1e-13)
    up = upstream(rng, S, nb, H, D, "all")
    check_dot_products(rng, ops, up, run_grad(ops, fwd, up, H, direction), S, nb, I, H, direction,
                       n_dirs=1)


# -- code paths that only large shapes take, forced on small ones ------------------------------
@pytest.mark.parametrize("direction", DIRECTIONS)
def test_chunking_agrees(monkeypatch, direction, kernel_path):
    rng = np.random.default_rng(11)
    S, nb, I, H = 9, 5, 3, 4
    D = 2 if direction == "bidirectional" else 1
    ops = make_layer(rng, S, nb, I, H, direction, with_sl=True, with_p=True, with_h0=True)
    up = upstream(rng, S, nb, H, D, "all")
    fwd = run_forward(ops, H, direction)
    base = run_grad(ops, fwd, up, H, direction)
    for steps_per_chunk, T0 in ((1, 9), (2, 3), (4, 4), (1, 2)):
        monkeypatch.setattr(lstm_backward, "_CHUNK_BYTES", steps_per_chunk * nb * 4 * H * 8)
        monkeypatch.setattr(ops_lstm, "CHUNK_BYTES", T0 * nb * D * 4 * H * 8)  # T0 steps per fixed chunk
        monkeypatch.setattr(lstm_common, "WHOLE_LOOP_MAX", 0)  # compiled path: one call per step
        got = run_grad(ops, fwd, up, H, direction)
        for g, b in zip(got, base):
            np.testing.assert_allclose(g, b, rtol=1e-12, atol=1e-13)


# -- memory ----------------------------------------------------------------------------------
@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("path", ["default", "halves", "halves_blas"])
def test_lstm_grad_scratch_does_not_grow_with_S(monkeypatch, direction, path, kernel_path):
    """Beyond its outputs, LSTMGrad's scratch is bounded by its fixed chunk of T0 steps (issue #33: it
    was one [S, B, 4H] buffer per direction, memory the plan did not know about); nothing it allocates
    grows with S (measured with tracemalloc at S and 4S, from no kept scratch, T0 = 8 steps here)."""
    import tracemalloc
    if path != "default":
        force_path(monkeypatch, path)
    nb, I, H = 16, 8, 64
    D = 2 if direction == "bidirectional" else 1
    f4 = np.float32

    def extra(S):
        rng = np.random.default_rng(S)
        ops = make_layer(rng, S, nb, I, H, direction, with_sl=True, with_p=True, with_h0=True, dtype=f4)
        up = upstream(rng, S, nb, H, D, "all", dtype=f4)
        HAll, _, _, CAll, iofc = run_forward(ops, H, direction)
        outs = tuple(np.empty(shape, f4) for shape in [(S, nb, I), (D, 4 * H, I), (D, 4 * H, H), (D, 8 * H),
                                                       (D, nb, H), (D, nb, H), (D, 3 * H)])
        args = (ops["X"], ops["W"], ops["R"], ops["SL"], ops["H0"], ops["C0"], HAll, CAll, iofc,
                up["dHAll"], up["dHFinal"], up["dCFinal"], ops["P"])
        lstm_grad(*args, hidden_size=H, direction=direction, out=outs)  # compiles, fills caches
        lstm_mod.release_scratch()
        tracemalloc.start()
        try:
            lstm_grad(*args, hidden_size=H, direction=direction, out=outs)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        return peak

    monkeypatch.setattr(ops_lstm, "CHUNK_BYTES", 8 * nb * D * 4 * H * 4)
    small, large = extra(40), extra(160)
    assert large <= small + (64 << 10), (small, large)
    assert small < 4 << 20  # a few bounded temporaries (dR-sized, chunk-sized)


# -- the compiled kernels against the NumPy ones ----------------------------------------------
@pytest.mark.parametrize("direction", DIRECTIONS)
def test_two_halves_bits_do_not_depend_on_threads(monkeypatch, direction):
    """A batch large enough to split by itself, forward and backward: the two half-batch loops
    run side by side (two cores given) or one after the other (one core, as the runtime gives a
    step when the other core is busy) with the same bits; the NumPy kernels agree."""
    from gradir.backends.cpu.kernels import parallel
    monkeypatch.setattr(parallel, "_idle_sleep", True)  # as where gradir is imported before NumPy
    side_by_side = []
    run_two = parallel.run_two

    def spy(first, second, concurrent, on_stop=None):
        side_by_side.append(concurrent)
        run_two(first, second, concurrent, on_stop)

    monkeypatch.setattr(parallel, "run_two", spy)
    rng = np.random.default_rng(5)
    S, nb, I, H = 3, 16, 2, 260  # nb·4H = 16640 > _WHOLE_LOOP_MAX, nb >= _SPLIT_MIN_ROWS
    assert nb * 4 * H > lstm_common.WHOLE_LOOP_MAX and nb >= lstm_common.SPLIT_MIN_ROWS
    D = 2 if direction == "bidirectional" else 1
    ops = make_layer(rng, S, nb, I, H, direction, with_sl=True, with_p=True, with_h0=True, dtype=np.float32)
    up = upstream(rng, S, nb, H, D, "all", dtype=np.float32)
    fwd = run_forward(ops, H, direction)  # BLAS free (none side by side on a one-core machine)
    two = run_grad(ops, fwd, up, H, direction)
    assert set(side_by_side) == {parallel.threads_here() >= 2}
    side_by_side.clear()
    with parallel.blas_limit(1), parallel.cores(1):  # as the runtime gives a step one core
        fwd1 = run_forward(ops, H, direction)
        one = run_grad(ops, fwd, up, H, direction)
    assert side_by_side and not any(side_by_side)
    side_by_side.clear()
    with parallel.blas_limit(2):  # held above one thread for others (4+ cores): no split at all
        fwd2 = run_forward(ops, H, direction)
        whole = run_grad(ops, fwd, up, H, direction)
    assert not side_by_side or parallel.blas_threads() < 2
    for name, a, b in zip(("HAll", "dX", "dW", "dR"), (fwd2[0], *whole[:3]), (fwd[0], *two[:3])):
        scale = max(1.0, float(np.abs(b).max()))
        np.testing.assert_allclose(a / scale, b / scale, rtol=2e-5, atol=1e-5, err_msg=name)
    for name, a, b in zip(("HAll", "HFinal", "CFinal", "CAll", "iofc"), fwd, fwd1):
        np.testing.assert_array_equal(a, b, err_msg=name)
    with jit.disabled():
        ref = run_grad(ops, fwd, up, H, direction)
    for name, a, b, r in zip(("dX", "dW", "dR", "dB", "dH0", "dC0", "dP"), two, one, ref):
        np.testing.assert_array_equal(a, b, err_msg=name)
        scale = max(1.0, float(np.abs(r).max()))
        np.testing.assert_allclose(a / scale, r / scale, rtol=2e-5, atol=2e-6, err_msg=name)



def force_path(monkeypatch, path):
    """Make small problems take a large-problem path of the compiled LSTMGrad: ``per_step``
    (one loop, BLAS per step), ``halves`` (two half-batch loops, compiled whole with the
    packed-panel GEMM, as on CPUs where it beats BLAS), ``halves_blas`` (two half-batch loops,
    BLAS per step, as on the others), ``halves_acc`` (``halves`` with each chunk's weight-gradient products
    added straight into dW and dR by the packed kernels, as large problems there: ``sweep.accumulating``)."""
    if path in ("per_step", "halves", "halves_blas", "halves_acc"):
        monkeypatch.setattr(lstm_common, "WHOLE_LOOP_MAX", 0)  # large-problem paths
    if path in ("halves", "halves_blas", "halves_acc"):
        monkeypatch.setattr(lstm_common, "SPLIT_MIN_ROWS", 2)  # two half-batch step loops
        monkeypatch.setattr(parallel, "_idle_sleep", True)  # as where BLAS threads sleep soon
        monkeypatch.setattr(lstm_sweep, "BLOCK_ELEMENTS", 1)  # one step per compiled call
        monkeypatch.setattr(jit_gemm, "FAST_LARGE", path != "halves_blas")
        monkeypatch.setattr(lstm_sweep, "ACC_MIN_MNK", 0 if path == "halves_acc" else 1 << 62)
    elif path == "per_step":
        monkeypatch.setattr(parallel, "_idle_sleep", False)  # OpenBLAS's default spin


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("path", ["whole", "per_step", "halves", "halves_blas", "halves_acc"])
def test_compiled_agrees_with_numpy(monkeypatch, dtype, direction, path):
    rng = np.random.default_rng(31)
    S, nb, I, H = 7, 5, 4, 6
    D = 2 if direction == "bidirectional" else 1
    tol = dict(rtol=2e-5, atol=2e-6) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-13)
    force_path(monkeypatch, path)
    if path == "whole":
        monkeypatch.setattr(lstm_sweep, "BLOCK_ELEMENTS", 2 * nb * 4 * H)  # two steps per compiled call
    for with_sl, with_p, with_h0, which in itertools.product([False, True], [False, True], [False, True],
                                                             ["all", "final"]):
        ops = make_layer(rng, S, nb, I, H, direction, with_sl=with_sl, with_p=with_p, with_h0=with_h0,
                         dtype=dtype)
        up = upstream(rng, S, nb, H, D, which, dtype=dtype)
        fwd = run_forward(ops, H, direction)
        saved = jit.enabled()
        jit.set_enabled(True)
        try:
            got = run_grad(ops, fwd, up, H, direction)
            again = run_grad(ops, fwd, up, H, direction)
        finally:
            jit.set_enabled(saved)
        with jit.disabled():
            ref = run_grad(ops, fwd, up, H, direction)
        for name, g, a, r in zip(("dX", "dW", "dR", "dB", "dH0", "dC0", "dP"), got, again, ref):
            assert g.dtype == dtype, name
            np.testing.assert_array_equal(g, a, err_msg=name)  # deterministic
            scale = max(1.0, float(np.abs(r).max()))
            np.testing.assert_allclose(g / scale, r / scale, err_msg=f"{name} {with_sl} {with_p} {with_h0}", **tol)


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_accumulated_weight_gradients_over_many_chunks(monkeypatch, direction):
    """Where each chunk's products are added straight into dW and dR (``sweep.accumulating``), over chunks of
    2 steps (the last one shorter), with sequence lengths and H0: the packed kernels' ``gemm_acc``/``gemm2``
    are really called, the results agree with the NumPy kernels (fresh partial products, then added) and
    are the same bits on one thread and on two."""
    from gradir.backends.cpu.kernels import _jit_goto as jo

    rng = np.random.default_rng(41)
    S, nb, I, H = 9, 6, 5, 4
    D = 2 if direction == "bidirectional" else 1
    force_path(monkeypatch, "halves_acc")
    monkeypatch.setattr(ops_lstm, "CHUNK_BYTES", 2 * nb * D * 4 * H * 4)
    calls = []
    for name in ("gemm_acc", "gemm2"):
        real = getattr(jo, name)
        monkeypatch.setattr(jo, name, lambda *a, _real=real, _name=name, **k: (calls.append(_name), _real(*a, **k)))
    ops = make_layer(rng, S, nb, I, H, direction, with_sl=True, with_p=True, with_h0=True, dtype=np.float32)
    up = upstream(rng, S, nb, H, D, "all", dtype=np.float32)
    fwd = run_forward(ops, H, direction)
    saved = jit.enabled()
    jit.set_enabled(True)
    try:
        got = {}
        for threads in (1, 2):
            with parallel.cores(threads):
                got[threads] = run_grad(ops, fwd, up, H, direction)
    finally:
        jit.set_enabled(saved)
    assert "gemm2" in calls and "gemm_acc" in calls
    with jit.disabled():
        ref = run_grad(ops, fwd, up, H, direction)
    for name, a, b, r in zip(("dX", "dW", "dR", "dB", "dH0", "dC0", "dP"), got[1], got[2], ref):
        np.testing.assert_array_equal(a, b, err_msg=name)
        scale = max(1.0, float(np.abs(r).max()))
        np.testing.assert_allclose(a / scale, r / scale, rtol=2e-5, atol=2e-6, err_msg=name)


def test_compiled_float32_tanh_accuracy():
    assert jit.available(), jit.why_unavailable()
    from numba import njit

    from gradir.backends.cpu.kernels import _jit_lstm

    @njit
    def apply(x, out):
        for j in range(x.shape[0]):
            out[j] = _jit_lstm.tanh(x[j])

    x = np.concatenate([np.linspace(-12, 12, 200001), [0.0, -0.0, 1e-30, -1e-30, 1e-6, 0.625, -0.625, 50.0,
                                                        -50.0, 1e30, -1e30]]).astype(np.float32)
    got = np.empty_like(x)
    apply(x, got)
    ref = np.tanh(x.astype(np.float64))
    ulp = np.spacing(np.abs(ref).astype(np.float32)).astype(np.float64)
    assert float(np.max(np.abs(got - ref) / ulp)) < 2.0
    assert np.all(np.abs(got) <= 1)


# -- dtypes, errors, outputs ------------------------------------------------------------------
@pytest.mark.parametrize("direction", DIRECTIONS)
def test_float32_agrees_with_float64(direction, kernel_path):
    rng = np.random.default_rng(21)
    S, nb, I, H = 6, 3, 4, 5
    D = 2 if direction == "bidirectional" else 1
    ops64 = make_layer(rng, S, nb, I, H, direction, with_sl=True, with_p=True, with_h0=True)
    ops32 = {k: (v.astype(np.float32) if v is not None and k != "SL" else v) for k, v in ops64.items()}
    up64 = upstream(rng, S, nb, H, D, "all")
    up32 = {k: v.astype(np.float32) for k, v in up64.items()}
    f64, f32 = run_forward(ops64, H, direction), run_forward(ops32, H, direction)
    for a, b in zip(f32, f64):
        assert a.dtype == np.float32
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    g64, g32 = run_grad(ops64, f64, up64, H, direction), run_grad(ops32, f32, up32, H, direction)
    for a, b in zip(g32, g64):
        assert a.dtype == np.float32
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-4)
    c64 = cell_operands(rng)
    c32 = [a.astype(np.float32) for a in c64]
    for a, b in zip(lstm_cell(*c32, hidden_size=5), lstm_cell(*c64, hidden_size=5)):
        assert a.dtype == np.float32
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("bad", [0, -1, 6, 100])
@pytest.mark.parametrize("sl_dtype", [np.int32, np.int64])
def test_sequence_length_out_of_range_raises(bad, sl_dtype):
    rng = np.random.default_rng(5)
    S, nb, H = 5, 3, 2
    ops = make_layer(rng, S, nb, 2, H, "forward")
    fwd = run_forward(ops, H, "forward")
    ops["SL"] = np.array([S, bad, 1], sl_dtype)
    with pytest.raises(ValueError, match=r"SL\[1\] = " + str(bad)):
        run_forward(ops, H, "forward")
    up = upstream(rng, S, nb, H, 1, "all")
    with pytest.raises(ValueError, match=r"SL\[1\] = " + str(bad)):
        run_grad(ops, fwd, up, H, "forward")


def test_int64_and_int32_sequence_lengths_agree():
    rng = np.random.default_rng(6)
    ops = make_layer(rng, 5, 4, 2, 3, "reverse", with_sl=True, with_h0=True)
    a = run_forward(ops, 3, "reverse")
    ops["SL"] = ops["SL"].astype(np.int64)
    b = run_forward(ops, 3, "reverse")
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)


def test_preallocated_outputs_are_filled(kernel_path):
    rng = np.random.default_rng(8)
    S, nb, I, H = 4, 3, 2, 3
    ops = make_layer(rng, S, nb, I, H, "bidirectional", with_sl=True, with_p=True, with_h0=True)
    fresh = run_forward(ops, H, "bidirectional")
    outs = tuple(np.full_like(r, np.nan) for r in fresh)
    got = lstm_training(*layer_args(ops), hidden_size=H, direction="bidirectional", out=outs)
    for g, o, f in zip(got, outs, fresh):
        assert g is o
        np.testing.assert_array_equal(g, f)
    up = upstream(rng, S, nb, H, 2, "all")
    base = run_grad(ops, fresh, up, H, "bidirectional")
    gouts = tuple(np.full_like(r, np.nan) if j % 2 else None for j, r in enumerate(base))
    HAll, _, _, CAll, iofc = fresh
    got = lstm_grad(ops["X"], ops["W"], ops["R"], ops["SL"], ops["H0"], ops["C0"], HAll, CAll, iofc,
                    up["dHAll"], up["dHFinal"], up["dCFinal"], ops["P"], hidden_size=H,
                    direction="bidirectional", out=gouts)
    for j, (g, b) in enumerate(zip(got, base)):
        if gouts[j] is not None:
            assert g is gouts[j]
        np.testing.assert_array_equal(g, b)


def test_unsupported_attributes_raise():
    rng = np.random.default_rng(9)
    ops = make_layer(rng, 2, 2, 2, 2, "forward")
    with pytest.raises(ValueError, match="clip"):
        lstm_training(*layer_args(ops), hidden_size=2, clip=1.0)
    with pytest.raises(ValueError, match="input_forget"):
        lstm_training(*layer_args(ops), hidden_size=2, input_forget=1)
    with pytest.raises(ValueError, match="activations"):
        lstm_training(*layer_args(ops), hidden_size=2, activations=["tanh", "tanh", "tanh"])


@pytest.mark.parametrize("path", ["whole", "per_step", "halves", "halves_blas"])
@pytest.mark.parametrize("H", [16, 17, 33])
def test_compiled_agrees_with_numpy_with_full_panels(monkeypatch, path, H):
    """Hidden sizes with full 16-column panels of the packed-panel GEMM (and a partial one)."""
    force_path(monkeypatch, path)
    rng = np.random.default_rng(H)
    S, nb, I = 4, 6, 5
    for direction in DIRECTIONS:
        D = 2 if direction == "bidirectional" else 1
        ops = make_layer(rng, S, nb, I, H, direction, with_sl=True, with_p=True, with_h0=True, dtype=np.float32)
        up = upstream(rng, S, nb, H, D, "all", dtype=np.float32)
        with jit.disabled():
            fwd_ref = run_forward(ops, H, direction)
            ref = run_grad(ops, fwd_ref, up, H, direction)
        monkeypatch.setattr(jit, "_on", True)
        fwd = run_forward(ops, H, direction)
        got = run_grad(ops, fwd_ref, up, H, direction)
        for g, r in zip(fwd + got, fwd_ref + ref):
            np.testing.assert_allclose(g, r, rtol=5e-5, atol=5e-6)


@pytest.mark.parametrize("path", ["whole", "halves", "halves_blas"])
def test_lstm_grad_into_strided_outputs(monkeypatch, path):
    """Given outputs with any strides get the same bits as fresh ones, and nothing beside them
    is written (regression: the packed-panel dX assumed unit column strides)."""
    force_path(monkeypatch, path)
    monkeypatch.setattr(jit, "_on", True)
    H = 7
    ops, up, fwd = f32_layer(12, 4, 6, 5, H, "forward")
    fresh = run_grad(ops, fwd, up, H, "forward")
    HAll, _, _, CAll, iofc = fwd
    for view in (lambda p: p[..., ::2], lambda p: p[..., ::-1][..., ::2]):
        parents = [np.full(r.shape[:-1] + (2 * r.shape[-1],), 99, np.float32) for r in fresh]
        outs = tuple(view(p) for p in parents)
        got = lstm_grad(ops["X"], ops["W"], ops["R"], None, None, None, HAll, CAll, iofc, up["dHAll"],
                        up["dHFinal"], up["dCFinal"], None, hidden_size=H, out=outs)
        for g, o, f, p in zip(got, outs, fresh, parents):
            assert g is o
            np.testing.assert_array_equal(g, f)
            assert np.count_nonzero(p == 99) == p.size // 2


def test_kernels_reject_operands_of_the_wrong_shape():
    """The compiled kernels trust their operands' shapes, so the kernels check them: a clear
    ValueError naming the operand, never garbage or a read out of bounds."""
    rng = np.random.default_rng(13)
    S, nb, I, H = 3, 4, 5, 6
    ops = make_layer(rng, S, nb, I, H, "forward", with_p=True, with_h0=True, dtype=np.float32)
    for name, bad in (("H0", np.zeros((1, nb, H + 40), np.float32)), ("H0", np.zeros((1, nb - 2, H), np.float32)),
                      ("W", np.zeros((1, 4 * H, I + 1), np.float32)), ("P", np.zeros((1, 2 * H), np.float32))):
        wrong = dict(ops, **{name: bad})
        with pytest.raises(ValueError, match=f"operand {name} has shape"):
            run_forward(wrong, H, "forward")
    fwd = run_forward(ops, H, "forward")
    up = upstream(rng, S, nb, H, 1, "all", dtype=np.float32)
    HAll, _, _, CAll, iofc = fwd
    with pytest.raises(ValueError, match="operand iofc has shape"):
        lstm_grad(ops["X"], ops["W"], ops["R"], None, None, None, HAll, CAll, iofc[:, :, :, :-1], up["dHAll"],
                  hidden_size=H)
    cell = cell_operands(rng, nb=4, I=3, H=5, dtype=np.float32)
    dh = rng.standard_normal((4, 5)).astype(np.float32)
    wide = list(cell)
    wide[3] = np.zeros((20, 3 + 40), np.float32)  # W_ih
    with pytest.raises(ValueError, match="operand W_ih has shape"):
        lstm_cell(*wide, hidden_size=5)
    with pytest.raises(ValueError, match="operand W_ih has shape"):
        grad_lstm_cell_input(dh, None, *wide, input_index=0, hidden_size=5)
    with pytest.raises(ValueError, match="operand dH_next has shape"):
        grad_lstm_cell_input(dh[:, :4], None, *cell, input_index=0, hidden_size=5)
    for k in range(6):  # a result into an out of the wrong shape: an error, not a write beyond it
        buf = np.zeros(64, np.float32)
        with pytest.raises(ValueError, match="out\\[0\\] has shape"):
            grad_lstm_cell_input(dh, None, *cell, input_index=k, hidden_size=5, out=buf[:1].reshape(1, 1)
                                 if k != 5 else buf[:3])
        assert not buf.any()


def test_lstm_grad_survives_the_switch_turned_off_during_a_call(monkeypatch):
    """``jit.disabled()`` is process-wide and may be entered by another thread at any time: a
    call that started on the compiled kernels finishes on them (regression: it looked the GEMM
    module up again midway, got None and failed)."""
    force_path(monkeypatch, "halves")
    monkeypatch.setattr(jit, "_on", True)
    H = 5
    ops, up, fwd = f32_layer(14, 4, 6, 3, H, "bidirectional")
    expected = run_grad(ops, fwd, up, H, "bidirectional")
    steps = lstm_sweep.Sweep._compiled

    def switched_off_meanwhile(self, *rest):
        jit.set_enabled(False)  # as another thread's jit.disabled() would
        try:
            return steps(self, *rest)
        finally:
            jit.set_enabled(True)

    def off_after_steps(self, *rest):
        r = steps(self, *rest)
        jit.set_enabled(False)
        return r

    for wrapper in (switched_off_meanwhile, off_after_steps):
        monkeypatch.setattr(lstm_sweep.Sweep, "_compiled", wrapper)
        try:
            got = run_grad(ops, fwd, up, H, "bidirectional")
        finally:
            jit.set_enabled(True)
        for g, e in zip(got, expected):
            np.testing.assert_array_equal(g, e)


def test_ctrl_c_stops_both_step_loops(monkeypatch):
    """A KeyboardInterrupt in one half-batch loop stops the other one between its compiled calls,
    and LSTMGrad raises it only after that loop has stopped (it writes into shared buffers)."""
    import threading
    import time

    force_path(monkeypatch, "halves")  # one step per compiled call
    monkeypatch.setattr(jit, "_on", True)
    jl = jit.load("lstm")
    bptt = jl.bptt
    calls = {0: 0, 1: 0}
    main = threading.get_ident()

    def counted(*args):
        mine = 0 if threading.get_ident() == main else 1
        calls[mine] += 1
        if mine == 0 and calls[0] == 2:
            raise KeyboardInterrupt
        if mine == 1:
            time.sleep(0.005)
        return bptt(*args)

    monkeypatch.setattr(jl, "bptt", counted)
    S, H = 40, 5
    ops, up, fwd = f32_layer(15, S, 6, 3, H, "forward")
    with pytest.raises(KeyboardInterrupt):
        run_grad(ops, fwd, up, H, "forward")
    seen = calls[1]
    time.sleep(0.05)
    assert calls[1] == seen < S  # stopped early, and before LSTMGrad raised


@pytest.mark.skipif(not jit_gemm.FAST_LARGE, reason="the step loops compute dX only where the packed kernels "
                    "are used (_jit_gemm.FAST_LARGE)")
@pytest.mark.parametrize("with_sl", [False, True])
@pytest.mark.parametrize("direction, dtype", [("forward", np.float32), ("reverse", np.float64)])
def test_dx_in_the_step_loops_has_the_bits_of_one_product_after(monkeypatch, with_sl, direction, dtype):
    """The two half-batch loops compute each step's rows of dX while da_t is in cache, by the
    kernel that would compute dX over all steps afterwards: the same bits either way, the steps
    no row reaches (SL) included; and BLAS's products agree."""
    force_path(monkeypatch, "halves")
    monkeypatch.setattr(jit, "_on", True)
    rng = np.random.default_rng(21)
    H = 9
    ops = make_layer(rng, 7, 6, 5, H, direction, with_sl=with_sl, with_p=True, with_h0=True, dtype=dtype)
    if with_sl:
        ops["SL"] = np.array([5, 2, 4, 1, 3, 5], np.int64)  # steps 5, 6 valid for no row
    up = upstream(rng, 7, 6, H, 1, "all", dtype=dtype)
    fwd = run_forward(ops, H, direction)
    inloop = run_grad(ops, fwd, up, H, direction)
    monkeypatch.setattr(lstm_sweep, "DX_IN_LOOP", False)
    after = run_grad(ops, fwd, up, H, direction)
    np.testing.assert_array_equal(inloop[0], after[0])
    monkeypatch.setattr(jit_gemm, "FAST_LARGE", False)  # every product by BLAS
    blas = run_grad(ops, fwd, up, H, direction)
    for a, b in zip(inloop, blas):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)  # (BLAS: other bits)



@pytest.mark.skipif(not jit_gemm.FAST_LARGE, reason="dW and dR are one product only where the packed kernels "
                    "are used (_jit_gemm.FAST_LARGE)")
@pytest.mark.parametrize("where", ["loops"])
def test_a_failure_in_one_chain_neither_hangs_nor_hides(monkeypatch, where):
    """The two half-batch chains run each chunk's step loops side by side.  A failure on one side
    stops the other: LSTMGrad raises that error, and does not wait forever."""
    import threading

    force_path(monkeypatch, "halves")
    monkeypatch.setattr(jit, "_on", True)
    monkeypatch.setattr(parallel, "_threads", max(2, parallel._threads))  # side by side, whatever the machine
    jl = jit.load("lstm")
    ops, up, fwd = f32_layer(16, 6, 8, 5, 7, "forward")
    expected = run_grad(ops, fwd, up, 7, "forward")
    main = threading.get_ident()
    seen: list = []
    real = jl.bptt

    def failing(*args, **kw):
        seen.append(threading.get_ident())
        if threading.get_ident() != main:
            raise RuntimeError("boom on the helper")
        return real(*args, **kw)

    again = run_grad(ops, fwd, up, 7, "forward")
    for a, b in zip(again, expected):
        np.testing.assert_array_equal(a, b)
    monkeypatch.setattr(jl, "bptt", failing)
    result = []

    def call():
        nonlocal main
        main = threading.get_ident()  # the calling thread's chain runs here, the other on the pool
        try:
            run_grad(ops, fwd, up, 7, "forward")
        except RuntimeError as e:
            result.append(e)

    t = threading.Thread(target=call)
    t.start()
    t.join(timeout=120)
    assert not t.is_alive(), "LSTMGrad waited forever for the failed chain"
    assert len(result) == 1 and "boom on the helper" in str(result[0])



@pytest.mark.skipif(not jit_gemm.FAST_LARGE, reason="the chains meet only on the packed-kernel path "
                    "(_jit_gemm.FAST_LARGE)")
@pytest.mark.parametrize("where", ["before the chain"])
def test_a_failure_before_the_first_meeting_does_not_hang(monkeypatch, where):
    """A Ctrl-C on the calling thread before its chain even started (``run_two`` then stops the
    helper): LSTMGrad raises it at once, and the next call gives the same bits as before.  (R and
    W are packed once per direction on the calling thread, before the chunks.)"""
    import threading

    force_path(monkeypatch, "halves")
    monkeypatch.setattr(jit, "_on", True)
    monkeypatch.setattr(parallel, "_threads", max(2, parallel._threads))  # side by side, whatever the machine
    ops, up, fwd = f32_layer(17, 7, 6, 5, 7, "forward")
    expected = run_grad(ops, fwd, up, 7, "forward")
    if where == "before the chain":
        real_run_two = parallel.run_two

        def interrupted(first, second, concurrent, on_stop=None):
            def first_interrupted(stop):
                raise KeyboardInterrupt("Ctrl-C before the chain started")
            monkeypatch.setattr(parallel, "run_two", real_run_two)
            return real_run_two(first_interrupted, second, concurrent, on_stop)

        monkeypatch.setattr(parallel, "run_two", interrupted)
        error = KeyboardInterrupt
    else:
        jg = jit.load("lstm").gemm_module
        real_pack = jg.pack

        def failing_pack(b):
            if threading.get_ident() != threading.main_thread().ident:
                raise MemoryError("no memory for the helper's panels")
            return real_pack(b)

        monkeypatch.setattr(jg, "pack", failing_pack)
        error = MemoryError
    result = []

    def call():
        try:
            run_grad(ops, fwd, up, 7, "forward")
        except BaseException as e:  # noqa: BLE001 - what LSTMGrad raised is the result
            result.append(e)

    t = threading.Thread(target=call)
    t.start()
    t.join(timeout=120)
    assert not t.is_alive(), "LSTMGrad waited forever at the chains' meeting"
    assert len(result) == 1 and isinstance(result[0], error)
    monkeypatch.undo()
    force_path(monkeypatch, "halves")
    monkeypatch.setattr(jit, "_on", True)
    for a, b in zip(run_grad(ops, fwd, up, 7, "forward"), expected):
        np.testing.assert_array_equal(a, b)


@pytest.mark.skipif(not jit_gemm.FAST_LARGE, reason="dW and dR are one product only where the packed kernels "
                    "are used (_jit_gemm.FAST_LARGE)")
@pytest.mark.parametrize("direction", ["forward", "reverse"])
def test_no_h0_and_a_non_finite_first_step_make_no_nans_in_dr(monkeypatch, direction):
    """Without H0 the product multiplies the first step's da by zeros; where that da is not
    finite (inf times 0 is NaN), dR is computed again without that step, as the NumPy path
    computes it: the same NaNs (none here) and the same finite values."""
    force_path(monkeypatch, "halves")
    monkeypatch.setattr(jit, "_on", True)
    rng = np.random.default_rng(23)
    S, B, I, H = 6, 8, 5, 7
    ops = make_layer(rng, S, B, I, H, direction, dtype=np.float64)
    up = upstream(rng, S, B, H, 1, "all", dtype=np.float64)
    first = 0 if direction == "forward" else S - 1
    up["dHAll"][first, 0, 3, 2] = np.inf
    fwd = run_forward(ops, H, direction)
    with np.errstate(all="ignore"):  # dX, dW, dB and dC0 are not finite: as the NumPy path's
        got = run_grad(ops, fwd, up, H, direction)
        with jit.disabled():
            want = run_grad(ops, fwd, up, H, direction)
    assert not np.isnan(want[2]).any() and not np.isnan(got[2]).any()
    np.testing.assert_allclose(got[2], want[2], rtol=1e-12, atol=1e-12)


@pytest.mark.skipif(not jit_gemm.FAST_LARGE, reason="the step loops stream da only on the packed-kernel path "
                    "(_jit_gemm.FAST_LARGE)")
@pytest.mark.parametrize("direction, dtype, H", [("forward", np.float32, 8), ("reverse", np.float64, 7),
                                                 ("bidirectional", np.float32, 6), ("forward", np.float32, 7)])
def test_da_streamed_from_a_ring_has_the_bits_of_da_written_in_place(monkeypatch, direction, dtype, H):
    """The two half-batch loops make each step's da in a ring that stays in cache and stream it
    to ``da`` with non-temporal stores (rows 32-byte aligned: not for float32 with an odd H):
    every result has the bits of da written in place, with sequence lengths too."""
    force_path(monkeypatch, "halves")
    monkeypatch.setattr(jit, "_on", True)
    jl = jit.load("lstm")
    bptt = jl.bptt
    streamed = []
    monkeypatch.setattr(jl, "bptt", lambda *a: streamed.append(a[-2]) or bptt(*a))  # (..., stream, pk)
    rng = np.random.default_rng(24)
    S, B, I = 7, 8, 5
    D = 2 if direction == "bidirectional" else 1
    for with_sl in (False, True):
        ops = make_layer(rng, S, B, I, H, direction, with_sl=with_sl, with_p=True, with_h0=True, dtype=dtype)
        if with_sl:
            ops["SL"] = np.array([7, 2, 4, 1, 3, 5, 6, 2], np.int64)
        up = upstream(rng, S, B, H, D, "all", dtype=dtype)
        fwd = run_forward(ops, H, direction)
        streamed.clear()
        got = run_grad(ops, fwd, up, H, direction)
        assert streamed and all(streamed) == (4 * H * np.dtype(dtype).itemsize % 32 == 0)
        monkeypatch.setattr(lstm_sweep, "STREAM", False)
        streamed.clear()
        want = run_grad(ops, fwd, up, H, direction)
        assert streamed and not any(streamed)
        monkeypatch.setattr(lstm_sweep, "STREAM", True)
        for a, b in zip(got, want):
            np.testing.assert_array_equal(a, b)


def test_the_lstm_kernel_itself_takes_any_case():
    from gradir.backends.cpu.kernels.lstm.common import check_layer_attrs
    assert check_layer_attrs("LSTMGrad", "forward", ["Sigmoid", "Tanh", "Tanh"], None, 0) == 1
