"""Activation kernels (docs/ops.md): values vs mpmath, gradients vs finite differences,
softmax flattening semantics, dtypes, in-place safety and thread-count determinism.

Every test runs twice: on the compiled (numba) Float32 kernels and on the NumPy ones
(``gradir.backends.cpu.kernels.jit``); both must meet the same references."""

from __future__ import annotations

import math
import threading
import warnings
from collections.abc import Callable
from typing import Any

import mpmath as mp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gradir import OPS
from gradir.backends.cpu.kernels import KERNELS
from gradir.backends.cpu.kernels import activation as act
from gradir.backends.cpu.kernels.activation import blocks as act_blocks
from gradir.backends.cpu.kernels.activation import (fast_gelu, fast_gelu_grad, gelu, gelu_grad, leaky_relu,
                                                    leaky_relu_grad, log_softmax, log_softmax_grad, log_softmax_grad_13,
                                                    quick_gelu, quick_gelu_grad, relu, relu_grad, sigmoid, sigmoid_grad,
                                                    softmax, softmax_grad, softmax_grad_13, tanh, tanh_grad)
from gradir.backends.cpu.kernels.parallel import get_threads, set_threads

EDGE = [-1000.0, -100.0, -1.0, 0.0, 1.0, 100.0, 1000.0]
QUICK_ALPHAS = [1.702, 1.0, 0.5, -0.3, -1.702]
LEAKY_ALPHAS = [0.01, 0.2, 1.0, 1.5, -0.1]
EPS32 = float(np.finfo(np.float32).eps)

mp.mp.dps = 60
_K = mp.sqrt(2 / mp.pi)
_C = mp.mpf("0.044715")


pytestmark = pytest.mark.usefixtures("kernel_path")  # every test: compiled kernels, then NumPy


def _sig(z: Any) -> Any:
    return 1 / (1 + mp.exp(-z))


def _Phi(z: Any) -> Any:
    return mp.ncdf(z)


def _phi(z: Any) -> Any:
    return mp.exp(-z * z / 2) / mp.sqrt(2 * mp.pi)


def _fast_gelu_grad_ref(x: Any, a: Any = None) -> Any:
    # The formula ½((1 + t) + x(1 - t²)·k(1 + 3c x²)), t = tanh(u), with 1 + t and 1 - t²
    # written as 2/(1 + e^{-2u}) and 1/cosh²(u) so that 60 digits suffice at any x.
    u = _K * (x + _C * x**3)
    return ((2 / (1 + mp.exp(-2 * u))) + x / mp.cosh(u) ** 2 * _K * (1 + 3 * _C * x * x)) / 2


# name -> (kernel, mpmath reference of (x, alpha) with dY = 1, is_grad, reads forward output Y)
FORWARD_REF: dict[str, Callable[[Any, Any], Any]] = {
    "Relu": lambda x, a: max(x, 0),
    "Sigmoid": lambda x, a: _sig(x),
    "Tanh": lambda x, a: mp.tanh(x),
    "LeakyRelu": lambda x, a: x if x > 0 else a * x,
    "QuickGelu": lambda x, a: x * _sig(a * x),
    "Gelu": lambda x, a: x * _Phi(x),
    "FastGelu": lambda x, a: x / (1 + mp.exp(-2 * _K * (x + _C * x**3))),
}
GRAD_REF_X: dict[str, Callable[[Any, Any], Any]] = {  # gradient ops reading X
    "ReluGrad": lambda x, a: 1 if x > 0 else 0,
    "QuickGeluGrad": lambda x, a: _sig(a * x) * (1 + a * x * (1 - _sig(a * x))),
    "GeluGrad": lambda x, a: _Phi(x) + x * _phi(x),
    "FastGeluGrad": _fast_gelu_grad_ref,
}
GRAD_REF_Y: dict[str, tuple[str, Callable[[Any, Any], Any]]] = {  # reading the output Y
    "SigmoidGrad": ("Sigmoid", lambda y, a: y * (1 - y)),
    "TanhGrad": ("Tanh", lambda y, a: 1 - y * y),
    "LeakyReluGrad": ("LeakyRelu", lambda y, a: 1 if y > 0 else a),
}
ALPHA_DEFAULTS = {"LeakyRelu": 0.01, "LeakyReluGrad": 0.01, "QuickGelu": 1.702,
                  "QuickGeluGrad": 1.702}


def _alphas(name: str) -> list[float | None]:
    if name.startswith("QuickGelu"):
        return list(QUICK_ALPHAS)
    if name.startswith("LeakyRelu"):
        return list(LEAKY_ALPHAS)
    return [None]


def _kw(alpha: float | None) -> dict[str, float]:
    return {} if alpha is None else {"alpha": alpha}


def _ulps(got: float, ref: Any) -> float:
    r = float(ref)  # nearest double
    unit = float(np.spacing(abs(r))) if r != 0 else float(np.spacing(0.0))
    return float(abs(mp.mpf(got) - ref) / unit)


def _strict() -> Any:
    """Floating-point traps for the calls under test (underflow is expected and harmless)."""
    return np.errstate(over="raise", invalid="raise", divide="raise")


# -- registration ------------------------------------------------------------------------

# the activation family, from the registry (gradir/ops/activation.py): the gradients, then the forward ops
BINARY = [n for n, c in OPS.items() if c.__module__.endswith(".activation") and c.is_backward]
UNARY = [n for n, c in OPS.items() if c.__module__.endswith(".activation") and not c.is_backward]
ALL_OPS = BINARY + UNARY


def test_every_activation_kernel_is_registered_inplace() -> None:
    for name in ALL_OPS:
        info = KERNELS[name]
        assert info.inplace, name
        assert info.fn.__module__ in (act.grad.__name__, act.forward.__name__)


# -- edge values vs mpmath ---------------------------------------------------------------


def _edge_cases() -> list[tuple[str, float | None]]:
    names = list(FORWARD_REF) + list(GRAD_REF_X) + list(GRAD_REF_Y)
    return [(n, a) for n in names for a in _alphas(n)]


def _edge_result(name: str, alpha: float | None, x: np.ndarray) -> tuple[np.ndarray, list[Any]]:
    """Kernel result at ``x`` (dY = 1) and the exact values for the same double inputs."""
    fn = KERNELS[name].fn
    a = None if alpha is None else mp.mpf(alpha)
    if name in FORWARD_REF:
        got = fn(x, **_kw(alpha))
        return got, [FORWARD_REF[name](mp.mpf(float(v)), a) for v in x]
    if name in GRAD_REF_X:
        got = fn(np.ones_like(x), x, **_kw(alpha))
        return got, [GRAD_REF_X[name](mp.mpf(float(v)), a) for v in x]
    fwd, ref = GRAD_REF_Y[name]
    # Y is the correctly rounded forward output; the reference uses exactly that Y
    y = np.array([float(FORWARD_REF[fwd](mp.mpf(float(v)), a)) for v in x], dtype=x.dtype)
    got = fn(np.ones_like(x), y, **_kw(alpha))
    return got, [ref(mp.mpf(float(v)), a) for v in y]


@pytest.mark.parametrize("name,alpha", _edge_cases())
def test_edge_values_float64_within_few_ulps_of_mpmath(name: str, alpha: float | None) -> None:
    x = np.array(EDGE)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with _strict():
            got, ref = _edge_result(name, alpha, x)
    assert got.dtype == np.float64
    assert np.isfinite(got).all()
    errs = [_ulps(float(g), r) for g, r in zip(got, ref)]
    assert max(errs) <= 3.0, dict(zip(EDGE, errs))


@pytest.mark.parametrize("name,alpha", _edge_cases())
def test_edge_values_float32(name: str, alpha: float | None) -> None:
    """Float32: within 2 eps relative, times ``1 + |alpha x|`` for QuickGelu (float32 does not
    carry the rounding of ``alpha·x`` into ``exp``, so its error is that of a half-ulp change
    of x); in the saturated tails, where the exact value is below 1e-30, the kernels may
    return such a tiny number instead of 0."""
    x = np.array(EDGE, dtype=np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with _strict():
            got, ref = _edge_result(name, alpha, x)
    assert got.dtype == np.float32
    assert np.isfinite(got).all()
    for v, g, r in zip(EDGE, got, ref):
        err = abs(mp.mpf(float(g)) - r)
        cond = 1 + abs(alpha * v) if name.startswith("QuickGelu") else 1
        assert err <= 2 * EPS32 * cond * abs(r) + mp.mpf("1e-30"), (v, float(g), float(r))


def test_relu_and_leaky_grad_branches_are_exact() -> None:
    dy = np.array([3.0, -2.0, np.inf, np.nan, -0.0, 5.0, 7.0, 1.5])
    x = np.array([1.0, 2.0, -1.0, -3.0, 4.0, 0.0, -0.0, np.nan])
    got = relu_grad(dy, x)
    # ORT's select: dY where X > 0 (strict, NaN is not > 0), else +0 -- even for inf/NaN dY
    np.testing.assert_array_equal(got, [3.0, -2.0, 0.0, 0.0, -0.0, 0.0, 0.0, 0.0])
    assert not np.signbit(got[[2, 3, 5, 6, 7]]).any()
    for alpha in LEAKY_ALPHAS:
        got = leaky_relu_grad(dy, x, alpha=alpha)  # x plays Y here
        want = np.array([d if (y > 0) else alpha * d for d, y in zip(dy, x)])
        np.testing.assert_array_equal(got, want)
        fwd = leaky_relu(x, alpha=alpha)
        np.testing.assert_array_equal(fwd, [v if v > 0 else alpha * v for v in x])


# -- random points: float64 accuracy with the function's own conditioning ----------------


def _terms(name: str, x: np.ndarray, a: float) -> np.ndarray:
    """Sum of the magnitudes of the terms each formula adds (the scale of rounding errors
    that no formula can avoid near a root of the result)."""
    x = np.clip(x, -20, 20)  # the terms' scale is all that matters; keep numpy quiet
    s = 1 / (1 + np.exp(-a * x))
    if name == "QuickGeluGrad":
        return s + np.abs(s * a * x * (1 - s))
    if name == "GeluGrad":
        return (1 + np.tanh(x)) / 2 + np.abs(x) * np.exp(-x * x / 2)
    if name == "FastGeluGrad":
        u = 0.7978845608 * (x + 0.044715 * x**3)
        return 1 / (1 + np.exp(-2 * u)) + np.abs(x) * (1 + 0.134145 * x * x) / np.cosh(u) ** 2
    return np.zeros_like(x)


@pytest.mark.parametrize("name", ["QuickGeluGrad", "GeluGrad", "FastGeluGrad", "Sigmoid",
                                  "QuickGelu", "Gelu", "FastGelu", "Tanh"])
def test_random_points_float64_match_mpmath(name: str) -> None:
    """Within 6 ulps, plus the rounding of the terms a formula adds near a root of the
    result.  FastGelu(Grad) also gets ``2 eps |w|`` relative, ``w = 2k(x + c x³)`` being the
    exp argument, which float64 evaluates without carrying its rounding error (unlike
    QuickGelu's ``alpha x`` and Gelu's ``x²``): in the far tail, where the value is below
    ``exp(-|w|)``, the error grows like ``|w|`` ulps."""
    rng = np.random.default_rng(7)
    x = np.concatenate([rng.standard_normal(40) * 3, rng.uniform(-30, 30, 20)])
    eps = float(np.finfo(np.float64).eps)
    for alpha in _alphas(name)[:3]:
        got, ref = _edge_result(name, alpha, x)
        scale = _terms(name, x, 1.702 if alpha is None else alpha)
        w = np.abs(1.5957691216 * (x + 0.044715 * x**3)) if name.startswith("FastGelu") else 0 * x
        for v, g, r, t, wi in zip(x, got, ref, scale, w):
            err = abs(mp.mpf(float(g)) - r)
            ulp = mp.mpf(float(np.spacing(abs(float(r)))))
            tol = 6 * ulp + 4 * eps * t + 2 * eps * wi * abs(r)
            assert err <= tol, (name, alpha, v, float(g), float(r))


# -- huge finite inputs --------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_huge_inputs_saturate_without_warnings(dtype: type) -> None:
    big = float(np.finfo(dtype).max)
    x = np.array([-big, -1e30, -1e4, 1e4, 1e30, big], dtype=dtype)
    neg, pos = x < 0, x > 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with _strict():
            for name in ["Sigmoid", "QuickGelu", "Gelu", "FastGelu"]:
                for alpha in _alphas(name)[:1] + ([-0.5] if name == "QuickGelu" else []):
                    y = KERNELS[name].fn(x, **_kw(alpha))
                    flip = alpha is not None and alpha < 0
                    lo, hi = (pos, neg) if flip else (neg, pos)
                    want_hi = np.ones_like(x) if name == "Sigmoid" else x
                    assert np.all(np.abs(y[lo]) <= 1e-30), (name, y)
                    np.testing.assert_allclose(y[hi], want_hi[hi], rtol=2 * np.finfo(dtype).eps)
            for name in ["QuickGeluGrad", "GeluGrad", "FastGeluGrad", "SigmoidGrad", "TanhGrad"]:
                g = KERNELS[name].fn(np.ones_like(x), x if "Gelu" in name else np.sign(x))
                assert np.isfinite(g).all(), name


# -- gradients vs central differences (dot-product test, float64) -------------------------


def _flat_softmax(x: np.ndarray, axis: int, log: bool) -> np.ndarray:
    """Reference pre-opset-13 forward: softmax of the 2-D view [prod(shape[:axis]), rest]."""
    ax = axis % x.ndim
    m = x.reshape(math.prod(x.shape[:ax]), -1)
    z = m - m.max(axis=1, keepdims=True)
    if log:
        r = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    else:
        e = np.exp(z)
        r = e / e.sum(axis=1, keepdims=True)
    return r.reshape(x.shape)


GradCase = tuple[Callable[..., np.ndarray], Callable[..., np.ndarray], bool, bool]


def _grad_cases() -> dict[str, GradCase]:
    """grad op -> (forward(x, **attrs), grad(dy, z, **attrs), z is Y (else X), has axis)."""
    return {
        "ReluGrad": (lambda x: relu(x), relu_grad, False, False),
        "SigmoidGrad": (lambda x: sigmoid(x), sigmoid_grad, True, False),
        "TanhGrad": (lambda x: tanh(x), tanh_grad, True, False),
        "LeakyReluGrad": (lambda x, alpha: leaky_relu(x, alpha=alpha), leaky_relu_grad, True,
                          False),
        "QuickGeluGrad": (lambda x, alpha: quick_gelu(x, alpha=alpha), quick_gelu_grad, False,
                          False),
        "GeluGrad": (lambda x: gelu(x), gelu_grad, False, False),
        "FastGeluGrad": (lambda x: fast_gelu(x), fast_gelu_grad, False, False),
        "SoftmaxGrad_13": (lambda x, axis: softmax(x, axis=axis), softmax_grad_13, True, True),
        "LogSoftmaxGrad_13": (lambda x, axis: log_softmax(x, axis=axis), log_softmax_grad_13, True,
                              True),
        "SoftmaxGrad": (lambda x, axis: _flat_softmax(x, axis, False), softmax_grad, True, True),
        "LogSoftmaxGrad": (lambda x, axis: _flat_softmax(x, axis, True), log_softmax_grad, True,
                           True),
    }


GRAD_CASES = _grad_cases()


@st.composite
def _grad_problem(draw: Any, name: str) -> tuple[np.ndarray, dict[str, Any], int]:
    rank = draw(st.integers(1, 4))
    shape = tuple(draw(st.integers(1, 5)) for _ in range(rank))
    attrs: dict[str, Any] = {}
    if GRAD_CASES[name][3]:
        attrs["axis"] = draw(st.integers(-rank, rank - 1))
    if name == "QuickGeluGrad":
        attrs["alpha"] = draw(st.floats(-3.0, 3.0))
    if name == "LeakyReluGrad":  # Y > 0 <=> X > 0 needs alpha >= 0 (ORT reads Y)
        attrs["alpha"] = draw(st.floats(0.0, 3.0))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape) * 3
    if name in ("ReluGrad", "LeakyReluGrad"):  # stay off the kink
        x = np.where(np.abs(x) < 0.05, 0.5, x)
    return x, attrs, seed


@pytest.mark.parametrize("name", list(GRAD_CASES))
def test_gradient_matches_finite_differences(name: str) -> None:
    forward, grad, reads_y, _ = GRAD_CASES[name]

    @settings(max_examples=25, deadline=None)
    @given(_grad_problem(name))
    def check(problem: tuple[np.ndarray, dict[str, Any], int]) -> None:
        x, attrs, seed = problem
        fattrs = {k: v for k, v in attrs.items()}
        rng = np.random.default_rng(seed + 1)
        z = forward(x, **fattrs) if reads_y else x
        h = 1e-6
        for _ in range(3):
            u = rng.standard_normal(x.shape)
            v = rng.standard_normal(x.shape)
            jv = (forward(x + h * v, **fattrs) - forward(x - h * v, **fattrs)) / (2 * h)
            lhs = float(np.vdot(u, jv))  # <u, J v>
            rhs = float(np.vdot(grad(u, z, **attrs), v))  # <J^T u, v>
            scale = float(np.linalg.norm(u) * np.linalg.norm(v)) + abs(lhs) + abs(rhs)
            assert abs(lhs - rhs) <= 1e-7 * scale, (lhs, rhs, attrs)

    check()


# -- softmax families ------------------------------------------------------------------------


@pytest.mark.parametrize("log", [False, True])
def test_softmax_families_on_rank3_every_axis(log: bool) -> None:
    rng = np.random.default_rng(3)
    shape = (2, 3, 4)
    dy = rng.standard_normal(shape)
    x = rng.standard_normal(shape)
    pre13, v13 = (log_softmax_grad, log_softmax_grad_13) if log else (softmax_grad, softmax_grad_13)
    for axis in range(-3, 3):
        ax = axis % 3
        # each family against its own semantics, on its own forward output
        y_flat = _flat_softmax(x, axis, log)
        y_one = log_softmax(x, axis=axis) if log else softmax(x, axis=axis)
        red = shape[:ax] + (1,) * (3 - ax)
        n_rows = math.prod(shape[:ax])
        if log:
            want_flat = dy - np.exp(y_flat) * dy.reshape(n_rows, -1).sum(axis=1).reshape(red)
            want_one = dy - np.exp(y_one) * dy.sum(axis=ax, keepdims=True)
        else:
            want_flat = y_flat * (dy - (y_flat * dy).reshape(n_rows, -1).sum(axis=1).reshape(red))
            want_one = y_one * (dy - (y_one * dy).sum(axis=ax, keepdims=True))
        np.testing.assert_allclose(pre13(dy, y_flat, axis=axis), want_flat, rtol=1e-13, atol=1e-14)
        np.testing.assert_allclose(v13(dy, y_one, axis=axis), want_one, rtol=1e-13, atol=1e-14)
        # the two families on the same (dY, Y): equal iff axis is the last one
        a, b = pre13(dy, y_one, axis=axis), v13(dy, y_one, axis=axis)
        if ax == 2:
            np.testing.assert_array_equal(a, b)
            np.testing.assert_array_equal(y_flat, _flat_softmax(x, -1, log))
        else:
            assert np.max(np.abs(a - b)) > 1e-3, axis


def test_softmax_forward_is_stable_and_matches_reference() -> None:
    x = np.array([[1000.0, 999.0, -1000.0], [-1e4, -1e4, -1e4], [0.0, 1.0, 2.0]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with _strict():
            for dtype in (np.float32, np.float64):
                xs = x.astype(dtype)
                for axis in (-1, 0, 1):
                    y = softmax(xs, axis=axis)
                    ly = log_softmax(xs, axis=axis)
                    assert y.dtype == dtype and ly.dtype == dtype
                    z = x - x.max(axis=axis, keepdims=True)
                    ref_log = z - np.log(np.exp(z).sum(axis=axis, keepdims=True))
                    tol = 1e-6 if dtype == np.float32 else 1e-14
                    np.testing.assert_allclose(ly, ref_log, rtol=tol, atol=tol)
                    np.testing.assert_allclose(y, np.exp(ref_log), rtol=tol, atol=tol)


@pytest.mark.parametrize("fn", [softmax_grad, softmax_grad_13, log_softmax_grad,
                                log_softmax_grad_13])
def test_softmax_grad_axis_out_of_range(fn: Callable[..., np.ndarray]) -> None:
    a = np.ones((2, 3))
    for axis in (2, -3, 7):
        with pytest.raises(ValueError, match="axis"):
            fn(a, a, axis=axis)
    for f in (softmax, log_softmax):
        with pytest.raises(ValueError, match="axis"):
            f(a, axis=2)


# -- dtypes ------------------------------------------------------------------------------------


def _call(name: str, dy: np.ndarray, x: np.ndarray, **attrs: Any) -> np.ndarray:
    """Call op ``name`` the way a graph would: gradient ops reading Y get the forward output."""
    fn = KERNELS[name].fn
    if name in FORWARD_REF or name in ("Softmax", "LogSoftmax"):
        return fn(x, **attrs)
    if name in GRAD_REF_Y:
        fwd = GRAD_REF_Y[name][0]
        return fn(dy, KERNELS[fwd].fn(x, **attrs), **attrs)
    if name in ("SoftmaxGrad", "SoftmaxGrad_13", "LogSoftmaxGrad", "LogSoftmaxGrad_13"):
        y = (log_softmax if "Log" in name else softmax)(x, axis=-1)
        return fn(dy, y, **attrs)
    return fn(dy, x, **attrs)


@pytest.mark.parametrize("name", ALL_OPS)
def test_float32_agrees_with_float64(name: str) -> None:
    rng = np.random.default_rng(11)
    x64 = np.concatenate([rng.standard_normal(3000) * 3, np.array(EDGE), rng.uniform(-20, 20, 500)])
    x64 = x64.astype(np.float32).astype(np.float64)  # same inputs in both precisions
    dy64 = rng.standard_normal(x64.shape).astype(np.float32).astype(np.float64)
    x64, dy64 = x64.reshape(-1, 7), dy64.reshape(-1, 7)
    attrs = {"alpha": ALPHA_DEFAULTS[name]} if name in ALPHA_DEFAULTS else {}
    if "Softmax" in name:
        last = name.endswith("13") or name in ("Softmax", "LogSoftmax")
        attrs = {"axis": -1} if last else {"axis": 1}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with _strict():
            r64 = _call(name, dy64, x64, **attrs)
            r32 = _call(name, dy64.astype(np.float32), x64.astype(np.float32), **attrs)
    assert r64.dtype == np.float64 and r32.dtype == np.float32
    # float32 precision: a few eps of the result, of |dY| (the scale of every term the
    # formulas add) and, for forward ops, of |x|
    scale = np.abs(r64) + np.abs(dy64) + (np.abs(x64) if name in FORWARD_REF or "Softmax" == name
                                          or "LogSoftmax" == name else 0)
    err = np.abs(r32.astype(np.float64) - r64)
    assert np.all(err <= 8 * EPS32 * scale + 1e-30), float(np.max(err / (scale + 1e-300)) / EPS32)


# -- in place -----------------------------------------------------------------------------------

def _operands(name: str, shape: tuple[int, ...], dtype: type,
              seed: int = 0) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape) * 3).astype(dtype)
    if name in UNARY:
        return (x,)
    dy = rng.standard_normal(shape).astype(dtype)
    if name in GRAD_REF_Y:
        return dy, KERNELS[GRAD_REF_Y[name][0]].fn(x)
    if "Softmax" in name:
        return dy, (log_softmax if "Log" in name else softmax)(x, axis=1 % len(shape))
    return dy, x


@pytest.mark.parametrize("shape", [(3, 5, 7), (40, 250, 41)])  # one block / many blocks, split
@pytest.mark.parametrize("name", BINARY + UNARY)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])  # Float32: the compiled kernels too
def test_out_may_be_an_operand(name: str, shape: tuple[int, ...], dtype: type) -> None:
    ops = _operands(name, shape, dtype)
    attrs: dict[str, Any] = {"axis": 1} if "Softmax" in name else {}
    fn = KERNELS[name].fn
    want = fn(*ops, **attrs)
    for k in range(len(ops)):
        buf = [a.copy() for a in ops]
        got = fn(*buf, out=buf[k], **attrs)
        assert got is buf[k]
        np.testing.assert_array_equal(got, want)
    sep = np.empty_like(want)
    assert fn(*ops, out=sep, **attrs) is sep
    np.testing.assert_array_equal(sep, want)


def test_empty_and_noncontiguous_operands() -> None:
    e = np.zeros((0, 3))
    assert relu_grad(e, e).shape == (0, 3)
    assert softmax_grad_13(e, e, axis=0).shape == (0, 3)
    x = np.arange(24.0).reshape(4, 6)[:, ::2] - 5
    np.testing.assert_array_equal(relu_grad(np.ones_like(x), x), (x > 0).astype(float))
    np.testing.assert_allclose(softmax(x.T, axis=0), softmax(np.ascontiguousarray(x.T), axis=0))
    # a strided out still receives the result
    big = np.zeros((4, 6))
    assert relu_grad(np.ones_like(x), x, out=big[:, ::2]) is not None
    np.testing.assert_array_equal(big[:, ::2], (x > 0).astype(float))
    dy, y = np.cos(x), softmax(x, axis=1)
    softmax_grad_13(dy, y, axis=1, out=big[:, 1::2])
    np.testing.assert_array_equal(big[:, 1::2], softmax_grad_13(dy, y, axis=1))


# -- thread-count determinism --------------------------------------------------------------------


DET_CASES: list[tuple[str, tuple[int, ...], dict[str, Any]]] = (
    [(n, (1000, 1500), {}) for n in BINARY + UNARY if "Softmax" not in n]
    + [(n, (300, 40, 125), {"axis": ax}) for n in ("SoftmaxGrad_13", "LogSoftmaxGrad_13", "Softmax",
                                                     "LogSoftmax") for ax in (0, 1, 2)]
    # (pre-13 with axis 0 is a single row: nothing to split)
    + [(n, (300, 40, 125), {"axis": ax}) for n in ("SoftmaxGrad", "LogSoftmaxGrad")
       for ax in (1, 2)]
    + [("SoftmaxGrad_13", (3, 400000), {"axis": 0}), ("Softmax", (400000, 4), {"axis": 0})]
)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_results_identical_for_1_2_4_threads(dtype: type, monkeypatch: pytest.MonkeyPatch) -> None:
    from gradir.backends.cpu.kernels import parallel

    chunks: list[tuple[int, int]] = []
    real = parallel.parallel_rows

    def spy(n_rows: int, bytes_per_row: int, body: Callable[[int, int], None]) -> None:
        lock = threading.Lock()

        def rec(a: int, b: int) -> None:
            with lock:
                chunks.append((a, b))
            body(a, b)

        real(n_rows, bytes_per_row, rec)

    monkeypatch.setattr(act_blocks, "parallel_rows", spy)
    old = get_threads()
    try:
        for name, shape, attrs in DET_CASES:
            ops = _operands(name, shape, dtype, seed=5)
            fn = KERNELS[name].fn
            results = []
            for threads in (1, 2, 4):
                set_threads(threads)
                chunks.clear()
                results.append(fn(*ops, **attrs))
                if threads > 1:
                    assert len(chunks) > 1, (name, shape, "array too small to be split")
            assert results[0].dtype == dtype
            for r in results[1:]:
                np.testing.assert_array_equal(r, results[0], err_msg=f"{name} {shape} {attrs}")
    finally:
        set_threads(old)



@pytest.mark.parametrize("name", ["LeakyRelu", "LeakyReluGrad", "QuickGelu", "QuickGeluGrad"])
@pytest.mark.parametrize("alpha", [float("nan"), float("inf"), -float("inf"), 1e39, -2.4e38])
def test_non_finite_alpha_is_rejected(name: str, alpha: float) -> None:
    x = np.ones((2, 2), np.float32)
    with pytest.raises(ValueError, match="alpha must be a finite number with \\|alpha\\| <= 1e\\+38"):
        _call(name, x, x, alpha=alpha)


@pytest.mark.parametrize("name", BINARY + UNARY)
@pytest.mark.parametrize("shift", [1, -1])
def test_out_partly_overlapping_an_operand_is_still_right(name: str, shift: int) -> None:
    """Outside the runtime's calling convention, but never wrong: ``out`` a shifted view of
    an operand's memory gives what a separate ``out`` gives (NumPy's ``out=`` semantics)."""
    for n in (5, 3000, 200_000):
        shape = (n // 5, 5)
        ops = _operands(name, shape, np.float32, seed=n)
        attrs: dict[str, Any] = {"axis": 1} if "Softmax" in name else {}
        fn = KERNELS[name].fn
        want = fn(*ops, **attrs)
        buf = np.empty(n + 1, np.float32)
        lo = 0 if shift == 1 else 1
        buf[lo: lo + n] = ops[-1].reshape(-1)
        last = buf[lo: lo + n].reshape(shape)
        out = buf[1 - lo: 1 - lo + n].reshape(shape)
        got = fn(*ops[:-1], last, out=out, **attrs)
        assert got is out
        np.testing.assert_array_equal(got, want, err_msg=f"{name} n={n}")
