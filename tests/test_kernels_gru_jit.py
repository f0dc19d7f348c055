"""The compiled GRU cores (kernels/_jit_gru.py) against the NumPy cores (kernels/gru.py) and the float64
references: both dtypes, both ``linear_before_reset`` values, sequence lengths, ``initial_h``, batches large
enough for the two half-batch loops, strided result views, and the same bits on one core and two."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from gradir.backends.cpu.kernels import gru, gru_weights, jit, parallel
from gradir.ops import references as ref

S, NB, I, H = 6, 18, 7, 20  # NB >= _jit_gru.SPLIT_MIN_ROWS: two half-batch loops
LENGTHS = {"none": None, "ragged": np.array([6, 2, 0, 5, 6, 1, 3, 6, 4, 6, 2, 5, 0, 6, 1, 3, 6, 4], np.int64),
           "short": np.full(NB, 4, np.int64)}


@pytest.fixture(autouse=True)
def _packed_weight_products(monkeypatch):  # type: ignore[no-untyped-def]
    """The weight gradients by ``_jit_goto`` at these small shapes too (where it is used: contiguous operands)."""
    monkeypatch.setattr(gru_weights, "MIN_MNK", 0)


def _jg():  # type: ignore[no-untyped-def]
    jg = jit.load("gru")
    assert jg is not None, jit.why_unavailable()  # numba is a core dependency
    return jg


def _operands(dtype: type, sl: str, with_h0: bool, seed: int = 3) -> tuple:
    rng = np.random.default_rng(seed)
    k = 1 / np.sqrt(H)  # PyTorch's initialization: gates not saturated
    X = rng.standard_normal((S, NB, I)).astype(dtype)
    Wd = rng.uniform(-k, k, (3 * H, I)).astype(dtype)
    Rd = rng.uniform(-k, k, (3 * H, H)).astype(dtype)
    wb, rb = (rng.uniform(-k, k, 3 * H).astype(dtype) for _ in range(2))
    h0 = rng.standard_normal((NB, H)).astype(dtype) if with_h0 else None
    return X, Wd, Rd, wb, rb, LENGTHS[sl], h0


def _forward(core, X, Wd, Rd, wb, rb, SL, h0, lbr, strided=False):  # type: ignore[no-untyped-def]
    dt = X.dtype
    if strided:  # the views a bidirectional layer's direction gets: [S, 2, B, ·][:, 1]
        HAll, ZRH = np.full((S, 2, NB, H), np.nan, dt)[:, 1], np.full((S, 2, NB, 3 * H), np.nan, dt)[:, 1]
    else:
        HAll, ZRH = np.full((S, NB, H), np.nan, dt), np.full((S, NB, 3 * H), np.nan, dt)
    HFinal = np.full((NB, H), np.nan, dt)
    core(X, Wd, Rd, wb, rb, SL, h0, lbr, None, HAll, HFinal, ZRH)
    return HAll, HFinal, ZRH


def _backward(core, X, Wd, Rd, wb, rb, SL, h0, fwd, lbr, strided=False, seed=4):  # type: ignore[no-untyped-def]
    dt = X.dtype
    rng = np.random.default_rng(seed)
    dHAll = rng.standard_normal((S, NB, H)).astype(dt)
    dHFinal = rng.standard_normal((NB, H)).astype(dt)
    dX = np.full((S, 2, NB, I), np.nan, dt)[:, 0] if strided else np.full((S, NB, I), np.nan, dt)
    HAll, ZRH = fwd[0], fwd[2]
    if strided:
        HAll, ZRH = np.zeros((S, 2, NB, H), dt)[:, 1], np.zeros((S, 2, NB, 3 * H), dt)[:, 1]
        HAll[...], ZRH[...] = fwd[0], fwd[2]
    outs = [dX] + [np.full(s, np.nan, dt) for s in ((3 * H, I), (3 * H, H), (6 * H,), (NB, H))]
    core(X, Wd, Rd, wb, rb, SL, h0, HAll, ZRH, dHAll, dHFinal, lbr, None, *outs)
    return outs


CASES = list(itertools.product((np.float32, np.float64), (0, 1), LENGTHS, (False, True)))


@pytest.mark.parametrize("dtype, lbr, sl, with_h0", CASES)
def test_compiled_cores_match_the_numpy_cores(dtype, lbr, sl, with_h0) -> None:
    jg = _jg()
    ops = _operands(dtype, sl, with_h0)
    tol = 2e-5 if dtype == np.float32 else 1e-12
    want = _forward(gru.forward_core, *ops, lbr)
    # strided views (a bidirectional layer's; the backward then takes gru_weights' fallback) and contiguous arrays
    got = _forward(jg.forward_core, *ops, lbr, strided=with_h0)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol)
    want_g = _backward(gru.backward_core, *ops, want, lbr)
    got_g = _backward(jg.backward_core, *ops, want, lbr, strided=with_h0)
    for g, w in zip(got_g, want_g):
        np.testing.assert_allclose(g, w, rtol=10 * tol, atol=10 * tol)


@pytest.mark.parametrize("dtype, lbr, sl, with_h0", [c for c in CASES if c[2] != "short"])
def test_compiled_cores_give_the_same_bits_on_one_core_and_two(dtype, lbr, sl, with_h0) -> None:
    jg = _jg()
    ops = _operands(dtype, sl, with_h0, seed=5)
    runs = []
    for n in (1, 2):
        with parallel.cores(n):
            fwd = _forward(jg.forward_core, *ops, lbr)
            runs.append((*fwd, *_backward(jg.backward_core, *ops, fwd, lbr)))
    for a, b in zip(*runs):
        assert a.tobytes() == b.tobytes()


@pytest.mark.parametrize("direction, lbr, dtype", list(itertools.product(("forward", "reverse", "bidirectional"), (0, 1),
                                                                         (np.float32, np.float64))))
def test_the_kernels_on_the_compiled_cores_match_the_float64_references(direction, lbr, dtype) -> None:
    """Through the registered kernels (which pick the compiled cores), every direction, with sequence lengths,
    ``initial_h`` and the half-batch loops."""
    D = 2 if direction == "bidirectional" else 1
    rng = np.random.default_rng(6)
    k = 1 / np.sqrt(H)
    X = rng.standard_normal((S, NB, I)).astype(dtype)
    W, R = (rng.uniform(-k, k, (D, 3 * H, n)).astype(dtype) for n in (I, H))
    B = rng.uniform(-k, k, (D, 6 * H)).astype(dtype)
    H0 = rng.standard_normal((D, NB, H)).astype(dtype)
    SL = LENGTHS["ragged"]
    kw = {"hidden_size": H, "direction": direction, "linear_before_reset": lbr}
    tol = 1e-5 if dtype == np.float32 else 1e-11
    want = ref.gru_training(X, W, R, B, SL, H0, **kw)
    got = gru.gru_training(X, W, R, B, SL, H0, **kw)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol)
    dHAll, dHFinal = (rng.standard_normal(a.shape).astype(dtype) for a in want[:2])
    HAll, _, ZRH = (a.astype(dtype) for a in want)
    want_g = ref.gru_grad(X, W, R, B, SL, H0, HAll, ZRH, dHAll, dHFinal, **kw)
    got_g = gru.gru_grad(X, W, R, B, SL, H0, HAll, ZRH, dHAll, dHFinal, **kw)
    for g, w in zip(got_g, want_g):
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol)


def test_the_kernels_use_the_compiled_cores_except_with_clip() -> None:
    jg = _jg()
    for dt in (np.float32, np.float64):
        assert gru.cores(np.dtype(dt), None) == (jg.forward_core, jg.backward_core)
        assert gru.cores(np.dtype(dt), 0.5) == (gru.forward_core, gru.backward_core)
    with jit.disabled():
        assert gru.cores(np.dtype(np.float32), None) == (gru.forward_core, gru.backward_core)


def test_compile_builds_the_gru_cores_so_runs_compile_nothing() -> None:
    """gradir.compile warms GRUTraining/GRUGrad (the ``warm`` hook in kernels/gru.py): running a GRU's
    derived graph afterwards adds no numba signature to the compiled cores' loops."""
    code = """
import numpy as np, gradir
from gradir.backends.cpu.kernels import jit
g = jit.load("gru")
names = ("forward_loop", "backward_loop")
text = '''input t0 : Float32 [3, 18, 4]
input t1 : Float32 [1, 15, 4]
input t2 : Float32 [1, 15, 5]
input t3 : Float32 [1, 30]
t4, t5, t6 = GRUTraining(t0, t1, t2, t3, hidden_size=5, linear_before_reset=1)
output t4
'''
fwd = gradir.parse(text)
exe = gradir.compile(gradir.grad(fwd))
before = [len(getattr(g, n).signatures) for n in names]
rng = np.random.default_rng(0)
exe.run({i.name: rng.standard_normal(i.type.shape).astype(np.float32) for i in exe.graph.inputs})
after = [len(getattr(g, n).signatures) for n in names]
print(before, after)
"""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=root)
    before, after = (json.loads(part) for part in out.stdout.strip().replace("] [", "]\n[").split("\n"))
    assert min(before) >= 1 and after == before, out.stdout
